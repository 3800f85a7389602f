#!/usr/bin/env bash
# tests/cli/pp-virtual.sh - virtual pipeline stages under real mpirun (issue 31): interleaved 1F1B
# (virtual_stages 2), zb-v and v-half on 2 and 4 stages, for an MLP (dropout, batch norm, clipping),
# a CNN, stacked LSTMs and a residual CNN cut inside its blocks, each bitwise equal to 1 rank
# accumulating over the same 8 micro-batches (each chunk's W's run in micro-batch order, as 1f1b's
# do); with tensor 2 (= 1f1b on the same grid) and with data 2 (= data parallel 2); a zb-v checkpoint
# resumes under 1 rank and under interleaved; each schedule's memory as planned; mistakes refused at
# their keys with exit 2.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_MCA_rmaps_base_oversubscribe=1
D=$top_srcdir/tests/cli
cluster acc4 'partition: {micro_batch: 4}'
cluster il 'partition: {strategy: model, micro_batches: 8, schedule: interleaved}'
cluster zv 'partition: {strategy: model, micro_batches: 8, schedule: zb-v, virtual_stages: 2}'
cluster vh 'partition: {strategy: model, micro_batches: 8, schedule: v-half}'
S="--max-steps 10"

# every model: 1 rank, then interleaved, zb-v and v-half on 2 and 4 stages
for m in pp-v-mlp pp-v-cnn pp-v-lstm pp-res; do
  mpi_run "$m-1" 1 "$D/$m.yaml" acc4 $S
  for np in 2 4; do
    mpi_run "$m-i$np" "$np" "$D/$m.yaml" il $S
    mpi_run "$m-v$np" "$np" "$D/$m.yaml" zv $S
    mpi_run "$m-h$np" "$np" "$D/$m.yaml" vh $S
    same "$m-1" "$m-i$np" "$m, interleaved, $np stages x 2 chunks = 1 rank"
    same "$m-1" "$m-v$np" "$m, zb-v, $np stages x 2 chunks = 1 rank"
    same "$m-1" "$m-h$np" "$m, v-half, $np stages x 2 chunks = 1 rank"
  done
done
# the residual CNN with the cuts named inside its blocks: b1's projection reads the stem across two
# cuts, b2's shortcut crosses into the last piece
cluster resil 'partition: {strategy: model, micro_batches: 8, schedule: interleaved, stages: [b1_conv2, b1, b2_conv2]}'
mpi_run res-cut 2 "$D/pp-res.yaml" resil $S
same pp-res-1 res-cut "pp-res, interleaved, cuts inside the residual blocks = 1 rank"
cluster reshv 'partition: {strategy: model, micro_batches: 8, schedule: v-half, stages: [b1_conv2, b1, b2_conv2]}'
mpi_run res-cut-h 2 "$D/pp-res.yaml" reshv $S
same pp-res-1 res-cut-h "pp-res, v-half, cuts inside the residual blocks = 1 rank"

# tensor 2 x pipeline 2 (= 1f1b on the same grid, with the splits named: the default rule pairs
# layers within a piece, and the pieces differ) and data 2 x pipeline 2 (= data parallel 2)
cluster tf 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: 1f1b, splits: {"fc*": column}}'
cluster ti 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: interleaved, splits: {"fc*": column}}'
cluster tv 'partition: {strategy: model, pipeline: 2, tensor: 2, micro_batches: 4, schedule: zb-v, splits: {"fc*": column}}'
mpi_run tf 4 "$D/pp-v-mlp.yaml" tf $S
mpi_run ti 4 "$D/pp-v-mlp.yaml" ti $S
mpi_run tv 4 "$D/pp-v-mlp.yaml" tv $S
same tf ti "mlp, tensor 2 x pipeline 2, interleaved = 1f1b"
same tf tv "mlp, tensor 2 x pipeline 2, zb-v = 1f1b"
cluster acc8 'partition: {micro_batch: 8}'
cluster hi 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, schedule: interleaved}'
cluster hv 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, schedule: zb-v}'
mpi_run dp2 2 "$D/pp-v-mlp.yaml" acc8 $S
mpi_run hi 4 "$D/pp-v-mlp.yaml" hi $S
mpi_run hv 4 "$D/pp-v-mlp.yaml" hv $S
same dp2 hi "mlp, data 2 x pipeline 2, interleaved = data parallel 2"
same dp2 hv "mlp, data 2 x pipeline 2, zb-v = data parallel 2"

# checkpoints stay layout-free: zb-v on 4 stages stops at step 6; 1 rank and interleaved on 2 go on
mpi_run x4 4 "$D/pp-res.yaml" zv --max-steps 6
cp -r "$TMP/x4" "$TMP/x1"; cp -r "$TMP/x4" "$TMP/x2"
mpi_run x1 1 "$D/pp-res.yaml" acc4 --resume $S
mpi_run x2 2 "$D/pp-res.yaml" il --resume $S
same pp-res-1 x1 "zb-v 4 stages -> 1 rank resume"
same pp-res-1 x2 "zb-v 4 stages -> interleaved 2 stages resume"

