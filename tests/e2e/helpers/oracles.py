"""The independent oracles the counts are compared with: `strace -c`,
`perf stat` on the syscalls' tracepoints, /proc/vmstat, /proc/zoneinfo and
bpftrace on the kernel's own tracepoints."""

import re
import signal
import subprocess
from pathlib import Path


def strace_counts(text):
    """{syscall: calls} from an `strace -c` summary."""
    counts = {}
    for line in text.splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(fields) >= 5 and fields[-1] != "total" and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def perf_stat_command(syscalls, out):
    """The `perf stat` prefix that counts, in the kernel, each of `syscalls`
    (names) entered by the command it runs and that command's children, at
    the syscalls:sys_enter_NAME tracepoints, into the file `out` as CSV. No
    ptrace stop per call as under strace: a loop of 200,000 calls runs in
    0.3 s instead of 20 s."""
    events = ",".join(f"syscalls:sys_enter_{name}" for name in syscalls)
    return ["perf", "stat", "--no-big-num", "-x", ",", "-o", str(out), "-e", events, "--"]


def perf_stat_counts(text):
    """{syscall: calls} from `perf stat -x ,` output of perf_stat_command()
    (value,unit,event,...); raises on an event perf could not count."""
    counts = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not fields[2].startswith("syscalls:sys_enter_"):
            continue
        if not fields[0].isdigit():
            raise AssertionError(f"perf stat did not count {fields[2]}: {line}")
        counts[fields[2].removeprefix("syscalls:sys_enter_")] = int(fields[0])
    return counts


def vmstat():
    return {
        k: int(v)
        for k, v in (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    }


def populated_zones(zoneinfo):
    """Zones with present pages in `zoneinfo` (the text of /proc/zoneinfo):
    a manual compaction (compact_node()) runs compact_zone() on each."""
    return sum(1 for n in re.findall(r"^\s+present\s+(\d+)", zoneinfo, re.M) if int(n) > 0)


TRACEFS = Path("/sys/kernel/tracing")


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
