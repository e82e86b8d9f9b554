"""Bad input gets one clear line and a non-zero exit with nothing attached;
a probe the kernel refuses degrades the agent instead of killing it;
SIGTERM detaches everything and exits 0 within a second."""

import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from helpers.agent import Agent, Scrape, error_line, run_agent
from helpers.bpf import our_program_ids, wait_unloaded
from helpers.host import free_port
from helpers.paths import REPO
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("fast")

@pytest.fixture(autouse=True)
def nothing_left_attached():
    before = our_program_ids()
    yield
    assert wait_unloaded(our_program_ids() - before), "a test left BPF programs loaded"


# A wrong command line exits 2 (as clap and getopt tools do); a start-up
# failure (port in use, privileges, BTF, the kernel refusing) exits 1.
USAGE_ERROR = 2


def test_unknown_flag(agent_bin):
    result = run_agent(agent_bin, "--no-such-flag")
    assert result.returncode == USAGE_ERROR
    assert "unexpected argument '--no-such-flag'" in result.stderr


@pytest.mark.parametrize("address", ["9891", "127.0.0.1:99999", "localhost:http"])
def test_bad_listen_address(agent_bin, address):
    result = subprocess.run([str(agent_bin), f"--web.listen-address={address}"], capture_output=True, text=True)
    assert result.returncode == USAGE_ERROR
    assert error_line(result) == (f'slowpath: error: bad --web.listen-address "{address}": '
                                  "expected [HOST]:PORT, e.g. :9891 or 127.0.0.1:9891")


@pytest.mark.parametrize("args,line", [
    (["--bpf.ringbuf-bytes=5000"],
     'bad --bpf.ringbuf-bytes "5000": expected a power of two of at least 4096 bytes, e.g. 1048576'),
    (["--canary.interval=50ms"], 'bad --canary.interval "50ms": too short: expected at least 100ms'),
    (["--findings.window=soon"],
     'bad --findings.window "soon": expected a duration, e.g. 15s, 500ms, 1m (expected number at 0)'),
    (["--metrics.max-series=0"], 'bad --metrics.max-series "0": expected a whole number from 1 to 10000000'),
    (["--log.level=loud"], 'bad --log.level "loud": expected one of error, warn, info, debug, trace'),
    (["doctor", "--duration=forever"],
     'bad --duration "forever": expected a duration, e.g. 15s, 500ms, 1m (expected number at 0)'),
    (["top", "--delay=0.01"], 'bad --delay "0.01": expected seconds between 0.1 and 86400'),
    (["top", "-d", "soon"],
     'bad --delay "soon": expected a duration, e.g. 15s, 500ms, 1m (expected number at 0)'),
    (["--bpf.stats-interval=1s", "--bpf.stats-window=1s"],
     "--bpf.stats-window (1s) must be shorter than --bpf.stats-interval (1s): "
     "shorten the window or lengthen the interval"),
])
def test_a_bad_value_exits_2_with_one_line_naming_the_flag_and_the_fix(agent_bin, args, line):
    result = run_agent(agent_bin, *args)
    assert result.returncode == USAGE_ERROR
    assert result.stderr == f"slowpath: error: {line}\n"


def test_a_bad_value_from_the_environment_exits_2_too(agent_bin):
    result = subprocess.run([str(agent_bin)], capture_output=True, text=True, timeout=20,
                            env={**os.environ, "SLOWPATH_BPF_RINGBUF_BYTES": "1000"})
    assert result.returncode == USAGE_ERROR
    assert error_line(result).startswith('slowpath: error: bad --bpf.ringbuf-bytes "1000": expected a power')


@pytest.mark.parametrize("value", ["0", "-3", "fast", "inf"])
def test_bad_timer_loop_threshold(agent_bin, value):
    for cmd in ([], ["doctor", "--duration=1s"]):
        result = subprocess.run([str(agent_bin), *cmd, f"--timer.loop-threshold={value}"],
                                capture_output=True, text=True, timeout=20)
        assert result.returncode == USAGE_ERROR
        assert error_line(result) == (
            f'slowpath: error: bad --timer.loop-threshold "{value}": expected a positive number of '
            "wakeups per second, e.g. 200")


