#!/usr/bin/env bash
# keel-bench allreduce --check across a failure: 5 ranks, rank 3 SIGKILLed mid-run. Every
# result must equal the reduction over the members its operation reports (the survivors, after
# the view change), and some operations must have run on the smaller view: otherwise the kill
# missed the run and the check proved nothing (a failure, not a pass).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BIN/keel-run" "$BENCH"
tmpdir_make tmp
# A bad range is named, not answered with the usage text alone.
err=$("$BENCH" allreduce -b 1M -e 1K 2>&1)
grep -q "minbytes 1048576 is larger than --maxbytes 1024" <<<"$err" ||
	{ echo "bench_check: -b 1M -e 1K not explained: $err"; exit 1; }
out=$(run_ranks 5 120 --kill 3@0.5 -- "$BENCH" allreduce -b 64K -e 16M -f 4 -n 10 \
	--check 2>&1)
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "bench_check: keel-run exited $rc"; fail=1; }
grep -q "^# Out of bounds values : 0 OK" <<<"$out" || { echo "bench_check: wrong results"; fail=1; }
smaller=$(sed -n 's/^# Checked on a smaller view: \([0-9]*\) operations.*/\1/p' <<<"$out")
[ "${smaller:-0}" -gt 0 ] ||
	{ echo "bench_check: no operation ran on the smaller view (the kill missed the run)"; fail=1; }
if [ $fail -ne 0 ]; then
	echo "$out" | tail -15
	exit 1
fi
echo "bench_check: 5 ranks, rank 3 killed: all results exact, $smaller checked on the 4 survivors"
# Timed loops only, the kill late enough to land in the in-place ones (here: 1.5 s of 60 + 60
# AllReduces of 4 MiB). An in-place input lost to a view change says KEEL_EVIEWCHANGED on every
# member; keel-bench must run it again, as the API asks, and not die.
out=$(run_ranks 5 120 --kill 3@1.5 -- "$BENCH" allreduce -b 4M -e 4M -n 60 -w 0 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "$out" | tail -8; echo "bench_check: timed run across a kill: keel-run exited $rc"; exit 1; }
echo "bench_check: 5 ranks, rank 3 killed during timed loops: keel-bench went on"
# --series: one line per timed iteration, the median of those lines is the table's, and the
# run survives writing a long one (its rank keeps polling). Its errors are named.
err=$("$BENCH" allreduce --series /tmp/x 2>&1)
grep -q -- "--series needs --median" <<<"$err" || { echo "bench_check: --series without --median: $err"; exit 1; }
ser=$tmp/series
out=$(KEEL_TRANSPORT=shm run_ranks 2 120 --no-key -- "$BENCH" allreduce --median -b 4 \
	-e 4 -n 10 -w 0 --series /nonexistent/dir/s 2>&1)
grep -q -- "--series /nonexistent/dir/s: No such file or directory" <<<"$out" ||
	{ echo "$out" | tail -5; echo "bench_check: an unwritable --series not named"; exit 1; }
out=$(KEEL_TRANSPORT=shm run_ranks 2 120 --no-key -- "$BENCH" allreduce --median -b 4 \
	-e 4 -n 200000 -w 0 --series "$ser" 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "$out" | tail -8; echo "bench_check: --series run: keel-run exited $rc"; exit 1; }
lines=$(grep -vc '^#' "$ser")
[ "$lines" -eq 400000 ] || { echo "bench_check: --series wrote $lines lines, not 2 x 200000"; exit 1; }
want=$(awk '!/^#/ && $2 == 0 {print $5}' "$ser" | sort -g | sed -n "100000p;100001p" | awk "{s += \$1} END {print s / 2}")
got=$(awk '$1 == 4 {print $6}' <<<"$out")
awk -v w="$want" -v g="$got" 'BEGIN { exit !(w != "" && (w - g < 0.006 && g - w < 0.006)) }' ||
	{ echo "bench_check: table's median $got, the series' $want"; exit 1; }
echo "bench_check: --series: 2 x 200000 lines, their median is the table's ($got us)"
