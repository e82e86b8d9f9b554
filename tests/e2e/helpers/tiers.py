"""The suite's tiers: every test carries exactly one, as the marker
`@pytest.mark.tier(NAME)` on the test, its class or its module (the
closest one counts), or on a parameter (`pytest.param(..., marks=...)`).
A test without one fails collection (conftest.py), and `--tier=NAME` runs
only that tier's tests.

Every test also runs in a lane, `@pytest.mark.lane(NAME)` placed as a tier
is ("host" when none is), and `--lane=NAME` runs one lane's tests.
scripts/test.sh runs both in one pytest, one test at a time: run as two
pytest processes at once, the host lane's bpftrace, cost and top tests
failed on the shared CPU (docs/development.md, Tiers).

  host   loads BPF programs into this machine's kernel and counts what its
         workloads do there (the default)
  guest  boots QEMU guests (tests/guest/harness.py) and loads nothing into
         this machine's kernel. Run alone (--lane=guest), its processes get
         no transparent huge pages (conftest.py: PR_SET_THP_DISABLE), so
         QEMU's guest memory adds nothing to the /proc/vmstat THP counts the
         host lane's tests compare exactly if those run meanwhile; a
         guest-lane test must not use the host's agent or tracefs
         (HOST_ONLY_FIXTURES)

  fast  the loop for every change (scripts/test.sh --fast, under five
        minutes with a warm cargo build): the static checks and the
        exact-count core, every signal once on one attach type against its
        oracle, on one shared agent; needs the Debian test packages of
        scripts/setup.sh --fast and no tool of the tools cache
  full  everything else (scripts/test.sh, which CI runs, runs both): the
        second attach type, the deployments, the guests, the real node,
        real Prometheus servers, the degradation and trust tests
"""

TIERS = {
    "fast": "the loop for every change: static checks and the exact-count core (scripts/test.sh --fast)",
    "full": "the rest of the whole suite (scripts/test.sh runs both tiers)",
}
MARKER = "tier"
LANES = {
    "host": "tests of this machine's kernel (the default lane)",
    "guest": "tests in QEMU guests only, loading nothing into this machine's kernel",
}
LANE_MARKER = "lane"
DEFAULT_LANE = "host"
# Fixtures that load programs into, or read, this machine's kernel: a guest-
# lane test may run while the host lane's tests count, so it must not use them.
HOST_ONLY_FIXTURES = {
    "agent": "the host's shared agent",
    "tracefs": "the host's tracefs, for bpftrace",
}
# Fixtures whose builds only the whole suite's set-up makes (scripts/test.sh
# without --fast): a fast test must not need them.
FULL_ONLY_FIXTURES = {
    "faults_bin": "the fault-injection build",
    "agent_bin_arm64": "the arm64 cross build",
}


def tier_of(item):
    """The tier of a collected test (the closest `tier` marker's name), or
    None when it has none."""
    marker = item.get_closest_marker(MARKER)
    if marker is None or len(marker.args) != 1:
        return None
    return marker.args[0]


def lane_of(item):
    """The lane of a collected test (the closest `lane` marker's name, else
    DEFAULT_LANE); None when the marker does not name exactly one."""
    marker = item.get_closest_marker(LANE_MARKER)
    if marker is None:
        return DEFAULT_LANE
    return marker.args[0] if len(marker.args) == 1 else None


def _needs(item, fixtures):
    """Which of `fixtures` ({name: what}) the test asks for, as "name (what)"."""
    return [f"{name} ({what})" for name, what in fixtures.items() if name in getattr(item, "fixturenames", ())]


def lane_problem(item):
    """Why a collected test's lane is wrong, or None."""
    lane = lane_of(item)
    if lane not in LANES:
        return f"{item.nodeid}: unknown lane {lane!r} (lanes: {', '.join(LANES)})"
    if lane == "guest":
        needs = _needs(item, HOST_ONLY_FIXTURES)
        if needs:
            return (f"{item.nodeid}: a guest-lane test needs {', '.join(needs)}, which the host lane's "
                    "tests use: leave it in the host lane")
    return None


def tier_problems(items):
    """Why the collected tests cannot run as tiered, one line per test
    without a known tier or in a wrong lane (empty when every test has one
    and is in its lane)."""
    problems = []
    for item in items:
        lane = lane_problem(item)
        if lane:
            problems.append(lane)
        tier = tier_of(item)
        if tier is None:
            problems.append(f"{item.nodeid}: no tier: mark it @pytest.mark.tier(\"fast\" or \"full\") "
                            "(or its module: pytestmark = pytest.mark.tier(...))")
        elif tier not in TIERS:
            problems.append(f"{item.nodeid}: unknown tier {tier!r} (tiers: {', '.join(TIERS)})")
        elif tier == "fast":
            needs = _needs(item, FULL_ONLY_FIXTURES)
            if needs:
                problems.append(f"{item.nodeid}: a fast test needs {', '.join(needs)}, which scripts/test.sh "
                                "--fast does not build: mark it @pytest.mark.tier(\"full\")")
    return problems
