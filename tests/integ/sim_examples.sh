#!/usr/bin/env bash
# keel-sim on every example and platform file shipped (issue 51): each run ends with the
# exit status it should have, never with a SimGrid backtrace, an uncaught exception or an
# abort, and training runs that should make steps make some. A platform SimGrid loads but
# cannot route (zones without a zoneRoute, a Full zone that leaves two hosts without a link,
# a zone without routing) or whose host is off at the start is a one-line error naming the
# file; a host its state profile turns off mid-run is a failure; a training run whose
# horizon holds no step says so. tools/examples/*.cluster are keel-plan's cluster files
# (keel-sim takes a --cluster string). About 20 s here.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
require_built "$SIM"
tmpdir_make tmp
fail=0
no() { echo "sim_examples: FAIL: $*"; fail=1; }
# What must never be in keel-sim's output, whatever the run.
crash() { grep -E -m1 'Backtrace|terminate called|AssertionError|Uncaught exception|CRITICAL|Segmentation|Aborted' "$1"; }

# sim NAME WANT_RC MIN_STEPS ARGS...: one run (CSV on stdout, stderr beside it), its exit
# status, no crash, and at least MIN_STEPS steps (- for runs without a result row).
sim() {
	local name=$1 want=$2 min=$3
	shift 3
	"$SIM" "$@" --format csv >"$tmp/$name.csv" 2>"$tmp/$name.err"
	local rc=$? steps
	cat "$tmp/$name.csv" "$tmp/$name.err" >"$tmp/$name.all"
	if c=$(crash "$tmp/$name.all"); then
		no "$name: SimGrid crashed: $c"
		return 1
	fi
	[ "$rc" = "$want" ] || { no "$name: exit $rc, not $want: $(tail -2 "$tmp/$name.err")"; return 1; }
	[ "$min" = - ] && return 0
	steps=$(csv_col "$tmp/$name.csv" steps)
	[ -n "$steps" ] && [ "$steps" -ge "$min" ] || { no "$name: $steps steps, not $min or more"; return 1; }
	echo "sim_examples: $name: $steps steps, $(csv_col "$tmp/$name.csv" failures) failures"
}

# 1. The what-ifs the manual quotes. A small mixed cluster with the default model: steps, and
# no warning. The same with a 1.3 B model: no step fits, and keel-sim says why. One failure
# on a mixed cluster: the receivers of nodes that end with transfers in flight to them used
# to be killed with those comms running (four SimGrid backtraces, exit 0).
sim default 0 10 --cluster 4xH100:ib/4,4xA100:eth/4 --horizon 3 --fail 1.5:5
grep -q warning "$tmp/default.err" && no "default model: a warning: $(cat "$tmp/default.err")"
sim big-model 0 - --cluster 4xH100:ib/4,4xA100:eth/4 --horizon 3 --fail 1.5:5 --model 1.3B
[ "$(csv_col "$tmp/big-model.csv" steps)" = 0 ] &&
	grep -Eq "warning: no training step fits in the 3 s horizon: one takes about [0-9.]+ s.*--horizon" \
		"$tmp/big-model.err" && echo "sim_examples: big-model: $(grep warning "$tmp/big-model.err")" ||
	no "1.3 B model on 3 s: no warning: $(cat "$tmp/big-model.err")"
sim one-failure 0 20 --cluster 4xH100:ib/4,4xA100:eth/4 --model 20M --batch 96 \
	--flops-per-sample 2e11 --horizon 2 --fail 1:5

