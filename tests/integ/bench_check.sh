#!/usr/bin/env bash
# keel-bench allreduce --check across a failure: 5 ranks, rank 3 SIGKILLed mid-run. Every
# result must equal the reduction over the members its operation reports (the survivors, after
# the view change), and some operations must have run on the smaller view: otherwise the kill
# missed the run and the check proved nothing (a failure, not a pass).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
RUN=$BUILD/bin/keel-run
BENCH=$BUILD/bin/keel-bench
[ -x "$RUN" ] && [ -x "$BENCH" ] || { echo "bench_check: build first (make all)"; exit 1; }
# A bad range is named, not answered with the usage text alone.
err=$("$BENCH" allreduce -b 1M -e 1K 2>&1)
grep -q "minbytes 1048576 is larger than --maxbytes 1024" <<<"$err" ||
	{ echo "bench_check: -b 1M -e 1K not explained: $err"; exit 1; }
out=$("$RUN" -n 5 --timeout 120 --kill 3@0.5 -- "$BENCH" allreduce -b 64K -e 16M -f 4 -n 10 \
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
out=$("$RUN" -n 5 --timeout 120 --kill 3@1.5 -- "$BENCH" allreduce -b 4M -e 4M -n 60 -w 0 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "$out" | tail -8; echo "bench_check: timed run across a kill: keel-run exited $rc"; exit 1; }
echo "bench_check: 5 ranks, rank 3 killed during timed loops: keel-bench went on"
