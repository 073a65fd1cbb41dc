#!/usr/bin/env bash
# keel-train started by the launchers users run, not only with their variables: Open MPI's
# mpirun, a one-node Slurm brought up here (munged, slurmctld, slurmd, all in a temporary
# directory; srun with a rendezvous and with KEEL_PEERS), and mpirun inside a Slurm job step
# (each rank then also carries the step's SLURM_PROCID and SLURM_NTASKS). In each, 4 ranks
# train and rank 2 SIGKILLs itself at a training step (--crash-at), so the kill lands inside
# training on a machine of any speed. The launcher must let the other 3 go on (mpirun
# --enable-recovery, srun --kill-on-bad-exit=0) and they must end with the accuracy of the
# same training without failure.
# Exit 0: every part passed; 1: a part failed; 77: none failed but a part was skipped (why is
# printed). Leaves no daemon and no file behind, even on failure or Ctrl-C.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
TRAIN=$BIN/keel-train
CRASH_STEP=600 # of 3 580 (20 epochs of 179 steps)
TRAIN_ARGS=(--epochs 20 --batch 8 --lr 0.1 --crash-at "2@$CRASH_STEP" --quiet)
RUN_TIMEOUT_S=60

must_be_built "$TRAIN"
require_digits

# Whatever launched this script must not leak into the jobs started here: keel reads RANK
# before Open MPI's variables and those before Slurm's.
for v in $(compgen -e); do
	case $v in
	SLURM_* | OMPI_* | PMIX_* | PMI_* | RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | \
		MASTER_ADDR | MASTER_PORT | KEEL_PEERS | KEEL_JOB_ID | KEEL_REJOIN | KEEL_INCARNATION)
		unset "$v" ;;
	esac
done

tmpdir_make tmp
daemons=() # pids of the daemons started here, in start order
running="" # pid of the launcher now running (its `timeout`)
ctld_pid="" slurmd_pid=""

# Run a launcher in the background and wait for it: a signal to this script then runs the
# traps at once (bash defers them while a foreground command runs) and stops the launcher.
launch() {
	local rc
	"$@" &
	running=$!
	wait "$running"
	rc=$?
	running=""
	return $rc
}

stop_daemons() {
	local deadline=$((SECONDS + 5))
	if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null; then
		# Our own cluster (SLURM_CONF points into $tmp): cancel what may still run there.
		timeout 3 scancel --quiet --full --user="$(id -un)" >/dev/null 2>&1
		while [ $SECONDS -lt $deadline ] && [ -n "$(timeout 2 squeue -h 2>/dev/null)" ]; do
			sleep 0.1
		done
		# A job's slurmstepd outlives it by a moment; its socket in the spool directory goes
		# when it does. Let it go before slurmd, so nothing is left to init.
		while [ $SECONDS -lt $deadline ] && [ -n "$(find "$tmp/spool" -type s)" ]; do
			sleep 0.1
		done
	fi
	for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
		local pid=${daemons[$i]}
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	daemons=()
}
cleanup() {
	if [ -n "$running" ]; then
		kill -TERM "$running" 2>/dev/null # timeout passes it on to mpirun or srun
		wait "$running" 2>/dev/null
	fi
	stop_daemons
}
on_exit cleanup
trap 'exit 1' INT TERM HUP

passed=() failed=() skipped=()
have_ompi=0
skip_part() { # part, reason: the others still run
	echo "launchers: $1: skipped: $2"
	skipped+=("$1")
}

port() { # a free-looking TCP port in 30000..59999
	echo $((30000 + RANDOM % 30000))
}

# The checks shared by every part: the kill happened inside training, the job went on with
# the 3 others, and their model is as good as the one trained without failure.
check_train() { # part, log
	local part=$1 log=$2 ok=1
	if grep -q "rank 2: --crash-at: SIGKILL at step $CRASH_STEP" "$log"; then
		echo "  ok: rank 2 SIGKILLed itself at step $CRASH_STEP"
	else
		echo "  FAIL: rank 2 never reached its kill at step $CRASH_STEP"
		ok=0
	fi
	if grep -q "keel-train summary (rank 0, 3 ranks at the end" "$log"; then
		echo "  ok: the other 3 ranks went on and finished (3 ranks at the end)"
	else
		echo "  FAIL: no summary from rank 0 with 3 ranks at the end"
		ok=0
	fi
	if grep -q "(within 1 point)" "$log"; then
		echo "  ok: $(grep '^difference:' "$log" | tr -s ' ')"
	else
		echo "  FAIL: final accuracy not within 1 point of the run without failure"
		ok=0
	fi
	if [ $ok -eq 0 ]; then
		echo "  --- $part output (epoch lines left out):"
		grep -v '^epoch' "$log" | tail -30 | sed 's/^/  | /'
		return 1
	fi
	return 0
}

