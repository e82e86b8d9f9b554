"""Allocator purge storms, exact: `slowpath_memory_purge_calls_total` and
`slowpath_memory_purge_bytes_total` of a process, by syscall and advice,
must equal what strace saw the same process call in the same run
(`strace -f -e trace=madvise,munmap`: every madvise by its advice and length,
every munmap by its length). Real allocators make the calls: Debian's
jemalloc 5.3 (libjemalloc2) with dirty_decay_ms:0 LD_PRELOADed under a
Python loop, glibc's malloc_trim and its mmap threshold (the C workload),
and a Go program calling debug.FreeOSMemory in a loop. Runs once per attach
type (tp_btf and raw_tp).

On x86_64 the remote TLB flushes each process asks for,
`slowpath_tlb_shootdowns_total`, must equal bpftrace's count on
tlb:tlb_flush with reason 4 (TLB_REMOTE_SEND_IPI) in the same run: the C
workload purging beside its own spinning thread on another CPU, and the Go
program (its GC workers run on every CPU); neither counts the flush of an exiting process's teardown
(PF_EXITING), which comes after its exit record.

Then the diagnosis, as users run the agent (no pid label, findings on a
short window): the jemalloc storm gets the `purge_storm` finding naming
jemalloc and its setting, the bytes it gives back and its CPU, the alert in
a real Prometheus within 120 s, and a row in `slowpath top`; the same loop on
glibc's malloc purges nothing and is not named."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from helpers.oracles import wait_ready
from helpers.tools import built
from test_findings import check_storm, stack, started, top_last_frame  # noqa: F401

pytestmark = pytest.mark.tier("fast")

CALLS = "slowpath_memory_purge_calls_total"
BYTES = "slowpath_memory_purge_bytes_total"
# the classes of the kernel's advice values (bpf/signals/purge.bpf.h)
ADVICE = {"MADV_DONTNEED": "dontneed", "MADV_FREE": "free", "MADV_REMOVE": "other",
          "MADV_PAGEOUT": "other", "MADV_DONTNEED_LOCKED": "other"}
# Debian's interpreter, by path (a shim on PATH would fork others under strace)
PYTHON = "/usr/bin/python3"
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
# eight 256 KiB buffers allocated and freed per loop, as the issue measured
LOOP = """
import os, sys, time
print(f"pid={os.getpid()}", flush=True)
end = time.monotonic() + float(sys.argv[1])
loops = 0
while time.monotonic() < end:
    buffers = [bytearray(256 * 1024) for _ in range(8)]
    del buffers
    loops += 1
