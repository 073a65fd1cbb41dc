#!/usr/bin/env bash
# keel's collectives and Send/Recv beside Open MPI's and Gloo's on this host (issues 16, 52),
# one method for all: f32 (sums; root 0), each iteration timed alone, the slowest rank per
# iteration (gathered after the timed loop), the median over iterations, the result checked
# exactly. keel: keel-bench OP --median --check over shm and udp; Open MPI (ompi-coll): over
# vader (shared memory) and tcp (loopback); Gloo: its TCP transport on loopback (AllReduce: the
# best algorithm per size). For each operation and size every program runs back to back, so all
# see the same machine. Prints one table, a row per operation and size, with keel/peer ratios.
# Refuses to quote figures on a busy machine (1-min load above --load-max).
#
#   tools/bench-peers.sh [options]       (make bench-peers builds first, then runs this)
# Options:
#   --ops LIST       operations (default all): allreduce (MPI_Allreduce), all_gather
#                    (MPI_Allgather), reduce_scatter (MPI_Reduce_scatter_block), alltoall
#                    (MPI_Alltoall), pingpong (ranks 0 and 1, half a round trip: MPI_Send and
#                    MPI_Recv; keel-bench sendrecv's first half), exchange (both ways at once:
#                    MPI_Sendrecv; its second half), reduce, broadcast, barrier. A size is
#                    every rank's part together for all_gather, reduce_scatter and alltoall
#                    (nccl-tests), and a size below 4 B a rank is left out; barrier: one row
#   --ranks LIST     rank counts, e.g. 2,4 (default 2,4)
#   --sizes LIST     sizes in bytes, e.g. 4,4K,1M (default 4 B .. 64 MiB, x4)
#   --quick          fewer sizes (4 B .. 4 MiB, x16) and iterations: a minute or two
#   --rounds N       run every program N times per size, in turn (default 1); prints the
#                    median of its times and, per ratio, the median of the rounds' own ratios
#                    (with their range): a machine whose speed drifts moves every round's
#                    figures together, so per-round ratios hold where single runs do not
#   --only LIST      run only these columns: keel-shm,keel-udp,ompi-vader,ompi-tcp,gloo
#   --gloo-algos L   Gloo algorithms to try (default all the program knows)
#   --hosts H        keel ranks pretend to be H hosts (KEEL_HOST=h0.., by rank); peers unchanged
#   --netns          every rank in its own network namespace over veth and a bridge (root):
#                    keel-udp against ompi-tcp only, as between hosts on one switch
#   --veth-mtu N     the veth and bridge MTU with --netns (default 1500; 9000: jumbo frames)
#   --auth           keel with its job key (default --no-key: the peers authenticate nothing)
#   --warmup-ms MS   every program warms up for at least MS ms per size (default 1000; 0:
#                    the warm-up calls alone), in rounds of its warm-up calls: a job's first
#                    100-500 ms (once 1.3 s) ran small AllReduces up to 2x slower on a 16-core
#                    machine (keel-bench --series), so 200 ms measured that instead
#   --keel-wait M    KEEL_WAIT for keel's ranks: busy, adaptive or block (default: keel's own,
#                    adaptive; Open MPI busy-polls, yielding only when ranks outnumber cores)
#   --force          run on a busy machine; the table is marked "busy machine, not quotable"
#   --load-max X     the 1-min load average above which it refuses (default 0.5 x cores)
#   --build DIR      keel's build folder (default build; peer programs in DIR/bench-peers)
# Exit 0; 1 if a result was wrong or a run failed; 2 on usage; 3 refused (busy machine).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build RANKS=2,4 SIZES='' QUICK=0 ROUNDS=1 ONLY='' GLOO_ALGOS='' HOSTS=1 AUTH=0 FORCE=0 NETNS=0
VETH_MTU=1500
LOAD_MAX='' KEEL_WAIT_MODE='' WARMUP_MS=1000
MEASURED=''
COLUMNS_ALL="keel-shm keel-udp ompi-vader ompi-tcp gloo"
OPS_ALL="allreduce all_gather reduce_scatter alltoall pingpong exchange reduce broadcast barrier"
OPS=$OPS_ALL
usage() {
	sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--ops) OPS=$2; shift 2 ;;
	--ranks) RANKS=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--quick) QUICK=1; shift ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--gloo-algos) GLOO_ALGOS=$2; shift 2 ;;
	--hosts) HOSTS=$2; shift 2 ;;
	--netns) NETNS=1; shift ;;
	--veth-mtu) VETH_MTU=$2; shift 2 ;;
	--auth) AUTH=1; shift ;;
	--keel-wait) KEEL_WAIT_MODE=$2; shift 2 ;;
	--warmup-ms) WARMUP_MS=$2; shift 2 ;;
	--force) FORCE=1; shift ;;
	--load-max) LOAD_MAX=$2; shift 2 ;;
	--build) BUILD=$2; shift 2 ;;
	-h | --help) usage ;;
	*) echo "bench-peers: unknown option '$1'" >&2; usage ;;
	esac
