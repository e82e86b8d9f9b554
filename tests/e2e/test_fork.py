"""Forks of a large address space, exact: `slowpath_fork_copies_total` of a
process must equal the forks without CLONE_VM that strace saw it make in the
same run (`strace -f -T -e trace=clone,clone3,fork,vfork`: each call's flags
and time), and `slowpath_fork_copy_seconds_total` must be within 25 % of the
time strace measured in them. vfork, posix_spawn (CLONE_VM|CLONE_VFORK) and
threads copy nothing and count as no copying fork. Real programs fork:
Debian's Redis with a 1 GiB dataset running BGSAVE (also against INFO's
latest_fork_usec), CPython's os.fork() from a large heap and its subprocess
(vfork), the JVM's ProcessBuilder with launchMechanism FORK (copies) and
POSIX_SPAWN (none), and the C workload (fork, fork then exec, vfork, posix_spawn, a raw
clone3). Runs once per attach type (tp_btf and raw_tp).

Then the diagnosis, as users run the agent (no pid label, findings on a
short window): a large process that forks and execs repeatedly gets the
`large_forks` finding with its size, its time per fork, the spawn pattern
and its fix within 120 s, the alert in a real Prometheus, and a row in
`slowpath top`; a small process forking as often is not named."""

import json
import os
import re
import socket
import subprocess
import time

import pytest

from test_findings import check_storm, stack, started, top_last_frame  # noqa: F401

pytestmark = pytest.mark.tier("fast")

COPIES = "slowpath_fork_copies_total"
SECONDS = "slowpath_fork_copy_seconds_total"
EXECS = "slowpath_fork_execs_total"
MAPPED = "slowpath_fork_mapped_bytes_total"
# Debian's interpreter, by path (a shim on PATH would fork others under strace)
PYTHON = "/usr/bin/python3"
REDIS = "/usr/bin/redis-server"
CALL = re.compile(r"^(\d+) +(clone3?|v?fork)\((.*)")
RESUMED = re.compile(r"^(\d+) +<\.\.\. (clone3?|v?fork) resumed>")
TIME = re.compile(r"<(\d+\.\d+)>$")
RET = re.compile(r"= (\d+) <\d+\.\d+>$")


def strace_forks(path, pid):
    """(copying forks, their seconds, other forks) that the threads of
    process `pid` made in strace's -f -T output: a call without CLONE_VM
    copies. strace names each line by thread, so the process's threads are
    followed from `pid` through its CLONE_THREAD calls. A call interrupted by
    another task's output is a line with its arguments and a `resumed` line
    with its result and time."""
    members, copies, secs, others = {pid}, 0, 0.0, 0
    pending = {}  # thread -> (copying, makes a thread)

    def finished(tid, copying, thread, line):
        nonlocal secs
        t, ret = TIME.search(line), RET.search(line)
        if copying and t:
            secs += float(t.group(1))
        if thread and ret:
            members.add(int(ret.group(1)))

    for line in path.read_text().splitlines():
        m = CALL.match(line)
        if m and int(m.group(1)) in members:
            tid, args = int(m.group(1)), m.group(3)
            copying = m.group(2) != "vfork" and "CLONE_VM" not in args
            copies += copying
            others += not copying and "CLONE_THREAD" not in args
            if "<unfinished" in line:
                pending[tid] = (copying, "CLONE_THREAD" in args)
            else:
                finished(tid, copying, "CLONE_THREAD" in args, line)
            continue
        m = RESUMED.match(line)
        if m and int(m.group(1)) in pending:
            tid = int(m.group(1))
            finished(tid, *pending.pop(tid), line)
    return copies, secs, others


def under_strace(tmp_path, cmd):
    """Run `cmd` under strace; (its pid, its stdout, strace's output file)."""
    out = tmp_path / "strace.out"
    run = subprocess.run(["strace", "-f", "-qq", "-T", "-e", "trace=clone,clone3,fork,vfork", "-o", str(out), *cmd],
                         capture_output=True, text=True, timeout=300, check=True)
    pid = int(re.search(r"pid=(\d+)", run.stdout).group(1))
    return pid, run.stdout, out


