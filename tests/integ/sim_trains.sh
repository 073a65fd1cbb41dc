#!/usr/bin/env bash
# keel-sim --trains N sends the bulk datagrams one rank sends another in one burst as one
# SimGrid message (issue 20 item 5): heartbeats, acks and views stay one message each.
# Against per-datagram runs (--trains 1) of the same scenarios, in full fidelity: the same
# steps within 2 %, the step time within 2 %, the same views and failures, no false
# suspicion, detection of each failure to 2 ns (the clock is a double), every AllReduce exact;
# and the trains must carry the data in fewer SimGrid messages. Scenarios: a mixed cluster
# losing one GPU, one where rank 0's GPU fails, then two GPUs at once, and a rank paused past
# the detector (SIGSTOP's model). Under loss the two runs drop different datagrams (the same
# draws land on a different order), so a lossy run is not compared to the nanosecond. About 20 s.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
require_built "$SIM"
require_cmd python3
tmpdir_make tmp
fail=0
no() {
	echo "sim_trains: FAIL: $*"
	fail=1
}
seed_init 3

# NAME ARGS...: the scenario per datagram and in trains
compare() {
	local name=$1 t
	shift
	for t in 1 64; do
		"$SIM" "$@" --seed "$SEED" --fidelity full --trains $t --format json \
			>"$tmp/$name.$t.json" 2>"$tmp/$name.$t.err" ||
			{ no "$name: --trains $t exited $?"; return; }
		grep -h "SimGrid messages" "$tmp/$name.$t.err" | sed "s/^/  trains $t: /"
	done
	python3 - "$tmp/$name.1.json" "$tmp/$name.64.json" "$name" "$tmp/$name.1.err" \
		"$tmp/$name.64.err" <<'EOF' || fail=1
import json, re, sys
one, train = (json.load(open(p))[0] for p in sys.argv[1:3])
name = sys.argv[3]
comms = [int(re.search(r"in (\d+) SimGrid messages", open(p).read()).group(1))
         for p in sys.argv[4:6]]
bad = []
def within(what, t, o, rel, absolute=0.0):
    if abs(t - o) > rel * abs(o) + absolute:
        bad.append(f"{what}: trains {t:.9g} against per datagram {o:.9g}")
if one["steps"] < 10:
    bad.append(f"too few steps to compare ({one['steps']})")
within("steps", train["steps"], one["steps"], 0.02)
within("step time", train["step_s"], one["step_s"], 0.02)
for k in ("view_epochs", "views_agree", "false_suspicions", "failures"):
    if train[k] != one[k]:
        bad.append(f"{k}: trains {train[k]} against per datagram {one[k]}")
if one["false_suspicions"] != 0 or not one["views_agree"]:
    bad.append("the per-datagram run itself has false suspicions or disagreeing views")
if train["allreduce"]["wrong"] or one["allreduce"]["wrong"]:
    bad.append("wrong AllReduce results")
for i, (o, t) in enumerate(zip(one["failure_list"], train["failure_list"]), 1):
    within(f"failure {i} detection", t["detect_s"], o["detect_s"], 0, 2e-9)
if not comms[1] < comms[0]:
    bad.append(f"trains did not cut SimGrid messages: {comms[1]} against {comms[0]}")
print(f"sim_trains: {name}: steps {one['steps']}/{train['steps']}, step "
      f"{one['step_s']:.6f}/{train['step_s']:.6f} s, SimGrid messages {comms[0]}/{comms[1]} "
      "(per datagram/trains)")
for b in bad:
    print(f"sim_trains: FAIL: {name}: {b}")
sys.exit(1 if bad else 0)
EOF
}

compare mixed --cluster 12xH100:ib,4xA100:eth --model 125M --batch 256 \
	--flops-per-sample 2e11 --heartbeat 5ms --horizon 3 --fail 1.2:13
compare rank0-then-two --cluster 16xH100:ib --model 125M --batch 256 \
	--flops-per-sample 2e11 --heartbeat 5ms --horizon 3 --fail 1.1:0 --fail 2.2:9 --fail 2.2:10
compare paused --cluster 16xH100:ib --model 125M --batch 256 \
	--flops-per-sample 2e11 --heartbeat 5ms --horizon 3 --pause 1.2:5:0.1

# a bad value is refused by name
"$SIM" --cluster 4xH100:ib --trains 0 >/dev/null 2>"$tmp/bad.err" && no "--trains 0 accepted"
grep -q "trains" "$tmp/bad.err" || no "--trains 0: the error does not name it: $(cat "$tmp/bad.err")"

[ $fail = 0 ] && echo "sim_trains: ok"
exit $fail
