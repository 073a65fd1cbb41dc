#!/usr/bin/env bash
# --plot (issue 17): keel-sim draws a run with two failures into an SVG and a heartbeat sweep into
# a PNG, keel-train its loss and accuracy curve; each file must be what it says (well-formed SVG
# holding the plotted series, a PNG of the asked size) and come from gnuplot (gnuplot-nox). A
# bad extension, a missing gnuplot and a gnuplot that fails are refused with a clear message, a
# non-zero exit and no plot file (an older file left untouched). About 5 s.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SIM="$BIN/keel-sim" TRAIN="$BIN/keel-train"
require_cmd gnuplot
require_built "$SIM"
require_cmd python3 # checks the files
tmpdir_make tmp
# The tools' temporary folders go here, so that none left behind goes unseen.
export TMPDIR="$tmp/tmpdir"
mkdir "$TMPDIR"
fail=0
no() {
	echo "plots: FAIL: $*"
	fail=1
}
SIM_ARGS=(--cluster 4xH100:ib --horizon 1 --model 20M --batch 96 --flops-per-sample 2e11
	--fail 0.4:3 --fail 0.7:2 --seed 7)

# An SVG: well-formed XML whose root is <svg>, with a path of at least $2 points (the plotted
# series, not only axes and ticks) and each of the texts after it.
svg_check() { # file, points_min, text...
	python3 - "$@" <<'PY'
import re, sys
import xml.etree.ElementTree as ET
path, points_min, texts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
root = ET.parse(path).getroot()
ns = '{http://www.w3.org/2000/svg}'
if root.tag != ns + 'svg':
    sys.exit(f'{path}: root is {root.tag}, not <svg>')
longest = max((len(re.findall(r'-?[0-9.]+,-?[0-9.]+', p.get('d', '')))
               for p in root.iter(ns + 'path')), default=0)
if longest < points_min:
    sys.exit(f'{path}: longest path has {longest} points, expected >= {points_min}')
words = ' '.join(t for e in root.iter() for t in [e.text] if t)
missing = [t for t in texts if t not in words]
if missing:
    sys.exit(f'{path}: text missing: {missing}')
print(f'plots: {path.split("/")[-1]}: <svg>, a path of {longest} points, texts {texts}')
PY
}

# A PNG: the signature, an IHDR of width x height at least the given ones, and some size.
png_check() { # file, width_min, height_min
	python3 - "$@" <<'PY'
import struct, sys
path, w_min, h_min = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = open(path, 'rb').read()
if b[:8] != b'\x89PNG\r\n\x1a\n' or b[12:16] != b'IHDR':
    sys.exit(f'{path}: not a PNG (starts {b[:16]!r})')
w, h = struct.unpack('>II', b[16:24])
if w < w_min or h < h_min or len(b) < 10000:
    sys.exit(f'{path}: {w}x{h}, {len(b)} bytes: expected >= {w_min}x{h_min} and 10 kB')
print(f'plots: {path.split("/")[-1]}: PNG {w}x{h}, {len(b)} bytes')
PY
}

# refused: tool's output file, its stderr, a pattern it must contain, then the command.
refused() {
	local out=$1 log=$2 pattern=$3 rc=0
	shift 3
	"$@" >/dev/null 2>"$log" || rc=$?
	if [ $rc -eq 0 ]; then
		no "'$*' exited 0"
	elif [ -e "$out" ] && ! cmp -s "$out" "$tmp/old"; then
		no "'$*' left a file at $out"
	elif ! grep -q -- "$pattern" "$log"; then
		no "'$*' did not say '$pattern': $(cat "$log")"
	else
		echo "plots: refused (exit $rc): $(grep -m1 -- "$pattern" "$log")"
	fi
}

# 1. keel-sim: one run, two failures, as SVG (step panel with the failures marked, the CDF).
"$SIM" "${SIM_ARGS[@]}" --plot "$tmp/sim.svg" >"$tmp/sim.out" 2>"$tmp/sim.err" ||
	no "keel-sim --plot sim.svg exited $? ($(tail -1 "$tmp/sim.err"))"
