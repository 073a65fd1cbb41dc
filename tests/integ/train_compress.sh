#!/usr/bin/env bash
# keel-train --compress on 4 ranks: gradients through keel's gradient AllReduce, sent as bf16
# with error feedback when KEEL_COMPRESS=bf16 forces it on (the ring: KEEL_ALGO=ring, since
# keel-train's 10 KiB vector would otherwise go by recursive doubling, which never compresses).
#  1. Same seed, compression off and forced on: the final accuracies within 0.5 points, about
#     half the bytes sent, and nothing compressed when off.
#  2. Forced on, rank 2 SIGKILLed and restarted: its new life joins with no feedback memory
#     (f32) beside the ranks that compress; every rank finishes, within 1 point.
#  3. --compress with a batch too large for bf16's exact integers is refused by name.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
require_digits
tmpdir_make tmp
export KEEL_ALGO=ring

for mode in off bf16; do
	KEEL_COMPRESS=$mode run_ranks 4 50 -- "$TRAIN" --epochs 20 \
		--compress --quiet >"$tmp/$mode" 2>&1 || { cat "$tmp/$mode"; fail "KEEL_COMPRESS=$mode failed"; }
done
acc() { grep -o 'final test accuracy: *[0-9.]*' "$1" | grep -o '[0-9.]*$'; }
sent() { grep -o 'compression (rank 0): .* bytes sent' "$1" | grep -o '[0-9]* bytes sent' | cut -d' ' -f1; }
frags() { grep -o 'compression (rank 0): [0-9]* fragments' "$1" | grep -o '[0-9]* fragments' | cut -d' ' -f1; }
a_off=$(acc "$tmp/off"); a_bf=$(acc "$tmp/bf16")
[ -n "$a_off" ] && [ -n "$a_bf" ] || fail "no final accuracy in the logs"
awk -v a="$a_off" -v b="$a_bf" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.5) }' ||
	fail "accuracy off $a_off %, bf16 $a_bf %: more than 0.5 points apart"
[ "$(frags "$tmp/off")" -eq 0 ] || fail "compression off, yet fragments were compressed"
[ "$(frags "$tmp/bf16")" -gt 0 ] || fail "KEEL_COMPRESS=bf16 compressed nothing"
awk -v a="$(sent "$tmp/off")" -v b="$(sent "$tmp/bf16")" 'BEGIN { exit !(b < 0.6 * a) }' ||
	fail "bytes sent: off $(sent "$tmp/off"), bf16 $(sent "$tmp/bf16"): not about half"
echo "train_compress: accuracy off $a_off %, bf16 $a_bf %; rank 0 sent $(sent "$tmp/off") bytes off, $(sent "$tmp/bf16") with bf16"

KEEL_COMPRESS=bf16 KEEL_HEARTBEAT_US=10000 run_ranks 4 80 --restart \
	--kill 2@1.0 -- "$TRAIN" --epochs 80 --batch 8 --lr 0.1 --compress --quiet >"$tmp/kill" 2>&1
rc=$?
grep -v '^epoch' "$tmp/kill" | grep -v warning
[ $rc -eq 0 ] || fail "bf16 with rank 2 killed: keel-run failed (rc $rc)"
grep -q 'within 1 point' "$tmp/kill" || fail "bf16 with rank 2 killed: accuracy not within 1 point"
grep -q 'rank 2 (restarted' "$tmp/kill" || fail "rank 2 did not come back"
echo "train_compress: bf16 with rank 2 killed and restarted: every rank finished, within 1 point"

"$TRAIN" --compress --batch 300 >"$tmp/big" 2>&1
[ $? -eq 2 ] && grep -q -- "--batch: 300 is more than 256 with --compress" "$tmp/big" ||
	{ cat "$tmp/big"; fail "--compress --batch 300 was not refused"; }
echo "train_compress: ok"
