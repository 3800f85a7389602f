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

for i in $(seq 1 80); do
  printf 'abc def gh. hgf edc ba.%s\n' "$(printf '%*s' $((i % 5)) '' | tr ' ' 'a')"
done >"$TMP/corpus.txt"
V=$(od -An -tu1 -v "$TMP/corpus.txt" | tr -s ' ' '\n' | grep -v '^$' | sort -u | wc -l)
block() {       # block N INPUT
  cat <<YAML
  - {type: layernorm, name: h$1_ln1}
  - {type: attention, name: h$1_attn, heads: 2, causal: true, dropout: 0.1}
  - {type: add, name: h$1_res1, inputs: [h$1_attn, $2]}
  - {type: layernorm, name: h$1_ln2}
  - {type: fc, name: h$1_fc1, units: 32, activation: gelu}
  - {type: fc, name: h$1_fc2, units: 16}
  - {type: add, name: h$1_res2, inputs: [h$1_fc2, h$1_res1]}
YAML
}
{
  printf 'name: gpt\ninput: [16]\nlayers:\n'
  printf '  - {type: embedding, name: emb, vocab: %s, dim: 16}\n  - {type: positions, name: pos}\n' "$V"
  block 0 pos
  block 1 h0_res2
  cat <<YAML
  - {type: layernorm, name: ln_f}
  - {type: fc, name: head, units: $V}
loss: softmax_cross_entropy
data:
  train: {format: text, path: $TMP/corpus.txt, seq_len: 16, stride: 8, holdout: 0.2, limit: 192}
  test: {format: text, path: $TMP/corpus.txt, seq_len: 16, holdout: 0.2}
train:
  epochs: 3
  batch: 16
  seed: 3
  optimizer: {type: sgd, lr: 0.3}
YAML
} >"$TMP/gpt.yaml"
S=$TMP/gpt.yaml

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
