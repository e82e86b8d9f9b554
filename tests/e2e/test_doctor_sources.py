"""slowpath doctor names the cause from the call site: each signal has a table
of known sources (rows), matched against the symbolized frames of the
process's sampled stacks, and the finding says which row matched, at which
frame, and whether its cause was read off a call site or guessed.

Real programs, not imitations, each with a known answer:

  - GNU Pth (tests/workloads/pth-yield.c, linked with the distribution's
    libpth): two Pth threads yielding to each other. Pth switches with
    swapcontext and masks signals in its scheduler: 4 rt_sigprocmask calls
    per pth_yield(), all SIG_SETMASK. Row `gnu_pth`.
  - glibc getcontext() alone (sp-workload getcontext): one mask query per
    call. Row `ucontext_switch`.
  - sigsetjmp(env, 1) + siglongjmp (sp-workload sigsetjmp): the saved mask is
    queried, then set back, one of each per iteration. Row
    `sigsetjmp_savemask`.
  - the negative case, rt_sigprocmask made with syscall(2) itself, no libc
    wrapper on the stack (sp-workload raw-sigmask): the finding is there, no
    row matches, and the cause is marked a guess.
  - a JVM pre-touching a 512 MiB heap with transparent huge pages
    (-XX:+UseTransparentHugePages -XX:+AlwaysPreTouch, enabled=always for the
    test): its huge-page faults come from os::pretouch_memory. Row
    `jvm_pretouch` (or `jvm_heap`).

Each rate is held to an independent oracle: strace counts the calls of a
fixed-count run, by kind (query, set mask, block, unblock), so the exact
number per iteration and the mix are known, and the doctor's rate must agree
with that mix and, loosely, with the rate of a free run; /proc/vmstat's
thp_fault_alloc must have grown by at least the faults the doctor puts on the
JVM, which must cover most of the heap's 2 MiB pages."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers.agent import doctor_report
from helpers.oracles import vmstat
from helpers.tools import built

pytestmark = pytest.mark.tier("full")

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
FOREVER = 10**12  # an iteration count no test waits for: the workload is killed
RECOVERED_BY = ("frame_pointer", "stack_top", "eh_frame")


@pytest.fixture(scope="session")
def pth_bin():
    """tests/workloads/pth-yield.c, built against GNU Pth (libpth-dev) by
    tests/workloads/build.sh."""
    return built("pth-yield")


def workload_cmd(case, workload_bin, pth_bin, n):
    """The command line of `case` for `n` iterations."""
    if case == "pth":
        return [str(pth_bin), str(n)]
    return [str(workload_bin), case, str(n)]


# case: (row, iterations of a run given N, rt_sigprocmask calls per iteration
# by kind, words the cause names, words the fix names, a pattern the matched
# frame names, N of a free run of about half a second)
CASES = {
    # N yields per thread, two threads: 2 N pth_yield(); each is two
    # swapcontext (to the scheduler and back) and the scheduler's own
    # sigprocmask pair
    "pth": ("gnu_pth", lambda n: 2 * n, {"setmask": 4}, ["Pth"], ["Pth"], r"pth", 100_000),
    "getcontext": ("ucontext_switch", lambda n: n, {"query": 1}, ["getcontext"], ["context"], r"getcontext",
                   1_000_000),
    "sigsetjmp": ("sigsetjmp_savemask", lambda n: n, {"query": 1, "setmask": 1}, ["sigsetjmp"], ["setjmp"],
                  r"sigsetjmp|sigjmp_save|siglongjmp", 500_000),
}


def sigmask_kinds(trace):
    """{kind: calls} of the rt_sigprocmask lines of an `strace -f` log, in the
    doctor's words: a NULL set is a query whatever `how` says."""
    kinds = {}
    for how, new in re.findall(r"rt_sigprocmask\((\w+), (NULL|\[[^\]]*\]|~\[[^\]]*\])", trace):
        kind = "query" if new == "NULL" else {"SIG_SETMASK": "setmask", "SIG_BLOCK": "block",
                                              "SIG_UNBLOCK": "unblock"}[how]
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def strace_per_iteration(cmd_of, iterations, tmp_path):
    """rt_sigprocmask calls per iteration by kind, exact: the difference of
    two fixed-count runs under strace (start-up and exit cancel out)."""
    counts = []
    for n in (1000, 2000):
        log = tmp_path / f"strace-{n}.log"
        subprocess.run(["strace", "-f", "-e", "trace=rt_sigprocmask", "-o", str(log), *cmd_of(n)], check=True,
                       capture_output=True, timeout=120)
        counts.append(sigmask_kinds(log.read_text()))
    per = {}
    for kind in set(counts[0]) | set(counts[1]):
        extra = counts[1].get(kind, 0) - counts[0].get(kind, 0)
        if extra:
            per[kind] = extra / (iterations(2000) - iterations(1000))
    return per


