"""The agent started as a node starts the chart's pod, under the locked-memory
limit the container runtime gives it (issue: 5.10 nodes crash-looped).

Linux before 5.11 charges BPF maps and programs to RLIMIT_MEMLOCK, per uid.
A container inherits the runtime's limit: neither containerd's nor CRI-O's
unit sets LimitMEMLOCK, so it is systemd's default, 8 MiB since systemd 251
and 64 KiB before (Debian 11 runs 247), and Kubernetes cannot change it.

Each case runs the release agent in a QEMU guest through
tests/workloads/sp-container-exec.c, which repeats runc's steps: the limit,
the bounding set cut to the chart's capabilities, uid 65534, those
capabilities permitted and effective, nothing inheritable or ambient,
no_new_privs, exec. The binary carries the image's file capabilities (the
setcap line of deploy/build-image.sh, applied in the guest with setcap);
the chart's capabilities are read from the rendered manifest
deploy/kubernetes/slowpath.yaml. The oracle of the counts is the workload's
own number of libc clock reads, each of which enters the kernel with the
acpi_pm clocksource.

- 5.10 (bullseye): with the chart's capabilities under 8 MiB and 64 KiB the
  agent lifts the limit and counts exactly, with its full process table;
  without CAP_SYS_RESOURCE (agent.liftMemlockLimit: false) under 8 MiB it
  runs with a smaller process table, says so in one log line and in
  slowpath_process_table_capacity, and counts exactly; under 64 KiB it exits
  1 with the fix for every install path; unlimited changes nothing. The
  budget is per uid: a new agent started while an old one holds its tables
  (a rollout) gets what the old one leaves.
- 6.1 (bookworm) and 6.12 (trixie): under 8 MiB nothing changes (the limit is
  not lifted, the table is full), and no thread of the agent holds
  CAP_SYS_RESOURCE in any set after start.
One boot per kernel (about 40-70 s under TCG).
"""

import re
import shutil
import sys
from pathlib import Path

import pytest

from as_shipped import RUNTIME_MEMLOCK_KIB, chart_capabilities, container_exec, image_file_capabilities
from helpers.agent import Scrape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guest"))
import harness  # noqa: E402

pytestmark = [pytest.mark.tier("full"), pytest.mark.lane("guest"), pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or shutil.which("busybox") is None
    or shutil.which("setcap") is None,
    reason="needs qemu-system-x86, busybox-static and libcap2-bin's setcap (scripts/setup.sh --test)",
)]

N = 10_000
CLOCK = "slowpath_clock_syscalls_total"
CAPACITY = "slowpath_process_table_capacity"
FULL_TABLE = 16384  # --bpf.max-processes' default
CAP_SYS_RESOURCE = 24
MIB8, KIB64 = str(RUNTIME_MEMLOCK_KIB), "64"  # KiB: systemd's defaults since 251 and before
MIB12, MIB16 = str(12 * 1024), str(16 * 1024)


def case(name, memlock, caps):
    """Start the agent as runc would, run the workload, scrape, stop; or, if
    it exits at start, its exit status. Sections NAME_limits, NAME_caps
    (every thread's capability sets), NAME_w (the workload), NAME (the
    page), NAME_log, and a line "NAME exit RC"."""
    caps = ",".join(caps)
    return f"""
sp-container-exec --memlock {memlock} --uid 65534 --caps {caps} --no-new-privs -- \\
    /tmp/bin/slowpath --web.listen-address=127.0.0.1:9891 --metrics.pid-label >/tmp/{name}.log 2>&1 &
AGENT_PID=$!
wait_ready 9891 $AGENT_PID
if kill -0 $AGENT_PID 2>/dev/null; then
    section {name}_limits grep 'locked memory' /proc/$AGENT_PID/limits
    section {name}_caps sh -c 'for t in /proc/'$AGENT_PID'/task/*; do echo "task ${{t##*/}}"; grep -E "^Cap(Inh|Prm|Eff|Amb)" $t/status; done'
    section {name}_w sp-workload clock-vdso {N}
    scrape {name}
    kill -TERM $AGENT_PID
fi
wait $AGENT_PID
echo "{name} exit $?"
section {name}_log cat /tmp/{name}.log
# the stopped agent's maps are uncharged by deferred kernel work, per uid
sleep 2
"""


