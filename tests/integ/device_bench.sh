#!/usr/bin/env bash
# AllReduce on device buffers between processes, over the CPU stand-in device: keel-bench
# --device cpu --check on 2 and 3 ranks over UDP (also under loss) and shared memory, every
# element of every size checked; --device cuda where nvcc built keel-bench with CUDA but no GPU
# is visible must fail with a clear line, never hang; a bad --device is refused. The CUDA path
# itself runs only on a GPU (tools/gpu-check.sh; tests/integ/gpu_check.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUN=$BIN/keel-run
BENCH=$BIN/keel-bench
must_be_built "$RUN" "$BENCH"
export KEEL_HEARTBEAT_US=20000 KEEL_WAIT=block
tmpdir_make tmp
check() { # label, env..., -- ranks, bench args...
	local label=$1; shift
	if ! env "$@" >"$tmp/log" 2>&1; then
		cat "$tmp/log"; echo "device_bench: $label: failed"; exit 1
	fi
	grep -q 'Out of bounds values : 0 OK' "$tmp/log" ||
		{ cat "$tmp/log"; echo "device_bench: $label: results wrong"; exit 1; }
	grep -q '# buffers on device: cpu' "$tmp/log" ||
		{ cat "$tmp/log"; echo "device_bench: $label: not on the device"; exit 1; }
	echo "device_bench: $label: every element right"
}
args=(allreduce --device cpu --check -b 4 -e 4M -f 16 -n 3 -w 1)
check "2 ranks, udp" KEEL_TRANSPORT=udp timeout 120 "$RUN" -n 2 --timeout 110 -- "$BENCH" "${args[@]}"
check "3 ranks, udp, ring, bf16 avg" KEEL_TRANSPORT=udp KEEL_ALGO=ring KEEL_DEVICE_CHUNK_KB=8 \
	timeout 120 "$RUN" -n 3 --timeout 110 -- "$BENCH" "${args[@]}" -d bf16 -o avg
check "3 ranks, udp, 1 % loss" KEEL_TRANSPORT=udp KEEL_CHAOS=loss=0.01,seed=5 \
	timeout 120 "$RUN" -n 3 --timeout 110 -- "$BENCH" "${args[@]}" -d i64 -o max
check "2 ranks, shm" KEEL_TRANSPORT=shm timeout 120 "$RUN" -n 2 --timeout 110 -- "$BENCH" "${args[@]}"
# No GPU here: a clear refusal, at once.
set +e
run_ranks 2 50 -- "$BENCH" allreduce --device cuda -e 1M >"$tmp/cuda" 2>&1
rc=$?
timeout 20 "$BENCH" allreduce --device tpu >"$tmp/bad" 2>&1
bad_rc=$?
set -e
if [ "$rc" -eq 0 ] && grep -q '# buffers on device: cuda' "$tmp/cuda"; then
	echo "device_bench: a GPU is visible: --device cuda ran (tools/gpu-check.sh checks it)"
elif [ "$rc" -eq 124 ] || ! grep -Eq 'keel-bench: --device cuda: (ENODEV|keel-bench was built without CUDA)' "$tmp/cuda"; then
	cat "$tmp/cuda"; echo "device_bench: --device cuda without a GPU did not fail clearly (rc $rc)"; exit 1
else
	echo "device_bench: --device cuda without a GPU: $(grep -m1 -o 'keel-bench: --device cuda: .*' "$tmp/cuda")"
fi
set +e
KEEL_DEVICE_CHUNK_KB=2 timeout 20 "$BENCH" allreduce --device cpu >"$tmp/chunk" 2>&1
chunk_rc=$?
set -e
[ "$chunk_rc" -eq 2 ] && grep -q "KEEL_DEVICE_CHUNK_KB='2': expected a whole number in 4..1048576 (KiB)" "$tmp/chunk" ||
	{ cat "$tmp/chunk"; echo "device_bench: KEEL_DEVICE_CHUNK_KB=2 was not refused"; exit 1; }
[ "$bad_rc" -ne 0 ] && grep -q "keel-bench: --device 'tpu': cpu or cuda" "$tmp/bad" ||
	{ cat "$tmp/bad"; echo "device_bench: --device tpu was not refused"; exit 1; }
echo "device_bench: PASSED"
