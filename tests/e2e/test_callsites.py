"""/debug/callsites: the running agent's sampled call sites as folded stacks.

Real workloads, the real kernel tables (read with bpftool as the oracle for
eviction), exact sample counts where the sampling rate makes them exact."""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers.agent import Agent
from helpers.bpf import bpf_fd_ids
from helpers.tools import built
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("full")

HARVEST = 1.0  # seconds between harvests (callsite_store::HARVEST_INTERVAL)
RECOVERED_BY = {"frame_pointer", "stack_top", "eh_frame"}
LINE = re.compile(r"^(\S[^\n]*) (\d+)$")


@pytest.fixture(scope="module")
def stacks_agent(agent_bin, tmp_path_factory):
    a = Agent(agent_bin, ["--debug.callsites"], tmp_path_factory.mktemp("callsites") / "agent.log")
    yield a
    assert a.stop() == 0, a.log_text()


def folded(agent, kind=None):
    """{folded path: samples}; every line must be `path count`."""
    status, body = agent.get("/debug/callsites" + (f"?kind={kind}" if kind else ""))
    assert status == 200
    out = {}
    for line in body.splitlines():
        m = LINE.match(line)
        assert m, f"not a folded-stack line: {line!r}"
        out[m.group(1)] = int(m.group(2))
    return out


def folded_samples(agent, comm, kind):
    return sum(n for path, n in folded(agent, kind).items() if path.startswith(comm + ";"))


BPF_F_NO_PREALLOC = 1  # include/uapi/linux/bpf.h


def agent_maps(agent):
    """{map name: map id} of the maps the agent holds."""
    out = {}
    for i in bpf_fd_ids(agent.proc.pid, "map"):
        info = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(i)],
                                         check=True, capture_output=True, text=True).stdout)
        out[info["name"]] = info
    return out


def kernel_callsite_tgids(agent):
    """tgids with entries in the agent's `callsites` map (bpftool dump, BTF-formatted)."""
    map_id = str(agent_maps(agent)["callsites"]["id"])
    dump = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", map_id],
                                     check=True, capture_output=True, text=True).stdout)
    return {e["formatted"]["key"]["tgid"] for e in dump}


def settle():
    """Long enough for two harvests: one to fold, one to evict."""
    time.sleep(2.5 * HARVEST)


def test_off_by_default(agent_bin, tmp_path):
    """/debug/callsites is off; the stack tables are sized for the findings'
    on-demand sampling only (a few processes at a time)."""
    a = Agent(agent_bin, [], tmp_path / "agent.log")
    try:
        try:
            a.get("/debug/callsites")
            raise AssertionError("/debug/callsites answered without --debug.callsites")
        except Exception as err:  # urllib raises HTTPError for 404
            assert getattr(err, "code", None) == 404, err
            assert "--debug.callsites" in err.read().decode()
        maps = agent_maps(a)
        assert maps["stacks"]["max_entries"] == 256
        assert maps["callsites"]["max_entries"] == 1024
        assert maps["stack_copies"]["max_entries"] == 64
        assert maps["stack_copies"]["flags"] & BPF_F_NO_PREALLOC
        assert maps["stack_targets"]["max_entries"] == 64
        assert "slowpath_callsite_samples_total" not in a.scrape().text
    finally:
        assert a.stop() == 0, a.log_text()


def test_off_without_findings(agent_bin, tmp_path):
    a = Agent(agent_bin, ["--findings.window=0"], tmp_path / "agent.log")
    try:
        try:
            a.get("/debug/callsites")
            raise AssertionError("/debug/callsites answered without --debug.callsites")
        except Exception as err:  # urllib raises HTTPError for 404
            assert getattr(err, "code", None) == 404, err
            assert "--debug.callsites" in err.read().decode()
        maps = agent_maps(a)
        # no kernel memory for a feature that is off
        assert maps["stacks"]["max_entries"] == 1
        assert maps["callsites"]["max_entries"] == 1
        assert maps["stack_copies"]["max_entries"] == 1
        # nothing per CPU: the copy table unpreallocated, one scratch slot
        # (bpftool truncates map names to the kernel's 15 characters)
        assert maps["stack_copies"]["flags"] & BPF_F_NO_PREALLOC
        assert maps["stack_copy_scra"]["max_entries"] == 1
        assert maps["stack_copies"]["bytes_memlock"] + maps["stack_copy_scra"]["bytes_memlock"] < 16_384
        assert maps["stack_targets"]["max_entries"] == 1
        assert "slowpath_callsite_samples_total" not in a.scrape().text
        assert "slowpath_finding_info" not in a.scrape().text
    finally:
        assert a.stop() == 0, a.log_text()


