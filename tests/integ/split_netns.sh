#!/usr/bin/env bash
# A real network split: 7 ranks, each in its own network namespace, joined by veth pairs to
# a bridge. Three seconds in, the links of ranks 4, 5 and 6 go down for four seconds: the 4
# install a view and go on, the 3 stop with KEEL_ENOQUORUM; after healing they rejoin and all
# 7 end in the same view. Namespaces and links are removed on exit, also on failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
CHECK=$(pwd)/$BUILD/tests/integ-membership_check
must_be_built "$CHECK"
ns_make 7 # names unique to this run: several runs may share the machine
tmpdir_make tmp
peers=""
for r in 0 1 2 3 4 5 6; do peers="$peers${peers:+,}$(ns_addr $r):7000"; done
export KEEL_PEERS=$peers WORLD_SIZE=7 KEEL_JOB_ID=77 KEEL_HEARTBEAT_US=20000 KEEL_WAIT=block
export KEEL_OP_TIMEOUT_MS=3000 KEEL_TEST_END=$(($(date +%s) + 12))
pids=()
for r in 0 1 2 3 4 5 6; do
	RANK=$r timeout 60 ip netns exec "$(ns_name $r)" "$CHECK" >"$tmp/$r" 2>&1 &
	pids+=($!)
done
sleep 3
echo "split_netns: links of ranks 4, 5, 6 down"
for r in 4 5 6; do ns_link $r down; done
sleep 4
echo "split_netns: links up again"
for r in 4 5 6; do ns_link $r up; done
fail=0
for r in 0 1 2 3 4 5 6; do
	wait "${pids[$r]}" || { echo "split_netns: rank $r failed"; fail=1; }
	grep -E "^rank|: " "$tmp/$r" | head -5
done
views=$(cat "$tmp"/* | grep "final view" | sed 's/.*final view \(epoch [0-9]* members [0-9,]*\).*/\1/' | sort -u)
[ "$(echo "$views" | wc -l)" = 1 ] && echo "$views" | grep -q "members 0,1,2,3,4,5,6$" ||
	{ echo "split_netns: final views differ: $views"; fail=1; }
minority=$(cat "$tmp"/[456] | grep -c "noquorum [1-9]")
[ "$minority" = 3 ] || { echo "split_netns: the minority did not all see KEEL_ENOQUORUM ($minority of 3)"; fail=1; }
majority=$(cat "$tmp"/[0123] | grep -c "noquorum 0 ")
[ "$majority" = 4 ] || { echo "split_netns: the majority stopped ($majority of 4 went on)"; fail=1; }
[ $fail = 0 ] && echo "split_netns: ok: $views; majority went on, minority stopped and rejoined"
exit $fail
