"""The systemd unit and the Debian package.

- `systemd-analyze verify` of deploy/systemd/slowpath.service, and its
  `systemd-analyze security --offline=true` exposure (must stay <= 4.0, "OK").
- deploy/systemd/slowpath.default documents every SLOWPATH_* variable.
- The .deb (tests/deploy/build-deb.sh, cargo-deb) installed with apt into a
  container that runs a real systemd as PID 1: the package enables and starts
  the unit, the agent runs as a dynamic non-root user with exactly CAP_BPF and
  CAP_PERFMON, counts a workload started as another unit, counts itself under
  unit="slowpath.service", is restarted by systemd after a crash, takes its
  configuration from /etc/default/slowpath, stops cleanly (exit 0, BPF
  programs detached) and is purged by apt.

Container: `podman run --systemd=always --privileged --network=none IMAGE
/sbin/init` from localhost/slowpath-base:bookworm (tests/deploy/base-image.sh)
plus systemd, built once and cached as localhost/slowpath-systemd:bookworm-<hash>.
--privileged because the agent needs bpf() (podman's default seccomp profile and
capability set refuse it) and systemd needs writable cgroups. No --pid=host:
systemd must be PID 1 of its own PID namespace to run as the system manager.
The BPF programs see every task of the host anyway (tgids and cgroup ids are
the kernel's), so the assertions select series by their cgroup/unit labels,
which are unique to this container. --network=none: nothing inside needs the
network (the image holds the package's dependencies, apt installs the local
file), and the agent's :9891 is private to the container, so parallel runs
and other agents on the host never collide.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from helpers.agent import Scrape
from helpers.bpf import bpf_fd_ids
from helpers.paths import REPO
from helpers.tools import base_image, cargo_tools

pytestmark = pytest.mark.tier("full")

UNIT = REPO / "deploy" / "systemd" / "slowpath.service"
CONF = REPO / "tests" / "deploy" / "containers.conf"
MAX_EXPOSURE = 4.0
CAP_BPF, CAP_PERFMON = 39, 38


def need(tool):
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} not installed: run scripts/setup.sh --test")


def run(cmd, check=True, timeout=120, **kwargs):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=timeout, **kwargs)


def podman(*args, check=True, timeout=120):
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    result = run(["podman", *args], check=False, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result


def unit_settings(text):
    """{key: [values]} of a unit file (comments and sections ignored)."""
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


# --- the unit file, offline ---------------------------------------------------


def test_unit_verifies(agent_bin, tmp_path):
    """`systemd-analyze verify` also checks that ExecStart's binary exists and
    is executable; /usr/bin/slowpath exists only where the package is
    installed (test_package_in_systemd_container verifies the installed unit
    in place). Here: a copy of the unit whose ExecStart is the binary under
    test, every other line unchanged."""
    need("systemd-analyze")
    text = UNIT.read_text()
    assert re.search(r"^ExecStart=/usr/bin/slowpath$", text, re.M)
    copy = tmp_path / "slowpath.service"
    copy.write_text(re.sub(r"^ExecStart=/usr/bin/slowpath$", f"ExecStart={Path(agent_bin).resolve()}",
                           text, flags=re.M))
    result = run(["systemd-analyze", "verify", str(copy)], check=False)
    # Unknown keys and bad values are only warnings (exit 0): none allowed.
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def test_unit_hardening(record_property):
    need("systemd-analyze")
    result = run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(UNIT)], check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Unknown" not in out and "ignoring" not in out, out
    m = re.search(r"Overall exposure level for slowpath\.service: (\d+\.\d+) (\S+)", out)
    assert m, out
    exposure = float(m.group(1))
    record_property("exposure", exposure)
    print(f"systemd-analyze security exposure: {exposure} {m.group(2)}")
    assert exposure <= MAX_EXPOSURE, out

    s = unit_settings(UNIT.read_text())
    # Exactly the two capabilities, nothing else, and no way to gain more.
    assert s["CapabilityBoundingSet"] == ["CAP_BPF CAP_PERFMON"]
    assert s["AmbientCapabilities"] == ["CAP_BPF CAP_PERFMON"]
    assert s["NoNewPrivileges"] == ["yes"]
    assert s["DynamicUser"] == ["yes"] or "User" in s
    assert s["Type"] == ["simple"] and s["Restart"] == ["on-failure"]
    assert s["EnvironmentFile"] == ["-/etc/default/slowpath"]
    for key in ("MemoryHigh", "MemoryMax", "CPUQuota"):
        assert key in s, key
    # Options that would break the agent (see the unit's comments).
    assert "PrivateUsers" not in s and "PrivateNetwork" not in s
    assert s.get("ProtectProc", ["default"]) == ["default"]


def test_default_config_documents_every_variable(agent_bin):
    """deploy/systemd/slowpath.default (/etc/default/slowpath) lists every
    SLOWPATH_* variable of `slowpath --help`, all commented out: the
    installed file documents the configuration and changes nothing."""
    text = (REPO / "deploy" / "systemd" / "slowpath.default").read_text()
    assigned = [line for line in text.splitlines() if re.match(r"^\s*[A-Z_]+=", line)]
    assert assigned == [], assigned
    documented = set(re.findall(r"^#(SLOWPATH_[A-Z0-9_]+)=", text, re.M))
    help_text = run([str(agent_bin), "--help"]).stdout
    variables = set(re.findall(r"\[env: (SLOWPATH_[A-Z0-9_]+)=", help_text))
    assert variables, help_text
    assert variables <= documented, f"not in slowpath.default: {sorted(variables - documented)}"


# --- the package in a real systemd ------------------------------------------------


@pytest.fixture(scope="module")
def deb(agent_bin):
    """The .deb of the binary under test (cargo-deb packages target/release/slowpath)."""
    assert Path(agent_bin).resolve() == (REPO / "target/release/slowpath").resolve(), \
        "the package is built from target/release/slowpath"
    cargo_tools()  # build-deb.sh would install cargo-deb
    out = run([str(REPO / "tests/deploy/build-deb.sh"), "--no-build"], timeout=900, cwd=REPO)
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.is_file(), out.stderr
    return path


@pytest.fixture(scope="module")
def systemd_image():
    """Base image + systemd (tests/deploy/base-image.sh systemd: its tag
    hashes the package list)."""
    need("podman")
    return base_image("systemd")


class Container:
    def __init__(self, name):
        self.name = name

    def sh(self, script, check=True, timeout=60):
        return podman("exec", self.name, "sh", "-c", script, check=check, timeout=timeout)

    def show(self, unit, *props):
        out = self.sh(f"systemctl show -p {','.join(props)} {unit}").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_for(self, what, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.journal()}")
            time.sleep(0.2)

    def wait_ready(self, restarts=0, port=9891, timeout=30):
        """Until /readyz answers; fails at once if the agent exits (restarts)."""
        def ready():
            props = self.show("slowpath", "ActiveState", "NRestarts")
            if props["ActiveState"] == "failed" or int(props["NRestarts"]) > restarts:
                raise AssertionError(f"slowpath failed: {props}\n{self.journal()}")
            return self.sh(f"curl -fsS http://127.0.0.1:{port}/readyz", check=False).returncode == 0
        self.wait_for("/readyz", ready, timeout=timeout)

    def journal(self):
        return self.sh("journalctl --no-pager -u slowpath | tail -50", check=False).stdout

    def scrape(self, path="/metrics"):
        return self.sh(f"curl -fsS http://127.0.0.1:9891{path}").stdout


@pytest.fixture
def container(systemd_image):
    name = f"slowpath-systemd-{uuid.uuid4().hex[:10]}"
    c = Container(name)
    try:
        podman("run", "-d", "--name", name, "--systemd=always", "--privileged", "--network=none",
               systemd_image, "/sbin/init")
        c.id = podman("inspect", "-f", "{{.Id}}", name).stdout.strip()
        c.wait_for("systemd to boot", lambda: c.sh("systemctl is-system-running", check=False).stdout.strip()
                   in ("running", "degraded"))
        yield c
    finally:
        # systemd stops its units on SIGRTMIN+3 (podman's stop signal with --systemd=always).
        podman("stop", "-t", "15", name, check=False, timeout=60)
        podman("rm", "-f", "-t", "0", name, check=False, timeout=60)


def host_pid(container_pid, init_host_pid):
    """Host pid of the process that has `container_pid` in the container's PID namespace."""
    ns = os.readlink(f"/proc/{init_host_pid}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns/pid") != ns:
                continue
            nspid = re.search(r"^NSpid:\s+(.*)$", (entry / "status").read_text(), re.M).group(1).split()
        except (OSError, AttributeError):
            continue
        if int(nspid[-1]) == container_pid:
            return int(entry.name)
    raise AssertionError(f"no host process for container pid {container_pid}")


