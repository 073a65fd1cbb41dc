#!/usr/bin/env bash
# Runs inside the Soft-RoCE VM (tests/vm/run.sh), chrooted into the host's root: the verbs unit
# tests, AllReduce for 2 and 3 ranks over real RC QPs (every dtype and op at the chunk
# boundaries, checked), group operations (AllGather, AllToAll, Send/Recv; checked), failure detection with one rank killed, the chaos decorator on top, and
# latency beside perftest. Prints the seconds each step took; exit 0 only if every check passed.
#   KEEL_VM_STEPS="unit ar2 reg groups ar3 kill chaos static lat perftest" (default: all) runs a subset
#   (reg reads the ar2 log too).
set -uo pipefail
BUILD=${BUILD:-build}
RUN=$BUILD/bin/keel-run
BENCH=$BUILD/bin/keel-bench
CHECK=$BUILD/tests/integ-allreduce_check
STEPS=" ${KEEL_VM_STEPS:-unit ar2 reg groups ar3 kill chaos static lat perftest} "
LOG=$(mktemp -d /tmp/keel-vm.XXXXXX)
fail=0
pass=0
# One vCPU: ranks wait on the completion channel, never spin against each other (RXE-VM.md).
export KEEL_TRANSPORT=verbs KEEL_VERBS_POLL=event KEEL_WAIT=block KEEL_VERBS_STATS=1
export KEEL_HEARTBEAT_US=200000 KEEL_OP_TIMEOUT_MS=30000 KEEL_VERBS_SLOTS=16
# The boundary sizes (fragment and ring chunk +-1, world x fragment +-1) stay; the large message
# of each dtype and op shrinks from 100003 elements, because rxe under TCG moves a few MB/s.
LARGE=4099
# The latency sizes: an inline SEND, a SEND from a registered slot, an RDMA WRITE with immediate.
LAT_SIZES="16 256 4096"
LAT_ITERS=300
PORT=29500
up() { cut -d' ' -f1 /proc/uptime; }
result() { # name rc seconds
	if [ "$2" = 0 ]; then echo "KEEL_VM PASS $1 (${3}s)"; pass=$((pass + 1))
	else echo "KEEL_VM FAIL $1 (rc $2, ${3}s)"; fail=$((fail + 1)); fi
}
want() { [[ $STEPS == *" $1 "* ]]; }
bad() { [ "$rc" != 0 ] || rc=1; } # a failed check fails a step that exited 0
t0=$EPOCHREALTIME
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b - a}'; }
echo "KEEL_VM booted in $(up) s; devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

# 1. unit tests (fake device, error paths through the mocked ibv_* calls)
if want unit && [ -x "$BUILD/tests/test_verbs" ]; then
	t=$EPOCHREALTIME
	timeout 60 "$BUILD/tests/test_verbs"
	result unit/test_verbs $? "$(since "$t")"
fi

# 2. AllReduce, 2 and 3 ranks as separate processes over RC QPs, every result checked
for n in 2 3; do
	want "ar$n" || continue
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	timeout 100 "$RUN" -n "$n" --master-port "$PORT" --timeout 90 -- "$CHECK" auto \
		--large $LARGE >"$LOG/ar$n" 2>&1
	rc=$?
	grep -h "allreduce_check\|keel-verbs: rank 0" "$LOG/ar$n"
	# every rank must have moved its data over the verbs transport, none by luck elsewhere
	[ "$(grep -c "keel-verbs: rank .* write_imm [1-9]" "$LOG/ar$n")" = "$n" ] || bad
	grep -q "all exact" "$LOG/ar$n" || bad
	[ $rc = 0 ] || tail -8 "$LOG/ar$n"
	result "allreduce-$n-ranks" $rc "$(since "$t")"
done

