#!/usr/bin/env bash
# Style is checked, not argued: every C file and header matches .clang-format (make format).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
require_cmd clang-format
out=$(make -s format-check 2>&1 | grep -E "warning|error" | head -20)
[ -z "$out" ] && { echo "format: clean"; exit 0; }
echo "$out"
echo "format: run 'make format'"
exit 1