def loaded_prog_ids():
    out = run(["bpftool", "prog", "show"]).stdout
    return {int(m.group(1)) for m in re.finditer(r"^(\d+): ", out, re.M)}


def test_package_in_systemd_container(container, deb, tmp_path):
    c = container
    podman("cp", str(deb), f"{c.name}:/tmp/slowpath.deb")
    install = c.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/slowpath.deb",
                   timeout=120)
    assert "Setting up slowpath" in install.stdout, install.stdout + install.stderr

    # Files where the package puts them; /etc/default/slowpath is a conffile.
    c.sh("test -x /usr/bin/slowpath && test -f /lib/systemd/system/slowpath.service "
         "&& test -f /etc/default/slowpath")
    # The README's relative links open in the installed copy too.
    c.sh("test -f /usr/share/doc/slowpath/README.md && test -f /usr/share/doc/slowpath/docs/runbook.md "
         "&& test -f /usr/share/doc/slowpath/docs/troubleshooting.md")
    # The man pages (generated from the flags) and the shell completions.
    for page in ["slowpath", "slowpath-top", "slowpath-doctor"]:
        manual = c.sh(f"MANPAGER=cat MANWIDTH=100 man {page}").stdout
        assert manual.startswith(f"{page}(1)") and "SYNOPSIS" in manual, manual[:500]
    assert "--web.listen-address" in c.sh("MANPAGER=cat MANWIDTH=200 man slowpath").stdout
    complete = c.sh("bash -c 'source /usr/share/bash-completion/completions/slowpath && complete -p slowpath'")
    assert "-F _slowpath slowpath" in complete.stdout, complete.stdout
    c.sh("test -s /usr/share/zsh/vendor-completions/_slowpath "
         "&& test -s /usr/share/fish/vendor_completions.d/slowpath.fish")
    conffiles = c.sh("cat /var/lib/dpkg/info/slowpath.conffiles").stdout
    assert "/etc/default/slowpath" in conffiles and "/etc/slowpath/web-config.yml" in conffiles
    verify = c.sh("systemd-analyze verify slowpath.service 2>&1", check=False)
    assert verify.returncode == 0 and verify.stdout == "", verify.stdout
    # The live manager's view of the hardening, same limit as offline.
    security = c.sh("systemd-analyze security --no-pager slowpath.service").stdout
    assert float(re.search(r"Overall exposure level for slowpath\.service: (\d+\.\d+)", security)
                 .group(1)) <= MAX_EXPOSURE

    # The postinst enabled and started it; starting again is a no-op.
    assert c.sh("systemctl is-enabled slowpath").stdout.strip() == "enabled"
    c.sh("systemctl start slowpath")
    c.wait_ready()

    props = c.show("slowpath", "ActiveState", "SubState", "ExecMainPID", "MainPID", "NRestarts",
                   "FragmentPath", "User", "DynamicUser", "EnvironmentFiles")
    assert props["ActiveState"] == "active" and props["SubState"] == "running", props
    pid = int(props["ExecMainPID"])
    assert pid > 1 and props["MainPID"] == props["ExecMainPID"], props
    assert props["NRestarts"] == "0", props
    assert props["FragmentPath"] in ("/lib/systemd/system/slowpath.service",
                                     "/usr/lib/systemd/system/slowpath.service"), props
    assert props["User"] == "slowpath" and props["DynamicUser"] == "yes", props
    assert props["EnvironmentFiles"].startswith("/etc/default/slowpath (ignore_errors=yes)"), props
    assert c.sh(f"cat /proc/{pid}/comm").stdout.strip() == "slowpath"

    # Non-root, exactly CAP_BPF + CAP_PERFMON, no new privileges, seccomp on.
    status = c.sh(f"cat /proc/{pid}/status").stdout
    field = lambda k: re.search(rf"^{k}:\s+(.*)$", status, re.M).group(1).split()  # noqa: E731
    uid = int(field("Uid")[0])
    assert 61184 <= uid <= 65519, f"not a dynamic user uid: {uid}"
    want = f"{(1 << CAP_BPF) | (1 << CAP_PERFMON):016x}"
    for cap_set in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert field(cap_set) == [want], (cap_set, status)
    assert field("NoNewPrivs") == ["1"] and field("Seccomp") == ["2"], status

    # A workload as a unit of its own (a oneshot unit file: systemd-run would
    # need D-Bus, which the image does not have), then the agent's view of it.
    workload = f"sp-workload-{uuid.uuid4().hex[:8]}"
    unit_file = tmp_path / f"{workload}.service"
    unit_file.write_text("[Service]\nType=oneshot\n"
                         "ExecStart=/bin/bash -c 'for i in {1..1000}; do /bin/true; done'\n")
    podman("cp", str(unit_file), f"{c.name}:/run/systemd/system/{workload}.service")
    c.sh(f"systemctl daemon-reload && systemctl start {workload}", timeout=120)
    assert c.show(workload, "Result")["Result"] == "success"
    # The agent's cgroup as it names it: its v2 path relative to the cgroup
    # namespace root, which is where its cgroup2 mount is rooted too (the
    # whole host tree here, with libpod-<container id> in it; the container's
    # subtree under a private cgroup namespace). Unique to this container
    # either way: BPF sees every agent on the host, only this one is there.
    agent_cgroup = re.search(r"^0::(.*)$", c.sh(f"cat /proc/{pid}/cgroup").stdout, re.M).group(1)
    assert agent_cgroup.endswith("/system.slice/slowpath.service"), agent_cgroup
    workload_cgroup = agent_cgroup.rsplit("/", 1)[0] + f"/{workload}.service"

    def scraped():
        scrape = Scrape(c.scrape())
        bash = scrape.select("slowpath_rt_sigprocmask_calls_total", comm="bash", cgroup=workload_cgroup)
        own = [s for s in scrape.samples if s.labels.get("comm") == "slowpath"
               and s.labels.get("cgroup") == agent_cgroup]
        return (scrape, bash, own) if bash and own else None

    scrape, bash, own = c.wait_for("the workload's and the agent's own series", scraped, timeout=20)
    # ~10 rt_sigprocmask per fork+exec from bash: at least one per child.
    assert sum(s.value for s in bash) >= 1000, bash
    assert {s.labels["unit"] for s in bash} == {f"{workload}.service"}, bash
    # The agent counts itself, under its own unit.
    assert {s.labels["unit"] for s in own} == {"slowpath.service"}, own
    assert {s.value for s in scrape.select("slowpath_probe_attached")} == {1}
    # What the sandbox must still let it read: /sys (ProtectKernelTunables=
    # makes it read-only), /proc/stat and /proc/self (process_* metrics).
    host_clocksource = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    assert scrape.value("slowpath_clocksource_current_info", clocksource=host_clocksource) == 1
    assert scrape.select("slowpath_thp_settings_info")
    assert scrape.value("process_start_time_seconds") > 0
    assert scrape.value("slowpath_scrape_errors_total") == 0

    # The BPF programs it holds, seen from the host.
    init_pid = int(podman("inspect", "-f", "{{.State.Pid}}", c.name).stdout.strip())
    agent_host_pid = host_pid(pid, init_pid)
    progs = bpf_fd_ids(agent_host_pid, "prog")
    assert progs, "the agent holds no BPF programs"

    # Restart=on-failure: a crash brings it back (after RestartSec=5s).
    c.sh("systemctl kill -s SIGKILL slowpath")
    c.wait_for("a restart", lambda: c.show("slowpath", "NRestarts")["NRestarts"] == "1", timeout=20)
    c.wait_ready(restarts=1)
    new = c.show("slowpath", "ActiveState", "ExecMainPID")
    assert new["ActiveState"] == "active" and int(new["ExecMainPID"]) != pid, new
    if shutil.which("bpftool"):
        c.wait_for("the killed agent's programs to be unloaded", lambda: not progs & loaded_prog_ids(), timeout=10)

    # /etc/default/slowpath is the configuration (EnvironmentFile=).
    c.sh("echo SLOWPATH_WEB_LISTEN_ADDRESS=127.0.0.1:9899 >> /etc/default/slowpath && systemctl restart slowpath")
    c.wait_ready(restarts=1, port=9899)
    assert c.sh("curl -fsS http://127.0.0.1:9891/readyz", check=False).returncode != 0
    progs = bpf_fd_ids(host_pid(int(c.show("slowpath", "ExecMainPID")["ExecMainPID"]), init_pid), "prog")

    # Clean stop: SIGTERM, exit 0, programs detached.
    started = time.monotonic()
    c.sh("systemctl stop slowpath")
    stop_seconds = time.monotonic() - started
    done = c.show("slowpath", "ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    assert done == {"ActiveState": "inactive", "Result": "success", "ExecMainCode": "1",
                    "ExecMainStatus": "0"}, (done, c.journal())
    assert stop_seconds < 5, stop_seconds
    assert "detaching BPF programs" in c.journal()
    if shutil.which("bpftool"):
        c.wait_for("the programs to be unloaded after stop", lambda: not progs & loaded_prog_ids(), timeout=10)

    # apt removes it: unit gone, nothing left running.
    c.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y slowpath", timeout=120)
    c.sh("test ! -e /usr/bin/slowpath && test ! -e /lib/systemd/system/slowpath.service "
         "&& test ! -e /etc/default/slowpath && test ! -e /etc/slowpath/web-config.yml")
    assert c.sh("systemctl is-active slowpath", check=False).stdout.strip() in ("inactive", "unknown")


