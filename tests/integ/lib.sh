# What every integration test shares; sourced first thing by each tests/integ/*.sh (tidy.sh
# checks that they all do), after the script's own `set` line:
#
#   set -euo pipefail            (or -uo: lib.sh never turns -e on or off)
#   . "$(dirname "$0")/lib.sh"
#
# It moves to the repository root and sets TEST (the script's name), BUILD (from the
# environment, default build) and BIN=$BUILD/bin. Then:
#   skip REASON          prints "TEST: SKIP: REASON", exits 77 (tests/run.sh: skipped)
#   fail MESSAGE         prints "TEST: FAIL: MESSAGE", exits 1
#   bad MESSAGE          prints the same, sets fail=1 and goes on (end with `exit $fail`)
#   require_cmd CMD...   skips unless each command is installed (naming its Debian package)
#   require_root [WHY]   skips unless root
#   require_digits       skips without the digits data set keel-train reads (python3-sklearn)
#   require_built PATH...  skips when an optional part was not built (keel-sim without
#                        SimGrid, the DPDK or verbs backend, ...), saying what it needs
#   must_be_built PATH...  fails (exit 1) when a part every build makes is missing
#   csv_col FILE COLUMN  the value of COLUMN in the first data row of a CSV file (keel-sim's
#                        --format csv)
#   tmpdir_make [VAR]    one temporary folder per script in $VAR (default tmp), removed at exit
#   on_exit COMMAND      runs COMMAND at exit, also on failure or a signal (last first)
#   seed_init [DEFAULT]  SEED from the environment, else DEFAULT, else drawn; prints it
#   run_ranks N SECS [keel-run options] -- PROGRAM ARGS...
#                        keel-run -n N --timeout SECS, itself bounded by SECS + 10 s
#   ns_make N [MTU]      N network namespaces on one bridge (root only; skips otherwise); see
#                        the namespace helpers below
# At exit, in this order: the on_exit commands, every background job the script started
# (SIGTERM, then SIGKILL after 3 s), the network namespaces, the temporary folder. A script
# must not set its own EXIT trap: it would replace this one (tidy.sh checks that too).
#
# Tools outside the tests (tools/bench-peers/netns.sh) may take the functions alone:
# KEEL_LIB_FUNCTIONS_ONLY=1 . tests/integ/lib.sh changes no option, folder or trap.
set -o pipefail # said here too, as every script of the tree does

TEST=$(basename "$0" .sh)
LIB_TMP=''
LIB_ON_EXIT=()

# lib.sh's own functions call these two, not skip and fail: a script may define a skip or a fail
# of its own (keel_run.sh's fail counts failures and goes on).
lib_skip() {
	echo "$TEST: SKIP: $*"
	exit 77
}
lib_fail() {
	echo "$TEST: FAIL: $*"
	exit 1
}
skip() { lib_skip "$@"; }
fail() { lib_fail "$@"; }

csv_col() {
	awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 { print $k }' "$1"
}

bad() {
	echo "$TEST: FAIL: $*"
	# shellcheck disable=SC2034 # the script's: it ends with exit $fail
	fail=1
}

# The Debian package that brings a command, for the skip message.
lib_package_of() {
	case $1 in
	ip) echo iproute2 ;;
	nm | objdump) echo binutils ;;
	gnuplot) echo gnuplot-nox ;;
	promtool | prometheus) echo prometheus ;;
	qemu-system-x86_64) echo qemu-system-x86 ;;
	c++) echo g++ ;;
	mpirun) echo openmpi-bin ;;
	*) echo "$1" ;;
	esac
}

require_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || lib_skip "$c not found (Debian package $(lib_package_of "$c"))"
	done
	return 0
}

require_root() {
	[ "$(id -u)" = 0 ] || lib_skip "needs root${1:+ ($1)}"
}

DIGITS=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
require_digits() {
	[ -f "$DIGITS" ] || lib_skip "digits data set missing (python3-sklearn)"
}

# What an optional part needs, for the skip message.
lib_built_why() {
	case $(basename "$1") in
	keel-sim) echo "SimGrid missing: install libsimgrid-dev" ;;
	libkeel_dpdk.a) echo "DPDK missing: install libdpdk-dev" ;;
	libkeel_verbs.a) echo "verbs missing: install libibverbs-dev" ;;
	libnvtx_inject.so) echo "no CUDA toolkit nvtx3 headers at build time" ;;
	*) echo "make all tests" ;;
	esac
}

lib_is_built() {
	case $1 in
	*.a | *.so | *.so.*) [ -f "$1" ] ;;
	*) [ -x "$1" ] ;;
	esac
}

require_built() {
	local p
	for p in "$@"; do
		lib_is_built "$p" || lib_skip "$p not built ($(lib_built_why "$p"))"
	done
	return 0
}

must_be_built() {
	local p
	for p in "$@"; do
		lib_is_built "$p" || lib_fail "$p missing: build first (make all tests)"
	done
	return 0
}

tmpdir_make() {
	if [ -z "$LIB_TMP" ]; then
		LIB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/keel-$TEST.XXXXXX") ||
			lib_fail "cannot make a temporary folder in ${TMPDIR:-/tmp}"
	fi
	printf -v "${1:-tmp}" '%s' "$LIB_TMP"
}

on_exit() {
	LIB_ON_EXIT+=("$1")
}

