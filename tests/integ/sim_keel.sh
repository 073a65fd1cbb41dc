#!/usr/bin/env bash
# tier: long (minutes of simulator runs over every part of the model)
# keel-sim checks (issue 4), beyond sim_core.sh's (same seed -> same bytes, detection within
# its bound: make test runs those): each failure charged its own view change; rank 0's GPU
# lost; the baseline recovery; ring monitoring past 32 ranks; a paused GPU excluded and
# readmitted; a
# lossy link excluding nobody; AllReduce results exact inside the
# simulation; heterogeneity in the model's proportions; fidelity against SMPI's ring
# MPI_Allreduce and the analytical ring cost; the hierarchical AllReduce used and not slower
# than the ring on servers of 8 GPUs; a straggler repaired by keel's controller; compressed
# gradients over 25 GbE; failures drawn from lifetimes (per GPU, per server, Weibull); the
# checkpoint sweep's optimum beside Young/Daly's; repaired GPUs back in the job; clear errors for
# bad input. About two minutes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SIM=$BIN/keel-sim
require_built "$SIM"
tmpdir_make tmp
fail=0
no() { echo "sim: FAIL: $*"; fail=1; }
seed_init 7

# 1. Recovery in the model (determinism and detection are sim_core.sh's, in make test): the
# mixed cluster sim_core.sh runs twice, with other recoveries below.
args=(--cluster 8xH100:ib/4,4xA100:eth/4 --horizon 1.5 --fail 0.7:5 --model 20M --batch 96
	--flops-per-sample 2e11 --heartbeat 1ms --check 1 --seed "$SEED" --format csv)
# Two failures half a second apart: each is charged its own view change (tens of microseconds),
# not the gap until the next one (a later view also lacks the first failed host).
"$SIM" --cluster 4xH100:ib,4xA100:eth --horizon 2.5 --fail 1:3 --fail 1.5:5 --model 20M --batch 96 \
	--flops-per-sample 2e11 --heartbeat 1ms --seed "$SEED" --format csv >"$tmp/two.csv" 2>/dev/null ||
	no "two-failure run exited $?"
awk -v v="$(csv_col "$tmp/two.csv" lost_view_s)" 'BEGIN { exit !(v > 0 && v < 0.01) }' &&
	echo "sim: two failures 0.5 s apart: $(csv_col "$tmp/two.csv" lost_view_s) s of view changes in all" ||
	no "two failures 0.5 s apart charged $(csv_col "$tmp/two.csv" lost_view_s) s of view changes"
# Rank 0's GPU lost: the survivors' steps are still counted (the job's lowest live rank counts
# them; once only rank 0 did, and a run losing it reported half its steps). Host 0 is also
# where the fault controller starts: it hands on to a live host, and the failure after it
# still happens.
for f in "" "--fail 1:0 --fail 1.5:3"; do
	"$SIM" --cluster 8xH100:ib --horizon 2 $f --model 20M --batch 96 --flops-per-sample 2e11 \
		--seed "$SEED" --format csv 2>/dev/null | awk -F, 'NR==2{print $4, $8}'
done >"$tmp/r0.txt" || no "rank-0 runs exited $?"
awk 'NR==1{a=$1} NR==2{b=$1; n=$2} END { exit !(a > 0 && b > 0.8 * a && n == 2) }' "$tmp/r0.txt" &&
	echo "sim: ranks 0 and 3 lost at 1 and 1.5 s: $(paste -sd/ "$tmp/r0.txt") steps, failures (without/with)" ||
	no "ranks 0 and 3 lost at 1 and 1.5 s: $(paste -sd/ "$tmp/r0.txt") steps, failures (without/with)"
# docs/keel-sim.md's example (24 ranks training, 1 ms heartbeats, scaled gradient datagrams): heartbeats
# must not queue behind gradients in the simulated receiver (once 66 false suspicions did).
"$SIM" --scenario sim/examples/mixed24.scenario --format csv >"$tmp/m.csv" 2>/dev/null ||
	no "mixed24 example exited $?"
[ "$(csv_col "$tmp/m.csv" views_agree)" = yes ] && [ "$(csv_col "$tmp/m.csv" false_suspicions)" = 0 ] &&
	[ "$(csv_col "$tmp/m.csv" view_epochs)" = 2 ] &&
	echo "sim: keel-sim.md example (mixed24): one new view, agreed, no false suspicion" ||
	no "mixed24: views_agree $(csv_col "$tmp/m.csv" views_agree), false $(csv_col "$tmp/m.csv" false_suspicions)"

