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
BUILD=$BUILD TIMEOUT=${TIMEOUT:-240} timeout -s KILL 300 bash tests/vm/run.sh
