#!/usr/bin/env bash
# The KEEL_* variables have one table (runtime/boot/env_table.def) and one reader
# (runtime/boot/env.c, keel/env.h). Fails when code in runtime/ dpdk/ verbs/ sim/ tools/ reads a
# KEEL_ variable any other way, when a name read is missing from the table (or a row is read by
# nobody), when docs/reference/env.md differs from what the table prints (make env-doc), and
# when bad values given to real programs do not stop them with the table's one wording.
# Test-only harness variables (KEEL_TEST_*, KEEL_NVML_FAKE_FAIL) live in tests/ and stay
# outside the table. Expects $BUILD/bin/keel-run and keel-bench.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
KR=$BUILD/bin/keel-run
BENCH=$BUILD/bin/keel-bench
SIM=$BUILD/bin/keel-sim
TABLE=runtime/boot/env_table.def
READER=runtime/boot/env.c
DIRS=(runtime dpdk verbs sim tools)
for b in "$KR" "$BENCH"; do
	[ -x "$b" ] || { echo "env_table: $b not built (make $b); skipped"; exit 77; }
done
tmpdir_make tmp
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
src() { grep -rnE "$1" "${DIRS[@]}" --include='*.c' --include='*.h' --include='*.cc' \
	--include='*.cpp' --include='*.def' | grep -v "^$READER:"; }

# 1. No getenv of a KEEL_ name outside the reader.
if hits=$(src 'getenv[[:space:]]*\([[:space:]]*"KEEL_'); then
	fail "getenv of a KEEL_ variable outside $READER (read it with keel_env_*):"
	echo "$hits"
fi
# 2. getenv of a name held in a variable: only where it cannot be a KEEL_ one, said here.
#    runtime/boot/launch.c: env_u32 reads the launchers' RANK, WORLD_SIZE... (its sources[]).
#    tools/bench-peers/gloo_allreduce.cc: env_int reads RANK / OMPI_COMM_WORLD_RANK for Gloo.
if hits=$(src 'getenv[[:space:]]*\([[:space:]]*[^")[:space:]]' |
	grep -vE '^(runtime/boot/launch\.c|tools/bench-peers/gloo_allreduce\.cc):'); then
	fail "getenv of a computed name (a KEEL_ one must go through $READER):"
	echo "$hits"
fi
if sed -n '/sources\[\] = {/,/^};/p' runtime/boot/launch.c | grep -n 'KEEL_'; then
	fail "launch.c's launcher table names a KEEL_ variable: read it through the env table"
fi
# 3. No macro around getenv, and no KEEL_ name handed to another reader (a wrapper like the
#    old env_u64("KEEL_...")); setenv, unsetenv and keel-run's set_env_u32 write, not read.
if hits=$(src '#[[:space:]]*define[^/]*getenv'); then
	fail "a macro around getenv:"
	echo "$hits"
fi
readers='keel_env_(uint|bool|enum|text|is_set|reject|find)'
if hits=$(src '[A-Za-z_0-9]*env[A-Za-z_0-9]*[[:space:]]*\([[:space:]]*"KEEL_' |
	grep -vE "($readers|setenv|unsetenv|set_env[A-Za-z_0-9]*)[[:space:]]*\\([[:space:]]*\"KEEL_"); then
	fail "a KEEL_ variable read by something other than keel_env_*:"
	echo "$hits"
fi
# 4. Every name read is a row (else an assertion fails at run time), every row is read.
grep -rhoE "$readers[[:space:]]*\\([[:space:]]*\"KEEL_[A-Z0-9_]+\"" "${DIRS[@]}" |
	grep -oE 'KEEL_[A-Z0-9_]+' | sort -u >"$tmp/read"
grep -oE '^KEEL_ENV\(KEEL_[A-Z0-9_]+' "$TABLE" | sed 's/^KEEL_ENV(//' | sort >"$tmp/rows"
[ "$(sort -u "$tmp/rows" | wc -l)" -eq "$(wc -l <"$tmp/rows")" ] || fail "a name twice in $TABLE"
if missing=$(comm -23 "$tmp/read" "$tmp/rows") && [ -n "$missing" ]; then
	fail "read but not in $TABLE: $missing"