def test_port_in_use(agent_bin):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(agent_bin), f"--web.listen-address=127.0.0.1:{port}"], capture_output=True, text=True
        )
    assert result.returncode == 1
    assert error_line(result) == (
        f"slowpath: error: cannot listen on 127.0.0.1:{port}: address already in use: "
        "stop the process using it or pass another --web.listen-address"
    )


def test_not_root_names_both_capabilities(agent_bin):
    result = run_agent(
        agent_bin, prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    )
    assert result.returncode == 1
    assert error_line(result).startswith("slowpath: error: missing capability CAP_BPF and CAP_PERFMON:")


def test_cap_bpf_alone_names_cap_perfmon(agent_bin):
    result = run_agent(
        agent_bin,
        prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                "--inh-caps=-all,+bpf", "--ambient-caps=+bpf"],
    )
    assert result.returncode == 1
    assert error_line(result).startswith("slowpath: error: missing capability CAP_PERFMON:")


def test_kernel_without_btf(agent_bin):
    # A private mount namespace where /sys/kernel/btf is empty: the host is untouched.
    port = free_port()
    script = f"mount -t tmpfs none /sys/kernel/btf && exec {agent_bin} --web.listen-address=127.0.0.1:{port}"
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=20)
    assert result.returncode == 1
    assert error_line(result).startswith(
        "slowpath: error: kernel BTF not found at /sys/kernel/btf/vmlinux: "
        "this kernel does not expose its BTF (built without CONFIG_DEBUG_INFO_BTF=y); "
        "pass a BTF file for this exact kernel with --bpf.btf-path FILE: "
        "cut it out of the kernel image with scripts/extract-btf.py"
    )


def answers(agent, path):
    try:
        return agent.get(path, timeout=1)[0] == 200
    except OSError:
        return False


def test_kernel_without_btf_runs_raw_tp_from_a_btf_file(agent_bin, workload_bin, tmp_path):
    """The same hidden BTF, with a copy of the kernel's BTF passed by flag:
    every hook attaches as raw_tp and counts exactly."""
    btf = tmp_path / "vmlinux.btf"
    shutil.copyfile("/sys/kernel/btf/vmlinux", btf)
    port = free_port()
    script = (f"mount -t tmpfs none /sys/kernel/btf && exec {agent_bin} --web.listen-address=127.0.0.1:{port} "
              f"--metrics.pid-label --bpf.btf-path={btf}")
    agent = Agent.__new__(Agent)  # the HTTP helpers, for an agent started in its own namespace
    agent.url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            stderr=open(tmp_path / "agent.log", "w"))
    try:
        deadline = time.monotonic() + 30
        while not answers(agent, "/readyz"):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
            time.sleep(0.1)
        scrape = Scrape(agent.get("/metrics")[1])
        attached = {(s.labels["attach_type"], s.value) for s in scrape.select("slowpath_probe_attached")}
        assert attached == {("raw_tp", 1)}, (tmp_path / "agent.log").read_text()
        pid = run_workload(workload_bin, "clock-raw", 1234)
        clock = Scrape(agent.get("/metrics")[1]).value("slowpath_clock_syscalls_total", pid=pid, comm="sp-workload")
        assert clock == 1234
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


def test_btf_path_that_does_not_exist(agent_bin):
    result = run_agent(agent_bin, "--bpf.btf-path=/nonexistent/vmlinux")
    assert result.returncode == 1
    assert "BTF file /nonexistent/vmlinux does not exist" in error_line(result)


@pytest.mark.tier("full")  # the fault-injection build: the full set-up makes it
def test_refused_probe_degrades_and_the_rest_keep_counting(faults_bin, workload_bin, tmp_path):
    agent = Agent(faults_bin, ["--metrics.pid-label", "--bpf.test-break-probe=mm_compaction_end"],
                  tmp_path / "agent.log")
    try:
        status, body = agent.get("/readyz")
        assert status == 200 and "not attached: mm_compaction_end (raw_tp)" in body
        scrape = agent.scrape()
        attached = {s.labels["probe"]: s.value for s in scrape.select("slowpath_probe_attached")}
        assert attached.pop("mm_compaction_end") == 0
        assert set(attached.values()) == {1}
        pid = run_workload(workload_bin, "clock-raw", 1000)
        assert agent.scrape().value("slowpath_clock_syscalls_total", pid=pid) == 1000
        assert "probe not attached" in agent.log_text() and "mm_compaction_end" in agent.log_text()
    finally:
        assert agent.stop() == 0