def test_package_web_config_through_credentials(container, deb, tmp_path):
    """The shipped web config, uncommented as its comments say, with the key
    readable by root and the ssl-cert group only, given to the dynamic user
    by SupplementaryGroups=: https with basic auth answers, without the
    password 401, plain http nothing; a new password needs no restart."""
    c = container
    podman("cp", str(deb), f"{c.name}:/tmp/slowpath.deb")
    c.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/slowpath.deb", timeout=120)
    c.wait_ready()
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(tmp_path / "tls.key"), "-out", str(tmp_path / "tls.crt")])
    password = "scrape me"
    hashed = run(["htpasswd", "-nbBC", "10", "", password]).stdout.strip().lstrip(":")
    for name in ("tls.crt", "tls.key"):
        podman("cp", str(tmp_path / name), f"{c.name}:/etc/slowpath/{name}")
    c.sh("getent group ssl-cert || groupadd --system ssl-cert")  # what the ssl-cert package does
    c.sh("chown root:root /etc/slowpath/tls.crt && chgrp ssl-cert /etc/slowpath/tls.key "
         "&& chmod 640 /etc/slowpath/tls.key")
    # Uncomment the example: the TLS section and one user.
    shipped = c.sh("cat /etc/slowpath/web-config.yml").stdout
    assert "#  cert_file: tls.crt" in shipped and "#basic_auth_users:" in shipped
    config = tmp_path / "web-config.yml"
    config.write_text("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                      f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    podman("cp", str(config), f"{c.name}:/etc/slowpath/web-config.yml")
    # The drop-in, as the shipped file's comments give it.
    dropin = "\n".join(line[4:] for line in shipped.splitlines() if line.startswith("#   ")) + "\n"
    assert "SupplementaryGroups=ssl-cert" in dropin, dropin
    c.sh("mkdir -p /etc/systemd/system/slowpath.service.d")
    (tmp_path / "web.conf").write_text(dropin)
    podman("cp", str(tmp_path / "web.conf"), f"{c.name}:/etc/systemd/system/slowpath.service.d/web.conf")
    c.sh("systemctl daemon-reload && systemctl restart slowpath")
    podman("cp", str(tmp_path / "tls.crt"), f"{c.name}:/tmp/ca.crt")

    def https(auth):
        cmd = f"curl -sS -o /dev/null -w '%{{http_code}}' --cacert /tmp/ca.crt {auth} https://127.0.0.1:9891/metrics"
        return c.sh(cmd, check=False).stdout.strip()

    c.wait_for("https with the password", lambda: https(f"-u 'prometheus:{password}'") == "200")
    assert https("") == "401"
    assert https("-u 'prometheus:wrong'") == "401"
    assert c.sh("curl -fsS http://127.0.0.1:9891/metrics", check=False).returncode != 0
    # /healthz needs no password (probes), over TLS still.
    assert c.sh("curl -fsS --cacert /tmp/ca.crt https://127.0.0.1:9891/healthz").stdout == "ok\n"
    assert "TLS, basic auth on (1 users)" in c.journal()
    # Still a dynamic user; the key unreadable to anyone else.
    pid = int(c.show("slowpath", "ExecMainPID")["ExecMainPID"])
    uid = int(re.search(r"^Uid:\s+(\d+)", c.sh(f"cat /proc/{pid}/status").stdout, re.M).group(1))
    assert 61184 <= uid <= 65519, uid
    assert c.sh("stat -c %a:%U:%G /etc/slowpath/tls.key").stdout.strip() == "640:root:ssl-cert"
    # A changed password is read on the next request, no restart.
    new_hash = run(["htpasswd", "-nbBC", "10", "", "rotated"]).stdout.strip().lstrip(":")
    config.write_text(config.read_text().replace(hashed, new_hash))
    podman("cp", str(config), f"{c.name}:/etc/slowpath/web-config.yml")
    assert https("-u 'prometheus:rotated'") == "200"
    assert https(f"-u 'prometheus:{password}'") == "401"
    assert c.show("slowpath", "ExecMainPID")["ExecMainPID"] == str(pid)


def test_arm64_deb_has_the_arm64_agent_and_the_same_dependencies(deb, agent_bin_arm64):
    """The arm64 package (cross build; its Depends are written out in
    agent/Cargo.toml because dpkg-shlibdeps cannot see arm64 libraries here)
    holds the arm64 binary and depends on what the amd64 package's computed
    Depends say."""
    out = run([str(REPO / "tests/deploy/build-deb.sh"), "--no-build", "--arch", "arm64"], timeout=300, cwd=REPO)
    arm64 = Path(out.stdout.strip().splitlines()[-1])
    field = lambda pkg, name: run(["dpkg-deb", "-f", str(pkg), name]).stdout.strip()
    assert field(arm64, "Architecture") == "arm64"
    assert field(arm64, "Package") == field(deb, "Package") == "slowpath"
    assert field(arm64, "Depends") == field(deb, "Depends"), "update [package.metadata.deb.variants.arm64]"
    listing = run(["dpkg-deb", "-c", str(arm64)]).stdout
    assert "./usr/lib/systemd/system/slowpath.service" in listing
    assert "./usr/share/man/man1/slowpath.1.gz" in listing and "completions/slowpath\n" in listing, listing
    with tempfile.TemporaryDirectory() as tmp:
        run(["dpkg-deb", "-x", str(arm64), tmp])
        header = (Path(tmp) / "usr/bin/slowpath").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
