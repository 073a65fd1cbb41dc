#!/usr/bin/env bash
# Multi-process AllReduce over the shared-memory transport (KEEL_TRANSPORT=shm): 2 and 4 ranks
# started by keel-run on this host, every dtype and op at the chunking boundaries, both
# algorithms, every element checked against the reference; then keel-train on 4 ranks with rank
# 2 SIGKILLed and restarted (its new life must not read its old rings, and must rejoin). Then
# no region may be left behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
CHECK=$BUILD/tests/integ-allreduce_check
must_be_built "$BIN/keel-run" "$CHECK"
tmpdir_make tmp
export KEEL_TRANSPORT=shm KEEL_HEARTBEAT_US=20000 KEEL_OP_TIMEOUT_MS=20000 KEEL_WAIT=block
before=$(ls /dev/shm | grep -c '^keel-' || true)
for n in 2 4; do
	for algo in ring rd; do
		run_ranks "$n" 120 -- "$CHECK" "$algo" | { grep -v '^keel-run: rank' || true; }
	done
done
# Datagrams of a 1500-byte link, as every peer of a job across such hosts gets them: runs of
# small records go into the rings in one copy (KEEL_SHM_STAGE, on by default), or one by one.
for stage in 1 0; do
	KEEL_MTU=1472 KEEL_SHM_STAGE=$stage run_ranks 2 120 -- "$CHECK" ring |
		{ grep -v '^keel-run: rank' || true; }
done
if KEEL_SHM_STAGE=yes run_ranks 2 30 -- "$CHECK" ring >"$tmp/stage" 2>&1; then
	echo "shm_allreduce: KEEL_SHM_STAGE=yes was accepted"
	exit 1
fi
grep -q "KEEL_SHM_STAGE='yes': expected 0 (off) or 1 (on)" "$tmp/stage" ||
	{ cat "$tmp/stage"; echo "shm_allreduce: no error naming KEEL_SHM_STAGE"; exit 1; }
TRAIN=$BIN/keel-train
if [ -x "$TRAIN" ] && [ -f "$DIGITS" ]; then
	# 60 epochs: ~5 s here. At 20 (~2 s) the others could finish before the new life of rank
	# 2 was admitted (it then says "training had ended"), which failed CI once.
	KEEL_HEARTBEAT_US=10000 run_ranks 4 80 --restart --kill 2@1.0 -- \
		"$TRAIN" --epochs 60 --batch 8 --lr 0.1 --ckpt-dir "$tmp/ckpt" --quiet >"$tmp/log" 2>&1 ||
		{ cat "$tmp/log"; echo "shm_allreduce: keel-train with a restarted rank failed"; exit 1; }
	grep -q 'rank 2 (restarted' "$tmp/log" ||
		{ cat "$tmp/log"; echo "shm_allreduce: rank 2 did not come back"; exit 1; }
	grep -q 'within 1 point' "$tmp/log" ||
		{ cat "$tmp/log"; echo "shm_allreduce: accuracy not within 1 point"; exit 1; }
	echo "shm_allreduce: keel-train, rank 2 killed and restarted: rejoined, accuracy within 1 point"
else
	echo "shm_allreduce: keel-train or the digits data set missing: restart leg skipped"
fi
after=$(ls /dev/shm | grep -c '^keel-' || true)
if [ "$after" -gt "$before" ]; then
	echo "shm_allreduce: keel-run left $((after - before)) region(s) in /dev/shm"
	exit 1
fi
echo "shm_allreduce: 2 and 4 ranks, ring and rd; 1472-byte datagrams staged and not: passed"
