"""The agent's own diagnosis, end to end: the doctor's rules judged by the
running agent on a sliding window, findings served as metrics, scraped by a
real Prometheus that evaluates the shipped rules.

The agent runs as users run it (no pid label), with an 8 s window (judged
every 2 s) and a 6 s grace so that the test takes seconds, not minutes; the
rules and thresholds are the doctor's. Each real runtime's storm must show up
in Prometheus as `slowpath_finding_info` with the same `known_source` the
doctor names from the call site (tests/e2e/test_timer_runtimes.py,
test_doctor_sources.py): Python 3.11's time.sleep loop, a JVM Thread.sleep(1)
loop, Node's setInterval(f, 1), the sentinel-golang cached-time ticker built
from the Go module proxy, GNU Pth and glibc getcontext (rt_sigprocmask), and
a JVM pre-touching a THP heap. The per-process alert fires in Prometheus with
that known source's cause in its annotation; a storm that stops loses its
finding after the grace; a node with nothing running has none.

Call sites are sampled on demand, for the processes that cross a threshold
only: while a timer loop and a slower sleeper run, the kernel's call-site
table holds stacks of the loop alone (read with bpftool). A process that
execs another program is sampled afresh."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from helpers.agent import Agent
from helpers.paths import REPO
from helpers.prometheus import prom_query, prometheus_server
from test_doctor_sources import pretouch_class, pth_bin, thp_always, workload_cmd  # noqa: F401
from test_timer_runtimes import JAVA_SRC as TIMER_LOOP_JAVA, NODE, PYTHON, go_ticker  # noqa: F401

pytestmark = pytest.mark.tier("full")

RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
KNOWN_SOURCES = yaml.safe_load((REPO / "deploy/helm/slowpath/files/known-sources.yaml").read_text())
WINDOW = 8  # --findings.window, seconds
GRACE = 6  # --findings.grace, seconds
FOREVER = 10**12


@pytest.fixture(scope="module")
def stack(agent_bin, tmp_path_factory):
    """The agent with findings on a short window, and Prometheus evaluating the
    shipped rules every second with every `for` cut to 1 s and every rate
    range to 15 s."""
    work = tmp_path_factory.mktemp("findings")
    agent = Agent(agent_bin, [f"--findings.window={WINDOW}s", f"--findings.grace={GRACE}s"], work / "agent.log")
    # rate()[5m] of a series minutes old is its increase over 5 minutes: a
    # 15 s range gives the rate of a storm seconds old
    spec = yaml.safe_load(RULES.read_text().replace("[5m]", "[15s]"))
    for group in spec["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    (work / "rules.yaml").write_text(yaml.safe_dump(spec))
    with prometheus_server(work, agent.port, rule_files=["rules.yaml"]) as base:
        yield agent, base
    assert agent.stop() == 0, agent.log_text()


@pytest.fixture
def started():
    """Start commands that print pid=N first; killed at the end."""
    procs = []

    def start(cmd, env=None, cwd=None):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=cwd, env=env)
        procs.append(proc)
        m = re.search(r"pid=(\d+)", proc.stdout.readline())
        assert m, f"{cmd[0]} printed no pid"
        return proc, int(m.group(1))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def firing(base, alertname, **labels):
    with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=5) as resp:
        alerts = json.load(resp)["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())]


def wait_for_findings(what, check, timeout, agent):
    """Poll `check` until it returns something truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} not within {timeout} s; /debug/findings:\n" + \
            agent.get("/debug/findings")[1][:4000]
        time.sleep(0.5)


def finding_series(base, finding, comm):
    return prom_query(base, f'slowpath_finding_info{{finding="{finding}",comm="{comm}"}}')


def known_source_of(base, finding, comm):
    """The known_source Prometheus has for `comm`'s finding, once non-empty."""
    series = finding_series(base, finding, comm)
    sources = {s["metric"].get("known_source", "") for s in series}
    return next((s for s in sources if s), None)


def row(signal, row_id):
    return next(r for r in KNOWN_SOURCES[signal] if r["id"] == row_id)


