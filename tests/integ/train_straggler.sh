#!/usr/bin/env bash
# Stragglers in the running job: keel-train on 4 ranks, each sample costing 20 us more
# (compute-bound steps), rank 2 computing 4x slower from step 30. Every rank's compute time
# travels with each step's gradient; every rank must print the same repair (same step, same
# plan digest) within 5 steps of the slowdown, and none after it (no oscillation); the slowest
# rank's compute per step after the repair must be within 30 % of the ideal for the measured
# speeds (the static split stays ~3x; 4 ranks sharing 2 cores measured 1.05-1.34x after the
# repair, 2026-12-02, so 15 % failed CI on noise alone; and these two timing checks get a
# second run when a noisy machine upsets the first); the accuracy must stay within 1 point of the run without failure. With --no-repair
# (the static split) nothing is repaired and the step stays ~3x the ideal. Every plan (at each
# view and each repair, also after a rank is killed) is held alike by every rank.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
must_be_built "$BIN/keel-run" "$TRAIN"
require_digits
tmpdir_make tmp
args=(--epochs 10 --batch 64 --compute-us 20 --slow 2:4@30 --quiet --print-plans)
# Every plan a rank printed (at a view: "plan at epoch E", at a repair: "repair at step S")
# must be the plan every other rank printed for the same epoch or step.
plans_agree() {
	sed -n 's/^rank \([0-9]*\): plan at epoch \([0-9]*\): .* plan \([0-9a-f]*\)$/epoch\2 \1 \3/p;
		s/^rank \([0-9]*\): repair at step \([0-9]*\):.* plan \([0-9a-f]*\)$/step\2 \1 \3/p' "$1" |
		awk '{ if (($1) in d && d[$1] != $3) { print "train_straggler: rank " $2 " holds plan " $3 \
			" at " $1 ", another rank " d[$1]; bad = 1 } d[$1] = $3; n[$1]++ }
		END { k = 0; for (e in n) k++
			if (!bad) printf "train_straggler: %d plans, each held alike by the ranks that printed it\n", k
			exit bad || k == 0 }'
}

# One run with repair. What every rank must agree on fails at once (exit 1); what a noisy
# shared machine can upset (a second repair when another process steals a core, the ratio
# after the repair) returns 2, and the run is made once more: a broken repair fails both.
repair_run() {
	KEEL_HEARTBEAT_US=10000 run_ranks 4 100 -- "$TRAIN" "${args[@]}" \
		>"$tmp/log" 2>&1 || { cat "$tmp/log"; echo "train_straggler: keel-train failed"; return 1; }
	grep -E 'repair|stragglers|within' "$tmp/log"
	for r in 0 1 2 3; do
		grep "^rank $r: repair at step" "$tmp/log" | sed 's/^rank [0-9]*: //' >"$tmp/r$r"
	done
	[ -s "$tmp/r0" ] || { echo "train_straggler: no repair"; return 1; }
	for r in 1 2 3; do
		cmp -s "$tmp/r0" "$tmp/r$r" ||
			{ echo "train_straggler: rank $r repaired differently from rank 0"; return 1; }
	done
	grep -q 'within 1 point' "$tmp/log" || { echo "train_straggler: accuracy not within 1 point"; return 1; }
	[ "$(grep -c ': plan at epoch 1: 4 members' "$tmp/log")" = 4 ] ||
		{ echo "train_straggler: not every rank printed its first plan"; return 1; }
	plans_agree "$tmp/log" || return 1
	[ "$(wc -l <"$tmp/r0")" -eq 1 ] || { echo "train_straggler: more than one repair"; return 2; }
	step=$(sed -n 's/^repair at step \([0-9]*\):.*/\1/p' "$tmp/r0")
	[ "$step" -ge 30 ] && [ "$step" -le 35 ] ||
		{ echo "train_straggler: repair at step $step, slowdown at 30"; return 2; }
	ratio=$(sed -n 's/^stragglers: .*(\([0-9.]*\)x)$/\1/p' "$tmp/log")
	awk -v x="$ratio" 'BEGIN { exit !(x > 0 && x <= 1.3) }' ||
		{ echo "train_straggler: after the repair ${ratio}x the ideal (over 1.3)"; return 2; }
	echo "train_straggler: repaired at step $step by every rank alike; ${ratio}x the ideal after"
}
set +e
repair_run
rc=$?
if [ "$rc" = 2 ]; then
	echo "train_straggler: a timing check missed (load $(cut -d' ' -f1 /proc/loadavg)): once more"
	repair_run
	rc=$?
fi
set -e
[ "$rc" = 0 ] || exit 1

KEEL_HEARTBEAT_US=10000 run_ranks 4 100 -- "$TRAIN" "${args[@]}" \
	--no-repair >"$tmp/static" 2>&1 || { cat "$tmp/static"; echo "train_straggler: --no-repair failed"; exit 1; }
if grep -q 'repair at step' "$tmp/static"; then echo "train_straggler: --no-repair repaired"; exit 1; fi
sratio=$(sed -n 's/^stragglers: .*(\([0-9.]*\)x)$/\1/p' "$tmp/static")
awk -v x="$sratio" 'BEGIN { exit !(x >= 2) }' ||
	{ echo "train_straggler: the static split at ${sratio}x the ideal (expected >= 2)"; exit 1; }
echo "train_straggler: the static split stays at ${sratio}x the ideal"

# A rank lost at step 60 (it SIGKILLs itself; --keep-going lets the others go on): the
# survivors plan afresh at the new view (equal shares), the slow rank is repaired again, and
# every plan is still held alike.
set +e
KEEL_HEARTBEAT_US=10000 run_ranks 4 100 --keep-going -- "$TRAIN" "${args[@]}" \
	--crash-at 3@60 >"$tmp/kill" 2>&1
rc=$?
set -e
[ "$rc" = 137 ] && [ "$(grep -c '^keel-run: rank [012] exited with status 0$' "$tmp/kill")" = 3 ] ||
	{ cat "$tmp/kill"; echo "train_straggler: run with rank 3 lost: exit $rc"; exit 1; }
grep -q ': plan at epoch [2-9][0-9]*: 3 members' "$tmp/kill" ||
	{ grep -E 'plan|repair' "$tmp/kill"; echo "train_straggler: no plan over the 3 survivors"; exit 1; }
plans_agree "$tmp/kill" || exit 1
echo "train_straggler: passed"
