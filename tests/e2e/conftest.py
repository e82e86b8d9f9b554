"""The fixtures and hooks of the end-to-end tests, and nothing else: the helpers
they share are the package helpers/ (its __init__.py lists the modules).

The tests start the real `slowpath` binary (as root: it loads BPF programs
into the running kernel), run the C workloads of tests/workloads, scrape
/metrics over HTTP and compare exact deltas with independent oracles
(`strace -c`, /proc/vmstat, /proc/zoneinfo).

Environment:
  SLOWPATH_BIN   agent binary (default: target/release/slowpath)
  SLOWPATH_FAULTS_BIN  the agent built with the cargo feature fault-injection, for the
                 degradation tests (default: target/fault-injection/slowpath)
  SP_WORKLOAD    workload binary (default: built here into tests/workloads/bin)

Prometheus: the tests run Prometheus 3 (built from the Go module proxy by
tests/deploy/install-tools.sh, cached) and, where a test is about the servers
users still run, Debian's Prometheus 2.42 as well (`release` below). No test
builds what it uses: scripts/setup.sh --test does (tests/deploy/test-tools.sh),
and a test that finds something missing fails, naming that command.
"""

import os
import subprocess
from pathlib import Path

import pytest

# The helpers' asserts explain themselves as the tests' do.
pytest.register_assert_rewrite("helpers")

from helpers.agent import Agent  # noqa: E402
from helpers.host import without_transparent_huge_pages  # noqa: E402
from helpers.oracles import TRACEFS  # noqa: E402
from helpers.paths import REPO  # noqa: E402
from helpers.prometheus import prometheus_release  # noqa: E402
from helpers.signals import agent_path  # noqa: E402
from helpers.tiers import LANE_MARKER, LANES, MARKER, TIERS, lane_of, tier_of, tier_problems  # noqa: E402
from helpers.tools import built  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--tier", choices=sorted(TIERS), default=None,
                     help="run only this tier's tests (helpers/tiers.py; scripts/test.sh --fast is --tier=fast)")
    parser.addoption("--lane", choices=sorted(LANES), default=None,
                     help="run only this lane's tests (helpers/tiers.py)")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(name): the test's tier, one of: "
                            + "; ".join(f"{name}: {what}" for name, what in TIERS.items()))
    config.addinivalue_line("markers", f"{LANE_MARKER}(name): the test's lane, one of: "
                            + "; ".join(f"{name}: {what}" for name, what in LANES.items()))
    if config.getoption("--lane") == "guest":
        without_transparent_huge_pages()


def pytest_collection_modifyitems(config, items):
    problems = tier_problems(items)
    if problems:
        raise pytest.UsageError("every test has a tier (tests/e2e/helpers/tiers.py):\n  " + "\n  ".join(problems))
    for option, of in (("--tier", tier_of), ("--lane", lane_of)):
        wanted = config.getoption(option)
        if wanted:
            dropped = [item for item in items if of(item) != wanted]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [item for item in items if of(item) == wanted]
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: loads BPF programs into the kernel")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def agent_bin():
    path = agent_path()
    assert path.exists(), f"{path} missing: build it with cargo build --release"
    return path


@pytest.fixture(scope="session")
def faults_bin():
    """The agent with test-only fault injection (scripts/test.sh builds it):
    only this build has --bpf.test-break-probe and --bpf.test-refuse-probe."""
    path = Path(os.environ.get("SLOWPATH_FAULTS_BIN", REPO / "target" / "fault-injection" / "slowpath"))
    assert path.exists(), (f"{path} missing: cargo build -p slowpath --features fault-injection, "
                           "then copy target/debug/slowpath there")
    return path


@pytest.fixture(scope="session")
def agent_bin_arm64():
    """The agent cross-built for arm64 (scripts/test.sh builds it)."""
    path = Path(os.environ.get("SLOWPATH_BIN_ARM64",
                               REPO / "target" / "aarch64-unknown-linux-gnu" / "release" / "slowpath"))
    assert path.exists(), (f"{path} missing: scripts/setup.sh --arm64, then "
                           "cargo build --release --target aarch64-unknown-linux-gnu")
    return path


@pytest.fixture(scope="session")
def workload_bin():
    """The C workloads (tests/workloads/build.sh, which scripts/setup.sh
    --test runs), or SP_WORKLOAD."""
    if "SP_WORKLOAD" in os.environ:
        return Path(os.environ["SP_WORKLOAD"])
    return built("sp-workload")


@pytest.fixture(scope="session", params=["tp-btf", pytest.param("raw-tp", marks=pytest.mark.tier("full"))])
def agent(request, agent_bin, tmp_path_factory):
    """The agent with per-pid series, once per attach type, shared by every
    module that reads only its own workloads' series (pytest runs each
    attach type's tests together). tp_btf's tests are in their modules'
    tier; raw_tp's are in the full tier."""
    log = tmp_path_factory.mktemp("agent") / "agent.log"
    a = Agent(
        agent_bin,
        ["--metrics.pid-label", f"--bpf.attach-type={request.param}", "--canary.interval=1s"],
        log,
    )
    a.attach_type = request.param.replace("-", "_")
    yield a
    assert a.stop() == 0, a.log_text()


@pytest.fixture(scope="session", params=["3", "2.42"], ids=lambda name: f"prometheus{name}")
def release(request):
    """Each Prometheus release the tests run: 3.x and Debian's 2.42."""
    return prometheus_release(request.param)


@pytest.fixture(scope="session")
def tracefs():
    """tracefs for bpftrace's tracepoints: mounted only if it was not, and
    unmounted again at the end."""
    mounted_here = not (TRACEFS / "events").exists()
    if mounted_here:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    yield TRACEFS
    if mounted_here:
        subprocess.run(["umount", str(TRACEFS)], check=True)
