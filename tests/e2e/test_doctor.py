"""slowpath doctor: each finding reproduced by a workload running while the
doctor observes; its JSON must name the right finding and the right process.
An idle node gives no warning-level finding."""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.agent import doctor_report, start_doctor

pytestmark = pytest.mark.tier("full")


def with_workload(workload_bin, *args):
    """Start a workload; returns (process, pid)."""
    proc = subprocess.Popen([str(workload_bin), *map(str, args)], stdout=subprocess.PIPE, text=True)
    pid = int(re.search(r"pid=(\d+)", proc.stdout.readline()).group(1))
    return proc, pid


def finding(report, fid):
    found = [f for f in report["findings"] if f["id"] == fid]
    assert found, f"no {fid} finding in {[f['id'] for f in report['findings']]}"
    return found[0]


def pids(f):
    return [p["pid"] for p in f["processes"]]


@pytest.fixture
def running(workload_bin):
    started = []

    def start(*args):
        proc, pid = with_workload(workload_bin, *args)
        started.append(proc)
        return pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_idle_node_has_no_warning(agent_bin):
    report = doctor_report(agent_bin)
    assert report["schema_version"] == 1
    serious = [f for f in report["findings"] if f["severity"] != "info"]
    assert serious == [], serious
    assert {c["clock"] for c in report["clock_benchmark"]} >= {"realtime", "monotonic", "process_cputime"}
    assert report["attach"]["sys_enter"] in ("fentry", "tp_btf", "raw_tp")


def test_ruby_getcontext_case(agent_bin, running):
    pid = running("context", 50_000_000)
    f = finding(doctor_report(agent_bin), "rt_sigprocmask_storm")
    assert f["severity"] == "warning"
    assert pids(f)[0] == pid
    assert f["evidence"]["getcontext_setcontext_signature"] == "true"
    assert set(f["processes"][0]["detail"]) == {"query", "setmask"}
    assert "getcontext" in f["cause"]


def test_ticker_case(agent_bin, running):
    pid = running("sleep", 10_000, 1000)
    f = finding(doctor_report(agent_bin), "timer_loop")
    assert pids(f) == [pid]
    rate = f["processes"][0]["per_second"]
    assert 500 < rate <= 1000, rate  # a 1 ms ticker: at most 1000/s
    detail = f["processes"][0]["detail"]
    assert set(detail) == {"wakeups_per_second/clock_nanosleep", "median_requested_timeout_seconds",
                           "estimated_cpu_percent"}
    assert detail["median_requested_timeout_seconds"] == 0.001
    assert 0 < detail["estimated_cpu_percent"] < 50


def test_raw_clock_syscalls_are_a_vdso_bypass(agent_bin, running):
    pid = running("clock-raw", 500_000_000)
    report = doctor_report(agent_bin)
    f = finding(report, "vdso_bypass")
    assert pids(f)[0] == pid
    assert "clock_gettime/monotonic" in f["processes"][0]["detail"]
    assert not [x for x in report["findings"] if x["id"] == "clocksource_not_vdso_capable"]


def test_cpu_time_clocks(agent_bin, running):
    pid = running("cputime", 100_000_000)
    f = finding(doctor_report(agent_bin), "cpu_time_clocks")
    assert f["severity"] == "info"
    assert pids(f)[0] == pid
    assert set(f["processes"][0]["detail"]) == {
        "clock_gettime/process_cputime", "clock_gettime/thread_cputime", "clock_gettime/cpu_clock"}


def test_thp_faults(agent_bin, workload_bin, tmp_path):
    if "[never]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text():
        pytest.skip("THP disabled")
    doc = start_doctor(agent_bin, tmp_path / "doctor.log", "--duration=3s")
    out = subprocess.run([str(workload_bin), "thp", "256"], check=True, capture_output=True, text=True).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    report = json.loads(doc.communicate(timeout=60)[0])
    f = finding(report, "thp_faults")
    assert pid in pids(f)
    assert f["evidence"]["thp_enabled"] in ("always", "madvise")


def test_filters_keep_only_the_target(agent_bin, running):
    ticker = running("sleep", 10_000, 1000)
    running("context", 50_000_000)
    report = doctor_report(agent_bin, f"--pid={ticker}")
    assert [f["id"] for f in report["findings"]] == ["timer_loop"]
    report = doctor_report(agent_bin, "--comm=no-such-comm")
    assert report["findings"] == []


def test_clocksource_finding_from_the_node_settings(agent_bin, tmp_path):
    """A node on xen (sysfs root pointed at a copy that says so): critical, with the fix."""
    cs = tmp_path / "devices/system/clocksource/clocksource0"
    cs.mkdir(parents=True)
    (cs / "current_clocksource").write_text("xen\n")
    (cs / "available_clocksource").write_text("xen tsc hpet acpi_pm\n")
    report = doctor_report(agent_bin, f"--path.sysfs={tmp_path}")
    f = report["findings"][0]
    assert (f["id"], f["severity"]) == ("clocksource_not_vdso_capable", "critical")
    assert "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource" in f["fix"]
    assert "68 s to 3.3 s" in f["expected_gain"]
    assert f["evidence"]["available_clocksources"] == "xen tsc hpet acpi_pm"


def test_text_report(agent_bin):
    out = subprocess.run([str(agent_bin), "doctor", "--duration=1s", "--comm=no-such-comm"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "No findings" in out.stdout
    assert "\x1b[" not in out.stdout  # no colour off a terminal
    assert re.search(r"monotonic\s+[\d.]+\s+[\d.]+", out.stdout)


def test_call_sites_name_the_caller_of_getcontext(agent_bin, running):
    """The workload keeps frame pointers: the stacks show the library function
    and its caller in the workload, symbolized with blazesym."""
    pid = running("context", 50_000_000)
    f = finding(doctor_report(agent_bin), "rt_sigprocmask_storm")
    proc = next(p for p in f["processes"] if p["pid"] == pid)
    stacks = [[fr["function"] for fr in site["frames"]] for site in proc["call_sites"]]
    assert stacks, "no call sites sampled"
    inner = {s[0] for s in stacks}
    assert any("getcontext" in fn for fn in inner) and any("setcontext" in fn for fn in inner), stacks
    assert all("run_context" in s for s in stacks), stacks
    assert sum(site["samples"] for site in proc["call_sites"]) > 100


def test_call_sites_in_the_text_report(agent_bin, running):
    running("sleep", 10_000, 1000)
    out = subprocess.run([str(agent_bin), "doctor", "--duration=2s"], capture_output=True, text=True, timeout=60)
    assert re.search(r"at \d+ samples: .*nanosleep", out.stdout), out.stdout


def test_sigterm_ends_the_observation_with_a_report(agent_bin, running):
    """Ctrl-C or SIGTERM: the report covers the time observed so far."""
    pid = running("sleep", 100_000, 1000)
    doc = subprocess.Popen([str(agent_bin), "doctor", "--duration=1h", "--format=json", "--log.level=debug"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = ""
    while "BPF programs attached" not in log:
        line = doc.stderr.readline()
        assert line, f"doctor exited before attaching: {doc.wait()}"
        log += line
    time.sleep(2)
    started = time.monotonic()
    doc.send_signal(signal.SIGTERM)
    out, _ = doc.communicate(timeout=30)
    assert doc.returncode == 0
    assert time.monotonic() - started < 5
    report = json.loads(out)
    assert 1.5 <= report["duration_seconds"] < 10, report["duration_seconds"]
    assert pid in pids(finding(report, "timer_loop"))