seed_init() {
	SEED=${SEED:-${1:-$(($(date +%s) % 100000))}}
	echo "SEED=$SEED"
}

run_ranks() {
	local n=$1 secs=$2
	shift 2
	timeout $((secs + 10)) "$BIN/keel-run" -n "$n" --timeout "$secs" "$@"
}

# ---- Network namespaces ----
# One namespace per rank (or other host), each with a veth pair whose other end is on a bridge
# in a namespace of its own (nothing is added to the host's own network), as hosts on one
# switch. Names carry the script's pid, so that parallel runs never share one:
#   ns_name R   the namespace of R        ns_if R    R's interface, inside its namespace
#   ns_addr R   R's IPv4 address          ns_port R  R's bridge port, in $NS_BR
#   ns_exec R CMD...  CMD in R's namespace, in the foreground (a job started in the background
#               with ip netns exec "$(ns_name R)" CMD & has CMD itself as $!, not a subshell)
#   ns_link R up|down  R's bridge port up or down (a cable pulled, put back)
# ns_make N [MTU] makes ranks 0..N-1 at $NS_NET.1..N (10.77.0.x unless NS_NET is set before);
# ns_bridge [MTU] and ns_add R ADDR make them one by one (ns_bridge returns 1 where no namespace
# can be made). Every one of them is removed at exit, or by ns_teardown.
NS_P=k$(tr -cd 'a-z' <<<"$TEST" | head -c 2)$$ # interface names stay within 15 characters
NS_BR=${NS_P}br
NS_NET=${NS_NET:-10.77.0}
NS_MTU=''
NS_MADE=()

ns_name() { echo "${NS_P}n$1"; }
ns_if() { echo "${NS_P}a$1"; }
ns_port() { echo "${NS_P}b$1"; }
ns_addr() { echo "$NS_NET.$(($1 + 1))"; }

ns_exec() {
	local r=$1
	shift
	ip netns exec "${NS_P}n$r" "$@"
}

ns_link() {
	ip -n "$NS_BR" link set "${NS_P}b$1" "$2"
}

require_netns() {
	require_root "network namespaces"
	require_cmd ip
}

ns_bridge() {
	NS_MTU=${1:-}
	ip netns add "$NS_BR" || return 1
	NS_MADE+=("$NS_BR")
	ip -n "$NS_BR" link add br0 type bridge &&
		ip -n "$NS_BR" link set br0 ${NS_MTU:+mtu "$NS_MTU"} up
}

ns_add() { # R ADDR: namespace R with ADDR/24 on its veth, the other end on the bridge
	local r=$1 addr=$2
	ip netns add "${NS_P}n$r" || return 1
	NS_MADE+=("${NS_P}n$r")
	ip link add "${NS_P}a$r" netns "${NS_P}n$r" ${NS_MTU:+mtu "$NS_MTU"} type veth \
		peer name "${NS_P}b$r" netns "$NS_BR" ${NS_MTU:+mtu "$NS_MTU"} || return 1
	ip -n "${NS_P}n$r" addr add "$addr/24" dev "${NS_P}a$r" &&
		ip -n "${NS_P}n$r" link set "${NS_P}a$r" up &&
		ip -n "${NS_P}n$r" link set lo up &&
		ip -n "$NS_BR" link set "${NS_P}b$r" master br0 &&
		ip -n "$NS_BR" link set "${NS_P}b$r" up
}

ns_make() {
	local n=$1 r
	require_netns
	ns_bridge "${2:-}" || lib_skip "cannot create network namespaces here"
	for ((r = 0; r < n; r++)); do
		ns_add "$r" "$(ns_addr "$r")" || lib_fail "cannot set up namespace $(ns_name "$r")"
	done
	return 0
}

ns_teardown() { # deleting a namespace deletes its veth ends, and their peers on the bridge
	local ns
	for ns in "${NS_MADE[@]+"${NS_MADE[@]}"}"; do ip netns del "$ns" 2>/dev/null || true; done
	NS_MADE=()
}

[ "${KEEL_LIB_FUNCTIONS_ONLY:-0}" = 1 ] && return 0

# ---- What a test script gets by sourcing this ----
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
BUILD=${BUILD:-build}
BIN=$BUILD/bin

lib_stop_jobs() {
	local pids i
	pids=$(jobs -p)
	[ -n "$pids" ] || return 0
	# shellcheck disable=SC2086 # one pid a word
	kill -TERM $pids 2>/dev/null
	for ((i = 0; i < 30; i++)); do
		[ -n "$(jobs -rp)" ] || break
		sleep 0.1
	done
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null
	wait 2>/dev/null
	return 0
}

lib_exit() {
	local rc=$? i
	# A job forked a moment ago runs this shell's traps until it execs its command: a SIGTERM
	# from lib_stop_jobs in that moment would run this in the job. The script's shell alone
	# cleans up.
	[ "$BASHPID" = "$$" ] || return "$rc"
	set +e
	for ((i = ${#LIB_ON_EXIT[@]} - 1; i >= 0; i--)); do eval "${LIB_ON_EXIT[$i]}"; done
	lib_stop_jobs
	ns_teardown
	[ -z "$LIB_TMP" ] || rm -rf "$LIB_TMP"
	exit "$rc"
}
trap lib_exit EXIT
# A signal ends the script through the EXIT trap, so that it cleans up too.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
