#!/usr/bin/env bash
# Incremental builds rebuild what a header change touches: every object the build made has its
# header dependencies known to make. Two ways to miss them, both seen: an object compiled
# without -MMD (no .d file), and a .d file make never includes (boot_verbs.o kept an old
# struct layout after a header changed, and every verbs run crashed in free()). For each object
# under $BUILD with a .d file, make's database (make -pq) must list the last header the
# compiler recorded as one of its prerequisites. Objects with hand-written prerequisites (nvcc,
# bench-peers) are listed below. Reads only; builds nothing.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
[ -d "$BUILD/obj" ] || {
	echo "deps_tracked: SKIP: nothing built in $BUILD"
	exit 77
}
# Prerequisites written out in their rules (mk/cuda.mk, mk/bench-peers.mk).
HAND_WRITTEN=" $BUILD/obj/runtime/device/cuda/reduce_kernels.o $BUILD/bench-peers/peer_common.o \
$BUILD/bench-peers/size_arg.o "
db=$(mktemp)
trap 'rm -f "$db"' EXIT
make -pq BUILD="$BUILD" >"$db" 2>/dev/null
[ -s "$db" ] || {
	echo "deps_tracked: FAIL: make -pq printed nothing"
	exit 1
}
fail=0
checked=0
while IFS= read -r o; do
	[[ $HAND_WRITTEN == *" $o "* ]] && continue
	d=${o%.o}.d
	if [ ! -f "$d" ]; then
		echo "deps_tracked: FAIL: $o has no .d file (compiled without -MMD -MP)"
		fail=1
		continue
	fi
	# the last header the compiler saw for it: "header:" lines come from -MP
	h=$(grep -E '^[^ ]+\.(h|hh|hpp):$' "$d" | tail -1 | tr -d ':')
	[ -n "$h" ] || continue # includes no header of ours
	checked=$((checked + 1))
	if ! grep -E "^$o:" "$db" | grep -qF " $h"; then
		echo "deps_tracked: FAIL: make does not know that $o depends on $h ($d is not included)"
		fail=1
	fi
done < <(find "$BUILD" -name "*.o" | sort)
[ $checked -gt 0 ] || {
	echo "deps_tracked: FAIL: no object checked"
	exit 1
}
[ $fail = 0 ] && echo "deps_tracked: $checked objects, each with its headers known to make"
exit $fail