def free_run_rate(cmd_of, iterations, calls_per_iteration, n):
    """rt_sigprocmask calls per second of a run with nothing observing it."""
    t0 = time.monotonic()
    subprocess.run(cmd_of(n), check=True, capture_output=True, timeout=120)
    return iterations(n) * calls_per_iteration / (time.monotonic() - t0)


def finding(report, fid):
    found = [f for f in report["findings"] if f["id"] == fid]
    assert found, f"no {fid} finding in {[f['id'] for f in report['findings']]}"
    return found[0]


def process(f, pid):
    found = [p for p in f["processes"] if p["pid"] == pid]
    assert found, f"pid {pid} not in {f['id']}: {[p['pid'] for p in f['processes']]}"
    return found[0]


def frames_text(p):
    """The call sites of a process, one line a stack, for assertion messages."""
    return "\n".join(" <- ".join(f"{fr['function']} ({Path(fr['module']).name})" for fr in site["frames"][:8])
                     for site in p.get("call_sites", []))


def check_known_source(p, row, frame_pattern):
    """`known_source` of process `p` names `row`, at a frame of its call sites."""
    ks = p.get("known_source")
    assert ks, f"no known_source (want {row}); call sites:\n{frames_text(p)}"
    assert ks["row"] == row, (ks, frames_text(p))
    assert ks["recovered_by"] in RECOVERED_BY, ks
    assert re.search(frame_pattern, ks["frame"], re.I), ks
    assert isinstance(ks["frame_index"], int) and ks["frame_index"] >= 0, ks
    assert ks["cause"] and ks["fix"], ks
    assert ks["expected_gain"] is None or isinstance(ks["expected_gain"], str), ks
    # the frame it names is one the process's stacks show, at that depth
    at_index = {site["frames"][ks["frame_index"]]["function"] for site in p["call_sites"]
                if len(site["frames"]) > ks["frame_index"]}
    assert any(fn in ks["frame"] for fn in at_index), (ks, frames_text(p))
    return ks


@pytest.fixture
def running():
    """Start commands that print pid=N first; killed at the end."""
    started = []

    def start(cmd):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        line = proc.stdout.readline()
        m = re.search(r"pid=(\d+)", line)
        assert m, f"{cmd[0]} printed {line!r}"
        return int(m.group(1))

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("case", list(CASES))
def test_rt_sigprocmask_source_from_the_call_site(case, agent_bin, workload_bin, pth_bin, running, tmp_path):
    row, iterations, want_per_iteration, cause_words, fix_words, frame_pattern, free_n = CASES[case]

    def cmd_of(n):
        return workload_cmd(case, workload_bin, pth_bin, n)

    # oracle: the exact calls per iteration, by kind
    per_iteration = strace_per_iteration(cmd_of, iterations, tmp_path)
    assert per_iteration == want_per_iteration, per_iteration
    calls_per_iteration = sum(per_iteration.values())
    free_rate = free_run_rate(cmd_of, iterations, calls_per_iteration, free_n)

    pid = running(cmd_of(FOREVER))
    f = finding(doctor_report(agent_bin, f"--pid={pid}"), "rt_sigprocmask_storm")
    assert [p["pid"] for p in f["processes"]] == [pid]
    p = f["processes"][0]
    assert p["call_sites"], "no call sites sampled"
    # the doctor's mix of kinds is strace's, and its rate a free run's
    # (loosely: the observed run pays for the tracing, the machine may be busy)
    detail = p["detail"]
    assert set(detail) == set(per_iteration), (detail, per_iteration)
    for kind, calls in per_iteration.items():
        assert detail[kind] / p["per_second"] == pytest.approx(calls / calls_per_iteration, rel=0.10), detail
    assert free_rate / 4 < p["per_second"] < free_rate * 2, (p["per_second"], free_rate)

    # the cause comes from the call site
    ks = check_known_source(p, row, frame_pattern)
    assert f["cause_basis"]["kind"] == "call_site", f["cause_basis"]
    assert (f["cause_basis"]["row"], f["cause_basis"]["pid"]) == (row, pid), f["cause_basis"]
    for word in cause_words:
        assert word in f["cause"] and word in ks["cause"], (word, f["cause"], ks["cause"])
    for word in fix_words:
        assert word in f["fix"] and word in ks["fix"], (word, f["fix"], ks["fix"])