# 2b. buffers registered with the NIC (keel-bench --register): payloads borrowed from the input
# and the final sums go from where they lie, read by the NIC (zero_copy counts them), and every
# result is still exact; without --register (above) nothing is read in place. Then the same
# for device buffers (--device cpu), whose registered stage the NIC reads, and under chaos.
if want reg; then
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	# --no-key: with a job key every datagram carries a MAC trailer after its payload, so
	# payloads are copied (docs/guide/rdma.md, "Registered buffers")
	timeout 100 "$RUN" -n 2 --no-key --master-port "$PORT" --timeout 90 -- "$BENCH" allreduce \
		--check --register -b 4 -e 256K -f 8 -n 3 -w 1 >"$LOG/reg" 2>&1
	rc=$?
	grep -h "keel-verbs: rank" "$LOG/reg" | grep -o "rank [0-9] .*zero_copy [0-9]*"
	[ "$(grep -c "keel-verbs: rank .* zero_copy [1-9]" "$LOG/reg")" = 2 ] || bad
	grep -q "Out of bounds values : 0 OK" "$LOG/reg" || bad
	[ "$(grep -c "keel-verbs: rank .* zero_copy 0 " "$LOG/ar2")" = 2 ] || bad
	# device buffers (the CPU stand-in): the stage is registered and read in place. It is
	# allocated before the node (a region above another once matched that one: QP error)
	PORT=$((PORT + 10))
	timeout 100 "$RUN" -n 2 --no-key --master-port "$PORT" --timeout 90 -- "$BENCH" allreduce \
		--device cpu --check --register -b 4 -e 256K -f 8 -n 3 -w 1 >"$LOG/regdev" 2>&1 ||
		rc=$?
	grep -h "keel-verbs: rank" "$LOG/regdev" | grep -o "rank [0-9] .*zero_copy [0-9]*"
	[ "$(grep -c "keel-verbs: rank .* zero_copy [1-9]" "$LOG/regdev")" = 2 ] || bad
	grep -q "Out of bounds values : 0 OK" "$LOG/regdev" || bad
	# the device buffers as dma-bufs: Soft-RoCE takes none, and the run says it staged them;
	# nor a device area: what is received lands in host memory, and the run says so
	grep -h "^# device buffers: " "$LOG/regdev" || bad
	grep -h "^# device area: none" "$LOG/regdev" || bad
	# under the chaos decorator (it passes two-piece datagrams on): payloads still read in
	# place, losses repaired by the core, copies sent again reading the same registered bytes
	PORT=$((PORT + 10))
	KEEL_CHAOS="loss=0.02,dup=0.01,reorder=0.02,seed=${SEED:-7}" timeout 100 "$RUN" -n 2 \
		--no-key --master-port "$PORT" --timeout 90 -- "$BENCH" allreduce --check --register \
		-b 4 -e 256K -f 8 -n 3 -w 1 >"$LOG/regchaos" 2>&1 || rc=$?
	grep -h "keel-verbs: rank" "$LOG/regchaos" | grep -o "rank [0-9] .*zero_copy [0-9]*"
	[ "$(grep -c "keel-verbs: rank .* zero_copy [1-9]" "$LOG/regchaos")" = 2 ] || bad
	grep -q "Out of bounds values : 0 OK" "$LOG/regchaos" || bad
	grep -q "^# Datagrams sent [0-9]*, retransmitted [1-9]" "$LOG/regchaos" ||
		{ echo "  no retransmission under chaos"; bad; }
	grep -h "^# Datagrams sent" "$LOG/regchaos"
	[ $rc = 0 ] || tail -8 "$LOG/regchaos"
	[ $rc = 0 ] || tail -8 "$LOG/regdev"
	[ $rc = 0 ] || tail -8 "$LOG/reg"
	result registered-buffers $rc "$(since "$t")"
fi

# 2c. group operations over RC QPs, 3 ranks, every result checked: AllGather, AllToAll and
# Send/Recv over the job.
if want groups; then
	for op in all_gather alltoall sendrecv; do
		PORT=$((PORT + 10))
		t=$EPOCHREALTIME
		timeout 100 "$RUN" -n 3 --master-port "$PORT" --timeout 90 -- "$BENCH" "$op" --check \
			-b 8 -e 64K -f 8 -n 3 -w 1 >"$LOG/grp" 2>&1
		rc=$?
		grep -q "Out of bounds values : 0 OK" "$LOG/grp" || bad
		[ "$(grep -c "keel-verbs: rank .* write_imm [1-9]" "$LOG/grp")" -ge 2 ] || bad
		[ $rc = 0 ] || tail -8 "$LOG/grp"
		result "groups-$op" $rc "$(since "$t")"
	done
fi

