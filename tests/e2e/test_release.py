"""A release as scripts/release.sh makes it, from a clean clone, and the
pieces a release is made of (workflows, one version string).

The module's fixture runs scripts/release.sh offline (the images' base is
the local one of tests/deploy/base-image.sh: no registry is reachable here)
on HEAD, what is committed:
  - in this checkout itself when it has no uncommitted change to a tracked
    file (CI's, a fresh clone of the submitted commit): the binaries that
    scripts/test.sh built (with SOURCE_DATE_EPOCH at the commit's time, as
    release.sh builds them) are current, so cargo only checks them, and
    dist/ is removed after the module;
  - else in a clone of HEAD in a temporary directory, with a copy of this
    checkout's target directory (CARGO_TARGET_DIR): the clone compiles
    slowpath itself for both architectures (rustc records the source path),
    but not its few hundred dependencies (about 5 more minutes).

Then:
  - every artifact is there and `sha256sum -c SHA256SUMS` passes;
  - the amd64 image, pulled from its OCI archive, runs the agent under podman
    as the DaemonSet does (uid 65534, only CAP_BPF and CAP_PERFMON) and
    serves /metrics naming this version; the multi-arch archive indexes
    linux/amd64 and linux/arm64;
  - the arm64 .deb holds an arm64 binary, the amd64 one an x86-64 binary;
    lintian reports neither an error nor a warning on either;
  - the chart package, rendered by helm, applies to a real API server and its
    DaemonSet is scheduled on both of its nodes (tests/deploy/k8s_cluster.py);
  - the SBOM is CycloneDX JSON naming the dependencies Cargo.lock pins;
  - a second run gives the same SHA256SUMS (reproducible packaging);
  - actionlint passes both workflows;
  - the version is the same in Cargo.toml, the chart, CHANGELOG.md, the
    docs' commands and `slowpath --version`.
"""

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from helpers.agent import Scrape
from helpers.host import free_port
from helpers.paths import REPO
from helpers.tools import base_image, cargo_tools, tools_cache
from helpers.workload import run_workload

sys.path.insert(0, str(REPO / "tests" / "deploy"))
from k8s_cluster import Cluster, ToolsUnavailable, tools_bin  # noqa: E402

import test_container as container  # noqa: E402  (its podman helpers; a module, so not collected twice)

pytestmark = pytest.mark.tier("full")

VERSION = re.search(r'^version = "(.+)"$', (REPO / "agent/Cargo.toml").read_text(), re.M)[1]
EM_X86_64, EM_AARCH64 = 62, 183


def committed(repo):
    """Whether `repo` has no uncommitted change to a tracked file (release.sh's
    own test: untracked and ignored files are not released)."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    return not status.strip()


@pytest.fixture(scope="module")
def release(tmp_path_factory, agent_bin, agent_bin_arm64):
    """{dir, image, clone, env}: dist/ of a release built from HEAD (in this
    checkout when it is committed, else in a clone: the module's docstring),
    the images' name (left in podman's storage by the script, removed
    after), the checkout it was built in and the script's environment."""
    work = tmp_path_factory.mktemp("release")
    env = {**os.environ, "CONTAINERS_CONF": str(container.CONF),
           "BASE_amd64": container.BASE, "BASE_arm64": container.BASE_ARM64,
           "PATH": f"{tools_cache()}/bin:{os.environ['PATH']}"}
    env.pop("SOURCE_DATE_EPOCH", None)  # release.sh's own: the commit's time
    if committed(REPO):
        clone = REPO
        env.pop("CARGO_TARGET_DIR", None)
    else:
        clone = work / "slowpath"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        target = work / "target"
        for sub in ["release", "aarch64-unknown-linux-gnu/release"]:
            (target / sub).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", "--reflink=auto", str(REPO / "target" / sub), str(target / sub)], check=True)
        env["CARGO_TARGET_DIR"] = str(target)
    print(f"scripts/release.sh in {'this checkout' if clone == REPO else 'a clone of HEAD'}")
    for arch in ["amd64", "arm64"]:
        base_image(arch)
    cargo_tools()  # release.sh would install them
    image = f"localhost/slowpath-release-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    out = subprocess.run([str(clone / "scripts/release.sh"), "--image", image], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=2400)
    print(f"scripts/release.sh: {time.monotonic() - started:.0f} s")
    try:
        assert out.returncode == 0, out.stderr[-5000:]
        yield {"dir": clone / "dist", "image": image, "clone": clone, "env": env}
    finally:
        container.podman("manifest", "rm", f"{image}:{VERSION}", check=False)
        container.podman("rmi", "-f", f"{image}:{VERSION}-amd64", f"{image}:{VERSION}-arm64", check=False)
        shutil.rmtree(work, ignore_errors=True)
        if clone == REPO:
            shutil.rmtree(REPO / "dist", ignore_errors=True)
            (REPO / "agent" / "slowpath.cdx.json").unlink(missing_ok=True)  # left by a failed SBOM step


