#!/usr/bin/env bash
# tests/cli/attn-parallel.sh - a two-block character transformer (attention with dropout, layer norms,
# positions, residual adds) under real mpirun, 30 steps (SGD): pipeline 2 (1f1b, cut between the
# blocks) bitwise equal to 1 rank accumulating over the same micro-batches, data parallel 2 within
# 1e-5 of 1 rank (the attention's dropout masks follow the global sample, not the rank), data 2 x
# pipeline 2 on 4 ranks bitwise equal to data parallel 2, and the pipeline's checkpoint resumed
# under 1 rank equal to 1 rank's own run. 192 windows make 12 full batches an epoch: a short last
# batch is cut into other micro-batches by a pipeline than by 1 rank's micro_batch (other sums).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }

. "$(dirname "$0")/attn-spec.sh"

cluster acc4 'partition: {micro_batch: 4}'
cluster pp2 'partition: {strategy: model, stages: h1_ln1, micro_batches: 4, schedule: 1f1b}'
cluster hyb 'partition: {strategy: hybrid, data: 2, pipeline: 2, stages: h1_ln1, micro_batches: 2}'
cluster dp 'partition: {micro_batch: 4}'

mpi_run ref 1 "$S" acc4 --max-steps 30
mpi_run pp2 2 "$S" pp2 --max-steps 30
same ref pp2 "transformer, pipeline 2 (1f1b) = 1 rank"
mpi_run dp2 2 "$S" dp --max-steps 30
close ref dp2 "transformer, data parallel 2 = 1 rank"
mpi_run h4 4 "$S" hyb --max-steps 30
same dp2 h4 "transformer, data 2 x pipeline 2 = data parallel 2"

# the pipeline's checkpoint at step 20, resumed under 1 rank to step 30
mpi_run pp2a 2 "$S" pp2 --max-steps 20
ck=$(ls -d "$TMP"/pp2a/checkpoints/step-* 2>/dev/null | tail -1)
if [ -n "$ck" ]; then
  cp -r "$TMP/pp2a" "$TMP/res"
  mpi_run res 1 "$S" acc4 --max-steps 30 --resume
  same ref res "transformer, pipeline 2 checkpoint resumed under 1 rank"
else
  fail "no checkpoint from the pipeline run"
fi
finish
