#!/usr/bin/env bash
# tier: long (18 paused-rank trials: about three minutes)
# pause_trials.sh with 6 trials per world size (3, 4 and 5 ranks) where make test runs one:
# more pause lengths, moments and paused ranks drawn from the seed it prints.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRIALS=${TRIALS:-6} exec bash tests/integ/pause_trials.sh
