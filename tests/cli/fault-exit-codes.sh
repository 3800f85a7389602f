#!/usr/bin/env bash
# tests/cli/fault-exit-codes.sh - DTRAIN_FAULT drives each exit status of a 2-rank run under real
# mpirun, at a fixed rank and step: 2 (a malformed value), 0 (a straggler below the timeout, the
# weights unchanged), 1 (a failing MPI call, through dtrain's MPI error handler), 3 (a checkpoint
# write failing on a full disk), 4 and the resume after a SIGKILL in the middle of a checkpoint
# write, 5 (NaN gradient, NaN loss), 75 (a signal at step 7). Every resume must end bitwise equal
# to the uninterrupted run. Exits 6 and what mpirun does to lost ranks: fault-peers.sh.
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
SPEC=$TMP/ck.yaml
# dp-mlp: 32 steps per epoch; a checkpoint every 10 steps, 40 steps per run
sed 's/^  epochs: 4/  epochs: 2\n  checkpoint_every: 10/' "$top_srcdir/tests/cli/dp-mlp.yaml" > "$SPEC"
grep -q 'checkpoint_every: 10' "$SPEC" || { echo "FAIL: could not derive $SPEC"; exit 1; }
R() { timeout 120 "$MPIRUN" -np 2 "$DTRAIN" run "$SPEC" --threads 1 --quiet --max-steps 40 "$@"; }
# fault WANT NAME FAULT ARGS...: one 2-rank run with DTRAIN_FAULT=FAULT that must exit WANT
fault() {
  local want=$1 name=$2 f=$3; shift 3
  expect_rc "$want" "$name [DTRAIN_FAULT=$f]" env DTRAIN_FAULT="$f" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" run \
    "$SPEC" --threads 1 --quiet --max-steps 40 "$@"
}
# has ERE WHAT: stderr of the last expect_rc matches
has() { grep -qE -- "$1" "$TMP/err" && pass "$2" || { fail "$2: no /$1/ in stderr:"; sed 's/^/  | /' "$TMP/err" | head -20; }; }
latest_is() { [ "$(cat "$1/checkpoints/latest" 2>/dev/null)" = "$2" ] && pass "$3: latest is $2" \
  || fail "$3: latest is '$(cat "$1/checkpoints/latest" 2>/dev/null)', wanted $2"; }
same_weights() { cmp -s "$TMP/full/model.safetensors" "$1/model.safetensors" \
  && pass "$2: weights bitwise equal to the uninterrupted run" || fail "$2: weights differ from the uninterrupted run"; }
no_tmp() { ls -a "$1/checkpoints" | grep -q '^\.tmp-' && fail "$2: a temporary is left: $(ls -a "$1/checkpoints")" \
  || pass "$2: no temporary left in checkpoints/"; }

R --out "$TMP/full" || fail "uninterrupted run"

# 2: a malformed value is refused before anything runs, on one rank or many
for v in 'nan_grd@step=3' 'nan_grad@rank=one' 'step=3' 'hang@step=0' 'exit@code=300' 'slow@secs=x' 'kill,rank=1,rank=0'; do
  expect_rc 2 "malformed DTRAIN_FAULT='$v'" env DTRAIN_FAULT="$v" "$DTRAIN" run "$SPEC" --out "$TMP/u" --quiet
  has "^dtrain: error: DTRAIN_FAULT='.*': .*dtrain\(1\)" "the message quotes the value and points at dtrain(1)"
done
[ ! -e "$TMP/u" ] && pass "nothing was written" || fail "a refused run created $TMP/u"
expect_rc 2 "dtrain check refuses it too" env DTRAIN_FAULT='hang@rank' "$DTRAIN" check "$SPEC"
fault 2 "malformed under mpirun" 'nan_loss@step=-4' --out "$TMP/u"
has "step '-4' is not a step number" "under mpirun: the reason"
fault 2 "a rank the job does not have" 'nan_grad@rank=2,step=3' --out "$TMP/u2"
has "nan_grad@rank=2 names a rank this job does not have \(2 ranks\)" "names the rank and the job size"

# 0: inert when empty; a straggler below the collective timeout changes nothing
fault 0 "empty value" '' --out "$TMP/empty"
same_weights "$TMP/empty" "empty DTRAIN_FAULT"
fault 0 "rank 1 sleeps 50 ms per step from step 3" 'slow@rank=1,step=3,secs=0.05' --out "$TMP/slow" --collective-timeout 5
has "^dtrain\[rank 1/2\]: note: DTRAIN_FAULT: slow at step 3$" "the fault says when it fires"
same_weights "$TMP/slow" "straggler"