done

RUN=$BUILD/bin/keel-run KEEL_BENCH=$BUILD/bin/keel-bench PEERS=$BUILD/bench-peers
die() { echo "bench-peers: $*" >&2; exit 2; }

# Sizes: "4K" -> 4096.
to_bytes() {
	local v=$1 m=1
	case $v in
	*[kK]) m=1024; v=${v%?} ;;
	*[mM]) m=$((1024 * 1024)); v=${v%?} ;;
	esac
	[[ $v =~ ^[0-9]+$ ]] || die "bad size '$1'"
	echo $((v * m))
}
if [ -z "$SIZES" ]; then
	step=4 top=$((64 << 20))
	if [ $QUICK -eq 1 ]; then step=16 top=$((4 << 20)); fi
	s=4 SIZES=''
	while [ $s -le $top ]; do
		SIZES="$SIZES $s"
		s=$((s * step))
	done
else
	list=''
	for v in ${SIZES//,/ }; do list="$list $(to_bytes "$v")"; done
	SIZES=$list
fi
for s in $SIZES; do [ $((s % 4)) -eq 0 ] && [ "$s" -ge 4 ] || die "size $s: not a multiple of 4"; done
OPS=${OPS//,/ }
for op in $OPS; do [[ " $OPS_ALL " == *" $op "* ]] || die "unknown operation '$op' (--ops: $OPS_ALL)"; done
RANKS=${RANKS//,/ }
for n in $RANKS; do [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] || die "bad rank count '$n'"; done
[[ $HOSTS =~ ^[1-9][0-9]*$ ]] || die "bad --hosts '$HOSTS'"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] && [ "$ROUNDS" -le 99 ] || die "bad --rounds '$ROUNDS' (1..99)"
[[ $VETH_MTU =~ ^[0-9]+$ ]] && [ "$VETH_MTU" -ge 1280 ] && [ "$VETH_MTU" -le 65535 ] ||
	die "bad --veth-mtu '$VETH_MTU' (1280..65535)"
if [ $NETNS -eq 1 ]; then
	# Namespaces are separate hosts: shared memory cannot join them, and Gloo's file-store
	# rendezvous is not wired for them.
	[ -n "$ONLY" ] || ONLY=keel-udp,ompi-tcp
	for c in ${ONLY//,/ }; do
		[[ $c == keel-udp || $c == ompi-tcp ]] ||
			die "--netns runs keel-udp and ompi-tcp only, not '$c' (namespaces are separate hosts)"
	done
	[ "$HOSTS" -eq 1 ] || die "--netns and --hosts: each namespace is already a host"
	[ $AUTH -eq 0 ] || die "--netns starts keel's ranks without keel-run: no job key (drop --auth)"
	. tools/bench-peers/netns.sh
	netns_check
fi
COLUMNS=$COLUMNS_ALL
if [ -n "$ONLY" ]; then
	COLUMNS=${ONLY//,/ }
	for c in $COLUMNS; do [[ " $COLUMNS_ALL " == *" $c "* ]] || die "unknown column '$c'"; done
fi
# The programs the columns run.
need=("$RUN")
[[ " $COLUMNS " != *" keel-"* ]] || need+=("$KEEL_BENCH")
[[ " $COLUMNS " != *" ompi-"* ]] || need+=("$PEERS/ompi-coll")
[[ " $COLUMNS " != *" gloo "* ]] || need+=("$PEERS/gloo-allreduce" "$PEERS/gloo-coll")
for f in "${need[@]}"; do
	[ -x "$f" ] || die "no $f (run 'make bench-peers', which builds everything first)"
done
[[ " $COLUMNS " != *" ompi-"* ]] || command -v mpirun >/dev/null ||
	die "no mpirun (apt-get install openmpi-bin)"
# Pretend hosts cannot share one region: keel's shared-memory column becomes the default
# (auto), shared memory inside each pretend host and UDP between them.
SHM_TP=shm
[ "$HOSTS" -eq 1 ] || SHM_TP=auto
[[ $KEEL_WAIT_MODE =~ ^(|busy|adaptive|block)$ ]] || die "bad --keel-wait '$KEEL_WAIT_MODE'"
[[ $WARMUP_MS =~ ^[0-9]+$ ]] && [ "$WARMUP_MS" -le 600000 ] || die "bad --warmup-ms '$WARMUP_MS' (0..600000)"
for n in $RANKS; do [ $((n % HOSTS)) -eq 0 ] || die "--hosts $HOSTS does not divide $n ranks"; done

# Iterations per size: about 64 MiB of data per rank and program for mid sizes (a few hundred
# ms at loopback speeds), at least 5 for the largest, at most 500 for the smallest (their
# median is steady by then); warm-up a tenth, and at least WARMUP_MS of it: a run's first
# milliseconds are slower here whatever runs (keel's first timed column of a short run came out
# 2-3x its second), so the figures are of the steady state. --quick: a quarter of that.
iters_for() {
	local budget=$((64 << 20)) lo=5 hi=500
	if [ $QUICK -eq 1 ]; then budget=$((16 << 20)) hi=200; fi
	local i=$((budget / $1))
	if [ $i -lt $lo ]; then i=$lo; fi
	if [ $i -gt $hi ]; then i=$hi; fi
	echo $i
}
warmup_for() { local w=$(($1 / 10)); if [ $w -lt 2 ]; then w=2; fi; echo $w; }

# The machine, and whether its figures may be quoted.
cores=$(nproc)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
LOAD_MAX=${LOAD_MAX:-$(awk -v c="$cores" 'BEGIN { printf "%.2f", c * 0.5 }')}
busy=$(awk -v l="${load_before%% *}" -v m="$LOAD_MAX" 'BEGIN { print (l > m) ? 1 : 0 }')
if [ "$busy" = 1 ] && [ $FORCE -eq 0 ]; then
	echo "bench-peers: refused: 1-min load average ${load_before%% *} is above $LOAD_MAX" \
		"($cores cores): other work would be in the figures. Run when the machine is idle," \
		"or with --force for figures marked not quotable." >&2
	exit 3
fi

LOGS=$PEERS/last-run
rm -rf "$LOGS"
mkdir -p "$LOGS"
STORE_ROOT=$(mktemp -d /tmp/keel-bench-peers.XXXXXX)
trap 'rm -rf "$STORE_ROOT"' EXIT
if [ $NETNS -eq 1 ]; then
	trap 'netns_cleanup; rm -rf "$STORE_ROOT"' EXIT
	ranks_max=0
	for n in $RANKS; do [ "$n" -le $ranks_max ] || ranks_max=$n; done
	netns_setup $ranks_max "$VETH_MTU"
fi
failed=0
nokey=(--no-key)
if [ $AUTH -eq 1 ]; then nokey=(); fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# One program at one size: sets MEASURED to "median_us algorithm" or "FAIL" (not a subshell:
# run_gloo's list of algorithms carries over); its output is kept in
# $LOGS/<column>-<ranks>-<bytes>.txt.
# keel-bench's name for an operation: pingpong and exchange are sendrecv's two halves.
keel_op() { case $1 in pingpong | exchange) echo sendrecv ;; *) echo "$1" ;; esac; }
OP=allreduce # the operation measure() runs
run_keel() { # transport ranks bytes iters warmup
	local tp=$1 n=$2 b=$3 it=$4 w=$5
	local cmd=("$KEEL_BENCH" "$(keel_op "$OP")" --median --check -b "$b" -e "$b" -n "$it" -w "$w"
		--warmup-ms "$WARMUP_MS")
	if [ "$HOSTS" -gt 1 ]; then
		# RANK is keel-run's; every PER_HOST ranks in a row share one pretend host.
		cmd=(env PER_HOST=$((n / HOSTS)) sh -c \
			'KEEL_HOST=h$((RANK / PER_HOST)) exec "$0" "$@"' "${cmd[@]}")
	fi
	local envs=("KEEL_TRANSPORT=$tp")
	if [ -n "$KEEL_WAIT_MODE" ]; then envs+=("KEEL_WAIT=$KEEL_WAIT_MODE"); fi
	if [ $NETNS -eq 1 ]; then
		(
			export "${envs[@]}"
			netns_keel "$n" "${cmd[@]}"
		)
		return
	fi
	env "${envs[@]}" timeout 600 "$RUN" -n "$n" "${nokey[@]}" --timeout 300 -- "${cmd[@]}"
}
run_ompi() { # btl ranks bytes iters warmup
	if [ $NETNS -eq 1 ]; then
		netns_mpirun "$2" --mca btl "self,$1" "$PEERS/ompi-coll" -o "$OP" -b "$3" -e "$3" \
			-n "$4" -w "$5" -t "$WARMUP_MS"
		return
	fi
	local btl=(--mca btl "self,$1")
	[ "$1" = tcp ] && btl+=(--mca btl_tcp_if_include lo)
	timeout 300 "${mpi[@]}" -n "$2" "${btl[@]}" "$PEERS/ompi-coll" -o "$OP" -b "$3" -e "$3" \
		-n "$4" -w "$5" -t "$WARMUP_MS"
}
# Gloo's algorithms still tried at this rank count: one far slower than the best at a size
# (gloo-allreduce says "dropped: ...; left: LIST") is not run at larger ones.
gloo_live=''
run_gloo() { # ranks bytes iters warmup
	local store
	store=$(mktemp -d "$STORE_ROOT/store.XXXXXX")
	if [ "$OP" != allreduce ]; then
		timeout 600 "$RUN" -n "$1" --timeout 300 -- "$PEERS/gloo-coll" -s "$store" -o "$OP" \
			-b "$2" -e "$2" -n "$3" -w "$4" -t "$WARMUP_MS"
		return
	fi
	timeout 600 "$RUN" -n "$1" --timeout 300 -- "$PEERS/gloo-allreduce" -s "$store" \
		-b "$2" -e "$2" -n "$3" -w "$4" -t "$WARMUP_MS" ${gloo_live:+-a "$gloo_live"}
}
ROUND=1
measure() { # column ranks bytes iters warmup
	local col=$1 pre='' rc=0
	if [ "$OP" != allreduce ]; then pre=$OP-; fi
	local log="$LOGS/$pre$1-$2-$3.txt"
	if [ "$ROUND" -gt 1 ]; then log="$LOGS/$pre$1-$2-$3-r$ROUND.txt"; fi
	case $col in
	keel-shm) run_keel "$SHM_TP" "${@:2}" >"$log" 2>&1 || rc=$? ;;
	keel-udp) run_keel udp "${@:2}" >"$log" 2>&1 || rc=$? ;;
	ompi-vader) run_ompi vader "${@:2}" >"$log" 2>&1 || rc=$? ;;
	ompi-tcp) run_ompi tcp "${@:2}" >"$log" 2>&1 || rc=$? ;;
	gloo) run_gloo "${@:2}" >"$log" 2>&1 || rc=$? ;;
	esac
	# Gloo's own TCP pair now and then says "Connection closed by peer" mid-run (a few runs
	# in a hundred here, whatever the operation): once more, and the log says so.
	if [ "$col" = gloo ] && [ $rc -ne 0 ] && grep -q "Connection closed by peer" "$log"; then
		mv "$log" "$log.closed"
		rc=0
		run_gloo "${@:2}" >"$log" 2>&1 || rc=$?
		echo "# bench-peers: run again after Gloo's \"Connection closed by peer\" ($log.closed)" >>"$log"
	fi
	local left
	left=$(sed -n 's/^# dropped: .*; left: //p' "$log")
	if [ -n "$left" ]; then gloo_live=$left; fi
	local row
	if [[ $col == keel-* ]]; then # keel-bench's nccl-tests row: the half's time, #wrong
		local tcol=6 # out of place; broadcast is in place, exchange sendrecv's second half
		if [ "$OP" = broadcast ] || [ "$OP" = exchange ]; then tcol=10; fi
		row=$(awk -v t=$tcol '/^ +[0-9]+ +[0-9]+ +f32 / { print $t, "-", $9 + $13 }' "$log")
	else # size count iters median min max #wrong algorithm
		row=$(awk '/^ +[0-9]+ +[0-9]+ +[0-9]+ / { print $4, $8, $7 }' "$log")
	fi
	if [ $rc -ne 0 ] || [ -z "$row" ] || [ "${row##* }" != 0 ] ||
		! grep -q "^# Out of bounds values : 0 OK" "$log"; then
		echo "bench-peers: $col, $2 ranks, $3 B: failed (exit $rc${row:+, row: $row});" \
			"see $log" >&2
		MEASURED=FAIL
		return
	fi
	MEASURED=${row% *}
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b;
	else printf "-" }'; }
