#!/usr/bin/env bash
# keel-train in 2-D: 4 ranks as --tp 2 --dp 2 (two replicas of two ranks, the hidden layer split
# within each), against the same training with --tp 1.
#  1. No failure: every rank ran one AllGather, one ReduceScatter and one data-parallel
#     AllReduce per step, none failed, and the accuracy is within 1 point of --tp 1's.
#  2. Rank 2 SIGKILLed at a step (--crash-at, so that it lands inside the training on a
#     machine of any speed) and restarted: its partner, rank 3, steps out at that step (unless
#     the new life is back first), the replica comes back with the model's shards from
#     replica 0, every rank finishes, within 1 point of --tp 1.
#  3. The same kill, not restarted: replica 0 trains on alone to the end, rank 3 stays out
#     and finishes too (no hang), within 1 point.
# Each run is bounded by keel-run's --timeout (exit 124: a hang).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
require_digits
must_be_built "$TRAIN"
tmpdir_make tmp
EPOCHS=30 BATCH=8 CRASH=2000
STEPS=$((EPOCHS * (1438 / BATCH))) # 1438 train digits: 179 steps of 8 an epoch
ARGS=(--epochs $EPOCHS --batch $BATCH --lr 0.1 --quiet)
export KEEL_HEARTBEAT_US=10000
fail=0

# run NAME [keel-run options] -- [keel-train options]: the log in $tmp/NAME, its seconds in
# secs[NAME], keel-run's status in rcs[NAME].
declare -A secs rcs
run() {
	local name=$1 t0
	shift
	local ropts=()
	while [ "$1" != -- ]; do
		ropts+=("$1")
		shift
	done
	shift
	t0=$(date +%s%N)
	run_ranks 4 60 "${ropts[@]}" -- "$TRAIN" "${ARGS[@]}" "$@" >"$tmp/$name" 2>&1
	rcs[$name]=$?
	secs[$name]=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
	[ "${rcs[$name]}" -ne 124 ] || { cat "$tmp/$name"; fail "$name: keel-run timed out (a hang)"; }
}
acc() { grep -o 'final test accuracy: *[0-9.]*' "$tmp/$1" | grep -o '[0-9.]*$'; }
within() { # NAME: its accuracy within 1 point of --tp 1's
	local a
	a=$(acc "$1")
	[ -n "$a" ] || { bad "$1: no final accuracy"; return; }
	awk -v a="$a" -v b="$a1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1) }' ||
		bad "$1: accuracy $a %, --tp 1 $a1 %: more than 1 point apart"
}
exited() { # NAME RANK...: those ranks exited 0
	local r
	for r in "${@:2}"; do
		grep -q "^keel-run: rank $r exited with status 0$" "$tmp/$1" || bad "$1: rank $r did not exit 0"
	done
}
# count NAME RANK OP: how many OP (AllGather, ReduceScatter, DP AllReduce) that rank ran, and
# how many failed, as "N F"
count() {
	grep "^rank $2: shard" "$tmp/$1" | grep -o "; $3 [0-9]* ([0-9]* failed" |
		sed 's/.* \([0-9]*\) (\([0-9]*\) failed/\1 \2/'
}

run tp1 -- --tp 1
a1=$(acc tp1)
[ "${rcs[tp1]}" -eq 0 ] && [ -n "$a1" ] || { cat "$tmp/tp1"; fail "--tp 1 failed (rc ${rcs[tp1]})"; }

# 1. --tp 2 --dp 2, no failure
run tp2 -- --tp 2 --dp 2
[ "${rcs[tp2]}" -eq 0 ] || { cat "$tmp/tp2"; fail "--tp 2 failed (rc ${rcs[tp2]})"; }
within tp2
exited tp2 0 1 2 3
grep -q '^2-D parallel: *2 replicas of 2 ranks' "$tmp/tp2" || bad "tp2: no 2-D summary line"
for r in 0 1 2 3; do
	for op in AllGather ReduceScatter 'DP AllReduce'; do
		[ "$(count tp2 $r "$op")" = "$STEPS 0" ] ||
			bad "tp2: rank $r ran '$(count tp2 $r "$op")' $op (count, failed), not $STEPS 0"
	done
