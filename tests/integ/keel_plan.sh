#!/usr/bin/env bash
# keel-plan end to end: the example cluster and workloads plan, the capacity-aware step beats the
# even split, the HEFT paper example gives its published makespan (80), a SimGrid platform is
# accepted, and malformed files are refused naming file:line and the field.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
PLAN=$BIN/keel-plan
EX=tools/examples
require_built "$PLAN"
tmpdir_make tmp
fail=0

out=$("$PLAN" --cluster $EX/mixed24.cluster --workload $EX/step.workload) || bad "step plan failed"
line=$(echo "$out" | grep "^predicted step time")
echo "$line"
ratio=$(echo "$line" | sed -n 's/.*even split [^(]*(\([0-9.]*\)x).*/\1/p')
awk -v r="$ratio" 'BEGIN { exit !(r > 2) }' || bad "capacity-aware not 2x better than even: $line"
[ "$(echo "$out" | grep -c '^[ahv]100-')" -eq 24 ] || bad "expected 24 worker rows"

out=$("$PLAN" --cluster $EX/heft.cluster --dag $EX/heft.dag) || bad "HEFT example failed"
echo "$out" | grep -q "^makespan: HEFT 80.000 s" || bad "HEFT example makespan is not 80: $out"
echo "$out" | tail -1

"$PLAN" --cluster $EX/mixed24.cluster --workload $EX/items.workload >/dev/null || bad "items failed"
for m in rendezvous hash range; do
	"$PLAN" --cluster $EX/mixed24.cluster --workload $EX/items.workload --mode $m >/dev/null ||
		bad "items --mode $m failed"
done
"$PLAN" --cluster $EX/mixed24.cluster --dag $EX/dag.workload >/dev/null || bad "dag failed"
out=$("$PLAN" --cluster-xml $EX/mixed.platform.xml --workload $EX/step.workload) ||
	bad "SimGrid platform failed"
echo "$out" | grep -q "10 workers in 3 groups" || bad "SimGrid platform: wrong cluster: $out"

# Malformed inputs: exit 2 and a message naming file:line and the field.
printf 'group a count=2 gpu=H100\n# comment\ngroup b count=x gpu=A100-80\n' >"$tmp/bad.cluster"
err=$("$PLAN" --cluster "$tmp/bad.cluster" --workload $EX/step.workload 2>&1)
[ $? -eq 2 ] || bad "bad cluster: exit code not 2"
echo "$err" | grep -q "bad.cluster:3: field 'count': expected a positive integer, got 'x'" ||
	bad "bad cluster message: $err"
echo "$err"
printf 'shares blocks=4 split=32 block_work=1T\n' >"$tmp/bad.workload"
err=$("$PLAN" --cluster $EX/mixed24.cluster --workload "$tmp/bad.workload" 2>&1)
echo "$err" | grep -q "bad.workload:1: field 'split'" || bad "bad workload message: $err"
printf '<platform>\n<host id="x" speed="quick"/>\n</platform>\n' >"$tmp/bad.xml"
err=$("$PLAN" --cluster-xml "$tmp/bad.xml" --workload $EX/step.workload 2>&1)
echo "$err" | grep -q "bad.xml:2: field 'speed'" || bad "bad platform message: $err"

# Parts the presets lack: --define on the command line, define lines in the file; bad ones named.
printf 'define link fab bw=800Gbps lat=3us\ngroup new count=4 gpu=X9 link=fab\ngroup b200 count=4 gpu=B200\n' \
	>"$tmp/def.cluster"
out=$("$PLAN" --define 'gpu X9 rate=500T mem=96G' --cluster "$tmp/def.cluster" --show) ||
	bad "defined parts refused: $out"
grep -Eq '^new +4 X9 +500\.000 +96\.0 +100\.000 +3\.000' <<<"$out" || bad "defined gpu/link: $out"
grep -Eq '^b200 +4 B200 +2250\.000 +180\.0 +900\.000' <<<"$out" || bad "B200 preset: $out"
err=$("$PLAN" --define 'gpu X9 rate=lots' --cluster "$tmp/def.cluster" --show 2>&1)
[ $? -eq 2 ] && grep -q "define 'gpu X9 rate=lots': field 'rate': expected FLOP/s" <<<"$err" ||
	bad "bad --define not named: $err"
printf 'define gpu Y rate=1T link=warp\n' >"$tmp/baddef.cluster"
err=$("$PLAN" --cluster "$tmp/baddef.cluster" --show 2>&1)
grep -q "baddef.cluster:1: field 'link': unknown link 'warp'" <<<"$err" || bad "bad define line: $err"
"$PLAN" --list-presets | grep -q '^  GB200 ' || bad "--list-presets lacks GB200"

# Missing or unreadable arguments are named, not answered with the usage text alone.
err=$("$PLAN" --cluster /nonexistent --workload $EX/step.workload 2>&1)
[ $? -eq 2 ] && grep -q "/nonexistent: No such file or directory" <<<"$err" ||
	bad "unreadable cluster file not named: $err"
err=$("$PLAN" --cluster $EX/mixed24.cluster 2>&1)
grep -q "nothing to place: give --workload" <<<"$err" || bad "missing workload not said: $err"
err=$("$PLAN" --workload $EX/step.workload 2>&1)
grep -q "give one cluster" <<<"$err" || bad "missing cluster not said: $err"
err=$("$PLAN" --mode fastest --cluster $EX/mixed24.cluster --workload $EX/step.workload 2>&1)
grep -q "mode fastest: expected lpt, rendezvous, hash or range" <<<"$err" ||
	bad "bad mode not named: $err"

# An item no worker can hold is named.
printf 'item small work=1T mem=1G\nitem huge work=1T mem=500G\n' >"$tmp/huge.workload"
err=$("$PLAN" --cluster $EX/mixed24.cluster --workload "$tmp/huge.workload" 2>&1)
[ $? -eq 1 ] || bad "oversized item: exit code not 1"
echo "$err" | grep -q "item 'huge'" || bad "oversized item not named: $err"

[ $fail -eq 0 ] && echo "keel_plan: ok"
exit $fail
