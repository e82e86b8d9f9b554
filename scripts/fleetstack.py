"""The metrics backends of the fleet simulation (scripts/fleet-sim.py) and its
test (tests/e2e/test_fleet_backend.py), each run as real processes on
loopback, scraping a list of targets with the shipped rules:

- `Single`: one Prometheus server scraping every node and evaluating the
  recording and alert rules itself (today's deployment).
- `Thanos`: the horizontally scalable one. Two Prometheus servers in agent
  mode split the nodes between them (`hashmod` of the instance label) and
  remote-write to two `thanos receive` (one hashring: each series is stored
  by one of them, the other forwards), `thanos query` answers PromQL over
  both receivers and the ruler, and `thanos rule` evaluates the shipped
  recording and alert rules through that query and keeps what it records.

Both expose `query_url` (the Prometheus HTTP API of the backend: what Grafana
and the fleet dashboard read) and `measure()`: series, ingest, memory and CPU
per component, rule evaluation time, from each component's own /metrics."""

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from hostutil import free_port

INTERVAL = 15  # scrape and rule evaluation interval, seconds
SHARDS = 2     # Prometheus agents, and thanos receivers


def wait_http(url, proc, timeout=120):
    """GET `url` until it answers 200; exits when `proc` dies first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.read()
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"fleet: {' '.join(map(str, proc.args[:2]))} exited {proc.returncode}"
                         f" (log: {getattr(proc, 'log_path', '?')})")
            if time.monotonic() > deadline:
                sys.exit(f"fleet: {url} did not answer in {timeout} s")
            time.sleep(0.2)


def own_metrics(base):
    """A component's own metrics (its /metrics page), summed by name."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    sums = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return sums


def query(base, expr, at=None):
    """(seconds taken, result) of an instant query through the HTTP API."""
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode(params)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        sys.exit(f"fleet: {base} refused {expr!r}: {e.read().decode()[:500]}")
    return time.monotonic() - started, body["data"]


def scrape_config(targets, shard=None):
    """One scrape job over `targets` ([(address, instance)]), the nodes of
    `shard` of SHARDS only when given."""
    job = {
        "job_name": "slowpath",
        "static_configs": [{"targets": [addr], "labels": {"instance": inst}} for addr, inst in targets],
    }
    if shard is not None:
        job["relabel_configs"] = [
            {"source_labels": ["instance"], "modulus": SHARDS, "target_label": "__tmp_shard",
             "action": "hashmod"},
            {"source_labels": ["__tmp_shard"], "regex": str(shard), "action": "keep"},
        ]
    return job


class Stack:
    """Processes started by a backend, stopped in reverse order."""

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs = []    # (name, Popen)
        self.metrics = {}  # component name -> base URL of its /metrics
        self.started = time.monotonic()
        self.failures_at_ready = 0  # the ruler's failed evaluations before every store was up

    def spawn(self, name, argv, ready_url):
        path = self.workdir / f"{name}.log"
        log = open(path, "wb")
        proc = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.workdir)
        log.close()
        proc.log_path = path
        self.procs.append((name, proc))
        try:
            wait_http(ready_url, proc)
        except BaseException:
            self.stop()  # what started before it too: nothing is left running
            raise
        return proc

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def died(self):
        """Names of components that exited."""
        return [name for name, proc in self.procs if proc.poll() is not None]

    def usage(self, before):
        """{component: (RSS MiB, CPU cores since `before`)}; `before` from cpu_now()."""
        out = {}
        elapsed = time.monotonic() - before[0]
        for name, base in self.metrics.items():
            m = own_metrics(base)
            cpu = (m["process_cpu_seconds_total"] - before[1][name]) / elapsed
            out[name] = (m["process_resident_memory_bytes"] / 2**20, cpu)
        return out

    def cpu_now(self):
        return time.monotonic(), {n: own_metrics(b)["process_cpu_seconds_total"] for n, b in self.metrics.items()}