@pytest.mark.tier("full")  # the fault-injection build: the full set-up makes it
def test_a_hook_the_verifier_refuses_is_left_out_and_the_rest_load(faults_bin, workload_bin, tmp_path):
    """The verifier refuses both mm_page_alloc programs (a helper call no
    kernel has, as 5.10 refuses bpf_get_current_task_btf()): that hook steps
    down to raw_tp, is then left out with the verifier's reason, and every
    other hook loads as planned and counts."""
    agent = Agent(faults_bin, ["--metrics.pid-label", "--bpf.attach-type=tp-btf",
                               "--bpf.test-refuse-probe=mm_page_alloc"], tmp_path / "agent.log")
    try:
        status, body = agent.get("/readyz")
        assert status == 200 and "not attached: mm_page_alloc (raw_tp)" in body
        scrape = agent.scrape()
        attached = {s.labels["probe"]: (s.labels["attach_type"], s.value)
                    for s in scrape.select("slowpath_probe_attached")}
        assert attached.pop("mm_page_alloc") == ("raw_tp", 0)
        assert set(attached.values()) == {("tp_btf", 1)}
        pid = run_workload(workload_bin, "context", 1000)
        assert agent.scrape().value("slowpath_rt_sigprocmask_calls_total", pid=pid, comm="sp-workload") == 2000
        log = agent.log_text()
        assert "kernel refused every program of this hook" in log and "invalid func unknown#32767" in log
    finally:
        assert agent.stop() == 0


def refuse_bpf_attach():
    """In the child before exec: a seccomp filter that fails the bpf()
    commands that attach (BPF_RAW_TRACEPOINT_OPEN, BPF_LINK_CREATE) with
    EPERM, as a strict container profile may, and lets every other call
    through: the programs load and no hook can attach."""
    bpf_nr = {"x86_64": 321, "aarch64": 280}[os.uname().machine]
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[os.uname().machine]
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, eperm = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO|EPERM
    program = [  # (code, jump if true, jump if false, k) over struct seccomp_data
        (ld, 0, 0, 4), (jeq, 0, 5, arch),  # arch
        (ld, 0, 0, 0), (jeq, 0, 3, bpf_nr),  # nr
        (ld, 0, 0, 16), (jeq, 2, 0, 17), (jeq, 1, 0, 28),  # args[0]: the bpf() command
        (ret, 0, 0, allow), (ret, 0, 0, eperm),
    ]
    filters = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buf = ctypes.create_string_buffer(filters)
    fprog = struct.pack("@HP", len(program), ctypes.addressof(buf))  # struct sock_fprog
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0):
        raise OSError(ctypes.get_errno(), "prctl")


def test_no_hook_attached_names_each_reason_and_the_fix(agent_bin):
    """Every attach fails with EPERM (the programs load): exit 1, one line
    with each hook's reason and the fix for EPERM, nothing left loaded."""
    result = subprocess.run([str(agent_bin), f"--web.listen-address=127.0.0.1:{free_port()}"],
                            capture_output=True, text=True, timeout=120, preexec_fn=refuse_bpf_attach)
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    hooks = line.count(": failed to attach BPF program: Operation not permitted (os error 1)")
    assert hooks >= 3 and hooks == line.count(": failed to attach"), line  # every hook, with its errno
    assert line.startswith("slowpath: error: no BPF program could be attached (sys_enter: "
                           "failed to attach BPF program: Operation not permitted (os error 1); "), line
    assert line.endswith("): EPERM/EACCES: the kernel refuses to attach: check CAP_PERFMON (or CAP_SYS_ADMIN), "
                         "then a seccomp profile (run the container with a seccomp profile that allows bpf(2), "
                         "or unconfined (Helm chart: --set seccompProfile.type=Unconfined; a pod: "
                         "securityContext.seccompProfile.type: Unconfined; podman/docker: "
                         "--security-opt seccomp=unconfined)) or an LSM policy (SELinux, AppArmor)"), line