def assert_counted(agent, pid, out, least):
    """The agent's copying forks of `pid` equal strace's, at least `least`,
    its seconds within 25 % of strace's; (copies, seconds)."""
    copies, secs, _ = strace_forks(out, pid)
    assert copies >= least, (copies, out.read_text()[-2000:])
    time.sleep(0.5)  # the exit reaches the agent
    scrape = agent.scrape()
    assert scrape.value(COPIES, pid=str(pid)) == copies
    counted = scrape.value(SECONDS, pid=str(pid))
    assert abs(counted - secs) <= 0.25 * secs, (counted, secs)
    print(f"pid {pid}: {copies} copying forks, {counted * 1e3:.1f} ms counted, strace -T {secs * 1e3:.1f} ms")
    return copies, counted


@pytest.mark.parametrize("kind, copying", [
    ("fork", True), ("fork-exec", True), ("clone3", True), ("vfork", False), ("spawn", False)])
def test_the_c_workload_counts_copies_not_vfork_or_spawn(agent, workload_bin, tmp_path, kind, copying):
    n = 20
    pid, stdout, out = under_strace(tmp_path, [str(workload_bin), "forks", kind, "512", str(n)])
    assert f"forks={n}" in stdout
    copies, others = strace_forks(out, pid)[0], strace_forks(out, pid)[2]
    assert (copies, others) == ((n, 0) if copying else (0, n)), (copies, others)
    if not copying:
        time.sleep(0.5)
        assert agent.scrape().value(COPIES, pid=str(pid)) == 0
        return
    assert_counted(agent, pid, out, n)
    scrape = agent.scrape()
    assert scrape.value(EXECS, pid=str(pid)) == (n if kind == "fork-exec" else 0)
    assert scrape.value(MAPPED, pid=str(pid)) >= n * (512 << 20)


# os.fork() from a 512 MiB heap (touched), then subprocess (vfork on 3.10+)
PY_FORKS = """
import os, subprocess, sys
print(f"pid={os.getpid()}", flush=True)
heap = bytearray(512 << 20)
for i in range(0, len(heap), 4096):
    heap[i] = 1
n = int(sys.argv[1])
for _ in range(n):
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
for _ in range(n):
    subprocess.run(["/bin/true"], check=True)
print(f"forks={n}", flush=True)
"""


def test_cpython_os_fork_counts_and_subprocess_does_not(agent, tmp_path):
    pid, stdout, out = under_strace(tmp_path, [PYTHON, "-c", PY_FORKS, "10"])
    copies, secs, others = strace_forks(out, pid)
    assert others >= 10, "subprocess spawned with vfork"  # none of them copying
    assert copies == 10, copies
    assert_counted(agent, pid, out, 10)


# ProcessBuilder spawns of /bin/true from a 512 MiB heap, touched
JAVA_SPAWNS = """
public class Spawns {
    public static void main(String[] args) throws Exception {
        System.out.println("pid=" + ProcessHandle.current().pid());
        System.out.flush();
        byte[][] heap = new byte[512][];
        for (int i = 0; i < heap.length; i++) {
            heap[i] = new byte[1 << 20];
            for (int j = 0; j < heap[i].length; j += 4096) heap[i][j] = 1;
        }
        int n = Integer.parseInt(args[0]);
        for (int i = 0; i < n; i++) new ProcessBuilder("/bin/true").start().waitFor();
        System.out.println("spawns=" + n + " heap=" + heap.length);
    }
}
"""


@pytest.mark.parametrize("mechanism, copying", [("FORK", True), ("POSIX_SPAWN", False)])
def test_jvm_spawns_copy_with_fork_and_not_with_posix_spawn(agent, tmp_path, mechanism, copying):
    (tmp_path / "Spawns.java").write_text(JAVA_SPAWNS)
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Spawns.java")], check=True, timeout=120)
    pid, stdout, out = under_strace(tmp_path, ["java", "-Xmx1g", "-XX:+UseSerialGC", "-Xshare:auto",
                                               f"-Djdk.lang.Process.launchMechanism={mechanism}",
                                               "-cp", str(tmp_path), "Spawns", "10"])
    assert "spawns=10" in stdout, stdout
    copies, secs, others = strace_forks(out, pid)
    if not copying:
        assert copies == 0 and others >= 10, (copies, others)  # clone(CLONE_VM|CLONE_VFORK)
        time.sleep(0.5)
        assert agent.scrape().value(COPIES, pid=str(pid)) == 0
        return
    assert copies == 10, copies
    time.sleep(0.5)  # the exit reaches the agent
    scrape = agent.scrape()
    assert scrape.value(COPIES, pid=str(pid)) == 10
    assert scrape.value(EXECS, pid=str(pid)) == 10
    # the time is not held to strace's here: with the JVM's threads, strace's
    # handling of the fork event after the copy adds ms to each -T
    print(f"jvm {pid}: {scrape.value(SECONDS, pid=str(pid)) * 1e3:.1f} ms counted, strace -T {secs * 1e3:.1f} ms")


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def info(port, field):
    return int(re.search(rf"^{field}:(\d+)", redis_cli(port, "INFO", "persistence"), re.M).group(1))


