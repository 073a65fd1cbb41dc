#!/usr/bin/env bash
# A real network split: 7 ranks, each in its own network namespace, joined by veth pairs to
# a bridge. Three seconds in, the links of ranks 4, 5 and 6 go down for four seconds: the 4
# install a view and go on, the 3 stop with KEEL_ENOQUORUM; after healing they rejoin and all
# 7 end in the same view. Namespaces and links are removed on exit, also on failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
CHECK=$(pwd)/$BUILD/tests/integ-membership_check
[ -x "$CHECK" ] || { echo "split_netns: build first"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "split_netns: needs root for network namespaces: skipped"; exit 77; }
command -v ip >/dev/null || { echo "split_netns: iproute2 missing: skipped"; exit 77; }
P=kspl$$ # a unique prefix: several runs may share the machine
BR=${P}br
cleanup() {
	for r in 0 1 2 3 4 5 6; do ip netns del ${P}n$r 2>/dev/null; done
	ip netns del $BR 2>/dev/null
	rm -f /tmp/$P.*
}
trap cleanup EXIT
ip netns add $BR || { echo "split_netns: cannot create namespaces here: skipped"; exit 77; }
ip -n $BR link add br0 type bridge && ip -n $BR link set br0 up
peers=""
for r in 0 1 2 3 4 5 6; do
	ip netns add ${P}n$r
	ip link add ${P}a$r netns ${P}n$r type veth peer name ${P}b$r netns $BR
	ip -n ${P}n$r addr add 10.77.0.$((r + 1))/24 dev ${P}a$r
	ip -n ${P}n$r link set ${P}a$r up
	ip -n ${P}n$r link set lo up
	ip -n $BR link set ${P}b$r master br0
	ip -n $BR link set ${P}b$r up
	peers="$peers${peers:+,}10.77.0.$((r + 1)):7000"
done
export KEEL_PEERS=$peers WORLD_SIZE=7 KEEL_JOB_ID=77 KEEL_HEARTBEAT_US=20000 KEEL_WAIT=block
export KEEL_OP_TIMEOUT_MS=3000 KEEL_TEST_END=$(($(date +%s) + 12))
pids=()
for r in 0 1 2 3 4 5 6; do
	RANK=$r timeout 60 ip netns exec ${P}n$r "$CHECK" >/tmp/$P.$r 2>&1 &
	pids+=($!)
done
sleep 3
echo "split_netns: links of ranks 4, 5, 6 down"
for r in 4 5 6; do ip -n $BR link set ${P}b$r down; done
sleep 4
echo "split_netns: links up again"
for r in 4 5 6; do ip -n $BR link set ${P}b$r up; done
fail=0
for r in 0 1 2 3 4 5 6; do
	wait "${pids[$r]}" || { echo "split_netns: rank $r failed"; fail=1; }
	grep -E "^rank|: " /tmp/$P.$r | head -5
done
views=$(cat /tmp/$P.* | grep "final view" | sed 's/.*final view \(epoch [0-9]* members [0-9,]*\).*/\1/' | sort -u)
[ "$(echo "$views" | wc -l)" = 1 ] && echo "$views" | grep -q "members 0,1,2,3,4,5,6$" ||
	{ echo "split_netns: final views differ: $views"; fail=1; }
minority=$(cat /tmp/$P.4 /tmp/$P.5 /tmp/$P.6 | grep -c "noquorum [1-9]")
[ "$minority" = 3 ] || { echo "split_netns: the minority did not all see KEEL_ENOQUORUM ($minority of 3)"; fail=1; }
majority=$(cat /tmp/$P.0 /tmp/$P.1 /tmp/$P.2 /tmp/$P.3 | grep -c "noquorum 0 ")
[ "$majority" = 4 ] || { echo "split_netns: the majority stopped ($majority of 4 went on)"; fail=1; }
[ $fail = 0 ] && echo "split_netns: ok: $views; majority went on, minority stopped and rejoined"
exit $fail