# Open MPI aborts every rank when one dies by a signal or exits non-zero, unless recovery is
# on: then the dead rank is recorded and the others run to their end (4.1; mpirun exits 0).
# --mca orte_abort_on_non_zero_status 0 alone lets them go on, but mpirun then never exits
# after a rank killed by a signal.
MPIRUN_FT=(--enable-recovery)
# mpirun's exit status then says nothing of the ranks: each says how it ended, and one killed
# by a signal passes the signal on, so mpirun still sees a rank die by it.
REPORT=(sh -c '"$@"; rc=$?; echo "keel-train rank $OMPI_COMM_WORLD_RANK exit $rc"
	[ $rc -gt 128 ] && kill -$((rc - 128)) $$; exit $rc' sh)
check_mpirun_ranks() { # log, rc
	local r bad=""
	for r in 0 1 3; do
		grep -q "keel-train rank $r exit 0" "$1" || bad="$bad $r"
	done
	if [ -z "$bad" ] && grep -q "keel-train rank 2 exit 137" "$1" && [ "$2" -eq 0 ]; then
		echo "  ok: ranks 0, 1, 3 exited 0, rank 2 was SIGKILLed (137); mpirun exit 0"
		return 0
	fi
	echo "  FAIL: mpirun exit $2 (124: timed out after $RUN_TIMEOUT_S s); ranks not ending 0:" \
		"${bad:-none}; rank 2: $(grep -o 'keel-train rank 2 exit [0-9]*' "$1" || echo '?')"
	return 1
}
run_mpirun() { # log, [launcher prefix...]
	local log=$1
	shift
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) TMPDIR=$tmp launch timeout -k 5 $RUN_TIMEOUT_S \
		"$@" mpirun --allow-run-as-root --oversubscribe -np 4 "${MPIRUN_FT[@]}" \
		-x MASTER_ADDR -x MASTER_PORT "${REPORT[@]}" "$TRAIN" "${TRAIN_ARGS[@]}" >"$log" 2>&1
}

part_mpirun() {
	local t0 rc
	if ! command -v mpirun >/dev/null; then
		skip_part mpirun "mpirun not found (Debian openmpi-bin; tools/deps.sh installs it)"
		return
	fi
	if ! mpirun --allow-run-as-root --version 2>/dev/null | grep -q "Open MPI"; then
		skip_part mpirun "mpirun is not Open MPI's ($(mpirun --version 2>&1 | head -1))"
		return
	fi
	have_ompi=1
	echo "launchers: mpirun ($(mpirun --allow-run-as-root --version | head -1)):" \
		"-np 4 ${MPIRUN_FT[*]}, rendezvous at MASTER_ADDR:MASTER_PORT (-x)"
	t0=$SECONDS
	run_mpirun "$tmp/mpirun.log"
	rc=$?
	if check_train mpirun "$tmp/mpirun.log" && check_mpirun_ranks "$tmp/mpirun.log" $rc; then
		echo "  ok: $((SECONDS - t0)) s"
		passed+=(mpirun)
	else
		failed+=(mpirun)
	fi
}