# 1b. The baseline recovery: a collective watchdog (NCCL's 10 min, here 0.2 s from the start of
# the collective that hangs) notices the death, then the job restarts (0.1 s) from its last
# checkpoint. A death during a step's compute is noticed up to that compute later: the
# survivors start the collective that hangs only when they finish it.
"$SIM" "${args[@]}" --recovery timeout=0.2s --restart 0.1s >"$tmp/t.csv" 2>/dev/null ||
	no "timeout-recovery run exited $?"
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i} NR==2{d=$c["lost_detect_s"]; r=$c["lost_restart_s"];
	printf "sim: timeout recovery: noticed after %.3f s, restart %.3f s, rollback %.3f s\n", d, r,
	$c["lost_rollback_s"]; exit !(d > 0.1 && d <= 0.201 + $c["step_s"] && r > 0.099 && r < 0.101)}' \
	"$tmp/t.csv" ||
	no "timeout recovery did not notice the death through its watchdog and restart"

# 1c. Beyond 32 ranks each member watches only ring neighbours: a death still ends in exactly
# one new view that every survivor agrees on, with no false suspicion on the new ring.
"$SIM" --mode heartbeat --cluster 40xH100:ib --horizon 0.4 --fail 0.3:5 --seed "$SEED" \
	--format csv >"$tmp/r.csv" 2>/dev/null || no "ring-monitoring run exited $?"
[ "$(csv_col "$tmp/r.csv" view_epochs)" = 2 ] && [ "$(csv_col "$tmp/r.csv" views_agree)" = yes ] &&
	[ "$(csv_col "$tmp/r.csv" false_suspicions)" = 0 ] && [ "$(csv_col "$tmp/r.csv" detect_late)" = 0 ] &&
	echo "sim: 40 ranks (ring monitoring): one new view, agreed, no false suspicion" ||
	no "40 ranks: view_epochs $(csv_col "$tmp/r.csv" view_epochs), false $(csv_col "$tmp/r.csv" false_suspicions)"
# A whole 8-GPU server (consecutive ranks) dies at once: the power-of-two ring distances leave
# each of its GPUs a live watcher, so all are found within the single-failure bound.
"$SIM" --mode heartbeat --cluster 64xH100:ib --horizon 0.35 --seed "$SEED" --format csv \
	$(for g in 8 9 10 11 12 13 14 15; do printf -- '--fail 0.3:%s ' $g; done) >"$tmp/s.csv" \
	2>/dev/null || no "server-failure run exited $?"
[ "$(csv_col "$tmp/s.csv" view_epochs)" = 2 ] && [ "$(csv_col "$tmp/s.csv" detect_late)" = 0 ] &&
	[ "$(csv_col "$tmp/s.csv" undetected)" = 0 ] &&
	echo "sim: 64 ranks, a whole server lost: all found within $(csv_col "$tmp/s.csv" detect_max_s) s, one view" ||
	no "server failure: late $(csv_col "$tmp/s.csv" detect_late), view_epochs $(csv_col "$tmp/s.csv" view_epochs)"

# 1d. Gray failures. A GPU paused for 0.5 s (its process stops computing and sending, then goes
# on with its state): found within the detection bound, excluded, told so when it is back, and
# readmitted by the next view — three views in all, agreed, nothing wrong in the results.
"$SIM" --cluster 8xH100:ib --model 20M --batch 96 --flops-per-sample 2e11 --heartbeat 1ms \
	--horizon 1.5 --pause 0.5:3:0.5 --check 1 --seed "$SEED" --format csv >"$tmp/p.csv" \
	2>/dev/null || no "pause run exited $?"
[ "$(csv_col "$tmp/p.csv" view_epochs)" = 3 ] && [ "$(csv_col "$tmp/p.csv" views_agree)" = yes ] &&
	[ "$(csv_col "$tmp/p.csv" live_excluded)" = 1 ] && [ "$(csv_col "$tmp/p.csv" detect_late)" = 0 ] &&
	[ "$(csv_col "$tmp/p.csv" false_suspicions)" = 0 ] &&
	[ "$(csv_col "$tmp/p.csv" allreduce_wrong)" = 0 ] &&
	echo "sim: a GPU paused 0.5 s: found in $(csv_col "$tmp/p.csv" detect_max_s) s, excluded," \
		"readmitted (3 views, agreed), results exact" ||
	no "pause: views $(csv_col "$tmp/p.csv" view_epochs), excluded $(csv_col "$tmp/p.csv" live_excluded), late $(csv_col "$tmp/p.csv" detect_late)"