def rollout(memlock_old, memlock_new, caps):
    """An old agent (port 9892, limit `memlock_old` KiB) keeps its tables
    while a new one starts under the same uid (case "rollout_new", limit
    `memlock_new`): before 5.11 both draw on one budget per uid."""
    caps = ",".join(caps)
    return f"""
sp-container-exec --memlock {memlock_old} --uid 65534 --caps {caps} --no-new-privs -- \\
    /tmp/bin/slowpath --web.listen-address=127.0.0.1:9892 >/tmp/rollout_old.log 2>&1 &
OLD_PID=$!
wait_ready 9892 $OLD_PID
section rollout_old wget -q -O - http://127.0.0.1:9892/metrics
""" + case("rollout_new", memlock_new, caps.split(",")) + """
kill -TERM $OLD_PID
wait $OLD_PID
echo "rollout_old exit $?"
section rollout_old_log cat /tmp/rollout_old.log
sleep 2
"""


def scenario(cases, extra=""):
    prelude = f"""
mkdir -p /tmp/bin
cp /usr/bin/slowpath /tmp/bin/slowpath
setcap {image_file_capabilities()} /tmp/bin/slowpath
section filecaps getcap /tmp/bin/slowpath
section uname uname -r
"""
    return prelude + "".join(case(*c) for c in cases) + extra


def boot(agent_bin, tmp_path, suite, cases, extra=""):
    files = {"/usr/bin/sp-container-exec": container_exec(), "/usr/bin/setcap": shutil.which("setcap"),
             "/usr/bin/getcap": shutil.which("getcap")}
    console, secs = harness.run_scenario(agent_bin, scenario(cases, extra), clocksource="acpi_pm", suite=suite,
                                         extra_files=files, extra_cmdline="tsc=reliable")
    assert harness.guest_rc(console) == 0, console[-4000:]
    secs["console"] = console
    return secs


def exit_code(secs, name):
    m = re.search(rf"^{name} exit (\d+)$", secs["console"], re.M)
    assert m, secs["console"][-3000:]
    return int(m.group(1))


def without_sys_resource(caps):
    return [c for c in caps if c != "sys_resource"]


def assert_counts_exactly(secs, name):
    page = Scrape(secs[name])
    pid = int(re.search(r"pid=(\d+)", secs[f"{name}_w"]).group(1))
    assert page.value(CLOCK, pid=pid, clock="monotonic", fallback="true") == N, (name, secs[f"{name}_log"])
    return page


def assert_no_thread_holds_sys_resource(secs, name):
    sets = re.findall(r"^(Cap\w+):\s+([0-9a-f]+)$", secs[f"{name}_caps"], re.M)
    tasks = re.findall(r"^task \d+$", secs[f"{name}_caps"], re.M)
    assert len(tasks) > 1 and len(sets) == 4 * len(tasks), secs[f"{name}_caps"]
    holding = [(s, v) for s, v in sets if int(v, 16) >> CAP_SYS_RESOURCE & 1]
    assert not holding, secs[f"{name}_caps"]


@pytest.fixture(scope="module")
def bullseye(agent_bin, tmp_path_factory):
    chart = chart_capabilities()
    cases = [
        ("chart_8m", MIB8, chart),
        ("chart_64k", KIB64, chart),
        ("nores_8m", MIB8, without_sys_resource(chart)),
        ("nores_64k", KIB64, without_sys_resource(chart)),
        ("nores_16m", MIB16, without_sys_resource(chart)),
        ("unlimited", "unlimited", without_sys_resource(chart)),
    ]
    return boot(agent_bin, tmp_path_factory.mktemp("bullseye"), "bullseye", cases,
                rollout(MIB12, MIB16, without_sys_resource(chart)))


def test_the_chart_and_the_image_carry_sys_resource():
    assert "sys_resource" in chart_capabilities()
    assert "cap_sys_resource" in image_file_capabilities()