fi
if unread=$(comm -13 "$tmp/read" "$tmp/rows") && [ -n "$unread" ]; then
	fail "in $TABLE but read by nobody: $unread"
fi
echo "env_table: $(wc -l <"$tmp/rows") variables in the table, $(wc -l <"$tmp/read") read by name"

# 5. The reference page is the table's own print, and --help-env prints it.
"$KR" --help-env=markdown >"$tmp/env.md" || fail "keel-run --help-env=markdown exited $?"
diff -u docs/reference/env.md "$tmp/env.md" >"$tmp/diff" ||
	{ fail "docs/reference/env.md differs from the table: run make env-doc"; head -40 "$tmp/diff"; }
"$KR" --help-env >"$tmp/help" 2>&1 || fail "keel-run --help-env exited $?"
grep -q '^KEEL_HEARTBEAT_US$' "$tmp/help" && [ "$(grep -c '^KEEL_' "$tmp/help")" -eq \
	"$(wc -l <"$tmp/rows")" ] || fail "keel-run --help-env does not list every variable"
rc=0
"$KR" --help-env=html >"$tmp/help" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "keel-run --help-env=html exited $rc, expected 2"

# 6. Bad values through real programs: a failure exit and the one wording, never a default.
# bad PROGRAM-LABEL VAR=VALUE MESSAGE COMMAND...
bad() {
	local label=$1 assign=$2 want=$3 rc=0
	shift 3
	env "$assign" timeout 30 "$@" >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ] || ! grep -qF -- "$want" "$tmp/out"; then
		fail "$label with $assign exited $rc, expected a failure saying: $want"
		cat "$tmp/out"
		return
	fi
	echo "env_table: $label $assign: $(grep -F -- "$want" "$tmp/out" | head -1)"
}
one_rank=("$BENCH" allreduce -b 8 -e 8 -n 1 -w 0)
bad keel-bench KEEL_HEARTBEAT_US=abc \
	"keel-bench: KEEL_HEARTBEAT_US='abc': expected a whole number in 1..3600000000 (microseconds)" \
	"${one_rank[@]}"
bad keel-bench KEEL_MISS_LIMIT=-3 \
	"KEEL_MISS_LIMIT='-3': expected a whole number in 1..1000000 (heartbeat intervals)" \
	"${one_rank[@]}"
bad keel-bench KEEL_RENDEZVOUS_TIMEOUT_MS=3600001 \
	"KEEL_RENDEZVOUS_TIMEOUT_MS='3600001': expected a whole number in 1..3600000 (milliseconds)" \
	"${one_rank[@]}"
bad keel-bench KEEL_ALGO=fastest "KEEL_ALGO='fastest': expected auto, ring, rd or hier" \
	"${one_rank[@]}"
# read only when a verbs transport stops: checked at the start all the same
bad keel-bench KEEL_VERBS_STATS=yes "KEEL_VERBS_STATS='yes': expected 0 (off) or 1 (on)" \
	"${one_rank[@]}"
bad keel-run KEEL_PROBES=17 "KEEL_PROBES='17': expected a whole number in 0..16 (probes)" \
	"$KR" -n 2 --timeout 20 -- "${one_rank[@]}"
bad keel-run KEEL_JOB_KEY_FILE= "KEEL_JOB_KEY_FILE='': expected a path of 1..4095 bytes" \
	"$KR" -n 1 --timeout 20 -- "${one_rank[@]}"
if [ -x "$SIM" ]; then
	bad keel-sim KEEL_SIM_DEBUG=yes "keel-sim: KEEL_SIM_DEBUG='yes': expected 0 (off) or 1 (on)" \
		"$SIM" --cluster 2xH100:ib --horizon 0.1
else
	echo "env_table: keel-sim not built (SimGrid missing): its check skipped"
fi

[ "$failures" -eq 0 ] || { echo "env_table: $failures failures"; exit 1; }
echo "env_table: passed"
