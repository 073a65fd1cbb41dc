#!/usr/bin/env bash
# Mechanical rules, checked by a test rather than by review (cheap, and each catches a real
# fault):
#   1. functions of the library (runtime/, dpdk/, verbs/), the simulator (sim/) and the tools
#      (tools/) are at most 70 lines: a longer one hides more than one job;
#   2. only keel_ symbols leave an archive: anything else can clash with the training
#      binary's own names (every $BUILD/*.a);
#   3. every shell script runs with `set -o pipefail`: otherwise a failing producer in a
#      pipeline passes silently;
#   4. no comment names a source file that does not exist (renamed or removed);
#   5. the protocol core (runtime/core/) depends on no backend, no tool and no OS glue: it
#      includes only the public headers (no keel/transport_<backend>.h), the base helpers, its
#      own headers and pure C library headers;
#   6. every integration test (tests/integ/*.sh) sources tests/integ/lib.sh and sets no EXIT
#      trap of its own: the paths, skips and cleanup at exit are the same everywhere, and a
#      trap of its own would replace lib.sh's (its namespaces and jobs would outlive it).
# Prints every violation with its place. Exit 0 clean, 1 on any violation.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
FUNC_LINES_MAX=70
fail=0
bad() {
	echo "tidy: $*"
	fail=1
}

# 1. Function length. clang-format (tests/integ/format.sh) puts a function's braces alone at
#    column 0, so the body is what lies between them.
lib_src=$(git ls-files 'runtime/*.c' 'dpdk/*.c' 'verbs/*.c' 'sim/*.c' 'sim/*.cc' 'tools/*.c' \
	'tools/*.cc')
[ -n "$lib_src" ] || bad "no sources found (run from a git checkout)"
long=$(awk -v max=$FUNC_LINES_MAX '
	FNR == 1 { start = 0 }
	/^\{/ { start = FNR; name = prev }
	/^\}/ { if (start && FNR - start - 1 > max)
			printf "%s:%d: %d lines (max %d): %s\n", FILENAME, start, FNR - start - 1, max, name
		start = 0 }
	{ prev = $0 }' $lib_src)
[ -z "$long" ] || while IFS= read -r l; do bad "function too long: $l"; done <<<"$long"

# 2. Exported symbols.
archives=$(ls "$BUILD"/*.a 2>/dev/null)
[ -n "$archives" ] || bad "no archives in $BUILD/ (build first: make all)"
for a in $archives; do
	syms=$(nm -g --defined-only "$a" | awk 'NF == 3 && $3 !~ /^keel_/ { print $3 }') ||
		{ bad "nm failed on $a"; continue; }
	for s in $syms; do bad "$a exports '$s' (only keel_ symbols may leave an archive)"; done
done

# 3. pipefail in every shell script.
scripts=$(git ls-files '*.sh' .ci/run tests/vm/init)
for f in $scripts; do
	grep -Eq '^[[:space:]]*set -[a-z]*o pipefail' "$f" || bad "$f: no 'set -o pipefail'"
done

# 4. Comments naming files. The comment text of C sources (/* */ and //) and of shell and make
#    files (# lines); each word that looks like a source file must exist: as a path from the
#    top, from include/ or from the file's folder, or as the end of a tracked path; a bare
#    name as some tracked file's name. System headers (/usr/include) count as existing.
tracked=$(git ls-files)
sys_headers=$(cd /usr/include 2>/dev/null && find . -name '*.h' | sed 's|^\./||')
comment_text() { # file: prints "line:text" for each comment line
	case $1 in
	*.c | *.h | *.cc)
		awk '{
			line = $0; out = ""
			while (line != "") {
				if (inc) {
					e = index(line, "*/")
					if (e == 0) { out = out " " line; line = "" }
					else { out = out " " substr(line, 1, e - 1); line = substr(line, e + 2); inc = 0 }
				} else {
					s = index(line, "/*"); d = index(line, "//")
					if (d && (!s || d < s)) { out = out " " substr(line, d + 2); line = "" }
					else if (s) { line = substr(line, s + 2); inc = 1 }
					else line = ""
				}
			}
			if (out != "") print FNR ":" out
		}' "$1" ;;
	*) grep -n '^[[:space:]]*#[^!]' "$1" ;;
	esac
}
exists() { # word, file naming it
	local w=$1 dir
	dir=$(dirname "$2")
	if [[ $w == */* ]]; then
		[ -e "$w" ] || [ -e "include/$w" ] || [ -e "$dir/$w" ] ||
			grep -Fxq -- "$w" <<<"$sys_headers" || grep -q -- "/$w\$" <<<"$tracked"
	else
		grep -q -- "\(^\|/\)$w\$" <<<"$tracked" || grep -q -- "\(^\|/\)$w\$" <<<"$sys_headers"
	fi
}
for f in $(git ls-files '*.c' '*.h' '*.cc' '*.sh' '*.mk' Makefile .ci/run); do
	[ -f "$f" ] || continue
	while IFS=: read -r n text; do
		for w in $(grep -oE '[A-Za-z0-9_][A-Za-z0-9_./-]*\.(c|h|cc|sh|mk)\b' <<<"$text"); do
			w=${w#./}
			[[ ${w##*/} == *.*.* ]] && continue # a.b.c: an address or a version, not a file
			exists "$w" "$f" || bad "$f:$n: comment names '$w', which does not exist"
		done
	done < <(comment_text "$f")
done

# 5. The core's includes.
core_ok='^("keel/(checkpoint|collectives|device|errors|group|limits|metrics|node|reduce|trace|transport|types)\.h"|"(assert_int|auth_int|crc32c_int|fmt_int|text_out|node_int|reduce_int|half_int|wire_int|group_int)\.h"|<(errno|limits|stdbool|stddef|stdint|string)\.h>)$'
while IFS=: read -r f n inc; do
	inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*//; s/[[:space:]].*//' <<<"$inc")
	# libsodium, in the one file that does the cryptography
	[ "$f" = runtime/core/auth.c ] && [ "$inc" = "<sodium.h>" ] && continue
	grep -Eq "$core_ok" <<<"$inc" || bad "$f:$n: the core includes $inc (a backend, tool or OS header)"
done < <(git ls-files 'runtime/core/*.[ch]' | xargs grep -Hn '^[[:space:]]*#[[:space:]]*include')

# 6. lib.sh in every integration test; new ones too, before git knows them.
integ=0
for f in tests/integ/*.sh; do
	[ "$f" != tests/integ/lib.sh ] || continue
	integ=$((integ + 1))
	grep -Eq '^[[:space:]]*(\.|source) "\$\(dirname "\$0"\)/lib\.sh"' "$f" ||
		bad "$f: does not source lib.sh (. \"\$(dirname \"\$0\")/lib.sh\" after its set line)"
	while IFS=: read -r n _; do
		bad "$f:$n: sets an EXIT trap, which replaces lib.sh's (use on_exit)"
	done < <(grep -nE '^[^#]*\<trap\>.*[[:space:]]EXIT\>' "$f")
done

[ $fail -eq 0 ] && echo "tidy: functions <= $FUNC_LINES_MAX lines in $(wc -w <<<"$lib_src") files" \
	"of the library, sim/ and tools/; $(wc -w <<<"$archives") archives export only keel_ symbols;" \
	"$(wc -w <<<"$scripts") scripts use pipefail; comments name only existing files;" \
	"the core includes no backend, tool or OS header; $integ integration tests source lib.sh"
exit $fail
