"""Guest-VM harness: boot another kernel under QEMU (TCG) with the agent and
the workloads in an initramfs, run a scenario script inside, and bring back
what it printed between markers on the serial console.

Why a guest: the host's clocksource is vDSO-capable and its kernel forbids
fentry and kprobes. Debian's cloud kernel in a guest has the hpet and
acpi_pm clocksources (which the vDSO cannot read, so libc clock reads really
enter the kernel) and allows fentry.

Two architectures: x86_64 (qemu-system-x86_64, TCG) and arm64
(qemu-system-aarch64 -machine virt -cpu max, TCG, bookworm's arm64 cloud
kernel). An arm64 guest runs the cross-built agent (cargo build --target
aarch64-unknown-linux-gnu), its libraries from the cross toolchain and
target/aarch64-libs (scripts/setup.sh --arm64), busybox-static from Debian's
arm64 archive, and the workloads linked statically with aarch64-linux-gnu-gcc.

The kernel package is fetched with apt-get download into a cache outside the
repository (SLOWPATH_GUEST_CACHE, default /var/cache/slowpath-guest) and
checked against the SHA256 in apt's package index before use. By default
that is the kernel the system's apt sources offer (bookworm's 6.1); with a
suite ("bullseye" for 5.10, "trixie" for 6.12) apt works on a private state
in the cache, so the system's apt configuration stays as it is.

Only fetch() downloads (apt-get update, apt-get download; scripts/setup.sh
--test runs it, through tests/deploy/test-tools.sh) and so does the command
line (DOWNLOAD): a test finds the kernels, busybox and the static workloads
ready, or fails naming what is missing and scripts/setup.sh --test.

Command line (for local runs):
  python3 tests/guest/harness.py SCENARIO_FILE [--clocksource NAME] [--suite NAME]
prints the raw serial output;
  python3 tests/guest/harness.py --fetch [--full] [--check]
fetches what the tests' guests boot (--full: SLOWPATH_GUEST_MATRIX=full's too;
--check: only checks it is there).
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SLOWPATH_GUEST_CACHE", "/var/cache/slowpath-guest"))
ARCHES = {
    # arch: (Debian architecture, QEMU, console, cross gcc, library dirs of the cross build)
    # Single-threaded TCG: multi-threaded TCG misses cross-modifying code, so
    # any live patch of kernel text (ftrace, static branches) can crash the
    # guest, even the kernel's own at boot (docs/guest.md).
    "x86_64": ("amd64", ["qemu-system-x86_64", "-accel", "tcg,thread=single", "-cpu", "max"], "ttyS0", "gcc",
               []),
    "arm64": ("arm64", ["qemu-system-aarch64", "-machine", "virt", "-cpu", "max"], "ttyAMA0",
              "aarch64-linux-gnu-gcc",
              ["/usr/aarch64-linux-gnu/lib", str(REPO / "target/aarch64-libs/usr/lib/aarch64-linux-gnu"),
               str(REPO / "target/aarch64-libs/lib/aarch64-linux-gnu")]),
}
# Whether a missing kernel or package may be downloaded (fetch(), the command
# line, tests/guest/bench.py) or is an error (the tests).
DOWNLOAD = False
SETUP = "scripts/setup.sh --test"
# What the tests boot: (suite, arch) of every guest in the default matrix
# (tests/e2e/test_guest*.py), and what SLOWPATH_GUEST_MATRIX=full adds.
DEFAULT_KERNELS = [(None, "x86_64"), ("bullseye", "x86_64"), ("trixie", "x86_64"), ("bookworm", "arm64")]
FULL_KERNELS = [("bullseye", "arm64"), ("trixie", "arm64")]
BOOT_TIMEOUT = 150  # seconds for one boot-to-poweroff; a scenario takes 10-30 s under TCG
# arm64 under TCG is slower, and how much depends on the host's CPU: the arm64
# scenario of test_guest.py (jiffies clocksource, a doctor run) took about
# 105 s on an AMD EPYC host and 265-295 s on an Intel Xeon one (where 150 s cut
# it off twice and looked like a hang).
BOOT_TIMEOUTS = {"x86_64": BOOT_TIMEOUT, "arm64": 600}
# The release's own kernel, not its security updates: the same kernel on
# every run and machine (and mirrors may index the security suite without
# carrying its packages).
SUITE_SOURCES = """\
deb [arch={arch} signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian {suite} main
"""

INIT = r"""#!/bin/busybox sh
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ifconfig lo 127.0.0.1 up
echo "===GUEST-START==="
sh /scenario.sh
echo "===GUEST-DONE rc=$?==="
poweroff -f
"""

# Helpers every scenario script can use.
PRELUDE = r"""
section() { name=$1; shift; echo "===BEGIN $name==="; "$@"; echo "===END==="; }
scrape() { section "$1" wget -q -O - http://127.0.0.1:9891/metrics; }
# wait_ready PORT PID [TENTHS]: until the agent on PORT answers /readyz;
# 1 when process PID exits first or TENTHS tenths of a second (900) pass.
wait_ready() {
    i=0
    until wget -q -O /dev/null http://127.0.0.1:$1/readyz 2>/dev/null; do
        kill -0 $2 2>/dev/null || return 1
        i=$((i + 1)); [ $i -gt ${3:-900} ] && return 1; sleep 0.1
    done
}
agent_start() {
    slowpath --web.listen-address=127.0.0.1:9891 --metrics.pid-label --canary.interval=1s "$@" \
        >/tmp/agent.log 2>&1 &
    AGENT_PID=$!
    wait_ready 9891 $AGENT_PID 600 || { section agent_log cat /tmp/agent.log; return 1; }
}
agent_stop() { kill -TERM $AGENT_PID; wait $AGENT_PID; echo "agent exit $?"; }
"""


def apt_options(suite, arch="x86_64"):
    """apt-get/apt-cache options for `suite` and `arch`: none for the system's
    sources (suite None on x86_64), else a private sources list, lists and
    cache under CACHE / apt-SUITE[-ARCH], so that another release's or
    architecture's index never mixes into the system's. With DOWNLOAD its
    lists are refreshed when missing or older than a day; without, missing
    lists are an error (and old ones are used as they are)."""
    deb_arch = ARCHES[arch][0]
    if suite is None and arch == "x86_64":
        return []
    suite = suite or "bookworm"
    state = CACHE / (f"apt-{suite}" if arch == "x86_64" else f"apt-{suite}-{deb_arch}")
    # A stamp of our own, outside lists/ (apt-get update deletes strangers
    # there): apt dates the list files by the archive's Last-Modified.
    stamp = state / "updated"
    if not DOWNLOAD and not stamp.exists():
        raise RuntimeError(f"no apt lists for {suite} {deb_arch} in {state}: run {SETUP}")
    (state / "lists/partial").mkdir(parents=True, exist_ok=True)
    (state / "cache/archives/partial").mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    sources.write_text(SUITE_SOURCES.format(suite=suite, arch=deb_arch))
    options = ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
               "-o", f"Dir::State::Lists={state}/lists", "-o", f"Dir::Cache={state}/cache",
               "-o", f"APT::Architecture={deb_arch}", "-o", f"APT::Architectures={deb_arch}",
               "-o", "APT::Sandbox::User=root"]
    if DOWNLOAD and (not stamp.exists() or time.time() - stamp.stat().st_mtime > 86400):
        subprocess.run(["apt-get", *options, "update", "-qq"], check=True)
        stamp.touch()
    return options


def kernel_package(options=(), deb_arch="amd64"):
    """Name of the unsigned image package the cloud meta-package points at.
    `options`: from apt_options(); with none, the system's lists are
    refreshed once if they do not know the meta-package."""
    meta = f"linux-image-cloud-{deb_arch}"
    depends = ["apt-cache", *options, "depends", meta]
    pattern = rf"Depends: (linux-image-[\w.+-]+-cloud-{deb_arch})"
    out = subprocess.run(depends, capture_output=True, text=True).stdout
    m = re.search(pattern, out)
    if not m and not options and DOWNLOAD:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        out = subprocess.run(depends, capture_output=True, text=True).stdout
        m = re.search(pattern, out)
    if not m:
        hint = f" with {' '.join(options)}" if options else ": add Debian's main archive to apt sources"
        raise RuntimeError(f"apt knows no {meta}{hint}")
    return m.group(1) + "-unsigned"


def expected_sha256(package, options=()):
    out = subprocess.run(["apt-cache", *options, "show", "--no-all-versions", package],
                         capture_output=True, text=True, check=True).stdout
    return re.search(r"^SHA256: (\w+)", out, re.M).group(1)


def guest_kernel(suite=None, arch="x86_64"):
    """Path of the guest vmlinuz, downloaded and verified once. `suite`:
    None for the system's apt sources (bookworm on arm64), or a Debian
    release name."""
    CACHE.mkdir(parents=True, exist_ok=True)
    options = apt_options(suite, arch)
    tree = fetch_package(kernel_package(options, ARCHES[arch][0]), options, ARCHES[arch][0])
    return next((tree / "boot").glob("vmlinuz-*"))


def fetch_package(package, options, deb_arch):
    """The unpacked tree of `package` (the candidate of apt with `options`),
    downloaded into CACHE and checked against apt's SHA256 once."""
    debs = sorted(CACHE.glob(f"{package}_*_{deb_arch}.deb"))
    if not debs and not DOWNLOAD:
        raise RuntimeError(f"no {package} ({deb_arch}) in {CACHE}: run {SETUP}")
    if not debs:
        subprocess.run(["apt-get", *options, "download", package],
                       cwd=CACHE, check=True, capture_output=True, text=True)
        debs = sorted(CACHE.glob(f"{package}_*_{deb_arch}.deb"))
    deb = debs[-1]
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    want = expected_sha256(package, options)
    if digest != want:
        deb.unlink()
        raise RuntimeError(f"{deb.name}: sha256 {digest} is not apt's {want}; removed, try again")
    tree = CACHE / deb.stem
    if not tree.exists():
        tmp = CACHE / (deb.stem + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
        tmp.rename(tree)
    return tree


def ldd_paths(binary):
    """Shared libraries (and the loader) a dynamic binary of this machine's
    architecture needs: {path inside the guest: host path}."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    return {p: Path(p) for p in re.findall(r"(/\S+) \(0x", out)}


def needed_paths(binary, lib_dirs):
    """Like ldd_paths() for a binary of another architecture, which cannot
    run here: its loader (PT_INTERP) and, transitively, every DT_NEEDED
    library found in `lib_dirs`, placed in the guest's /lib/<multiarch>."""
    def readelf(path, flag):
        return subprocess.run(["readelf", flag, "-W", str(path)], capture_output=True, text=True,
                              check=True).stdout
    interp = re.search(r"Requesting program interpreter: (\S+)\]", readelf(binary, "-l"))
    found, todo = {}, [binary]
    if interp:
        found[interp.group(1)] = next(Path(d) / Path(interp.group(1)).name for d in lib_dirs
                                      if (Path(d) / Path(interp.group(1)).name).exists())
    while todo:
        for name in re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", readelf(todo.pop(), "-d")):
            guest = f"/lib/aarch64-linux-gnu/{name}"
            if guest in found:
                continue
            host = next((Path(d) / name for d in lib_dirs if (Path(d) / name).exists()), None)
            if host is None:
                raise RuntimeError(f"{binary}: needs {name}, not in {lib_dirs} (scripts/setup.sh --arm64)")
            found[guest] = host
            todo.append(host)
    return found


def busybox_for(arch):
    """busybox-static for `arch`: this machine's, or from Debian's archive."""
    if arch == "x86_64":
        return Path(shutil.which("busybox") or "/bin/busybox")
    options = apt_options(None, arch)
    return fetch_package("busybox-static", options, ARCHES[arch][0]) / "bin/busybox"


def build_initramfs(out, files, scenario, arch="x86_64"):
    """`files`: {path inside the guest: host path}; a host directory is
    copied as a tree (a jlink'ed Java runtime). Dynamic binaries get their
    libraries too, and so do the shared libraries in a tree (a runtime's
    dlopen()ed libjvm.so), but for those inside the tree itself."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # the guest's / as on a real system (TemporaryDirectory is 0700): a
        # non-root process without CAP_DAC_READ_SEARCH must reach its libraries
        root.chmod(0o755)
        for d in ["bin", "usr/bin", "proc", "sys", "dev", "tmp", "lib64"]:
            (root / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2(busybox_for(arch), root / "bin/busybox")
        # The applet list of this machine's busybox (the same Debian release).
        host_busybox = shutil.which("busybox") or "/bin/busybox"
        applets = subprocess.run([host_busybox, "--list"], capture_output=True, text=True, check=True).stdout
        for applet in applets.split():
            if applet != "busybox":  # a busybox -> busybox link loops (ELOOP)
                os.symlink("busybox", root / "bin" / applet)
        for dest, src in files.items():
            target = root / dest.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if Path(src).is_dir():
                shutil.copytree(src, target, symlinks=True)
                tree = Path(src).resolve()
                binaries = [f for f in sorted(tree.rglob("*")) if f.is_file() and not f.is_symlink()
                            and is_elf(f) and (is_dynamic(f) or f.suffix == ".so")]
            else:
                shutil.copy2(src, target)
                tree, binaries = None, [Path(src)] if is_dynamic(src) else []
            for binary in binaries:
                libs = ldd_paths(binary) if arch == "x86_64" else needed_paths(binary, ARCHES[arch][4])
                for guest, host in libs.items():
                    if tree is not None and host.resolve().is_relative_to(tree):
                        continue  # in the tree, found by the binary's $ORIGIN RPATH
                    lib_target = root / guest.lstrip("/")
                    lib_target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(host.resolve(), lib_target)
        (root / "init").write_text(INIT)
        (root / "init").chmod(0o755)
        (root / "scenario.sh").write_text(PRELUDE + scenario)
        names = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
        with open(out, "wb") as f:
            subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=names, stdout=f, check=True)


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def is_dynamic(path):
    """Whether `path` (of any architecture) asks for a program interpreter."""
    out = subprocess.run(["readelf", "-l", "-W", str(path)], capture_output=True, text=True).stdout
    return "Requesting program interpreter" in out


def boot(kernel, initrd, clocksource=None, memory_mib=1024, extra_cmdline="", arch="x86_64",
         timeout=None):
    """Boot to poweroff within `timeout` seconds (the architecture's
    BOOT_TIMEOUTS entry by default); returns the serial console text."""
    timeout = timeout or BOOT_TIMEOUTS[arch]
    _, qemu, console, _, _ = ARCHES[arch]
    cmdline = f"console={console} loglevel=1 panic=-1 " + extra_cmdline
    if clocksource:
        cmdline += f" clocksource={clocksource}"
    cmd = [
        *qemu, "-smp", "2", "-m", str(memory_mib),
        "-kernel", str(kernel), "-initrd", str(initrd), "-append", cmdline,
        "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
    ]
    # A TCG guest very rarely hangs (one boot in many CI runs, never twice in
    # a row): boot once more, and show where the hung one stopped.
    for attempt in (1, 2):
        try:
            result = subprocess.run(cmd, capture_output=True, timeout=timeout)
            return result.stdout.decode(errors="replace").replace("\r", "")
        except subprocess.TimeoutExpired as hung:
            tail = (hung.stdout or b"").decode(errors="replace").replace("\r", "")[-3000:]
            print(f"harness: guest hung for {timeout} s (boot {attempt}); console tail:\n{tail}",
                  file=sys.stderr)
            if attempt == 2:
                raise


def sections(console):
    """{name: text} of the ===BEGIN name=== ... ===END=== blocks."""
    found = {}
    for m in re.finditer(r"^===BEGIN (\S+)===\n(.*?)^===END===$", console, re.M | re.S):
        found[m.group(1)] = m.group(2)
    return found


def guest_rc(console):
    m = re.search(r"^===GUEST-DONE rc=(\d+)===$", console, re.M)
    return int(m.group(1)) if m else None


def static_workload(arch="x86_64"):
    """The workloads, linked statically (libc in a static binary still uses
    the vDSO for clock reads), as tests/workloads/build.sh built them."""
    return built("sp-workload-static" if arch == "x86_64" else f"sp-workload-static-{arch}")


def built(name):
    """tests/workloads/bin/NAME, checked current (tests/workloads/build.sh
    --check); RuntimeError naming scripts/setup.sh --test if not."""
    out = subprocess.run(["bash", str(REPO / "tests/workloads/build.sh"), "--check", name],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return REPO / "tests/workloads/bin" / name


def fetch(full=False, download=True):
    """Downloads and unpacks every kernel the tests boot (`full`: the full
    matrix's too) and arm64's busybox into CACHE, each once; with
    download=False only checks that they are there (RuntimeError if not).
    Returns the kernels' paths."""
    global DOWNLOAD
    DOWNLOAD = download
    kernels = [guest_kernel(suite, arch) for suite, arch in DEFAULT_KERNELS + (FULL_KERNELS if full else [])]
    busybox_for("arm64")
    return kernels


# tzdata's UTC zone (scripts/setup.sh --test installs tzdata)
TZ_FILE = Path("/usr/share/zoneinfo/Etc/UTC")


def run_scenario(agent_bin, scenario, clocksource=None, extra_files=None, extra_cmdline="",
                 suite=None, arch="x86_64", timeout=None):
    """Build, boot, and return (console text, sections). `suite`: see
    guest_kernel(); `arch`: x86_64 or arm64 (then `agent_bin` is the
    cross-built agent); `extra_files`: see build_initramfs(); `timeout`:
    seconds the boot may take (a long benchmark needs more than the tests)."""
    kernel = guest_kernel(suite, arch)
    with tempfile.TemporaryDirectory() as tmp:
        # a zone file at the default path: with TZ unset, glibc's localtime()
        # reads it once, then stats it on every call (the tzfile signal)
        files = {"/usr/bin/slowpath": agent_bin, "/usr/bin/sp-workload": static_workload(arch),
                 "/etc/localtime": TZ_FILE}
        files.update(extra_files or {})
        initrd = Path(tmp) / "initrd.cpio"
        build_initramfs(initrd, files, scenario, arch)
        console = boot(kernel, initrd, clocksource=clocksource, extra_cmdline=extra_cmdline, arch=arch,
                       timeout=timeout)
    return console, sections(console)


def main():
    global DOWNLOAD
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path, nargs="?", help="shell script run inside the guest")
    parser.add_argument("--fetch", action="store_true", help="only fetch the tests' kernels (see fetch())")
    parser.add_argument("--full", action="store_true", help="with --fetch: the full matrix's kernels too")
    parser.add_argument("--check", action="store_true", help="with --fetch: download nothing, only check")
    parser.add_argument("--clocksource", help="clocksource= for the guest kernel")
    parser.add_argument("--agent", type=Path, default=REPO / "target/release/slowpath")
    parser.add_argument("--suite", help="Debian release whose cloud kernel to boot (bullseye, trixie); "
                        "default: the one the system's apt sources offer")
    parser.add_argument("--arch", choices=sorted(ARCHES), default="x86_64",
                        help="guest architecture (arm64: pass --agent target/aarch64-unknown-linux-gnu/...)")
    args = parser.parse_args()
    if args.fetch:
        try:
            kernels = fetch(args.full, download=not args.check)
        except RuntimeError as e:
            raise SystemExit(f"harness.py: {e}") from None
        print("\n".join(map(str, kernels)))
        return
    if args.scenario is None:
        parser.error("a scenario file (or --fetch)")
    DOWNLOAD = True
    console, _ = run_scenario(args.agent, args.scenario.read_text(), args.clocksource, suite=args.suite,
                              arch=args.arch)
    print(console)


if __name__ == "__main__":
    main()
