#!/usr/bin/env bash
# Checks that the reduce kernels (runtime/core/reduce.c) compile to packed SIMD code with the
# project's release flags: every kernel loop is reported vectorized by gcc, and the kernels'
# disassembly holds the packed instructions we expect (addps, addpd, pmaxsd, ...).
# Exit 0 on pass, 1 on fail (with what is missing), 77 when the tools or target are absent.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

CC=${CC:-cc}
SRC=runtime/core/reduce.c
# Same as the Makefile's release build (CFLAGS_KEEL with OPT=-O2).
FLAGS=(-std=c11 -D_GNU_SOURCE -O2 -march=x86-64-v2 -fno-strict-aliasing -Iinclude -Iruntime/base)

fail=0

require_cmd objdump "$CC"
[ "$(uname -m)" = x86_64 ] || skip "the expected instructions are x86-64 ones; host is $(uname -m)"
[ -f "$SRC" ] || { echo "vectorized: FAIL: $SRC missing"; exit 1; }

tmpdir_make tmp

# 1. The compiler's own report: each kernel-defining macro line must say "loop vectorized".
#    (gcc attributes a loop expanded from a macro to the line that invokes the macro.)
if "$CC" "${FLAGS[@]}" -fopt-info-vec-optimized="$tmp/vec.txt" -c "$SRC" -o "$tmp/reduce.o" \
	2>"$tmp/cc.err"; then
	kernels=0
	while IFS=: read -r line text; do
		kernels=$((kernels + 1))
		name=$(sed -E 's/^[A-Z_]+\(([a-z0-9_]+),.*/\1/' <<<"$text")
		grep -qE "^$SRC:$line:[0-9]+: (optimized|note): loop vectorized" "$tmp/vec.txt" ||
			bad "$name ($SRC:$line) was not vectorized"
	done < <(grep -nE '^DEFINE_[A-Z_]*KERNEL\(' "$SRC")
	[ "$kernels" -ge 28 ] || bad "found only $kernels kernel definitions in $SRC (expected >= 28)"
	echo "vectorized: $kernels kernel loops checked in the -fopt-info-vec report"
elif "$CC" "${FLAGS[@]}" -c "$SRC" -o "$tmp/reduce.o" 2>"$tmp/cc.err"; then
	echo "vectorized: note: $CC has no -fopt-info-vec-optimized; checking the disassembly only"
else
	cat "$tmp/cc.err"
	echo "vectorized: FAIL: $SRC does not compile"
	exit 1
fi

# 2. The disassembly. Kernels are found by name prefix, so target_clones suffixes and helpers
#    (f32_sum.default, f32_sum.avx2.0, f16_sum_words, ...) all count; a kernel that cannot be
#    found by name is checked against the whole object instead.
objdump -d --no-show-raw-insn "$tmp/reduce.o" >"$tmp/dis.txt" || {
	echo "vectorized: FAIL: objdump failed"
	exit 1
}
# Print the mnemonics of every function whose symbol is NAME, NAME.<suffix> or NAME_<suffix>.
mnemonics() {
	awk -v want="$1" '
		/^[0-9a-f]+ <.*>:$/ {
			sym = substr($2, 2, length($2) - 3)
			keep = (sym == want || index(sym, want ".") == 1 || index(sym, want "_") == 1)
			found += keep
			next
		}
		keep && /\t/ { n = split($0, f, "\t"); split(f[n], w, " "); print w[1] }
		END { if (!found) exit 3 }' "$tmp/dis.txt"
}
# check NAME REGEX WHAT: some instruction of kernel NAME matches REGEX.
check() {
	local name=$1 re=$2 what=$3 ops
	if ops=$(mnemonics "$name"); then
		grep -qxE "$re" <<<"$ops" || bad "$name has no $what (wanted /$re/)"
	else
		echo "vectorized: note: no symbol $name; looking for $what in the whole object"
		awk -F'\t' 'NF >= 2 { split($NF, w, " "); print w[1] }' "$tmp/dis.txt" |
			grep -qxE "$re" || bad "no $what anywhere in reduce.o (wanted /$re/)"
	fi
}

check f32_sum 'v?addps' "packed f32 add"
check f32_prod 'v?mulps' "packed f32 multiply"
check f64_sum 'v?addpd' "packed f64 add"
check f64_prod 'v?mulpd' "packed f64 multiply"
check i32_sum 'v?paddd' "packed i32 add"
check i32_prod 'v?pmulld' "packed i32 multiply"
check i32_max 'v?pmaxsd' "packed signed i32 max"
check i32_min 'v?pminsd' "packed signed i32 min"
check u8_max 'v?pmaxub' "packed u8 max"
check u8_sum 'v?paddb' "packed u8 add"
check i64_sum 'v?paddq' "packed i64 add"
check i64_max 'v?pcmpgtq' "packed i64 compare"
check f32_max 'v?pcmpgtd' "packed i32 compare of the f32 order keys"
check f32_max 'v?(pblendvb|blendvps)' "packed blend"
check f64_max 'v?pcmpgtq' "packed i64 compare of the f64 order keys"
check f16_sum 'v?cvtdq2ps' "packed int-to-float (f16 subnormal widening)"
check f16_sum 'v?addps' "packed f32 add"
check bf16_sum 'v?pslld' "packed widening shift from 16 bits"
check bf16_sum 'v?addps' "packed f32 add"
check f32_div 'v?divps' "packed f32 divide"
check i32_div 'v?divpd' "packed f64 divide"

if [ $fail -ne 0 ]; then
	echo "vectorized: FAIL: reduce kernels are not (all) vectorized with ${FLAGS[*]}"
	exit 1
fi
echo "vectorized: PASS: packed SIMD found in every checked reduce kernel"
exit 0
