#!/usr/bin/env bash
# tier: long (larger state spaces and a rebuild per mutant: many minutes)
# The membership model checker beyond `make test`'s bounded scenarios: larger bounds, the
# planted Paxos bugs it must catch, and the forger that must break a job without a key
# (tests/model/check.sh, also `make model-check`).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
[ -x "$BUILD/tests/test_membership_model" ] || {
	echo "model_check: $BUILD/tests/test_membership_model not built (CMocka missing?), skipped"
	exit 77
}
exec bash tests/model/check.sh
