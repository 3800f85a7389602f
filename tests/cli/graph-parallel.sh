#!/usr/bin/env bash
# tests/cli/graph-parallel.sh - model parallelism on a branched graph (tests/cli/pp-res.yaml: residual
# blocks with a projection and an identity shortcut, a concat reading a tensor three layers back)
# under real mpirun against 1 rank accumulating over the same micro-batches: pipeline stages cut
# inside a residual block (the shortcut crosses the cut beside the body, forward and its gradient
# back), 4 stages where a tensor passes through a stage untouched, 1f1b bitwise, gpipe and zb-h1
# within 1e-5; tensor 2 with the automatic plan (the layers beside a branch stay whole), alone and
# with 2 pipeline stages, within 1e-5;
# a split named on a layer beside a branch refused at its key by `dtrain check`. First, one process:
# a checkpoint of the branched graph resumes bitwise.
. "$(dirname "$0")/lib.sh"
D=$top_srcdir/tests/cli
S="$D/pp-res.yaml"
"$DTRAIN" run "$S" --threads 1 --quiet --out "$TMP/whole" && "$DTRAIN" run "$S" --threads 1 --quiet --epochs 1 \
  --out "$TMP/half" && "$DTRAIN" run "$S" --threads 1 --quiet --out "$TMP/half" --resume \
  || fail "resume runs: exit $?"
[ "$($CMP --sha256 "$TMP/whole/model.safetensors" "$TMP/half/model.safetensors" | cut -d' ' -f1 | sort -u | wc -l)" = 1 ] \
  && pass "residual: 1 epoch, then resumed for the second = 2 epochs, bitwise" || fail "residual resume differs"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun (the rest)"; finish; }
cluster acc8 'partition: {micro_batch: 8}'
cluster one 'partition: {strategy: data}'
# stage 0 = stem, b1_conv1: both cross the cut (stem is b1_proj's input, the block's shortcut)
cluster in1f 'partition: {strategy: model, stages: b1_conv2, micro_batches: 4, schedule: 1f1b}'
cluster ing 'partition: {strategy: model, stages: b1_conv2, micro_batches: 4, schedule: gpipe}'
cluster inz 'partition: {strategy: model, stages: b1_conv2, micro_batches: 4, schedule: zb-h1}'
# stage 1 = b1_conv2 alone: stem passes through it untouched to b1_proj in stage 2 (and its
# gradient back through it); the last cut is crossed by b1 alone, read by three layers after it
cluster four 'partition: {strategy: model, stages: [b1_conv2, b1_proj, b2_conv1], micro_batches: 4, schedule: 1f1b}'
cluster fourz 'partition: {strategy: model, stages: [b1_conv2, b1_proj, b2_conv1], micro_batches: 4, schedule: zb-h1}'
cluster t2 'partition: {strategy: model, tensor: 2}'
cluster t2bad 'partition: {strategy: model, tensor: 2, splits: {b1_proj: channel}}'

mpi_run ref 1 "$S" acc8
mpi_run in1f 2 "$S" in1f
mpi_run ing 2 "$S" ing
mpi_run inz 2 "$S" inz
same ref in1f "residual, cut inside a block, 1f1b, 2 stages = 1 rank"
close ref ing "residual, cut inside a block, gpipe, 2 stages = 1 rank"
close ref inz "residual, cut inside a block, zb-h1, 2 stages = 1 rank"
mpi_run four 4 "$S" four
mpi_run fourz 4 "$S" fourz
same ref four "residual, 4 stages, a tensor through a stage, 1f1b = 1 rank"
close ref fourz "residual, 4 stages, a tensor through a stage, zb-h1 = 1 rank"
[ "$(tail -1 "$TMP/four/metrics.jsonl" | cut -d, -f4-5)" = "$(tail -1 "$TMP/ref/metrics.jsonl" | cut -d, -f4-5)" ] \
  && pass "test loss and accuracy through 4 stages = 1 rank" \
  || fail "test metrics: $(tail -1 "$TMP/four/metrics.jsonl") vs $(tail -1 "$TMP/ref/metrics.jsonl")"

# tensor 2: b1_conv1 and b2_conv1 sit on a chain and split by channel; the layers beside a branch
# (stem, read by two; the projection; the adds) stay whole
mpi_run tref 1 "$S" one
mpi_run t2 2 "$S" t2
close tref t2 "residual, tensor 2 (auto plan) = 1 rank"
# tensor 2 x pipeline 2, the cut inside block 1
cluster t2p2 'partition: {strategy: model, tensor: 2, pipeline: 2, stages: b1_conv2, micro_batches: 4}'
mpi_run t2p2 4 "$S" t2p2
close ref t2p2 "residual, tensor 2 x pipeline 2 (cut inside a block) = 1 rank"
timeout -k 5 60 "$MPIRUN" -np 2 "$DTRAIN" check "$S" --cluster "$TMP/t2bad.yaml" >"$TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "t2bad.yaml:1:.*splits: layer 'b1_proj' (conv) reads or feeds a branch of the graph" "$TMP/bad.out" \
  && pass "a split beside a branch refused at its key (exit 2)" || { fail "split beside a branch: exit $rc"; cat "$TMP/bad.out"; }
finish
