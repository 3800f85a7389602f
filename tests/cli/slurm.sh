#!/usr/bin/env bash
# tests/cli/slurm.sh - the Slurm examples on a real single-node Slurm (tests/slurm/start-slurm.sh):
# examples/slurm/train-data-parallel.sbatch trains on 4 ranks under srun and completes; the same
# job, sent SIGUSR1 (what --signal=USR1@60 does before the time limit), checkpoints, requeues
# itself and completes from the checkpoint; mpirun-in-allocation.sbatch also completes.
# Skips (77) when not root or when Slurm cannot be brought up (e.g. the packages munge slurmctld
# slurmd slurm-client are missing: DTRAIN_SLURM_INSTALL=1 lets start-slurm.sh apt-get them).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to run Slurm's daemons"; exit 77; }
SL=$top_srcdir/tests/slurm
EX=$top_srcdir/examples/slurm
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }
say() { printf '[%6d ms] %s\n' "$(ms)" "$*"; }

# Leave a Slurm that was already up running; stop the one we start.
started=0; ids=
scontrol ping 2>/dev/null | grep -q 'is UP' || started=1
cleanup() {
  [ -n "$ids" ] && scancel $ids 2>/dev/null
  [ $started = 1 ] && "$SL/stop-slurm.sh" >"$TMP/stop.log" 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT
if ! DTRAIN_SLURM_INSTALL=${DTRAIN_SLURM_INSTALL:-0} DTRAIN_SLURM_TIMEOUT=30 \
     timeout 60 "$SL/start-slurm.sh" >"$TMP/start.log" 2>&1; then
  sed 's/^/  | /' "$TMP/start.log" | tail -n 15
  echo "SKIP: could not bring up Slurm"; exit 77
fi
say "Slurm is up ($([ $started = 1 ] && echo started by this test || echo already running))"

# field ID NAME: one field of `scontrol show job`
field() { scontrol show job -o "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 | cut -d= -f2-; }
# wait_job ID SECONDS: poll every 0.2 s (sbatch --wait backs off to tens of seconds), print each
# change of state, leave the final state in $state
wait_job() {
  local end=$((SECONDS + $2)) prev='' s
  state=
  while [ $SECONDS -lt $end ]; do
    s="$(field "$1" JobState) restarts=$(field "$1" Restarts)"
    [ "$s" != "$prev" ] && say "job $1: $s"
    prev=$s; state=${s%% *}
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 0 ;; esac
    sleep 0.2
  done
  return 1
}
# submit SCRIPT OUT ARGS [defaults]: submit with absolute paths (the job runs as root on this
# filesystem); the job id goes to $id, its output to $TMP/job-$id.out. With "defaults" the job
# starts in the source tree and the script picks its own model and cluster spec (models/mlp.yaml,
# examples/slurm/cluster.yaml), as it does for a user who sets nothing.
submit() {
  local env=(DTRAIN="$DTRAIN" DTRAIN_OUT="$2" DTRAIN_ARGS="$3") dir=$TMP
  if [ "${4:-}" = defaults ]; then dir=$top_srcdir
  else env+=(DTRAIN_MODEL="$top_srcdir/tests/cli/dp-mlp.yaml" DTRAIN_CLUSTER="$EX/cluster.yaml"); fi
  id=$(env -u DTRAIN_MODEL -u DTRAIN_CLUSTER "${env[@]}" \
       sbatch --parsable --overcommit --chdir "$dir" -o "$TMP/job-%j.out" "$EX/$1")
  ids="$ids $id"
  say "submitted $1 as job $id${4:+ (script defaults)}: dtrain run ... $3"
}
show_job() { echo "  job $1 output:"; tr '\r' '\n' < "$TMP/job-$1.out" | grep -v '^epoch .*\]' | tail -n 25 | sed 's/^/  | /'; }
# check_done ID OUT STEPS: COMPLETED, exit 0, 4 ranks, a model and a final checkpoint
check_done() {
  local what="job $1 (${2##*/})"
  [ "$state" = COMPLETED ] && [ "$(field "$1" ExitCode)" = 0:0 ] && pass "$what: COMPLETED, exit 0" \
    || { fail "$what: state $state, exit $(field "$1" ExitCode)"; show_job "$1"; }
  grep -q ': command not found' "$TMP/job-$1.out" && { fail "$what: the batch script has a shell error"; show_job "$1"; }
  grep -q '^dtrain .* 4 ranks,' "$TMP/job-$1.out" && pass "$what: 4 ranks" || fail "$what: no '4 ranks' header"
  [ -s "$2/model.safetensors" ] && pass "$what: model.safetensors written" || fail "$what: no model.safetensors"
  grep -q "wrote .*model.safetensors and checkpoint step $3\$" "$TMP/job-$1.out" \
    && pass "$what: final checkpoint at step $3" || fail "$what: no final checkpoint at step $3"
}

# 1. a short run on 4 ranks under srun
submit train-data-parallel.sbatch "$TMP/small" "--max-steps 40"
wait_job "$id" 60
check_done "$id" "$TMP/small" 40

# 2. stop and requeue. scancel -s USR1 (without -b) signals the job steps, i.e. the ranks, as
#    --signal=USR1@60 does 60 s before the time limit; dtrain checkpoints and exits 75, the batch
#    script requeues the job, which restarts (after AuthInfo=cred_expire, 10 s here) and resumes.
#    The script's own default model (Fashion-MNIST MLP, about 3 ms a step on 4 ranks of 2 cores)
#    runs 4000 steps, so the signal lands well inside the run: the tiny dp-mlp ran 1000 steps in
#    0.6 s, finishing before scancel's signal arrived.
submit train-data-parallel.sbatch "$TMP/long" "--max-steps 4000" defaults
end=$((SECONDS + 30))       # wait until training runs (the signal handlers are installed)
until grep -q 'epoch 1/' "$TMP/job-$id.out" 2>/dev/null; do
  case $(field "$id" JobState) in PENDING|RUNNING|CONFIGURING) ;; *) break ;; esac
  [ $SECONDS -lt $end ] || break
  sleep 0.2
done
say "job $id is training: scancel -s USR1 $id"
scancel -s USR1 "$id"
wait_job "$id" 300     # about 30 s here; a sanitized build runs it several times slower
out=$TMP/job-$id.out
step=$(sed -n 's/.*stopped by SIG[A-Z0-9]* after step \([0-9]*\); checkpoint committed.*/\1/p' "$out" | head -n 1)
[ -n "$step" ] && pass "job $id: stopped by SIGUSR1 with a checkpoint at step $step" || fail "job $id: no checkpoint on SIGUSR1"
grep -q 'checkpointed (exit 75): requeueing' "$out" && pass "job $id: dtrain exited 75, the script requeued the job" \
  || fail "job $id: no requeue after exit 75"
[ "$(field "$id" Restarts)" = 1 ] && grep -q "^== job $id restart 1 " "$out" \
  && pass "job $id: ran again with SLURM_RESTART_COUNT=1" || fail "job $id: not restarted once (Restarts=$(field "$id" Restarts))"
grep -q "^resume: .*step-0*$step (step $step," "$out" && pass "job $id: resumed from step $step" \
  || fail "job $id: did not resume from step ${step:-?}"
check_done "$id" "$TMP/long" 4000

# 3. the mpirun-inside-the-allocation example, short
submit mpirun-in-allocation.sbatch "$TMP/mpirun" "--max-steps 40"
wait_job "$id" 60
check_done "$id" "$TMP/mpirun" 40

ids=
say "done"
finish
