#!/usr/bin/env python3
"""Soak: the agent under N minutes of process and cgroup churn, scraped every
second, sampled every minute (RSS, CPU, series, lost events, scrape errors,
slowest scrape) into a CSV and a PNG plot (gnuplot).

    scripts/soak.sh [--minutes 30] [--out DIR] [--grace 5m] [--check]

The churn, each second: 50 short processes of tests/workloads/bin/sp-workload
(fork, 100 raw clock_gettime, exit) and 20 fork+exec of /bin/true; every
other second a new cgroup2 directory in which 10 cgroups are created, each
runs one counted process and is removed. So processes, comms and cgroups
come and go all the time, and series are made and retired
(--metrics.retired-series-grace, --grace here). Two long-lived processes
(sp-workload copied as sp-soak-storm, mode clock-paced) read the clock by
syscall about 5000 times a second and sleep 1 ms in between: each is a vDSO
bypass and a timer loop, findings the agent must hold (with their call
sites sampled) from the second minute on, while the churn's own raw clock
reads make findings come and go.

With --check, exits 1 when a bound is broken: RSS above --max-rss-mib, CPU
above --max-cpu-percent of one core in any minute, RSS growing more than
--max-rss-growth-mib from the first full minute to the end, any lost event
or scrape error, a scrape slower than --max-scrape-seconds, or the storms'
findings (vdso_bypass and timer_loop of sp-soak-storm) missing at the end. Loopback
only; starts and stops its own agent; removes its cgroups."""

import argparse
import csv
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from hostutil import cgroup2_root, free_port  # noqa: E402

COLUMNS = ["minute", "rss_mib", "cpu_percent", "series", "lost_events", "scrape_errors",
           "max_scrape_seconds", "processes", "cgroups", "findings", "storm_findings"]
STORM_COMM = "sp-soak-storm"
STORMS = 2


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sums(text):
    """Series count, the sums of the counters the soak watches, the findings
    shown, and the storms' findings with a known source ("finding/row")."""
    series, lost, errors, findings, storm = 0, 0.0, 0.0, 0.0, set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series += 1
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = float(line.rsplit(" ", 1)[1])
        if name == "slowpath_lost_events_total":
            lost += value
        elif name == "slowpath_scrape_errors_total":
            errors += value
        elif name == "slowpath_findings":
            findings += value
        elif name == "slowpath_finding_info" and f'comm="{STORM_COMM}"' in line:
            finding = line.split('finding="', 1)[1].split('"', 1)[0]
            row = line.split('known_source="', 1)[1].split('"', 1)[0]
            storm.add(f"{finding}/{row}")
    return series, lost, errors, findings, storm


class Churn(threading.Thread):
    """Processes and cgroups coming and going until stopped."""

    def __init__(self, workload, base):
        super().__init__(daemon=True)
        self.workload, self.base = workload, base
        self.stop = threading.Event()
        self.processes = self.cgroups = 0
        self.error = None

    def run(self):
        tick = 0
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                subprocess.run([self.workload, "churn", "50", "100"], check=True, capture_output=True)
                subprocess.run(["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20;"
                                " do /bin/true; done"], check=True)
                self.processes += 71  # 50 children, the workload itself, 20 /bin/true
                if tick % 2 == 0:
                    round_dir = self.base / f"round-{tick}"
                    round_dir.mkdir()
                    subprocess.run([self.workload, "cgroup-churn", round_dir, "10", "100"], check=True,
                                   capture_output=True)
                    round_dir.rmdir()
                    self.processes += 11
                    self.cgroups += 11
                tick += 1
                self.stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
        except Exception as err:  # reported by the main thread
            self.error = err


class Scraper(threading.Thread):
    """A scrape every second; keeps the slowest since the last sample."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.slowest = 0.0
        self.last = ""
        self.failures = 0

    def run(self):
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as resp:
                    self.last = resp.read().decode()
            except OSError:
                self.failures += 1
            took = time.monotonic() - started
            self.slowest = max(self.slowest, took)
            self.stop.wait(max(0.0, 1.0 - took))

    def take_slowest(self):
        slowest, self.slowest = self.slowest, 0.0
        return slowest


def plot(csv_path, png_path, title):
    script = f"""
set terminal png size 1000,700
set output '{png_path}'
set datafile separator ','
set key autotitle columnhead left top
set multiplot layout 2,1 title '{title}'
set xlabel 'minute'
set ylabel 'MiB'
set y2label 'series'
set y2tics
set yrange [0:*]
set y2range [0:*]
plot '{csv_path}' using 1:2 with linespoints title 'RSS (MiB)', \\
     '' using 1:4 axes x1y2 with linespoints title 'series'
