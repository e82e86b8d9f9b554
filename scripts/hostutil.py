"""Helpers the standalone scripts (soak.py, fleet-sim.py) share: the
end-to-end tests' (tests/e2e/helpers/host.py), but a script without a
cgroup2 mount exits."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from helpers import host  # noqa: E402
from helpers.host import free_port  # noqa: E402,F401


def cgroup2_root():
    """Mount point of the cgroup2 hierarchy; exits when there is none."""
    return host.cgroup2_root() or sys.exit(f"{Path(sys.argv[0]).name}: no cgroup2 mount")