def expected_artifacts():
    return {
        f"slowpath_{VERSION}-1_amd64.deb", f"slowpath_{VERSION}-1_arm64.deb",
        f"slowpath_{VERSION}_linux_amd64.oci.tar", f"slowpath_{VERSION}_linux_arm64.oci.tar",
        f"slowpath_{VERSION}_image.oci.tar", f"slowpath-{VERSION}.tgz", f"slowpath_{VERSION}.cdx.json",
        "RELEASE_NOTES.md", "SHA256SUMS",
    }


def test_every_artifact_with_checksums(release):
    dist = release["dir"]
    assert {p.name for p in dist.iterdir()} == expected_artifacts()
    check = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    summed = {line.split(None, 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines()}
    assert summed == expected_artifacts() - {"SHA256SUMS"}


def test_release_notes_are_the_changelog_entry(release):
    notes = (release["dir"] / "RELEASE_NOTES.md").read_text()
    changelog = (REPO / "CHANGELOG.md").read_text()
    entry = changelog.split(f"## [{VERSION}] - ", 1)[1].split("\n", 1)[1].split("\n## ", 1)[0]
    entry = "\n".join(line for line in entry.splitlines() if not re.match(r"^\[[^\]]+\]: ", line))
    assert notes.strip() == entry.strip()
    assert "### Added" in notes


def test_amd64_image_from_its_archive_serves_metrics_with_two_capabilities(release, workload_bin):
    archive = release["dir"] / f"slowpath_{VERSION}_linux_amd64.oci.tar"
    image_id = container.podman("pull", "-q", f"oci-archive:{archive}").stdout.strip().splitlines()[-1]
    name, port = f"slowpath-release-{uuid.uuid4().hex[:8]}", free_port()
    container.podman("run", "-d", "--name", name, *container.TWO_CAPABILITIES,
                     "-e", f"SLOWPATH_WEB_LISTEN_ADDRESS=127.0.0.1:{port}", "-e", "SLOWPATH_METRICS_PID_LABEL=true",
                     image_id)
    try:
        agent = container.container_agent(name, port)
        pid = container.podman("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
        status = Path(f"/proc/{pid}/status").read_text()
        assert "CapEff:\t000000c000000000" in status and "Uid:\t65534" in status
        workload = run_workload(workload_bin, "clock-raw", 1234)
        scrape = Scrape(agent.get("/metrics")[1])
        assert scrape.value("slowpath_clock_syscalls_total", pid=workload, comm="sp-workload") == 1234
        build = scrape.select("slowpath_build_info")
        assert [(s.labels["version"], s.labels["arch"]) for s in build] == [(VERSION, "x86_64")]
    finally:
        container.podman("rm", "-f", name, check=False)
        container.podman("rmi", image_id, check=False)


def test_multiarch_archive_indexes_both_architectures(release):
    with tarfile.open(release["dir"] / f"slowpath_{VERSION}_image.oci.tar") as tar:
        def blob(digest):
            return json.load(tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1]))

        top = json.load(tar.extractfile("index.json"))["manifests"]
        assert [m["annotations"]["org.opencontainers.image.ref.name"] for m in top] == [VERSION]
        manifests = blob(top[0]["digest"])["manifests"]
        assert sorted((m["platform"]["os"], m["platform"]["architecture"]) for m in manifests) == [
            ("linux", "amd64"), ("linux", "arm64")]
        names = set(tar.getnames())
        for m in manifests:  # every layer of both images is in the archive
            image = blob(m["digest"])
            for layer in [image["config"], *image["layers"]]:
                assert "blobs/sha256/" + layer["digest"].split(":", 1)[1] in names
            labels = blob(image["config"]["digest"])["config"]["Labels"]
            assert labels["org.opencontainers.image.version"] == VERSION


