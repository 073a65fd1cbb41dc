#!/usr/bin/env bash
# The runtime never allocates: fail if any object built from the runtime's layers (runtime/
# base, core, transport, plan, storage), verbs/ or dpdk/ references an allocator symbol. Checks
# the objects themselves, so a call hidden behind a macro or an inline helper is caught too.
# The start-up library (runtime/boot/) is exempt: it sizes and allocates the node's memory once,
# before the job runs.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
require_cmd nm
objs=$(ls "$BUILD"/obj/runtime/{base,core,transport,plan,storage}/*.o "$BUILD"/obj/verbs/*.o "$BUILD"/obj/dpdk/*.o 2>/dev/null)
[ -n "$objs" ] || fail "no runtime objects in $BUILD/obj (build first)"
bad=0
for o in $objs; do
	syms=$(nm -u "$o" | awk '{print $2}' |
		grep -E '^(malloc|calloc|realloc|free|strdup|strndup|aligned_alloc|posix_memalign|valloc|memalign|reallocarray)(@.*)?$')
	if [ -n "$syms" ]; then
		echo "no_alloc: $o references: $syms"
		bad=1
	fi
done
n=$(echo "$objs" | wc -w)
[ $bad -eq 0 ] && echo "no_alloc: $n runtime objects, no allocator references"
exit $bad
