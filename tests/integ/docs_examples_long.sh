#!/usr/bin/env bash
# tier: long (the docs' slow examples: keel-sim what-ifs of minutes)
# The docs' examples with the slow ones too (`<!-- docs-test: long -->` blocks): the same
# script as the fast tier's docs_examples.sh, with DOCS_TEST_LONG=1.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
DOCS_TEST_LONG=1 exec bash tests/integ/docs_examples.sh