set ylabel '% of one core'
set y2label 'ms'
plot '{csv_path}' using 1:3 with linespoints title 'CPU (%)', \\
     '' using 1:($7*1000) axes x1y2 with linespoints title 'slowest scrape (ms)'
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def check(rows, args):
    """The broken bounds, as lines."""
    broken = []
    for r in rows[1:]:
        if r["rss_mib"] > args.max_rss_mib:
            broken.append(f"minute {r['minute']}: RSS {r['rss_mib']:.1f} MiB > {args.max_rss_mib}")
        if r["cpu_percent"] > args.max_cpu_percent:
            broken.append(f"minute {r['minute']}: CPU {r['cpu_percent']:.2f} % > {args.max_cpu_percent}")
        if r["max_scrape_seconds"] > args.max_scrape_seconds:
            broken.append(f"minute {r['minute']}: a scrape took {r['max_scrape_seconds']:.3f} s")
    last = rows[-1]
    want = {"vdso_bypass/direct_clock_syscall", "timer_loop/glibc_sleep_loop"}
    if not want <= set(last["storm_findings"].split()):
        broken.append(f"the storms' findings at the end: {last['storm_findings'] or 'none'} (want {sorted(want)})")
    if last["lost_events"] > 0:
        broken.append(f"{last['lost_events']:.0f} events lost")
    if last["scrape_errors"] > 0:
        broken.append(f"{last['scrape_errors']:.0f} scrape errors")
    growth = last["rss_mib"] - rows[1]["rss_mib"]
    if growth > args.max_rss_growth_mib:
        broken.append(f"RSS grew {growth:.1f} MiB from minute 1 to {last['minute']} (> {args.max_rss_growth_mib})")
    return broken


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("soak-out"))
    ap.add_argument("--grace", default="5m", help="--metrics.retired-series-grace of the agent")
    ap.add_argument("--agent", type=Path, default=REPO / "target" / "release" / "slowpath")
    ap.add_argument("--workload", type=Path, default=REPO / "tests" / "workloads" / "bin" / "sp-workload")
    ap.add_argument("--check", action="store_true", help="exit 1 when a bound is broken")
    ap.add_argument("--max-rss-mib", type=float, default=100)
    ap.add_argument("--max-rss-growth-mib", type=float, default=8)
    ap.add_argument("--max-cpu-percent", type=float, default=5)
    ap.add_argument("--max-scrape-seconds", type=float, default=1)
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = open(args.out / "agent.log", "wb")
    agent = subprocess.Popen([args.agent, f"--web.listen-address=127.0.0.1:{port}",
                              f"--metrics.retired-series-grace={args.grace}"], stdout=log, stderr=subprocess.STDOUT)
    base = cgroup2_root() / f"slowpath-soak-{os.getpid()}"
    base.mkdir()
    churn, scraper = Churn(args.workload, base), Scraper(url)
    rows = []
    storm_bin = args.out / STORM_COMM
    storm_bin.write_bytes(args.workload.read_bytes())
    storm_bin.chmod(0o755)
    storms = []
    try:
        for _ in range(STORMS):
            storms.append(subprocess.Popen([storm_bin, "clock-paced", str(10**9), "5"], stdout=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url.replace("/metrics", "/readyz"), timeout=1).read()
                break
            except OSError:
                if agent.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"soak: the agent did not start: {(args.out / 'agent.log').read_text()}")
                time.sleep(0.1)
        scraper.start()
        churn.start()
        cpu0, t0 = cpu_seconds(agent.pid), time.monotonic()
        prev_cpu, prev_t = cpu0, t0
        for minute in range(args.minutes + 1):
            if minute:
                time.sleep(max(0.0, t0 + 60 * minute - time.monotonic()))
            if churn.error:
                raise churn.error
            with urllib.request.urlopen(url, timeout=10) as resp:
                series, lost, errors, findings, storm = sums(resp.read().decode())
            cpu, now = cpu_seconds(agent.pid), time.monotonic()
            rows.append({
                "minute": minute, "rss_mib": rss_mib(agent.pid),
                "cpu_percent": 100 * (cpu - prev_cpu) / max(now - prev_t, 1e-9),
                "series": series, "lost_events": lost, "scrape_errors": errors + scraper.failures,
                "max_scrape_seconds": scraper.take_slowest(), "processes": churn.processes,
                "cgroups": churn.cgroups, "findings": findings, "storm_findings": " ".join(sorted(storm)),
            })
            prev_cpu, prev_t = cpu, now
            r = rows[-1]
            print(f"soak: minute {minute:3d}: RSS {r['rss_mib']:6.1f} MiB, CPU {r['cpu_percent']:5.2f} %, "
                  f"{series} series, {r['processes']} processes, {r['cgroups']} cgroups, "
                  f"slowest scrape {r['max_scrape_seconds'] * 1000:.1f} ms, lost {lost:.0f}, "
                  f"{findings:.0f} findings, storms: {r['storm_findings'] or '-'}", flush=True)
    finally:
        for storm_proc in storms:
            storm_proc.kill()
            storm_proc.wait()
        churn.stop.set()
        scraper.stop.set()
        churn.join(timeout=30)
        scraper.join(timeout=15)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        log.close()
        for leftover in sorted(base.glob("**/"), reverse=True):
            try:
                leftover.rmdir()
            except OSError:
                pass
    csv_path, png_path = args.out / "soak.csv", args.out / "soak.png"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
    plot(csv_path, png_path, f"slowpath soak: {args.minutes} min of process and cgroup churn")
    print(f"soak: wrote {csv_path} and {png_path}")
    if args.check:
        broken = check(rows, args)
        for line in broken:
            print(f"soak: bound broken: {line}", file=sys.stderr)
        sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
