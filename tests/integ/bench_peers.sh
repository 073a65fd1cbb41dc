#!/usr/bin/env bash
# make bench-peers' programs give exact results: the Open MPI program (vader and tcp), the Gloo
# programs (every AllReduce algorithm gloo-allreduce tries; gloo-coll's operations) and
# keel-bench --median --check, every operation of the table (allreduce, all_gather,
# reduce_scatter, alltoall, pingpong and exchange, reduce, broadcast, barrier) at 2 ranks on
# two sizes, the rank-indexed ones at 4 ranks too (2 ranks hid a result in the wrong block),
# each checked by its own exact comparison; vader, Gloo and keel also warm up in timed rounds
# (-t / --warmup-ms: every rank must make the same calls). No timing is asserted. Skips (77)
# without libopenmpi-dev, libgloo-dev or mpirun.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
PEERS=$BUILD/bench-peers
if ! out=$(make -s --no-print-directory BUILD="$BUILD" bench-peers-check 2>/dev/null); then
	skip "$(sed -n 's/^keel: make bench-peers needs/needs/p' <<<"$out")"
fi
make -s --no-print-directory BUILD="$BUILD" bench-peers-build >/dev/null
must_be_built "$BIN/keel-run" "$BIN/keel-bench"
tmpdir_make store
sizes=(-b 4 -e 4K -f 1024)
mpi=(timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none)

