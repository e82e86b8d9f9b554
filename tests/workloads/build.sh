#!/usr/bin/env bash
# Builds the test suite's own workloads (C, Go, Java) and the guest's Java
# runtime into tests/workloads/bin/ (gitignored), each again only when its
# sources, its recipe or its compiler changed: a stamp per target
# (bin/.stamp-NAME) holds the hash of the three. scripts/setup.sh --test runs
# it (through tests/deploy/test-tools.sh); the tests only check
# (tests/e2e/helpers/tools.py built()).
#
#   build.sh                     every target; prints bin/'s path
#   build.sh NAME...             those targets
#   build.sh --check [NAME...]   builds nothing: exits 1 naming every missing
#                                or stale target
#
# bin/NAME is a file or, for the Java targets and the runtime, a directory.
# Cold about 1 min (the Go modules and the Disruptor jar are downloaded once,
# into the usual Go and Maven caches); warm well under a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$here/bin
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
log() { echo "build.sh: $*" >&2; }

# name: sources (repository paths) and compiler; the recipe is build_NAME OUT.
declare -A SOURCES=(
  [sp-workload]=tests/workloads/sp-workload.c
  [sp-workload-static]=tests/workloads/sp-workload.c
  [sp-workload-static-arm64]=tests/workloads/sp-workload.c
  [sp-nofp]=tests/workloads/sp-nofp.c
  [nofp-pth]=tests/workloads/sp-nofp.c
  [pth-yield]=tests/workloads/pth-yield.c
  [overhead]=tests/bench/overhead.c
  [overhead-static]=tests/bench/overhead.c
  [sp-container-exec]=tests/workloads/sp-container-exec.c
  [pause]=tests/deploy/pause.c
  [sentinel-ticker]="tests/workloads/sentinel-ticker/go.mod tests/workloads/sentinel-ticker/go.sum tests/workloads/sentinel-ticker/main.go"
  [go-timenow]="tests/workloads/go-timenow/go.mod tests/workloads/go-timenow/main.go"
  [go-freeosmemory]="tests/workloads/go-freeosmemory/go.mod tests/workloads/go-freeosmemory/main.go"
  [wallclock]=tests/workloads/java/WallClock.java
  [pretouch]=tests/workloads/java/PreTouchHeap.java
  [disruptor-spin]="tests/workloads/disruptor-spin/build.sh tests/workloads/disruptor-spin/Spin.java"
  [jre]=""
)
declare -A COMPILER=(
  [sp-workload-static-arm64]=aarch64-linux-gnu-gcc [sentinel-ticker]=go [go-timenow]=go [go-freeosmemory]=go
  [wallclock]=javac [pretouch]=javac [disruptor-spin]=javac [jre]=jlink
)
TARGETS=(sp-workload sp-workload-static sp-workload-static-arm64 sp-nofp nofp-pth pth-yield overhead overhead-static
         sp-container-exec pause sentinel-ticker go-timenow go-freeosmemory wallclock pretouch disruptor-spin jre)

