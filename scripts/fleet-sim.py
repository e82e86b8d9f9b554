#!/usr/bin/env python3
"""Fleet simulation: what N slowpath agents cost the Prometheus that scrapes
them, for N = 10, 100, 1,000 on one machine.

    scripts/fleet-sim.sh [--nodes 10,100,1000] [--minutes 3] [--out DIR]

1. Records a busy node: the real agent (no pid label, as a fleet runs it)
   while tests/e2e/busynode.py runs 360 processes in 40 cgroups hitting every
   signal; its /metrics page is saved as DIR/busy-node.prom.
2. For each N: a static target on loopback serves that page as N nodes
   (Prometheus scrapes one URL N times, each with its own instance label;
   counters keep growing at the rates they had), and a fresh real Prometheus
   scrapes them every 15 s with the shipped rules (recording rules and
   alerts) evaluated every 15 s, for --minutes. Then it reads Prometheus's
   own metrics: head series, resident memory, the rule groups' evaluation
   time; and times the fleet dashboard's query (top 10 pods by timer
   wakeups) on the recorded series and on the raw counters.
3. Writes DIR/fleet.csv and DIR/fleet.png (gnuplot) and prints a table with
   the projection to 10,000 nodes (linear in N, from the 1,000-node run).

Loopback only. Needs prometheus and gnuplot (scripts/setup.sh --test)."""

import argparse
import csv
import http.server
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "scripts"))
import busynode  # noqa: E402
from hostutil import cgroup2_root, free_port  # noqa: E402

RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
INTERVAL = 15
FLEET_QUERY = "topk(10, namespace_pod:slowpath_timer_wakeups:rate5m)"
RAW_QUERY = "topk(10, sum by (namespace, pod) (rate(slowpath_timer_wakeups_total[5m])))"


def wait_http(url, timeout=60, proc=None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.read()
        except OSError:
            if proc is not None and proc.poll() is not None:
                sys.exit(f"fleet-sim: {proc.args[0]} exited {proc.returncode}")
            if time.monotonic() > deadline:
                sys.exit(f"fleet-sim: {url} did not answer")
            time.sleep(0.2)


def record_busy_node(agent_bin, workload_bin, out):
    """The agent's page while a busy node runs (step 1)."""
    port = free_port()
    log = open(out / "agent.log", "wb")
    agent = subprocess.Popen([str(agent_bin), f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT)
    base, dirs = busynode.make_pods(cgroup2_root())
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=agent)
        with tempfile.TemporaryDirectory() as tmp:
            busynode.run(workload_bin, dirs, Path(tmp))
        time.sleep(1.5)
        page = wait_http(f"http://127.0.0.1:{port}/metrics").decode()
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        log.close()
        busynode.remove_pods(base, dirs)
    (out / "busy-node.prom").write_text(page)
    return page


class Page:
    """The recorded page, served with counters growing at a steady rate (as
    if each had counted for 10 minutes when recorded)."""

    COUNTER = re.compile(r"(_total|_bucket|_count|_sum)$")

    def __init__(self, text):
        self.lines = []  # (prefix, base, per second) or a literal line
        for line in text.splitlines():
            if not line or line.startswith("#"):
                self.lines.append(line)
                continue
            prefix, value = line.rsplit(" ", 1)
            name = re.split(r"[{ ]", prefix, maxsplit=1)[0]
            base = float(value)
            rate = base / 600 if self.COUNTER.search(name) else 0.0
            self.lines.append((prefix + " ", base, rate))
        self.start = time.monotonic()
        self.series = sum(1 for x in self.lines if isinstance(x, tuple))

    def render(self):
        t = time.monotonic() - self.start
        out = []
        for x in self.lines:
            if isinstance(x, str):
                out.append(x)
            else:
                prefix, base, rate = x
                out.append(f"{prefix}{base + rate * t:.17g}")
        return ("\n".join(out) + "\n").encode()


def serve(page):
    """The static target; returns (server, port)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = page.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def prom_query(base, expr):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as resp:
        body = json.load(resp)
    return time.monotonic() - started, body["data"]["result"]


def own_metrics(base):
    """Prometheus's own metrics (from its /metrics page), summed by name."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    sums = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return sums


def one_fleet(nodes, target_port, minutes, workdir):
    """Prometheus scraping `nodes` copies of the target (step 2)."""
    workdir.mkdir(parents=True, exist_ok=True)
    configs = [{"targets": [f"127.0.0.1:{target_port}"], "labels": {"instance": f"node-{i:05d}"}}
               for i in range(nodes)]
    (workdir / "rules.yaml").write_text(RULES.read_text())
    (workdir / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {INTERVAL}s, evaluation_interval: {INTERVAL}s, scrape_timeout: 10s}}\n"
        "rule_files: [rules.yaml]\n"
        + "scrape_configs: " + json.dumps([{"job_name": "slowpath", "static_configs": configs}]) + "\n")
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/-/ready", proc=prom)
        time.sleep(60 * minutes)
        metrics = own_metrics(base)
        row = {
            "nodes": nodes,
            "head_series": int(metrics["prometheus_tsdb_head_series"]),
            "rss_mib": metrics["process_resident_memory_bytes"] / 2**20,
            "rule_eval_seconds": metrics["prometheus_rule_group_last_duration_seconds"],
            "targets_up": int(float(prom_query(base, 'count(up{job="slowpath"} == 1)')[1][0]["value"][1])),
        }
        # the query a fleet dashboard runs, best of three, on recorded and raw series
        row["fleet_query_seconds"] = min(prom_query(base, FLEET_QUERY)[0] for _ in range(3))
        row["raw_query_seconds"] = min(prom_query(base, RAW_QUERY)[0] for _ in range(3))
        return row
    finally:
        prom.terminate()
        prom.wait(timeout=60)
        log.close()