# A lossy link alone excludes nobody: 15 ranks, 1 % independent loss, 1 ms heartbeats, miss
# limit 3 (before the silence margin and the probes: 33 false suspicions, 31 view changes).
"$SIM" --mode heartbeat --cluster 15xH100:ib/1 --chaos loss=0.01,seed=5 --heartbeat 1ms \
	--horizon 2 --seed 5 --format csv >"$tmp/l.csv" 2>/dev/null || no "lossy run exited $?"
[ "$(csv_col "$tmp/l.csv" false_suspicions)" = 0 ] && [ "$(csv_col "$tmp/l.csv" view_epochs)" = 1 ] &&
	echo "sim: 1 % loss, 15 ranks, 2 s at 1 ms heartbeats: no suspicion, one view" ||
	no "lossy link: false $(csv_col "$tmp/l.csv" false_suspicions), views $(csv_col "$tmp/l.csv" view_epochs)"

# 3. Heterogeneity. Compute: H100 vs A100 step time (tiny gradient) ~ 989/312.
step() { "$SIM" --cluster "$1" --horizon 0.5 --model 1000 --batch 8 --flops-per-sample 1e13 \
	--ckpt-every 0 --format csv 2>/dev/null | awk -F, 'NR==2{print $6}'; }
h=$(step 8xH100:ib/1); a=$(step 8xA100:ib/1)
awk -v h="$h" -v a="$a" 'BEGIN{r=a/h; e=989/312; printf "sim: step A100/H100 %.3f, model %.3f\n", r, e;
	exit !(r > e*0.9 && r < e*1.1)}' || no "compute ratio"
# Network: the same AllReduce over 100 GbE vs NDR InfiniBand, against the ring model's ratio.
ar() { "$SIM" --mode allreduce --cluster "4xH100:$1/1" --bytes 16M --repeat 3 --algo ring \
	--window 256 --mtu 65000 2>/dev/null | sed -n 's/.*keel \([0-9.]*\) s, ring model \([0-9.]*\) s.*/\1 \2/p'; }
read -r ti mi <<<"$(ar ib)"; read -r te me <<<"$(ar eth)"
awk -v ti="$ti" -v te="$te" -v mi="$mi" -v me="$me" 'BEGIN{r=te/ti; m=me/mi;
	printf "sim: AllReduce 16 MiB eth/ib %.3f, model %.3f\n", r, m; exit !(r > m*0.9 && r < m*1.1)}' ||
	no "network ratio"

# 4. Fidelity: keel's ring vs SMPI's ring (lr) vs 2(n-1)(alpha + S/(n beta)), same platform.
if command -v smpicc >/dev/null && command -v smpirun >/dev/null; then
	smpicc -O2 -o "$tmp/mpi_allreduce" sim/mpi_allreduce.c 2>/dev/null || no "smpicc failed"
	for n in 4 8; do
		"$SIM" --cluster "${n}xH100:ib/1" --write-platform "$tmp/p$n.xml"
		for ((i = 0; i < n; i++)); do printf 'gpu-%04d\n' $i; done >"$tmp/h$n.txt"
		for b in 4194304 16777216; do
			read -r k m <<<"$("$SIM" --mode allreduce --platform "$tmp/p$n.xml" --bytes $b \
				--repeat 3 --algo ring --window 256 --mtu 65000 2>/dev/null |
				sed -n 's/.*keel \([0-9.]*\) s, ring model \([0-9.]*\) s.*/\1 \2/p')"
			s=$(cd "$tmp" && smpirun -np $n -platform "p$n.xml" -hostfile "h$n.txt" \
				--cfg=smpi/allreduce:lr --cfg=network/model:CM02 --cfg=network/crosstraffic:0 \
				--cfg=smpi/simulate-computation:0 --log=root.thres:critical \
				./mpi_allreduce $b 3 2>/dev/null | tail -1)
			awk -v n=$n -v b=$b -v k="$k" -v s="$s" -v m="$m" 'BEGIN{
				printf "sim: fidelity %d ranks %8d B: keel %.6f s, SMPI lr %.6f s (%+.1f %%), ring model %.6f s (%+.1f %%)\n",
				n, b, k, s, (k/s-1)*100, m, (k/m-1)*100; exit !(k > 0 && s > 0 && k/s > 0.9 && k/s < 1.1)}' ||
				no "fidelity $n ranks $b bytes"
		done
	done
