#!/usr/bin/env bash
# The verbs backend on a real verbs device: boots Debian's kernel with Soft-RoCE in QEMU
# (tests/vm/run.sh) and runs the verbs tests inside it. Exits 77 with a reason when QEMU,
# busybox, the kernel package or the verbs build are unavailable; bounded by TIMEOUT.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
command -v qemu-system-x86_64 >/dev/null || {
	echo "verbs_vm: skipped: QEMU not installed (tools/deps.sh installs qemu-system-x86)"
	exit 77
}
[ -f "$BUILD/libkeel_verbs.a" ] || {
	echo "verbs_vm: skipped: verbs backend not built (install libibverbs-dev)"
	exit 77
}
# The full in-VM suite does not fit the ~3 minute budget under TCG yet (AllReduce for 2 ranks
# alone takes minutes): opt in until it does.
[ "${KEEL_TEST_VERBS_VM:-0}" = 1 ] || {
	echo "verbs_vm: skipped: the Soft-RoCE VM suite is opt-in for now (KEEL_TEST_VERBS_VM=1, or"
	echo "  make test-verbs); it exceeds the 3-minute budget under TCG"
	exit 77
}
BUILD=$BUILD TIMEOUT=${TIMEOUT:-240} timeout -s KILL 300 bash tests/vm/run.sh
