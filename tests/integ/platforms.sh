#!/usr/bin/env bash
# SimGrid platform files read as SimGrid reads them: every file in tests/integ/platforms/ is
# first loaded by SimGrid itself (keel-sim --list-hosts asks its engine for the hosts), then
# keel-plan (expat) must accept it with the same host count. Every file in bad/ must be
# refused by both, each naming file:line (keel-plan always; SimGrid where it knows the line).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
PLAN=$BIN/keel-plan
DIR=tests/integ/platforms
require_built "$SIM" "$PLAN"
if "$PLAN" --cluster-xml $DIR/zones.xml --show 2>&1 | grep -q "built without expat"; then
	skip "keel-plan built without expat (install libexpat1-dev)"
fi
fail=0

n=0
for f in "$DIR"/*.xml tools/examples/mixed.platform.xml; do
	sg=$("$SIM" --platform "$f" --list-hosts 2>&1) || { bad "SimGrid refused $f: $sg"; continue; }
	sg_hosts=$(sed -n 's/^platform .*: \([0-9]*\) hosts, .*/\1/p' <<<"$sg")
	kp=$("$PLAN" --cluster-xml "$f" --show 2>&1) || { bad "keel-plan refused $f: $kp"; continue; }
	kp_hosts=$(sed -n 's/^cluster .*: \([0-9]*\) workers in .*/\1/p' <<<"$kp")
	notes=$(grep -c 'note:' <<<"$kp")
	echo "platforms: $f: SimGrid $sg_hosts hosts, keel-plan $kp_hosts workers ($notes elements noted as not mapped)"
	[ -n "$sg_hosts" ] && [ "$sg_hosts" = "$kp_hosts" ] || bad "$f: host counts differ"
	n=$((n + 1))
done
[ $n -ge 5 ] || bad "only $n platform files"

# Figures as SimGrid computed them: speeds with pstates and cores, units (bits, binary).
sg=$("$SIM" --platform $DIR/zones.xml --list-hosts 2>/dev/null)
grep -q '^host gpu-b 5.000000e+14 flops' <<<"$sg" || bad "zones.xml: gpu-b's pstate 1 speed: $sg"
kp=$("$PLAN" --cluster-xml $DIR/zones.xml --show 2>/dev/null)
grep -Eq '^gpu-b +1 simgrid +500\.000 +80\.0 +50\.000 +1\.500' <<<"$kp" || bad "zones.xml in keel-plan: $kp"
grep -Eq '^ws-1 +1 simgrid +0\.164 ' <<<"$kp" || bad "zones.xml: ws-1 (8 cores x 20.5 gigaflops): $kp"
kp=$("$PLAN" --cluster-xml $DIR/clusters.xml --show 2>&1)
grep -Eq '^h100 +7 simgrid +989\.000 +80\.0 +50\.000 +1\.500' <<<"$kp" || bad "clusters.xml h100: $kp"
grep -Eq '^rack2 +4 simgrid +125\.000 +0\.0 +12\.500 +2\.000' <<<"$kp" || bad "clusters.xml rack2: $kp"
grep -q "clusters.xml:24: <zoneRoute>: route between zones" <<<"$kp" || bad "zoneRoute not noted: $kp"

# Bad files: both refuse; keel-plan names file:line and the field; SimGrid its own reason.
for f in "$DIR"/bad/*.xml; do
	if sg=$("$SIM" --platform "$f" --list-hosts 2>&1); then
		bad "SimGrid accepted $f"
	fi
	kp=$("$PLAN" --cluster-xml "$f" --show 2>&1)
	rc=$?
	[ $rc = 2 ] || bad "keel-plan: $f: exit $rc, not 2"
	grep -Eq "^keel-plan: $f:[0-9]+: " <<<"$kp" || bad "keel-plan: $f: no file:line: $kp"
	grep -q "$f" <<<"$sg" || bad "keel-sim: $f: the file is not named: $sg"
	echo "platforms: $(basename "$f"): $kp"
	echo "platforms: $(basename "$f"): ${sg#keel-sim: }"
done

# SimGrid's own example platforms, when a SimGrid source tree is at hand (not shipped by
# Debian; SIMGRID_EXAMPLES=/path/to/simgrid/examples/platforms): every file SimGrid loads must
# be accepted by keel-plan with the same host count.
if [ -n "${SIMGRID_EXAMPLES:-}" ]; then
	loaded=0 refused=0
	for f in "$SIMGRID_EXAMPLES"/*.xml; do
		sg=$("$SIM" --platform "$f" --list-hosts 2>&1) || { refused=$((refused + 1)); continue; }
		loaded=$((loaded + 1))
		sg_hosts=$(sed -n 's/^platform .*: \([0-9]*\) hosts, .*/\1/p' <<<"$sg")
		kp=$("$PLAN" --cluster-xml "$f" --show 2>&1) || { bad "keel-plan refused $f: $kp"; continue; }
		kp_hosts=$(sed -n 's/^cluster .*: \([0-9]*\) workers in .*/\1/p' <<<"$kp")
		[ "$sg_hosts" = "$kp_hosts" ] || bad "$f: SimGrid $sg_hosts hosts, keel-plan $kp_hosts"
	done
	echo "platforms: SimGrid's examples: $loaded loaded by SimGrid (all checked against" \
		"keel-plan), $refused refused by SimGrid itself"
fi

[ $fail = 0 ] && echo "platforms: ok" || exit 1