else
	echo "sim: smpicc/smpirun not found: SMPI fidelity part skipped"
fi

# 5. Hierarchical AllReduce (issue 16). 4 servers of 8 H100 (NVLink inside, NDR InfiniBand
# between), a 125M-parameter model: AUTO picks the hierarchy (the platform's servers become
# host_of), and its step is not slower than the flat ring's (simulated time: deterministic).
hstep() { "$SIM" --cluster 32xH100:ib --model 125M --flops-per-sample 1.536e12 --batch 256 \
	--heartbeat 100ms --horizon 0.3 --ckpt-every 0 --algo "$1" --seed "$SEED" --format csv \
	>"$tmp/h-$1.csv" 2>/dev/null || no "hier run --algo $1 exited $?"; }
hstep ring; hstep auto
hr=$(csv_col "$tmp/h-ring.csv" step_s); ha=$(csv_col "$tmp/h-auto.csv" step_s)
[ "$(csv_col "$tmp/h-ring.csv" allreduce_hier)" = 0 ] &&
	[ "$(csv_col "$tmp/h-auto.csv" allreduce_hier)" = "$(csv_col "$tmp/h-auto.csv" allreduce_ops)" ] &&
	[ "$(csv_col "$tmp/h-auto.csv" allreduce_ops)" -gt 0 ] || no "auto did not run every AllReduce hierarchically"
awk -v r="$hr" -v h="$ha" 'BEGIN{printf "sim: 4 x 8 H100, 125M model: step %.6f s hierarchical (auto), %.6f s flat ring (%.2fx)\n",
	h, r, r/h; exit !(h > 0 && h <= r)}' || no "hierarchical step $ha s slower than the ring's $hr s"
# Exact inside the simulation, and a failure (2 servers of 4, one GPU lost: uneven) goes on flat.
"$SIM" --cluster 8xH100:ib/4 --model 5M --batch 96 --flops-per-sample 2e11 --heartbeat 1ms \
	--horizon 0.3 --fail 0.15:6 --algo hier --check 1 --seed "$SEED" --format csv >"$tmp/hf.csv" \
	2>/dev/null || no "hier failure run exited $?"
n=$(csv_col "$tmp/hf.csv" allreduce_ops); h=$(csv_col "$tmp/hf.csv" allreduce_hier)
[ "$(csv_col "$tmp/hf.csv" allreduce_wrong)" = 0 ] && [ "$(csv_col "$tmp/hf.csv" allreduce_failed)" = 0 ] &&
	[ "$h" -gt 0 ] && [ "$h" -lt "$n" ] && [ "$(csv_col "$tmp/hf.csv" views_agree)" = yes ] &&
	echo "sim: hier with a failure: $n AllReduce results exact, $h hierarchical, the rest flat" ||
	no "hier failure run: ops $n, hier $h, wrong $(csv_col "$tmp/hf.csv" allreduce_wrong)"

# 5b. Straggler repair (issue 19): 8 H100, one 4x slower from t = 2 s. Every rank measures its
# compute and sends it with the gradient; keel's controller re-partitions within 5 steps, the
# steps after it come within 10 % of the split by speed (that compute plus the communication of
# a run without the slowdown), every member plans alike on every step, results stay exact; with
# --repair off the static split keeps every step at the slow GPU's pace.
sargs=(--cluster 8xH100:ib --model 125M --batch 512 --flops-per-sample 1e12 --horizon 10
	--check 1 --seed "$SEED" --format csv)
"$SIM" "${sargs[@]}" >"$tmp/s0.csv" 2>/dev/null || no "straggler base run exited $?"
"$SIM" "${sargs[@]}" --slow 2:3:4 >"$tmp/s1.csv" 2>/dev/null || no "straggler run exited $?"
"$SIM" "${sargs[@]}" --slow 2:3:4 --repair off >"$tmp/s2.csv" 2>/dev/null ||
	no "static-split run exited $?"
