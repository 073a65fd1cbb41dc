#!/usr/bin/env bash
# keel-train with the same seed and no failure on 1, 2 and 4 ranks: the final weights must be
# identical up to floating-point reduction order. Gradients are summed in f64 and weights kept
# in f32, so the tolerance is 1e-6 (max abs difference); in practice they are bit-identical.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
require_digits
tmpdir_make tmp
for n in 1 2 4; do
	run_ranks $n 50 -- "$TRAIN" --epochs 8 --quiet --no-reference \
		--dump-weights "$tmp/w$n.bin" >"$tmp/log$n" 2>&1 || { cat "$tmp/log$n"; exit 1; }
done
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
w = {n: struct.unpack('%df' % 2410, open(f'{d}/w{n}.bin', 'rb').read()) for n in (1, 2, 4)}
worst = max(abs(a - b) for n in (2, 4) for a, b in zip(w[1], w[n]))
print(f'train_ranks: max |w(1 rank) - w(2 or 4 ranks)| = {worst:.3g} (tolerance 1e-6)')
sys.exit(0 if worst <= 1e-6 else 1)
PY
