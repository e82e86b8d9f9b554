#!/usr/bin/env python3
"""Fleet simulation: what N slowpath agents cost the metrics backend that
scrapes them, on one machine, for a single Prometheus and for a sharded,
horizontally scalable backend (scripts/fleetstack.py).

    scripts/fleet-sim.sh [--backend prometheus|thanos|both] [--nodes 10,100,1000]
                         [--minutes 3] [--backfill MINUTES] [--out DIR] [--check]

1. Records a busy node: the real agent (no pid label, as a fleet runs it)
   while tests/e2e/busynode.py runs 400 processes in 40 cgroups hitting every
   signal; its /metrics page is saved as DIR/busy-node.prom.
2. For each N: a static target on loopback serves that page as N nodes (one
   target per node, each with its own instance label; counters keep growing
   at the rates they had), scraped every 15 s by the backend, which
   evaluates the shipped recording and alert rules every 15 s:
   - prometheus: one Prometheus 3 server;
   - thanos: two Prometheus 3 agents (hashmod shards) remote-writing to two
     thanos receive (one hashring), thanos query over them, thanos rule
     evaluating the rules through that query;
   - both: the two at once, on the same targets.
   The nodes answer 503 until every backend is up, and with --backfill M
   until every backend has also been given the same M minutes of each
   node's history: a sample every 15 s up to 15 s before, on the very line
   the live counters then continue (no counter resets), in the labels a
   scrape gives (job, instance), remote-written to the single Prometheus
   (its remote-write receiver) and to the thanos receivers the agents write
   to (their hashring stores each series where the agents' samples of it
   go). Live scraping then appends to the same series.
   After --minutes of scraping it reads every component's own metrics
   (series, samples appended per second, memory and CPU per component,
   rule evaluation time, missed evaluations, remote-write lag; every
   backend over the same 30 s) and times the fleet dashboard's queries
   (all of them, and the top 10 pods by timer wakeups on the recorded
   series and on the raw counters) through the backend's query API.
3. With both backends it runs every fleet dashboard query on each at the same
   instant and compares the answers (the same series with values within
   1 %, ties of a topk compared by value), at up to two later instants again
   while some differ (an evaluation that raced a scrape's append: see
   COMPARE_TRIES); --check exits 1 when they differ at the last,
   a rule fails to evaluate, a target is down or a component dies. Answers
   agree once every 5-minute rate window is full: after --minutes 6, or
   after a short run with --backfill 6, whose history fills every window
   from the first scrape on. Either way the counters grow linearly and a
   full window's rate() is their slope exactly, whenever each backend took
   its samples, so the backends agree to rounding; a backend that lost its
   live samples would answer lower rates (rate() extrapolates at most half
   an interval past its last sample) and differ.
4. Writes DIR/fleet.csv and DIR/fleet.png (gnuplot), prints a table with the
   projection to 10,000 nodes (linear in N, from the largest run).

--backfill is for checks on a few nodes: the history is encoded here, in
Python (a few seconds for 20 nodes of 1,500 series and 6 minutes).
Loopback only. Needs Prometheus 3, Thanos and gnuplot (scripts/setup.sh
--test, tests/deploy/install-tools.sh)."""

import argparse
import csv
import decimal
import http.server
import json
import math
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "scripts"))
import busynode  # noqa: E402
import fleetstack  # noqa: E402
from fleetstack import INTERVAL, query, wait_http  # noqa: E402
from hostutil import cgroup2_root, free_port  # noqa: E402

RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
FLEET_DASHBOARD = REPO / "dashboards" / "slowpath-fleet.json"
TOOLS = Path("/var/cache/slowpath-tools")  # tests/deploy/install-tools.sh's default cache
FLEET_QUERY = "topk(10, namespace_pod:slowpath_timer_wakeups:rate5m)"
RAW_QUERY = "topk(10, sum by (namespace, pod) (rate(slowpath_timer_wakeups_total[5m])))"
TOLERANCE = 0.01  # relative difference of two answers' values still "the same"


