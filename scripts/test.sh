#!/usr/bin/env bash
# Quick start: install what is needed, build, and run the test suite (as
# root: the end-to-end tests load BPF programs into the running kernel).
#
#   scripts/test.sh [PYTEST ARGS]          the whole suite, every stage and tier
#                                          (what CI runs), its e2e tests in two
#                                          lanes at once (guests beside the
#                                          host); arguments go to pytest
#   scripts/test.sh --fast [PYTEST ARGS]   the loop for every change, a few
#                                          minutes with a warm cargo build: style,
#                                          unit tests and the e2e tests of the
#                                          fast tier (tests/e2e/helpers/tiers.py)
#   scripts/test.sh --only STAGE [ARGS]    one stage: style, unit or e2e (the
#                                          jobs of .github/workflows/ci.yml)
set -euo pipefail
cd "$(dirname "$0")/.."
stage=all tier=
case ${1:-} in
--only)
  case ${2:-} in
  style | unit | e2e) stage=$2 ;;
  *) echo "test.sh: --only style, unit or e2e" >&2; exit 2 ;;
  esac
  shift 2
  ;;
--fast) tier=fast; shift ;;
esac
want() { [[ $stage == all || $stage == "$1" ]]; }
source scripts/as-root.sh
started=$SECONDS
if want e2e; then scripts/setup.sh --test; else scripts/setup.sh; fi
source "$HOME/.cargo/env" 2>/dev/null || true
stamp() { echo "== [$((SECONDS - started)) s] $*"; }
# A fresh clone starts from the dependencies an earlier run compiled
# (scripts/target-cache.sh; the whole suite's run saves them at its end).
scripts/target-cache.sh restore

if want style; then
  stamp "style: cargo fmt, clippy"
  cargo fmt --all -- --check
  cargo clippy --locked --all-targets -- -D warnings
  cargo clippy --locked --all-targets --features fault-injection -- -D warnings
fi

if want unit; then
  stamp "unit tests: Rust"
  cargo test --locked
  cargo test --locked --features fault-injection bpf::

  stamp "unit tests: BPF classifiers (bpf/classify.h) on the host"
  mkdir -p target/host-tests
  gcc -O2 -Wall -Werror -I bpf tests/unit/classify_test.c -o target/host-tests/classify_test
  target/host-tests/classify_test
fi
want e2e || exit 0

stamp "end-to-end tests against the real kernel${tier:+ (tier $tier)}"
cargo build --release --locked -p slowpath
arm64=target/aarch64-unknown-linux-gnu/release/slowpath
build_arm64() {
  cargo build --release --locked -p slowpath --target aarch64-unknown-linux-gnu
}
if [[ -z $tier ]]; then
  # The degradation tests need the test-only fault injection, which the
  # product does not have: built in the dev profile and copied aside.
  cargo build --locked -p slowpath --features fault-injection
  mkdir -p target/fault-injection
  cp target/debug/slowpath target/fault-injection/slowpath
fi
# Every e2e test of the tier, unless the arguments name test files themselves.
where=(tests/e2e)
for arg in "$@"; do [[ $arg == tests/* ]] && where=(); done
# forbid_skips (tests/e2e/forbid_skips.py): on the machine set up above a
# skipped test is a failure. The 30 slowest tests are listed: CI has 90 minutes.
pytest_e2e() {
  SLOWPATH_BIN="$PWD/target/release/slowpath" SLOWPATH_FAULTS_BIN="$PWD/target/fault-injection/slowpath" \
  SP_WORKLOAD="$PWD/tests/workloads/bin/sp-workload" \
  PYTHONPATH="$PWD/tests/e2e" \
    /usr/bin/python3 -m pytest -p no:cacheprovider -p forbid_skips -ra --durations=30 ${tier:+--tier=$tier} "$@"
}
if [[ -n $tier || ${#where[@]} -eq 0 ]]; then
  if [[ -z $tier ]]; then
    stamp "the agent cross-built for arm64 (booted in an arm64 guest by test_guest.py)"
    build_arm64
  fi
  stamp "pytest"
  pytest_e2e "${where[@]}" "$@"
  exit
fi
# The whole suite: the guest lane beside the host lane (tests/e2e/helpers/
# tiers.py), each its own pytest. The guest lane, niced (its TCG boots and
# the cross build are CPU-bound; the host lane's tests mostly wait on their
# workloads), first cross-builds the arm64 agent, which only its arm64 boot
# and the host lane's test_release.py use: that fixture waits on the lock
# taken here until the build is done (SLOWPATH_ARM64_BUILD_LOCK). The guest
# lane's report is printed once both are done. A --junitxml=FILE argument
# gives the guest lane FILE with .guest before its suffix.
guest_args=()
for arg in "$@"; do
  if [[ $arg == --junitxml=* ]]; then
    file=${arg#--junitxml=}
    guest_args+=("--junitxml=${file%.xml}.guest.xml")
  else
    guest_args+=("$arg")
  fi
done
mkdir -p target
guest_log=target/pytest-guest-lane.log
export SLOWPATH_ARM64_BUILD_LOCK=$PWD/target/arm64-build.lock
guest_lane() {
  renice -n 10 -p "$BASHPID" >/dev/null
  local rc=0
  stamp "the guest lane: the agent cross-built for arm64, niced"
  rm -f "$arm64"  # a failed build leaves none to be taken for this one
  build_arm64 || rc=$?
  exec 9>&-  # the lock: the arm64 agent is built (or its build failed)
  stamp "the guest lane: pytest"
  pytest_e2e --lane=guest "${where[@]}" "${guest_args[@]}" || rc=$?
  return "$rc"
}
exec 9>"$SLOWPATH_ARM64_BUILD_LOCK"
flock 9
stamp "the guest lane in the background (its output: $guest_log); pytest: the host lane"
guest_lane >"$guest_log" 2>&1 &
guest_pid=$!
exec 9>&-  # the guest lane holds the lock now
trap 'kill "$guest_pid" 2>/dev/null || true' EXIT  # the host lane interrupted: the guest lane too
host_rc=0
pytest_e2e --lane=host "${where[@]}" "$@" || host_rc=$?
stamp "the host lane done (exit $host_rc); waiting for the guest lane"
guest_rc=0
wait "$guest_pid" || guest_rc=$?
trap - EXIT
stamp "the guest lane done (exit $guest_rc): its output"
cat "$guest_log"
scripts/target-cache.sh save
if ((host_rc || guest_rc)); then
  echo "test.sh: failed: the host lane exited $host_rc, the guest lane $guest_rc" >&2
  exit 1
fi
stamp "every stage passed"