# Every row has 0 wrong elements (keel-bench: each half it ran, col 0) and the summary says OK;
# the program exited 0. Gloo's own TCP pair now and then reports "Connection closed by peer"
# mid-run (once in a CI run, once in a bench-peers run, never in 15 runs in a row on an idle
# machine): that run is tried once more, and said so; a second such failure, or any other,
# fails the check.
check() { # name, wrong-column (0: keel-bench's two halves; -: none, a barrier), rows, command...
	local name=$1 col=$2 want=$3 out rc=0
	shift 3
	out=$("$@" 2>&1) || rc=$?
	if [ $rc -ne 0 ] && [[ $name == gloo* ]] && grep -q "Connection closed by peer" <<<"$out"; then
		echo "bench_peers: $name: Gloo's TCP pair closed under it; once more"
		rm -rf "${store:?}"/*
		rc=0
		out=$("$@" 2>&1) || rc=$?
	fi
	rm -rf "${store:?}"/*
	local rows bad
	rows=$(awk '/^ +[0-9]+ +[0-9]+ /' <<<"$out" | wc -l)
	bad=$(awk -v c="$col" '/^ +[0-9]+ +[0-9]+ / {
		if (c == "-") next
		if (c > 0) { if ($c != 0) print; next }
		if (!(($9 == 0 || $13 == 0) && ($9 == 0 || $9 == "N/A") && ($13 == 0 || $13 == "N/A")))
			print }' <<<"$out")
	if [ $rc -ne 0 ] || [ "$rows" -ne "$want" ] || [ -n "$bad" ] ||
		! grep -q "^# Out of bounds values : 0 OK" <<<"$out"; then
		echo "bench_peers: $name: exit $rc, $rows rows (not $want), wrong rows: ${bad:-none}"
		tail -20 <<<"$out"
		exit 1
	fi
	echo "bench_peers: $name: $want size(s) exact"
}
check ompi-vader 7 2 "${mpi[@]}" -n 2 --mca btl self,vader "$PEERS/ompi-coll" "${sizes[@]}" \
	-n 5 -w 1 -t 30
check ompi-tcp 7 2 "${mpi[@]}" -n 2 --mca btl self,tcp --mca btl_tcp_if_include lo \
	"$PEERS/ompi-coll" "${sizes[@]}" -n 5 -w 1
check gloo 7 2 timeout 60 "$BIN/keel-run" -n 2 --timeout 50 -- "$PEERS/gloo-allreduce" \
	-s "$store" "${sizes[@]}" -n 5 -w 1 -t 30
check keel-median 0 2 env KEEL_TRANSPORT=shm timeout 60 "$BIN/keel-run" -n 2 --no-key \
	--timeout 50 -- "$BIN/keel-bench" allreduce --median --check "${sizes[@]}" -n 5 -w 1 \
	--warmup-ms 30

# The other operations: 64 B (a rank's part of the split ones: 16 B at 4 ranks) and 64 KiB.
sizes=(-b 64 -e 64K -f 1024)
keel=(env KEEL_TRANSPORT=shm timeout 60 "$BIN/keel-run" --no-key --timeout 50)
for op in all_gather reduce_scatter alltoall pingpong exchange reduce broadcast barrier; do
	rows=2
	[ $op != barrier ] || rows=1
	for n in 2 4; do
		[ $n = 2 ] || [[ $op =~ ^(all_gather|reduce_scatter|alltoall)$ ]] || continue
		check "ompi-vader $op, $n ranks" 7 $rows "${mpi[@]}" -n $n --mca btl self,vader \
			"$PEERS/ompi-coll" -o $op "${sizes[@]}" -n 5 -w 1 -t 30
		check "gloo $op, $n ranks" 7 $rows timeout 60 "$BIN/keel-run" -n $n --timeout 50 -- \
			"$PEERS/gloo-coll" -s "$store" -o $op "${sizes[@]}" -n 5 -w 1 -t 30
		[ $op != exchange ] || continue # keel-bench sendrecv is pingpong and exchange
		col=0
		[ $op != barrier ] || col=- # a barrier has no result to compare
		check "keel $op, $n ranks" $col $rows "${keel[@]}" -n $n -- "$BIN/keel-bench" \
			"$(sed 's/pingpong/sendrecv/' <<<$op)" --median --check "${sizes[@]}" -n 5 -w 1 \
			--warmup-ms 30
	done
done
check "ompi-tcp alltoall, 4 ranks" 7 2 "${mpi[@]}" -n 4 --mca btl self,tcp \
	--mca btl_tcp_if_include lo "$PEERS/ompi-coll" -o alltoall "${sizes[@]}" -n 5 -w 1

# --rounds: every program runs once per round, each round's log kept; the row gives the
# median time and the median of the rounds' ratios with their range.
out=$(tools/bench-peers.sh --build "$BUILD" --force --rounds 2 --ranks 2 --sizes 4 \
	--ops allreduce --only keel-shm,ompi-vader 2>&1) || {
	echo "bench_peers: --rounds failed:"
	tail -20 <<<"$out"
	exit 1
}
row=$(awk '$1 == "allreduce" && $2 == 2 && $3 == 4' <<<"$out")
[[ $row =~ [0-9.]+\ \([0-9.]+-[0-9.]+\) ]] ||
	{ echo "bench_peers: --rounds: no ratio with its range in: $row"; exit 1; }
for f in keel-shm-2-4.txt keel-shm-2-4-r2.txt ompi-vader-2-4.txt ompi-vader-2-4-r2.txt; do
	[ -s "$BUILD/bench-peers/last-run/$f" ] || { echo "bench_peers: --rounds: no log $f"; exit 1; }
done
echo "bench_peers: --rounds 2: both rounds run and logged, ratio with its range"

# --netns: keel and Open MPI with each rank in its own network namespace (root only): both
# exact, keel's datagrams cut into pieces that fit the veth's 1500-byte MTU (24 of 1472 bytes
# make a datagram), and nothing left behind.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
	echo "bench_peers: --netns not checked (needs root and iproute2)"
	exit 0
fi
before=$(ip netns list | wc -l)
out=$(tools/bench-peers.sh --build "$BUILD" --netns --force --ranks 2 --sizes 4,64K \
	--ops allreduce,alltoall 2>&1) || {
	echo "bench_peers: --netns failed:"
	tail -20 <<<"$out"
	exit 1
}
# alltoall at 4 B is 2 B a rank: left out
rows=$(awk '$2 == 2 && $5 ~ /^[0-9.]+$/ && $7 ~ /^[0-9.]+$/' <<<"$out" | wc -l)
[ "$rows" -eq 3 ] || { echo "bench_peers: --netns: $rows of 3 rows measured"; tail -20 <<<"$out"; exit 1; }
grep -q "mtu 35136, window 32, udp pieces 1472," "$BUILD/bench-peers/last-run/keel-udp-2-65536.txt" ||
	{ echo "bench_peers: --netns: keel did not cut datagrams to the 1500-byte link"; exit 1; }
[ "$(ip netns list | wc -l)" -eq "$before" ] ||
	{ echo "bench_peers: --netns left namespaces behind: $(ip netns list)"; exit 1; }
echo "bench_peers: --netns: keel-udp and ompi-tcp exact (allreduce, alltoall), datagrams of 35136 bytes in 1472-byte pieces, namespaces removed"
