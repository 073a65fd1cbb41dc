#!/usr/bin/env bash
# Incremental builds rebuild what a header change touches: every object the build made has its
# header dependencies known to make. Two ways to miss them, both seen: an object compiled
# without -MMD (no .d file), and a .d file make never includes (boot_verbs.o kept an old
# struct layout after a header changed, and every verbs run crashed in free()). For each object
# under $BUILD with a .d file, make's database (make -pq) must list the last header the
# compiler recorded as one of its prerequisites. Objects with hand-written prerequisites (nvcc,
# bench-peers) are listed below. Reads only; builds nothing.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ -d "$BUILD/obj" ] || skip "nothing built in $BUILD"
# Prerequisites written out in their rules (mk/cuda.mk, mk/bench-peers.mk).
HAND_WRITTEN=" $BUILD/obj/runtime/device/cuda/reduce_kernels.o $BUILD/bench-peers/peer_common.o \
$BUILD/bench-peers/size_arg.o "
tmpdir_make tmp
db=$tmp/make.db
make -pq BUILD="$BUILD" >"$db" 2>/dev/null
[ -s "$db" ] || fail "make -pq printed nothing"
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
[ $checked -gt 0 ] || fail "no object checked"
[ $fail = 0 ] && echo "deps_tracked: $checked objects, each with its headers known to make"
exit $fail
