#!/usr/bin/env bash
# Ranks whose datagram sizes differ (hosts on links of different MTUs; here KEEL_MTU on one
# rank) agree at the rendezvous on the smallest, over UDP and over shared memory, results
# checked; sizes chosen with KEEL_MTU that some rank cannot take are refused by every rank with
# a message naming both ranks. Before, the larger rank's datagrams were dropped at the smaller
# one and the job stalled until its peers suspected each other.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BIN/keel-run" "$BENCH"
export KEEL_HEARTBEAT_US=20000 KEEL_OP_TIMEOUT_MS=20000
unset KEEL_MTU
tmpdir_make tmp

# n ranks, transport, the values by rank ("-" for none) of variable `var` (KEEL_MTU unless
# given), up to `max` bytes: keel-bench's output in $tmp/out
run() {
	local n=$1 tp=$2 sizes=$3 var=${4:-KEEL_MTU} max=${5:-1048576}
	KEEL_TRANSPORT=$tp run_ranks "$n" 120 -- sh -c \
		"set -- $sizes; shift \$RANK; [ \"\$1\" = - ] || export $var=\$1; exec $BENCH allreduce -b 4 -e $max -f 16 -n 10 -w 2 --check" \
		>"$tmp/out" 2>&1
}

for tp in udp auto; do
	# rank 2 takes 1472-byte datagrams, the others (on loopback) 65507 unless told
	run 3 $tp "- - 1472" || { cat "$tmp/out"; echo "mtu_agree: $tp: sizes 65507, 65507, 1472 failed"; exit 1; } >&2
	grep -q 'mtu 1472,' "$tmp/out" ||
		{ cat "$tmp/out"; echo "mtu_agree: $tp: rank 0 did not take the job's smallest size"; exit 1; } >&2
	# its window was set for 65507-byte datagrams before the rendezvous; it follows the size
	# the job agreed on (4x the default at 1472 bytes), as it would have for its own link
	grep -q 'mtu 1472, window 256,' "$tmp/out" ||
		{ cat "$tmp/out"; echo "mtu_agree: $tp: rank 0's window did not follow the agreed size"; exit 1; } >&2
	grep -q '^# Out of bounds values : 0 OK' "$tmp/out" ||
		{ cat "$tmp/out"; echo "mtu_agree: $tp: wrong results"; exit 1; } >&2
	echo "mtu_agree: $tp: ranks of 65507 and 1472 bytes agreed on 1472, results exact"
done

# the same size chosen everywhere is the normal case
run 2 udp "9000 9000" || { cat "$tmp/out"; echo "mtu_agree: KEEL_MTU=9000 everywhere failed"; exit 1; } >&2
grep -q 'mtu 9000,' "$tmp/out" || { cat "$tmp/out"; echo "mtu_agree: 9000 not kept"; exit 1; } >&2

# chosen sizes that cannot all be carried: the ranks stop before any collective and say why
# (each rank that gets to it; keel-run stops the rest once the first has exited)
if run 3 udp "- 1472 9000"; then
	cat "$tmp/out"; echo "mtu_agree: KEEL_MTU 9000 beside 1472 was not refused"; exit 1
fi
want='rank 2 set datagrams of 9000 bytes (KEEL_MTU), but rank 1 takes at most 1472 (its KEEL_MTU)'
grep -qF "$want" "$tmp/out" || { cat "$tmp/out"; echo "mtu_agree: the refusal did not name both ranks"; exit 1; } >&2
! grep -q '^# Out of bounds' "$tmp/out" || { cat "$tmp/out"; echo "mtu_agree: a rank ran anyway"; exit 1; } >&2
echo "mtu_agree: KEEL_MTU 9000 beside 1472 refused: $(grep -F "$want" "$tmp/out" | head -1)"
# Pieces (KEEL_UDP_PIECES=BYTES here, as a 1500-byte link would choose by itself): every rank
# cuts at the smallest rank's piece, and datagrams take as many whole pieces as 4 x 8972 bytes
# hold, with half the default window
pieces() {
	run "$1" "$2" "$3" KEEL_UDP_PIECES 4194304
}
for tp in udp auto; do
	pieces 3 $tp "1472 1200 1472" || { cat "$tmp/out"; echo "mtu_agree: $tp: pieces of 1472 and 1200 failed"; exit 1; } >&2
	# 1 192 bytes a piece (8 of them the piece header), 30 of them: 35 760
	grep -q 'mtu 35760, window 32, udp pieces 1200,' "$tmp/out" ||
		{ cat "$tmp/out"; echo "mtu_agree: $tp: pieces of 1200 did not make 35760-byte datagrams"; exit 1; } >&2
	grep -q '^# Out of bounds values : 0 OK' "$tmp/out" ||
		{ cat "$tmp/out"; echo "mtu_agree: $tp: wrong results with pieces"; exit 1; } >&2
	echo "mtu_agree: $tp: pieces of 1472 and 1200 bytes agreed on 1200 (35760-byte datagrams), results exact"
done
# a rank that does not cut: nobody does, and the job takes the smallest packet as its datagram,
# with the window of that size (the cutting rank had set half the default for its pieces)
pieces 2 udp "1472 0" || { cat "$tmp/out"; echo "mtu_agree: pieces beside none failed"; exit 1; } >&2
grep -q 'mtu 1472, window 256, wait' "$tmp/out" ||
	{ cat "$tmp/out"; echo "mtu_agree: a rank without pieces did not stop the others cutting"; exit 1; } >&2
grep -q '^# Out of bounds values : 0 OK' "$tmp/out" || { cat "$tmp/out"; echo "mtu_agree: wrong results"; exit 1; } >&2
echo "mtu_agree: pieces beside a rank without them: 1472-byte datagrams, results exact"
# a piece size no link has
if pieces 2 udp "100 100"; then
	cat "$tmp/out"; echo "mtu_agree: KEEL_UDP_PIECES=100 was accepted"; exit 1
fi
grep -qF "KEEL_UDP_PIECES='100': expected 0 (off), 1 (on) or a piece size in 576..65507" "$tmp/out" ||
	{ cat "$tmp/out"; echo "mtu_agree: KEEL_UDP_PIECES=100 refused without naming it"; exit 1; } >&2
echo "mtu_agree: passed"
