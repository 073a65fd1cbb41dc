#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one go (under 5 minutes on one GPU):
#   1. build the CUDA parts (libkeel_cuda.a, gpu-check, keel-bench with --device cuda);
#   2. gpu-check: every dtype x op x boundary size through the kernels against the CPU
#      reference, bit for bit (random bits: NaN, -0, subnormals; a float sum's NaN may carry
#      another payload), keel_device_cuda_copy_sync ordered with keel's stream, then the
#      kernel's bandwidth against the HBM peak and the host<->device copy rates that bound
#      the staging pipeline (a failure here is reported, and the runs below still go);
#   3. gpu-pipeline: 3 keel nodes in one process, a CUDA device each, ring and recursive
#      doubling in and out of place, then a rank killed mid-pipeline: exact results, over the
#      survivors after the restart from the staged input;
#   4. keel-bench allreduce --device cuda --check on 2 ranks (shared memory, then UDP): every
#      element of every size checked, and the pipeline's bus bandwidth beside the copy rates;
#   5. where an RDMA device is present, the same over verbs with the device buffers
#      registered as dma-bufs and a device area for what peers send (--register): GPUDirect
#      RDMA both ways where the NIC and driver take them (the run says which way its device
#      buffers went, whether it has a device area, how many datagrams the NIC read from
#      device memory and how many it wrote there), staged otherwise; every element checked.
# Prints a summary block to paste into docs/PERF.md. Exits 77 when no GPU is visible.
#   tools/gpu-check.sh            (BUILD=dir, CUDA_HOME=/usr/local/cuda, MAX=64M)
#   PREBUILT=1 tools/gpu-check.sh  runs binaries already in $BUILD (built on another machine
#                                  with the same CPU type, for a GPU box without the build's
#                                  packages): no make, no nvcc needed; put the libraries they
#                                  link (ldd) on LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MAX=${MAX:-64M}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ "${PREBUILT:-0}" = 1 ]; then
	for b in "$BUILD/tests/gpu-check" "$BUILD/tests/gpu-pipeline" "$BUILD/bin/keel-bench" \
		"$BUILD/bin/keel-run"; do
		[ -x "$b" ] || { echo "gpu-check: PREBUILT=1 but $b is missing"; exit 1; }
	done
else
	[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "gpu-check: $CUDA_HOME/bin/nvcc not found (set CUDA_HOME)"; exit 1; }
	make -s BUILD="$BUILD" "$BUILD/tests/gpu-check" "$BUILD/tests/gpu-pipeline" \
		"$BUILD/bin/keel-bench" "$BUILD/bin/keel-run" >/dev/null
fi
out=$(mktemp -d /tmp/keel-gpu-check.XXXXXX)
trap 'rm -rf "$out"' EXIT
set +e
"$BUILD/tests/gpu-check" | tee "$out/kernels"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 77 ] && { echo "gpu-check: no GPU here: skipped"; exit 77; }
status=0
# on: the runs below tell their own story, and a GPU's time is too dear to run twice
[ "$rc" -eq 0 ] || { echo "gpu-check: kernel or copy checks FAILED"; status=1; }
set +e
timeout 120 "$BUILD/tests/gpu-pipeline" | tee "$out/pipeline"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "gpu-check: the pipeline checks FAILED (rc $rc)"; status=1; }
transports="shm udp"
# an RDMA device (sysfs) and a keel built with verbs: GPUDirect RDMA is tried over it
if ls /sys/class/infiniband/* >/dev/null 2>&1 && [ -f "$BUILD/libkeel_verbs.a" ]; then
	transports="$transports verbs"
fi
for tp in $transports; do
	reg=()
	[ "$tp" = verbs ] && reg=(--register)
	echo "== keel-bench allreduce --device cuda --check ${reg[*]}, 2 ranks, $tp"
	if ! timeout 150 "$BUILD/bin/keel-run" -n 2 --timeout 140 -- "$BUILD/bin/keel-bench" \
		allreduce --device cuda --check "${reg[@]}" --transport "$tp" -b 4 -e "$MAX" -f 4 \
		-n 10 -w 2 >"$out/bench-$tp" 2>&1; then
		status=1
	fi
	grep -v '^keel-run: rank' "$out/bench-$tp" || true
	grep -q 'Out of bounds values : 0 OK' "$out/bench-$tp" || status=1
done
echo
echo "==== for docs/PERF.md ($(date -u +%F), $(hostname)) ===="
sed -n '1p' "$out/kernels"
grep -E '^(kernels|kernel|copy_sync|copies|device call|GPUDirect|FAIL)' "$out/kernels" | head -40
grep -E '^(pipeline|FAIL)' "$out/pipeline" || true
for tp in $transports; do
	echo "2 ranks over $tp, device buffers (size, out-of-place us, busbw GB/s):"
	grep -hE '^# (device buffers|device area|Datagrams the NIC)' "$out/bench-$tp" || true
	awk '$1 ~ /^[0-9]+$/ {printf "  %12s B %10s us %8s GB/s\n", $1, $6, $8}' "$out/bench-$tp"
done
[ "$status" -eq 0 ] && echo "gpu-check: PASSED" || echo "gpu-check: FAILED"
exit "$status"
