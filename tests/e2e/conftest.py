"""Shared fixtures of the end-to-end tests.

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
users still run, Debian's Prometheus 2.42 as well (`prometheus_release`).
"""

import base64
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
WORKLOAD_SRC = REPO / "tests" / "workloads" / "sp-workload.c"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: loads BPF programs into the kernel")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def agent_bin():
    path = Path(os.environ.get("SLOWPATH_BIN", REPO / "target" / "release" / "slowpath"))
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


def populated_zones(zoneinfo):
    """Zones with present pages in `zoneinfo` (the text of /proc/zoneinfo):
    a manual compaction (compact_node()) runs compact_zone() on each."""
    return sum(1 for n in re.findall(r"^\s+present\s+(\d+)", zoneinfo, re.M) if int(n) > 0)


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
    if "SP_WORKLOAD" in os.environ:
        return Path(os.environ["SP_WORKLOAD"])
    out = REPO / "tests" / "workloads" / "bin" / "sp-workload"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["gcc", "-O2", "-fno-omit-frame-pointer", "-Wall", "-Werror", "-pthread", str(WORKLOAD_SRC), "-o", str(out)],
        check=True,
    )
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scrape:
    """One parsed /metrics page."""

    def __init__(self, text):
        self.text = text
        self.samples = [
            s for fam in text_string_to_metric_families(text) for s in fam.samples
        ]

    def select(self, name, **labels):
        want = {k: str(v) for k, v in labels.items()}
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in want.items())
        ]

    def value(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        return sum(s.value for s in self.select(name, **labels))


class Agent:
    """A running slowpath process. With `ssl_context` it is reached over
    https (the context holds the CA and any client certificate), with `auth`
    (user, password) every request carries basic auth."""

    ssl_context = None
    auth = None

    def __init__(self, binary, args, log_path, prefix=(), ssl_context=None, auth=None):
        self.port = free_port()
        self.ssl_context = ssl_context
        self.auth = auth
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [*prefix, str(binary), f"--web.listen-address=127.0.0.1:{self.port}", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready()

    def get(self, path, timeout=10):
        request = urllib.request.Request(self.url + path)
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as resp:
            return resp.status, resp.read().decode()

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.log_text()}")
            try:
                status, _ = self.get("/readyz", timeout=1)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"agent not ready after {timeout}s: {self.log_text()}")

    def scrape(self):
        status, text = self.get("/metrics")
        assert status == 200
        return Scrape(text)

    def log_text(self):
        # stop() closes the log: its failure message must still show it
        if not self.log.closed:
            self.log.flush()
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, timeout=5):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="module", params=["tp-btf", "raw-tp"])
def agent(request, agent_bin, tmp_path_factory):
    """The agent with per-pid series, once per attach type."""
    log = tmp_path_factory.mktemp("agent") / "agent.log"
    a = Agent(
        agent_bin,
        ["--metrics.pid-label", f"--bpf.attach-type={request.param}", "--canary.interval=1s"],
        log,
    )
    a.attach_type = request.param.replace("-", "_")
    yield a
    assert a.stop() == 0, a.log_text()


def bpf_fd_ids(pid, kind):
    """Ids of the BPF objects of `kind` ("prog" or "map") that process `pid`
    holds open, from its fdinfo."""
    ids = set()
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            m = re.search(rf"^{kind}_id:\s+(\d+)$", fd.read_text(), re.M)
        except OSError:  # closed meanwhile
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


# Our programs as bpftool shows them (names are cut at 15 characters).
OUR_PROGRAMS = ("sys_enter_", "sched_process_e", "mm_page_alloc_", "mm_compaction_b", "mm_compaction_e", "cgroup_mkdir_")


def our_program_ids():
    """Ids of loaded BPF programs named like ours (any slowpath instance)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out) if p.get("name", "").startswith(OUR_PROGRAMS)}


def run_agent(agent_bin, *args, prefix=(), timeout=20):
    """Run the agent to its exit (for flags that must stop it)."""
    port = free_port()
    return subprocess.run(
        [*prefix, str(agent_bin), f"--web.listen-address=127.0.0.1:{port}", *args],
        capture_output=True, text=True, timeout=timeout,
    )


def error_line(result):
    """The last line on stderr, checked to exist."""
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert lines, "no message on stderr"
    return lines[-1]


def wait_unloaded(ids, timeout=5.0):
    """The kernel frees a closed program after an RCU grace period: poll."""
    deadline = time.monotonic() + timeout
    while ids & our_program_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_workload(workload_bin, *args, strace=None):
    """Run the workload to completion; returns its pid (and strace counts
    by syscall when `strace` is a path for `strace -f -c -o`)."""
    cmd = [str(workload_bin), *map(str, args)]
    if strace is not None:
        cmd = ["strace", "-f", "-c", "-o", str(strace), *cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    if strace is None:
        return pid
    return pid, strace_counts(Path(strace).read_text())


def strace_counts(text):
    """{syscall: calls} from an `strace -c` summary."""
    counts = {}
    for line in text.splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(fields) >= 5 and fields[-1] != "total" and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def cgroup2_root():
    """Mount point of the cgroup2 hierarchy (None on a v1-only host)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    return None


INSTALL_TOOLS = REPO / "tests" / "deploy" / "install-tools.sh"


