#!/usr/bin/env bash
# tier: long (about two minutes of simulator runs, full fidelity against auto)
# keel-sim --fidelity auto against --fidelity full on runs small enough for both (issue 20):
# three failures under keel's recovery (rank 0's GPU among them), three under
# restart-from-checkpoint, a rank paused past the detector and readmitted, and GPUs failing at
# random and repaired (rejoining the running job). auto must agree within 2 % on steps and goodput, with the
# same views, no false suspicion, and the same detection times (to 1 us); each failure's
# recovery (detection, view change, restart, rollback) within 2 %, and the work of its step in
# flight (redo, which depends on where in its step the failure lands) within one step. auto
# must leap most of the run, say which spans ran in full, repeat itself byte for byte, be the
# default only for long training runs, and refuse what it cannot do. About two minutes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
require_built "$SIM"
require_cmd python3
tmpdir_make tmp
fail=0
no() { echo "sim_fidelity: FAIL: $*"; fail=1; }
seed_init 4

# full vs auto of one scenario: NAME MIN_LEAPT_FRACTION ARGS...
compare() {
	local name=$1 min_leapt=$2
	shift 2
	local f
	for f in full auto; do
		"$SIM" "$@" --seed "$SEED" --fidelity $f --format json >"$tmp/$name.$f.json" \
			2>"$tmp/$name.$f.err" || { no "$name: --fidelity $f exited $?"; return; }
	done
	grep -h "fidelity" "$tmp/$name.auto.err"
	python3 - "$tmp/$name.full.json" "$tmp/$name.auto.json" "$name" "$min_leapt" <<'EOF' || fail=1
import json, sys
full, auto = (json.load(open(p))[0] for p in sys.argv[1:3])
name, min_leapt = sys.argv[3], float(sys.argv[4])
bad = []
def within(what, a, f, rel, absolute=0.0):
    if abs(a - f) > rel * abs(f) + absolute:
        bad.append(f"{what}: auto {a:.9g} against full {f:.9g}")
if full["fidelity"]["mode"] != "full" or auto["fidelity"]["mode"] != "auto":
    bad.append("the runs do not say their fidelity")
within("steps", auto["steps"], full["steps"], 0.02)
within("goodput", auto["goodput"], full["goodput"], 0.02)
for k in ("view_epochs", "views_agree", "false_suspicions", "live_excluded", "failures"):
    if auto[k] != full[k]:
        bad.append(f"{k}: auto {auto[k]} against full {full[k]}")
if full["false_suspicions"] != 0 or not full["views_agree"]:
    bad.append("the full run itself has false suspicions or disagreeing views")
if auto["allreduce"]["wrong"] or full["allreduce"]["wrong"]:
    bad.append("wrong AllReduce results")
for q in ("p50_s", "p99_s", "max_s"):
    within("detection " + q, auto["detect"][q], full["detect"][q], 0, 1e-6)
step = full["step_s"]
for i, (f, a) in enumerate(zip(full["failure_list"], auto["failure_list"]), 1):
    within(f"failure {i} detection", a["detect_s"], f["detect_s"], 0, 1e-6)
    within(f"failure {i} view change", a["view_change_s"], f["view_change_s"], 0.02, 1e-6)
    rec = lambda c: c["detect_s"] + c["view_change_s"] + c["restart_s"] + c["rollback_s"]
    within(f"failure {i} recovery", rec(a), rec(f), 0.02, 1e-6)
    within(f"failure {i} redo", a["redo_s"], f["redo_s"], 0, step)
leapt = auto["fidelity"]["leapt_s"] / auto["sim_s"]
if leapt < min_leapt:
    bad.append(f"auto leapt only {leapt:.0%} of the run (at least {min_leapt:.0%} expected)")
if not auto["fidelity"]["full_spans"] or auto["fidelity"]["full_spans"][0][0] != 0:
    bad.append("auto does not list the spans it ran in full, from 0")
if full["fidelity"]["leaps"] != 0 or full["fidelity"]["full_spans"] != [[0, full["sim_s"]]]:
    bad.append("full leapt, or does not say it ran in full throughout")
if auto["messages"] > full["messages"] * (1 - leapt / 2):  # what it leapt, it did not simulate
    bad.append(f"auto simulated {auto['messages']} datagrams against full's {full['messages']}")
print(f"sim_fidelity: {name}: steps {full['steps']}/{auto['steps']}, goodput "
      f"{full['goodput']:.4f}/{auto['goodput']:.4f}, {full['failures']} failures, "
      f"{leapt:.0%} leapt, datagrams {full['messages']}/{auto['messages']} (full/auto)")
for b in bad:
    print(f"sim_fidelity: FAIL: {name}: {b}")
sys.exit(1 if bad else 0)
EOF
}