# The recipes: each writes OUT ($1), a file or a directory.
build_sp-workload() { gcc -O2 -fno-omit-frame-pointer -Wall -Werror -pthread "$repo/tests/workloads/sp-workload.c" -o "$1"; }
# the guests' (tests/guest/harness.py): libc in a static binary still uses the vDSO for clock reads
build_sp-workload-static() { gcc -O2 -Wall -Werror -static -pthread "$repo/tests/workloads/sp-workload.c" -o "$1"; }
build_sp-workload-static-arm64() {
  aarch64-linux-gnu-gcc -O2 -Wall -Werror -static -pthread "$repo/tests/workloads/sp-workload.c" -o "$1"
}
# as distributions build: -O2, no frame pointers (tests/e2e/test_callsites.py)
build_sp-nofp() { gcc -O2 -fomit-frame-pointer -Wall -Werror "$repo/tests/workloads/sp-nofp.c" -o "$1"; }
# a directory: the binary keeps its name, sp-nofp (the process's comm)
build_nofp-pth() {
  mkdir -p "$1"
  gcc -O2 -fomit-frame-pointer -Wall -Werror -DSP_WITH_PTH "$repo/tests/workloads/sp-nofp.c" -o "$1/sp-nofp" -lpth
}
build_pth-yield() { gcc -O2 -fno-omit-frame-pointer -Wall -Werror "$repo/tests/workloads/pth-yield.c" -lpth -o "$1"; }
build_overhead() { gcc -O2 -Wall -pthread "$repo/tests/bench/overhead.c" -o "$1"; }
# the guest's (tests/guest/bench.py)
build_overhead-static() { gcc -O2 -static "$repo/tests/bench/overhead.c" -o "$1"; }
build_sp-container-exec() { gcc -O2 -Wall -Werror -static "$repo/tests/workloads/sp-container-exec.c" -o "$1"; }
build_pause() { gcc -O2 -Wall -Werror -static "$repo/tests/deploy/pause.c" -o "$1"; }
# go.sum pins every module (-mod=readonly: never rewritten)
build_sentinel-ticker() { (cd "$repo/tests/workloads/sentinel-ticker" && GOFLAGS=-mod=readonly go build -o "$1" .); }
build_go-freeosmemory() {
  (cd "$repo/tests/workloads/go-freeosmemory" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$1" .)
}
build_go-timenow() {
  (cd "$repo/tests/workloads/go-timenow" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$1" .)
}
# the guest's jlink'ed runtime runs it (tests/e2e/test_guest.py)
build_wallclock() { javac --release 17 -d "$1" "$repo/tests/workloads/java/WallClock.java"; }
build_pretouch() { javac -d "$1" "$repo/tests/workloads/java/PreTouchHeap.java"; }
# the classes and bin/disruptor-spin/classpath (the jar, from Maven, and the
# classes where they end up)
build_disruptor-spin() {
  local cp
  cp=$(sh "$repo/tests/workloads/disruptor-spin/build.sh" "$1")
  echo "${cp%:*}:$bin/disruptor-spin" >"$1/classpath"
}
# java.base only (about 45 MB), for the guest (tests/e2e/test_guest.py)
build_jre() { jlink --add-modules java.base --strip-debug --no-man-pages --no-header-files --output "$1"; }

# What the target's output depends on: its recipe, its sources, its compiler
# (the resolved binary's path, size and time: a package upgrade changes them).
key() {
  local name=$1 compiler=${COMPILER[$1]:-gcc} path src
  path=$(readlink -f "$(command -v "$compiler")" 2>/dev/null) || { echo "no-$compiler"; return; }
  {
    declare -f "build_$name"
    stat -c '%n %s %Y' "$path"
    for src in ${SOURCES[$name]}; do cat "$repo/$src"; done
  } | sha256sum | cut -c1-16
}

fresh() { [[ -e "$bin/$1" && "$(cat "$bin/.stamp-$1" 2>/dev/null)" == "$(key "$1")" ]]; }

# Built beside, then moved into place: a reader never sees half a target.
make_target() {
  local name=$1 t0=$SECONDS tmp="$bin/.tmp-$1"
  log "building $name"
  rm -rf "$tmp"
  "build_$name" "$tmp"
  rm -rf "${bin:?}/$name"
  mv "$tmp" "$bin/$name"
  key "$name" >"$bin/.stamp-$name"
  log "built $name in $((SECONDS - t0))s"
}

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
names=("$@")
((${#names[@]})) || names=("${TARGETS[@]}")
stale=()
for name in "${names[@]}"; do
  [[ -v "SOURCES[$name]" ]] || { log "no target $name (targets: ${TARGETS[*]})"; exit 2; }
  fresh "$name" && continue
  if ((check)); then
    stale+=("$name")
  else
    mkdir -p "$bin"
    make_target "$name"
  fi
done
if ((${#stale[@]})); then
  log "missing or stale in $bin: ${stale[*]} (run scripts/setup.sh --test)"
  exit 1
fi
echo "$bin"