def record_busy_node(agent_bin, workload_bin, out):
    """The agent's page while a busy node runs (step 1)."""
    port = free_port()
    log = open(out / "agent.log", "wb")
    agent = subprocess.Popen([str(agent_bin), f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT)
    base, dirs = busynode.make_pods(cgroup2_root())
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", agent)
        with tempfile.TemporaryDirectory() as tmp:
            busynode.run(workload_bin, dirs, Path(tmp))
        time.sleep(1.5)
        page = wait_http(f"http://127.0.0.1:{port}/metrics", agent).decode()
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        log.close()
        busynode.remove_pods(base, dirs)
    (out / "busy-node.prom").write_text(page)
    return page


class Page:
    """The recorded page, served with counters growing at a steady rate (as
    if each had counted for 10 minutes when recorded), and labelled as the
    agent labels series on Kubernetes (--kubernetes.enabled): the busy node's
    40 cgroups .../podN are pods of 8 namespaces."""

    COUNTER = re.compile(r"(_total|_bucket|_count|_sum)$")
    POD_CGROUP = re.compile(r'cgroup="[^"]*/pod(\d+)"')

    def __init__(self, text):
        self.lines = []  # (prefix, base, per second) or a literal line
        self.types = {}  # metric family -> its # TYPE
        for line in text.splitlines():
            if not line or line.startswith("#"):
                if line.startswith("# TYPE "):
                    _, _, family, kind = line.split(" ", 3)
                    self.types[family] = kind.strip()
                self.lines.append(line)
                continue
            prefix, value = line.rsplit(" ", 1)
            prefix = self.with_pod_labels(prefix)
            name = re.split(r"[{ ]", prefix, maxsplit=1)[0]
            base = float(value)
            rate = base / 600 if self.COUNTER.search(name) else 0.0
            self.lines.append((prefix + " ", base, rate))
        self.start, self.start_wall = time.monotonic(), time.time()
        self.series = sum(1 for x in self.lines if isinstance(x, tuple))
        self.serving = threading.Event()  # until set, every node answers 503 (not up yet)

    @classmethod
    def with_pod_labels(cls, prefix):
        """`prefix` (name and labels) with namespace, pod and container added
        to a per-process series (one with a cgroup label and without them):
        empty outside a pod, as the agent does."""
        if 'cgroup="' not in prefix or 'namespace="' in prefix:
            return prefix
        m = cls.POD_CGROUP.search(prefix)
        pod = (f'namespace="team-{int(m.group(1)) % 8}",pod="service-{m.group(1)}",container="main"'
               if m else 'namespace="",pod="",container=""')
        return prefix[:-1] + "," + pod + "}"

    def history(self, instance, times):
        """Remote-write series ([(sorted labels, [(ms, value)])]) of one node,
        as scraped by job slowpath at each of `times` (Unix seconds, before
        the page started): the values `render` would have given then."""
        out = []
        for x in self.lines:
            if isinstance(x, tuple):
                prefix, base, rate = x
                labels = self.as_scraped(parse_series(prefix.rstrip())) + [("instance", instance),
                                                                           ("job", "slowpath")]
                out.append((sorted(labels), [(round(t * 1000), base + rate * (t - self.start_wall))
                                             for t in times]))
        return out

    def as_scraped(self, labels):
        """`labels` as Prometheus 3 stores them when it scrapes them: the
        le of a histogram's buckets and the quantile of a summary as floats
        in its own notation (le="1" is le="1.0", le="0.000001" le="1e-06")."""
        name = labels[0][1]
        key = ("le" if self.types.get(name.removesuffix("_bucket")) == "histogram" else
               "quantile" if self.types.get(name) == "summary" else None)
        return [(k, go_float(v) if k == key else v) for k, v in labels]

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
            if not page.serving.is_set():
                self.send_error(503)
                return
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


LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_series(prefix):
    """[(label, value)] of an exposition line's `name{labels}`, with __name__
    and without empty labels (a scrape drops them)."""
    name, _, rest = prefix.partition("{")
    labels = [("__name__", name)]
    rest = rest.rstrip("}")
    for m in LABEL.finditer(rest):
        value = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        if value:
            labels.append((m.group(1), value))
    return labels


def go_float(text):
    """The float `text` as Go's strconv.FormatFloat(f, 'g', -1, 64) writes it,
    with ".0" added when that has neither a point nor an exponent."""
    f = float(text)
    if math.isinf(f) or math.isnan(f):
        return {math.inf: "+Inf", -math.inf: "-Inf"}.get(f, "NaN")
    if f == 0:
        return "0.0"
    d = decimal.Decimal(repr(abs(f))).normalize()
    _, digits, exp = d.as_tuple()
    power = len(digits) - 1 + exp
    if power < -4 or power >= 6:  # shortest: exponent notation outside [1e-4, 1e6)
        mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
        out = f"{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    else:
        out = format(d, "f")
        out += "" if "." in out else ".0"
    return ("-" if f < 0 else "") + out


def varint(n):
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def write_request(series):
    """A remote-write 1.0 WriteRequest (prompb) of `series`, snappy-framed as
    the protocol asks: as literals only, which every snappy decoder reads."""
    stamps = {}  # ms -> its encoded Sample field but the value

    def sample(ms, value):
        if ms not in stamps:
            ts = b"\x10" + varint(ms)
            stamps[ms] = (varint(2 << 3 | 2) + varint(9 + len(ts)) + b"\x09", ts)
        head, ts = stamps[ms]
        return head + struct.pack("<d", value) + ts

    body = b"".join(field(1, b"".join(
        [field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in labels]
        + [sample(ms, v) for ms, v in samples]))
        for labels, samples in series)
    out = bytearray(varint(len(body)))
    for i in range(0, len(body), 65536):
        chunk = body[i:i + 65536]
        out += bytes([61 << 2]) + (len(chunk) - 1).to_bytes(2, "little") + chunk
    return bytes(out)


def remote_write(url, body):
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
        "X-Prometheus-Remote-Write-Version": "0.1.0"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        sys.exit(f"fleet-sim: {url} refused the backfill: {e.code} {e.read().decode()[:500]}")


def backfill(stacks, page, targets, minutes):
    """Gives every backend the same `minutes` of each node's history before
    the nodes answer their first scrape: a sample every INTERVAL up to one
    INTERVAL ago, on the line the live counters continue, remote-written to
    the single Prometheus (its remote-write receiver) and to the thanos
    receivers the agents write to (their hashring routes each series).
    Nothing was scraped yet, so no series has a newer sample that would make
    these out of order."""
    now = time.time()
    steps = int(minutes * 60 // INTERVAL)
    times = [now - INTERVAL * k for k in range(steps, 0, -1)]
    urls = [stack.write_urls() for stack in stacks]
    for i, (_, instance) in enumerate(targets):
        body = write_request(page.history(instance, times))
        for u in urls:
            remote_write(u[i % len(u)], body)
    print(f"fleet-sim: backfilled {minutes:g} minutes ({steps} samples a series) of {len(targets)} nodes "
          f"into {', '.join(s.name for s in stacks)} in {time.time() - now:.0f} s", flush=True)


class Single(fleetstack.Single):
    """fleetstack's single Prometheus, with its remote-write receiver on for
    the backfill."""

    def spawn(self, name, argv, ready_url):
        return super().spawn(name, [*argv, "--web.enable-remote-write-receiver"], ready_url)

    def write_urls(self):
        return [f"{self.query_url}/api/v1/write"]


class Thanos(fleetstack.Thanos):
    def write_urls(self):
        """The receivers' remote-write URLs, from the agents' configurations."""
        return [json.loads((self.workdir / f"agent-{i}.yml").read_text())["remote_write"][0]["url"]
                for i in range(fleetstack.SHARDS)]

    def stop(self):
        """The agents first, while the receivers still take their last
        remote writes: stopped with them, an agent retries its flush for
        the whole minute of its flush deadline."""
        agents = [proc for name, proc in self.procs if name.startswith("agent-") and proc.poll() is None]
        for proc in agents:
            proc.send_signal(signal.SIGTERM)
        for proc in agents:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        super().stop()


def fleet_queries():
    """[(panel title, PromQL)] of every query of the fleet dashboard, with its
    variables at "All" (cluster=~".*", namespace=~".*")."""
    dash = json.loads(FLEET_DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            for t in p.get("targets", []):
                expr = re.sub(r"\$\{?(cluster|namespace)(:[a-z]+)?\}?", ".*", t["expr"])
                assert "$" not in expr, expr
                out.append((f"{p['title']} [{t['refId']}]", expr))
    return out


def time_queries(base):
    """Seconds per fleet dashboard query (best of three), and the top-10
    pods query on recorded and raw series."""
    best = {title: min(query(base, expr)[0] for _ in range(3)) for title, expr in fleet_queries()}
    return {
        "dashboard_queries_seconds": sum(best.values()),
        "slowest_dashboard_query_seconds": max(best.values()),
        "fleet_query_seconds": min(query(base, FLEET_QUERY)[0] for _ in range(3)),
        "raw_query_seconds": min(query(base, RAW_QUERY)[0] for _ in range(3)),
    }


def vector(data):
    """{labels (sorted tuple): value} of an instant query's vector or scalar."""
    if data["resultType"] == "scalar":
        return {(): float(data["result"][1])}
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}


def close(a, b):
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-9)


def same_answer(a, b):
    """Whether two answers agree: the same series with close values, or, when
    a topk picked other series among equals, the same values in order."""
    if a.keys() == b.keys():
        return all(close(a[k], b[k]) for k in a)
    va, vb = sorted(a.values()), sorted(b.values())
    return len(va) == len(vb) and all(close(x, y) for x, y in zip(va, vb))


# Instants compare() tries, one evaluation interval apart, before it
# reports a difference. A rule evaluation that runs while a scrape is still
# appending reads the window without that scrape's samples and extrapolates
# short of its end: seen once, the single Prometheus's first evaluation
# after the live scrapes began read 1.4 % under the slope, and every one
# after it the slope exactly. A backend that lost samples or evaluates a
# rule differently differs at every instant.
COMPARE_TRIES = 3


def compare(stacks):
    """Every fleet dashboard query on each backend at one instant (20 s ago,
    so that remote writes and rule evaluations have landed), again at a
    later instant while some differ (COMPARE_TRIES in all); returns the
    queries whose answers differ at the last, with both answers."""
    for attempt in range(1, COMPARE_TRIES + 1):
        problems, empty = compare_at(stacks, time.time() - 20)
        if not problems or attempt == COMPARE_TRIES:
            break
        print(f"fleet-sim: {len(problems)} fleet dashboard queries differ at one instant "
              f"(try {attempt} of {COMPARE_TRIES}): comparing again one evaluation later", flush=True)
        time.sleep(INTERVAL)
    total = len(fleet_queries())
    print(f"fleet-sim: {total} fleet dashboard queries compared at one instant: "
          f"{total - len(problems)} alike ({total - empty} with data), {len(problems)} differ", flush=True)
    return problems


def compare_at(stacks, at):
    """(the queries whose answers differ at Unix time `at`, with both
    answers; how many answered nothing on the first backend)."""
    problems, empty = [], 0
    for title, expr in fleet_queries():
        answers = [vector(query(s.query_url, expr, at)[1]) for s in stacks]
        empty += not answers[0]
        if not same_answer(*answers):
            problems.append(f"{title}: {expr}\n    " + "\n    ".join(
                f"{s.name}: {sorted(a.items())[:12]}" for s, a in zip(stacks, answers)))
    return problems, empty


def rule_health(stack):
    """Problems of the backend's ruler: rules that failed to evaluate once
    every store was up, and how many rules it evaluates."""
    m = fleetstack.own_metrics(stack.ruler)
    failures = int(m.get("prometheus_rule_evaluation_failures_total", 0)) - stack.failures_at_ready
    return failures, int(m.get("prometheus_rule_group_rules", 0))


def start(backend, workdir, targets, args):
    rules = RULES.read_text()
    if backend == "prometheus":
        return Single(workdir, args.prometheus, targets, rules)
    return Thanos(workdir, args.prometheus, args.thanos, targets, rules)


def measure_all(stacks):
    """Each stack's measure() over the same 2 * INTERVAL, side by side."""
    rows = [None] * len(stacks)

    def one(i):
        rows[i] = stacks[i].measure(2 * INTERVAL)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(stacks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if None in rows:
        sys.exit("fleet-sim: measuring a backend failed")
    return rows


def one_fleet(nodes, page, target_port, args):
    """Each chosen backend scraping `nodes` copies of the target, at once
    (step 2), after the backfill if asked; returns (rows, problems)."""
    targets = [(f"127.0.0.1:{target_port}", f"node-{i:05d}") for i in range(nodes)]
    backends = ["prometheus", "thanos"] if args.backend == "both" else [args.backend]
    stacks, rows, problems = [], [], []
    page.serving.clear()
    try:
        for b in backends:
            stacks.append(start(b, args.out / f"{b}-{nodes}", targets, args))
        if args.backfill:
            backfill(stacks, page, targets, args.backfill)
        page.serving.set()
        time.sleep(60 * args.minutes)
        for stack, measured in zip(stacks, measure_all(stacks)):
            up = query(stack.query_url, 'count(up{job="slowpath"} == 1) or vector(0)')[1]["result"]
            row = {"backend": stack.name, "nodes": nodes, "targets_up": int(float(up[0]["value"][1]))}
            row |= measured
            row |= time_queries(stack.query_url)
            failures, rules = rule_health(stack)
            row["rule_failures"], row["rules"] = failures, rules
            rows.append(row)
            report(row)
            if failures:
                problems.append(f"{stack.name}: {failures} rule evaluations failed (see {stack.workdir})")
            if row["targets_up"] != nodes:
                problems.append(f"{stack.name}: {row['targets_up']} of {nodes} targets up")
        if len(stacks) > 1:
            problems += compare(stacks)
            if len({r["rules"] for r in rows}) != 1:
                problems.append(f"rule counts differ: {[(r['backend'], r['rules']) for r in rows]}")
        for stack in stacks:
            problems += [f"{stack.name}: {name} exited (log in {stack.workdir})" for name in stack.died()]
        return rows, problems
    finally:
        for stack in stacks:
            stack.stop()


def report(row):
    parts = ", ".join(f"{name} {rss:.0f} MiB {cpu * 100:.0f} %" for name, (rss, cpu) in row["components"].items())
    print(f"fleet-sim: {row['backend']}, {row['nodes']} nodes: {row['series']} series, "
          f"{row['samples_per_second']:.0f} samples/s, rules {row['rule_eval_seconds'] * 1000:.0f} ms "
          f"({row['rule_iterations_missed']} missed, {row['rule_failures']} failed), "
          f"remote-write lag {row['remote_write_lag_seconds']:.1f} s, "
          f"fleet dashboard {row['dashboard_queries_seconds'] * 1000:.0f} ms for {len(fleet_queries())} queries "
          f"(slowest {row['slowest_dashboard_query_seconds'] * 1000:.0f} ms), top-10 pods "
          f"{row['fleet_query_seconds'] * 1000:.1f} ms (raw {row['raw_query_seconds'] * 1000:.0f} ms), "
          f"{row['targets_up']} targets up; per component (RSS, CPU of a core): {parts}", flush=True)


COLUMNS = ["backend", "nodes", "series", "samples_per_second", "rss_mib", "cpu_cores", "rule_eval_seconds",
           "rule_iterations_missed", "remote_write_lag_seconds", "targets_up", "dashboard_queries_seconds",
           "slowest_dashboard_query_seconds", "fleet_query_seconds", "raw_query_seconds", "components"]


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            comps = r["components"]
            out = r | {
                "rss_mib": sum(rss for rss, _ in comps.values()),
                "cpu_cores": sum(cpu for _, cpu in comps.values()),
                "components": " ".join(f"{n}:{rss:.0f}MiB:{cpu:.2f}" for n, (rss, cpu) in comps.items()),
            }
            w.writerow({k: (f"{out[k]:.4f}" if isinstance(out[k], float) else out[k]) for k in COLUMNS})


def plot(csv_path, png_path, backends):
    lines = {"series": [], "time": []}
    for i, b in enumerate(backends):
        sel = f"(strcol(1) eq '{b}' ? $%d : 1/0)"
        lines["series"] += [f"'{csv_path}' using 2:{sel % 3} with linespoints title '{b}: series'",
                            f"'{csv_path}' using 2:{sel % 5} with linespoints title '{b}: RSS (MiB), all components'"]
        lines["time"] += [f"'{csv_path}' using 2:{sel % 7} with linespoints title '{b}: rule evaluation'",
                          f"'{csv_path}' using 2:{sel % 11} with linespoints title '{b}: fleet dashboard (30 queries)'"]
    script = f"""
set terminal png size 1000,420
set output '{png_path}'
set datafile separator ','
set key left top
set logscale x
set xlabel 'nodes (slowpath agents scraped)'
set multiplot layout 1,2
set ylabel 'series / memory (MiB)'
set logscale y
plot {", ".join(lines["series"])}
set ylabel 'seconds'
plot {", ".join(lines["time"])}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["prometheus", "thanos", "both"], default="prometheus")
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--minutes", type=float, default=3, help="how long the backends scrape before measuring")
    ap.add_argument("--backfill", type=float, default=0, metavar="MINUTES",
                    help="remote-write this much of every node's history into each backend before its "
                         "first scrape (see step 2)")
    ap.add_argument("--out", type=Path, default=Path("fleet-out"))
    ap.add_argument("--check", action="store_true", help="exit 1 on a problem (see step 3)")
    ap.add_argument("--agent", type=Path, default=REPO / "target" / "release" / "slowpath")
    ap.add_argument("--workload", type=Path, default=REPO / "tests" / "workloads" / "bin" / "sp-workload")
    ap.add_argument("--page", type=Path, help="a recorded page to use instead of recording one")
    ap.add_argument("--prometheus", type=Path, default=TOOLS / "prometheus3" / "bin" / "prometheus")
    ap.add_argument("--thanos", type=Path, default=TOOLS / "thanos" / "bin" / "thanos")
    args = ap.parse_args()
    if not 0 <= args.backfill < 10:
        ap.error("--backfill: under 10 minutes (the page's counters count from 10 minutes before it)")
    args.out.mkdir(parents=True, exist_ok=True)
    text = args.page.read_text() if args.page else record_busy_node(args.agent, args.workload, args.out)
    page = Page(text)
    print(f"fleet-sim: one busy node exposes {page.series} series", flush=True)
    server, port = serve(page)
    rows, problems = [], []
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            got, found = one_fleet(n, page, port, args)
            rows += got
            problems += found
    finally:
        server.shutdown()
    write_csv(rows, args.out / "fleet.csv")
    plot(args.out / "fleet.csv", args.out / "fleet.png", sorted({r["backend"] for r in rows}))
    for backend in sorted({r["backend"] for r in rows}):
        last = [r for r in rows if r["backend"] == backend][-1]
        scale = 10_000 / last["nodes"]
        rss = sum(rss for rss, _ in last["components"].values())
        cpu = sum(cpu for _, cpu in last["components"].values())
        print(f"fleet-sim: {backend} projected to 10,000 nodes (x{scale:.0f} the {last['nodes']}-node run): "
              f"{last['series'] * scale / 1e6:.1f}M series, {last['samples_per_second'] * scale / 1e3:.0f}k samples/s, "
              f"{rss * scale / 1024:.0f} GiB, {cpu * scale:.0f} cores, "
              f"rules {last['rule_eval_seconds'] * scale:.1f} s per {INTERVAL} s evaluation")
    print(f"fleet-sim: wrote {args.out / 'fleet.csv'} and {args.out / 'fleet.png'}")
    for p in problems:
        print(f"fleet-sim: problem: {p}", flush=True)
    if args.check and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