awk -v s0="$(csv_col "$tmp/s0.csv" step_s)" -v c0="$(csv_col "$tmp/s0.csv" compute_s_max)" \
	-v ci="$(csv_col "$tmp/s1.csv" compute_s_ideal)" -v after="$(csv_col "$tmp/s1.csv" step_s_after_repair)" \
	-v first="$(csv_col "$tmp/s1.csv" repair_first_step)" -v n="$(csv_col "$tmp/s1.csv" repairs)" \
	-v stat="$(csv_col "$tmp/s2.csv" step_s)" -v r0="$(csv_col "$tmp/s0.csv" repairs)" \
	-v r2="$(csv_col "$tmp/s2.csv" repairs)" 'BEGIN {
	ideal = ci + (s0 - c0); slow_step = int(2.0 / s0) + 1
	printf "sim: one H100 4x slower: repair %d at step %d (slowdown at step %d); steps %.4f s after it, split by speed %.4f s (%.3fx); static split %.4f s\n",
		n, first, slow_step, after, ideal, after / ideal, stat
	exit !(r0 == 0 && r2 == 0 && n >= 1 && first - slow_step <= 5 && first >= slow_step &&
		after <= 1.10 * ideal && stat > 2 * after) }' ||
	no "straggler repair: not within 5 steps / 10 % of the split by speed, or repairs where none were due"
for f in s0 s1 s2; do
	[ "$(csv_col "$tmp/$f.csv" plans_disagree)" = 0 ] && [ "$(csv_col "$tmp/$f.csv" allreduce_wrong)" = 0 ] &&
		[ "$(csv_col "$tmp/$f.csv" allreduce_ops)" -gt 0 ] ||
		no "$f: plans differed ($(csv_col "$tmp/$f.csv" plans_disagree)) or results wrong"
done
# A failure after the repair: the survivors plan afresh on the new view, repair again, and agree.
"$SIM" "${sargs[@]}" --slow 2:3:4 --fail 6:5 >"$tmp/s3.csv" 2>/dev/null || no "straggler+failure run exited $?"
[ "$(csv_col "$tmp/s3.csv" repairs)" -ge 2 ] && [ "$(csv_col "$tmp/s3.csv" plans_disagree)" = 0 ] &&
	[ "$(csv_col "$tmp/s3.csv" views_agree)" = yes ] && [ "$(csv_col "$tmp/s3.csv" allreduce_wrong)" = 0 ] &&
	echo "sim: straggler then a failure: $(csv_col "$tmp/s3.csv" repairs) repairs, plans agreed, results exact" ||
	no "straggler+failure: repairs $(csv_col "$tmp/s3.csv" repairs), disagree $(csv_col "$tmp/s3.csv" plans_disagree)"

# 6. Compressed gradients over 25 GbE (one GPU per node): with the link the bottleneck, bf16
# and auto (after its first, measured step) make steps shorter and save bytes; off is none
# within 0.1 % (its plan digests go as three exact bytes instead of one float).
cargs=(--cluster 8xA100:eth-25g/1 --mode train --horizon 8 --model 350M --batch 16
	--grad-scale 1000 --seed "$SEED" --format csv)
for m in none off auto bf16; do
	"$SIM" "${cargs[@]}" --compress $m >"$tmp/c-$m.csv" 2>/dev/null || no "--compress $m exited $?"
done
awk -v a="$(csv_col "$tmp/c-off.csv" step_s)" -v b="$(csv_col "$tmp/c-none.csv" step_s)" \
	'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.001 * b) }' &&
	[ "$(csv_col "$tmp/c-off.csv" compress_bytes_saved)" = 0 ] ||
	no "--compress off: step $(csv_col "$tmp/c-off.csv" step_s) s, none $(csv_col "$tmp/c-none.csv" step_s) s"
for m in auto bf16; do
	awk -v a="$(csv_col "$tmp/c-$m.csv" step_s)" -v b="$(csv_col "$tmp/c-none.csv" step_s)" \
		'BEGIN { exit !(a < 0.75 * b) }' && [ "$(csv_col "$tmp/c-$m.csv" compress_bytes_saved)" -gt 0 ] ||
		no "--compress $m: step $(csv_col "$tmp/c-$m.csv" step_s) s against $(csv_col "$tmp/c-none.csv" step_s) s, saved $(csv_col "$tmp/c-$m.csv" compress_bytes_saved)"
