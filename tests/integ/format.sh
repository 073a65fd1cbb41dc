#!/usr/bin/env bash
# Style is checked, not argued: every C file and header matches .clang-format (make format).
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "format: clang-format not installed, skipped"; exit 77; }
out=$(make -s format-check 2>&1 | grep -E "warning|error" | head -20)
[ -z "$out" ] && { echo "format: clean"; exit 0; }
echo "$out"
echo "format: run 'make format'"
exit 1