def check_storm(stack, pid, finding, comm, signal, want_row, alert=None, started_at=None):
    """`comm`'s storm shows up as `finding` with `want_row` in Prometheus,
    within a window and a few hops of `started_at`; with `alert`, that
    per-process alert fires with the row's cause and fix."""
    agent, base = stack
    started_at = started_at or time.monotonic()
    found = wait_for_findings(f"{finding} for {comm} with a known source",
                     lambda: known_source_of(base, finding, comm), WINDOW + 25, agent)
    took = time.monotonic() - started_at
    assert found == want_row, (found, want_row)
    page = json.loads(agent.get("/debug/findings")[1])
    p = next(p for f in page["findings"] if f["id"] == finding for p in f["processes"] if p["comm"] == comm)
    assert p["known_source"]["row"] == want_row, p["known_source"]
    assert p["call_sites"], "no call sites on /debug/findings"
    if pid is not None:
        assert p["pid"] == pid, (p["pid"], pid)
    if alert:
        fired = wait_for_findings(f"{alert} for {comm}", lambda: firing(base, alert, comm=comm, known_source=want_row),
                         30, agent)
        notes = fired[0]["annotations"]
        assert notes["cause"] == row(signal, want_row)["cause"], notes
        assert notes["fix"] == row(signal, want_row)["fix"], notes
    return took


def top_last_frame(agent_bin, agent, sort):
    """`slowpath top --json` against `agent`, two frames a second apart,
    sorted by `sort`: the rows of its last frame."""
    top = subprocess.run([str(agent_bin), "top", "--json", "-n", "2", "-d", "1", "--sort", sort,
                          f"--agent.url=http://127.0.0.1:{agent.port}/metrics"],
                         capture_output=True, text=True, timeout=60)
    assert top.returncode == 0, top.stderr
    rows = [json.loads(line) for line in top.stdout.splitlines() if line.strip()]
    return [r for r in rows if r.get("frame") == rows[-1].get("frame")] or rows


def test_python_timer_loop_is_found_named_alerted_and_cleared(stack, started):
    agent, base = stack
    t0 = time.monotonic()
    proc, pid = started(PYTHON)
    took = check_storm(stack, pid, "timer_loop", "python3", "timer", "python_sleep", alert="SlowpathTimerLoop",
                       started_at=t0)
    print(f"python3 timer loop: finding with its known source in Prometheus {took:.1f} s after start")
    assert took < WINDOW + 10, took
    # the storm stops: the finding goes once the window no longer holds it
    # and the grace is over
    proc.kill()
    proc.wait()
    t1 = time.monotonic()
    wait_for_findings("the cleared finding to go", lambda: not re.search(
        r'^slowpath_finding_info\{finding="timer_loop".*comm="python3"', agent.get("/metrics")[1], re.M),
        WINDOW + GRACE + 10, agent)
    gone = time.monotonic() - t1
    print(f"python3 timer loop: finding gone {gone:.1f} s after the process")
    assert gone > GRACE - 1, gone  # it stayed for the grace


def test_jvm_thread_sleep_loop(stack, started, tmp_path):
    (tmp_path / "TimerLoop.java").write_text(TIMER_LOOP_JAVA)
    _, pid = started(["java", "-Xshare:auto", "-XX:+UseSerialGC", "TimerLoop.java"], cwd=tmp_path)
    check_storm(stack, pid, "timer_loop", "java", "timer", "jvm_timed_park")


def test_node_set_interval(stack, started):
    _, pid = started(NODE)
    check_storm(stack, pid, "timer_loop", "node", "timer", "node_libuv_timers")


def test_sentinel_golang_ticker(stack, started, go_ticker):  # noqa: F811
    import os
    _, pid = started([str(go_ticker)], env={**os.environ, "USE_CACHE_TIME": "true"})
    check_storm(stack, pid, "timer_loop", go_ticker.name[:15], "timer", "go_runtime_timers",
                alert="SlowpathTimerLoop")


@pytest.mark.parametrize("case,row_id", [("pth", "gnu_pth"), ("getcontext", "ucontext_switch")])
def test_rt_sigprocmask_storm_sources(stack, started, workload_bin, pth_bin, case, row_id):  # noqa: F811
    cmd = workload_cmd(case, workload_bin, pth_bin, FOREVER)
    _, pid = started(cmd)
    check_storm(stack, pid, "rt_sigprocmask_storm", Path(cmd[0]).name[:15], "sigmask", row_id)


def test_jvm_pretouching_a_thp_heap(stack, started, thp_always, pretouch_class):  # noqa: F811
    _, pid = started(["java", "-XX:+UseTransparentHugePages", "-XX:+AlwaysPreTouch", "-Xms512m", "-Xmx512m",
                      "-cp", str(pretouch_class), "PreTouchHeap", "60"])
    agent, base = stack
    found = wait_for_findings("thp_faults for java with a known source",
                     lambda: known_source_of(base, "thp_faults", "java"), WINDOW + 25, agent)
    assert found in ("jvm_pretouch", "jvm_heap"), found


def no_finding(agent):
    scrape = agent.scrape()
    return sum(s.value for s in scrape.select("slowpath_findings")) == 0


