#!/usr/bin/env bash
# tier: long (eight 4-rank runs with a kill each: 22 s, and make test is at its 12 minutes)
# keel-bench's operations over groups, --check across a failure: 4 ranks, rank 3 SIGKILLed
# mid-run (16 rows, out of place and in place, 0.5 s in), for every operation and with
# --group 2 (rank 3's group loses a member, the other group none). Every result must equal
# the operation's over the members its call reports (a rank-indexed one is run again on the
# group's new membership after KEEL_EVIEWCHANGED, a broadcast whose root died too), a
# Send/Recv whose peer died ends KEEL_EPEERGONE (an error, counted, never a result), and
# some calls must have been checked on the smaller group: otherwise the kill missed the run
# and the check proved nothing (a failure, not a pass).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BIN/keel-run" "$BENCH"
fail=0
for args in "all_gather" "reduce_scatter --group 2" "alltoall" "allreduce --group 2" \
	"reduce" "broadcast --root 3" "sendrecv --group 2" "barrier"; do
	iters=10
	[ "${args%% *}" != barrier ] || iters=300000 # one row, past the kill (20 000 ended first)
	# shellcheck disable=SC2086 # the operation and its options are words of their own
	out=$(run_ranks 4 120 --kill 3@0.5 -- "$BENCH" $args -b 256K -e 4M -i 256K -n $iters -w 1 \
		--check 2>&1)
	rc=$?
	smaller=$(sed -n 's/^# Checked on a smaller view: \([0-9]*\) operations.*/\1/p' <<<"$out")
	why=''
	[ $rc -eq 0 ] || why="keel-run exited $rc"
	grep -q "^# Out of bounds values : 0 OK" <<<"$out" || why="${why:+$why; }wrong results"
	grep -q "rank 3 killed by signal 9" <<<"$out" || why="${why:+$why; }rank 3 was not killed"
	# a barrier has no result: that every survivor's calls returned is its check
	if [ "${args%% *}" != barrier ] && [ "${smaller:-0}" -eq 0 ]; then
		why="${why:+$why; }no call checked on the smaller group (the kill missed the run)"
	fi
	if [ -n "$why" ]; then
		echo "bench_coll_check: $args: $why"
		grep -v warning <<<"$out" | tail -12
		fail=1
		continue
	fi
	echo "bench_coll_check: $args: rank 3 killed, every result exact, ${smaller:-0} checked" \
		"on the smaller group$(sed -n 's/^# Sends and receives that ended with their peer gone (KEEL_EPEERGONE): \([0-9]*\)/, \1 ended KEEL_EPEERGONE/p' <<<"$out")"
done
exit $fail