@pytest.mark.parametrize("flag", ["--bpf.test-break-probe", "--bpf.test-refuse-probe"])
def test_the_product_has_no_fault_injection_flags(agent_bin, flag):
    """The test-only flags exist only in the build with the cargo feature
    fault-injection (faults_bin)."""
    result = run_agent(agent_bin, f"{flag}=mm_page_alloc")
    assert result.returncode == 2
    assert f"unexpected argument '{flag}'" in result.stderr


@pytest.mark.tier("full")  # the fault-injection build: the full set-up makes it
def test_the_product_embeds_no_fault_injection_bpf_code(agent_bin, faults_bin):
    """The switch of the test-only BPF code (`test_refuse_page_alloc`, under
    SP_FAULT_INJECTION) is not in the product's embedded object."""
    assert b"test_refuse_page_alloc" in faults_bin.read_bytes()  # the search can find it
    assert b"test_refuse_page_alloc" not in agent_bin.read_bytes()


def test_sigterm_detaches_and_exits_zero_within_a_second(agent_bin, tmp_path):
    before = our_program_ids()
    agent = Agent(agent_bin, [], tmp_path / "agent.log")
    try:
        mine = our_program_ids() - before
        assert len(mine) == 7  # one twin per probe named in OUR_PROGRAMS, the other never loaded
        start = time.monotonic()
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.proc.wait(timeout=5) == 0
        assert time.monotonic() - start < 1.0
    finally:
        agent.stop()  # also when an assertion failed: never leave an agent running
    assert wait_unloaded(mine)


def test_sigint_too(agent_bin, tmp_path):
    agent = Agent(agent_bin, [], tmp_path / "agent.log")
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(timeout=5) == 0
    agent.stop()


def test_full_process_table_is_counted_and_logged(agent_bin, workload_bin, tmp_path):
    agent = Agent(agent_bin, ["--bpf.max-processes=64"], tmp_path / "agent.log")
    try:
        # 100 processes alive at once, each sleeping once: more than 64 entries.
        sleepers = [subprocess.Popen([str(workload_bin), "sleep", "1", "300000"], stdout=subprocess.DEVNULL)
                    for _ in range(100)]
        for p in sleepers:
            assert p.wait(timeout=30) == 0
        deadline = time.monotonic() + 5
        while "events lost" not in agent.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        lost = agent.scrape().value("slowpath_lost_events_total", reason="process_table_full")
        assert lost > 0
        assert "process_table_full" in agent.log_text()
    finally:
        assert agent.stop() == 0


def test_tiny_ring_buffer_still_loses_no_exit(agent_bin, workload_bin, tmp_path):
    """Exit records that do not fit the ring buffer are flagged in the table
    and folded by the agent: the sum stays exact."""
    agent = Agent(agent_bin, ["--bpf.ringbuf-bytes=4096"], tmp_path / "agent.log")
    try:
        before = agent.scrape().value("slowpath_clock_syscalls_total", comm="sp-churn")
        run_workload(workload_bin, "churn", 300, 100)
        after = agent.scrape().value("slowpath_clock_syscalls_total", comm="sp-churn")
        assert after - before == 300 * 100
    finally:
        assert agent.stop() == 0


LEAST = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_least_privilege_cap_bpf_and_cap_perfmon_suffice(agent_bin, workload_bin, tmp_path):
    """As nobody with only CAP_BPF and CAP_PERFMON (what the unit and chart grant)."""
    caps = LEAST + ["--inh-caps=-all,+bpf,+perfmon", "--ambient-caps=+bpf,+perfmon", "--bounding-set=-all,+bpf,+perfmon"]
    agent = Agent(agent_bin, ["--metrics.pid-label"], tmp_path / "agent.log", prefix=caps)
    try:
        scrape = agent.scrape()
        assert {s.value for s in scrape.select("slowpath_probe_attached")} == {1}
        pid = run_workload(workload_bin, "context", 1000)
        assert agent.scrape().value("slowpath_rt_sigprocmask_calls_total", pid=pid, comm="sp-workload") == 2000
    finally:
        assert agent.stop() == 0