# The median of the numbers given ("-" for none); with `range`, then "(min-max)" when several.
median() {
	local range=0
	if [ "${1:-}" = range ]; then range=1; shift; fi
	[ $# -gt 0 ] || { printf -- '-'; return; }
	printf '%s\n' "$@" | sort -g | awk -v r=$range '{ a[NR] = $1 } END {
		m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		printf "%.2f", m
		if (r && NR > 1) printf " (%.2f-%.2f)", a[1], a[NR] }'
}
human() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%gM", b / 1048576;
	else if (b >= 1024) printf "%gK", b / 1024; else printf "%d", b }'; }

if [ $NETNS -eq 1 ]; then
	echo "# bench-peers: keel vs Open MPI, f32, one network namespace per rank"
else
	echo "# bench-peers: keel vs Open MPI and Gloo, f32, same host"
fi
echo "# operations: $OPS (sums, root 0; a row per operation and size)"
echo "# machine: $cores cores, $cpu; $(uname -r)"
echo "# load average before: $load_before (limit for quoting: 1-min <= $LOAD_MAX)"
[ "$busy" = 1 ] && echo "# BUSY MACHINE, NOT QUOTABLE (--force)"
echo "# time: median over iterations of the slowest rank's time in each, us; checked exactly"
if [ "$ROUNDS" -gt 1 ]; then
	echo "# rounds: $ROUNDS, every program once per round for each size, in turn; times: the median" \
		"over the rounds; ratios: the median of the rounds' own ratios (their range)"
