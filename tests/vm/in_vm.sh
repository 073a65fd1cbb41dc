#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (tests/vm/run.sh), chrooted into the host's root: the verbs unit
# tests, AllReduce for 2 and 3 ranks over real RC QPs (every dtype and op at the chunk
# boundaries, checked), failure detection with one rank killed, the chaos decorator on top, and
# latency beside perftest. Exit 0 only if every check passed.
set -u
BUILD=${BUILD:-build}
RUN=$BUILD/bin/keel-run
BENCH=$BUILD/bin/keel-bench
CHECK=$BUILD/tests/integ-allreduce_check
LOG=$(mktemp -d /tmp/keel-vm.XXXXXX)
fail=0
pass=0
# One vCPU: ranks wait on the completion channel, never spin against each other (RXE-VM.md).
export KEEL_TRANSPORT=verbs KEEL_VERBS_POLL=event KEEL_WAIT=block KEEL_VERBS_STATS=1
export KEEL_HEARTBEAT_US=200000 KEEL_OP_TIMEOUT_MS=30000 KEEL_VERBS_SLOTS=16
PORT=29500
result() { # name rc
	if [ "$2" = 0 ]; then echo "KEEL_VM PASS $1"; pass=$((pass + 1))
	else echo "KEEL_VM FAIL $1 (rc $2)"; fail=$((fail + 1)); fi
}
echo "KEEL_VM devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

# 1. unit tests (fake device) and a real device query through the backend
if [ -x "$BUILD/tests/test_verbs" ]; then
	timeout 60 "$BUILD/tests/test_verbs"
	result unit/test_verbs $?
fi

# 2. AllReduce, 2 and 3 ranks as separate processes over RC QPs, results checked
for n in 2 3; do
	PORT=$((PORT + 10))
	timeout 150 "$RUN" -n "$n" --master-port "$PORT" --timeout 140 -- "$CHECK" auto \
		>"$LOG/ar$n" 2>&1
	rc=$?
	grep -h "allreduce_check\|keel-verbs: rank 0\|FAIL\|error" "$LOG/ar$n" | head -5
	[ $rc = 0 ] || tail -5 "$LOG/ar$n"
	result "allreduce-$n-ranks" $rc
done

# 3. rank 2 of 3 killed: its QPs go away, the survivors suspect it and install a new view
PORT=$((PORT + 10))
timeout 60 "$RUN" -n 3 --master-port "$PORT" --keep-going --kill 2@3 --timeout 50 -- \
	"$BENCH" heartbeat --seconds 6 >"$LOG/hb" 2>&1
ok=0
for r in 0 1; do
	grep -q "peer 2 suspected\|suspected dead\|view" "$LOG/hb" || ok=1
done
grep -h "suspect\|view\|worst\|keel-verbs" "$LOG/hb" | head -8
result heartbeat-kill $ok

# 4. the chaos decorator on top of verbs (loss repaired by the core's reliable layer)
PORT=$((PORT + 10))
KEEL_CHAOS="loss=0.01,dup=0.005,reorder=0.01,seed=${SEED:-7}" timeout 150 "$RUN" -n 2 \
	--master-port "$PORT" --timeout 140 -- "$CHECK" auto >"$LOG/chaos" 2>&1
rc=$?
grep -h "allreduce_check" "$LOG/chaos" | head -2
[ $rc = 0 ] || tail -5 "$LOG/chaos"
result chaos-allreduce $rc

# 5. latency: keel's transport beside perftest on the same device, same sizes
PORT=$((PORT + 10))
timeout 60 "$RUN" -n 2 --master-port "$PORT" --timeout 50 -- "$BENCH" rdma-lat -b 2 -e 4096 \
	-f 8 -n 300 >"$LOG/lat" 2>&1
rc=$?
grep -v "keel-run\|keel-verbs" "$LOG/lat"
result rdma-lat $rc
if command -v ib_write_lat >/dev/null; then
	for tool in ib_write_lat ib_send_lat; do
		for sz in 2 4096; do
			timeout 30 $tool -d rxe0 -x 1 -s $sz -n 300 -F >/dev/null 2>&1 &
			sleep 1
			timeout 30 $tool -d rxe0 -x 1 -s $sz -n 300 -F 127.0.0.1 2>&1 |
				awk -v t=$tool '/^ *[0-9]+ +[0-9]+/{print "perftest", t, $0}'
			wait
		done
	done
fi
echo "KEEL_VM summary: passed $pass failed $fail"
rm -rf "$LOG"
[ $fail = 0 ]