write_slurm_conf() {
	local ctld_port=$1
	cat >"$tmp/slurm.conf" <<EOF
# A one-node cluster for tests/integ/launchers.sh; everything under $tmp.
ClusterName=keeltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.socket
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=keel Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

# munged with a key made here, then slurmctld and slurmd in the foreground (-D) as background
# jobs of this shell (not a subshell), so their pids are known without trusting a pid file.
# Returns non-zero with the reason in slurm_why when something does not come up.
slurm_why=""
start_slurm() {
	local cmd
	for cmd in munged mungekey slurmctld slurmd srun sinfo squeue scancel; do
		command -v $cmd >/dev/null || {
			slurm_why="$cmd not found (Debian slurm-wlm and munge; tools/deps.sh installs them)"
			return 1
		}
	done
	[ "$(id -u)" = 0 ] || { slurm_why="slurmd must run as root to start tasks"; return 1; }
	mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" && chmod 700 "$tmp/munge" ||
		{ slurm_why="cannot make directories in $tmp"; return 1; }
	mungekey --create --keyfile="$tmp/munge/munge.key" >/dev/null 2>&1 ||
		{ slurm_why="mungekey could not create a key"; return 1; }
	munged --foreground --force --socket="$tmp/munge/munge.socket" \
		--key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/munged.pid" \
		--seed-file="$tmp/munge/munged.seed" >"$tmp/munged.out" 2>&1 &
	daemons+=($!)
	export SLURM_CONF=$tmp/slurm.conf
	write_slurm_conf "$(port)"
	for _ in $(seq 50); do
		[ -S "$tmp/munge/munge.socket" ] && break
		sleep 0.1
	done
	[ -S "$tmp/munge/munge.socket" ] ||
		{ slurm_why="munged did not start: $(tail -1 "$tmp/munged.out")"; return 1; }
	slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
	ctld_pid=$!
	daemons+=($!)
	slurmd -D -N localhost -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
	slurmd_pid=$!
	daemons+=($!)
	local deadline=$((SECONDS + 20))
	while [ $SECONDS -lt $deadline ] && kill -0 "$ctld_pid" 2>/dev/null &&
		kill -0 "$slurmd_pid" 2>/dev/null; do
		[ "$(timeout 2 sinfo -h -n localhost -o %t 2>/dev/null)" = idle ] && return 0
		sleep 0.1
	done
	slurm_why="a daemon stopped, or the node was not idle within 20 s (slurmctld: $(grep -m1 -E \
		'fatal|error: (Unable|This host)' "$tmp/slurmctld.out"); slurmd: $(grep -m1 -E \
		'fatal|error: Unable' "$tmp/slurmd.out"))"
	return 1
}

# srun returns the worst task status (137: task 2 killed); every other task must have ended 0.
check_srun_tasks() { # log, rc
	local others
	others=$(grep -E 'srun: error: .*task [0-9]+:' "$1" | grep -v 'task 2: Killed')
	if grep -q 'task 2: Killed' "$1" && [ -z "$others" ] && [ "$2" -eq 137 ]; then
		echo "  ok: srun reports task 2 killed and no other task failing (exit 137)"
		return 0
	fi
	echo "  FAIL: srun exit $2 (124: timed out after $RUN_TIMEOUT_S s); tasks: ${others:-none other}"
	return 1
}

part_slurm() {
	local t0 rc
	t0=$SECONDS
	if ! start_slurm; then
		skip_part slurm "$slurm_why"
		skip_part "srun with KEEL_PEERS" "no Slurm"
		skip_part "mpirun in a Slurm step" "no Slurm"
		return
	fi
	echo "launchers: slurm ($(srun --version)): one node up in $((SECONDS - t0)) s;" \
		"srun -n 4 --kill-on-bad-exit=0 --no-kill --wait=0, rendezvous at MASTER_ADDR:MASTER_PORT"
	t0=$SECONDS
	MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) launch timeout -k 5 $RUN_TIMEOUT_S \
		srun -n 4 --overcommit --kill-on-bad-exit=0 --no-kill --wait=0 "$TRAIN" "${TRAIN_ARGS[@]}" \
		>"$tmp/srun.log" 2>&1
	rc=$?
	if check_train slurm "$tmp/srun.log" && check_srun_tasks "$tmp/srun.log" $rc; then
		echo "  ok: $((SECONDS - t0)) s"
		passed+=(slurm)
	else
		failed+=(slurm)
	fi

	# docs/guide/launching.md's KEEL_PEERS line for Slurm (block distribution, 4 tasks on the one node):
	# no rendezvous, each rank binds its own entry.
	local peers base
	base=$(port)
	peers=$(scontrol show hostnames localhost | awk -v n=4 -v p="$base" \
		'{for (i = 0; i < n; i++) printf "%s%s:%d", (NR + i > 1 ? "," : ""), $1, p + i}')
	echo "launchers: srun -n 4 with KEEL_PEERS=$peers:"
	t0=$SECONDS
	KEEL_PEERS=$peers launch timeout -k 5 $RUN_TIMEOUT_S srun -n 4 --overcommit \
		--kill-on-bad-exit=0 --no-kill --wait=0 "$TRAIN" "${TRAIN_ARGS[@]}" \
		>"$tmp/peers.log" 2>&1
	rc=$?
	# With KEEL_PEERS the ranks leave their host's shared-memory region for restarted lives
	# (keel-run removes it; srun does not): named after the first rank's port.
	rm -f /dev/shm/keel-*-"$base"-0
	if check_train "srun with KEEL_PEERS" "$tmp/peers.log" &&
		check_srun_tasks "$tmp/peers.log" $rc; then
		echo "  ok: $((SECONDS - t0)) s"
		passed+=("srun with KEEL_PEERS")
	else
		failed+=("srun with KEEL_PEERS")
	fi

	if [ $have_ompi -eq 0 ]; then
		skip_part "mpirun in a Slurm step" "no Open MPI"
		return
	fi
	echo "launchers: mpirun inside srun -n 1 (every rank sees SLURM_PROCID=0, SLURM_NTASKS=1):"
	t0=$SECONDS
	run_mpirun "$tmp/step.log" srun -n 1 --kill-on-bad-exit=0
	rc=$?
	if check_train "mpirun in a Slurm step" "$tmp/step.log" &&
		check_mpirun_ranks "$tmp/step.log" $rc; then
		echo "  ok: $((SECONDS - t0)) s"
		passed+=("mpirun in a Slurm step")
	else
		failed+=("mpirun in a Slurm step")
	fi
}

t_start=$SECONDS
part_mpirun
part_slurm
stop_daemons
echo "launchers: ${#passed[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped" \
	"in $((SECONDS - t_start)) s${failed:+ (failed: ${failed[*]})}"
[ ${#failed[@]} -eq 0 ] || exit 1
[ ${#skipped[@]} -eq 0 ] || exit 77
exit 0