model=(--model 125M --batch 512 --flops-per-sample 1e11)
# 1. keel's recovery: the survivors go on in memory.
compare keel 0.8 --cluster 8xH100:ib "${model[@]}" --horizon 30 --fail 8:0 --fail 15.3:5 \
	--fail 22.7:1
# 2. restart from the last checkpoint, on a mixed cluster: rollback and checkpoints leapt.
compare restart 0.3 --cluster 4xH100:ib,4xA100:eth "${model[@]}" --horizon 30 --fail 8:3 \
	--fail 15.3:5 --fail 22.7:1 --recovery restart --restart 2s --ckpt-every 20
# 3. a rank paused past the detector, excluded, readmitted; every result checked.
compare pause 0.8 --cluster 8xH100:ib "${model[@]}" --horizon 20 --pause 6:3:0.5 --check 1

# 4. GPUs failing at random and coming back (--mtbf, --mttr): each repaired one rejoins the
# running job, so leaps begin and end around failures and repairs alike.
compare repairs 0.5 --cluster 8xH100:ib "${model[@]}" --horizon 30 --mtbf 30s --mttr 6s --check 1

# 5. The same seed gives the same bytes; the CSV names the spans run in full.
args=(--cluster 8xH100:ib "${model[@]}" --horizon 12 --fail 6:2 --seed "$SEED" --fidelity auto
	--format csv)
"$SIM" "${args[@]}" >"$tmp/d1.csv" 2>/dev/null || no "determinism run 1 exited $?"
"$SIM" "${args[@]}" >"$tmp/d2.csv" 2>/dev/null || no "determinism run 2 exited $?"
cmp -s "$tmp/d1.csv" "$tmp/d2.csv" || no "two auto runs with seed $SEED differ"
spans=$(awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i=="full_spans")k=i} NR==2{print $k}' "$tmp/d1.csv")
[[ $spans == 0.000-*\;*-12.0* ]] && echo "sim_fidelity: CSV full_spans $spans" ||
	no "CSV full_spans '$spans' is not a list of spans from 0 to the end"

# 6. auto is the default for training runs over 300 s, full otherwise; what auto cannot do is
# refused by name.
"$SIM" --cluster 8xH100:ib "${model[@]}" --horizon 301 --seed "$SEED" --format csv \
	>"$tmp/long.csv" 2>"$tmp/long.err" || no "a 301 s run exited $?"
grep -q "fidelity auto" "$tmp/long.err" || no "a 301 s training run did not default to auto"
"$SIM" --cluster 8xH100:ib "${model[@]}" --horizon 2 --seed "$SEED" --format csv \
	>/dev/null 2>"$tmp/short.err" || no "a 2 s run exited $?"
grep -q "fidelity full: every step simulated" "$tmp/short.err" ||
	no "a 2 s training run did not run in full"
"$SIM" --mode heartbeat --cluster 2xH100:ib --heartbeat 100ms --horizon 301 --seed "$SEED" \
	--format csv >/dev/null 2>"$tmp/hb.err" || no "a 301 s heartbeat run exited $?"
grep -q "fidelity full" "$tmp/hb.err" || no "a heartbeat run did not run in full"
"$SIM" --mode heartbeat --cluster 2xH100:ib --horizon 1 --fidelity auto >/dev/null \
	2>"$tmp/e1.err" && no "--fidelity auto with --mode heartbeat accepted"
grep -q "needs --mode train" "$tmp/e1.err" || no "refusal of auto in mode heartbeat: $(cat "$tmp/e1.err")"
"$SIM" --cluster 2xH100:ib --horizon 1 --fidelity sometimes >/dev/null 2>"$tmp/e2.err" &&
	no "--fidelity sometimes accepted"
grep -q "'sometimes' for 'fidelity'" "$tmp/e2.err" || no "bad --fidelity: $(cat "$tmp/e2.err")"

[ $fail = 0 ] && echo "sim_fidelity: all checks passed"
exit $fail
