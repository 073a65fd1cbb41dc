#!/usr/bin/env bash
# A smoke of every libFuzzer target (tests/fuzz/fuzz_*.c; `make fuzz` runs them for longer):
# replay its corpus in tests/fuzz/corpus/<target>/ (every input once: a crash found before
# stays fixed), then fuzz for FUZZ_SMOKE_SECONDS (default 2) on a copy of it. Skipped (77) where
# clang's libFuzzer is missing (tools/deps/fuzz.txt installs it).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SECONDS_EACH=${FUZZ_SMOKE_SECONDS:-2}
out=$(make -s fuzz-build 2>&1)
if grep -q "fuzzing needs clang" <<<"$out"; then
	skip "$out"
fi
[ -n "$out" ] && ! ls build-fuzz/fuzz_* >/dev/null 2>&1 && { echo "$out"; exit 1; }
tmpdir_make tmp
fail=0
for src in tests/fuzz/fuzz_*.c; do
	t=$(basename "$src" .c)
	corpus=tests/fuzz/corpus/$t
	[ -d "$corpus" ] || { echo "fuzz_smoke: $t has no corpus ($corpus)"; fail=1; continue; }
	n=$(ls "$corpus" | wc -l)
	if ! build-fuzz/"$t" -runs=0 "$corpus" >"$tmp/$t.replay" 2>&1; then
		echo "fuzz_smoke: $t: replaying its corpus failed:"; tail -20 "$tmp/$t.replay"; fail=1
		continue
	fi
	mkdir -p "$tmp/$t" && cp -r "$corpus"/. "$tmp/$t"/
	if ! build-fuzz/"$t" -max_total_time="$SECONDS_EACH" -max_len=4096 \
		-artifact_prefix="$tmp/" "$tmp/$t" >"$tmp/$t.run" 2>&1; then
		echo "fuzz_smoke: $t: crash found (input kept as an artifact):"; tail -30 "$tmp/$t.run"
		fail=1
		continue
	fi
	runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$tmp/$t.run")
	echo "fuzz_smoke: $t: $n corpus inputs replayed, then $runs runs in $SECONDS_EACH s, no crash"
done
exit $fail
