"""Real Prometheus servers (3, from the tools cache, and Debian's 2.42) and
their HTTP API."""

import contextlib
import dataclasses
import functools
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from helpers.host import free_port
from helpers.tools import tools_cache


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


def prom_query(base, expr, netns=None):
    """An instant query of the Prometheus server at `base` (in `netns`, a
    k8s_node.NetNS, when given): its result list."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return prom_get(url, netns)["data"]["result"]
