#!/usr/bin/env bash
# tests/cli/tp-equivalence.sh - tensor parallelism under real mpirun against 1 rank (max|W - W1| /
# max|W1| <= 1e-5, the sums over the group only reordering float additions): fc column+row pairs
# (dropout between them, clipping on the whole model's norm), conv channel splits, real-data lenet
# and cnn-bn, data 2 x tensor 2, tensor 2 x pipeline 2, resharding a tensor x pipeline checkpoint
# into data 4 and 1 rank, a hung shard named, a stop signal resumed, and split mistakes at their keys.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
M=$top_srcdir/models
cluster one 'partition: {strategy: data}'
cluster acc8 'partition: {micro_batch: 8}'
cluster t2 'partition: {strategy: model, tensor: 2}'
cluster t2x 'partition: {strategy: model, tensor: 2, splits: {fc1: column, fc2: row, fc3: column}}'
cluster d2 'partition: {strategy: data}'
cluster d2t2 'partition: {strategy: hybrid, data: 2, tensor: 2}'
cluster t2p2 'partition: {strategy: model, tensor: 2, pipeline: 2, micro_batches: 4}'
cluster d4 'partition: {strategy: data}'

# fc pairs: the MLP with dropout between fc1 (column) and fc2 (row), batch norm, clipping
mpi_run ref 1 "$D/pp-mlp.yaml" one
mpi_run t2 2 "$D/pp-mlp.yaml" t2
mpi_run t2x 2 "$D/pp-mlp.yaml" t2x
close ref t2 "mlp, tensor 2 (auto: fc1 column, fc2 row) = 1 rank"
close ref t2x "mlp, tensor 2 (fc1 column, fc2 row, fc3 column gathered) = 1 rank"
grep -q '"split":"test"' "$TMP/t2/metrics.jsonl" && [ "$(tail -1 "$TMP/t2/metrics.jsonl" | cut -d, -f4-5)" = "$(tail -1 "$TMP/ref/metrics.jsonl" | cut -d, -f4-5)" ] \
  && pass "test loss and accuracy under tensor 2 = 1 rank" || fail "test metrics: $(tail -1 "$TMP/t2/metrics.jsonl") vs $(tail -1 "$TMP/ref/metrics.jsonl")"

# conv channel splits: a small CNN, lenet and cnn-bn on Fashion-MNIST, 50 steps
mpi_run cref 1 "$D/dp-cnn.yaml" one --max-steps 50
mpi_run ct2 2 "$D/dp-cnn.yaml" t2 --max-steps 50
close cref ct2 "cnn, tensor 2 (conv channels) = 1 rank"
# The bundled lenet and cnn-bn train with AdamW (lr 0.002), which turns a last-bit change in the
# forward pass into a different update wherever a gradient is near zero: 1 rank with OpenBLAS's
# Haswell kernels instead of SkylakeX's already ends 7e-3 (lenet) and 9e-4 (cnn-bn) away after 50
# steps, so no split can promise 1e-5 there. The same layers with momentum SGD (lr 0.005), where
# that 1-rank control stays below 1e-7, are what the equivalence is measured on.
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  for m in lenet cnn-bn; do
    sed 's|optimizer: {type: adamw, lr: 0.002}|optimizer: {type: momentum, lr: 0.005}|' "$M/$m.yaml" > "$TMP/$m.yaml"
    grep -q 'type: momentum' "$TMP/$m.yaml" || fail "$m.yaml: optimizer line not found"
    mpi_run "${m}1" 1 "$TMP/$m.yaml" one --max-steps 50 --batch 64
    mpi_run "${m}2" 2 "$TMP/$m.yaml" t2 --max-steps 50 --batch 64
    close "${m}1" "${m}2" "$m on Fashion-MNIST (momentum SGD), tensor 2 = 1 rank"
  done
else
  echo "SKIP: lenet and cnn-bn (no dataset-fashion-mnist)"
fi

# grids: data 2 x tensor 2 against data parallelism over 2 (the same replica slices, batch-norm
# statistics per replica in both); tensor 2 x pipeline 2 against 1 rank accumulating micro-batches
mpi_run d2 2 "$D/pp-mlp.yaml" d2
mpi_run d2t2 4 "$D/pp-mlp.yaml" d2t2
close d2 d2t2 "mlp, data 2 x tensor 2 = data parallel 2"
mpi_run acc 1 "$D/pp-mlp.yaml" acc8
mpi_run t2p2 4 "$D/pp-mlp.yaml" t2p2
close acc t2p2 "mlp, tensor 2 x pipeline 2 (1f1b) = 1 rank"

