#!/usr/bin/env bash
# NVTX: with a tool attached (NVTX_INJECTION64_PATH, as Nsight Systems sets it; here a stand-in
# that logs the calls, tests/support/nvtx_inject.c), each rank of a 2-rank keel-bench opens one
# "keel allreduce" range per collective and closes each, in order. Skipped where the build
# found no nvtx3.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
LIB=$BUILD/tests/libnvtx_inject.so
require_built "$LIB"
tmpdir_make tmp
iters=30 warm=5
NVTX_INJECTION64_PATH=$PWD/$LIB KEEL_TEST_NVTX_LOG=$tmp/log timeout 60 \
	"$BIN/keel-run" -n 2 -- "$BIN/keel-bench" allreduce -b 1K -e 1K -n $iters \
	-w $warm >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "nvtx: keel-bench failed"; exit 1; }
logs=("$tmp"/log.*)
[ ${#logs[@]} -eq 2 ] || { echo "nvtx: ${#logs[@]} tool logs, expected one per rank"; exit 1; }
for f in "${logs[@]}"; do
	head -1 "$f" | grep -qx attached || { echo "nvtx: tool not attached in $f"; exit 1; }
	starts=$(grep -c '^start [0-9]* keel allreduce$' "$f" || true)
	ends=$(grep -c '^end ' "$f" || true)
	# keel-bench's collectives: the line-up, warm-up and timed ones, and its result checks
	[ "$starts" -ge $((iters + warm)) ] || { echo "nvtx: $starts ranges in $f"; exit 1; }
	[ "$starts" -eq "$ends" ] || { echo "nvtx: $starts ranges opened, $ends closed ($f)"; exit 1; }
	# each range is closed before the next opens: ids alternate start N, end N
	awk '$1 == "start" { if (open != "") bad = 1; open = $2 }
	     $1 == "end" { if ($2 != open) bad = 1; open = "" }
	     END { exit bad || open != "" }' "$f" || { echo "nvtx: ranges out of order in $f"; exit 1; }
done
echo "nvtx: 2 ranks, $starts 'keel allreduce' ranges each, every one closed in order"
echo "nvtx: passed"