@dataclasses.dataclass(frozen=True)
class PrometheusRelease:
    """One Prometheus release: its server and promtool binaries (paths)."""
    name: str  # "3" or "2.42": the test id
    server: str
    promtool: str

    def version(self):
        """What `prometheus --version` says, e.g. "3.16.0"."""
        out = subprocess.run([self.server, "--version"], capture_output=True, text=True, check=True)
        return re.search(r"version (\S+)", out.stdout + out.stderr).group(1)


@functools.cache
def tools_cache():
    """The cache tests/deploy/install-tools.sh fills (Prometheus 3, Thanos,
    helm, ...): about 15 min the first time, then cached; scripts/setup.sh
    --test runs it."""
    out = subprocess.run(["bash", str(INSTALL_TOOLS)], capture_output=True, text=True)
    assert out.returncode == 0, f"{INSTALL_TOOLS.name} failed: {out.stderr[-3000:]}"
    return Path(out.stdout.strip().splitlines()[-1])


@functools.cache
def prometheus_release(name="3"):
    """Prometheus 3 (from `tools_cache()`) or Debian's 2.42 ("2.42", apt
    package prometheus)."""
    if name == "3":
        bin_dir = tools_cache() / "prometheus3" / "bin"
        return PrometheusRelease("3", str(bin_dir / "prometheus"), str(bin_dir / "promtool"))
    assert name == "2.42", name
    server, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert server and promtool, "Debian's prometheus missing: apt-get install prometheus (scripts/setup.sh --test)"
    return PrometheusRelease("2.42", server, promtool)


@pytest.fixture(scope="session", params=["3", "2.42"], ids=lambda name: f"prometheus{name}")
def release(request):
    """Each Prometheus release the tests run: 3.x and Debian's 2.42."""
    return prometheus_release(request.param)


@contextlib.contextmanager
def prometheus_server(workdir, agent_port, job="slowpath", rule_files=(), scrape_configs=None,
                      release=None, netns=None):
    """A real Prometheus (`release`, a PrometheusRelease; Prometheus 3 when
    None) on loopback scraping the agent every second (and evaluating
    `rule_files`, paths relative to `workdir`, every second); yields its
    base URL once it has scraped the agent in `job`. `scrape_configs` (a
    list of dicts) replaces the one plain job. With `netns` (a
    k8s_node.NetNS) it runs in that network namespace, whose loopback the
    URL is on: query it through netns.call."""
    release = release or prometheus_release("3")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if scrape_configs is None:
        scrape_configs = [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]}]
    (workdir / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: {json.dumps([str(r) for r in rule_files])}\n"
        f"scrape_configs: {json.dumps(scrape_configs)}\n"
    )
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [release.server, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=netns.enter if netns else None,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        query = urllib.parse.urlencode({"query": f'up{{job="{job}"}} == 1'})
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (workdir / "prometheus.log").read_text()
            try:
                if prom_get(f"{base}/api/v1/query?{query}", netns)["data"]["result"]:
                    break
            except (OSError, ValueError):
                pass
            assert time.monotonic() < deadline, (workdir / "prometheus.log").read_text()
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def prom_get(url, netns=None):
    """A Prometheus API answer (JSON), from this network namespace or
    `netns`'s."""
    def get():
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.load(resp)

    return netns.call(get) if netns else get()


def vmstat():
    return {
        k: int(v)
        for k, v in (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    }


TRACEFS = Path("/sys/kernel/tracing")


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


def wait_ready(bpftrace):
    """Read a bpftrace's stdout up to the "ready" its BEGIN prints (after
    "Attaching N probes..."): its probes are attached from then on."""
    for line in bpftrace.stdout:
        if line.strip() == "ready":
            return
    bpftrace.wait()
    raise AssertionError(f"bpftrace exited {bpftrace.returncode}: {bpftrace.stderr.read()}")


class TimerOracle:
    """An independent count of timer wakeups: bpftrace, on the tracepoints
    alone (no slowpath code), counting each sched:sched_waking made on a CPU
    while an hrtimer callback runs there, by woken thread id:
    `with TimerOracle() as oracle: ...` then `oracle.wakeups([tid, ...])`.
    Needs the `tracefs` fixture."""

    SCRIPT = """
tracepoint:timer:hrtimer_expire_entry { @depth[cpu] = @depth[cpu] + 1; }
tracepoint:timer:hrtimer_expire_exit /@depth[cpu] > 0/ { @depth[cpu] = @depth[cpu] - 1; }
tracepoint:sched:sched_waking /@depth[cpu] > 0/ { @wakeups[args->pid] = count(); }
BEGIN { printf("ready\\n"); }
"""

    def __enter__(self):
        self.proc = subprocess.Popen(["bpftrace", "-B", "line", "-e", self.SCRIPT], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        wait_ready(self.proc)
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=30)
        self.by_tid = {int(t): int(n) for t, n in re.findall(r"@wakeups\[(\d+)\]: (\d+)", out)}

    def wakeups(self, tids):
        return sum(self.by_tid.get(t, 0) for t in tids)


def thp_enabled():
    """Whether transparent huge pages can be allocated on faults here."""
    return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()


def doctor_report(agent_bin, *args, duration="2s"):
    """`slowpath doctor --format=json` with `args`: the parsed report; the
    doctor must exit 0."""
    out = subprocess.run([str(agent_bin), "doctor", f"--duration={duration}", "--format=json", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def prom_query(base, expr, netns=None):
    """An instant query of the Prometheus server at `base` (in `netns`, a
    k8s_node.NetNS, when given): its result list."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return prom_get(url, netns)["data"]["result"]