done
echo "sim: 25 GbE, step $(csv_col "$tmp/c-none.csv" step_s) s plain, $(csv_col "$tmp/c-auto.csv" step_s) s auto, $(csv_col "$tmp/c-bf16.csv" step_s) s bf16"
err=$("$SIM" "${cargs[@]}" --compress bf16 --check 1 2>&1); [ $? != 0 ] &&
	grep -q "use --compress none with --check" <<<"$err" || no "--compress with --check: $err"
err=$("$SIM" "${cargs[@]}" --compress zip 2>&1); [ $? = 2 ] &&
	grep -q "bad value 'zip' for 'compress'" <<<"$err" || no "bad --compress: $err"

# 7. Random failures from lifetimes (heartbeat mode: cheap). 64 GPUs with a 10 s MTBF over
# 10 s: each fails with probability 1 - e^-1, so 29..52 of them (3 sigma); the same seed lists
# the same failures. Weibull of shape 3 with the same mean makes a failure within the mean
# less likely (0.51 against 0.63): fewer of them, 23..43. Per server: its 8 GPUs fail at one
# instant, and are charged one recovery (the others only what they add to it).
fargs=(--cluster 64xH100:ib --mode heartbeat --horizon 10 --seed "$SEED")
"$SIM" "${fargs[@]}" --mtbf 10s >/dev/null 2>"$tmp/f1" || no "--mtbf run exited $?"
"$SIM" "${fargs[@]}" --mtbf 10s >/dev/null 2>"$tmp/f2" || no "--mtbf run 2 exited $?"
n_exp=$(grep -c 'keel-sim: failure .*, gpu:' "$tmp/f1")
[ "$n_exp" -ge 29 ] && [ "$n_exp" -le 52 ] || no "--mtbf 10s: $n_exp of 64 GPUs failed in 10 s, expected 29..52"
cmp -s <(grep 'keel-sim: failure' "$tmp/f1") <(grep 'keel-sim: failure' "$tmp/f2") ||
	no "--mtbf: the same seed gave other failures"
"$SIM" "${fargs[@]}" --mtbf 10s --weibull 3 >/dev/null 2>"$tmp/f3" || no "--weibull run exited $?"
n_wb=$(grep -c 'keel-sim: failure .*, gpu:' "$tmp/f3")
[ "$n_wb" -ge 23 ] && [ "$n_wb" -le 43 ] || no "--weibull 3: $n_wb failed, expected 23..43"
"$SIM" "${fargs[@]}" --mtbf-server 10s --format json >"$tmp/f4.json" 2>"$tmp/f4" ||
	no "--mtbf-server run exited $?"
python3 -c '
import json, sys
run = json.load(open(sys.argv[1]))[0]
fl = run["failure_list"]
own = [f for f in fl if f["during_failure"] is None]
ok = len(fl) == run["failures"] and all(f["cause"] == "server" for f in fl) and \
	len(fl) == 8 * len(own) and all(fl[f["during_failure"] - 1]["at_s"] == f["at_s"] for f in fl if f not in own)
sys.exit(0 if ok else 1)' "$tmp/f4.json" || no "--mtbf-server: the JSON failure list disagrees: $(head -c 400 "$tmp/f4.json")"
awk '/keel-sim: failure .*, server:/ { split($0, a, " at "); split(a[2], b, " s:"); t[b[1]]++;
	if ($0 !~ /during failure/) own[b[1]]++; n++ }
	END { if (n == 0 || n % 8) exit 1; for (k in t) if (t[k] != 8 || own[k] != 1) exit 1 }' "$tmp/f4" ||
	no "--mtbf-server: failures not in whole servers of 8 at one instant, one recovery each: $(grep -c failure "$tmp/f4")"
echo "sim: random failures: $n_exp of 64 GPUs exponential, $n_wb Weibull(3), $(grep -c ', server:' "$tmp/f4") in whole servers"
err=$("$SIM" "${fargs[@]}" --weibull 0 2>&1); [ $? = 2 ] &&
	grep -q -- "--weibull: '0' is not a number in 0.01..20" <<<"$err" || no "--weibull 0: $err"