fi
echo "# warm-up: a tenth of the iterations, and at least $WARMUP_MS ms, for every program"
over=''
for n in $RANKS; do [ "$n" -le "$(nproc)" ] || over="$over${over:+,}$n"; done
# Every library then waits for a core: on 2 cores vader's 4-rank 4 B took 25 us, on 16 cores 1.8.
[ -z "$over" ] || echo "# ranks outnumber the $(nproc) cores at $over ranks: each library there waits" \
	"for the CPU, so small sizes measure the scheduler as much as the library (docs/PERF.md," \
	"\"Sixteen cores\")"
keel_note="keel-bench OP --median --check, wait ${KEEL_WAIT_MODE:-${KEEL_WAIT:-default}}"
if [ $AUTH -eq 0 ]; then keel_note="$keel_note, no job key"; fi
if [ "$HOSTS" -gt 1 ]; then
	keel_note="$keel_note, KEEL_HOST: $HOSTS pretend hosts (keel-shm column: KEEL_TRANSPORT=auto, shared memory inside a host and UDP across)"
fi
echo "# keel: $keel_note"
if [ $NETNS -eq 1 ]; then
	echo "# network: $(netns_describe); keel KEEL_MTU=${KEEL_MTU:-default}"
	echo "# ompi: $(mpirun --version 2>&1 | head -1); btl self,tcp over the bridge"
