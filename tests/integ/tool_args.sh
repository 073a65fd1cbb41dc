#!/usr/bin/env bash
# The five tools' command lines (tools/common/cli.c): a table of bad inputs, each answered with
# exit 2 and a message on stderr that starts with the tool's name and names the option (and
# says "unknown option" for an unknown one), nothing on stdout; --help/-h on stdout with exit 0
# and the exit codes; --version as "TOOL (keel) X.Y.Z (git HASH)" with exit 0. keel-sim is built
# only with SimGrid: its rows are skipped, and say so, when it is absent.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=$BUILD/bin
for t in keel-run keel-bench keel-train keel-plan; do
	[ -x "$BIN/$t" ] || { echo "tool_args: $BIN/$t not built (make all)"; exit 1; }
done
tmpdir_make tmp
EX=tools/examples
fail=0 rows=0 skipped=0
bad() { echo "tool_args: FAIL: $*"; fail=1; }

# bad TOOL WANT ARGS...: exit 2, stderr "TOOL: ..." containing WANT, stdout empty.
reject() {
	local tool=$1 want=$2
	shift 2
	if [ ! -x "$BIN/$tool" ]; then
		skipped=$((skipped + 1))
		return
	fi
	rows=$((rows + 1))
	"$BIN/$tool" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	local rc=$?
	local what="$tool $*"
	[ $rc -eq 2 ] || bad "$what: exit $rc, not 2 ($(head -c 200 "$tmp/err"))"
	[ -s "$tmp/out" ] && bad "$what: wrote to stdout: $(head -c 200 "$tmp/out")"
	head -n 1 "$tmp/err" | grep -q "^$tool: " || bad "$what: stderr does not start with '$tool: '"
	grep -qF -- "$want" "$tmp/err" || bad "$what: stderr lacks \"$want\": $(cat "$tmp/err")"
}
unknown() { # TOOL OPTION [ARGS...]: the option named as unknown
	local tool=$1 opt=$2
	shift 2
	reject "$tool" "unknown option '$opt' (see '$tool --help')" "$@"
}

# keel-run (a missing PROGRAM is a rank's exit 127, like env(1), not a usage error)
unknown keel-run --bogus --bogus
unknown keel-run --bogus --bogus 3 true
reject keel-run "-n: '-1' is not a whole number in 1.." -n -1 true
reject keel-run "-n: '0' is not a whole number in 1.." -n 0 true
reject keel-run "--nproc: 'abc' is not a whole number" --nproc abc true
reject keel-run "-n: '99999' is not a whole number in 1..4096" -n 99999 true
reject keel-run "--master-port: '70000' is not a whole number in 1..65535" -n 1 --master-port 70000 true
reject keel-run "--timeout: 'abc' is not a number in" -n 1 --timeout abc true
reject keel-run "--timeout: '-1' is not a number in" -n 1 --timeout -1 true
reject keel-run "--grace: '0' is not a number in" -n 1 --grace 0 true
reject keel-run "--kill: '1@x' is not RANK@SECONDS" -n 2 --kill 1@x true
reject keel-run "-n needs a value" -n
reject keel-run "--timeout needs a value" -n 1 --timeout

