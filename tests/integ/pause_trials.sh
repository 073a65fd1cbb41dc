#!/usr/bin/env bash
# Gray failures: a rank stops (SIGSTOP: a swap storm, a stop-the-world pause, a debugger) and
# comes back with its old state, epoch and incarnation. keel-run --pause stops one rank — any
# rank, the coordinator too — at a random moment for 0.2-5 s, while every rank runs AllReduce
# calls back to back (membership_check). Each trial must end with: every rank exiting 0 (the
# paused one excluded, told KEEL_EEXCLUDED, readmitted), one final view of all ranks, every
# result exact for the members its call reports, no call past keel_op_bound_ns, and the
# survivors' slowest call within the detection + view-change bound (docs/guarantees.md).
# Then keel-bench, whose paused rank leaves with exit 75 while the others finish.
#   WORLDS="3 4 5"  TRIALS=n per world (1 in make test, 6 in make test-long through
#   pause_trials_long.sh, 50 for the figures in docs/perf-history.md)
#   SEED=n replays a schedule (with the same WORLDS and TRIALS); every trial prints the
#   values it drew.
set -u
set -o pipefail
. "$(dirname "$0")/lib.sh"
CHECK=$BUILD/tests/integ-membership_check
BENCH=$BIN/keel-bench
TRIALS=${TRIALS:-1}
WORLDS=${WORLDS:-3 4 5}
seed_init
must_be_built "$BIN/keel-run" "$CHECK" "$BENCH"
export KEEL_HEARTBEAT_US=${KEEL_HEARTBEAT_US:-10000} KEEL_WAIT=block
# A survivor's slowest call is the recovery (keel_recovery_bound_ns, printed by each rank)
# plus the call itself, which on 2 shared cores under load took up to 60 ms (docs/perf-history.md).
SLACK_MS=${SLACK_MS:-100}
tmpdir_make tmp
log=$tmp/log

RANDOM=$SEED
fail=0
trial() { # world, rank, at (s), pause (s)
	local n=$1 r=$2 at=$3 d=$4
	# the stop vote comes at least 1.2 s after the resume (whole seconds): time to be readmitted
	local end=$(($(date +%s) + 4 + ${at%.*} + ${d%.*}))
	local t0=$SECONDS
	KEEL_TEST_END=$end run_ranks "$n" 100 --pause "$r@$at:$d" -- \
		"$CHECK" >"$log" 2>&1
	local rc=$? took=$((SECONDS - t0))
	local finals views wrong survivors_worst excluded bound
	finals=$(grep -c "final view" "$log")
	views=$(grep "final view" "$log" | sed 's/.*final view \(epoch [0-9]* members [0-9,]*\).*/\1/' |
		sort -u)
	wrong=$(grep "final view" "$log" | grep -cv "wrong 0 errors 0 over-bound 0")
	excluded=$(grep "^rank $r life" "$log" | sed 's/.*excluded \([0-9]*\).*/\1/')
	survivors_worst=$(grep "final view" "$log" | grep -v "^rank $r life" |
		sed 's/.*worst \([0-9.]*\) ms.*/\1/' | sort -g | tail -1)
	bound=$(grep "final view" "$log" | head -1 | sed 's/.*recovery bound \([0-9.]*\) ms.*/\1/')
	local all
	all=$(seq -s, 0 $((n - 1)))
	local verdict=ok
	if [ $rc -ne 0 ] || [ "$finals" -ne "$n" ]; then
		verdict="FAILED (keel-run rc $rc, $finals final lines)"
	elif [ "$(echo "$views" | wc -l)" -ne 1 ] || ! echo "$views" | grep -q "members $all\$"; then
		verdict="FAILED: final views differ or miss ranks: $views"
	elif [ "$wrong" -ne 0 ]; then
		verdict="FAILED: wrong results, errors or calls past the bound"
	elif ! awk -v w="$survivors_worst" -v b="$bound" -v s="$SLACK_MS" \
		'BEGIN { exit !(w != "" && w <= b + s) }'; then
		verdict="FAILED: a survivor's call took $survivors_worst ms, over the recovery bound"
		verdict="$verdict $bound ms + ${SLACK_MS} ms for the call itself"
	fi
	echo "pause_trials: n=$n rank $r paused at ${at}s for ${d}s: excluded ${excluded:-?}," \
		"survivors' slowest call ${survivors_worst:-?} ms (bound ${bound:-?}), ${took}s:" \
		"$verdict"
	if [ "$verdict" != ok ]; then
		grep -E "^rank|keel-run|wrong|: " "$log" | head -20
		return 1
	fi
}

for n in $WORLDS; do
	for _ in $(seq 1 "$TRIALS"); do
		r=$((RANDOM % n))
		at=$((2 + RANDOM % 2)).$((RANDOM % 10))
		d=$((RANDOM % 5)).$((2 + RANDOM % 8))
		trial "$n" "$r" "$at" "$d" || fail=1
	done
done

# keel-bench: a program that cannot catch up leaves with exit 75; keel-run does not count it
# as a failure and the others finish their sweep on the smaller view.
KEEL_HEARTBEAT_US=40000 run_ranks 4 100 --pause 2@2.5:0.5 -- \
	"$BENCH" allreduce -b 1K -e 1K -n 30000 >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "rank 2 exited with status 75" "$log" ||
	! grep -q "Avg bus bandwidth" "$log"; then
	echo "pause_trials: keel-bench with a paused rank: FAILED (keel-run rc $rc)"
	grep -v "^ " "$log" | tail -15
	fail=1
else
	echo "pause_trials: keel-bench: rank 2 excluded and left (exit 75), the others finished"
fi
exit $fail
