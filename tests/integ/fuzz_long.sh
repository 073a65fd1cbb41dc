#!/usr/bin/env bash
# tier: long (every fuzz target for 30 s: about 5 minutes)
# Fuzzing beyond the smoke: every libFuzzer target replays its corpus, then fuzzes for
# FUZZ_LONG_SECONDS (default 30; `make fuzz` runs each for a minute) on a copy of it,
# through the smoke's own script (tests/integ/fuzz_smoke.sh: 2 s a target in `make test`). A crash keeps its input
# as an artifact and fails the test. Skipped (77) where clang's libFuzzer is missing.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
FUZZ_SMOKE_SECONDS=${FUZZ_LONG_SECONDS:-30} exec bash tests/integ/fuzz_smoke.sh