# keel-bench
unknown keel-bench --bogus allreduce --bogus
unknown keel-bench --bogus allreduce --bogus 3
unknown keel-bench --bogus --bogus
reject keel-bench "-n: '-1' is not a whole number in 1.." allreduce -n -1
reject keel-bench "--iters: '0' is not a whole number in 1.." allreduce --iters 0
reject keel-bench "--iters: 'abc' is not a whole number" allreduce --iters abc
reject keel-bench "--warmup-ms: '700000' is not a whole number in 0..600000" allreduce --warmup-ms 700000
reject keel-bench "-b: '-8' is not a size in 0.." allreduce -b -8
reject keel-bench "--maxbytes: '0' is not a size in 1.." allreduce --maxbytes 0
reject keel-bench "--seconds: '0' is not a number in 0.001..86400" heartbeat --seconds 0
reject keel-bench "--iters needs a value" allreduce --iters
reject keel-bench "preload: $tmp/missing: No such file or directory" preload "$tmp/missing"
reject keel-bench "preload CHUNK: '0' is not a size in 1.." preload /dev/null 0
unknown keel-bench --bogus all_gather --bogus
reject keel-bench "unknown command 'allgather'" allgather
reject keel-bench "--op: all_gather reduces nothing" all_gather --op max
reject keel-bench "--root: reduce_scatter has no root" reduce_scatter --root 1
reject keel-bench "--device, --grad and --register are for allreduce without --group" alltoall --device cpu
reject keel-bench "--device, --grad and --register are for allreduce without --group" allreduce --group 2 --grad
reject keel-bench "--group 1: sendrecv needs two members" sendrecv --group 1
reject keel-bench "--group and --root are for the tables" heartbeat --group 2
reject keel-bench "--group: '0' is not a whole number in 1..4096" all_gather --group 0
reject keel-bench "-r: '5000' is not a whole number in 0..4095" reduce -r 5000
unknown keel-bench --bogus failover --bogus 3
reject keel-bench "--ranks: '2' is not a whole number in 3..64" failover --ranks 2
reject keel-bench "--trials: '-5' is not a whole number in 1.." failover --trials -5

# keel-train
unknown keel-train --bogus --bogus
unknown keel-train --bogus --bogus 3
reject keel-train "--epochs: '-1' is not a whole number in 1..100000" --epochs -1
reject keel-train "--batch: '0' is not a whole number in 1.." --batch 0
reject keel-train "--lr: 'abc' is not a number in" --lr abc
reject keel-train "--lr: '0' is not a number in" --lr 0
reject keel-train "--epochs: '100001' is not a whole number in 1..100000" --epochs 100001
reject keel-train "--compute-us: '-3' is not a number in 0..1000000" --compute-us -3
reject keel-train "--crash-at: '1x@3' is not RANK@STEP" --crash-at 1x@3
reject keel-train "--epochs needs a value" --epochs
# the whole range of a u64: "-1" must not wrap to 2^64-1 (the --epochs 0 after it is never read)
reject keel-train "--seed: '-1' is not a whole number in 0..18446744073709551615" --seed -1 --epochs 0
reject keel-train "--data: $tmp/missing: No such file or directory" --data "$tmp/missing"
reject keel-train "--tp: '0' is not a whole number in 1..32" --tp 0
reject keel-train "--tp: '64' is not a whole number in 1..32" --tp 64
reject keel-train "--tp: 3 does not divide the hidden layer's 32 units" --tp 3
reject keel-train "--dp: '0' is not a whole number in 1..64" --dp 0
reject keel-train "--tp 2: --compress works with --tp 1 only" --tp 2 --compress
reject keel-train "--tp 2: --shards works with --tp 1 only" --tp 2 --shards "$tmp/s"
reject keel-train "--tp 4: --slow works with --tp 1 only" --tp 4 --slow 1:2
# against the job's size (alone: 1 rank), after start-up
reject keel-train "--tp 2: 1 rank does not make whole replicas of 2" --tp 2
reject keel-train "--dp 2: 1 rank at --tp 1 makes 1 replica, not 2" --dp 2

# keel-plan (the missing file before "nothing to place")
unknown keel-plan --bogus --bogus
unknown keel-plan --bogus --bogus 3
reject keel-plan "--runs: '-1' is not a whole number in 1..64" --bench --runs -1
reject keel-plan "--runs: '0' is not a whole number in 1..64" --bench --runs 0
reject keel-plan "--runs: 'abc' is not a whole number in 1..64" --bench --runs abc
reject keel-plan "--runs: '65' is not a whole number in 1..64" --bench --runs 65
reject keel-plan "--cluster needs a value" --cluster
reject keel-plan "--cluster: $tmp/missing: No such file or directory" --cluster "$tmp/missing"
reject keel-plan "--workload: $tmp/missing: No such file or directory" \
	--cluster $EX/mixed24.cluster --workload "$tmp/missing"
