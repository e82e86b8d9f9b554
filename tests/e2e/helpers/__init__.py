"""What the end-to-end tests share besides fixtures (those are in conftest.py,
which defines nothing else). Import from the module by name:

  paths       REPO: the repository
  host        free_port, cgroup2_root, thp_enabled: facts of this machine
  agent       Agent (a running slowpath), Scrape (its /metrics), run_agent,
              error_line, doctor_report
  workload    run_workload: the C workloads, with `strace -c` when asked
  oracles     strace_counts, vmstat, populated_zones, TimerOracle (bpftrace):
              the counts the agent's are compared with
  costs       kernel_totals, kernel_stats_on, on_cpu_seconds, untraced_syscall_ns,
              top_cpu_share, untraced_figures:
              the kernel's figures of what the agent's programs and a
              process cost
  bpf         bpf_fd_ids, our_program_ids, wait_unloaded: BPF objects in the
              kernel
  tools       tools_cache, built, base_image, cargo_tools: what
              scripts/setup.sh --test builds (install-tools.sh's tools,
              tests/workloads/bin/, the base images, cargo-deb and
              cargo-cyclonedx), checked ready or the test fails naming it
  tiers       TIERS, tier_of, tier_problems: the suite's tiers (the `tier` marker)
  prometheus  prometheus_release, prometheus_server, prom_get, prom_query
  signals     declarations, by_name, every_hook: the signals as the agent
              declares them (`slowpath signals`)
  signal_facts  a package, one module per declared signal: its workloads
              and what they leave, read by the tests that cover every
              signal (declared() checks the modules against the
              declarations)
"""
