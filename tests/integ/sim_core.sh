#!/usr/bin/env bash
# keel-sim's core promises, in make test (sim_keel.sh has the rest, in make test-long): the same
# seed gives the same bytes; AllReduce results exact inside the simulation; one agreed new view
# after a host failure, with no false suspicion; and a dead host detected by all 15 survivors
# within keel_detect_bound_ns + latency at 1 ms and 250 us heartbeats. About 12 s.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
require_built "$SIM"
tmpdir_make tmp
fail=0
seed_init 7

# 1. Determinism: a mixed cluster, a host failure and recovery, twice.
args=(--cluster 8xH100:ib/4,4xA100:eth/4 --horizon 1.5 --fail 0.7:5 --model 20M --batch 96
	--flops-per-sample 2e11 --heartbeat 1ms --check 1 --seed "$SEED" --format csv)
"$SIM" "${args[@]}" >"$tmp/a.csv" 2>/dev/null || bad "determinism run 1 exited $?"
"$SIM" "${args[@]}" >"$tmp/b.csv" 2>/dev/null || bad "determinism run 2 exited $?"
cmp -s "$tmp/a.csv" "$tmp/b.csv" && echo "sim: same seed, same output ($(wc -c <"$tmp/a.csv") bytes)" ||
	bad "two runs with seed $SEED differ"
[ "$(csv_col "$tmp/a.csv" allreduce_wrong)" = 0 ] && [ "$(csv_col "$tmp/a.csv" allreduce_ops)" -gt 0 ] &&
	echo "sim: $(csv_col "$tmp/a.csv" allreduce_ops) AllReduce results exact in the simulation" ||
	bad "AllReduce results wrong: $(csv_col "$tmp/a.csv" allreduce_wrong)"
[ "$(csv_col "$tmp/a.csv" views_agree)" = yes ] || bad "survivors installed different views"
[ "$(csv_col "$tmp/a.csv" view_epochs)" -ge 2 ] || bad "no new view after the failure"
[ "$(csv_col "$tmp/a.csv" false_suspicions)" = 0 ] ||
	bad "$(csv_col "$tmp/a.csv" false_suspicions) false suspicions in a training run"
# 2. Detection: 16 ranks (all-to-all monitoring), one host off at T = 0.5 s.
for hb in 1ms 250us; do
	"$SIM" --mode heartbeat --cluster 16xH100:ib/8 --horizon 0.6 --heartbeat $hb --fail 0.5:3 \
		--seed "$SEED" --format csv >"$tmp/d.csv" 2>/dev/null || bad "detection run exited"
	n=$(csv_col "$tmp/d.csv" detect_n); late=$(csv_col "$tmp/d.csv" detect_late)
	und=$(csv_col "$tmp/d.csv" undetected); fs=$(csv_col "$tmp/d.csv" false_suspicions)
	echo "sim: heartbeat $hb: $n survivors detected, max $(csv_col "$tmp/d.csv" detect_max_s) s," \
		"bound $(csv_col "$tmp/d.csv" detect_bound_s) s; late $late, missed $und, false $fs"
	[ "$n" = 15 ] && [ "$late" = 0 ] && [ "$und" = 0 ] && [ "$fs" = 0 ] ||
		bad "detection at heartbeat $hb"
	[ "$(csv_col "$tmp/d.csv" views_agree)" = yes ] || bad "views differ"
done

exit $fail