# 7b. Repairs. keel's recovery: GPU 2 dies at 1 s and is repaired at 2 s; its process rejoins
# the running job (a new incarnation) within a few heartbeats, gets the weights, and every
# result stays exact. Restart recovery: repaired at 1.5 s, it is back only with the relaunch
# after the next failure (2 s + detection + the 0.2 s relaunch). --mttr: failed GPUs come back
# and fail again, the same seed giving the same list.
rargs=(--cluster 8xH100:ib --model 20M --batch 96 --flops-per-sample 2e11 --horizon 3 --seed "$SEED")
"$SIM" "${rargs[@]}" --fail 1:2 --recover 2:2 --check 1 --format json >"$tmp/rj.json" 2>"$tmp/rj.err" ||
	no "rejoin run exited $?"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))[0]
j = r["rejoin_list"]
ok = len(j) == 1 and j[0]["host"] == 2 and 0 < j[0]["admitted_s"] < 0.01 and j[0]["synced_s"] > 0 \
	and r["allreduce"]["wrong"] == 0 and r["allreduce"]["failed"] == 0 and r["views_agree"] \
	and r["false_suspicions"] == 0 and r["view_epochs"] == 3
sys.exit(0 if ok else 1)' "$tmp/rj.json" && echo "sim: $(grep 'repair 1' "$tmp/rj.err")" ||
	no "keel rejoin: $(grep -h 'repair\|failure' "$tmp/rj.err") $(head -c 300 "$tmp/rj.json")"
"$SIM" "${rargs[@]}" --recovery restart --restart 0.2s --fail 1:2 --recover 1.5:2 --fail 2:5 \
	--format json >"$tmp/rr.json" 2>"$tmp/rr.err" || no "restart rejoin run exited $?"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))[0]
j, f = r["rejoin_list"], r["failure_list"]
back = f[1]["at_s"] + f[1]["detect_s"] + f[1]["view_change_s"] + 0.2 - j[0]["at_s"]
sys.exit(0 if len(j) == 1 and abs(j[0]["admitted_s"] - back) < 0.01 else 1)' "$tmp/rr.json" &&
	echo "sim: $(grep 'repair 1' "$tmp/rr.err")" || no "restart rejoin: $(grep -h 'repair\|failure' "$tmp/rr.err")"
"$SIM" "${rargs[@]}" --recovery restart --restart 0.2s --fail 1:2 --recover 1.5:2 \
	>/dev/null 2>"$tmp/rn.err" || no "restart rejoin without a relaunch exited $?"
grep -q "repair 1 at 1.500000 s: host 2 not back before the end" "$tmp/rn.err" ||
	no "a repair with no relaunch after it: $(grep repair "$tmp/rn.err")"
margs=(--cluster 16xH100:ib --mode heartbeat --horizon 6 --seed "$SEED" --mtbf 4s --mttr 1s)
"$SIM" "${margs[@]}" >/dev/null 2>"$tmp/m1" || no "--mttr run exited $?"
"$SIM" "${margs[@]}" >/dev/null 2>"$tmp/m2" || no "--mttr run 2 exited $?"
n_rep=$(grep -c 'keel-sim: repair .* back in the job' "$tmp/m1")
n_fail=$(grep -c 'keel-sim: failure' "$tmp/m1")
twice=$(grep -o 'keel-sim: failure .*: host [0-9]*' "$tmp/m1" | awk '{print $NF}' | sort | uniq -d | wc -l)
[ "$n_rep" -ge 5 ] && [ "$twice" -ge 1 ] ||
	no "--mttr 1s: $n_rep repaired GPUs back, $twice failed twice ($n_fail failures)"
cmp -s <(grep 'keel-sim: \(failure\|repair\)' "$tmp/m1") <(grep 'keel-sim: \(failure\|repair\)' "$tmp/m2") ||
	no "--mttr: the same seed gave other failures or repairs"
err=$("$SIM" "${margs[@]}" --mttr -1 2>&1); [ $? = 2 ] &&
	grep -q -- "--mttr: '-1' is not a number in 0.." <<<"$err" || no "--mttr -1: $err"
echo "sim: --mtbf 4s --mttr 1s on 16 GPUs: $n_fail failures, $n_rep repaired GPUs back, $twice failed again"