def plot(csv_path, png_path):
    script = f"""
set terminal png size 1000,420
set output '{png_path}'
set datafile separator ','
set key autotitle columnhead left top
set logscale x
set xlabel 'nodes (slowpath agents scraped)'
set multiplot layout 1,2
set ylabel 'Prometheus head series / memory (MiB)'
set logscale y
plot '{csv_path}' using 1:2 with linespoints title 'head series', '' using 1:3 with linespoints title 'RSS (MiB)'
set ylabel 'seconds'
plot '{csv_path}' using 1:4 with linespoints title 'rule evaluation', \\
     '' using 1:6 with linespoints title 'fleet query (recorded)', '' using 1:7 with linespoints title 'same, raw'
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--out", type=Path, default=Path("fleet-out"))
    ap.add_argument("--agent", type=Path, default=REPO / "target" / "release" / "slowpath")
    ap.add_argument("--workload", type=Path, default=REPO / "tests" / "workloads" / "bin" / "sp-workload")
    ap.add_argument("--page", type=Path, help="a recorded page to use instead of recording one")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    text = args.page.read_text() if args.page else record_busy_node(args.agent, args.workload, args.out)
    page = Page(text)
    print(f"fleet-sim: one busy node exposes {page.series} series", flush=True)
    server, port = serve(page)
    rows = []
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            row = one_fleet(n, port, args.minutes, args.out / f"prometheus-{n}")
            rows.append(row)
            print(f"fleet-sim: {n} nodes: {row['head_series']} head series, {row['rss_mib']:.0f} MiB, "
                  f"rules {row['rule_eval_seconds'] * 1000:.1f} ms, fleet query "
                  f"{row['fleet_query_seconds'] * 1000:.1f} ms (raw {row['raw_query_seconds'] * 1000:.1f} ms), "
                  f"{row['targets_up']} targets up", flush=True)
    finally:
        server.shutdown()
    columns = ["nodes", "head_series", "rss_mib", "rule_eval_seconds", "targets_up", "fleet_query_seconds",
               "raw_query_seconds"]
    with open(args.out / "fleet.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.4f}" if isinstance(r[k], float) else r[k]) for k in columns})
    plot(args.out / "fleet.csv", args.out / "fleet.png")
    last = rows[-1]
    scale = 10_000 / last["nodes"]
    print(f"fleet-sim: projected to 10,000 nodes (x{scale:.0f} the {last['nodes']}-node run): "
          f"{last['head_series'] * scale / 1e6:.1f}M head series, {last['rss_mib'] * scale / 1024:.0f} GiB, "
          f"rules {last['rule_eval_seconds'] * scale:.1f} s per {INTERVAL} s evaluation")
    print(f"fleet-sim: wrote {args.out / 'fleet.csv'} and {args.out / 'fleet.png'}")


if __name__ == "__main__":
    main()
