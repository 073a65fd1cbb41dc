#!/usr/bin/env bash
# A restarted rank that comes after the job ended must not wait for a timeout: nobody answers
# its request to be admitted, so keel_boot_wait_member returns KEEL_EENDED within about a
# second and keel-train exits 0 saying so. Here rank 2 of 3 starts alone (KEEL_REJOIN=1) with
# a static peer list whose other ranks are gone.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
must_be_built "$TRAIN"
require_digits
base=$((40000 + RANDOM % 20000))
# Ranks on one host with KEEL_PEERS leave their shared-memory region for restarted lives
# (keel-run removes it; these are started by hand): named after rank 0's port.
on_exit 'rm -f /dev/shm/keel-*-"$base"-0'
t0=$(date +%s%N)
out=$(RANK=2 WORLD_SIZE=3 KEEL_PEERS="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))" \
	KEEL_REJOIN=1 KEEL_INCARNATION=2 timeout 30 "$TRAIN" --epochs 1 2>&1)
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $rc -ne 0 ] || ! grep -q "KEEL_EENDED" <<<"$out" || [ $ms -gt 3000 ]; then
	echo "rejoin_after_end: FAIL (exit $rc after $ms ms; expected 0 and KEEL_EENDED within 3 s)"
	echo "$out" | tail -5
	exit 1
fi
echo "rejoin_after_end: the restarted rank saw the job had ended and left in $ms ms"
