"""What scripts/setup.sh --test builds once for the suite, found ready or the
test fails naming that command (nothing is built inside a test):

- tools_cache(): the tools tests/deploy/install-tools.sh builds and caches
  (Prometheus 3, Thanos, helm, ...)
- built(name): tests/workloads/bin/NAME, a workload tests/workloads/build.sh
  built from the current sources
- base_image(kind): the local base image tests/deploy/base-image.sh made
- cargo_tools(): cargo-deb and cargo-cyclonedx at the pins of the scripts that
  use them (tests/deploy/build-deb.sh, scripts/release.sh)
"""

import functools
import re
import subprocess
from pathlib import Path

import pytest

from helpers.paths import REPO

SETUP = "scripts/setup.sh --test"
INSTALL_TOOLS = REPO / "tests" / "deploy" / "install-tools.sh"
BUILD_WORKLOADS = REPO / "tests" / "workloads" / "build.sh"
BASE_IMAGE = REPO / "tests" / "deploy" / "base-image.sh"
CARGO_TOOL = REPO / "scripts" / "cargo-tool.sh"
# crate: (the script that pins it, the pin's variable)
CARGO_PINS = {"cargo-deb": ("tests/deploy/build-deb.sh", "CARGO_DEB_VERSION"),
              "cargo-cyclonedx": ("scripts/release.sh", "CARGO_CYCLONEDX_VERSION")}


def _check(cmd, what):
    """Runs a --check command; fails the test with its complaint if it exits
    non-zero. Returns its stdout."""
    out = subprocess.run(["bash", *map(str, cmd)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"{what} missing or stale: {out.stderr.strip()[-2000:]}\nbuild it with: {SETUP}",
                    pytrace=False)
    return out.stdout


@functools.cache
def tools_cache():
    """The cache tests/deploy/install-tools.sh fills (Prometheus 3, Thanos,
    helm, ...; about 15 min cold, in scripts/setup.sh --test), checked
    complete and current."""
    out = _check([INSTALL_TOOLS, "--check"], "the tools of install-tools.sh")
    return Path(out.strip().splitlines()[-1])


def built(name):
    """tests/workloads/bin/NAME (a file, or a directory for the Java
    targets), checked current against its sources (build.sh --check)."""
    _check([BUILD_WORKLOADS, "--check", name], f"tests/workloads/bin/{name}")
    return REPO / "tests" / "workloads" / "bin" / name


def base_image(kind="amd64"):
    """The name of base-image.sh's image KIND (amd64, arm64, runtimes,
    systemd), checked present in podman's storage."""
    return _check([BASE_IMAGE, "--check", kind], f"the base image {kind}").strip()


def cargo_tools():
    """Checks cargo-deb and cargo-cyclonedx installed (scripts/cargo-tool.sh)
    at the versions their scripts pin: those scripts would install them."""
    for crate, (script, var) in CARGO_PINS.items():
        version = re.search(rf"^{var}=(\S+)", (REPO / script).read_text(), re.M)[1]
        _check([CARGO_TOOL, "--check", crate, version], f"{crate} {version}")
