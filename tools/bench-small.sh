#!/usr/bin/env bash
# Small-message AllReduce slide check (issue 16): 8 B .. 512 B at 2 and 4 ranks, several
# rounds, each size's time per round compared with a reference. Not a unit test and not in
# make test: timings on a shared machine are noisy, so a size fails only when it is slower
# than the reference by more than FACTOR in a majority of the rounds.
#
#   tools/bench-small.sh                     compare with the record (docs/perf-small.txt)
#   tools/bench-small.sh --against DIR       compare with another build (DIR/build/bin), run
#                                            interleaved with this one in every round: fair
#                                            on a busy machine, where the record is not
#   tools/bench-small.sh --record            measure and rewrite the record
# Options: --rounds N (5), --factor F (1.5), --build DIR (build), --record-file FILE.
# Exit 1 when a size slid; 2 on a usage or run error.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=5 FACTOR=1.5 BUILD=build AGAINST='' RECORD=0 FILE=docs/perf-small.txt
RANKS="2 4"
# Iterations per size: enough for a stable mean at 2 ranks, short enough at 4 on 2 cores.
iters_for() { if [ "$1" -le 2 ]; then echo 2000; else echo 500; fi; }

usage() {
	sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--factor) FACTOR=$2; shift 2 ;;
	--build) BUILD=$2; shift 2 ;;
	--against) AGAINST=$2; shift 2 ;;
	--record) RECORD=1; shift ;;
	--record-file) FILE=$2; shift 2 ;;
	*) usage ;;
	esac
done

# One run of DIR's build at N ranks: "size time_us" lines, time = mean of out-of-place and
# in-place. The job key is left out where keel-run has --no-key: old builds had no key, and
# authentication costs ~0.5 us per small op (docs/PERF.md), not what this check looks for.
run_one() {
	local bin=$1/bin n=$2 nokey=()
	if "$bin/keel-run" --help 2>&1 | grep -q -- --no-key; then nokey=(--no-key); fi
	"$bin/keel-run" -n "$n" "${nokey[@]}" -- "$bin/keel-bench" allreduce -b 8 -e 512 -f 4 \
		-n "$(iters_for "$n")" -w 200 2>/dev/null |
		awk '/^ +[0-9]+ +[0-9]+ +f32/ { printf "%s %.2f\n", $1, ($6 + $10) / 2 }'
}

for b in "$BUILD" ${AGAINST:+"$AGAINST/build"}; do
	[[ -x $b/bin/keel-run && -x $b/bin/keel-bench ]] ||
		{ echo "bench-small: no $b/bin/keel-run or keel-bench (make first)" >&2; exit 2; }
done
[ $RECORD -eq 1 ] || [ -n "$AGAINST" ] || [ -r "$FILE" ] ||
	{ echo "bench-small: no record $FILE (run with --record first)" >&2; exit 2; }

# Every round runs the reference build (if any) and this one back to back, per rank count.
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# A failed run exits 2, not 1: a crash is not a slide.
sample() {
	local out
	out=$(run_one "$1" "$4") || { echo "bench-small: $1 failed at $4 ranks" >&2; exit 2; }
	[ -n "$out" ] || { echo "bench-small: no table from $1 at $4 ranks" >&2; exit 2; }
	awk -v p="$2 $3 $4" '{ print p, $0 }' <<<"$out" >>"$samples"
}
for r in $(seq "$ROUNDS"); do
	for n in $RANKS; do
		if [ -n "$AGAINST" ]; then
			sample "$AGAINST/build" ref "$r" "$n"
		fi
		sample "$BUILD" new "$r" "$n"
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ $RECORD -eq 1 ]; then
	{
		echo "# Small-message AllReduce record for tools/bench-small.sh (f32 sum, loopback UDP,"
		echo "# no job key; time = mean of out-of-place and in-place, median of $ROUNDS rounds)."
		echo "# machine: $(nproc) CPUs, $(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1)"
		echo "# date: $(date -u +%Y-%m-%d), build: $(git describe --always --dirty 2>/dev/null)"
		echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
		echo "# command: tools/bench-small.sh --record (keel-bench allreduce -b 8 -e 512 -f 4)"
		echo "# ranks bytes us"
		awk '$1 == "new" { print $3, $4, $5 }' "$samples" | sort -k1,1n -k2,2n -k3,3g |
			awk '{ k = $1 " " $2; v[k, ++c[k]] = $3; if (!(k in seen)) { seen[k]; o[++m] = k } }
			     END { for (i = 1; i <= m; i++) { k = o[i]; print k, v[k, int((c[k] + 1) / 2)] } }'
	} >"$FILE"
	cat "$FILE"
	exit 0
fi

# Per size: the ratio new / reference in every round (reference: the other build's run in
# the same round, or the recorded median), its median, and in how many rounds it exceeded
# FACTOR. A majority of rounds over FACTOR is a slide; one slow round is noise.
awk -v factor="$FACTOR" -v rounds="$ROUNDS" -v against="$AGAINST" -v file="$FILE" '
	BEGIN { if (against == "") while ((getline l < file) > 0) if (l !~ /^#/) {
			split(l, f, " "); rec[f[1] " " f[2]] = f[3] } }
	$1 == "ref" { ref[$2, $3 " " $4] = $5; next }
	{ k = $3 " " $4; base = against == "" ? rec[k] : ref[$2, k]
	  if (base == "") next
	  if (!(k in n)) o[++m] = k
	  x = $5 / base; ratio[k, ++n[k]] = x; if (x > factor) over[k]++ }
	END {
		printf "%5s %6s %12s %s\n", "ranks", "bytes", "median_ratio", "rounds_over_factor"
		for (i = 1; i <= m; i++) {
			k = o[i]; c = n[k]
			for (a = 1; a <= c; a++) s[a] = ratio[k, a]
			for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++)
				if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
			split(k, f, " "); bad = over[k] * 2 > rounds
			printf "%5s %6s %12.2f %d/%d%s\n", f[1], f[2], s[int((c + 1) / 2)], over[k] + 0, c,
				bad ? "  SLOWER" : ""
			fail += bad
		}
		if (m == 0) { print "bench-small: nothing to compare"; exit 2 }
		printf "bench-small: %s (factor %s, %d rounds, against %s)\n",
			fail ? "SLIDE" : "ok", factor, rounds, against == "" ? file : against
		exit fail ? 1 : 0
	}' "$samples"
