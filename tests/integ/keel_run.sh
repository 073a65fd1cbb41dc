#!/usr/bin/env bash
# keel-run end to end: environment of the ranks, exit status propagation, signals, timeouts,
# usage errors. Expects $BUILD/bin/keel-run (BUILD=build).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
KR=$BIN/keel-run
require_built "$KR"
tmpdir_make tmp
failures=0

fail() { # counts, and goes on (not lib.sh's fail)
	echo "FAIL: $*"
	echo "--- stdout:"; cat "$tmp/out"
	echo "--- stderr:"; cat "$tmp/err"
	failures=$((failures + 1))
}

# run EXPECTED_RC KEEL-RUN-ARGS...: runs keel-run (bounded by 30 s), output in $tmp/out, $tmp/err.
run() {
	local want=$1; shift
	local t0=$SECONDS
	timeout 30 "$KR" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	elapsed=$((SECONDS - t0))
	if [ "$rc" -ne "$want" ]; then
		fail "keel-run $* exited $rc, expected $want"
		return 1
	fi
	return 0
}

has() { # FILE PATTERN
	grep -q -e "$2" "$tmp/$1" || { fail "no '$2' in $1"; return 1; }
}

# Every rank runs, with the torchrun environment.
if run 0 -n 3 -- sh -c 'echo $RANK/$WORLD_SIZE'; then
	for r in 0 1 2; do has out "^$r/3\$" && has err "rank $r exited with status 0"; done
	[ "$(wc -l <"$tmp/out")" -eq 3 ] || fail "expected 3 lines of output"
fi
if run 0 -n 2 -- sh -c 'echo "$LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $KEEL_JOB_ID"'; then
	has out '^0 2 127\.0\.0\.1 [0-9][0-9]* [0-9][0-9]*$'
	has out '^1 2 127\.0\.0\.1 [0-9][0-9]* [0-9][0-9]*$'
	[ "$(cut -d' ' -f4,5 "$tmp/out" | sort -u | wc -l)" -eq 1 ] ||
		fail "ranks disagree on MASTER_PORT or KEEL_JOB_ID"
	job1=$(head -1 "$tmp/out" | cut -d' ' -f5)
	run 0 -n 1 -- sh -c 'echo $KEEL_JOB_ID' && [ "$(cat "$tmp/out")" != "$job1" ] ||
		fail "KEEL_JOB_ID did not change between runs"
fi
run 0 -n 1 --master-port 45678 -- sh -c 'echo $MASTER_PORT' && has out '^45678$'
run 0 --nproc=2 -- true

# A failing rank: its code is the job's, the others are stopped rather than waited for.
if run 3 -n 3 -- sh -c '[ $RANK = 1 ] && exit 3; exec sleep 30'; then
	has err "rank 1 exited with status 3"
	has err "rank 0 killed by signal 15"
	[ "$elapsed" -lt 10 ] || fail "the other ranks were not stopped (${elapsed}s)"
fi
# A rank killed by a signal: 128 + signal.
if run 137 -n 2 -- sh -c '[ $RANK = 1 ] && kill -9 $$; exec sleep 30'; then
	has err "rank 1 killed by signal 9"
fi
# --keep-going: the others finish; the first failure still decides the exit code.
if run 5 -n 3 --keep-going -- sh -c '[ $RANK = 1 ] && exit 5; sleep 0.3; echo done $RANK'; then
	has out "^done 0$" && has out "^done 2$" && has err "rank 2 exited with status 0"
fi
# A rank left out of the job's view leaves with 75 (EX_TEMPFAIL): not a failure, the others
# go on and decide the exit code; with --restart it comes back as a new incarnation.
if run 0 -n 3 -- sh -c '[ $RANK = 1 ] && exit 75; sleep 0.3; echo done $RANK'; then
	has err "rank 1 was excluded from the view and left" && has out "^done 0$" &&
		has out "^done 2$"
fi
if run 0 -n 2 --restart -- sh -c \
	'[ $RANK = 1 ] && [ $KEEL_INCARNATION = 1 ] && exit 75; echo life $RANK $KEEL_INCARNATION'; then
	has err "(excluded from the view); restarting it" && has out "^life 1 2$"
fi
# --pause: SIGSTOP then SIGCONT; the rank finishes late but finishes.
if run 0 -n 2 --pause 1@0.2:0.5 -- sh -c 'sleep 0.4; echo done $RANK'; then
	has err "pausing rank 1 for 0.5 s" && has err "resuming rank 1" && has out "^done 1$"
