#!/usr/bin/env python3
"""Concurrent scrapes: the cost of one scrape beside the latency of N
scrapes sent at once, on an agent holding SERIES per-process series, and the
agent's RSS idle, after the burst and a while later.

    sudo tests/bench/scrapes.py [--series 20000] [--clients 200] [--settle 60]

Starts its own agent (target/release/slowpath, --metrics.pid-label) on a free
loopback port, makes the series with short processes of
tests/workloads/bin/sp-workload (one pid series each), measures, stops the
agent. Prints one table; exits 0 (a benchmark reports, it does not judge)."""
import argparse
import concurrent.futures
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scrape(url):
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.monotonic() - start, body


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_agent(binary, port):
    agent = subprocess.Popen(
        [str(binary), f"--web.listen-address=127.0.0.1:{port}", "--metrics.pid-label",
         "--metrics.max-series=1000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1).read()
            return agent
        except OSError:
            if agent.poll() is not None:
                sys.exit(f"the agent exited {agent.returncode}")
            time.sleep(0.1)
    agent.kill()
    sys.exit("the agent did not become ready")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--settle", type=float, default=60)
    ap.add_argument("--agent", default=os.environ.get("SLOWPATH_BIN", REPO / "target/release/slowpath"))
    ap.add_argument("--workload", default=REPO / "tests/workloads/bin/sp-workload")
    args = ap.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    agent = start_agent(args.agent, port)
    try:
        scrape(url)
        rss_idle = rss_mib(agent.pid)
        subprocess.run([str(args.workload), "churn-par", str(args.series), "1", "16"],
                       check=True, stdout=subprocess.DEVNULL)
        singles = []
        for _ in range(5):
            secs, body = scrape(url)
            singles.append(secs)
        rss_loaded = rss_mib(agent.pid)
        lines = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            t0 = time.monotonic()
            burst = [f.result()[0] for f in [pool.submit(scrape, url) for _ in range(args.clients)]]
            wall = time.monotonic() - t0
        rss_burst = rss_mib(agent.pid)
        time.sleep(args.settle)
        rss_after = rss_mib(agent.pid)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    print(f"{args.series} short processes: {lines} samples on the page, {len(body) / 2**20:.1f} MiB")
    print(f"{'':24}{'p50 s':>10}{'p99 s':>10}{'max s':>10}")
    print(f"{'one scrape at a time':24}{statistics.median(singles):10.3f}{quantile(singles, .99):10.3f}"
          f"{max(singles):10.3f}")
    print(f"{f'{args.clients} at once':24}{statistics.median(burst):10.3f}{quantile(burst, .99):10.3f}"
          f"{max(burst):10.3f}   (all answered in {wall:.2f} s)")
    print(f"agent RSS MiB: idle {rss_idle:.0f}, with the series {rss_loaded:.0f}, after the burst "
          f"{rss_burst:.0f}, {args.settle:.0f} s later {rss_after:.0f} ({rss_after / rss_idle:.1f}x idle, "
          f"{rss_after / rss_loaded:.1f}x before the burst)")


if __name__ == "__main__":
    main()
