#!/usr/bin/env bash
# Ranks that find each other through KEEL_PEERS (no rendezvous): 3 processes started by hand
# with RANK/WORLD_SIZE and a static list, AllReduce checked. Also: a bad list is refused with a
# message naming the entry.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BENCH"
tmpdir_make tmp
base=$((20000 + RANDOM % 20000))
# Ranks on one host with KEEL_PEERS leave their shared-memory region for restarted lives
# (keel-run removes it; these are started by hand): named after rank 0's port.
on_exit 'rm -f /dev/shm/keel-*-"$base"-0'
export KEEL_PEERS="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
export WORLD_SIZE=3 KEEL_HEARTBEAT_US=20000 KEEL_WAIT=block
pids=()
for r in 0 1 2; do
	RANK=$r timeout 60 "$BENCH" allreduce -b 8 -e 1M -f 16 -n 3 -w 1 --check >"$tmp/rank$r" 2>&1 &
	pids+=($!)
done
fail=0
for i in 0 1 2; do wait "${pids[$i]}" || { echo "peers_list: rank $i failed:"; cat "$tmp/rank$i"; fail=1; }; done
grep -q "Out of bounds values : 0 OK" "$tmp/rank0" || { echo "peers_list: no clean table"; fail=1; }
grep -E "^ +[0-9]" "$tmp/rank0" | head -3
out=$(RANK=0 KEEL_PEERS="127.0.0.1:$base,nonsense" WORLD_SIZE=2 timeout 10 "$BENCH" allreduce 2>&1)
if [ $? -eq 0 ] || ! echo "$out" | grep -q "nonsense"; then
	echo "peers_list: a malformed KEEL_PEERS entry was not refused by name: $out"; fail=1
fi
# A shared-memory region that others may open (made first by someone else, or left open) is
# refused by name, and left as it was: its rings would carry datagrams without CRC or MAC.
region=/dev/shm/keel-0-$((base + 7))-0
(umask 022 && : >"$region")
out=$(RANK=0 WORLD_SIZE=2 KEEL_TRANSPORT=shm KEEL_PEERS="127.0.0.1:$((base + 7)),127.0.0.1:$((base + 8))" \
	timeout 20 "$BENCH" allreduce -b 8 -e 8 -n 1 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! echo "$out" | grep -q "region $region belongs to another user or may be opened by others" ||
	[ "$(stat -c %a:%s "$region")" != 644:0 ]; then
	echo "peers_list: an open shared-memory region was not refused (rc $rc): $out"; fail=1
else
	echo "peers_list: an open shared-memory region refused by name"
fi
rm -f "$region"
exit $fail
