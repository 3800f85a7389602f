#!/usr/bin/env bash
# tests/cli/resnet.sh - models/resnet.yaml (a branched graph: residual blocks, projection shortcuts)
# on real data, cut short for CI: 100 steps must clear 72% test accuracy on all 10000 test images
# (the full run reaches >= 93.0%); the PyTorch module bench/torch_models.py builds from the spec
# loads its model.safetensors with a strict load_state_dict and reproduces dtrain's test loss
# (within 1e-4) and accuracy (within 2 images) when torch is installed; 2 ranks of data parallelism
# equal 1 rank accumulating over the same 16-sample slices within 1e-5 (the weights: batch norm
# normalises each slice alike in both; its running statistics, averaged over ranks, are left out).
. "$(dirname "$0")/lib.sh"
if [ ! -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: dataset-fashion-mnist is not installed"; exit 77
fi
M="$top_srcdir/models"
THREADS=${DTRAIN_TEST_THREADS:-2}
last() { grep '"split":"test"' "$TMP/$1/metrics.jsonl" 2>/dev/null | tail -1 | sed "s/.*\"$2\":\([0-9.e+-]*\).*/\1/"; }

expect_rc 0 "train resnet for 100 steps" "$DTRAIN" run "$M/resnet.yaml" --epochs 1 --max-steps 100 \
  --threads "$THREADS" --out "$TMP/ci" --quiet
acc=$(last ci accuracy)
loss=$(last ci loss)
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.72) }'; then
  pass "resnet: test accuracy $acc >= 0.72"
else
  fail "resnet: test accuracy '${acc}' < 0.72"
fi

# PyTorch parity: the same network, the same weights, the same test set
PY=${TORCH_PYTHON:-}
for p in "$PY" /work/torchenv/bin/python python3; do
  [ -n "$p" ] && "$p" -c 'import torch, safetensors, yaml' 2>/dev/null && { PY=$p; break; }
  PY=
done
if [ -z "$PY" ]; then
  echo "skip: PyTorch parity (no python with torch, safetensors and yaml)"
else
  out=$(FASHION=/usr/share/datasets/fashion-mnist "$PY" "$top_srcdir/bench/torch_models.py" "$M/resnet.yaml" \
        --load "$TMP/ci/model.safetensors" --json --threads "$THREADS" 2>&1)
  tl=$(printf '%s\n' "$out" | sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p')
  ta=$(printf '%s\n' "$out" | sed -n 's/.*"accuracy": \([0-9.e+-]*\).*/\1/p')
  if [ -n "$tl" ] && awk -v a="$tl" -v b="$loss" -v x="$ta" -v y="$acc" \
       'BEGIN { d = a - b; e = x - y; exit !(d < 1e-4 && d > -1e-4 && e <= 2e-4 && e >= -2e-4) }'; then
    pass "torch (strict load_state_dict): test loss $tl, accuracy $ta = dtrain's $loss, $acc"
  else
    fail "torch parity: $out vs dtrain loss $loss accuracy $acc"
  fi
fi

# data parallelism: 2 ranks = 1 rank over the same slices
if command -v "$MPIRUN" >/dev/null; then
  cluster m16 'partition: {micro_batch: 16}'
  cluster d2 'partition: {strategy: data}'
  mpi_run r1 1 "$M/resnet.yaml" m16 --batch 32 --max-steps 10
  mpi_run r2 2 "$M/resnet.yaml" d2 --batch 32 --max-steps 10
  $CMP "$TMP/r1/model.safetensors" "$TMP/r2/model.safetensors" --tol 1e-5 --skip running_ >"$TMP/cmp" 2>&1 \
    && pass "resnet, 2 ranks = 1 rank ($(cat "$TMP/cmp"))" || fail "resnet 2 ranks: $(cat "$TMP/cmp")"
else
  echo "skip: data parallelism (no mpirun)"
fi
finish
