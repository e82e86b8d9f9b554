"""Timer loops in the runtimes users run: Python's time.sleep (an absolute
clock_nanosleep on 3.11+), a JVM Thread.sleep(1) loop (futex), Node's
setInterval(f, 1) (epoll_pwait), and the seed case itself: a Go program
built here from the Go module proxy with github.com/alibaba/sentinel-golang
v1.0.4 and UseCacheTime = true (futex and epoll_pwait from the Go scheduler).

Each one's wakeups per second agree within 10 % with an independent count,
bpftrace on timer:hrtimer_expire_entry reading the woken task from the
expiring hrtimer_sleeper, over the same window; `slowpath doctor` names each
with the timer_loop finding and the runtime, and names the source from the
call site (the doctor's known-source row matched against the sampled
frames); the same Go program with UseCacheTime = false gives no timer_loop
finding."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers.agent import doctor_report, Agent
from helpers.oracles import wait_ready
from helpers.tools import built

pytestmark = pytest.mark.tier("full")

WAKEUPS = "slowpath_timer_wakeups_total"
WINDOW = 5  # seconds of counting, for slowpath and bpftrace alike

PYTHON = ["/usr/bin/python3", "-c",
          "import os, time\nprint(f'pid={os.getpid()}', flush=True)\nwhile True:\n    time.sleep(0.001)"]
NODE = ["node", "-e", "console.log('pid=' + process.pid); setInterval(() => {}, 1)"]
JAVA_SRC = """
public class TimerLoop {
    public static void main(String[] args) throws Exception {
        System.out.println("pid=" + ProcessHandle.current().pid());
        System.out.flush();
        while (true) Thread.sleep(1);
    }
}
"""


@pytest.fixture(scope="module")
def timer_agent(agent_bin, tmp_path_factory):
    log = tmp_path_factory.mktemp("timer-agent") / "agent.log"
    a = Agent(agent_bin, ["--metrics.pid-label"], log)
    yield a
    assert a.stop() == 0, a.log_text()


@pytest.fixture(scope="module")
def go_ticker():
    """The sentinel-golang ticker (tests/workloads/sentinel-ticker, its
    modules pinned by go.sum), as tests/workloads/build.sh built it."""
    return built("sentinel-ticker")


@pytest.fixture
def started():
    procs = []

    def start(cmd, env=None, cwd=None):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd,
                                env={**os.environ, **(env or {})})
        procs.append(proc)
        line = proc.stdout.readline()
        m = re.search(r"pid=(\d+)", line)
        assert m, f"{cmd[0]} printed {line!r}"
        time.sleep(1)  # past start-up: JIT, module loading
        return int(m.group(1))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


# The window is timed in the kernel: the wakeups of the WINDOW seconds after BEGIN
# (which runs once every probe is attached), however late bpftrace's user
# side then acts on exit() (under load it counted 9 s as 5 here once).
BPFTRACE = """
BEGIN { @start = nsecs; printf("ready\\n"); }
tracepoint:timer:hrtimer_expire_entry /@start != 0 && nsecs - @start < (uint64)WINDOW_NS
                                       && args->function == kaddr("hrtimer_wakeup")/ {
  $t = ((struct hrtimer_sleeper *)args->hrtimer)->task;
  if ($t->tgid == PID) { @wakeups = count(); }
}
interval:s:AFTER { exit(); }
"""


def wakeup_rates(agent, pid):
    """(slowpath's, bpftrace's) timer wakeups per second of `pid` over one window."""
    script = (BPFTRACE.replace("PID", str(pid)).replace("WINDOW_NS", str(WINDOW * 10**9))
              .replace("AFTER", str(WINDOW + 3)))  # past the window, whatever the attach took
    bt = subprocess.Popen(["bpftrace", "-B", "line", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    wait_ready(bt)
    before, t0 = agent.scrape().value(WAKEUPS, pid=pid), time.monotonic()
    out, err = bt.communicate(timeout=WINDOW + 30)
    after, t1 = agent.scrape().value(WAKEUPS, pid=pid), time.monotonic()
    m = re.search(r"@wakeups: (\d+)", out)
    assert m, out + err
    return (after - before) / (t1 - t0), int(m.group(1)) / WINDOW


def timer_loop(report):
    found = [f for f in report["findings"] if f["id"] == "timer_loop"]
    return found[0] if found else None


def check_runtime(agent, agent_bin, pid, runtime, waits, row):
    ours, independent = wakeup_rates(agent, pid)
    assert 700 < independent < 1200, independent  # a 1 ms loop
    assert ours == pytest.approx(independent, rel=0.10), (ours, independent)
    scrape = agent.scrape()
    by_wait = {s.labels["wait"]: s.value for s in scrape.select(WAKEUPS, pid=str(pid))}
    assert max(by_wait, key=by_wait.get) in waits, by_wait
    assert scrape.value("slowpath_timer_requested_seconds_count", pid=pid) > 0
    f = timer_loop(doctor_report(agent_bin, f"--pid={pid}", duration="3s"))
    assert f, "no timer_loop finding"
    p = f["processes"][0]
    assert p["pid"] == pid
    assert p["runtime"]["name"] == runtime, p.get("runtime")
    assert p["detail"]["estimated_cpu_percent"] > 0
    # the known source, matched on the call site's frames
    sites = [[f"{fr['function']} ({Path(fr['module']).name})" for fr in site["frames"][:8]]
             for site in p["call_sites"]]
    assert p.get("known_source"), f"no known_source (want {row}); call sites: {sites}"
    assert p["known_source"]["row"] == row, (p["known_source"], sites)
    return p


def test_python_sleep_loop(timer_agent, agent_bin, tracefs, started):
    pid = started(PYTHON)
    p = check_runtime(timer_agent, agent_bin, pid, "python", {"clock_nanosleep"}, "python_sleep")
    assert p["detail"]["median_requested_timeout_seconds"] == 0.001
    # Python 3.11 sleeps to an absolute deadline: the sleep histogram has it now
    assert timer_agent.scrape().value("slowpath_sleep_requested_seconds_bucket", pid=pid, le="0.001") > 0


def test_jvm_thread_sleep_loop(timer_agent, agent_bin, tracefs, started, tmp_path):
    (tmp_path / "TimerLoop.java").write_text(JAVA_SRC)
    pid = started(["java", "-Xshare:auto", "-XX:+UseSerialGC", "TimerLoop.java"], cwd=tmp_path)
    check_runtime(timer_agent, agent_bin, pid, "jvm", {"futex"}, "jvm_timed_park")


def test_node_set_interval(timer_agent, agent_bin, tracefs, started):
    pid = started(NODE)
    check_runtime(timer_agent, agent_bin, pid, "node", {"epoll_wait"}, "node_libuv_timers")


def test_sentinel_golang_cached_time_ticker(timer_agent, agent_bin, tracefs, started, go_ticker):
    pid = started([str(go_ticker)], env={"USE_CACHE_TIME": "true"})
    p = check_runtime(timer_agent, agent_bin, pid, "sentinel-golang", {"futex", "epoll_wait", "nanosleep"},
                      "go_runtime_timers")
    assert "UseCacheTime: false" in p["runtime"]["fix"]


def test_sentinel_golang_without_the_ticker_is_no_timer_loop(agent_bin, started, go_ticker):
    pid = started([str(go_ticker)], env={"USE_CACHE_TIME": "false"})
    assert timer_loop(doctor_report(agent_bin, f"--pid={pid}", duration="3s")) is None


def test_no_timer_loop_on_the_idle_node(agent_bin):
    out = subprocess.run([str(agent_bin), "doctor", "--duration=10s", "--format=json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert timer_loop(json.loads(out.stdout)) is None