def test_unreachable_kubernetes_api_keeps_counting(agent_bin, workload_bin, tmp_path):
    closed = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{closed}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    agent = Agent(agent_bin, ["--metrics.pid-label", "--kubernetes.enabled", f"--kubeconfig={kubeconfig}",
                              "--kubernetes.node-name=node-1"], tmp_path / "agent.log")
    try:
        pid = run_workload(workload_bin, "clock-raw", 500)
        scrape = agent.scrape()
        assert scrape.value("slowpath_kubernetes_up") == 0
        series = scrape.select("slowpath_clock_syscalls_total", pid=pid, comm="sp-workload")
        assert [s.value for s in series] == [500]
        assert series[0].labels["pod"] == "" and series[0].labels["namespace"] == ""
        time.sleep(2)  # the watch retries with backoff: logged once, not per retry
        assert agent.log_text().count("pod watch failed") == 1
    finally:
        assert agent.stop() == 0


def test_bad_kubeconfig_fails_before_attaching(agent_bin, tmp_path):
    result = run_agent(agent_bin, "--kubernetes.enabled", f"--kubeconfig={tmp_path / 'missing'}")
    assert result.returncode == 1
    assert error_line(result).startswith(f"slowpath: error: reading kubeconfig {tmp_path / 'missing'}")


def test_unreadable_sysfs_is_a_warning_at_start_and_a_rising_scrape_error(agent_bin, tmp_path):
    """A wrong --path.sysfs (or a container without the host's /sys): one
    warning per settings file at start, naming the flag, and
    slowpath_scrape_errors_total{source="sysfs"} rising with every scrape;
    the per-process signals still work."""
    agent = Agent(agent_bin, ["--path.sysfs=/nonexistent"], tmp_path / "agent.log")
    try:
        first = agent.scrape()
        second = agent.scrape()
        errors = lambda s: s.value("slowpath_scrape_errors_total", source="sysfs")
        assert 1 <= errors(first) < errors(second), (errors(first), errors(second))
        assert second.value("slowpath_scrape_errors_total", source="bpf") == 0
        assert second.select("slowpath_clocksource_current_info") == []
        assert second.select("slowpath_thp_settings_info") == []
        assert {s.value for s in second.select("slowpath_probe_attached")} == {1}
        warnings = [line for line in agent.log_text().splitlines()
                    if "cannot read this node setting" in line]
        assert len(warnings) == 4 and all("--path.sysfs" in w and "/nonexistent/" in w for w in warnings), warnings
    finally:
        assert agent.stop() == 0
    healthy = Agent(agent_bin, [], tmp_path / "healthy.log")
    try:
        assert healthy.scrape().value("slowpath_scrape_errors_total", source="sysfs") == 0
        assert "cannot read this node setting" not in healthy.log_text()
    finally:
        assert healthy.stop() == 0


@pytest.mark.parametrize("script", ["run.sh", "test.sh"])
def test_quick_start_scripts_say_they_need_root_where_there_is_no_sudo(script):
    """Run as root they go on (CI runs scripts/test.sh so); as another user on
    a host without sudo they stop at once with one line, before installing.
    (A copy of the scripts in a directory uid 65534 can read, and a PATH with
    only what they need before that check.)"""
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        (root / "scripts").mkdir()
        (root / "bin").mkdir()
        for name in [script, "as-root.sh"]:
            shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
        for tool in ["bash", "basename", "dirname"]:
            (root / "bin" / tool).symlink_to(shutil.which(tool))
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 "env", f"PATH={root / 'bin'}", "bash", str(root / "scripts" / script)],
                                capture_output=True, text=True, timeout=20)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (f"{script}: needs root (it installs packages and loads BPF programs): "
                                     "run it as root")


def test_a_skipped_test_fails_the_run_that_test_sh_makes(tmp_path):
    """scripts/test.sh loads forbid_skips: a skip must not pass as green."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\ndef test_skips():\n    pytest.skip('no tool')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests" / "e2e")}
    env.pop("SLOWPATH_ALLOW_SKIPS", None)
    cmd = ["/usr/bin/python3", "-m", "pytest", "-p", "no:cacheprovider", "-p", "forbid_skips", "-q",
           str(tmp_path / "test_skips.py")]
    failed = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert failed.returncode == 1, failed.stdout
    assert "SKIPPED" in failed.stdout and "no tool" in failed.stdout, failed.stdout
    allowed = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path,
                             env={**env, "SLOWPATH_ALLOW_SKIPS": "1"})
    assert allowed.returncode == 0, allowed.stdout
    assert "-p forbid_skips" in (REPO / "scripts" / "test.sh").read_text()