else
	echo "# ompi: $(mpirun --version 2>&1 | head -1); btl self,vader and self,tcp (lo)"
fi
[ $NETNS -eq 1 ] ||
	echo "# gloo: tcp on 127.0.0.1; allreduce: best of ${GLOO_ALGOS:-all algorithms} (algorithm named)"
echo "# logs: $LOGS"
RW=9 # a ratio's column; wider where it carries its rounds' range
if [ "$ROUNDS" -gt 1 ]; then RW=19; fi
FMT="%-14s %5s %8s %10s %10s %10s %10s %10s %-16s %${RW}s %${RW}s %${RW}s\n"
# shellcheck disable=SC2059 # the format is the table's, kept in one place
printf "$FMT" op ranks size keel-shm keel-udp ompi-vader ompi-tcp gloo gloo-algo shm/vader \
	udp/tcp udp/gloo

# One row: every column at one operation ($OP), rank count and size, ROUNDS times in turn.
one_row() { # ranks bytes label
	local n=$1 b=$2 it w c r p a z galgo=-
	it=$(iters_for "$b")
	w=$(warmup_for "$it")
	declare -A t=() times=() rat=()
	for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
		declare -A rt=()
		for c in $COLUMNS_ALL; do
			[[ " $COLUMNS " == *" $c "* ]] || continue
			[ "${t[$c]:-}" != FAIL ] || continue # not run again once it failed
			measure "$c" "$n" "$b" "$it" "$w"
			r=$MEASURED
			if [ "$r" = FAIL ]; then
				failed=1
				t[$c]=FAIL
				continue
			fi
			rt[$c]=${r%% *}
			times[$c]="${times[$c]:-} ${rt[$c]}"
			if [ "$c" = gloo ]; then galgo=${r#* }; fi
		done
		for p in keel-shm/ompi-vader keel-udp/ompi-tcp keel-udp/gloo; do
			a=${rt[${p%/*}]:-} z=${rt[${p#*/}]:-}
			if [ -n "$a" ] && [ -n "$z" ]; then rat[$p]="${rat[$p]:-} $(ratio "$a" "$z")"; fi
		done
		unset rt
	done
	for c in $COLUMNS_ALL; do
		if [ "${t[$c]:-}" = FAIL ]; then continue; fi
		if [ -z "${times[$c]:-}" ]; then t[$c]=-; else t[$c]=$(median ${times[$c]}); fi
	done
	# with one round, a program's time as it printed it
	if [ "$ROUNDS" -eq 1 ]; then
		for c in $COLUMNS_ALL; do [ -z "${times[$c]:-}" ] || t[$c]=${times[$c]# }; done
	fi
	# shellcheck disable=SC2059
	printf "$FMT" "$OP" "$n" "$3" "${t[keel-shm]}" "${t[keel-udp]}" "${t[ompi-vader]}" \
		"${t[ompi-tcp]}" "${t[gloo]}" "$galgo" "$(median range ${rat[keel-shm/ompi-vader]:-})" \
		"$(median range ${rat[keel-udp/ompi-tcp]:-})" "$(median range ${rat[keel-udp/gloo]:-})"
}

for OP in $OPS; do
	for n in $RANKS; do
		gloo_live=$GLOO_ALGOS
		if [ "$OP" = barrier ]; then # no sizes: one row
			one_row "$n" 4 -
			continue
		fi
		for b in $SIZES; do
			# every rank's part together: a size below 4 B a rank has nothing to send
			if [[ $OP =~ ^(all_gather|reduce_scatter|alltoall)$ ]] && [ "$b" -lt $((4 * n)) ]; then
				continue
			fi
			one_row "$n" "$b" "$(human "$b")"
		done
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$busy" = 1 ] && echo "# BUSY MACHINE, NOT QUOTABLE (--force)"
[ $failed -eq 0 ] || { echo "# SOME RUNS FAILED OR WERE WRONG (see above)"; exit 1; }
exit 0