@pytest.fixture
def redis(tmp_path):
    """Debian's redis-server on a loopback port, 1 GiB of data (DEBUG
    POPULATE), no save points: (its pid, its port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path), "--enable-debug-command", "yes",
                               "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.1)
        redis_cli(port, "DEBUG", "POPULATE", "1000000", "key", "1024")
        yield server.pid, port
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_redis_bgsave_is_counted_and_timed_as_info_and_strace_say(agent, redis, tmp_path):
    pid, port = redis
    out = tmp_path / "strace.out"
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-T", "-e", "trace=clone,clone3,fork,vfork", "-o", str(out),
                               "-p", str(pid)])
    try:
        time.sleep(1)  # attached
        fork_usec = []
        for _ in range(3):
            assert "Background saving started" in redis_cli(port, "BGSAVE")
            while info(port, "rdb_bgsave_in_progress"):
                time.sleep(0.1)
            assert "rdb_last_bgsave_status:ok" in redis_cli(port, "INFO", "persistence")
            fork_usec.append(int(re.search(r"^latest_fork_usec:(\d+)", redis_cli(port, "INFO", "stats"), re.M).group(1)))
    finally:
        tracer.terminate()
        tracer.wait(timeout=30)
    copies, counted = assert_counted(agent, pid, out, 3)
    assert copies == 3
    reported = sum(fork_usec) / 1e6
    print(f"redis BGSAVE forks: counted {counted * 1e3:.1f} ms, latest_fork_usec {fork_usec}")
    assert abs(counted - reported) <= 0.25 * reported, (counted, fork_usec)
    scrape = agent.scrape()
    assert scrape.value(EXECS, pid=str(pid)) == 0  # the children live on: a snapshot
    assert scrape.value(MAPPED, pid=str(pid)) >= 3 * (1 << 30)


# fork then exec from a touched heap of HEAP MiB, without end
PY_SPAWNS = """
import os, sys
print(f"pid={os.getpid()}", flush=True)
heap = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(heap), 4096):
    heap[i] = 1
while True:
    child = os.fork()
    if child == 0:
        os.execv("/bin/true", ["true"])
    os.waitpid(child, 0)
"""


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_large_spawning_process_is_found_with_its_fix_and_shown_in_top(stack, started, agent_bin, workload_bin):
    agent, _ = stack
    t0 = time.monotonic()
    _, pid = started([PYTHON, "-c", PY_SPAWNS, "1024"])
    # fork then exec without end from a few MiB: more forks, each too small
    # to name (another comm: without the pid label a series is a comm's)
    _, small = started([str(workload_bin), "forks", "fork-exec", "0", "100000000"])
    took = check_storm(stack, pid, "large_forks", "python3", "fork", "cpython_os_fork", alert="SlowpathLargeForks",
                       started_at=t0)
    assert took < 120, took
    page = json.loads(agent.get("/debug/findings")[1])
    named = [p for f in page["findings"] if f["id"] == "large_forks" for p in f["processes"]]
    assert [p["pid"] for p in named] == [pid], named
    p = named[0]
    assert p["detail"]["mapped_bytes_per_fork"] >= 1 << 30, p["detail"]
    assert p["detail"]["exec_after_fork_share"] >= 0.9, p["detail"]
    last = top_last_frame(agent_bin, agent, "fork")
    assert [r for r in last if r.get("comm") == "python3" and r["rates"].get("fork_copy_seconds", 0) > 0.01], last
