#!/usr/bin/env bash
# tests/cli/tp-rec.sh - rnn, lstm and gru split by hidden unit (partition.tensor) under real mpirun,
# 50 steps against 1 rank within 1e-5 (max|W - W1| / max|W1|; the splits sum the recurrent and input
# gradients over ranks in another order, and a shard's cell runs fewer lanes in vector code):
# stacked layers in one layer (layers: 2) and in a row, an fc below an LSTM taking its input
# gradient, truncated BPTT, a group of 3, tensor x data and tensor x pipeline grids. A checkpoint
# written split resumes on 1 rank, and one written by 1 rank resumes split, to the straight run.
# Splits a layer cannot take are refused at the splits key.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
cluster one 'partition: {micro_batch: 0}'
cluster acc8 'partition: {micro_batch: 8}'
cluster t2 'partition: {strategy: model, tensor: 2}'
cluster t3 'partition: {strategy: model, tensor: 3}'
cluster dt 'partition: {strategy: hybrid, data: 2, tensor: 2}'
cluster pt 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: 1f1b}'

# pp-lstm: two lstm layers of hidden 16 (8 steps an epoch, so 7 epochs for 50 steps)
L=$D/pp-lstm.yaml
mpi_run lref 1 $L one --epochs 7 --max-steps 50
mpi_run l2 2 $L t2 --epochs 7 --max-steps 50
close lref l2 "2 lstm layers, tensor 2 = 1 rank"
mpi_run lacc 1 $L acc8 --epochs 7 --max-steps 50
mpi_run lpt 4 $L pt --epochs 7 --max-steps 50
close lacc lpt "2 lstm layers, pipeline 2 x tensor 2 = 1 rank"

# an fc below a 2-layer lstm (forget_bias, bptt 3) and another lstm
mpi_run sref 1 "$D/tp-lstm.yaml" one --max-steps 50
mpi_run s2 2 "$D/tp-lstm.yaml" t2 --max-steps 50
close sref s2 "fc, lstm (layers: 2, bptt 3), lstm, tensor 2 = 1 rank"

# gru, layers: 2, bptt 3; hidden 12 splits over 2 and 3
mpi_run gref 1 "$D/tp-gru.yaml" one --max-steps 50
mpi_run g2 2 "$D/tp-gru.yaml" t2 --max-steps 50
mpi_run g3 3 "$D/tp-gru.yaml" t3 --max-steps 50
close gref g2 "gru (layers: 2, bptt 3), tensor 2 = 1 rank"
close gref g3 "gru (layers: 2, bptt 3), tensor 3 = 1 rank"

# tanh rnn into a 2-layer relu rnn with bptt 3
mpi_run rref 1 "$D/tp-rnn.yaml" one --max-steps 50
mpi_run r2 2 "$D/tp-rnn.yaml" t2 --max-steps 50
mpi_run r4 4 "$D/tp-rnn.yaml" dt --max-steps 50
close rref r2 "rnn, rnn (layers: 2, bptt 3), tensor 2 = 1 rank"
close rref r4 "rnn, rnn (layers: 2, bptt 3), data 2 x tensor 2 = 1 rank"

# resharding: split at step 20 -> 1 rank to 50, and 1 rank at step 20 -> split to 50
mpi_run x2 2 $L t2 --epochs 7 --max-steps 20
mpi_run x2 1 $L one --epochs 7 --max-steps 50 --resume
close lref x2 "tensor 2 stopped at step 20, resumed on 1 rank"
mpi_run y1 1 $L one --epochs 7 --max-steps 20
mpi_run y1 2 $L t2 --epochs 7 --max-steps 50 --resume
close lref y1 "1 rank stopped at step 20, resumed under tensor 2"

# splits a recurrent layer cannot take, at the key
printf 'partition:\n  strategy: model\n  tensor: 2\n  splits: {lstm1: column}\n' >"$TMP/badkind.yaml"
expect_rc 2 "lstm split by column" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-lstm.yaml" --cluster "$TMP/badkind.yaml"
grep -q "badkind.yaml:4:12: error: splits: layer 'lstm1' (lstm) lstm splits by hidden (the units of every gate), not by column" \
  "$TMP/err" && pass "kind message" || fail "kind message: $(grep -m1 error "$TMP/err")"
printf 'partition:\n  strategy: model\n  tensor: 3\n  splits: {gru: hidden, lstm*: hidden}\n' >"$TMP/baddiv.yaml"
expect_rc 2 "hidden 16 over 3" timeout 60 "$MPIRUN" -np 3 "$DTRAIN" check "$D/pp-lstm.yaml" --cluster "$TMP/baddiv.yaml"
grep -q "baddiv.yaml:4:12: error: splits: no layer of the model is called or matches 'gru'" "$TMP/err" \
  && grep -q "error: splits: layer 'lstm2' (lstm) hidden 16 does not divide into 3 shards of hidden units" "$TMP/err" \
  && pass "divide message" || fail "divide message: $(grep error "$TMP/err")"
finish
