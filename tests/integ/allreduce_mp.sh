#!/usr/bin/env bash
# Multi-process AllReduce on loopback: 2, 3, 4 and 5 ranks (separate processes started by
# keel-run), every dtype and op at the chunking boundaries, both algorithms; then again with
# the chaos transport at 1 % loss (plus duplication and reordering), once more over UDP with
# Ethernet-sized datagrams, so that runs are coalesced on send and receive (UDP_SEGMENT,
# UDP_GRO) under the same loss, and with datagrams cut into Ethernet-sized pieces and joined
# (KEEL_UDP_PIECES), as on a 1500-byte link, under the same loss. Seeded: SEED=n replays.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
CHECK=$BUILD/tests/integ-allreduce_check
seed_init
must_be_built "$BIN/keel-run" "$CHECK"
export KEEL_HEARTBEAT_US=20000 KEEL_OP_TIMEOUT_MS=20000 KEEL_WAIT=block
fail=0
for n in 2 3 4 5; do
	for algo in ring rd; do
		run_ranks "$n" 120 -- "$CHECK" "$algo" | grep -v '^keel-run: rank' || fail=1
	done
done
for n in 3 4; do
	KEEL_CHAOS="loss=0.01,dup=0.005,reorder=0.01,seed=$SEED" \
		run_ranks "$n" 180 -- "$CHECK" auto | grep -v '^keel-run: rank' || fail=1
done
KEEL_TRANSPORT=udp KEEL_MTU=1472 KEEL_CHAOS="loss=0.01,dup=0.005,reorder=0.01,seed=$SEED" \
	run_ranks 4 180 -- "$CHECK" auto | grep -v '^keel-run: rank' || fail=1
for algo in ring rd; do
	KEEL_TRANSPORT=udp KEEL_UDP_PIECES=1472 KEEL_CHAOS="loss=0.01,dup=0.005,reorder=0.01,seed=$SEED" \
		run_ranks 3 180 -- "$CHECK" "$algo" | grep -v '^keel-run: rank' || fail=1
done
exit $fail