class Single(Stack):
    """One Prometheus: scrapes every node, evaluates the rules."""

    name = "prometheus"

    def __init__(self, workdir, prometheus, targets, rules_text):
        super().__init__(workdir)
        (self.workdir / "rules.yaml").write_text(rules_text)
        (self.workdir / "prometheus.yml").write_text(
            f"global: {{scrape_interval: {INTERVAL}s, evaluation_interval: {INTERVAL}s, scrape_timeout: 10s}}\n"
            "rule_files: [rules.yaml]\n"
            "scrape_configs: " + json.dumps([scrape_config(targets)]) + "\n")
        port = free_port()
        self.query_url = f"http://127.0.0.1:{port}"
        self.spawn("prometheus", [prometheus, f"--config.file={self.workdir / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={self.workdir / 'data'}",
                                  f"--web.listen-address=127.0.0.1:{port}"], f"{self.query_url}/-/ready")
        self.metrics = {"prometheus": self.query_url}
        self.ruler = self.query_url

    def measure(self, seconds):
        """Series, samples appended per second (over `seconds`), memory and
        CPU, rule evaluation: the one server's own metrics."""
        before, cpu = own_metrics(self.query_url), self.cpu_now()
        time.sleep(seconds)
        after = own_metrics(self.query_url)
        return {
            "series": int(after["prometheus_tsdb_head_series"]),
            "samples_per_second": (after["prometheus_tsdb_head_samples_appended_total"]
                                   - before["prometheus_tsdb_head_samples_appended_total"]) / seconds,
            "rule_eval_seconds": after["prometheus_rule_group_last_duration_seconds"],
            "rule_iterations_missed": int(after.get("prometheus_rule_group_iterations_missed_total", 0)),
            "remote_write_lag_seconds": 0.0,
            "components": self.usage(cpu),
        }


