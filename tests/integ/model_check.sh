#!/usr/bin/env bash
# tier: long (larger state spaces, 4 minutes each at most, and a rebuild per mutant)
# The membership model checker beyond `make test`'s bounded scenarios: larger bounds, the
# planted Paxos bugs it must catch, and the forger that must break a job without a key
# (tests/model/check.sh, also `make model-check`). Each larger bound explores for at most
# MODEL_TIMEOUT seconds (240 here, to fit CI's slow tier; `make model-check` gives each 30
# minutes): one that has not finished by then is reported as not finished, not as a failure.
# The mutants must be caught every time.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ -x "$BUILD/tests/test_membership_model" ] || {
	echo "model_check: $BUILD/tests/test_membership_model not built (CMocka missing?), skipped"
	exit 77
}
MODEL_TIMEOUT=${MODEL_TIMEOUT:-240} exec bash tests/model/check.sh
