#!/usr/bin/env bash
# keel-bench preload: a 32 MiB file read whole through the pre-load executor with each engine
# (io_uring where the kernel allows it, then pread) prints a figure for both; a file that does
# not exist and bad arguments are refused with a line saying so. (The bytes themselves are
# checked by tests/unit/test_preload.c.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
BENCH=$BIN/keel-bench
must_be_built "$BENCH"
tmpdir_make tmp
head -c 32M /dev/urandom >"$tmp/data"
out=$("$BENCH" preload "$tmp/data" 256K 8)
echo "$out"
grep -Eq '^preload (io_uring|pread) +chunk 262144, 8 in flight: .* median [0-9]+$' <<<"$out" ||
	{ echo "preload_bench: no io_uring/pread line"; exit 1; }
grep -Eq '^preload pread +chunk 262144' <<<"$out" || { echo "preload_bench: no pread line"; exit 1; }
set +e
err=$("$BENCH" preload "$tmp/missing" 2>&1); rc=$?
bad=$("$BENCH" preload "$tmp/data" 0 2>&1); bad_rc=$?
set -e
[ "$rc" = 2 ] && grep -q 'keel-bench: preload: .*missing: No such file or directory' <<<"$err" ||
	{ echo "$err"; echo "preload_bench: a missing file was not named (rc $rc)"; exit 1; }
[ "$bad_rc" = 2 ] && grep -q "preload CHUNK: '0' is not a size in 1\.\." <<<"$bad" ||
	{ echo "$bad"; echo "preload_bench: chunk 0 was not refused (rc $bad_rc)"; exit 1; }
echo "preload_bench: passed"
