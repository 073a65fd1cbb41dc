#!/usr/bin/env bash
# Runs keel's tests in tiers and prints one summary. Exit 0 only if nothing failed.
#   tests/run.sh [--tier fast|long|all] [NAME]
#   fast (the default, `make test`): every unit test (CMocka) from build/ and the sanitizer
#        build build-san/, and the integration tests (tests/integ/*.sh) that guard a promise;
#   long (`make test-long`): the integration tests whose script says `# tier: long` (the QEMU
#        verbs VM, long simulator runs, fuzzing beyond the smoke, the model checker's larger
#        bounds and its mutants), and the unit scenarios too heavy for the sanitizers.
#   NAME runs only the tests whose path contains it, whatever their tier.
#   tests/run.sh --list prints each integration test's tier and runs nothing.
# A test that exits 77 was skipped: it is listed as skipped, never counted as passed.
# Each test's time is printed, and the tier's total at the end.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
tier=fast
if [ "${1:-}" = "--list" ]; then
	for t in tests/integ/*.sh; do
		[ "$(basename "$t")" = lib.sh ] && continue
		why=$(sed -n '1,/^[^#]/s/^# tier: long *//p' "$t")
		printf '%-5s %s %s\n' "$([ -n "$why" ] && echo long || echo fast)" "$(basename "$t" .sh)" "$why"
	done
	exit 0
fi
if [ "${1:-}" = "--tier" ]; then
	tier=${2:-}
	shift 2 || true
fi
case $tier in
fast | long | all) ;;
*)
	echo "tests/run.sh: --tier: '$tier' is not one of fast, long, all" >&2
	exit 2
	;;
esac
only=${1:-}
# The unit tests read it: a scenario that belongs to the long tier runs only there.
export KEEL_TEST_TIER=$tier
t_start=$SECONDS
pass=0; fail=0; skip=0; failed=(); skipped=(); partly=()
# Each test's output is also kept, so that the end of a failed test's output is printed again
# beside the summary: a CI log that shows only its last lines still says why a test failed.
test_log=$(mktemp /tmp/keel-test.XXXXXX)
fail_tails=$(mktemp /tmp/keel-fail-tails.XXXXXX)
unit_log=$(mktemp /tmp/keel-unit.XXXXXX)
trap 'rm -f "$unit_log" "$test_log" "$fail_tails"' EXIT
run() { # name, command...
	local name=$1; shift
	local t0=$SECONDS
	"$@" 2>&1 | tee "$test_log"
	local rc=${PIPESTATUS[0]}
	local dt=$((SECONDS - t0))
	if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "== PASS $name (${dt}s)"
	elif [ $rc -eq 77 ]; then skip=$((skip + 1)); skipped+=("$name"); echo "== SKIP $name (${dt}s)"
	else
		fail=$((fail + 1)); failed+=("$name (rc $rc)"); echo "== FAIL $name (rc $rc, ${dt}s)"
		{ echo "---- last lines of $name ----"; tail -n 40 "$test_log"; } >>"$fail_tails"
	fi
}
# A CMocka binary whose tests all pass but some were skipped (skip(): a file system without
# O_DIRECT, a model scenario left to the long tier) passes, and the summary says which of its
# tests did not run.
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
# The tier of an integration script: `# tier: long` in its opening comment, else fast.
script_tier() {
	if sed -n '1,/^[^#]/p' "$1" | grep -q '^# tier: long'; then echo long; else echo fast; fi
}
wanted() { # path, tier of the test
	if [ -n "$only" ]; then
		[[ $1 == *$only* ]]
		return
	fi
	[ "$tier" = all ] || [ "$tier" = "$2" ]
}
san_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
# Unit binaries run in the fast tier; in the long tier only those that hold long scenarios
# (with KEEL_TEST_TIER=long they run just those).
long_units="test_membership_model test_group_fail"
for t in build/tests/test_* build-san/tests/test_*; do
	[ -x "$t" ] || continue
	b=$(basename "$t")
	if [ -n "$only" ]; then
		[[ $t == *$only* ]] || continue
	elif [ "$tier" = long ]; then
		[[ " $long_units " == *" $b "* ]] || continue
	fi
	case $t in
	build-san/*) run "asan+ubsan/$b" unit "$t" "${san_env[@]}" ;;
	*) run "unit/$b" unit "$t" ;;
	esac
done
for t in tests/integ/*.sh; do
	[ -f "$t" ] || continue
	[ "$t" != tests/integ/lib.sh ] || continue # sourced by the others, not a test
	wanted "$t" "$(script_tier "$t")" || continue
	run "integ/$(basename "$t" .sh)" bash "$t"
done
elapsed=$((SECONDS - t_start))
echo
cat "$fail_tails"
echo "==================== keel test summary ($tier tier) ===================="
echo "passed: $pass   failed: $fail   skipped: $skip   time: $((elapsed / 60)) min $((elapsed % 60)) s"
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "  skipped: $s"; done
for s in "${partly[@]+"${partly[@]}"}"; do echo "  passed, with tests skipped inside: $s"; done
for f in "${failed[@]+"${failed[@]}"}"; do echo "  FAILED:  $f"; done
[ $fail -eq 0 ] && [ $((pass + skip)) -gt 0 ]