def test_unknown_kind_is_refused(stacks_agent):
    try:
        stacks_agent.get("/debug/callsites?kind=futex")
        raise AssertionError("an unknown kind was accepted")
    except Exception as err:
        assert getattr(err, "code", None) == 400, err
        assert "clock, rt_sigprocmask, sleep" in err.read().decode()


def test_getcontext_caller_in_folded_stacks(stacks_agent, workload_bin):
    """The harvester symbolizes a process while it runs: keep the workload
    running until its stacks show (a loaded CI machine may take a few
    harvests), then stop it."""
    pairs = 50_000_000
    proc = subprocess.Popen([str(workload_bin), "context", str(pairs)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20 * HARVEST

    def read():
        stacks = folded(stacks_agent, "rt_sigprocmask")
        return stacks, {p: n for p, n in stacks.items() if p.startswith("sp-workload;")}

    try:
        stacks, mine = read()
        while time.monotonic() < deadline and not (
                any(p.endswith(";run_context;getcontext;[rt_sigprocmask]") for p in mine)
                and any(p.endswith(";run_context;setcontext;[rt_sigprocmask]") for p in mine)):
            time.sleep(HARVEST / 2)
            stacks, mine = read()
    finally:
        proc.kill()
        proc.wait()
    # root first: ...;run_context;getcontext;[rt_sigprocmask]
    assert any(p.endswith(";run_context;getcontext;[rt_sigprocmask]") for p in mine), mine
    assert any(p.endswith(";run_context;setcontext;[rt_sigprocmask]") for p in mine), mine
    # sampled: at most one per jiffy, never more than the calls
    assert 0 < sum(mine.values()) <= 2 * pairs
    assert all(p.endswith("[rt_sigprocmask]") for p in stacks)


def test_every_distinct_stack_is_kept(stacks_agent, workload_bin):
    """2,048 distinct stacks (one raw rt_sigprocmask each, made 11 calls deep
    through a path of two functions, 8 processes), each sampled once: every
    one is kept and folded, and no sample is dropped. A stack trace map (the
    kernel's BPF_MAP_TYPE_STACK_TRACE, direct-mapped: 4,096 buckets) loses a
    stack whose bucket holds another one for as long as the other lives:
    460 samples of these 2,048 were dropped with one here, and in CI every
    sample of a getcontext loop."""
    bits, procs = 11, 8
    dropped = stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total")
    run_workload(workload_bin, "stack-paths", bits, procs)
    settle()
    paths = {p: n for p, n in folded(stacks_agent, "rt_sigprocmask").items()
             if p.startswith("sp-workload;") and ";stack_path;" in p}
    assert stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total") == dropped
    assert len(paths) == 2 ** bits, sorted(paths)[:5]
    assert set(paths.values()) == {1}, {p: n for p, n in paths.items() if n != 1}
    # each is the whole path: the bits' functions, 11 of them, below the loop
    assert all(p.split(";run_stack_paths;", 1)[1].count(";stack_bit") == bits for p in paths), sorted(paths)[:2]


def test_one_sample_per_sleep_when_sleeps_are_over_a_jiffy_apart(stacks_agent, workload_bin):
    """The first call of each jiffy is sampled. Sleeps of 11 ms are further
    apart than the longest jiffy (10 ms at HZ=100): every call is sampled, so
    the samples equal the calls exactly."""
    before = folded_samples(stacks_agent, "sp-workload", "sleep")
    dropped = stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total")
    calls = 150
    run_workload(workload_bin, "sleep", calls, 11_000)
    settle()
    got = folded_samples(stacks_agent, "sp-workload", "sleep") - before
    assert got == calls, (got, stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total") - dropped)
    # glibc's wrappers push no frame pointer; the stack-top word still finds them
    assert any(p.startswith("sp-workload;") and "nanosleep;[sleep]" in p
               for p in folded(stacks_agent, "sleep")), folded(stacks_agent, "sleep")


def test_each_kind_of_call_is_sampled_in_a_jiffy_another_kind_took(stacks_agent, workload_bin):
    """One sample per jiffy per kind of call: a loop that reads the clock and
    then sleeps 11 ms (longer than any jiffy) has its clock read first in
    every jiffy, and both calls of every round are sampled. With one sample
    per jiffy for all kinds, the sleeps were never sampled."""
    before = {k: folded_samples(stacks_agent, "sp-workload", k) for k in ("clock", "sleep")}
    rounds = 150
    run_workload(workload_bin, "clock-sleep", rounds, 11_000)
    settle()
    got = {k: folded_samples(stacks_agent, "sp-workload", k) - before[k] for k in before}
    assert got == {"clock": rounds, "sleep": rounds}, (
        got, stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total"))


def test_exited_processes_leave_the_kernel_tables(stacks_agent, workload_bin):
    pid = run_workload(workload_bin, "clock-raw", 200_000)
    settle()
    assert pid not in kernel_callsite_tgids(stacks_agent)
    # ... and their samples stay in the folded stacks
    assert folded_samples(stacks_agent, "sp-workload", "clock") > 0


def test_short_lived_processes_are_folded_and_evicted(stacks_agent, workload_bin):
    before = folded_samples(stacks_agent, "sp-churn", "clock")
    run_workload(workload_bin, "churn", 40, 20_000)
    settle()
    churn = {p: n for p, n in folded(stacks_agent).items() if p.startswith("sp-churn;")}
    assert folded_samples(stacks_agent, "sp-churn", "clock") > before, (
        churn, stacks_agent.scrape().value("slowpath_callsite_samples_dropped_total"))
    # every entry left belongs to a live process (dead ones were evicted)
    dead = {t for t in kernel_callsite_tgids(stacks_agent) if not Path(f"/proc/{t}").exists()}
    if dead:  # exited since the last harvest: gone after the next two
        settle()
        assert not dead & kernel_callsite_tgids(stacks_agent)
    # The self-metrics agree with the endpoint (read between two equal
    # scrapes: a harvest may land in between, background processes sample too).
    for _ in range(10):
        m1, stacks, m2 = stacks_agent.scrape(), folded(stacks_agent), stacks_agent.scrape()
        totals = [(m.value("slowpath_callsite_stacks"), m.value("slowpath_callsite_samples_total"))
                  for m in (m1, m2)]
        if totals[0] == totals[1]:
            assert totals[0] == (len(stacks), sum(stacks.values()))
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"no two scrapes in a row agreed: {totals}")


def non_root(*caps):
    """setpriv prefix: uid 65534 holding exactly `caps`, as the chart runs the agent."""
    c = ",".join("+" + cap for cap in caps)
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps=-all,{c}",
            f"--ambient-caps={c}", f"--bounding-set=-all,{c}", "--no-new-privs"]


@pytest.mark.parametrize("extra", [(), ("sys_ptrace", "dac_read_search", "checkpoint_restore")],
                         ids=["bpf+perfmon", "+ptrace+dac+checkpoint"])
def test_symbolizing_a_root_process_as_non_root_needs_three_more_capabilities(agent_bin, workload_bin, tmp_path, extra):
    """CAP_SYS_PTRACE reads another user's /proc/PID/maps; CAP_DAC_READ_SEARCH
    and CAP_CHECKPOINT_RESTORE open its binaries through map_files. Without
    them the stacks still come, marked, and the agent says at start what to
    grant."""
    a = Agent(agent_bin, ["--debug.callsites"], tmp_path / "agent.log", prefix=non_root("bpf", "perfmon", *extra))
    workload = subprocess.Popen([str(workload_bin), "context", "100000000"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(2.5 * HARVEST)  # harvested while it runs
        mine = [p for p in folded(a, "rt_sigprocmask") if p.startswith("sp-workload;")]
        assert mine, folded(a)
        if extra:
            assert any(p.endswith(";run_context;getcontext;[rt_sigprocmask]") for p in mine), mine
            assert "cannot be symbolized" not in a.log_text()
        else:
            assert all("[no access to the process's memory map]" in p for p in mine), mine
            assert "CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_CHECKPOINT_RESTORE" in a.log_text()
    finally:
        workload.kill()
        workload.wait()
        assert a.stop() == 0, a.log_text()


# Without frame pointers: the stack copy unwound with .eh_frame.

@pytest.fixture(scope="module")
def nofp_bin():
    """tests/workloads/sp-nofp.c built as distributions build: -O2, no frame
    pointers (tests/workloads/build.sh)."""
    return built("sp-nofp")


@pytest.fixture(scope="module")
def nofp_pth_bin():
    """The same with -DSP_WITH_PTH, against GNU Pth (libpth-dev)."""
    return built("nofp-pth") / "sp-nofp"


def start(binary, *args):
    proc = subprocess.Popen([str(binary), *map(str, args)], stdout=subprocess.PIPE, text=True)
    pid = int(re.search(r"pid=(\d+)", proc.stdout.readline()).group(1))
    return proc, pid


def doctor_sites(agent_bin, binary, *args):
    """Call sites of the rt_sigprocmask finding for the workload, which runs
    while the doctor observes it."""
    proc, pid = start(binary, *args)
    try:
        out = subprocess.run([str(agent_bin), "doctor", "--duration=2s", "--format=json", f"--pid={pid}"],
                             capture_output=True, text=True, timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    sites = [site for f in report["findings"] if f["id"] == "rt_sigprocmask_storm"
             for p in f["processes"] if p["pid"] == pid for site in p["call_sites"]]
    assert sites, report
    for site in sites:
        assert all(f["recovered_by"] in RECOVERED_BY for f in site["frames"]), site
    return sites


def names(site):
    return [f["function"] for f in site["frames"]]


def test_eh_frame_finds_the_callers_of_getcontext_without_frame_pointers(agent_bin, nofp_bin):
    """The frame-pointer walk stops in getcontext (glibc pushes no frame
    pointer) and the stack-top word finds context_loop at best; the stack
    copy unwound with .eh_frame goes on to main and the program's entry."""
    sites = doctor_sites(agent_bin, nofp_bin, "context", 10**11)
    top = sites[0]
    assert "getcontext" in names(top)[0], names(top)
    assert names(top)[1:3] == ["context_loop", "main"], names(top)
    assert [f["recovered_by"] for f in top["frames"][1:3]] == ["eh_frame", "eh_frame"], top
    assert top["truncated"] is False, top
    assert "_start" in names(top) or any(n.startswith("__libc_start") for n in names(top)), names(top)


def test_eh_frame_finds_the_pth_callers_of_the_signal_mask_calls(agent_bin, nofp_pth_bin):
    """GNU Pth switches threads with swapcontext and masks signals in its
    scheduler: the frame-pointer walk stops at the libc frame. Unwound with
    .eh_frame, the sigprocmask site names its caller in libpth, and the
    yield path goes through pth_yield and the thread function to the root
    of the thread's context."""
    sites = doctor_sites(agent_bin, nofp_pth_bin, "pth", 10**11)
    sigmask = [s for s in sites if "sigmask" in names(s)[0]]
    assert sigmask, [names(s) for s in sites]
    for site in sigmask:
        assert any("libpth" in f["module"] and f["recovered_by"] == "eh_frame"
                   for f in site["frames"][1:]), site
    yields = [s for s in sites if "yield_loop" in names(s)]
    assert yields, [names(s) for s in sites]
    assert any(s["truncated"] is False and "pth_yield" in names(s) for s in yields), yields


def test_folded_stacks_reach_main_without_frame_pointers(stacks_agent, nofp_bin):
    """The agent's harvester unwinds the same way (the stack copy is read
    once, then deleted from the kernel table)."""
    proc, _ = start(nofp_bin, "context", 10**11)
    deadline = time.monotonic() + 20 * HARVEST
    want = ";main;context_loop;getcontext;[rt_sigprocmask]"
    try:
        mine = []
        while time.monotonic() < deadline and not any(p.endswith(want) for p in mine):
            time.sleep(HARVEST / 2)
            mine = [p for p in folded(stacks_agent, "rt_sigprocmask") if p.startswith("sp-nofp;")]
    finally:
        proc.kill()
        proc.wait()
    assert any(p.endswith(want) and "[stack cut short]" not in p for p in mine), mine
