#!/usr/bin/env bash
# `make model-check`: the longer run of the membership model checker
# (tests/unit/test_membership_model.c; `make test` runs its bounded scenarios).
#  1. Larger bounds than make test: 4 nodes with competing coordinators, restart with a false
#     suspicion, coordinators retrying with higher ballots. Minutes, a few GB of state table.
#  2. Mutants: planted Paxos bugs in a copy of runtime/core/membership.c (and a MAC check undone
#     in auth.c), each of which the checker must report as a violation — proof that the bounded
#     search can fail.
#  3. The forger, against a job without a key, must break the promise (it is strong enough).
# Exits non-zero if a real scenario finds a violation or a mutant goes unnoticed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
MODEL=$BUILD/tests/test_membership_model
[ -x "$MODEL" ] || { echo "model-check: build first (make tests)"; exit 1; }
fail=0

# 1. NODES CRASHES RESTARTS FALSE TICKS ROUNDS DEPTH
for s in "4 0 0 2 0 1 40" "3 1 1 1 1 1 40" "3 0 0 2 0 2 40" "4 1 0 1 0 1 40"; do
	MC_STATES=${MC_STATES:-40000000} timeout "${MODEL_TIMEOUT:-1800}" "$MODEL" $s | tail -3
	rc=${PIPESTATUS[0]}
	case $rc in
	0) ;;
	2 | 124) echo "model-check: bounds $s: not finished (rc $rc: state table or time)" ;;
	*) echo "model-check: bounds $s: FAILED (rc $rc)"; fail=1 ;;
	esac
done

# 2. mutants: "what to replace|replacement|bounds that must catch it"
TMP=$(mktemp -d /tmp/keel-mutants.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
git ls-files | tar -cf - -T - | tar -xf - -C "$TMP"
cp runtime/core/*.[ch] "$TMP/runtime/core/" # uncommitted work too
cp tests/unit/test_membership_model.c "$TMP/tests/unit/"
mkdir -p "$TMP/orig"
cp runtime/core/*.c "$TMP/orig/"
while IFS='|' read -r file what with bounds why; do
	[ -n "$what" ] || continue
	cp "$TMP/orig/"*.c "$TMP/runtime/core/"
	python3 - "$TMP/runtime/core/$file" "$what" "$with" <<'PY' || { echo "model-check: mutant '$why' no longer applies"; fail=1; continue; }
import sys
p, a, b = sys.argv[1:4]
s = open(p).read()
if a not in s:
    sys.exit(1)
open(p, "w").write(s.replace(a, b, 1))
PY
	if ! make -s -C "$TMP" build/tests/test_membership_model >"$TMP/build.log" 2>&1; then
		echo "model-check: mutant '$why' does not build"; tail -3 "$TMP/build.log"; fail=1; continue
	fi
	out=$(timeout 600 "$TMP/build/tests/test_membership_model" $bounds 2>&1)
	if grep -q VIOLATION <<<"$out"; then
		echo "model-check: mutant caught: $why ($(grep -m1 VIOLATION <<<"$out" | sed 's/.*VIOLATION: //'))"
	elif grep -q 'keel: assertion failed' <<<"$out"; then
		# the runtime's own invariant checks stopped it before a wrong view was installed
		echo "model-check: mutant caught by an assertion: $why ($(grep -m1 'keel: assertion failed' <<<"$out" | sed 's/keel: assertion failed: //'))"
	else
		echo "model-check: mutant NOT caught: $why (bounds $bounds)"; fail=1
	fi
done <<'MUTANTS'
membership.c|if (n->prop_best_ballot != 0) {|if (0) {|3 1 0 1 0 1 40|a coordinator does not adopt a value already accepted
membership.c|	if (ballot < n->acc_promised) {|	if (0) {|3 0 0 2 0 1 40|an acceptor accepts below the ballot it promised
membership.c|	if (got * 2 > votes)|	if (got > 0)|3 1 0 1 0 1 40|a coordinator decides without a majority
auth.c|	if (rc != 0)|	if (rc != 0 && false)|3 1 0 1 0 1 40 2 1|a MAC that does not verify is taken (a keyed job, the forger of scenario 3-forged-commit-keyed)
MUTANTS
# 3. the forger of the keyed scenarios, against a job without a key: it must break the
#    one-view-per-epoch promise, or the keyed scenarios would prove nothing about the key
out=$(timeout 600 "$MODEL" 3 1 0 1 0 1 40 2 0 2>&1)
if grep -q VIOLATION <<<"$out"; then
	echo "model-check: without a key the forger breaks it, as it must ($(grep -m1 VIOLATION <<<"$out" | sed 's/.*VIOLATION: //'))"
else
	echo "model-check: the forger found nothing without a key: it proves nothing with one"; fail=1
fi
echo "model-check: $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
