#!/usr/bin/env bash
# The full kernel matrix: every guest scenario of tests/e2e/test_guest.py on
# x86_64 and arm64, each with Debian's 5.10 (bullseye), 6.1 (bookworm) and
# 6.12 (trixie) cloud kernels. The default test run (scripts/test.sh) boots
# all three x86_64 kernels and one arm64 kernel (6.1); this adds the arm64
# 5.10 and 6.12 boots and the kernel without exposed BTF on 5.10 and 6.12.
# Takes about 15 minutes on 2 vCPUs (TCG). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the full matrix's kernels too (tests/deploy/test-tools.sh's kernels step)
SLOWPATH_GUEST_MATRIX=full scripts/setup.sh --test
source "$HOME/.cargo/env" 2>/dev/null || true
cargo build --release --locked -p slowpath
cargo build --release --locked -p slowpath --target aarch64-unknown-linux-gnu
SLOWPATH_GUEST_MATRIX=full /usr/bin/python3 -m pytest -p no:cacheprovider -ra tests/e2e/test_guest.py "$@"
