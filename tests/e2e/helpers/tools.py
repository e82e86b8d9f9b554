"""The tools tests/deploy/install-tools.sh builds once and caches (Prometheus 3,
Thanos, helm, ...)."""

import functools
import subprocess
from pathlib import Path

from helpers.paths import REPO

INSTALL_TOOLS = REPO / "tests" / "deploy" / "install-tools.sh"


@functools.cache
def tools_cache():
    """The cache tests/deploy/install-tools.sh fills (Prometheus 3, Thanos,
    helm, ...): about 15 min the first time, then cached; scripts/setup.sh
    --test runs it."""
    out = subprocess.run(["bash", str(INSTALL_TOOLS)], capture_output=True, text=True)
    assert out.returncode == 0, f"{INSTALL_TOOLS.name} failed: {out.stderr[-3000:]}"
    return Path(out.stdout.strip().splitlines()[-1])