# A Python timer loop that, on SIGUSR1, execs the command in its arguments.
PYTHON_THEN_EXEC = """import os, signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: os.execv(sys.argv[1], sys.argv[1:]))
print(f"pid={os.getpid()}", flush=True)
while True:
    time.sleep(0.001)
"""


def named(agent, finding, pid):
    """The process `pid` as `finding` on /debug/findings names it, once it
    has a known source; else None."""
    page = json.loads(agent.get("/debug/findings")[1])
    return next((p for f in page["findings"] if f["id"] == finding for p in f["processes"]
                 if p["pid"] == pid and p.get("known_source")), None)


def test_an_exec_is_sampled_afresh(stack, started, workload_bin, tmp_path):
    """A process whose call sites are known execs another program with a
    timer loop of its own (same tgid, same kind of call): its finding names
    the new program's source, not the call sites sampled from the old image."""
    agent, base = stack
    exe = tmp_path / "sp-after-exec"
    shutil.copy(workload_bin, exe)
    proc, pid = started(["/usr/bin/python3", "-c", PYTHON_THEN_EXEC, str(exe), "sleep", str(FOREVER), "1000"])
    before = wait_for_findings("the Python loop named", lambda: named(agent, "timer_loop", pid), WINDOW + 25, agent)
    assert (before["comm"], before["known_source"]["row"]) == ("python3", "python_sleep"), before
    t0 = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    after = wait_for_findings("the exec'd loop named", lambda: (p := named(agent, "timer_loop", pid)) and
                     p["comm"] == "sp-after-exec" and p, WINDOW + 25, agent)
    assert after["known_source"]["row"] == "glibc_sleep_loop", after["known_source"]
    took = time.monotonic() - t0
    print(f"after the exec: the new image's known source on /debug/findings {took:.1f} s later")
    found = wait_for_findings("the exec'd loop's known source in Prometheus",
                     lambda: known_source_of(base, "timer_loop", "sp-after-exec"), 30, agent)
    assert found == "glibc_sleep_loop", found


def test_only_processes_past_a_threshold_are_sampled(stack, started, workload_bin, tmp_path):
    """A timer loop and a sleeper below the threshold (100 sleeps of 10 ms a
    second, a series of its own) run side by side on a node with no finding
    left: the kernel's call-site table gets stacks of the loop's series only."""
    agent, base = stack
    wait_for_findings("the earlier findings to clear", lambda: no_finding(agent), WINDOW + GRACE + 30, agent)
    sleeper_bin = tmp_path / "sp-sleeper"
    shutil.copy(workload_bin, sleeper_bin)
    _, sleeper = started([str(sleeper_bin), "sleep", "100000", "10000"])
    _, loop = started(PYTHON)
    wait_for_findings("the loop's known source", lambda: known_source_of(base, "timer_loop", "python3"), WINDOW + 25, agent)
    out = subprocess.run(["bpftool", "--json", "map", "dump", "name", "callsites"], capture_output=True, text=True,
                         check=True)
    keys = [e["formatted"]["key"] for e in json.loads(out.stdout) if "formatted" in e]
    # THP faults (kind 3) are sampled for every process; the calls of the
    # others only once asked. The loop's entries are read and freed once
    # symbolized: the table is empty again or holds the loop's newest
    # samples, never the sleeper's.
    tgids = {k["tgid"] for k in keys if k["kind"] != 3}
    assert sleeper not in tgids, tgids
    # the loop's series (comm python3) may hold other processes: its busiest
    # ones are sampled to tell which one loops. Among them may be this test
    # run's own children between fork and exec (python3 then, with a
    # counted rt_sigprocmask), which another comm names by now.
    def comm_and_parent(tgid):
        try:
            stat = Path(f"/proc/{tgid}/stat").read_text()
        except OSError:
            return None  # gone
        return Path(f"/proc/{tgid}/comm").read_text().strip(), int(stat.rsplit(")", 1)[1].split()[1])
    alive = {t: c for t in tgids if (c := comm_and_parent(t))}
    assert all(comm == "python3" or parent == os.getpid() for comm, parent in alive.values()), (alive, loop)
    # a target is read within seconds, then no process is sampled
    wait_for_findings("no process sampled", lambda: agent.scrape().value("slowpath_findings_sampled_processes") == 0,
             20, agent)


def test_a_quiet_node_has_no_finding(stack):
    """With the test workloads gone, no finding is left after a window and the grace."""
    agent, base = stack
    wait_for_findings("no finding", lambda: no_finding(agent), WINDOW + GRACE + 30, agent)
    assert "slowpath_finding_info{" not in agent.get("/metrics")[1]
    assert agent.scrape().value("slowpath_findings_evaluations_total") > 0
