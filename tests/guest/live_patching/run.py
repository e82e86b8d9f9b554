"""Attach and detach fentry programs while the hooked syscall runs flat out,
in a QEMU guest (TCG): the question of whether live patching a hot syscall
is safe there, and whose fault it is when it is not.

  sudo python3 tests/guest/live_patching/run.py --mode agent|bare|none \\
      [--suite trixie] [--smp 2] [--cpu max] [--accel tcg|tcg,thread=single] \\
      [--workload clock-raw|raw-sigmask] [--agent-args=--bpf.attach-type=tp-btf]

`agent`: the release build of slowpath started and stopped --rounds times;
`bare`: a 60-line libbpf loader (loader.c) attaching two fentry programs
(fentry.bpf.c) --rounds times, no slowpath code; `none`: the load alone.
Prints one line: whether the guest hung, the rounds completed, and the
kernel's complaints (soft lockups, Oops). Needs a release build (its
libbpf.a), clang and qemu-system-x86 (scripts/setup.sh --test). Findings:
docs/guest.md, "Live patching under QEMU's TCG"."""

import argparse
import glob
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
import harness  # noqa: E402

COMPLAINTS = r"soft lockup|BUG:|Oops|Kernel panic|RIP:|rcu: INFO"


def build_bare(out):
    """The loader (static, against the libbpf libbpf-sys built) and the
    BPF object, into directory `out`."""
    libbpf = sorted(glob.glob(str(REPO / "target/release/build/libbpf-sys-*/out")))
    if not libbpf:
        sys.exit("run.py: no libbpf.a: cargo build --release first")
    include = f"{libbpf[-1]}/include"
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86",
                    f"-I{REPO}/bpf/vmlinux/x86", f"-I{include}", "-c", str(HERE / "fentry.bpf.c"),
                    "-o", str(out / "fentry.bpf.o")], check=True)
    subprocess.run(["gcc", "-O2", "-static", f"-I{include}", str(HERE / "loader.c"),
                    f"{libbpf[-1]}/libbpf.a", "/usr/lib/x86_64-linux-gnu/libelf.a",
                    "/usr/lib/x86_64-linux-gnu/libz.a", "-o", str(out / "loader")], check=True)


def scenario(args):
    loops = "\n".join(f"sp-workload {args.workload} 2000000000 >/dev/null & L{i}=$!"
                      for i in range(args.loops))
    if args.mode == "agent":
        body = f"""
for round in $(seq {args.rounds}); do
  agent_start {args.agent_args}
  sleep 1
  agent_stop
  echo "round $round detached"
done
"""
    elif args.mode == "bare":
        body = f"/usr/bin/loader /fentry.bpf.o {args.rounds} 1000 300\n"
    else:
        body = "sleep 5\n"
    kill = " ".join(f"$L{i}" for i in range(args.loops))
    return f"{loops}\nsleep 1\n{body}kill {kill}\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["agent", "bare", "none"], default="agent")
    p.add_argument("--suite", default=None, help="bookworm (6.1, default), trixie (6.12), bullseye (5.10)")
    p.add_argument("--smp", default="2")
    p.add_argument("--cpu", default="max")
    p.add_argument("--accel", default="tcg", help="tcg (multi-threaded with --smp > 1) or tcg,thread=single")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--loops", type=int, default=2, help="processes running the syscall flat out")
    p.add_argument("--workload", default="clock-raw", help="sp-workload mode: clock-raw, raw-sigmask")
    p.add_argument("--agent-args", default="")
    p.add_argument("--timeout", type=int, default=180)
    args = p.parse_args()
    harness.DOWNLOAD = True  # a local run: the kernel is fetched if missing
    kernel = harness.guest_kernel(args.suite, "x86_64")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {"/usr/bin/slowpath": REPO / "target/release/slowpath",
                 "/usr/bin/sp-workload": harness.static_workload()}
        if args.mode == "bare":
            build_bare(tmp)
            files |= {"/usr/bin/loader": tmp / "loader", "/fentry.bpf.o": tmp / "fentry.bpf.o"}
        initrd = tmp / "initrd.cpio"
        harness.build_initramfs(initrd, files, scenario(args))
        cmd = ["qemu-system-x86_64", "-accel", args.accel, "-cpu", args.cpu, "-smp", args.smp, "-m", "1024",
               "-kernel", str(kernel), "-initrd", str(initrd),
               "-append", "console=ttyS0 loglevel=7 panic=-1 tsc=reliable",
               "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot"]
        start = time.monotonic()
        try:
            out, hung = subprocess.run(cmd, capture_output=True, timeout=args.timeout).stdout, False
        except subprocess.TimeoutExpired as e:
            out, hung = e.stdout or b"", True
    console = out.decode(errors="replace").replace("\r", "")
    done = len(re.findall(r"^round \d+ detached", console, re.M))
    bad = [line for line in console.splitlines() if re.search(COMPLAINTS, line)]
    print(f"mode={args.mode} suite={args.suite or 'bookworm'} smp={args.smp} cpu={args.cpu} accel={args.accel} "
          f"workload={args.workload} hung={hung} seconds={time.monotonic() - start:.0f} "
          f"rounds={done}/{args.rounds} complaints={len(bad)}")
    for line in bad[:6]:
        print("  " + line[:160])


if __name__ == "__main__":
    main()