done
echo "train_tp: --tp 1 $a1 % (${secs[tp1]} s); --tp 2 --dp 2 $(acc tp2) % (${secs[tp2]} s)," \
	"$STEPS steps of AllGather, ReduceScatter and DP AllReduce on each rank"

# 2. rank 2 killed at step CRASH and restarted
run restart --restart -- --tp 2 --dp 2 --crash-at 2@$CRASH
grep -v '^rank [0-3]: shard' "$tmp/restart"
[ "${rcs[restart]}" -eq 0 ] || bad "restart: keel-run failed (rc ${rcs[restart]})"
within restart
exited restart 0 1 2 3
# The new life took the model at step `got`. Rank 3 stepped out at step CRASH and came back at
# that step too, or (the new life admitted before the others ended a round without it) never
# had to leave: then no step was done meanwhile, and its shard was still current.
got=$(grep -o '^rank 2 (restarted, life 2): .* at step [0-9]*' "$tmp/restart" | grep -o '[0-9]*$')
back=$(grep -o '^rank 3: replica 1 whole again: back in the plan at step [0-9]*' "$tmp/restart" |
	grep -o '[0-9]*$')
if grep -q '^rank 3: replica 1 lost a member' "$tmp/restart"; then
	grep -q "^rank 3: replica 1 lost a member .*out of the plan at step $CRASH," "$tmp/restart" ||
		bad "restart: rank 3 stepped out, not at step $CRASH"
	[ -n "$back" ] && [ "$back" = "$got" ] ||
		bad "restart: rank 3 back at step '${back:-}', rank 2 got the model at step '${got:-}'"
else
	[ "$got" = $CRASH ] || bad "restart: rank 3 never stepped out, yet rank 2 came back at step '${got:-}'"
	back="$CRASH (rank 3 never left: rank 2 was back before a step was done)"
fi
grep -q '^2-D parallel: *2 replicas of 2 ranks' "$tmp/restart" ||
	bad "restart: not both replicas in the plan at the end"
echo "train_tp: rank 2 killed at step $CRASH, restarted: replica 1 back at step ${back:-?}," \
	"$(acc restart) % (${secs[restart]} s)"

# 3. the same kill, no restart: replica 0 alone from step CRASH on
run norestart --keep-going -- --tp 2 --dp 2 --crash-at 2@$CRASH
grep -v '^rank [0-3]: shard' "$tmp/norestart"
within norestart
exited norestart 0 1 3
grep -q "^rank 3: training ended while replica 1 was out of the plan (since step $CRASH)" \
	"$tmp/norestart" || bad "norestart: rank 3 did not finish out of the plan"
grep -q '^2-D parallel: *1 replica of 2 ranks' "$tmp/norestart" ||
	bad "norestart: replica 0 was not alone in the plan at the end"
# one DP AllReduce a round: every step, and each step redone (its round lost to the failure)
lost=$(grep -o 'steps lost (redone) in all: *[0-9]*' "$tmp/norestart" | grep -o '[0-9]*$')
[ "$(count norestart 0 'DP AllReduce')" = "$((STEPS + ${lost:-0})) 0" ] ||
	bad "norestart: rank 0 ran '$(count norestart 0 'DP AllReduce')' DP AllReduces (count," \
		"failed), not $STEPS steps + ${lost:-?} redone"
echo "train_tp: rank 2 killed at step $CRASH, not restarted: replica 0 trained on alone," \
	"$(acc norestart) % (${secs[norestart]} s)"
[ $fail -eq 0 ] && echo "train_tp: ok"
exit $fail
