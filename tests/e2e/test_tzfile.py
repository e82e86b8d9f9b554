"""Time-zone file checks, exact: with TZ unset, glibc's localtime(),
mktime() and strftime() stat /etc/localtime on every call. Per process,
`slowpath_tzfile_stat_calls_total` must equal the stat-family calls on
"/etc/localtime" that strace decodes for that process (stat, lstat,
newfstatat, statx), for C, Perl, Python and awk, and be absent with TZ set.
Runs once per attach type (tp_btf and raw_tp).

Then the diagnosis, as users run the agent (no pid label, findings on a
short window): a Perl logger and a C logger with TZ unset get the
`tzfile_checks` finding with their known source and the fix within two
judgements, the alert fires in a real Prometheus with the source's cause,
and the same logger with TZ set gets none."""

import json
import os
import re
import subprocess
import time

import pytest

from helpers.prometheus import prom_query
from test_findings import FOREVER, WINDOW, check_storm, finding_series, stack, started  # noqa: F401

pytestmark = pytest.mark.tier("fast")

TZFILE = "slowpath_tzfile_stat_calls_total"
N = 20_000
STATS = "trace=execve,stat,lstat,newfstatat,statx"
# a stat-family call whose path argument strace decodes as the file
ON_THE_FILE = re.compile(r'^(\d+) +(?:stat|lstat|newfstatat|statx)\((?:[^,]+, )?"/etc/localtime"', re.M)


def runtimes(workload_bin, n):
    """Real software that converts local times: (name, argv)."""
    perl_print_pid = 'print "pid=$$\\n"; $|=1;'
    return [
        ("c_localtime", [str(workload_bin), "localtime", str(n)]),
        ("c_mktime", [str(workload_bin), "mktime", str(n)]),
        ("perl_localtime", ["perl", "-e", perl_print_pid + f"my @t = localtime($_) for 1..{n};"]),
        ("perl_posix_strftime",
         ["perl", "-MPOSIX", "-e", perl_print_pid + f'POSIX::strftime("%H:%M", localtime) for 1..{n // 4};']),
        ("python_mktime",
         ["/usr/bin/python3", "-c", f"import time\nfor _ in range({n}): time.mktime(time.localtime())"]),
        ("awk_strftime", ["awk", f'BEGIN {{ for (i = 0; i < {n}; i++) s = strftime("%H:%M") }}']),
    ]


def traced(argv, log, tz=None):
    """Run `argv` to completion under strace; (its pid, the stat calls on
    /etc/localtime strace decoded for that pid, all pids seen)."""
    env = {k: v for k, v in os.environ.items() if k != "TZ"}
    if tz is not None:
        env["TZ"] = tz
    subprocess.run(["strace", "-f", "-qq", "-e", STATS, "-e", "signal=none", "-o", str(log), *argv],
                   check=True, capture_output=True, text=True, env=env, timeout=300)
    text = log.read_text()
    pid = int(text.split(None, 1)[0])  # the execve of argv[0]
    checks = [int(p) for p in ON_THE_FILE.findall(text)]
    assert set(checks) <= {pid}, "a runtime forked: compare per process"
    return pid, len(checks)


@pytest.mark.parametrize("case", range(6), ids=[name for name, _ in runtimes("sp-workload", N)])
def test_checks_are_exact_against_strace(agent, workload_bin, tmp_path, case):
    name, argv = runtimes(workload_bin, N)[case]
    pid, checks = traced(argv, tmp_path / "st")
    assert checks >= N // 4 - 1, f"{name}: strace saw only {checks} checks"
    assert agent.scrape().value(TZFILE, pid=str(pid)) == checks, name


@pytest.mark.parametrize("tz", [":/etc/localtime", "Europe/Berlin"])
def test_no_checks_with_tz_set(agent, workload_bin, tmp_path, tz):
    for name, argv in runtimes(workload_bin, 2_000):
        pid, checks = traced(argv, tmp_path / f"{name}.st", tz=tz)
        assert checks == 0, f"{name} with TZ={tz}: strace saw {checks}"
        assert agent.scrape().select(TZFILE, pid=str(pid)) == [], name