def test_raw_rt_sigprocmask_matches_no_row(agent_bin, workload_bin, running, tmp_path):
    """syscall(SYS_rt_sigprocmask) itself: the storm is found, its stacks are
    sampled and symbolized, and still no row matches: the cause is a guess."""
    per_iteration = strace_per_iteration(lambda n: [str(workload_bin), "raw-sigmask", str(n)], lambda n: n,
                                         tmp_path)
    assert per_iteration == {"block": 1, "unblock": 1}, per_iteration

    pid = running([str(workload_bin), "raw-sigmask", str(FOREVER)])
    f = finding(doctor_report(agent_bin, f"--pid={pid}"), "rt_sigprocmask_storm")
    p = process(f, pid)
    assert set(p["detail"]) == {"block", "unblock"}, p["detail"]
    assert p["detail"]["block"] == pytest.approx(p["detail"]["unblock"], rel=0.05), p["detail"]
    # the stacks are there and name the caller: the no-match is no missing stack
    inner = [site["frames"][:2] for site in p["call_sites"]]
    assert any(fr[0]["function"] == "syscall" and any("run_raw_sigmask" in x["function"] for x in fr)
               for fr in inner), frames_text(p)

    assert "known_source" in p and p["known_source"] is None, p.get("known_source")
    assert f["cause_basis"]["kind"] == "guess", f["cause_basis"]
    assert isinstance(f["cause_basis"]["from"], str) and f["cause_basis"]["from"], f["cause_basis"]


@pytest.fixture
def thp_always():
    """enabled=always for the test; the setting found is put back whatever happens."""
    if not THP_ENABLED.exists():
        pytest.skip("no transparent huge pages in this kernel")
    original = re.search(r"\[(\w+)\]", THP_ENABLED.read_text()).group(1)
    try:
        THP_ENABLED.write_text("always")
        yield
    finally:
        THP_ENABLED.write_text(original)
        assert f"[{original}]" in THP_ENABLED.read_text()


@pytest.fixture(scope="session")
def pretouch_class():
    """tests/workloads/java/PreTouchHeap.java compiled (tests/workloads/build.sh):
    the directory of the class."""
    return built("pretouch")


HEAP_MIB = 512


def test_jvm_pretouch_thp_faults(agent_bin, thp_always, pretouch_class, tmp_path):
    """The doctor watches while a JVM pre-touches its heap into huge pages."""
    log = tmp_path / "doctor.log"
    before = vmstat()["thp_fault_alloc"]
    with open(log, "w") as err:
        doc = subprocess.Popen([str(agent_bin), "doctor", "--duration=8s", "--format=json", "--log.level=debug"],
                               stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 30
        while "BPF programs attached" not in log.read_text():
            assert doc.poll() is None, f"doctor exited {doc.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        # alive until the report is out: its stacks are symbolized then
        java = subprocess.Popen(["java", "-XX:+UseTransparentHugePages", "-XX:+AlwaysPreTouch",
                                 f"-Xms{HEAP_MIB}m", f"-Xmx{HEAP_MIB}m", "-cp", str(pretouch_class),
                                 "PreTouchHeap", "60"], stdout=subprocess.PIPE, text=True)
        pid = int(re.search(r"pid=(\d+)", java.stdout.readline()).group(1))
        out, _ = doc.communicate(timeout=60)
    finally:
        for proc in (doc, locals().get("java")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert doc.returncode == 0, log.read_text()
    grown = vmstat()["thp_fault_alloc"] - before
    report = json.loads(out)

    f = finding(report, "thp_faults")
    assert f["evidence"]["thp_enabled"] == "always"
    p = process(f, pid)
    jvm_faults = p["detail"]["allocs_per_second"] * report["duration_seconds"]
    # most of the heap's 2 MiB pages, and no more than the kernel counted
    assert jvm_faults >= HEAP_MIB / 2 / 2, (jvm_faults, grown)
    assert jvm_faults <= grown * 1.05 + 2, (jvm_faults, grown)

    ks = p.get("known_source")
    assert ks, f"no known_source for the JVM; call sites:\n{frames_text(p)}"
    assert ks["row"] in ("jvm_pretouch", "jvm_heap"), ks
    assert ks["recovered_by"] in RECOVERED_BY, ks
    if ks["row"] == "jvm_pretouch":
        assert re.search(r"pretouch", ks["frame"], re.I), ks
    assert "libjvm" in ks["frame"], ks
    assert ks["cause"] and ks["fix"], ks
    assert f["cause_basis"]["kind"] in ("call_site", "guess", "node_settings", "counters"), f["cause_basis"]
