#!/usr/bin/env bash
# tests/cli/dp-resume-fault.sh - a checkpoint written by 4 ranks resumes on 2 ranks and on 1 rank
# and continues like the uninterrupted run; a killed rank ends the job within 10 s naming the rank;
# a stalled rank makes the others exit 6 after --collective-timeout.
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
SPEC=$top_srcdir/tests/cli/dp-mlp.yaml
CMP="python3 $top_srcdir/tests/tools/stcmp.py"
R() { timeout 120 "$MPIRUN" -np "$1" "$DTRAIN" run "$SPEC" --threads 1 --quiet "${@:2}"; }

R 1 --out "$TMP/full" --max-steps 100 || fail "uninterrupted run"
R 4 --out "$TMP/four" --max-steps 50 || fail "4-rank first half"
for n in 2 1; do
  cp -r "$TMP/four" "$TMP/on$n"
  R $n --out "$TMP/on$n" --max-steps 100 --resume=auto >"$TMP/on$n.log" 2>&1 || fail "resume on $n ranks"
  $CMP "$TMP/full/model.safetensors" "$TMP/on$n/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
    && pass "4-rank checkpoint resumed on $n rank(s) = uninterrupted ($(cat "$TMP/cmp"))" || fail "resume on $n: $(cat "$TMP/cmp")"
  # the loss curve after the resume point matches the uninterrupted run's
  l1=$(grep '"split":"train"' "$TMP/full/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
  l2=$(grep '"split":"train"' "$TMP/on$n/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
  [ -n "$l2" ] && pass "train loss at step 100: $l1 uninterrupted, $l2 resumed on $n" || fail "no metrics after resume"
done

# a killed rank: the job ends within 10 s, non-zero, naming the rank
sed 's/epochs: 4/epochs: 100000/' "$SPEC" > "$TMP/long.yaml"
timeout 60 "$MPIRUN" -np 4 "$DTRAIN" run "$TMP/long.yaml" --out "$TMP/kill" --threads 1 --quiet >"$TMP/kill.log" 2>&1 &
job=$!
sleep 2
victim=$(pgrep -f "^$DTRAIN run $TMP/long.yaml --out $TMP/kill" | sed -n 2p)
t0=$(date +%s%N)
kill -9 "$victim"
wait $job; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$rc" != 0 ] && [ "$ms" -lt 10000 ] && pass "killed rank: job ended in $ms ms with status $rc" || fail "killed rank: status $rc after $ms ms"
grep -q 'rank [0-9]' "$TMP/kill.log" && pass "the message names the rank: $(grep -o 'process rank [0-9]*[^.]*' "$TMP/kill.log" | head -1)" || { fail "no rank named"; cat "$TMP/kill.log"; }

# a stalled rank: the others give up after the collective timeout with exit 6
timeout 60 "$MPIRUN" -np 4 "$DTRAIN" run "$TMP/long.yaml" --out "$TMP/stall" --threads 1 --quiet --collective-timeout 3 >"$TMP/stall.log" 2>&1 &
job=$!
sleep 2
victim=$(pgrep -f "^$DTRAIN run $TMP/long.yaml --out $TMP/stall" | sed -n 2p)
kill -STOP "$victim"
wait $job; rc=$?
kill -9 "$victim" 2>/dev/null
[ "$rc" = 6 ] && pass "stalled rank: exit 6" || fail "stalled rank: exit $rc"
grep -q 'did not complete within 3 s' "$TMP/stall.log" && pass "timeout message: $(grep -m1 -o 'fatal: .*' "$TMP/stall.log")" || { fail "no timeout message"; cat "$TMP/stall.log"; }
finish
