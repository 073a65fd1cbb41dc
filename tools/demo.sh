#!/usr/bin/env bash
# The main job (make demo): 4 local ranks on loopback run AllReduce over a range of sizes with
# every element checked, then measure heartbeat round trips.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUN="$BUILD/bin/keel-run"
BENCH="$BUILD/bin/keel-bench"
echo "== keel demo: AllReduce, 4 ranks on loopback UDP, every element checked"
"$RUN" -n 4 --timeout 300 -- "$BENCH" allreduce -b 8 -e 16M -f 4 --check -n 10 -w 2
echo
echo "== keel demo: heartbeats, 4 ranks, 1 ms interval, 3 s"
KEEL_HEARTBEAT_US=1000 "$RUN" -n 4 --timeout 60 -- "$BENCH" heartbeat --seconds 3