def test_510_with_the_charts_capabilities_lifts_the_limit_and_counts_exactly(bullseye):
    assert bullseye["uname"].startswith("5.10."), bullseye["uname"]
    assert "cap_sys_resource" in bullseye["filecaps"], bullseye["filecaps"]
    for name in ["chart_8m", "chart_64k"]:
        assert exit_code(bullseye, name) == 0, bullseye[f"{name}_log"]
        assert re.search(r"locked memory\s+unlimited\s+unlimited", bullseye[f"{name}_limits"]), \
            bullseye[f"{name}_limits"]
        page = assert_counts_exactly(bullseye, name)
        assert page.value(CAPACITY) == FULL_TABLE
        assert "raised it to unlimited with CAP_SYS_RESOURCE" in bullseye[f"{name}_log"], bullseye[f"{name}_log"]
        assert_no_thread_holds_sys_resource(bullseye, name)


def test_510_without_sys_resource_runs_reduced_and_exact_under_8_mib(bullseye):
    log = bullseye["nores_8m_log"]
    assert exit_code(bullseye, "nores_8m") == 0, log
    page = assert_counts_exactly(bullseye, "nores_8m")
    capacity = page.value(CAPACITY)
    assert 256 <= capacity < FULL_TABLE, (capacity, log)
    assert page.value("slowpath_tracked_processes") <= capacity
    assert page.value("slowpath_lost_events_total", reason="process_table_full") == 0
    said = [line for line in log.splitlines() if "running with smaller tables" in line]
    assert len(said) == 1, log
    assert f"processes={capacity:.0f}" in said[0] and "requested=16384" in said[0], said


def test_510_without_sys_resource_under_64_kib_exits_with_the_fix_for_every_install_path(bullseye):
    log = bullseye["nores_64k_log"]
    assert exit_code(bullseye, "nores_64k") == 1, log
    error = next(line for line in log.splitlines() if line.startswith("slowpath: error:"))
    assert "charges BPF maps and programs to the locked-memory limit" in error and "here 64 KiB" in error, error
    for install in ["Helm chart", "plain manifests", "podman", "systemd", "ulimit -l unlimited"]:
        assert install in error, (install, error)


def test_510_the_budget_is_per_uid_so_a_new_pod_fits_in_what_the_old_one_leaves(bullseye):
    """16 MiB alone hold 8,192 processes (about 13.7 MiB of tables); while an
    old agent of the same uid holds its 4,096 (12 MiB limit, about 7.6 MiB),
    the new one backs off to what is left, and both count exactly."""
    alone = Scrape(bullseye["nores_16m"]).value(CAPACITY)
    old = Scrape(bullseye["rollout_old"]).value(CAPACITY)
    assert exit_code(bullseye, "rollout_new") == 0, bullseye["rollout_new_log"]
    assert exit_code(bullseye, "rollout_old") == 0, bullseye["rollout_old_log"]
    new = assert_counts_exactly(bullseye, "rollout_new").value(CAPACITY)
    assert (alone, old) == (8192, 4096), (alone, old)
    assert 256 <= new < alone, (new, bullseye["rollout_new_log"])


def test_510_unlimited_is_unchanged(bullseye):
    assert exit_code(bullseye, "unlimited") == 0, bullseye["unlimited_log"]
    page = assert_counts_exactly(bullseye, "unlimited")
    assert page.value(CAPACITY) == FULL_TABLE
    assert "smaller tables" not in bullseye["unlimited_log"]


@pytest.fixture(scope="module", params=["bookworm", "trixie"])
def newer(request, agent_bin, tmp_path_factory):
    suite = None if request.param == "bookworm" else request.param
    secs = boot(agent_bin, tmp_path_factory.mktemp(request.param), suite, [("chart_8m", MIB8, chart_capabilities())])
    secs["suite"] = request.param
    return secs


def test_511_and_later_leave_the_limit_and_drop_sys_resource_from_every_thread(newer):
    release = newer["uname"].strip()
    assert release.startswith({"bookworm": "6.1.", "trixie": "6.12."}[newer["suite"]]), release
    log = newer["chart_8m_log"]
    assert exit_code(newer, "chart_8m") == 0, log
    assert re.search(r"locked memory\s+8388608\s+8388608", newer["chart_8m_limits"]), newer["chart_8m_limits"]
    page = assert_counts_exactly(newer, "chart_8m")
    assert page.value(CAPACITY) == FULL_TABLE
    assert "CAP_SYS_RESOURCE" not in log and "smaller tables" not in log, log
    assert_no_thread_holds_sys_resource(newer, "chart_8m")