class Thanos(Stack):
    """Two Prometheus agents (hashmod shards) -> two thanos receive (one
    hashring) <- thanos query <- thanos rule (its results served back to the
    query)."""

    name = "thanos"

    def __init__(self, workdir, prometheus, thanos, targets, rules_text):
        super().__init__(workdir)
        (self.workdir / "rules.yaml").write_text(rules_text)
        grpc = [free_port() for _ in range(SHARDS)]
        http = [free_port() for _ in range(SHARDS)]
        write = [free_port() for _ in range(SHARDS)]
        rule_grpc, rule_http, query_http, query_grpc = (free_port() for _ in range(4))
        endpoints = [f"127.0.0.1:{g}" for g in grpc]
        (self.workdir / "hashrings.json").write_text(
            json.dumps([{"hashring": "default", "endpoints": endpoints}]))
        for i in range(SHARDS):
            self.spawn(f"receive-{i}", [
                thanos, "receive", f"--tsdb.path={self.workdir / f'receive-{i}'}",
                f"--grpc-address={endpoints[i]}", f"--http-address=127.0.0.1:{http[i]}",
                f"--remote-write.address=127.0.0.1:{write[i]}",
                f"--receive.capnproto-address=127.0.0.1:{free_port()}",
                f"--receive.local-endpoint={endpoints[i]}",
                f"--receive.hashrings-file={self.workdir / 'hashrings.json'}",
                "--receive.replication-factor=1", f'--label=receive_replica="{i}"',
                "--tsdb.retention=1d", "--log.level=warn",
            ], f"http://127.0.0.1:{http[i]}/-/ready")
            self.metrics[f"receive-{i}"] = f"http://127.0.0.1:{http[i]}"
        self.query_url = f"http://127.0.0.1:{query_http}"
        self.spawn("query", [
            thanos, "query", f"--http-address=127.0.0.1:{query_http}", f"--grpc-address=127.0.0.1:{query_grpc}",
            "--endpoint.sd-config=" + json.dumps({"endpoints": [
                {"address": e, "strict": True} for e in [*endpoints, f"127.0.0.1:{rule_grpc}"]]}),
            "--query.replica-label=receive_replica", "--query.replica-label=rule_replica",
            "--log.level=warn",
        ], f"{self.query_url}/-/ready")
        self.metrics["query"] = self.query_url
        self.ruler = f"http://127.0.0.1:{rule_http}"
        self.spawn("rule", [
            thanos, "rule", f"--data-dir={self.workdir / 'rule'}", f"--rule-file={self.workdir / 'rules.yaml'}",
            # evaluate one scrape interval back: the agents' remote write
            # sends in batches (up to 5 s late, more on a loaded machine), and
            # a rule that ran before a scrape's samples landed reads the
            # window short of its end: rates 1.2 % low in one CI run
            f"--eval-interval={INTERVAL}s", f"--rule-query-offset={INTERVAL}s",
            f"--query=http://127.0.0.1:{query_http}",
            f"--http-address=127.0.0.1:{rule_http}", f"--grpc-address=127.0.0.1:{rule_grpc}",
            '--label=rule_replica="0"', "--log.level=warn",
        ], f"{self.ruler}/-/ready")
        self.metrics["rule"] = self.ruler
        self.agents = []
        for i in range(SHARDS):
            config = {
                "global": {"scrape_interval": f"{INTERVAL}s", "scrape_timeout": "10s"},
                "scrape_configs": [scrape_config(targets, shard=i)],
                "remote_write": [{"url": f"http://127.0.0.1:{write[i]}/api/v1/receive"}],
            }
            (self.workdir / f"agent-{i}.yml").write_text(json.dumps(config))
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            self.spawn(f"agent-{i}", [
                prometheus, "--agent", f"--config.file={self.workdir / f'agent-{i}.yml'}",
                f"--storage.agent.path={self.workdir / f'agent-{i}'}", f"--web.listen-address=127.0.0.1:{port}",
            ], f"{base}/-/ready")
            self.metrics[f"agent-{i}"] = base
            self.agents.append(base)
        self.failures_at_ready = self.rule_failures_once_ready([*endpoints, f"127.0.0.1:{rule_grpc}"])

    def rule_failures_once_ready(self, addresses, timeout=120):
        """The ruler's failed evaluations once the query reaches every store.
        The ruler's first rounds, run before the query has found the
        ruler's own gRPC endpoint (strict, so the query refuses to answer
        without it), fail by the start-up order alone: they are counted
        here and left out of the run's failures."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{self.query_url}/api/v1/stores", timeout=10) as resp:
                stores = json.load(resp).get("data") or {}
            healthy = {s["name"] for kind in stores.values() for s in kind if not s.get("lastError")}
            if set(addresses) <= healthy:
                time.sleep(INTERVAL + 1)  # one evaluation round with every store reachable
                return int(own_metrics(self.ruler).get("prometheus_rule_evaluation_failures_total", 0))
            time.sleep(1)
        self.stop()
        sys.exit(f"fleet: thanos query did not reach {addresses} in {timeout} s (logs: {self.workdir})")

    def measure(self, seconds):
        """Series (the receivers' heads and the ruler's), samples appended
        per second by the receivers and the ruler (over `seconds`), memory and CPU per
        component, the ruler's evaluation time, and how far the agents'
        remote write lags behind their scrapes."""
        stores = [f"receive-{i}" for i in range(SHARDS)]

        def appended():  # stored by the receivers and recorded by the ruler
            return sum(own_metrics(self.metrics[s])["prometheus_tsdb_head_samples_appended_total"]
                       for s in [*stores, "rule"])

        before, cpu = appended(), self.cpu_now()
        time.sleep(seconds)
        rate = (appended() - before) / seconds
        rule = own_metrics(self.ruler)
        lag = 0.0
        for base in self.agents:
            m = own_metrics(base)
            lag = max(lag, m.get("prometheus_remote_storage_highest_timestamp_in_seconds", 0)
                      - m.get("prometheus_remote_storage_queue_highest_sent_timestamp_seconds", 0))
        series = sum(int(own_metrics(self.metrics[s])["prometheus_tsdb_head_series"]) for s in stores)
        return {
            "series": series + int(rule.get("prometheus_tsdb_head_series", 0)),
            "samples_per_second": rate,
            "rule_eval_seconds": rule["prometheus_rule_group_last_duration_seconds"],
            "rule_iterations_missed": int(rule.get("prometheus_rule_group_iterations_missed_total", 0)),
            "remote_write_lag_seconds": lag,
            "components": self.usage(cpu),
        }
