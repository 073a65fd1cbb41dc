#!/usr/bin/env bash
# The man pages: `make install` into a staging folder puts keel-run(1), keel-bench(1),
# keel-train(1), keel-plan(1), keel-sim(1) and keel(7) under share/man; each renders with
# `man -l` and no warning from groff; `man keel-sim` finds its page through MANPATH; every
# option a tool's --help lists is in its page; then `make uninstall` leaves no file and no
# empty folder behind (and keeps a folder that was there before the install).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
command -v man >/dev/null && command -v groff >/dev/null ||
	{ echo "man_pages: SKIP: man or groff missing (tools/deps/core.txt: man-db, groff-base)"; exit 77; }
tmpdir_make stage
fail=0
bad() { echo "man_pages: FAIL: $*"; fail=1; }
mkdir -p "$stage/usr/local/lib" # there before the install: uninstall must keep it
make -s install BUILD="$BUILD" DESTDIR="$stage" PREFIX=/usr/local >"$stage.log" 2>&1 ||
	{ tail -20 "$stage.log"; rm -f "$stage.log"; echo "man_pages: make install failed"; exit 1; }
rm -f "$stage.log"
man_dir=$stage/usr/local/share/man
pages=(man1/keel-run.1 man1/keel-bench.1 man1/keel-train.1 man1/keel-plan.1 man1/keel-sim.1
	man7/keel.7)
for p in "${pages[@]}"; do
	f=$man_dir/$p
	[ -f "$f" ] || { bad "$p not installed"; continue; }
	LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" >"$stage/out" 2>"$stage/err"
	rc=$?
	[ $rc -eq 0 ] || bad "$p: man -l exited $rc"
	[ -s "$stage/err" ] && bad "$p: warnings: $(head -5 "$stage/err")"
	grep -q "^EXIT STATUS" "$stage/out" || bad "$p: no EXIT STATUS section"
	grep -q "^NAME" "$stage/out" || bad "$p: no NAME section"
done
found=$(MANPATH=$man_dir man -w keel-sim 2>&1)
[ "$found" = "$man_dir/man1/keel-sim.1" ] || bad "MANPATH=... man -w keel-sim: $found"
MANPATH=$man_dir MANWIDTH=80 man keel-sim 2>/dev/null | grep -q "keel-sim - run keel on a simulated" ||
	bad "man keel-sim does not show the page"
# Every long option a tool's --help names is in its page (the page may say more).
for tool in keel-run keel-bench keel-train keel-plan keel-sim; do
	[ -x "$BUILD/bin/$tool" ] || continue
	LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$man_dir/man1/$tool.1" 2>/dev/null >"$stage/page"
	for o in $("$BUILD/bin/$tool" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
		[ "$o" = --help-env ] || grep -qF -- "$o" "$stage/page" || bad "$tool.1 lacks $o"
	done
done
make -s uninstall BUILD="$BUILD" DESTDIR="$stage" PREFIX=/usr/local >/dev/null 2>&1 ||
	bad "make uninstall failed"
left=$(find "$stage" -mindepth 1 ! -path "$stage/out" ! -path "$stage/err" ! -path "$stage/page" \
	! -path "$stage/usr" ! -path "$stage/usr/local" ! -path "$stage/usr/local/lib")
[ -z "$left" ] || bad "left after make uninstall: $left"
[ -d "$stage/usr/local/lib" ] || bad "make uninstall removed a folder it did not make"
[ $fail -eq 0 ] || exit 1
echo "man_pages: ${#pages[@]} pages render without warnings; man keel-sim finds its page;" \
	"uninstall left nothing"
