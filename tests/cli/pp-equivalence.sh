#!/usr/bin/env bash
# tests/cli/pp-equivalence.sh - pipeline stages under real mpirun: 2 and 4 stages (gpipe, 1f1b,
# zb-h1) and a data 2 x pipeline 2 grid against 1 rank (or data parallel) accumulating over the same
# micro-batches; 1f1b is bitwise equal (the same per-layer math and summation order), gpipe, whose
# backward runs the micro-batches in reverse, within 1e-5. zb-h1 (fc and conv backwards split, W's
# deferred) is within 1e-5 of 1 rank and in fact bitwise equal to 1f1b: its W's add up in
# micro-batch order, as 1f1b's do, and each half is the combined backward's arithmetic. A checkpoint written by 2 stages resumes
# under 1 rank and 4 stages bitwise; a stalled stage ends the job with exit 6 naming it; a stop
# signal writes a checkpoint (75) that resumes to the same weights; grid and cut mistakes are
# refused at their keys.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
cluster acc8 'partition: {micro_batch: 8}'
cluster p1f1b 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b}'
cluster pgpipe 'partition: {strategy: model, micro_batches: 4, schedule: gpipe}'
cluster pzb 'partition: {strategy: model, micro_batches: 4, schedule: zb-h1}'
cluster pcut 'partition: {strategy: model, stages: fc2, micro_batches: 4}'
cluster hyb 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2}'
cluster hybzb 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 4, schedule: zb-h1}'

# the MLP (dropout, batch norm, clipping): 4 epochs of 16 steps
mpi_run ref 1 "$D/pp-mlp.yaml" acc8
mpi_run f2 2 "$D/pp-mlp.yaml" p1f1b
mpi_run f4 4 "$D/pp-mlp.yaml" p1f1b
mpi_run g2 2 "$D/pp-mlp.yaml" pgpipe
mpi_run g4 4 "$D/pp-mlp.yaml" pgpipe
mpi_run c2 2 "$D/pp-mlp.yaml" pcut
same ref f2 "mlp, 1f1b, 2 stages = 1 rank"
same ref f4 "mlp, 1f1b, 4 stages = 1 rank"
close ref g2 "mlp, gpipe, 2 stages = 1 rank"
close ref g4 "mlp, gpipe, 4 stages = 1 rank"
same ref c2 "mlp, stages cut at fc2 = 1 rank"
# zb-h1: with 4 stages the last holds bn and fc3, so a W is deferred past other micro-batches' B's
mpi_run z2 2 "$D/pp-mlp.yaml" pzb
mpi_run z4 4 "$D/pp-mlp.yaml" pzb
close ref z2 "mlp, zb-h1, 2 stages = 1 rank"
close ref z4 "mlp, zb-h1, 4 stages = 1 rank"
same f2 z2 "mlp, zb-h1 = 1f1b, 2 stages"
same f4 z4 "mlp, zb-h1 = 1f1b, 4 stages"
grep -q '"split":"test"' "$TMP/f4/metrics.jsonl" && [ "$(tail -1 "$TMP/f4/metrics.jsonl" | cut -d, -f4)" = "$(tail -1 "$TMP/ref/metrics.jsonl" | cut -d, -f4)" ] \
  && pass "test loss through 4 stages = 1 rank" || fail "test loss: $(tail -1 "$TMP/f4/metrics.jsonl") vs $(tail -1 "$TMP/ref/metrics.jsonl")"

# data 2 x pipeline 2 against data parallel over 2 ranks (the same replica slices and micro-batches;
# batch-norm statistics averaged over replicas in both)
mpi_run dp2 2 "$D/pp-mlp.yaml" acc8
mpi_run h4 4 "$D/pp-mlp.yaml" hyb
same dp2 h4 "mlp, data 2 x pipeline 2 = data parallel 2"
# zb-h1's last W ends the stage's step; only then do the replicas sum the stage's gradient
cluster dp2m4 'partition: {micro_batch: 4}'
mpi_run dp2m 2 "$D/pp-mlp.yaml" dp2m4
mpi_run hz4 4 "$D/pp-mlp.yaml" hybzb
same dp2m hz4 "mlp, zb-h1, data 2 x pipeline 2 = data parallel 2"
# 512 = 7 x 73 + 1: the last batch of an epoch leaves replica 1 without a sample
mpi_run h4short 4 "$D/pp-mlp.yaml" hyb --batch 73 --max-steps 9
grep -q '"step":8,"split":"test"' "$TMP/h4short/metrics.jsonl" && pass "a replica with an empty slice" \
  || fail "short last batch: $(tail -2 "$TMP/h4short/metrics.jsonl")"