# check's table names each stage's chunks
expect_rc 0 "check, zb-v" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-v-mlp.yaml" --cluster "$TMP/zv.yaml"
grep -q "^  stage 0: fc1 .. dropout1 + fc4 .. fc5 (5 layers in 2 chunks)" "$TMP/out" && grep -q "schedule zb-v" "$TMP/out" \
  && pass "check: stage 0 holds the V's first and last pieces" || fail "check table: $(grep -A6 '^parallel' "$TMP/out")"

# bench --cluster times the chunks' walk: each stage's row names its pieces and has the formula's and
# the simulator's idle time beside the measured one (timings are not checked: the machine is shared)
expect_rc 0 "bench, zb-v on 2 stages" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$D/pp-v-mlp.yaml" --cluster "$TMP/zv.yaml" \
  --iters 2 --warmup 1 --json
python3 - "$TMP/out" <<'PY' && pass "bench: chunks, their own times, formula and simulator per stage" || fail "bench --json: $(head -c 300 "$TMP/out")"
import json, sys
m = json.load(open(sys.argv[1]))[0]
assert m["schedule"] == "zb-v" and len(m["stages"]) == 2
assert m["stages"][0]["chunks"] == "fc1..dropout1+fc4..fc5", m["stages"][0]["chunks"]
assert all(s["formula_idle_ms"] >= 0 and s["sim_idle_ms"] is not None for s in m["stages"])
p = m["pipeline"]
assert 0 < p["bubble_theory"] < 1 and p["bubble_sim"] is not None and 0 <= p["bubble"] < 1
assert m["stages"][0]["loss_ms"] > 0   # the V's last piece is on stage 0
# each chunk's own F, B and W reach the simulator: two per stage, their means the stage's, and
# stage 0's second chunk (the V's last piece) has the loss inside its B's
for s in m["stages"]:
    c = s["chunk_ms"]
    assert len(c) == 2 and all(len(t) == 3 and min(t) > 0 for t in c), c
    for k, key in enumerate(("fwd_ms", "bwd_ms", "wgt_ms")):
        assert abs((c[0][k] + c[1][k]) / 2 - s[key]) <= 2e-5 * s[key], (key, c, s[key])   # 6 digits
assert m["micro_batches"] * m["stages"][0]["chunk_ms"][1][1] >= m["stages"][0]["loss_ms"]
PY

# the memory plan knows what each schedule holds: its slots per chunk and its message buffers (every
# send of a step lives to its end: zb-v at 16 micro-batches sends four times 1f1b's at 4) and the
# streamed checkpoint's pieces, so the run writes one at step 1, before the step-2 line samples
# the peak (written only at the end, it came after the sample); every rank within 8%
if [ -z "${DTRAIN_SAN_CFLAGS:-}" ]; then
  for s in interleaved zb-v v-half; do
    cluster "mem-$s" "partition: {strategy: model, micro_batches: 16, schedule: $s}"
    mpi_run "mem-$s" 4 "$top_srcdir/bench/models/mlp-even8.yaml" "mem-$s" --max-steps 2 --set train.checkpoint_every=1
    python3 - "$TMP/mem-$s/metrics.jsonl" <<'PY' && pass "$s: memory planned = measured" || fail "$s memory: $(grep -o '"mem_planned.*' "$TMP/mem-$s/metrics.jsonl" | tail -1)"
import json, sys
l = [json.loads(x) for x in open(sys.argv[1]) if '"mem_peak_mib"' in x][-1]
for a, b in zip(l["mem_planned_mib"], l["mem_peak_mib"]):
    assert abs(a - b) <= 0.08 * b, (a, b)
PY
  done
fi

# mistakes at their keys
bad() {   # bad NAME NP YAML MESSAGE
  cluster "$1" "$3"
  expect_rc 2 "$1 refused" timeout 60 "$MPIRUN" -np "$2" "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/$1.yaml"
  grep -qF "$1.yaml:$4" "$TMP/err" && pass "$1: at the key" || fail "$1 message: $(head -2 "$TMP/err")"
}
bad vrange 2 'partition: {strategy: model, schedule: interleaved, virtual_stages: 5}' \
  "1:69: error: 'virtual_stages' must be an integer in [1, 4], got '5'"
bad zbv3 2 'partition: {strategy: model, schedule: zb-v, virtual_stages: 3}' \
  "1:46: error: schedule zb-v runs virtual_stages 2 (a V of two chunks per stage), got 3"
bad vh3 2 'partition: {strategy: model, schedule: v-half, virtual_stages: 3}' \
  "1:48: error: schedule v-half runs virtual_stages 2 (a V of two chunks per stage), got 3"
bad il1 2 'partition: {strategy: model, schedule: interleaved, virtual_stages: 1}' \
  "1:53: error: schedule interleaved needs virtual_stages 2 to 4, got 1"
bad v1f1b 2 'partition: {strategy: model, virtual_stages: 2}' \
  "1:30: error: virtual_stages 2 needs schedule interleaved, zb-v or v-half, not 1f1b"
bad vcuts 2 'partition: {strategy: model, schedule: zb-v, stages: [fc2]}' \
  "1:55: error: 'stages' names 1 cut for 4 virtual stages (pipeline 2 x virtual_stages 2); give 3"
bad vpieces 4 'partition: {strategy: model, schedule: zb-v}' \
  "1:30: error: pipeline 4 x virtual_stages 2 = 8 pieces, but the model has 5 layers"
finish