# 3. rank 2 of 3 killed at 8 s (start-up under TCG takes 1-2 s, and more than 4 s once on a
# loaded host: the kill came before the rendezvous), its QPs gone: from each
# survivor's own report, it ended in a view of exactly {0, 1} at a later epoch and suspected no
# survivor; at least one survivor suspected rank 2 (ring monitoring: only rank 2's watchers
# hear it fall silent; the other learns of the failure from the new view). Below the core, the
# NIC must notice too: a survivor that held messages for rank 2 (or sent it any) gets a
# retry-exceeded completion, the keepalive credit write covering the case where it had no
# credit left to post anything (transport_verbs.h); its time after the kill is printed.
if want kill; then
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	t_kill=$(awk -v u="$(up)" 'BEGIN{print u + 8}') # the ranks' clock is CLOCK_MONOTONIC
	timeout 60 "$RUN" -n 3 --master-port "$PORT" --keep-going --kill 2@8 --timeout 50 -- \
		"$BENCH" heartbeat --seconds 11 >"$LOG/hb" 2>&1
	rc=0
	for r in 0 1; do
		line=$(grep "^# rank $r: " "$LOG/hb")
		echo "  ${line:-rank $r: no report}"
		[[ $line =~ view\ epoch\ ([0-9]+),\ 2\ members:\ 0\ 1\;\ suspected:(.*)$ ]] &&
			[ "${BASH_REMATCH[1]}" -ge 2 ] || { echo "  rank $r: no view without rank 2"; rc=1; continue; }
		s=${BASH_REMATCH[2]}
		[ -z "${s// 2/}" ] || { echo "  rank $r: suspected a survivor:$s"; rc=1; }
		[ "$s" = " 2" ] && suspected=1
	done
	[ "${suspected:-0}" = 1 ] || { echo "  no survivor suspected rank 2"; rc=1; }
	grep -q "keel-run: rank 2 killed by signal 9" "$LOG/hb" || { echo "  rank 2 was not killed"; rc=1; }
	nic=0
	for r in 0 1; do
		line=$(grep "keel-verbs: rank $r " "$LOG/hb")
		[[ $line =~ retry_exc\ ([0-9]+).*peers_failed\ ([0-9]+)\ first_fail_at\ ([0-9.]+) ]] || continue
		[ "${BASH_REMATCH[1]}" -ge 1 ] || [ "${BASH_REMATCH[2]}" -ge 1 ] || continue
		nic=1
		echo "  rank $r: NIC detection: retry_exc ${BASH_REMATCH[1]}, peer failed" \
			"$(awk -v a="$t_kill" -v b="${BASH_REMATCH[3]}" 'BEGIN{printf "%.2f", b - a}') s after the kill"
	done
	[ $nic = 1 ] || { echo "  no survivor's QP to rank 2 failed (retry_exc/peers_failed 0)"; rc=1; }
	grep -h "^ *[0-9] \|^# worst\|^# view\|keel-verbs: rank [01]" "$LOG/hb"
	[ $rc = 0 ] || tail -8 "$LOG/hb"
	result heartbeat-kill $rc "$(since "$t")"
fi

# 4. the chaos decorator on top of verbs (loss repaired by the core's reliable layer)
if want chaos; then
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	KEEL_CHAOS="loss=0.01,dup=0.005,reorder=0.01,seed=${SEED:-7}" timeout 100 "$RUN" -n 2 \
		--master-port "$PORT" --timeout 90 -- "$CHECK" auto --large $LARGE >"$LOG/chaos" 2>&1
	rc=$?
	grep -h "allreduce_check" "$LOG/chaos"
	grep -q "all exact; retransmits [1-9]" "$LOG/chaos" || { echo "  no retransmission seen"; bad; }
	[ $rc = 0 ] || tail -8 "$LOG/chaos"
	result chaos-allreduce $rc "$(since "$t")"
fi

# 5. the static keel-bench (make static-verbs): its linked-in providers must find rxe0
if want static && [ -x "$BUILD/static/keel-bench" ]; then
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	timeout 60 "$RUN" -n 2 --master-port "$PORT" --timeout 50 -- "$BUILD/static/keel-bench" \
		rdma-lat -b 16 -e 16 -n 50 >"$LOG/static" 2>&1
	rc=$?
	grep -h "keel-verbs: rank 0" "$LOG/static"
	grep -q "keel-verbs: rank 0 device rxe0" "$LOG/static" || bad
	[ $rc = 0 ] || tail -8 "$LOG/static"
	result static-keel-bench $rc "$(since "$t")"
