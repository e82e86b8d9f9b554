"""Close sweeps, exact: `slowpath_fd_close_unopened_calls_total` of a
process must equal the close() calls that strace shows returning EBADF for
it, for the C workload (sweeps past the file table and inside it, a close of
every descriptor up to the limit, close_range) and for Debian's Perl
Proc::Daemon, whose Init closes every descriptor up to the soft limit in the
daemon it makes; a Python process that opens descriptors up to its limit and
closes them all has none. Runs once per attach type (tp_btf and raw_tp).

Then the diagnosis, as users run the agent (no pid label, findings on a
short window): a Perl loop sweeping to its own soft limit of 8,192 gets the
`fd_close_sweep` finding with that limit, its known source and the fix, and
the alert fires in a real Prometheus."""

import json
import re
import subprocess
import time

import pytest

from test_findings import check_storm, stack, started  # noqa: F401

pytestmark = pytest.mark.tier("fast")

FDCLOSE = "slowpath_fd_close_unopened_calls_total"
# pid, then a close that failed with EBADF (strace -f -o: "PID close(N) = -1 EBADF ...", or, when
# another process's event came between its entry and exit, "PID <... close resumed>) = -1 EBADF")
EBADF_CLOSE = re.compile(r"^(\d+) +(?:close\(\d+\)|<\.\.\. close resumed>\)) += -1 EBADF", re.M)


def traced(argv, log):
    """Run `argv` under strace -f to completion: {pid: closes that returned
    EBADF} for every process strace saw, and the first pid."""
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve,close,close_range", "-e", "signal=none",
                    "-o", str(log), *argv], check=True, capture_output=True, text=True, timeout=300)
    text = log.read_text()
    counts = {}
    for pid in EBADF_CLOSE.findall(text):
        counts[int(pid)] = counts.get(int(pid), 0) + 1
    return int(text.split(None, 1)[0]), counts


def test_the_c_workload_is_exact_against_strace(agent, workload_bin, tmp_path):
    first, counts = traced([str(workload_bin), "fd-sweep", "3", "5000"], tmp_path / "st")
    assert counts == {first: 4 * (5000 - 3)}, counts
    assert agent.scrape().value(FDCLOSE, pid=str(first)) == counts[first]


def test_perl_proc_daemon_is_exact_against_strace(agent, tmp_path):
    """Proc::Daemon::Init forks twice; the daemon closes every descriptor
    from 0 up to sysconf(_SC_OPEN_MAX), then reopens 0-2 on /dev/null."""
    script = "use Proc::Daemon; Proc::Daemon::Init({work_dir => '/'}); exit 0;"
    _, counts = traced(["perl", "-e", script], tmp_path / "st")
    assert counts, "strace saw no EBADF close"
    soft = int(subprocess.run(["sh", "-c", "ulimit -Sn"], capture_output=True, text=True).stdout)
    assert max(counts.values()) >= soft - 10, (counts, soft)  # the daemon's sweep
    time.sleep(0.5)  # the daemon's exit reaches the agent
    scrape = agent.scrape()
    got = {pid: scrape.value(FDCLOSE, pid=str(pid)) for pid in counts}
    assert got == counts


def test_opening_up_to_the_limit_and_closing_all_counts_none(agent, tmp_path):
    script = ("import os, resource\n"
              "soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "fds = []\n"
              "while True:\n"
              "    try:\n"
              "        fds.append(os.dup(0))\n"
              "    except OSError:\n"
              "        break\n"
              "assert len(fds) > soft - 20, (len(fds), soft)\n"
              "for fd in fds:\n"
              "    os.close(fd)\n")
    first, counts = traced(["/usr/bin/python3", "-c", script], tmp_path / "st")
    assert first not in counts, counts
    assert agent.scrape().select(FDCLOSE, pid=str(first)) == []


SOFT_LIMIT = 8192


def perl_sweeper():
    """A Perl loop closing every descriptor up to its soft limit (8,192, set
    by prlimit) five times a second, as a daemonizing spawner does."""
    script = ('use POSIX; print "pid=$$\\n"; $|=1;'
              'while (1) { POSIX::close($_) for 3 .. POSIX::sysconf(&POSIX::_SC_OPEN_MAX) - 1;'
              ' select(undef, undef, undef, 0.2) }')
    return ["prlimit", f"--nofile={SOFT_LIMIT}:{SOFT_LIMIT * 2}", "perl", "-e", script]


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_perl_sweeper_is_found_with_its_limit_and_alerted(stack, started):
    began = time.monotonic()
    started(perl_sweeper())
    took = check_storm(stack, None, "fd_close_sweep", "perl", "fdclose", "perl_close_loop",
                       alert="SlowpathFdCloseSweep", started_at=began)
    agent, _ = stack
    page = json.loads(agent.get("/debug/findings")[1])
    finding = next(f for f in page["findings"] if f["id"] == "fd_close_sweep")
    assert f"open-files limit, {SOFT_LIMIT}" in finding["title"], finding["title"]
    assert "close_range" in finding["fix"] and "LimitNOFILE=" in finding["fix"]
    p = next(p for p in finding["processes"] if p["comm"] == "perl")
    assert p["detail"]["nofile_soft_limit"] == SOFT_LIMIT, p
    assert p["detail"]["sweeps_per_second"] == pytest.approx(5, rel=0.3), p
    assert p["detail"]["estimated_cpu_percent"] > 0, p
    print(f"perl sweeper: finding with its known source in Prometheus {took:.1f} s after its start")
    assert took < 120, took