def deb_binary(deb):
    """usr/bin/slowpath of the .deb, its bytes."""
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.extractfile("./usr/bin/slowpath").read()


def test_released_binary_names_the_commit_and_its_date(release, tmp_path):
    """--version of the amd64 package's binary: HEAD's commit, and the
    date of SOURCE_DATE_EPOCH, which release.sh sets to the commit's time."""
    binary = tmp_path / "slowpath"
    binary.write_bytes(deb_binary(release["dir"] / f"slowpath_{VERSION}-1_amd64.deb"))
    binary.chmod(0o755)
    commit, date = subprocess.run(["git", "log", "-1", "--format=%h %cd", "--abbrev=7", "--date=format-local:%Y-%m-%d"],
                                  cwd=REPO, env={**os.environ, "TZ": "UTC"}, capture_output=True, text=True,
                                  check=True).stdout.split()
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"slowpath {VERSION} ({commit} {date})"


@pytest.mark.parametrize("arch,machine", [("amd64", EM_X86_64), ("arm64", EM_AARCH64)])
def test_deb_holds_its_architectures_binary(release, arch, machine):
    deb = release["dir"] / f"slowpath_{VERSION}-1_{arch}.deb"
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Architecture", "Version"], capture_output=True,
                            text=True, check=True).stdout
    assert fields.split() == ["Architecture:", arch, "Version:", f"{VERSION}-1"]
    header = deb_binary(deb)[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == machine


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_lintian_finds_no_error_or_warning(release, arch):
    deb = release["dir"] / f"slowpath_{VERSION}-1_{arch}.deb"
    out = subprocess.run(["lintian", "--fail-on", "none", str(deb)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    findings = [line for line in out.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    assert findings == [], "\n".join(findings)


def test_sbom_names_the_locked_dependencies(release):
    bom = json.loads((release["dir"] / f"slowpath_{VERSION}.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    assert (bom["metadata"]["component"]["name"], bom["metadata"]["component"]["version"]) == ("slowpath", VERSION)
    components = {(c["name"], c["version"]) for c in bom["components"]}
    lock = (REPO / "Cargo.lock").read_text()
    for crate in ["libbpf-rs", "libbpf-sys", "tokio", "prometheus", "blazesym", "clap", "rustls"]:
        locked = re.search(rf'name = "{crate}"\nversion = "([^"]+)"', lock)[1]
        assert (crate, locked) in components, crate
    # Only what the binary links: build-only crates such as libbpf-cargo are not in it.
    assert "libbpf-cargo" not in {name for name, _ in components}


@pytest.fixture(scope="module")
def cluster():
    try:
        bin_dir = tools_bin()
    except ToolsUnavailable as e:
        pytest.fail(f"Kubernetes tools unavailable: {e}")
    with Cluster(bin_dir) as c:
        yield c


def test_chart_package_applies_and_its_daemonset_is_scheduled_on_every_node(release, cluster):
    package = release["dir"] / f"slowpath-{VERSION}.tgz"
    with tarfile.open(package) as tar:
        chart = tar.extractfile("slowpath/Chart.yaml").read().decode()
    assert re.search(rf"^version: {re.escape(VERSION)}$", chart, re.M)
    assert re.search(rf"^appVersion: \"?{re.escape(VERSION)}\"?$", chart, re.M)
    ns = "slowpath-release"
    rendered = subprocess.run([str(tools_cache() / "bin/helm"), "template", "slowpath", str(package),
                               "--namespace", ns], capture_output=True, text=True, check=True).stdout
    assert f"image: ghcr.io/slowpath/slowpath:{VERSION}" in rendered
    cluster.apply_objects({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    applied = cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=rendered, check=False)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    nodes = sorted(cluster.node_names)
    deadline, pods = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=slowpath")["items"]
        if sorted(p["spec"].get("nodeName") or "" for p in pods) == nodes:
            break
        time.sleep(0.5)
    assert sorted(p["spec"].get("nodeName") or "" for p in pods) == nodes, cluster.diagnostics(15)
    ds = cluster.kubectl_json("get", "daemonset", "slowpath", "-n", ns)
    assert ds["status"]["desiredNumberScheduled"] == len(nodes)
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == f"ghcr.io/slowpath/slowpath:{VERSION}"


def test_a_second_run_gives_the_same_checksums(release):
    """Packaging is reproducible: release.sh again in the same checkout (its
    binaries already built) gives the same SHA256SUMS, although podman save
    and helm package stamp their archives with the current time (release.sh
    repacks them with SOURCE_DATE_EPOCH). Runs after the tests that read
    dist/, which it rewrites."""
    first = (release["dir"] / "SHA256SUMS").read_text()
    out = subprocess.run([str(release["clone"] / "scripts/release.sh"), "--image", release["image"]],
                         cwd=release["clone"], env=release["env"], capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-5000:]
    assert (release["dir"] / "SHA256SUMS").read_text() == first


WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_workflows_pass_actionlint():
    assert [w.name for w in WORKFLOWS] == ["ci.yml", "release.yml"]
    out = subprocess.run([str(tools_cache() / "bin/actionlint"), "-no-color", *map(str, WORKFLOWS)],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda w: w.name)
def test_workflows_grant_nothing_by_default_and_pin_actions_to_tags(workflow):
    text = workflow.read_text()
    assert re.search(r"^permissions: \{\}$", text, re.M), "workflow-wide permissions must be {}"
    jobs = text.split("\njobs:\n", 1)[1]
    job_names = re.findall(r"^  ([a-z0-9-]+):$", jobs, re.M)
    per_job = re.split(r"^  [a-z0-9-]+:$", jobs, flags=re.M)[1:]
    assert job_names and len(per_job) == len(job_names)
    for name, body in zip(job_names, per_job):
        assert "\n    permissions:\n" in body, f"job {name} has no permissions of its own"
    for use in re.findall(r"uses: (\S+)", text):
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+(\.\d+)*", use), f"{use}: pin to a release tag"


def test_one_version_everywhere(agent_bin):
    """agent/Cargo.toml's version is the chart's, CHANGELOG.md's newest
    entry's, the one every command in the docs names, and the binary's."""
    chart = (REPO / "deploy/helm/slowpath/Chart.yaml").read_text()
    assert re.search(r"^version: (.+)$", chart, re.M)[1] == VERSION
    assert re.search(r"^appVersion: \"?([^\"\n]+)\"?$", chart, re.M)[1] == VERSION
    newest = subprocess.run([str(REPO / "scripts/changelog.py"), "newest"], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert newest == VERSION
    assert subprocess.run([str(agent_bin), "--version"], capture_output=True, text=True,
                          check=True).stdout.startswith(f"slowpath {VERSION} (")
    # Versions written in the docs, the chart's comments and the manifests.
    patterns = [r"slowpath:(\d+\.\d+\.\d+)", r"slowpath_(\d+\.\d+\.\d+)", r"slowpath-(\d+\.\d+\.\d+)\.tgz",
                r"--version (\d+\.\d+\.\d+)", r"releases/download/v(\d+\.\d+\.\d+)", r"helm\.sh/chart: slowpath-(\S+)",
                r"app\.kubernetes\.io/version: \"?(\d+\.\d+\.\d+)", r"/blob/v(\d+\.\d+\.\d+)/docs/",
                r"slowpath/slowpath/v(\d+\.\d+\.\d+)/deploy/"]
    # ... and the alerts' runbook links (the running version's runbook), in
    # the rendered rules and the promtool cases that expect them.
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "deploy/helm/slowpath/values.yaml",
             *sorted((REPO / "deploy/kubernetes").glob("*.yaml")), *sorted((REPO / "deploy/prometheus").glob("*.yaml")),
             REPO / "deploy/helm/slowpath/templates/NOTES.txt", REPO / "deploy/build-image.sh",
             REPO / "deploy/mixin/rules.template.json", REPO / "tests/prometheus/slowpath-rules.test.yaml",
             REPO / "dashboards/provisioning/alerting/slowpath-alerts.yaml"]
    seen = {}
    for path in files:
        for pattern in patterns:
            for found in re.findall(pattern, path.read_text()):
                seen.setdefault(found, set()).add(path.relative_to(REPO).as_posix())
    assert VERSION in seen, "no document names the version"
    assert set(seen) == {VERSION}, {v: sorted(p) for v, p in seen.items() if v != VERSION}
    # Upgrades keep the user's values and take the new chart's defaults:
    # --reuse-values alone renders a key the new chart added as nil.
    bare = [path.relative_to(REPO).as_posix() for path in files if re.search(r"--reuse-values\b", path.read_text())]
    assert not bare, f"helm upgrade --reuse-values in {bare}: use --reset-then-reuse-values (Helm 3.14+)"
