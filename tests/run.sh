#!/usr/bin/env bash
# Runs every test keel has and prints one summary. Exit 0 only if nothing failed.
# Unit tests (CMocka) from build/ and the sanitizer build build-san/, then tests/integ/*.sh.
# A test that exits 77 was skipped: it is listed as skipped, never counted as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed=(); skipped=(); partly=()
# Each test's output is also kept, so that the end of a failed test's output is printed again
# beside the summary: a CI log that shows only its last lines still says why a test failed.
test_log=$(mktemp /tmp/keel-test.XXXXXX)
fail_tails=$(mktemp /tmp/keel-fail-tails.XXXXXX)
run() { # name, command...
	local name=$1; shift
	local t0=$SECONDS
	"$@" 2>&1 | tee "$test_log"
	local rc=${PIPESTATUS[0]}
	local dt=$((SECONDS - t0))
	if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "== PASS $name (${dt}s)"
	elif [ $rc -eq 77 ]; then skip=$((skip + 1)); skipped+=("$name"); echo "== SKIP $name"
	else
		fail=$((fail + 1)); failed+=("$name (rc $rc)"); echo "== FAIL $name (rc $rc)"
		{ echo "---- last lines of $name ----"; tail -n 40 "$test_log"; } >>"$fail_tails"
	fi
}
# A CMocka binary whose tests all pass but some were skipped (skip(): a file system without
# O_DIRECT, a model scenario too long for the sanitizers) passes, and the summary says which
# of its tests did not run.
unit_log=$(mktemp /tmp/keel-unit.XXXXXX)
trap 'rm -f "$unit_log" "$test_log" "$fail_tails"' EXIT
unit() { # binary, env...
	local t=$1
	shift
	env "$@" "$t" 2>&1 | tee "$unit_log"
	local rc=$?
	local s
	s=$(sed -n 's/^\[  SKIPPED \] \([^ ]*\)$/\1/p' "$unit_log" | sort -u | paste -sd, -)
	[ -z "$s" ] || partly+=("$(basename "$t"): $s")
	return $rc
}
only=${1:-}
for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	[ -n "$only" ] && [[ $t != *$only* ]] && continue
	run "unit/$(basename "$t")" unit "$t"
done
for t in build-san/tests/test_*; do
	[ -x "$t" ] || continue
	[ -n "$only" ] && [[ $t != *$only* ]] && continue
	run "asan+ubsan/$(basename "$t")" unit "$t" ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
done
for t in tests/integ/*.sh; do
	[ -f "$t" ] || continue
	[ "$t" != tests/integ/lib.sh ] || continue # sourced by the others, not a test
	[ -n "$only" ] && [[ $t != *$only* ]] && continue
	run "integ/$(basename "$t" .sh)" bash "$t"
done
echo
cat "$fail_tails"
echo "==================== keel test summary ===================="
echo "passed: $pass   failed: $fail   skipped: $skip"
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "  skipped: $s"; done
for s in "${partly[@]+"${partly[@]}"}"; do echo "  passed, with tests skipped inside: $s"; done
for f in "${failed[@]+"${failed[@]}"}"; do echo "  FAILED:  $f"; done
[ $fail -eq 0 ] && [ $((pass + skip)) -gt 0 ]
