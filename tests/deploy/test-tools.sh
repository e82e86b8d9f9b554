#!/usr/bin/env bash
# Builds everything the test suite uses but does not test, once, into its
# caches (scripts/setup.sh --test runs it; the tests only check, and fail
# naming scripts/setup.sh --test when something is missing or stale):
#
#   tools           tests/deploy/install-tools.sh: Prometheus 3, Thanos, helm, ...
#   k8s             tests/deploy/k8s-tools.sh: kube-apiserver, kubelet, containerd, etcd, kwok, CNI
#   cargo           scripts/cargo-tool.sh: cargo-deb (tests/deploy/build-deb.sh) and
#                   cargo-cyclonedx (scripts/release.sh), at their scripts' pins
#   image-amd64     tests/deploy/base-image.sh: the amd64 base, then the systemd image on it
#   image-arm64     the arm64 base
#   image-runtimes  the real node's workload base (python3, OpenJDK)
#   kernels         tests/guest/harness.py --fetch: the guests' Debian kernels
#                   (SLOWPATH_GUEST_MATRIX=full: the full matrix's too)
#   workloads       tests/workloads/build.sh: the C, Go and Java workloads
#   dashboards      dashboards/generate.sh --setup: the pinned grafana-foundation-sdk's virtualenv
#
#   test-tools.sh               every step
#   test-tools.sh STEP...       those steps
#   test-tools.sh --check [STEP...]   builds nothing: exits 1 if a step is incomplete
#
# The steps are independent and run concurrently, each logging to its own
# file: the cold Go builds of tools and k8s each use about one core on
# average (much of their time is downloads), so together they keep 2 cores
# busy. Prints each step's wall time; on failure the failed steps' log tails
# (the logs are kept then).
# Cold about 25 min on 2 cores (k8s the longest); warm about 10 s (kernels:
# checking their SHA256 against apt's index).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"

STEPS=(tools k8s cargo image-amd64 image-arm64 image-runtimes kernels workloads dashboards)
# --check is passed on: every script the steps run has its own
check=()
if [[ ${1:-} == --check ]]; then
  check=(--check)
  shift
fi

# The pin a script keeps in VAR=VERSION.
pin() { sed -n "s/^$2=\([^ ]*\).*/\1/p" "$1"; }

step_tools() { tests/deploy/install-tools.sh "${check[@]}"; }
step_k8s() { tests/deploy/k8s-tools.sh "${check[@]}"; }
step_cargo() {
  scripts/cargo-tool.sh "${check[@]}" cargo-deb "$(pin tests/deploy/build-deb.sh CARGO_DEB_VERSION)" &&
    scripts/cargo-tool.sh "${check[@]}" cargo-cyclonedx "$(pin scripts/release.sh CARGO_CYCLONEDX_VERSION)"
}
# the systemd image is made from the amd64 base
step_image-amd64() { tests/deploy/base-image.sh "${check[@]}" amd64 && tests/deploy/base-image.sh "${check[@]}" systemd; }
step_image-arm64() { tests/deploy/base-image.sh "${check[@]}" arm64; }
step_image-runtimes() { tests/deploy/base-image.sh "${check[@]}" runtimes; }
step_kernels() {
  local full=()
  [[ ${SLOWPATH_GUEST_MATRIX:-} == full ]] && full=(--full)
  /usr/bin/python3 tests/guest/harness.py --fetch "${full[@]}" "${check[@]}"
}
step_workloads() { tests/workloads/build.sh "${check[@]}"; }
step_dashboards() {
  if ((${#check[@]})); then dashboards/generate.sh --check; else dashboards/generate.sh --setup; fi
}

names=("$@")
((${#names[@]})) || names=("${STEPS[@]}")
for name in "${names[@]}"; do
  declare -F "step_$name" >/dev/null || { echo "test-tools.sh: no step $name (steps: ${STEPS[*]})" >&2; exit 2; }
done

logs=$(mktemp -d "${TMPDIR:-/tmp}/slowpath-test-tools.XXXXXX")
t_start=$SECONDS
declare -A pids
for name in "${names[@]}"; do
  (
    t0=$SECONDS
    rc=0
    "step_$name" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$((SECONDS - t0))" >"$logs/$name.seconds"
    exit "$rc"
  ) &
  pids[$name]=$!
done

failed=()
for name in "${names[@]}"; do
  if wait "${pids[$name]}"; then
    echo "test-tools.sh: $name ok in $(cat "$logs/$name.seconds")s"
  else
    echo "test-tools.sh: $name FAILED after $(cat "$logs/$name.seconds")s ($logs/$name.log)"
    failed+=("$name")
  fi
done
for name in "${failed[@]}"; do
  echo "--- $name: the end of $logs/$name.log" >&2
  tail -n 25 "$logs/$name.log" >&2
done
if ((${#failed[@]})); then
  echo "test-tools.sh: failed: ${failed[*]} (after $((SECONDS - t_start))s)" >&2
  exit 1
fi
rm -rf "$logs"
echo "test-tools.sh: ${names[*]} ready in $((SECONDS - t_start))s"