grep -q "plot written to $tmp/sim.svg" "$tmp/sim.err" || no "keel-sim did not say where the plot is"
steps=$(awk 'NR == 2 { print $4 }' "$tmp/sim.out")
[ -f "$tmp/sim.svg" ] && svg_check "$tmp/sim.svg" "$((steps / 2))" "Step time" "failure" \
	"new view installed" "Detection times" || no "keel-sim's SVG ($steps steps simulated)"

# 2. keel-sim: a sweep over the heartbeat as PNG (three panels: 960 x 3 x 340).
"$SIM" "${SIM_ARGS[@]}" --sweep heartbeat=1ms,4ms --plot "$tmp/sweep.png" >/dev/null \
	2>"$tmp/sweep.err" || no "keel-sim --sweep --plot sweep.png exited $? ($(tail -1 "$tmp/sweep.err"))"
[ -f "$tmp/sweep.png" ] && png_check "$tmp/sweep.png" 960 1020 || no "keel-sim's PNG"

# 3. What is refused, before any simulation, and leaves no file (or the older one as it was).
refused "$tmp/x.pdf" "$tmp/e1" "unknown extension '.pdf'" "$SIM" "${SIM_ARGS[@]}" --plot "$tmp/x.pdf"
refused "$tmp/x" "$tmp/e2" "no extension" "$SIM" "${SIM_ARGS[@]}" --plot "$tmp/x"
refused "$tmp/nogp.svg" "$tmp/e3" "install gnuplot-nox" env PATH=/nonexistent \
	"$SIM" "${SIM_ARGS[@]}" --plot "$tmp/nogp.svg"
refused "$tmp/no/dir.svg" "$tmp/e4" "does not exist" "$SIM" "${SIM_ARGS[@]}" --plot "$tmp/no/dir.svg"
# A gnuplot that writes half a plot and fails: the plot file keeps its old contents.
mkdir "$tmp/bin"
printf '#!/bin/sh\necho "<svg partial" >plot.svg\necho "gnuplot: pretend failure" >&2\nexit 1\n' \
	>"$tmp/bin/gnuplot"
chmod +x "$tmp/bin/gnuplot"
echo "an older plot" >"$tmp/old"
cp "$tmp/old" "$tmp/kept.svg"
refused "$tmp/kept.svg" "$tmp/e5" "gnuplot failed" env PATH="$tmp/bin:$PATH" \
	"$SIM" "${SIM_ARGS[@]}" --plot "$tmp/kept.svg"
cmp -s "$tmp/old" "$tmp/kept.svg" || no "a failed gnuplot changed the older plot file"
left=$(find "$TMPDIR" -mindepth 1 | wc -l)
[ "$left" -eq 0 ] || no "$left files or folders left in the temporary folder: $(ls "$TMPDIR")"

# 4. keel-train: 2 ranks, 6 epochs; the leader draws loss and accuracy.
if [ ! -f "$DIGITS" ] || [ ! -x "$TRAIN" ]; then
	echo "plots: keel-train part skipped (digits data set: python3-sklearn; or keel-train not built)"
	[ $fail -eq 0 ] && exit 77
	exit 1
fi
refused "$tmp/t.jpg" "$tmp/e6" "unknown extension '.jpg'" "$TRAIN" --plot "$tmp/t.jpg"
refused "$tmp/t.svg" "$tmp/e7" "install gnuplot-nox" env PATH=/nonexistent "$TRAIN" --plot "$tmp/t.svg"
KEEL_HEARTBEAT_US=10000 run_ranks 2 50 -- "$TRAIN" --epochs 6 --quiet \
	--no-reference --plot "$tmp/train.svg" >"$tmp/train.log" 2>&1 ||
	no "keel-train --plot exited $? ($(tail -3 "$tmp/train.log"))"
grep -q "plot written to $tmp/train.svg" "$tmp/train.log" || no "keel-train did not say where the plot is"
[ -f "$tmp/train.svg" ] && svg_check "$tmp/train.svg" 6 "training loss" "test accuracy" ||
	no "keel-train's SVG"

[ $fail -eq 0 ] && echo "plots: ok"
exit $fail
