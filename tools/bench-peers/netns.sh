# Sourced by tools/bench-peers.sh for --netns: every rank in its own network namespace, joined
# by a veth pair to one bridge, as ranks on separate hosts of one switch would be (the bytes
# cross veth and the bridge: real IP, ARP, the link's MTU, no loopback shortcut). Open MPI's
# mpirun runs in one more namespace on the bridge and starts its daemons in the ranks'
# namespaces through an rsh agent that is `ip netns exec`; keel's ranks are started directly,
# each with its KEEL_PEERS entry. Needs root and iproute2. The namespaces are those of the
# tests (tests/integ/lib.sh's ns_ helpers): their names carry the script's pid, so several runs
# may share the machine; netns_cleanup removes everything (called on exit).
#
# Uses from bench-peers.sh: STORE_ROOT (a temporary folder), die.
set -o pipefail # bench-peers.sh has it already; said here too, as every script of the tree does
KEEL_LIB_FUNCTIONS_ONLY=1 . tests/integ/lib.sh

NETNS_NET=10.79 # 10.79.<pid % 250>.0/24: the bridge's subnet
NETNS_SUBNET=''
NETNS_RANKS=0
NETNS_MTU=1500

netns_check() {
	[ "$(id -u)" = 0 ] || die "--netns needs root (network namespaces)"
	command -v ip >/dev/null || die "--netns needs iproute2's ip"
}

# netns_setup N MTU: a namespace for each rank 0..N-1 at .1...N, the head's (mpirun) at .254.
netns_setup() {
	local n=$1 r
	NETNS_RANKS=$n NETNS_MTU=$2
	NETNS_SUBNET=$NETNS_NET.$(($$ % 250))
	NS_NET=$NETNS_SUBNET
	ns_bridge "$NETNS_MTU" || die "--netns: cannot create a network namespace here"
	for r in $(seq 0 $((n - 1))); do
		ns_add "$r" "$(ns_addr "$r")" || die "--netns: cannot create veth pairs (MTU $NETNS_MTU)"
	done
	ns_add h "$NETNS_SUBNET.254" || die "--netns: cannot create veth pairs (MTU $NETNS_MTU)"
	# Open MPI's rsh agent: "$1" is a rank's address, the rest the remote shell's command.
	# Each daemon gets a TMPDIR of its own: they all think they are alone on their host, and
	# racing to make one session folder in the shared /tmp failed ("mkdir: File exists",
	# orte_session_dir, exit 213) about once in twenty starts.
	cat >"$STORE_ROOT/netns-agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
mkdir -p "$STORE_ROOT/tmp-\$host"
exec env TMPDIR="$STORE_ROOT/tmp-\$host" ip netns exec ${NS_P}n\$((\${host##*.} - 1)) sh -c "\$*"
EOF
	chmod +x "$STORE_ROOT/netns-agent.sh"
	for r in $(seq 0 $((n - 1))); do echo "$NETNS_SUBNET.$((r + 1)) slots=1"; done \
		>"$STORE_ROOT/netns-hosts"
}

netns_cleanup() {
	ns_teardown # under bench-peers.sh's set -e too: a failed delete does not end it
	NETNS_SUBNET=''
}

netns_describe() {
	echo "each rank in its own network namespace, veth pairs (MTU $NETNS_MTU) to one bridge," \
		"$NETNS_SUBNET.0/24"
}

# netns_keel N CMD...: rank r of N runs CMD in namespace r with its KEEL_PEERS entry; every
# rank's output goes to stdout, rank 0's first. The exit status is the first failing rank's.
netns_keel() {
	local n=$1 r peers='' rc=0 pids=() job=$RANDOM
	shift
	for r in $(seq 0 $((n - 1))); do peers="$peers${peers:+,}$NETNS_SUBNET.$((r + 1)):7000"; done
	for r in $(seq 0 $((n - 1))); do
		RANK=$r WORLD_SIZE=$n KEEL_PEERS=$peers KEEL_JOB_ID=$job \
			timeout 600 ip netns exec "$(ns_name "$r")" "$@" >"$STORE_ROOT/netns-rank$r" 2>&1 &
		pids+=($!)
	done
	for r in $(seq 0 $((n - 1))); do wait "${pids[$r]}" || { [ $rc -ne 0 ] || rc=$?; }; done
	for r in $(seq 0 $((n - 1))); do
		[ "$r" = 0 ] || echo "# ---- rank $r"
		cat "$STORE_ROOT/netns-rank$r"
	done
	return $rc
}

# netns_mpirun N ARGS...: mpirun in the head namespace, one rank per namespace, TCP over the
# bridge for both MPI traffic and Open MPI's own. Each daemon thinks it has its host to itself,
# so two things it would do on one host are set by hand: ranks that outnumber the cores yield
# while they poll (as Open MPI does when it sees the oversubscription itself: without it each
# hop waited a 4 ms scheduler tick), and the daemons do not share their hwloc topology through
# one shared-memory file (concurrent writers crashed orted in hwloc_shmem_topology_write).
netns_mpirun() {
	local n=$1 yield=0
	shift
	[ "$n" -le "$(nproc)" ] || yield=1
	timeout 300 ip netns exec "$(ns_name h)" mpirun --allow-run-as-root --bind-to none -n "$n" \
		--hostfile "$STORE_ROOT/netns-hosts" --mca plm_rsh_agent "$STORE_ROOT/netns-agent.sh" \
		--mca oob_tcp_if_include "$NETNS_SUBNET.0/24" \
		--mca btl_tcp_if_include "$NETNS_SUBNET.0/24" --mca rtc ^hwloc \
		--mca mpi_yield_when_idle $yield "$@"
}
