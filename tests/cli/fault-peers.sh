#!/usr/bin/env bash
# tests/cli/fault-peers.sh - lost and silent peers under real mpirun, driven by DTRAIN_FAULT at a
# fixed rank and step: a rank hung inside a collective (as under SIGSTOP) or stuck computing is
# named by the rank that ends the job with exit 6, whichever rank it is, every time; a rank
# killed or exiting early ends the job as dtrain(1) EXIT STATUS says mpirun does; SIGUSR1 sent to
# mpirun stops the job with a checkpoint and exit 75, SIGTERM with exit 1 (Open MPI's choice).
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
SPEC=$TMP/long.yaml
sed 's/^  epochs: 4/  epochs: 100000\n  checkpoint_every: 10/' "$top_srcdir/tests/cli/dp-mlp.yaml" > "$SPEC"
grep -q 'checkpoint_every: 10' "$SPEC" || { echo "FAIL: could not derive $SPEC"; exit 1; }
# fault NP WANT NAME FAULT ARGS...: an NP-rank run with DTRAIN_FAULT=FAULT that must exit WANT
# within the 60 s of its timeout (the run itself would go on for hours)
fault() {
  local np=$1 want=$2 name=$3 f=$4; shift 4
  local t0=$(date +%s)
  expect_rc "$want" "$name [np $np, DTRAIN_FAULT=$f]" env DTRAIN_FAULT="$f" timeout -s KILL 60 "$MPIRUN" -np "$np" \
    "$DTRAIN" run "$SPEC" --threads 1 --quiet --out "$TMP/o$RANDOM" "$@"
  SECS=$(( $(date +%s) - t0 ))
}
has() { grep -qE -- "$1" "$TMP/err" && pass "$2" || { fail "$2: no /$1/ in stderr:"; sed 's/^/  | /' "$TMP/err" | head -20; }; }
# only_named N: the fatal timeout message lists rank N and no other
only_named() {
  local line; line=$(grep -m1 'did not complete within' "$TMP/err")
  [ "$(printf '%s\n' "$line" | grep -oE '\(not answering: ranks? .*' | grep -oE '(rank |, )[0-9]+ \(' | grep -oE '[0-9]+')" = "$1" ] \
    && pass "only rank $1 is named" || fail "wanted only rank $1 named: $line"
}

# 6: a rank stops answering inside the gradient allreduce of step 5 (as SIGSTOP would leave it);
# the old arrival check said "every rank reached the collective" here. The others may still finish
# step 5's allreduce (the hung rank had posted its part, and no per-step rendezvous follows since
# the signal agreement overlaps the next step): they then wait in step 6's.
fault 2 6 "rank 1 hangs in a collective" 'hang@rank=1,step=5' --collective-timeout 3
has "^dtrain\[rank 0/2\]: fatal: .* at step [56] did not complete within 3 s \(not answering: rank 1 \(silent [0-9.]+ s, last at step 5\)\)$" \
  "rank 0 names rank 1 and where it was last ($SECS s)"
fault 2 6 "rank 0 hangs in a collective" 'hang@rank=0,step=5' --collective-timeout 3
has "^dtrain\[rank 1/2\]: fatal: .* at step [56] did not complete within 3 s \(not answering: rank 0 \(silent [0-9.]+ s\)\)$" \
  "rank 1 names rank 0 ($SECS s)"
for v in 1 2 3; do
  fault 4 6 "rank $v of 4 hangs" "hang@rank=$v,step=5" --collective-timeout 4
  has "^dtrain\[rank 0/4\]: fatal: .* at step [56] did not complete" "rank 0 ends the job ($SECS s)"
  only_named "$v"
done
# a straggler stuck in its computation never reaches the collective of step 4
fault 2 6 "rank 1 stuck computing" 'slow@rank=1,step=4,secs=600' --collective-timeout 3
has "^dtrain\[rank 0/2\]: fatal: .* at step 4 did not complete within 3 s \(not answering: rank 1 \(silent [0-9.]+ s, last at step 3\)\)$" \
  "rank 0 names rank 1, last seen in step 3 ($SECS s)"

