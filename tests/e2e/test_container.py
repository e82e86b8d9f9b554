"""The container image, built with podman from a local base image and run
by docs/install.md's podman command as written, which runs it as the
DaemonSet does: host PID namespace, non-root (uid 65534, file capabilities)
under no_new_privs with the chart's capabilities, read-only root
filesystem, seccomp unconfined, host /sys and cgroup tree read-only. A
workload on the host must show up in the container's /metrics. deploy/build-image.sh builds it for amd64 and arm64
in one manifest list; the arm64 image (no emulation here to run it) is
checked for its binary, capabilities and libraries, and its binary is the
one test_guest.py runs in the arm64 guest."""

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from as_shipped import CAPABILITY_BITS, chart_capabilities
from helpers.agent import Agent, Scrape
from helpers.host import free_port
from helpers.paths import REPO

from helpers.tools import base_image
from helpers.workload import run_workload

pytestmark = [pytest.mark.tier("full"), pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed")]

CONF = REPO / "tests" / "deploy" / "containers.conf"
BASE = "localhost/slowpath-base:bookworm"
BASE_ARM64 = "localhost/slowpath-base:bookworm-arm64"
CARGO_VERSION = re.search(r'^version = "(.+)"$', (REPO / "agent/Cargo.toml").read_text(), re.M)[1]


def podman(*args, check=True, **kwargs):
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    return subprocess.run(["podman", *args], env=env, check=check, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def images(agent_bin, agent_bin_arm64):
    """{manifest, amd64, arm64}: the image names deploy/build-image.sh made."""
    env = {**os.environ, "CONTAINERS_CONF": str(CONF), "BASE_amd64": BASE, "BASE_arm64": BASE_ARM64}
    for arch in ["amd64", "arm64"]:
        base_image(arch)
    # The build copies the release binaries: they must be the ones under test.
    assert Path(agent_bin).resolve() == (REPO / "target/release/slowpath").resolve()
    assert Path(agent_bin_arm64).resolve() == (REPO / "target/aarch64-unknown-linux-gnu/release/slowpath").resolve()
    name = f"localhost/slowpath:test-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([str(REPO / "deploy/build-image.sh"), "--no-build", name], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [name, f"{name}-amd64", f"{name}-arm64"], out.stdout
    yield {"manifest": name, "amd64": f"{name}-amd64", "arm64": f"{name}-arm64"}
    podman("manifest", "rm", name, check=False)
    podman("rmi", "-f", f"{name}-amd64", f"{name}-arm64", check=False)


@pytest.fixture(scope="module")
def image(images):
    return images["amd64"]


def test_one_manifest_for_amd64_and_arm64(images):
    manifest = json.loads(podman("manifest", "inspect", images["manifest"]).stdout)
    assert sorted(m["platform"]["architecture"] for m in manifest["manifests"]) == ["amd64", "arm64"]
    for arch in ["amd64", "arm64"]:
        assert podman("image", "inspect", "--format", "{{.Architecture}}", images[arch]).stdout.strip() == arch


def test_arm64_image_holds_the_arm64_agent_with_its_capabilities_and_libelf(images):
    root = podman("image", "mount", images["arm64"]).stdout.strip()
    try:
        agent = Path(root) / "usr/bin/slowpath"
        header = agent.read_bytes()[:20]
        assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
        caps = subprocess.run(["getcap", str(agent)], capture_output=True, text=True).stdout
        assert "cap_bpf" in caps and "cap_perfmon" in caps and caps.strip().endswith("=p"), caps
        libs = Path(root) / "usr/lib/aarch64-linux-gnu"
        assert (libs / "libelf.so.1").exists() and (libs / "libz.so.1").exists() and (libs / "libc.so.6").exists()
        config = json.loads(podman("image", "inspect", images["arm64"]).stdout)[0]["Config"]
        assert config["User"] == "65534:65534" and config["Entrypoint"] == ["/usr/bin/slowpath"]
    finally:
        podman("image", "unmount", images["arm64"], check=False)


# The image's least: only CAP_BPF and CAP_PERFMON (no call sites, no
# memlock lift), for the release archive's image (test_release.py); the
# DaemonSet's whole set is the documented command's (below).
TWO_CAPABILITIES = [
    "--pid=host", "--network=host", "--read-only",
    "--cap-drop=all", "--cap-add=bpf,perfmon",
    "--security-opt", "seccomp=unconfined",
    "-v", "/sys:/host/sys:ro", "-e", "SLOWPATH_PATH_SYSFS=/host/sys",
]


def documented_podman_run():
    """The `podman run` of docs/install.md ("A container without
    Kubernetes"), as arguments after `podman`."""
    text = (REPO / "docs/install.md").read_text()
    section = text.split("## A container without Kubernetes", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```sh\n(podman run .*?)\n```", section, re.S)[1]
    return shlex.split(command.replace("\\\n", " "))[1:]


def container_agent(name, port, timeout=30):
    """helpers.agent.Agent's HTTP helpers for the agent in container NAME,
    listening on loopback PORT, once its /readyz answers 200 (the
    container's logs in the failure otherwise)."""
    agent = Agent.__new__(Agent)  # not started by Agent: only its url is set
    agent.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if agent.get("/readyz", timeout=1)[0] == 200:
                return agent
        except OSError:
            pass
        assert time.monotonic() < deadline, podman("logs", name, check=False).stderr
        time.sleep(0.1)


def test_image_runs_non_root_with_two_capabilities(image):
    out = podman("run", "--rm", "--entrypoint", "sh", image, "-c",
                 "id -u; getcap /usr/bin/slowpath 2>/dev/null || true; /usr/bin/slowpath --version").stdout
    assert out.splitlines()[0] == "65534"
    assert f"slowpath {CARGO_VERSION} (" in out


def test_the_documented_podman_command_runs_as_the_daemonset_does(image, workload_bin):
    """docs/install.md's podman command as written, but for the image (the
    test's build), the container's name and a loopback port: the agent runs
    as uid 65534 under no_new_privs with the chart's default capabilities
    (CAP_SYS_RESOURCE given up at start), reads the host's cgroup tree (a
    host process's series names its cgroup, as the DaemonSet's mount of
    /sys/fs/cgroup makes it) and counts a host workload."""
    args = documented_podman_run()
    assert args[:2] == ["run", "-d"] and args[-1].startswith("ghcr.io/slowpath/slowpath:")
    chart = {c.replace("_", "") for c in chart_capabilities()}
    added = {c.replace("_", "") for c in args[args.index("--cap-drop=all") + 1].removeprefix("--cap-add=").split(",")}
    assert added == chart, (added, chart)
    name = f"slowpath-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    args[args.index("--name") + 1] = name
    podman(*args[:-1], "-e", f"SLOWPATH_WEB_LISTEN_ADDRESS=127.0.0.1:{port}", "-e", "SLOWPATH_METRICS_PID_LABEL=true",
           image)
    try:
        agent = container_agent(name, port)
        status = Path(f"/proc/{podman('inspect', '-f', '{{.State.Pid}}', name).stdout.strip()}/status").read_text()
        assert re.search(r"^Uid:\t65534\b", status, re.M) and re.search(r"^NoNewPrivs:\t1$", status, re.M), status
        eff = int(re.search(r"^CapEff:\t(\w+)$", status, re.M)[1], 16)
        assert {bit for bit in range(64) if eff >> bit & 1} == {CAPABILITY_BITS[c] for c in chart_capabilities()
                                                                if c != "sys_resource"}, status
        pid = run_workload(workload_bin, "clock-raw", 4321)
        scrape = Scrape(agent.get("/metrics")[1])
        series = scrape.select("slowpath_clock_syscalls_total", pid=pid)
        assert sum(s.value for s in series) == 4321
        own = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        assert {s.labels["cgroup"] for s in series} == {own}, ([s.labels for s in series], own)
        assert {s.value for s in scrape.select("slowpath_probe_attached")} == {1}
    finally:
        podman("stop", "-t", "5", name, check=False)
        logs = podman("logs", name, check=False).stderr
        podman("rm", "-f", name, check=False)
    assert "detaching BPF programs" in logs


# The runtime's default seccomp profile, named: podman's, from Debian's
# containers-common (golang-github-containers-common 0.50), which allows
# bpf(2) only with CAP_SYS_ADMIN, as Docker's and containerd's before 1.7
# did: the agent's error names the override. The chart's default
# (RuntimeDefault) under containerd 2.4's profile runs in test_real_node.py.
RUNTIME_DEFAULT_SECCOMP = Path("/usr/share/containers/seccomp.json")


def test_default_seccomp_profile_gets_an_actionable_error(image):
    rules = json.loads(RUNTIME_DEFAULT_SECCOMP.read_text())["syscalls"]
    bpf = [(r["action"], r.get("includes", {}).get("caps")) for r in rules if "bpf" in r["names"]]
    assert ("SCMP_ACT_ALLOW", ["CAP_SYS_ADMIN"]) in bpf, bpf
    result = podman("run", "--rm", "--pid=host", "--network=host", "--cap-drop=all", "--cap-add=bpf,perfmon",
                    "--security-opt", f"seccomp={RUNTIME_DEFAULT_SECCOMP}",
                    image, "--web.listen-address=127.0.0.1:0", check=False)
    assert result.returncode == 1
    assert "seccomp" in result.stderr.splitlines()[-1]


def test_without_the_capabilities_the_error_names_them(image):
    result = podman("run", "--rm", "--pid=host", "--network=host", "--security-opt", "seccomp=unconfined",
                    image, "--web.listen-address=127.0.0.1:0", check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("slowpath: error: missing capability CAP_BPF and CAP_PERFMON")