reject keel-plan "--mode fastest: expected lpt" --mode fastest --cluster $EX/mixed24.cluster

# keel-sim
unknown keel-sim --bogus --bogus
unknown keel-sim --bogus --bogus 3
reject keel-sim "--horizon: '-1' is not a number in 0.001.." --horizon -1
reject keel-sim "--batch: '0' is not a whole number in 1.." --batch 0
reject keel-sim "--mfu: 'abc' is not a number in 0.001..1" --mfu abc
reject keel-sim "--mtu: '70000' is not a whole number in 256..65507" --mtu 70000
reject keel-sim "--batch: '1.5' is not a whole number" --batch 1.5
reject keel-sim "--sweep batch: 'x' is not a whole number" --sweep batch=4,x
reject keel-sim "--horizon needs a value" --horizon
reject keel-sim "--platform: $tmp/missing: No such file or directory" --platform "$tmp/missing"
reject keel-sim "--scenario: $tmp/missing: No such file or directory" --scenario "$tmp/missing"
reject keel-sim "--mode: bad value 'x'" --mode x

# --help and -h: usage on stdout, exit 0, the exit codes at the end; --version.
version=$(sed -n 's/^#define KEEL_VERSION[ \t]*"\(.*\)"/\1/p' include/keel/version.h)
for cmd in keel-run keel-bench keel-train keel-plan keel-sim "keel-bench failover" \
	"keel-bench preload" "keel-bench allreduce" "keel-bench sendrecv"; do
	tool=${cmd%% *}
	[ -x "$BIN/$tool" ] || continue
	for h in --help -h; do
		rows=$((rows + 1))
		# shellcheck disable=SC2086 # the subcommand is a word of its own
		$BIN/$cmd $h >"$tmp/out" 2>"$tmp/err"
		rc=$?
		[ $rc -eq 0 ] || bad "$cmd $h: exit $rc"
		[ -s "$tmp/err" ] && bad "$cmd $h: wrote to stderr: $(head -c 200 "$tmp/err")"
		grep -q "^usage: " "$tmp/out" || bad "$cmd $h: no usage line on stdout"
		grep -q "^Exit status:" "$tmp/out" && grep -q "^  2   usage error" "$tmp/out" ||
			bad "$cmd $h: no exit codes"
	done
done
for tool in keel-run keel-bench keel-train keel-plan keel-sim; do
	[ -x "$BIN/$tool" ] || continue
	rows=$((rows + 1))
	out=$("$BIN/$tool" --version 2>"$tmp/err")
	rc=$?
	[ $rc -eq 0 ] && [ ! -s "$tmp/err" ] || bad "$tool --version: exit $rc, stderr $(cat "$tmp/err")"
	grep -Eq "^$tool \(keel\) ${version//./\\.} \(git ([0-9a-f]{7,}|unknown)\)\$" <<<"$out" ||
		bad "$tool --version: '$out'"
done
[ -x "$BIN/keel-sim" ] ||
	echo "tool_args: keel-sim not built (no SimGrid): its $skipped rows skipped"
if [ -x "$BIN/keel-sim" ]; then
	rows=$((rows + 1))
	out=$("$BIN/keel-sim" --list-models 2>"$tmp/err")
	rc=$?
	[ $rc -eq 0 ] && grep -q '^  H100 ' <<<"$out" && grep -q -- '--model PARAMS' <<<"$out" ||
		bad "keel-sim --list-models: exit $rc: $(head -3 <<<"$out")"
fi
[ $fail -eq 0 ] || exit 1
echo "tool_args: $rows rows passed"