# convolutions and a two-layer LSTM, 50 steps
mpi_run cref 1 "$D/dp-cnn.yaml" acc8 --max-steps 50
mpi_run c2s 2 "$D/dp-cnn.yaml" p1f1b --max-steps 50
close cref c2s "cnn, 1f1b, 2 stages = 1 rank"
mpi_run c4s 4 "$D/dp-cnn.yaml" p1f1b --max-steps 50
mpi_run cz2 2 "$D/dp-cnn.yaml" pzb --max-steps 50
mpi_run cz4 4 "$D/dp-cnn.yaml" pzb --max-steps 50
close cref cz2 "cnn, zb-h1, 2 stages = 1 rank"
close cref cz4 "cnn, zb-h1, 4 stages = 1 rank"
same c2s cz2 "cnn, zb-h1 = 1f1b, 2 stages"
same c4s cz4 "cnn, zb-h1 = 1f1b, 4 stages"
# tensor 2 x pipeline 2: the shards' collectives run in the input halves, the weight halves read
# each shard's own dz
cluster tpf 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: 1f1b}'
cluster tpz 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: zb-h1}'
mpi_run ctf 4 "$D/dp-cnn.yaml" tpf --max-steps 40
mpi_run ctz 4 "$D/dp-cnn.yaml" tpz --max-steps 40
same ctf ctz "cnn, tensor 2 x pipeline 2, zb-h1 = 1f1b"
mpi_run lref 1 "$D/pp-lstm.yaml" acc8
mpi_run l3 3 "$D/pp-lstm.yaml" p1f1b
close lref l3 "2-layer lstm, 1f1b, 3 stages = 1 rank"

# resharding: 2 stages stop at step 20; 1 rank and 4 stages continue it
mpi_run x2 2 "$D/pp-mlp.yaml" p1f1b --max-steps 20
cp -r "$TMP/x2" "$TMP/x1"; cp -r "$TMP/x2" "$TMP/x4"
mpi_run x1 1 "$D/pp-mlp.yaml" acc8 --resume
mpi_run x4 4 "$D/pp-mlp.yaml" p1f1b --resume
same ref x1 "2 stages -> 1 rank resume"
same ref x4 "2 stages -> 4 stages resume"

# faults: a stage hanging in its messages is named; a stop signal checkpoints and resumes
DTRAIN_FAULT=hang@rank=1,step=5 expect_rc 6 "stage 1 hangs: exit 6" timeout -k 5 60 "$MPIRUN" -np 2 \
  "$DTRAIN" run "$D/pp-mlp.yaml" --cluster "$TMP/p1f1b.yaml" --out "$TMP/hang" --threads 1 --quiet --collective-timeout 5
grep -q "not answering: rank 1 " "$TMP/err" && pass "rank 1 named" || fail "hang message: $(grep -o 'fatal: .*' "$TMP/err")"
DTRAIN_FAULT=signal@rank=*,step=7,sig=USR1 expect_rc 75 "a stop at step 7: exit 75" timeout -k 5 60 "$MPIRUN" -np 2 \
  "$DTRAIN" run "$D/pp-mlp.yaml" --cluster "$TMP/p1f1b.yaml" --out "$TMP/sig" --threads 1 --quiet
mpi_run sig 2 "$D/pp-mlp.yaml" p1f1b --resume
same ref sig "stopped and resumed = 1 rank"

# mistakes at their keys
cluster badcut 'partition: {strategy: model, stages: [nosuch]}'
expect_rc 2 "unknown cut" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/badcut.yaml"
grep -q "badcut.yaml:1:39: error: no layer named 'nosuch' to start stage 1" "$TMP/err" || fail "cut message: $(head -2 "$TMP/err")"
cluster badgrid 'partition: {strategy: hybrid, data: 2}'
expect_rc 2 "grid not the rank count" timeout 60 "$MPIRUN" -np 3 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/badgrid.yaml"
grep -q "the grid data 2 x pipeline 1 x tensor 1 = 2 ranks, but the job has 3" "$TMP/err" || fail "grid message: $(head -2 "$TMP/err")"
expect_rc 0 "check prints the stages" timeout 60 "$MPIRUN" -np 4 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/hyb.yaml"
grep -q "^  stage 1: fc2 .. fc3 (3 layers)" "$TMP/out" && grep -q "^1     1     0 " "$TMP/out" && pass "stage table" || fail "stage table: $(grep -A3 '^parallel' "$TMP/out")"
# zb-h1's plan counts what its slots keep: fc2's stage (rank 2) holds more than under 1f1b (a batch
# whose micro-batches of 2048 samples show in the table's tenths of a MiB: a slot holds one)
expect_rc 0 "check, 1f1b" timeout 60 "$MPIRUN" -np 4 "$DTRAIN" check "$D/pp-mlp.yaml" --set train.batch=8192 --cluster "$TMP/p1f1b.yaml"
m1=$(awk '$1 == "2" && $2 == "2" && $3 == "0" {print $6}' "$TMP/out")
grep -q 'activations for 2048 samples' "$TMP/out" || fail "a slot holds one micro-batch (8192 / 4): $(grep -o 'activations for [0-9]* samples' "$TMP/out")"
expect_rc 0 "check, zb-h1" timeout 60 "$MPIRUN" -np 4 "$DTRAIN" check "$D/pp-mlp.yaml" --set train.batch=8192 --cluster "$TMP/pzb.yaml"
mz=$(awk '$1 == "2" && $2 == "2" && $3 == "0" {print $6}' "$TMP/out")
grep -q "schedule zb-h1" "$TMP/out" && awk -v a="$m1" -v b="$mz" 'BEGIN {exit !(a > 0 && b > a)}' \
  && pass "zb-h1 plan: stage 2 $mz MiB, 1f1b $m1 MiB" || fail "zb-h1 plan: '$m1' vs '$mz': $(grep -A8 '^parallel' "$TMP/out")"
finish