fi

# 6. latency: keel's transport, then perftest on the same device at the same sizes, in the same
# polling mode. With one vCPU (the default: steadier on a 2-core host) two busy pollers only
# meet at scheduler ticks (~4 ms), so both sides wait on completion events: keel in event mode,
# ib_send_lat -e (ib_write_lat polls memory and has no event mode). With two vCPUs
# (KEEL_VM_SMP=2) both busy-poll, as on bare metal, and ib_write_lat runs too.
if [ "$(nproc)" -ge 2 ]; then
	LAT_POLL=busy LAT_WAIT=busy PERFTEST="ib_write_lat ib_send_lat" PERF_EV=
else
	LAT_POLL=event LAT_WAIT=block PERFTEST="ib_send_lat" PERF_EV=-e
fi
if want lat; then
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	set -- $LAT_SIZES
	KEEL_VERBS_POLL=$LAT_POLL KEEL_WAIT=$LAT_WAIT timeout 60 "$RUN" -n 2 --master-port "$PORT" \
		--timeout 50 -- "$BENCH" rdma-lat -b "$1" -e "${!#}" -f 16 -n $LAT_ITERS >"$LOG/lat" 2>&1
	rc=$?
	echo "# KEEL_VERBS_POLL=$LAT_POLL, $(nproc) vCPU"
	grep -v "keel-run\|keel-verbs" "$LOG/lat"
	[ "$(grep -c '^ *[0-9]\+ \+[0-9.]\+ ' "$LOG/lat")" = $# ] || bad
	[ $rc = 0 ] || tail -8 "$LOG/lat"
	result rdma-lat $rc "$(since "$t")"
	# heartbeat round trips through the whole node (wire format, detector), 2 ranks
	PORT=$((PORT + 10))
	t=$EPOCHREALTIME
	KEEL_VERBS_POLL=$LAT_POLL KEEL_WAIT=$LAT_WAIT KEEL_HEARTBEAT_US=20000 timeout 60 "$RUN" -n 2 \
		--master-port "$PORT" --timeout 50 -- "$BENCH" heartbeat --seconds 3 >"$LOG/hbrtt" 2>&1
	rc=$?
	grep "^ *[0-9] \|^# keel-bench\|^# view" "$LOG/hbrtt"
	grep -q "^# view: epoch 1, 2 members: 0 1 (view changes 0)" "$LOG/hbrtt" || bad
	[ $rc = 0 ] || tail -8 "$LOG/hbrtt"
	result heartbeat-rtt $rc "$(since "$t")"
fi
if want perftest; then
	t=$EPOCHREALTIME
	if command -v ib_write_lat >/dev/null; then
		echo "# perftest ($PERFTEST${PERF_EV:+, events}), rxe0 GID 1, $LAT_ITERS iterations:"
		echo "# tool bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9 (us)"
		rc=0
		for tool in $PERFTEST; do
			for sz in $LAT_SIZES; do
				p=$((18515 + sz))
				timeout 30 $tool $PERF_EV -d rxe0 -x 1 -s "$sz" -n $LAT_ITERS -F -p $p \
					>/dev/null 2>&1 &
				srv=$!
				out=
				for try in 1 2 3 4 5 6 7 8 9 10; do # the server may be slow to listen
					sleep 0.3
					out=$(timeout 30 $tool $PERF_EV -d rxe0 -x 1 -s "$sz" -n $LAT_ITERS -F \
						-p $p 127.0.0.1 2>&1) && break
				done
				wait $srv
				line=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+/{print; exit}' <<<"$out")
				[ -n "$line" ] || { echo "$out" | tail -3; rc=1; }
				echo "perftest $tool$PERF_EV $line"
			done
		done
		# a reference measurement of the device, not a check of keel: noted, never fatal
		[ $rc = 0 ] && echo "KEEL_VM perftest done ($(since "$t")s)" ||
			echo "KEEL_VM NOTE perftest did not complete every run ($(since "$t")s)"
	else
		echo "KEEL_VM perftest not installed: no raw verbs figures (apt-get install perftest)"
	fi
fi
echo "KEEL_VM summary: passed $pass failed $fail in $(since "$t0") s (VM uptime $(up) s)"
rm -rf "$LOG"
[ $fail = 0 ]
