#!/usr/bin/env bash
# Quick start: install what is needed, build, and run the test suite (as
# root: the end-to-end tests load BPF programs into the running kernel).
#
#   scripts/test.sh [PYTEST ARGS]          the whole suite, every stage and tier
#                                          (what CI runs); arguments go to pytest
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
# The binaries are dated by the commit's time, as scripts/release.sh dates
# them: the same build, so test_release.py's release of a committed checkout
# finds them current instead of compiling slowpath twice more.
if [[ -z ${SOURCE_DATE_EPOCH:-} ]] && epoch=$(git log -1 --format=%ct 2>/dev/null); then
  export SOURCE_DATE_EPOCH=$epoch
fi
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
if [[ -z $tier ]]; then
  # The degradation tests need the test-only fault injection, which the
  # product does not have: built in the dev profile and copied aside.
  cargo build --locked -p slowpath --features fault-injection
  mkdir -p target/fault-injection
  cp target/debug/slowpath target/fault-injection/slowpath
  stamp "the agent cross-built for arm64 (booted in an arm64 guest by test_guest.py)"
  cargo build --release --locked -p slowpath --target aarch64-unknown-linux-gnu
fi
# Every e2e test of the tier, unless the arguments name test files themselves.
where=(tests/e2e)
for arg in "$@"; do [[ $arg == tests/* ]] && where=(); done
# forbid_skips (tests/e2e/forbid_skips.py): on the machine set up above a
# skipped test is a failure. The 30 slowest tests are listed: CI has 90 minutes.
# Both lanes (tests/e2e/helpers/tiers.py) in one run, one test at a time:
# run beside each other, the host lane's bpftrace, cost and top tests failed.
stamp "pytest"
rc=0
SLOWPATH_BIN="$PWD/target/release/slowpath" SLOWPATH_FAULTS_BIN="$PWD/target/fault-injection/slowpath" \
SP_WORKLOAD="$PWD/tests/workloads/bin/sp-workload" \
PYTHONPATH="$PWD/tests/e2e" \
  /usr/bin/python3 -m pytest -p no:cacheprovider -p forbid_skips -ra --durations=30 ${tier:+--tier=$tier} "${where[@]}" "$@" || rc=$?
# The whole suite's dependencies, for the next fresh clone's run.
[[ -n $tier ]] || scripts/target-cache.sh save
exit "$rc"
