#!/usr/bin/env bash
# tier: long (the QEMU VM with Soft-RoCE boots under TCG: minutes)
# The verbs backend on a real verbs device: boots Debian's kernel with Soft-RoCE in QEMU
# (tests/vm/run.sh) and runs the verbs tests inside it (tests/vm/in_vm.sh: unit tests,
# AllReduce over RC QPs for 2 and 3 ranks, a killed rank, chaos, latency beside perftest).
# About 80 s on a loaded 2-core host. Exits 77 with a reason when QEMU, busybox, the kernel
# package or the verbs build are unavailable. Bounded: the VM is killed after TIMEOUT seconds
# (default 200), the whole script (kernel download included) after 300.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
require_cmd qemu-system-x86_64
require_built "$BUILD/libkeel_verbs.a"
BUILD=$BUILD TIMEOUT=${TIMEOUT:-200} timeout -s KILL 300 bash tests/vm/run.sh
