#!/usr/bin/env bash
# Rollback on a hard fault: 3 ranks over the chaos transport (loss, duplicates, reordering);
# rank 1 is told to take a hard fault at step 350 (--fault-at). Every member must roll back to
# the same checkpoint step, then finish with the accuracy of the no-failure run.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
require_digits
tmpdir_make tmp
KEEL_CHAOS=loss=0.01,dup=0.001,reorder=0.01,seed=${SEED:-7} KEEL_HEARTBEAT_US=10000 \
	run_ranks 3 80 -- "$TRAIN" --epochs 8 --ckpt-dir "$tmp/ckpt" \
	--ckpt-every 100 --fault-at 1@350 --quiet >"$tmp/log" 2>&1
rc=$?
cat "$tmp/log"
[ $rc -eq 0 ] || { echo "train_rollback: keel-run failed (rc $rc)"; exit 1; }
steps=$(grep -o 'rolled back from step [0-9]* to step [0-9]*' "$tmp/log" | awk '{print $NF}' | sort -u)
count=$(grep -c 'rolled back from step' "$tmp/log")
[ "$count" -eq 3 ] || { echo "train_rollback: $count of 3 ranks rolled back"; exit 1; }
[ "$(echo "$steps" | wc -l)" -eq 1 ] || { echo "train_rollback: ranks restored different steps: $steps"; exit 1; }
[ "$steps" = 300 ] || { echo "train_rollback: restored step $steps, expected 300"; exit 1; }
grep -q 'within 1 point' "$tmp/log" || { echo "train_rollback: accuracy not within 1 point"; exit 1; }
echo "train_rollback: all 3 ranks restored step $steps"
