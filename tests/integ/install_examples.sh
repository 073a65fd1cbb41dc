#!/usr/bin/env bash
# What a user does with keel: `make install` into a prefix, then build the examples
# (tools/examples/train_loop.c and .cc) with nothing but `pkg-config --cflags --libs keel`
# from that prefix, and run them with 3 ranks through the installed keel-run: once whole, once
# with rank 2 killed mid-run (the survivors must finish on 2 members with equal parameters).
# Also: every installed header compiles alone as C11 and as C++17 under -Wall -Wextra -Werror,
# a UDP-only program carries no DPDK or verbs library, and `make uninstall` removes everything.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
fail=0
require_cmd pkg-config c++
tmpdir_make tmp
prefix=$tmp/prefix

make -s install BUILD="$BUILD" PREFIX="$prefix" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "make install"; }
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs keel) || fail "pkg-config keel"
echo "install_examples: pkg-config --cflags --libs keel: $flags"

# Every header alone, as C and as C++.
for h in "$prefix"/include/keel/*.h; do
	name=keel/$(basename "$h")
	printf '#include <%s>\nint keel_header_check;\n' "$name" >"$tmp/h.c"
	cc -std=c11 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags keel) -c "$tmp/h.c" \
		-o "$tmp/h.o" 2>"$tmp/h.err" || { bad "$name does not compile as C11"; cat "$tmp/h.err"; }
	c++ -std=c++17 -Wall -Wextra -Werror -x c++ $(pkg-config --cflags keel) -c "$tmp/h.c" \
		-o "$tmp/h.o" 2>"$tmp/h.err" || { bad "$name does not compile as C++17"; cat "$tmp/h.err"; }
done

cc -std=c11 -O2 -Wall -Wextra -Werror tools/examples/train_loop.c $flags -o "$tmp/train_loop" ||
	bad "train_loop.c does not build against the installed keel"
c++ -std=c++17 -O2 -Wall -Wextra -Werror tools/examples/train_loop.cc $flags \
	-o "$tmp/train_loop_cc" || bad "train_loop.cc does not build against the installed keel"
[ $fail -eq 0 ] || exit 1
libs=$(ldd "$tmp/train_loop")
if grep -Eq 'librte_|libibverbs' <<<"$libs"; then
	bad "a UDP-only program links DPDK or verbs: $(grep -E 'librte_|libibverbs' <<<"$libs" | head -3)"
fi

# run PROGRAM STEPS EXPECT_MEMBERS [keel-run options]: every finishing rank must report the
# same parameters and the expected member count.
run() {
	local prog=$1 steps=$2 members=$3 out
	shift 3
	out=$("$prefix/bin/keel-run" -n 3 --timeout 120 "$@" -- "$prog" "$steps" 2>&1)
	local rc=$?
	local lines
	lines=$(grep " steps, " <<<"$out")
	if [ $rc -ne 0 ]; then
		bad "$(basename "$prog") $*: keel-run exited $rc"
		echo "$out" | tail -5
	elif [ "$(wc -l <<<"$lines")" -ne "$members" ] ||
		[ "$(awk '{print $NF}' <<<"$lines" | sort -u | wc -l)" -ne 1 ] ||
		[ "$(grep -c " $members members at the end" <<<"$lines")" -ne "$members" ]; then
		bad "$(basename "$prog") $*: expected $members ranks with equal parameters:"
		echo "$out" | tail -6
	else
		echo "install_examples: $(basename "$prog") $*: $members ranks agree ($(awk 'NR==1{print $NF}' <<<"$lines"))"
	fi
}
run "$tmp/train_loop" 300 3
run "$tmp/train_loop_cc" 300 3
# Long enough that the kill at 1 s lands mid-run (a step takes about 1.5 ms here: 8000 steps
# take 10 s); were a machine to finish before the kill, three ranks would report and the check
# would fail, not pass.
run "$tmp/train_loop" 8000 2 --kill 2@1
run "$tmp/train_loop_cc" 8000 2 --kill 2@1

# The CUDA device, where it was built: a C program links it with pkg-config alone (no
# libstdc++, libcudart_static inside) and, without a GPU, hears ENODEV from init.
if [ -f "$PKG_CONFIG_PATH/keel-cuda.pc" ]; then
	cat >"$tmp/cuda.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <keel/device_cuda.h>
int main(void)
{
	struct keel_device_cuda_config cfg = {.ordinal = 0};
	size_t sz = keel_device_cuda_storage_size(&cfg);
	struct keel_device dev;
	int rc = keel_device_cuda_init(&dev, calloc(1, sz), sz, &cfg);
	printf("cuda init: %s\n", keel_strerror(rc));
	dev.ops->fini(dev.state);
	return rc == 0 || rc == -ENODEV ? 0 : 1;
}
C
	if cc -std=c11 $(pkg-config --cflags keel-cuda) "$tmp/cuda.c" -o "$tmp/cuda" \
		$(pkg-config --libs keel-cuda keel) 2>"$tmp/cuda.err"; then
		"$tmp/cuda" >"$tmp/cuda.out" 2>&1 || bad "the CUDA example failed: $(cat "$tmp/cuda.out")"
		echo "install_examples: a C program links keel-cuda by pkg-config ($(cat "$tmp/cuda.out"))"
	else
		bad "a C program does not link with pkg-config keel-cuda: $(head -5 "$tmp/cuda.err")"
	fi
fi

make -s uninstall BUILD="$BUILD" PREFIX="$prefix" >/dev/null 2>&1 || bad "make uninstall failed"
left=$(find "$prefix" -type f 2>/dev/null)
[ -z "$left" ] || bad "make uninstall left files: $(head -3 <<<"$left")"

[ $fail -eq 0 ] && echo "install_examples: all passed"
exit $fail
