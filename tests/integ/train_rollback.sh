#!/usr/bin/env bash
# Rollback on a hard fault: 3 ranks over the chaos transport (loss, duplicates, reordering);
# rank 1 is told to take a hard fault at step 350 (--fault-at). Every member must roll back to
# the same checkpoint step, then finish with the accuracy of the no-failure run.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
RUN="$BUILD/bin/keel-run"; TRAIN="$BUILD/bin/keel-train"
[ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ] ||
	{ echo "train_rollback: digits data set missing (python3-sklearn): skipped"; exit 77; }
tmp=$(mktemp -d /tmp/keel-train-rollback.XXXXXX); trap 'rm -rf "$tmp"' EXIT
KEEL_CHAOS=loss=0.01,dup=0.001,reorder=0.01,seed=${SEED:-7} KEEL_HEARTBEAT_US=10000 \
	timeout 90 "$RUN" -n 3 --timeout 80 -- "$TRAIN" --epochs 8 --ckpt-dir "$tmp/ckpt" \
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