fi
# A paused rank is resumed when the job is stopped, so SIGTERM reaches it.
if run 124 --timeout 0.5 -n 1 --pause 0@0.1:30 -- sh -c 'trap "exit 9" TERM; sleep 30 & wait'; then
	has err "rank 0 exited with status 9"
	[ "$elapsed" -lt 5 ] || fail "a paused rank held up the stop (${elapsed}s)"
fi
# A program that does not exist.
run 127 -n 2 -- /nonexistent/program && has err "cannot run '/nonexistent/program'"

# --timeout: everything is stopped, exit 124.
if run 124 --timeout 0.5 -n 2 -- sleep 30; then
	has err "timeout"
	[ "$elapsed" -lt 5 ] || fail "--timeout took ${elapsed}s"
fi
# A rank that ignores SIGTERM gets SIGKILL after --grace.
if run 124 --timeout 0.3 --grace 0.3 -n 1 -- sh -c 'trap "" TERM; sleep 30'; then
	has err "rank 0 killed by signal 9"
	[ "$elapsed" -lt 5 ] || fail "SIGKILL escalation took ${elapsed}s"
fi

# SIGTERM to keel-run reaches every rank (and its children).
"$KR" -n 2 -- sh -c 'trap "echo term $RANK; exit 7" TERM; echo up; sleep 30 & wait' \
	>"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1 100); do [ "$(grep -c up "$tmp/out")" -eq 2 ] && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -ne 7 ]; then fail "after SIGTERM keel-run exited $rc, expected 7"; fi
has out "^term 0$" && has out "^term 1$"

# The job's key: a fresh one per job, 0600 in a 0700 directory, the same file for every rank
# and every life of a rank, removed at exit; one given to keel-run is passed on instead. Only
# where keel was built with libsodium (as the Makefile decides), else no key is made.
if pkg-config --exists libsodium 2>/dev/null; then
	show='f=$KEEL_JOB_KEY_FILE; echo "$RANK ${KEEL_INCARNATION:-} $f $(stat -c %a "$f") \
$(stat -c %a "$(dirname "$f")") $(tr -d "\n" <"$f" | wc -c) $(cat "$f")"'
	if run 0 -n 2 --restart -- sh -c "$show"'; [ $RANK = 1 ] && [ $KEEL_INCARNATION = 1 ] && exit 75; true'; then
		[ "$(cut -d' ' -f3- "$tmp/out" | sort -u | wc -l)" -eq 1 ] ||
			fail "ranks or lives got different keys"
		[ "$(wc -l <"$tmp/out")" -eq 3 ] || fail "expected 3 lives"
		has out '^0 1 /.*/keel-run\.[A-Za-z0-9]*/job\.key 600 700 64 [0-9a-f]\{64\}$'
		has out '^1 2 '
		key1=$(head -1 "$tmp/out" | cut -d' ' -f7)
		dir1=$(dirname "$(head -1 "$tmp/out" | cut -d' ' -f3)")
		[ ! -e "$dir1" ] || fail "keel-run left its key directory $dir1"
		run 0 -n 1 -- sh -c "$show" && [ "$(cut -d' ' -f7 "$tmp/out")" != "$key1" ] ||
			fail "the key did not change between jobs"
	fi
	if KEEL_JOB_KEY=$(printf '%064d' 7) run 0 -n 1 -- sh -c 'echo "${KEEL_JOB_KEY_FILE:-none} $KEEL_JOB_KEY"'; then
		has out "^none 0\{63\}7$"
	fi
	TMPDIR=/nonexistent/dir run 1 -n 1 -- true && has err "cannot make the job's key in"
	# --no-key: no key at all, not even one from keel-run's own environment
	KEEL_JOB_KEY=$(printf '%064d' 7) run 0 -n 1 --no-key -- \
		sh -c 'echo "${KEEL_JOB_KEY_FILE:-none} ${KEEL_JOB_KEY:-none}"' && has out "^none none$"
fi

# Usage errors exit 2 with a message; --help exits 0.
for args in "" "-n" "-n 0 true" "-n x true" "-n 4097 true" "-n 2" "-n 2 --bogus true" \
	"--timeout 0 -n 1 true" "--timeout -1 -n 1 true" "--master-port 70000 -n 1 true" \
	"-n 2 --pause 1@0.5 true" "-n 2 --pause 1@0.5:0 true" "-n 2 --pause 2@0.5:1 true"; do
	# shellcheck disable=SC2086
	run 2 $args && has err "keel-run: "
done
run 0 --help && has out "usage: keel-run"

if [ $failures -ne 0 ]; then
	echo "keel_run.sh: $failures failure(s)"
	exit 1
fi
echo "keel_run.sh: all passed"
