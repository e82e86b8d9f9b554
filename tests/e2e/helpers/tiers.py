"""The suite's tiers: every test carries exactly one, as the marker
`@pytest.mark.tier(NAME)` on the test, its class or its module (the
closest one counts), or on a parameter (`pytest.param(..., marks=...)`).
A test without one fails collection (conftest.py), and `--tier=NAME` runs
only that tier's tests.

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


def tier_problems(items):
    """Why the collected tests cannot run as tiered, one line per test
    without a known tier (empty when every test has one)."""
    problems = []
    for item in items:
        tier = tier_of(item)
        if tier is None:
            problems.append(f"{item.nodeid}: no tier: mark it @pytest.mark.tier(\"fast\" or \"full\") "
                            "(or its module: pytestmark = pytest.mark.tier(...))")
        elif tier not in TIERS:
            problems.append(f"{item.nodeid}: unknown tier {tier!r} (tiers: {', '.join(TIERS)})")
        elif tier == "fast":
            needs = [f"{name} ({what})" for name, what in FULL_ONLY_FIXTURES.items()
                     if name in getattr(item, "fixturenames", ())]
            if needs:
                problems.append(f"{item.nodeid}: a fast test needs {', '.join(needs)}, which scripts/test.sh "
                                "--fast does not build: mark it @pytest.mark.tier(\"full\")")
    return problems