# resharding: tensor 2 x pipeline 2 stops at step 20; 1 rank and data 4 continue it to the end
mpi_run rref 1 "$D/tp-mlp.yaml" one
mpi_run rx 4 "$D/tp-mlp.yaml" t2p2 --max-steps 20
cp -r "$TMP/rx" "$TMP/r1"; cp -r "$TMP/rx" "$TMP/r4"
mpi_run r1 1 "$D/tp-mlp.yaml" one --resume
mpi_run r4 4 "$D/tp-mlp.yaml" d4 --resume
close rref r1 "tensor 2 x pipeline 2 -> 1 rank resume"
close rref r4 "tensor 2 x pipeline 2 -> data 4 resume"
[ "$(tail -1 "$TMP/r4/metrics.jsonl" | cut -d, -f2-5)" = "$(tail -1 "$TMP/rref/metrics.jsonl" | cut -d, -f2-5)" ] \
  && pass "the resumed curve ends where 1 rank's does" || fail "curve: $(tail -1 "$TMP/r4/metrics.jsonl") vs $(tail -1 "$TMP/rref/metrics.jsonl")"

# faults: a shard that stops answering is named; a stop signal checkpoints (75) and resumes
DTRAIN_FAULT=hang@rank=1,step=5 expect_rc 6 "shard 1 hangs: exit 6" timeout -k 5 60 "$MPIRUN" -np 2 \
  "$DTRAIN" run "$D/tp-mlp.yaml" --cluster "$TMP/t2.yaml" --out "$TMP/hang" --threads 1 --quiet --collective-timeout 5
grep -q "not answering: rank 1 " "$TMP/err" && pass "rank 1 named" || fail "hang message: $(grep -o 'fatal: .*' "$TMP/err")"
DTRAIN_FAULT=signal@rank=*,step=7,sig=USR1 expect_rc 75 "a stop at step 7: exit 75" timeout -k 5 60 "$MPIRUN" -np 2 \
  "$DTRAIN" run "$D/tp-mlp.yaml" --cluster "$TMP/t2.yaml" --out "$TMP/sig" --threads 1 --quiet
mpi_run sig 2 "$D/tp-mlp.yaml" t2 --resume
close rref sig "stopped and resumed under tensor 2 = 1 rank"

# memory really drops: the 784-4096-4096-10 MLP's parameters and moments per rank under tensor 2
expect_rc 0 "check the 4096 MLP under tensor 2" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check \
  "$top_srcdir/bench/models/mlp-4096.yaml" --cluster "$TMP/t2.yaml"
one=$(( 20037642 * 3 * 4 )); mine=$(awk '$1 == "0" && $2 == "0" && $3 == "0" { print $5 }' "$TMP/out")
python3 -c "import sys; r = float('$mine') * 1048576 / $one; print('param+moments per rank: %.1f%% of 1 rank' % (100 * r)); sys.exit(r > 0.55)" \
  && pass "param+moment memory per rank <= 55% of 1 rank" || fail "memory: '$mine' MiB per rank; $(grep -A4 '^per rank' "$TMP/out")"

# mistakes at their keys
cluster nomatch 'partition: {strategy: model, tensor: 2, splits: {fc9: column}}'
expect_rc 2 "a pattern naming no layer" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/nomatch.yaml"
grep -q "nomatch.yaml:1:50: error: splits: no layer of the model is called or matches 'fc9'" "$TMP/err" || fail "message: $(head -2 "$TMP/err")"
cluster pool 'partition: {strategy: model, tensor: 2, splits: {"*pool*": channel}}'
expect_rc 2 "a layer that cannot split" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/dp-cnn.yaml" --cluster "$TMP/pool.yaml"
grep -q "pool.yaml:1:50: error: splits: layer '[a-z0-9]*' (maxpool) cannot be split across ranks" "$TMP/err" || fail "message: $(head -2 "$TMP/err")"
cluster row 'partition: {strategy: model, tensor: 2, splits: {fc3: row}}'
expect_rc 2 "a row split with no column before it" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/row.yaml"
grep -q "row.yaml:1:50: error: splits: layer 'fc3' is split by row, so its input must be the shard of a column-split fc just before it.*found 'bn'" "$TMP/err" || fail "message: $(head -2 "$TMP/err")"
cluster odd 'partition: {strategy: model, tensor: 2, splits: {conv1: channel}}'
expect_rc 2 "filters that do not divide" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$top_srcdir/tests/cli/tp-odd.yaml" --cluster "$TMP/odd.yaml"
grep -q "splits: layer 'conv1' (conv) filters 5 do not divide into 2 channel shards" "$TMP/err" || fail "message: $(head -2 "$TMP/err")"
expect_rc 2 "tensor splits on cuda refused by check" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/tp-mlp.yaml" \
  --cluster "$TMP/t2.yaml" --device cuda
grep -q "tensor-parallel layers (strategy model) run on the cpu backend in this version, not cuda" "$TMP/err" \
  || fail "cuda message: $(grep error "$TMP/err")"
finish