def test_a_stat_of_the_file_from_a_buffer_is_no_check(agent, tmp_path):
    """The definition: the C library's own default path, not any stat of the
    file. coreutils' stat passes its argument from the stack."""
    pid, _ = traced(["stat", "/etc/localtime"], tmp_path / "st")
    text = (tmp_path / "st").read_text()
    assert len(ON_THE_FILE.findall(text)) >= 1, "strace saw coreutils stat the file"
    assert agent.scrape().select(TZFILE, pid=str(pid)) == []


def test_threads_add_up_to_their_process(agent, tmp_path):
    """Perl with four threads converting times: one series, every thread's checks."""
    script = ('use threads; print "pid=$$\\n"; $|=1;'
              'my @t = map { threads->create(sub { my @x = localtime($_) for 1..5000; }) } 1..4;'
              '$_->join for @t;')
    log = tmp_path / "st"
    subprocess.run(["strace", "-f", "-qq", "-e", STATS, "-e", "signal=none", "-o", str(log), "perl", "-e", script],
                   check=True, capture_output=True, env={k: v for k, v in os.environ.items() if k != "TZ"})
    text = log.read_text()
    pid = int(text.split(None, 1)[0])
    checks = len(ON_THE_FILE.findall(text))
    assert checks >= 4 * 5000 - 4
    series = agent.scrape().select(TZFILE, pid=str(pid))
    assert [s.value for s in series] == [checks]


def perl_logger(tz=None):
    """A Perl loop logging a local time about 3,000 times a second."""
    script = 'print "pid=$$\\n"; $|=1; while (1) { my @t = localtime(time); select(undef, undef, undef, 0.0002) }'
    env = {k: v for k, v in os.environ.items() if k != "TZ"}
    if tz:
        env["TZ"] = tz
    return ["perl", "-e", script], env


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_perl_logger_with_tz_set_has_no_finding(stack, started):
    argv, env = perl_logger(tz=":/etc/localtime")
    started(argv, env=env)
    agent, base = stack
    time.sleep(WINDOW + 4)  # two judgements past a full window
    page = json.loads(agent.get("/debug/findings")[1])
    assert not [f for f in page["findings"] if f["id"] == "tzfile_checks"], page
    assert finding_series(base, "tzfile_checks", "perl") == []


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_perl_logger_is_found_named_and_alerted(stack, started):
    argv, env = perl_logger()
    began = time.monotonic()
    _, pid = started(argv, env=env)
    took = check_storm(stack, None, "tzfile_checks", "perl", "tzfile", "perl_localtime",
                       alert="SlowpathTzfileChecks", started_at=began)
    agent, _ = stack
    page = json.loads(agent.get("/debug/findings")[1])
    finding = next(f for f in page["findings"] if f["id"] == "tzfile_checks")
    assert "Environment=TZ=:/etc/localtime" in finding["fix"]
    p = next(p for p in finding["processes"] if p["comm"] == "perl")
    assert p["detail"]["estimated_cpu_percent"] > 0, p
    print(f"perl logger: finding with its known source in Prometheus {took:.1f} s after its start")
    assert took < WINDOW + 20, took


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_a_c_logger_is_found_with_the_glibc_source(stack, started, workload_bin):
    env = {k: v for k, v in os.environ.items() if k != "TZ"}
    started([str(workload_bin), "localtime", str(FOREVER), "200"], env=env)
    check_storm(stack, None, "tzfile_checks", "sp-workload", "tzfile", "glibc_localtime",
                alert="SlowpathTzfileChecks")


def test_the_node_cost_of_a_check_is_served(stack):
    agent, base = stack
    got = prom_query(base, "slowpath_tzfile_check_seconds")
    assert got, "no slowpath_tzfile_check_seconds in Prometheus"
    assert 5e-8 < float(got[0]["value"][1]) < 1e-3
