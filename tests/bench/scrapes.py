#!/usr/bin/env python3
"""Concurrent scrapes of a running agent: the single-scrape cost beside the
latency of N scrapes sent at once, and the agent's RSS before, right after
and a while after the burst.

    scrapes.py URL PID [--clients 200] [--settle 60]

Prints one table; exits 0 (a benchmark reports, it does not judge)."""
import argparse
import concurrent.futures
import statistics
import time
import urllib.request


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("pid", type=int)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--settle", type=float, default=60)
    args = ap.parse_args()

    rss_idle = rss_mib(args.pid)
    singles = []
    for _ in range(5):
        secs, body = scrape(args.url)
        singles.append(secs)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        t0 = time.monotonic()
        burst = [f.result()[0] for f in [pool.submit(scrape, args.url) for _ in range(args.clients)]]
        wall = time.monotonic() - t0
    rss_burst = rss_mib(args.pid)
    time.sleep(args.settle)
    rss_after = rss_mib(args.pid)
    print(f"series on the page: {series}, body {len(body) / 2**20:.1f} MiB")
    print(f"{'':24}{'p50 s':>10}{'p99 s':>10}{'max s':>10}")
    print(f"{'one scrape at a time':24}{statistics.median(singles):10.3f}{quantile(singles, .99):10.3f}{max(singles):10.3f}")
    print(f"{f'{args.clients} at once':24}{statistics.median(burst):10.3f}{quantile(burst, .99):10.3f}{max(burst):10.3f}"
          f"   (all answered in {wall:.2f} s)")
    print(f"agent RSS MiB: before {rss_idle:.0f}, after the burst {rss_burst:.0f}, "
          f"{args.settle:.0f} s later {rss_after:.0f}")


if __name__ == "__main__":
    main()