print(f"loops={loops}", flush=True)
"""
SHOOTDOWNS = "slowpath_tlb_shootdowns_total"
SHOOTDOWN_COUNTER = """
tracepoint:tlb:tlb_flush /args->reason == 4 && !(curtask->flags & 4)/ { @shootdowns[pid] = count(); }
BEGIN { printf("ready\\n"); }
"""
CALL = re.compile(r"^\d+ +(madvise|munmap)\(0x[0-9a-f]+, (\d+)(?:, (MADV_\w+))?")


def strace_counts(path):
    """{(syscall, advice): [calls, bytes]} of the purges in strace's -f -o
    file (a call interrupted by another thread's is one line with its
    arguments and a `resumed` line without: only the first matches)."""
    counts = {}
    for line in path.read_text().splitlines():
        m = CALL.match(line)
        if not m:
            continue
        syscall, length, advice = m.groups()
        key = ("munmap", "none") if syscall == "munmap" else ("madvise", ADVICE.get(advice))
        if key[1] is None:
            continue  # advice that gives nothing back
        c = counts.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += int(length)
    return counts


def agent_counts(agent, pid):
    scrape = agent.scrape()
    counts = {}
    for family, i in ((CALLS, 0), (BYTES, 1)):
        for s in scrape.select(family, pid=str(pid)):
            counts.setdefault((s.labels["syscall"], s.labels["advice"]), [0, 0])[i] += int(s.value)
    return counts


def under_strace(tmp_path, cmd, env=None):
    """Run `cmd` under strace; (its pid from its pid= line, strace's counts)."""
    out = tmp_path / "strace.out"
    run = subprocess.run(["strace", "-f", "-qq", "-e", "trace=madvise,munmap", "-o", str(out), *cmd],
                         capture_output=True, text=True, timeout=180, env=env, check=True)
    pid = int(re.search(r"pid=(\d+)", run.stdout).group(1))
    return pid, strace_counts(out), run.stdout


def assert_exact(agent, pid, oracle, least):
    """The agent's series equal strace's, kind by kind, and the kinds in
    `least` each hold at least that many calls (the storm is there)."""
    time.sleep(0.5)  # the exit reaches the agent
    counted = agent_counts(agent, pid)
    assert counted == oracle, (counted, oracle)
    for key, n in least.items():
        assert oracle.get(key, [0])[0] >= n, (key, oracle)


def test_jemalloc_with_no_decay_is_exact_against_strace(agent, tmp_path):
    env = dict(os.environ, LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:0,muzzy_decay_ms:0")
    pid, oracle, out = under_strace(tmp_path, [PYTHON, "-c", LOOP, "1"], env)
    assert_exact(agent, pid, oracle, {("madvise", "dontneed"): 1000})


@pytest.mark.parametrize("mode, least", [
    (["purge-trim", "200"], {("madvise", "dontneed"): 200}),
    (["purge-mmap", "500", str(64 << 20)], {("munmap", "none"): 500}),
])
def test_glibc_trim_and_mmap_threshold_are_exact_against_strace(agent, workload_bin, tmp_path, mode, least):
    pid, oracle, out = under_strace(tmp_path, [str(workload_bin), *mode])
    assert_exact(agent, pid, oracle, least)


def test_go_free_os_memory_is_exact_against_strace(agent, tmp_path):
    pid, oracle, out = under_strace(tmp_path, [str(built("go-freeosmemory")), "100"])
    assert "rounds=100" in out, out
    assert_exact(agent, pid, oracle, {("madvise", "dontneed"): 100})


def test_the_c_workload_counts_every_kind_and_not_willneed(agent, workload_bin):
    run = subprocess.run([str(workload_bin), "purge-raw", "3000"], capture_output=True, text=True,
                         timeout=60, check=True)
    pid = int(re.search(r"pid=(\d+)", run.stdout).group(1))
    time.sleep(0.5)
    counted = agent_counts(agent, pid)
    for advice in ("dontneed", "free", "other"):
        assert counted[("madvise", advice)] == [3000, 3000 * 65536], (advice, counted)
    # the loader's unmap of its cache, and the workload's 3,000 of 128 KiB
    calls, length = counted[("munmap", "none")]
    assert calls == 3001 and length - 3000 * 131072 == os.path.getsize("/etc/ld.so.cache"), counted


def test_shootdowns_match_bpftrace_from_the_first_counted_call(agent, workload_bin, tracefs):
    oracle = subprocess.Popen(["bpftrace", "-B", "line", "-e", SHOOTDOWN_COUNTER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(oracle)
        c = subprocess.run([str(workload_bin), "purge-threads", "20000"], capture_output=True, text=True,
                           timeout=60, check=True)
        go = subprocess.run([str(built("go-freeosmemory")), "200"], capture_output=True, text=True, timeout=60,
                            check=True)
    finally:
        oracle.send_signal(signal.SIGINT)
        out, _ = oracle.communicate(timeout=30)
    counted = {int(p): int(n) for p, n in re.findall(r"@shootdowns\[(\d+)\]: (\d+)", out)}
    time.sleep(0.5)  # the exits reach the agent
    scrape = agent.scrape()
    for run, least in ((c, 19_000), (go, 64)):
        pid = int(re.search(r"pid=(\d+)", run.stdout).group(1))
        assert counted.get(pid, 0) >= least, (counted.get(pid), run.stdout)
        # The agent counts from the process's first counted call on (a flush
        # before it would make its entry under a parent's comm, see
        # docs/troubleshooting.md), bpftrace from exec: once in a loaded CI
        # run (raw-tp) the Go program had 723 of bpftrace's 727, not seen
        # again in 40 loaded runs here. Never more than bpftrace, never 1 %
        # fewer.
        agent_count = scrape.value(SHOOTDOWNS, pid=str(pid))
        assert counted[pid] * 0.99 <= agent_count <= counted[pid], (run.args, agent_count, counted[pid])


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_jemalloc_storm_is_found_with_its_setting_and_shown_in_top(stack, started, agent_bin):
    began = time.monotonic()
    storm_env = dict(os.environ, LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:0,muzzy_decay_ms:0")
    _, pid = started([PYTHON, "-c", LOOP, "300"], env=storm_env)
    _, calm = started([PYTHON, "-c", LOOP, "300"])  # glibc: no purge at all
    took = check_storm(stack, pid, "purge_storm", "python3", "purge", "jemalloc_decay",
                       alert="SlowpathAllocatorPurgeStorm", started_at=began)
    print(f"jemalloc purge storm: finding with its known source in Prometheus {took:.1f} s after its start")
    assert took < 120, took
    agent, _ = stack
    page = json.loads(agent.get("/debug/findings")[1])
    finding = next(f for f in page["findings"] if f["id"] == "purge_storm")
    assert [p["pid"] for p in finding["processes"]] == [pid], finding["processes"]
    p = finding["processes"][0]
    assert "background_thread:true" in p["known_source"]["fix"], p["known_source"]
    detail = p["detail"]
    assert detail["bytes_given_back_per_second"] >= 1000 * 4096, detail
    assert detail["estimated_cpu_percent"] > 0, detail
    assert "tlb_shootdowns_per_second" in detail, detail
    assert "MiB/s" in finding["title"], finding["title"]
    last = top_last_frame(agent_bin, agent, "purge")
    storming = [r for r in last if r.get("comm") == "python3" and r["rates"].get("memory_purge", 0) > 1000]
    assert storming, last
    assert calm not in [r.get("pid") for r in storming]