# 2. Shipped examples: SimGrid platforms, and scenarios cut short (a few steps: the 24-rank
# example's 4 s take a minute here; sim_keel.sh runs it whole).
for f in tools/examples/*.xml; do
	sim "$(basename "$f")" 0 2 --platform "$f" --horizon 1.5
done
for f in sim/examples/*.scenario; do
	sim "$(basename "$f")" 0 3 --scenario "$f" --horizon 0.6
done

# 3. The test platforms: every one runs (steps, or the warning that none fits), every bad
# one is refused with one line naming the file, exit 1.
for f in tests/integ/platforms/*.xml; do
	n=$(basename "$f")
	sim "$n" 0 - --platform "$f" --horizon 0.3 || continue
	[ "$(csv_col "$tmp/$n.csv" steps)" -gt 0 ] || grep -q "warning: no training step fits" "$tmp/$n.err" ||
		no "$n: no step and no warning: $(cat "$tmp/$n.err")"
done
for f in tests/integ/platforms/bad/*.xml; do
	n=bad-$(basename "$f")
	sim "$n" 1 - --platform "$f" --horizon 0.3 || continue
	[ "$(grep -c . "$tmp/$n.err")" = 1 ] && grep -q "^keel-sim: .*$f" "$tmp/$n.err" &&
		echo "sim_examples: $n: $(cat "$tmp/$n.err")" || no "$n: not one line naming it: $(cat "$tmp/$n.err")"
done

# 4. Platforms SimGrid loads but cannot route: refused before the run, naming both hosts.
cat >"$tmp/two-zones.xml" <<'EOF'
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <zone id="a" routing="Full">
      <host id="a-0" speed="100Tf"/><host id="a-1" speed="100Tf"/>
      <link id="la" bandwidth="10GBps" latency="1us"/>
      <route src="a-0" dst="a-1"><link_ctn id="la"/></route>
    </zone>
    <cluster id="b" prefix="b-" suffix="" radical="0-1" speed="100Tf" bw="10GBps" lat="1us"/>
  </zone>
</platform>
EOF
printf '%s\n' '<?xml version="1.0"?>' '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">' \
	'<platform version="4.1"><zone id="z" routing="Full">' \
	'<host id="a" speed="1Tf"/><host id="b" speed="1Tf"/><host id="c" speed="1Tf"/>' \
	'<link id="l" bandwidth="1GBps" latency="1us"/>' \
	'<route src="a" dst="b"><link_ctn id="l"/></route></zone></platform>' >"$tmp/no-link.xml"
# A zone without routing, where SimGrid aborts (not throws) when asked for a route; a host a
# state profile keeps off at the start.
printf '%s\n' '<?xml version="1.0"?>' '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">' \
	'<platform version="4.1"><zone id="z" routing="None">' \
	'<host id="a" speed="1Tf"/><host id="b" speed="1Tf"/></zone></platform>' >"$tmp/no-routing.xml"
printf '0 0\n' >"$tmp/off.profile"
sed 's|<host id="c" speed="1Tf"/>|<host id="c" speed="1Tf" state_file="off.profile"/>|' \
	"$tmp/no-link.xml" >"$tmp/off-at-start.xml"
sed -i 's|</zone>|<route src="a" dst="c"><link_ctn id="l"/></route><route src="b" dst="c"><link_ctn id="l"/></route></zone>|' \
	"$tmp/off-at-start.xml"
for n in two-zones:"no route from '[^']+' to '[^']+'" no-link:"no route from 'a' to 'c'" \
	no-routing:"SimGrid cannot compute the route from 'a' to 'a': There can't be route" \
	off-at-start:"host 'c' is off when the run starts"; do
	f=$tmp/${n%%:*}.xml
	sim "${n%%:*}" 1 - --platform "$f" --horizon 0.3 || continue
	grep -Eq "^keel-sim: platform file '$f': ${n#*:}" "$tmp/${n%%:*}.err" &&
		echo "sim_examples: ${n%%:*}: $(cat "$tmp/${n%%:*}.err")" || no "${n%%:*}: $(cat "$tmp/${n%%:*}.err")"
done

# A host its state profile turns off mid-run: a failure keel-sim counts, not a deadlock.
printf '0.1 0\n' >"$tmp/off-later.profile"
sed -e 's|off.profile|off-later.profile|' -e 's|1Tf|1000Tf|g' "$tmp/off-at-start.xml" >"$tmp/off-later.xml"
sim off-later 0 1 --platform "$tmp/off-later.xml" --horizon 0.5 --model 5M &&
	{ [ "$(csv_col "$tmp/off-later.csv" failures)" = 1 ] || no "off-later: $(cat "$tmp/off-later.err")"; }

# 5. SimGrid's own example platforms, when a SimGrid source tree is at hand (Debian ships none:
# SIMGRID_EXAMPLES=/path/to/simgrid/examples/platforms): each runs or is refused with exit 1.
# They run in $tmp: some turn SimGrid's tracing on, which writes its file where it runs.
if [ -n "${SIMGRID_EXAMPLES:-}" ]; then
	sim_abs=$(cd "$(dirname "$SIM")" && pwd)/$(basename "$SIM")
	for f in "$(cd "$SIMGRID_EXAMPLES" && pwd)"/*.xml; do
		n=sg-$(basename "$f")
		ranks=(--ranks 8)
		(cd "$tmp" && "$sim_abs" --platform "$f" --list-hosts 2>/dev/null) |
			grep -Eq '^platform .*: [1-7] hosts' && ranks=()
		(cd "$tmp" && "$sim_abs" --platform "$f" "${ranks[@]}" --horizon 0.2) >"$tmp/$n.all" 2>&1
		rc=$?
		if c=$(crash "$tmp/$n.all") || [ $rc -gt 1 ]; then
			no "$n: exit $rc: $c"
		else
			echo "sim_examples: $n: exit $rc $(grep -m1 '^keel-sim: platform' "$tmp/$n.all")"
		fi
	done
fi

[ $fail = 0 ] && echo "sim_examples: all checks passed" || exit 1