# 8. A sweep of the checkpoint interval (restart recovery, two failures): the best value said
# is the CSV's highest goodput, Young/Daly's optimum is sqrt(2 x write x MTBF) in seconds and
# that over the step in steps, and the plot marks both.
"$SIM" --cluster 8xH100:ib --mode train --model 20M --batch 96 --flops-per-sample 2e11 \
	--horizon 3 --fail 1:3 --fail 2:5 --recovery restart --restart 0.2s --seed "$SEED" \
	--sweep ckpt-every=10,40,160 --format csv --plot "$tmp/ckpt.svg" >"$tmp/ckpt.csv" 2>"$tmp/ckpt.err" ||
	no "ckpt-every sweep exited $?"
best=$(awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i=="goodput")g=i} NR>1 && $g>m {m=$g; b=$1} END{print b}' "$tmp/ckpt.csv")
line=$(grep 'ckpt-every: the best of the sweep' "$tmp/ckpt.err")
grep -q "best of the sweep is $best steps" <<<"$line" || no "ckpt sweep: said '$line', the CSV's best is $best"
awk '{ for (i = 1; i <= NF; i++) { if ($i == "sqrt(2") { d = $(i+2); m = $(i+5) + 0 }
	if ($i == "=" && $(i+2) == "s") t = $(i+1); if ($i == "steps" && $(i+1) == "of") { k = $(i-1); st = $(i+2) } }
	exit !(t > 0 && (t - sqrt(2 * d * m)) ^ 2 < (0.01 * t) ^ 2 && (k - t / st) ^ 2 < (0.02 * k) ^ 2) }' <<<"$line" ||
	no "ckpt sweep: Young/Daly arithmetic in '$line'"
grep -q 'Young/Daly' "$tmp/ckpt.svg" && grep -q 'best of the sweep' "$tmp/ckpt.svg" ||
	no "ckpt sweep: the plot lacks its marks"
echo "sim: ckpt-every sweep: best $best; ${line##*; }"

# 9. Bad input names what is wrong.
err=$("$SIM" --cluster 8xX100:ib 2>&1); [ $? = 2 ] && grep -q "unknown GPU type 'X100'" <<<"$err" &&
	echo "sim: error: $err" || no "bad GPU type: $err"
err=$("$SIM" --cluster 8xH100:fddi 2>&1); grep -q "unknown fabric 'fddi'" <<<"$err" || no "bad fabric: $err"
err=$("$SIM" --cluster H100 2>&1); grep -q "expected COUNTxGPU" <<<"$err" || no "bad item: $err"
err=$("$SIM" --cluster 8xH100:ib --repair maybe 2>&1); [ $? = 2 ] &&
	grep -q "bad value 'maybe' for 'repair'" <<<"$err" || no "bad --repair: $err"
printf '<?xml version="1.0"?>\n<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n%s\n' \
	'<platform version="4.1"><zone id="z" routing="Full"/></platform>' >"$tmp/empty.xml"
err=$("$SIM" --platform "$tmp/empty.xml" 2>&1); grep -q "empty.xml' has 0 hosts" <<<"$err" &&
	echo "sim: error: $err" || no "empty platform: $err"
err=$("$SIM" --platform "$tmp/none.xml" 2>&1); grep -q "No such file" <<<"$err" || no "missing platform: $err"
# Presets shared with keel-plan, and parts described with --define (before the --cluster).
err=$("$SIM" --define 'gpu X9 rate=fast' 2>&1); [ $? = 2 ] &&
	grep -q "define 'gpu X9 rate=fast': field 'rate'" <<<"$err" || no "bad --define: $err"
"$SIM" --define 'gpu X9 rate=500T link=nvlink5' --define 'link fab bw=800Gbps lat=3us' \
	--cluster 2xX9:fab,2xB200:ib-xdr,2xMI325X:roce-400g --write-platform "$tmp/def.xml" &&
	grep -q 'speed="5.000000e+14f"' "$tmp/def.xml" && grep -q 'id="sw-fab"' "$tmp/def.xml" &&
	echo "sim: defined GPU and fabric, B200 and MI325X presets: platform written" ||
	no "defined parts: $(head -c 300 "$tmp/def.xml" 2>&1)"
# (read whole first: grep -q stops reading at the match and keel-sim would get SIGPIPE)
models=$("$SIM" --list-models) && grep -q '^  L40S ' <<<"$models" || no "--list-models lacks L40S"

[ $fail = 0 ] && echo "sim: all checks passed" || exit 1
