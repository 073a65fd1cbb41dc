#!/usr/bin/env bash
# Runs the examples of the docs, so that they cannot drift from the code: every fenced ```sh
# block of README.md and docs/**/*.md runs, in order, in a temporary folder of its page (one
# folder per page: a block may use what an earlier block of the page made), with the build's
# tools first on PATH, HOME set to that folder and `make` meaning this checkout's Makefile.
# Fails naming file:line of each block that fails, and of each relative link to a file or a
# heading that does not exist. A ```c block with a marker
#   <!-- docs-test: file NAME -->
# right before its fence is written to the file NAME for the blocks after it (which compile and run
# it with pkg-config); other ```c blocks are fragments and are not compiled. Markers:
#   <!-- docs-test: skip (REASON) -->   never run here; printed with its reason
#   <!-- docs-test: long -->            slower than ~20 s: runs only with DOCS_TEST_LONG=1
#   <!-- docs-test: needs PROG... -->   skipped, saying so, where a program is not installed
# (an optional part: keel-sim, gnuplot, curl); several in one marker: "long; needs keel-sim".
# ```text blocks are output and are never run. The page's folder has links to this checkout's
# tools/ and sim/ (for tools/examples/, sim/examples/).
#   DOCS_TEST_LONG=1: the long blocks too; DOCS_TEST_ONLY=REGEX: only the pages it matches;
#   DOCS_TEST_VERBOSE=1: the output of the blocks that passed too
set -uo pipefail
. "$(dirname "$0")/lib.sh"
REPO=$PWD
BUILD=${BUILD:-build}
case $BUILD in
/*) BUILD_ABS=$BUILD ;;
*) BUILD_ABS=$REPO/$BUILD ;;
esac
LONG=${DOCS_TEST_LONG:-0}
ONLY=${DOCS_TEST_ONLY:-}
FAST_TIMEOUT_S=${DOCS_TEST_TIMEOUT:-90}
LONG_TIMEOUT_S=1200

[ -x "$BUILD_ABS/bin/keel-run" ] || {
	echo "docs_examples: SKIP: $BUILD/bin/keel-run not built (make all first)"
	exit 77
}

tmpdir_make work
start_s=$(date +%s)

# Every page, README first.
pages=$( {
	echo README.md
	find docs -name '*.md' | LC_ALL=C sort
} | grep -E -- "${ONLY:-.}")

# extract PAGE OUTDIR: writes OUTDIR/N (the block) and prints one line per block:
# N, line, kind (sh or c), mode (run, skip, long, file), argument, programs needed; tab-separated,
# '-' for none.
extract() {
	awk -v out="$2" '
	# Splits a marker on "; " outside parentheses (a skip reason may hold one).
	function parts_of(s, part,    n, depth, i, c, cur) {
		n = 0; depth = 0; cur = ""
		for (i = 1; i <= length(s); i++) {
			c = substr(s, i, 1)
			if (c == "(") depth++
			else if (c == ")") depth--
			if (c == ";" && depth == 0) { part[++n] = cur; cur = "" }
			else cur = cur c
		}
		part[++n] = cur
		for (i = 1; i <= n; i++) { sub(/^ +/, "", part[i]); sub(/ +$/, "", part[i]) }
		return n
	}
	function marker(s) {
		if (s !~ /^<!-- docs-test: /) return ""
		sub(/^<!-- docs-test: /, "", s); sub(/ *-->$/, "", s); return s
	}
	BEGIN { n = 0; inside = 0; prev = "" }
	{
		if (!inside && $0 ~ /^```/) {
			inside = 1; kind = substr($0, 4); m = marker(prev); take = 0
			if (kind == "sh" || (kind == "c" && m ~ /^file /)) {
				n++; take = 1; file = out "/" n; printf "" > file
				mode = "run"; arg = "-"; needs = "-"
				parts = parts_of(m, part)
				for (i = 1; i <= parts; i++) {
					p = part[i]
					if (p ~ /^skip/) { mode = "skip"; arg = p; sub(/^skip *\(?/, "", arg); sub(/\)$/, "", arg) }
					else if (p == "long") mode = "long"
					else if (p ~ /^file /) { mode = "file"; arg = substr(p, 6) }
					else if (p ~ /^needs /) needs = substr(p, 7)
					else if (p != "") { mode = "bad"; arg = p }
				}
				printf "%d\t%d\t%s\t%s\t%s\t%s\n", n, NR, kind, mode, arg, needs
			}
		} else if (inside && $0 ~ /^```/) {
			inside = 0; if (take) close(file)
		} else if (inside && take) {
			print >> file
		}
		prev = $0
	}' "$1"
}

# Links first: every relative link of a page must name a file or folder that exists, and an
# anchor (#...) a heading of the page it points at (GitHub's slugs).
links_bad=$(python3 - $pages <<'EOF'
import os, re, sys
def slugs(path):
    out, inside = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out
for page in sys.argv[1:]:
    inside = False
    for n, line in enumerate(open(page, encoding="utf-8"), 1):
        if line.startswith("```"):
            inside = not inside
        if inside:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                print(f"{page}:{n}: link to {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in slugs(full):
                print(f"{page}:{n}: link to {target}: no such heading")
EOF
)
if [ -n "$links_bad" ]; then
	sed 's/^/docs_examples: FAIL: /' <<<"$links_bad"
	links_failed=$(wc -l <<<"$links_bad")
else
	links_failed=0
fi

# The `make` of an example is this checkout's, with its build folder.
make() { command make -s -C "$REPO" BUILD="$BUILD" "$@"; }
export -f make
export REPO BUILD

failed=$links_failed ran=0 skipped=0 held=0 fragments=0
for page in $pages; do
	fragments=$((fragments + $(grep -c '^```c$' "$page")))
	dir=$work/run/$page
	blocks=$work/blocks/$page
	mkdir -p "$dir" "$blocks"
	ln -s "$REPO/tools" "$dir/tools"
	ln -s "$REPO/sim" "$dir/sim"
	while IFS=$'\t' read -r n line kind mode arg needs; do
		where=$page:$line
		case $mode in
		bad)
			echo "docs_examples: FAIL: $where: unknown marker 'docs-test: $arg'"
			failed=$((failed + 1))
			continue
			;;
		file)
			fragments=$((fragments - 1))
			cp "$blocks/$n" "$dir/$arg"
			continue
			;;
		skip)
			echo "docs_examples: skipped $where: $arg"
			skipped=$((skipped + 1))
			continue
			;;
		long)
			if [ "$LONG" != 1 ]; then
				echo "docs_examples: long, not run (DOCS_TEST_LONG=1 runs it): $where"
				held=$((held + 1))
				continue
			fi
			;;
		esac
		missing=
		[ "$needs" = - ] || for prog in $needs; do
			command -v "$prog" >/dev/null || PATH=$BUILD_ABS/bin:$PATH command -v "$prog" \
				>/dev/null || missing="$missing $prog"
		done
		if [ -n "$missing" ]; then
			echo "docs_examples: skipped $where: not installed here:$missing"
			skipped=$((skipped + 1))
			continue
		fi
		limit=$FAST_TIMEOUT_S
		[ "$mode" = long ] && limit=$LONG_TIMEOUT_S
		t0=$(date +%s.%N)
		# Its own session, so that what the block left running is ended with it.
		(cd "$dir" && HOME=$dir PATH=$BUILD_ABS/bin:$PATH exec setsid timeout -k 5 "$limit" \
			bash -e -o pipefail "$blocks/$n") >"$work/log" 2>&1 </dev/null &
		pid=$!
		wait $pid
		rc=$?
		kill -- -$pid 2>/dev/null
		took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
		ran=$((ran + 1))
		if [ $rc -ne 0 ]; then
			failed=$((failed + 1))
			echo "docs_examples: FAIL: $where (exit $rc after $took s; timeout ${limit} s):"
			sed 's/^/    | /' "$blocks/$n"
			echo "    output (last 20 lines):"
			tail -n 20 "$work/log" | sed 's/^/    > /'
		else
			echo "docs_examples: ok $where ($took s)"
			[ -z "${DOCS_TEST_VERBOSE:-}" ] || sed 's/^/    > /' "$work/log"
		fi
	done < <(extract "$page" "$blocks")
done

echo "docs_examples: $ran blocks run, $failed failed, $skipped skipped, $held long ones" \
	"not run, $fragments C fragments not compiled; $(($(date +%s) - start_s)) s"
[ $failed -eq 0 ] || exit 1
[ $ran -gt 0 ] || {
	echo "docs_examples: FAIL: no block ran"
	exit 1
}
exit 0
