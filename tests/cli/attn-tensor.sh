#!/usr/bin/env bash
# tests/cli/attn-tensor.sh - attention split by heads (Megatron-LM) under real mpirun, 30 SGD steps
# of the two-block transformer of attn-spec.sh (attention dropout on): tensor 2 (heads, and the MLPs
# column/row) on 2 ranks and data 2 x tensor 2 on 4 within 1e-5 of 1 rank (the dropout masks drawn
# per global head); checkpoints cut and gathered per head block: tensor 2's resumed under 1 rank,
# 1 rank's under tensor 2; check and plan show the split; heads that do not divide by the tensor
# size refused at the key (splits:, else tensor:).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
. "$(dirname "$0")/attn-spec.sh"

cluster acc4 'partition: {micro_batch: 4}'
cluster t2 'partition: {strategy: model, tensor: 2, micro_batch: 4}'
cluster d2t2 'partition: {strategy: hybrid, data: 2, tensor: 2, micro_batch: 4}'

( cd "$top_srcdir" && timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$S" --cluster "$TMP/t2.yaml" ) >"$TMP/check.out" 2>&1
grep -q 'tensor splits: h0_attn heads, h0_fc1 column, h0_fc2 row, h1_attn heads, h1_fc1 column, h1_fc2 row' "$TMP/check.out" \
  && pass "check shows the heads split" || fail "check's splits: $(grep -i split "$TMP/check.out")"
( cd "$top_srcdir" && timeout 120 "$DTRAIN" plan "$S" --ranks 2 --no-scaling --top 40 ) >"$TMP/plan.out" 2>&1
grep -q 'tensor 2; h0_attn heads, h0_fc1 column, h0_fc2 row' "$TMP/plan.out" \
  && pass "plan prices the heads split" || fail "plan: no tensor 2 layout with heads: $(grep 'tensor 2' "$TMP/plan.out")"
mpi_run ref 1 "$S" acc4 --max-steps 30
mpi_run t2 2 "$S" t2 --max-steps 30
close ref t2 "transformer, tensor 2 (heads) = 1 rank"
mpi_run d2t2 4 "$S" d2t2 --max-steps 30
close ref d2t2 "transformer, data 2 x tensor 2 = 1 rank"

# checkpoints: tensor 2's step 20 resumed under 1 rank, 1 rank's step 20 under tensor 2
mpi_run t2a 2 "$S" t2 --max-steps 20
mpi_run refa 1 "$S" acc4 --max-steps 20
if ls -d "$TMP"/t2a/checkpoints/step-* >/dev/null 2>&1 && ls -d "$TMP"/refa/checkpoints/step-* >/dev/null 2>&1; then
  cp -r "$TMP/t2a" "$TMP/r1"
  mpi_run r1 1 "$S" acc4 --max-steps 30 --resume
  close ref r1 "transformer, tensor 2 checkpoint resumed under 1 rank"
  cp -r "$TMP/refa" "$TMP/r2"
  mpi_run r2 2 "$S" t2 --max-steps 30 --resume
  close ref r2 "transformer, 1 rank's checkpoint resumed under tensor 2"
else
  fail "no checkpoint from the tensor or the 1-rank run"
fi

# 3 heads on a tensor group of 2: refused at the splits key
sed 's/heads: 2/heads: 3, kernel: plain/; s/dim: 16/dim: 18/; s/units: 16}/units: 18}/' "$S" >"$TMP/h3.yaml"
printf 'partition:\n  strategy: model\n  tensor: 2\n  splits: {h0_attn: heads}\n' >"$TMP/h3c.yaml"
( cd "$top_srcdir" && timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$TMP/h3.yaml" --cluster "$TMP/h3c.yaml" ) >"$TMP/h3.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "h3c.yaml:4:12: error: splits: layer 'h0_attn' (attention) heads 3 do not divide into 2 shards" "$TMP/h3.out"; then
  pass "heads not divisible by the tensor size refused at the key"
else
  fail "heads 3 on tensor 2: rc $rc: $(cat "$TMP/h3.out")"
fi
printf 'partition:\n  strategy: model\n  tensor: 2\n' >"$TMP/h3a.yaml"
( cd "$top_srcdir" && timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$TMP/h3.yaml" --cluster "$TMP/h3a.yaml" ) >"$TMP/h3a.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "h3a.yaml:3:3: error: tensor 2 splits layer 'h0_attn' (attention) by heads, but heads 3 do not divide" "$TMP/h3a.out"; then
  pass "the automatic splits: heads not divisible refused at the tensor key"
else
  fail "heads 3 on tensor 2, automatic splits: rc $rc: $(cat "$TMP/h3a.out")"
fi
finish