# a rank killed with SIGKILL: Open MPI ends the job at once with 128 + 9 and names the rank
fault 2 137 "rank 1 killed by SIGKILL" 'kill@rank=1,step=5'
has "process rank 1 .*exited on signal 9" "mpirun names rank 1 and the signal"
[ "$SECS" -le 15 ] && pass "the job ended in $SECS s" || fail "the job took $SECS s to end"
# a rank that exits without MPI_Finalize: its status, or 1 for 0, and mpirun names it
fault 2 3 "rank 1 exits 3 at step 5" 'exit@rank=1,step=5,code=3'
has "Exit code: +3" "mpirun reports the status"
fault 2 1 "rank 1 exits 0 at step 5" 'exit@rank=1,step=5,code=0'
has "process rank 1 with PID" "mpirun names rank 1"

# signals sent to mpirun itself, once the run is past its first checkpoint (the handlers are set)
# signal_mpirun SIG WANT: SIG to mpirun; mpirun must exit WANT and the ranks must have checkpointed
signal_mpirun() {
  local sig=$1 want=$2 out=$TMP/m$1
  timeout -s KILL 60 "$MPIRUN" -np 2 "$DTRAIN" run "$SPEC" --threads 1 --quiet --out "$out" >"$TMP/err" 2>&1 &
  local tpid=$! k
  for k in $(seq 300); do [ -s "$out/checkpoints/latest" ] && break; sleep 0.1; done
  kill -"$sig" "$(pgrep -P $tpid)"
  wait $tpid; local rc=$?
  [ "$rc" = "$want" ] && pass "SIG$sig to mpirun: exit $rc" || { fail "SIG$sig to mpirun: exit $rc, wanted $want"; sed 's/^/  | /' "$TMP/err" | head; }
  has "^dtrain\[rank 0/2\]: stopped by SIG$sig after step [0-9]+; checkpoint committed" "SIG$sig: the ranks checkpointed"
  local step; step=$(sed -n 's/^step-0*//p' "$out/checkpoints/latest")
  expect_rc 0 "SIG$sig: resume from step $step" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" run "$SPEC" --threads 1 --quiet \
    --out "$out" --resume --max-steps $((step + 5))
}
signal_mpirun USR1 75
signal_mpirun TERM 1

# a 3-stage 1f1b pipeline, rank 1 stopped from outside (SIGSTOP) past step 100: the message names
# that step, not step 1 (the pipeline's communicators kept a step of their own that nobody set)
sed 's/^  epochs: 4/  epochs: 100000/' "$top_srcdir/tests/cli/pp-mlp.yaml" >"$TMP/pp-long.yaml"
printf 'partition:\n  strategy: model\n  pipeline: 3\n  schedule: 1f1b\n  micro_batches: 4\n' >"$TMP/pp3.yaml"
timeout -s KILL 60 "$MPIRUN" -np 3 "$DTRAIN" run "$TMP/pp-long.yaml" --cluster "$TMP/pp3.yaml" --threads 1 \
  --out "$TMP/pp" --progress-steps 1 --collective-timeout 4 >"$TMP/pp.out" 2>"$TMP/err" &
tpid=$!
for k in $(seq 600); do grep -qE 'step [0-9]{3,}/' "$TMP/pp.out" 2>/dev/null && break; sleep 0.1; done
for p in $(pgrep -f "dtrain run $TMP/pp-long.yaml"); do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && kill -STOP "$p"
done
wait $tpid; rc=$?
[ "$rc" = 6 ] && pass "pipeline stage stopped: exit 6" || fail "pipeline stage stopped: exit $rc, wanted 6"
line=$(grep -m1 'did not complete within' "$TMP/err")
n=$(printf '%s' "$line" | sed -n 's/.* at step \([0-9]*\) did not complete.*/\1/p')
last=$(printf '%s' "$line" | sed -n 's/.*last at step \([0-9]*\).*/\1/p')
[ "${n:-0}" -ge 100 ] && [ "${last:-0}" -ge 100 ] && [ $((n - last)) -le 2 ] \
  && pass "names the step it stalled at ($n, rank 1 last at $last)" || fail "wrong step: $line"
pkill -CONT -f "dtrain run $TMP/pp-long.yaml" 2>/dev/null
finish