# 1: a failing MPI call ends in the contract, naming rank and call, without Open MPI's fatal banner
fault 1 "invalid MPI call on rank 1" 'mpi_error@rank=1,step=4' --out "$TMP/mpi"
has "^dtrain\[rank 1/2\]: fatal: MPI_Allreduce failed: MPI_ERR_COUNT" "the MPI error handler names rank 1 and MPI_Allreduce"
grep -qE 'MPI_ERRORS_ARE_FATAL|An error occurred in' "$TMP/err" && fail "Open MPI's default handler ran" \
  || pass "not Open MPI's MPI_ERRORS_ARE_FATAL abort"

# 3: the disk fills while checkpoint 20 is written: the one of step 10 stays, and resume works
fault 3 "checkpoint write fails (ENOSPC)" 'io_error@step=20' --out "$TMP/io"
has "^dtrain\[rank 0/2\]: error: checkpoint: .*/model.safetensors: write failed: No space left on device" \
  "the message names the file and the reason"
latest_is "$TMP/io" step-00000010 "after the failed write"
no_tmp "$TMP/io" "after the failed write"
expect_rc 0 "resume after the I/O error" R --out "$TMP/io" --resume
same_weights "$TMP/io" "resumed after the I/O error"

# 4: SIGKILL in the middle of writing checkpoint 20: the half-written one is refused (4), the last
# good one is intact and resumes to the same weights
fault 137 "SIGKILL mid-checkpoint (mpirun: 128 + 9)" 'ckpt_kill_mid_write@step=20' --out "$TMP/ck"
latest_is "$TMP/ck" step-00000010 "after the kill"
# the first checkpoint the writer commits at or after step 20: 20, or a later one (30, or the run's
# last, e.g. 32) when a slow disk had it coalesced with a newer one (dtrain-model(5), keep_checkpoints)
half=""
for d in "$TMP/ck/checkpoints/.tmp-step-"*; do
  [ -d "$d" ] || continue
  n=$(basename "$d" | sed -E 's/^\.tmp-step-0*([0-9]+)-.*/\1/')
  [ "$n" -ge 20 ] 2>/dev/null && { half=$d; break; }
done
[ -n "$half" ] && [ -s "$half/model.safetensors" ] && [ ! -e "$half/state.json" ] \
  && pass "the kill came mid-write: $(basename "$half") holds the model file, not state.json" \
  || fail "no half-written checkpoint: $(ls -a "$TMP/ck/checkpoints")"
[ -n "$half" ] && { expect_rc 4 "resume from the half-written directory" R --out "$TMP/ck4" --resume="$half"
  has "^dtrain\[rank [01]/2\]: error: .*state.json" "the refusal names the missing state.json"; }
# loading checks every byte of checkpoint 10 (crc32 of each file) before training on from it
expect_rc 0 "resume=auto after the kill" R --out "$TMP/ck" --resume
same_weights "$TMP/ck" "resumed after the kill"
no_tmp "$TMP/ck" "after the resumed run's checkpoints"

# 5: NaN in the gradient of rank 1 at step 5, in the loss of rank 0 at step 3
fault 5 "NaN gradient on rank 1" 'nan_grad@rank=1,step=5' --out "$TMP/ng"
has "^dtrain\[rank 1/2\]: fatal: non-finite gradient norm at step 5 \(tensor: fc1.weight \(gradient\)\)" \
  "names rank 1, step 5 and the tensor"
fault 5 "NaN loss on rank 0" 'nan_loss@rank=0,step=3' --out "$TMP/nl"
has "^dtrain\[rank 0/2\]: fatal: non-finite loss \(nan\) at step 3" "names rank 0 and step 3"

# 75: rank 1 gets SIGTERM at the start of step 7: the ranks agree on it while step 8 runs (the
# agreement overlaps the next step), so both stop after step 8, checkpoint 8, exit 75
fault 75 "SIGTERM on rank 1 at step 7" 'signal@rank=1,step=7,sig=TERM' --out "$TMP/sig"
has "^dtrain\[rank 0/2\]: stopped by SIGTERM after step 8; checkpoint committed in .*; continue with:$" "rank 0 reports the stop"
latest_is "$TMP/sig" step-00000008 "after the signal"
expect_rc 0 "resume after the signal" R --out "$TMP/sig" --resume
same_weights "$TMP/sig" "resumed after the signal"
finish
