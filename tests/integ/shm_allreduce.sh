#!/usr/bin/env bash
# Multi-process AllReduce over the shared-memory transport (KEEL_TRANSPORT=shm): 2 and 4 ranks
# started by keel-run on this host, every dtype and op at the chunking boundaries, both
# algorithms, every element checked against the reference. Then no region may be left behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
RUN=$BUILD/bin/keel-run
CHECK=$BUILD/tests/integ-allreduce_check
[ -x "$RUN" ] && [ -x "$CHECK" ] || { echo "shm_allreduce: build first (make all tests)"; exit 1; }
export KEEL_TRANSPORT=shm KEEL_HEARTBEAT_US=20000 KEEL_OP_TIMEOUT_MS=20000 KEEL_WAIT=block
before=$(ls /dev/shm | grep -c '^keel-' || true)
for n in 2 4; do
	for algo in ring rd; do
		"$RUN" -n "$n" --timeout 120 -- "$CHECK" "$algo" | { grep -v '^keel-run: rank' || true; }
	done
done
after=$(ls /dev/shm | grep -c '^keel-' || true)
if [ "$after" -gt "$before" ]; then
	echo "shm_allreduce: keel-run left $((after - before)) region(s) in /dev/shm"
	exit 1
fi
echo "shm_allreduce: 2 and 4 ranks, ring and rd: passed"
