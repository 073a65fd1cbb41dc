#!/usr/bin/env bash
# Per-peer transport selection (KEEL_TRANSPORT=auto, the default): 4 ranks that pretend to be
# two hosts of 2 (KEEL_HOST) talk shared memory inside a host and UDP across, every element
# checked; 4 ranks of one host use shared memory only; a rank alone on its host uses UDP only;
# KEEL_HOST beside KEEL_PEERS is refused with a message naming both, and so is a bad
# KEEL_UDP_GSO; nothing is left in /dev/shm.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BIN/keel-run" "$BENCH"
export KEEL_HEARTBEAT_US=20000 KEEL_OP_TIMEOUT_MS=20000
unset KEEL_TRANSPORT
before=$(ls /dev/shm | grep -c '^keel-' || true)
tmpdir_make tmp

# ranks-per-host ranks: "shm udp" datagram counts from keel-bench's routes line, results checked
routes() {
	local per_host=$1 n=$2
	run_ranks "$n" 120 -- sh -c \
		"KEEL_HOST=h\$((RANK / $per_host)) exec $BENCH allreduce -b 4 -e 1048576 -f 8 -n 20 -w 3 --check" \
		>"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "router_hosts: $n ranks, $per_host per host failed"; exit 1; } >&2
	grep -q '^# Out of bounds values : 0 OK' "$tmp/out" ||
		{ cat "$tmp/out"; echo "router_hosts: wrong results ($n ranks, $per_host per host)"; exit 1; } >&2
	sed -n 's/^# Routes: \([0-9]*\) datagrams over shared memory, \([0-9]*\) over UDP, \([0-9]*\) fallbacks$/\1 \2 \3/p' "$tmp/out"
}

routes 2 4 >"$tmp/routes"
read -r shm udp fb <"$tmp/routes"
echo "router_hosts: 2 hosts x 2 ranks: $shm datagrams over shared memory, $udp over UDP"
[ "$shm" -gt 0 ] && [ "$udp" -gt 0 ] && [ "$fb" -eq 0 ] ||
	{ echo "router_hosts: expected both routes in use, no fallback"; exit 1; }

routes 4 4 >"$tmp/routes"
read -r shm udp fb <"$tmp/routes"
echo "router_hosts: 1 host x 4 ranks: $shm over shared memory, $udp over UDP"
[ "$shm" -gt 0 ] && [ "$udp" -eq 0 ] || { echo "router_hosts: expected shared memory only"; exit 1; }

# every rank on a host of its own: no region, no router
run_ranks 2 60 -- sh -c \
	"KEEL_HOST=h\$RANK exec $BENCH allreduce -b 4 -e 4096 -f 8 -n 10 -w 2 --check" >"$tmp/out" 2>&1 ||
	{ cat "$tmp/out"; exit 1; }
grep -q 'transport udp' "$tmp/out" && grep -q '^# Out of bounds values : 0 OK' "$tmp/out" ||
	{ cat "$tmp/out"; echo "router_hosts: a rank alone on its host should use UDP only"; exit 1; }
echo "router_hosts: 2 hosts x 1 rank: UDP only"

# A rank that does not offer shared memory (KEEL_TRANSPORT=udp) on a host of 3: the other two
# share memory between them and reach it over UDP; nobody waits for it to map the region.
t0=$SECONDS
run_ranks 3 60 -- sh -c \
	"[ \$RANK = 2 ] && export KEEL_TRANSPORT=udp; exec $BENCH allreduce -b 4 -e 65536 -f 16 -n 10 -w 2 --check" \
	>"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "router_hosts: a rank on UDP among shm ranks failed"; exit 1; }
grep -q '^# Out of bounds values : 0 OK' "$tmp/out" || { cat "$tmp/out"; exit 1; }
read -r shm udp fb < <(sed -n 's/^# Routes: \([0-9]*\) datagrams over shared memory, \([0-9]*\) over UDP, \([0-9]*\) fallbacks$/\1 \2 \3/p' "$tmp/out")
[ "${shm:-0}" -gt 0 ] && [ "${udp:-0}" -gt 0 ] && [ $((SECONDS - t0)) -lt 20 ] ||
	{ cat "$tmp/out"; echo "router_hosts: expected shm between ranks 0-1 and UDP to rank 2, quickly"; exit 1; }
echo "router_hosts: 1 host, rank 2 on UDP only: $shm over shared memory, $udp over UDP, $((SECONDS - t0)) s"

# refused VAR=VALUE MESSAGE: rank 0 of a static list stops at start with MESSAGE
refused() {
	local rc=0
	env KEEL_PEERS=127.0.0.1:1,127.0.0.1:2 RANK=0 "$1" "$BENCH" allreduce -b 4 -e 4 -n 1 \
		>"$tmp/out" 2>&1 || rc=$?
	[ $rc -ne 0 ] && grep -qF "$2" "$tmp/out" ||
		{ cat "$tmp/out"; echo "router_hosts: $1 was not refused"; exit 1; } >&2
	echo "router_hosts: $1 refused: $(grep -F "$2" "$tmp/out" | head -1)"
}
# KEEL_HOST needs the rendezvous: with a static list each rank's host is its entry's
refused KEEL_HOST=x 'KEEL_HOST=x: with KEEL_PEERS'
# KEEL_UDP_GSO takes 0 or 1; anything else stops the start with a message naming it
refused KEEL_UDP_GSO=yes "KEEL_UDP_GSO='yes': expected 0 (off) or 1 (on)"

after=$(ls /dev/shm | grep -c '^keel-' || true)
[ "$after" -le "$before" ] || { echo "router_hosts: $((after - before)) region(s) left in /dev/shm"; exit 1; }
echo "router_hosts: passed"
