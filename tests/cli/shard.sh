#!/usr/bin/env bash
# tests/cli/shard.sh - sharded data parallelism (partition.shard) under real mpirun: shard 1 and 2 on
# 2 and 4 ranks against shard 0 (an MLP with dropout and clipping, the batch-norm CNN, an LSTM) are
# bitwise equal in reproducible mode and within 1e-5 otherwise; shard 2 on the data axis of data 2 x
# pipeline 2 and data 2 x tensor 2 equals the unsharded grid; frozen layers and SGD with momentum and
# weight decay; a shard-2 checkpoint resumes under 1 rank and a 1-rank one under shard 2, bitwise;
# a shard out of range and the combinations not built are refused at the key (shard 3: shard3.sh).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
# small buckets: several per model, so parts of several buckets and blocks cut by them are exercised
for s in 0 1 2; do
  cluster "r$s" "partition: {reproducible: true, chunks: 16, shard: $s, bucket_mb: 0.001}"
  cluster "n$s" "partition: {shard: $s, bucket_mb: 0.001}"
done
sed 's/^  seed: 11$/  seed: 11\n  clip_norm: 0.05/' "$D/dp-mlp.yaml" > "$TMP/mlp.yaml"
grep -q clip_norm "$TMP/mlp.yaml" || fail "mlp with clipping not written"

# equiv TAG SPEC [flags...]: reproducible runs bitwise equal, the others within 1e-5
equiv() {
  local tag=$1 spec=$2; shift 2
  for n in 2 4; do
    # against shard 0 on as many ranks: batch norm's running statistics are averaged over them
    mpi_run "$tag-r0-$n" $n "$spec" r0 "$@"
    for s in 1 2; do
      mpi_run "$tag-r$s-$n" $n "$spec" "r$s" "$@"
      same "$tag-r0-$n" "$tag-r$s-$n" "$tag reproducible: shard $s on $n ranks = shard 0"
    done
    mpi_run "$tag-n0-$n" $n "$spec" n0 "$@"
    for s in 1 2; do
      mpi_run "$tag-n$s-$n" $n "$spec" "n$s" "$@"
      close "$tag-n0-$n" "$tag-n$s-$n" "$tag: shard $s on $n ranks = shard 0"
    done
  done
}
equiv mlp "$TMP/mlp.yaml" --max-steps 60
equiv lstm "$D/dp-lstm.yaml" --max-steps 40
equiv cnnbn models/cnn-bn.yaml --max-steps 4 --batch 64
grep -q '"split":"test"' "$TMP/mlp-r2-4/metrics.jsonl" && pass "shard 2 evaluates" || fail "no test line"

# frozen layers; SGD with momentum and weight decay
printf 'train:\n  freeze: [fc1]\n' > "$TMP/frz.yaml"
sed 's/^  seed: 11$/  seed: 11\n  freeze: [fc1]/' "$TMP/mlp.yaml" > "$TMP/mlpf.yaml"
sed 's/{type: sgd, lr: 0.05}/{type: nesterov, lr: 0.05, momentum: 0.9}\n  weight_decay: 0.01/' \
  "$D/dp-mlp-sgd.yaml" > "$TMP/sgd.yaml"
grep -q momentum "$TMP/sgd.yaml" || fail "sgd spec not written"
for m in mlpf sgd; do
  mpi_run "$m-0" 2 "$TMP/$m.yaml" r0 --max-steps 40
  mpi_run "$m-2" 4 "$TMP/$m.yaml" r2 --max-steps 40
  same "$m-0" "$m-2" "$m reproducible: shard 2 on 4 ranks = shard 0"
done
$CMP "$TMP/mlp-r0-2/model.safetensors" "$TMP/mlpf-2/model.safetensors" --tol 0 >/dev/null 2>&1 \
  && fail "freeze changed nothing" || pass "the frozen run differs from the unfrozen one"

# with activation recomputation (partition.recompute): the same sharded update after it
mpi_run rc0 2 "$D/dp-cnn.yaml" r0 --max-steps 30 --set partition.recompute=all
mpi_run rc2 2 "$D/dp-cnn.yaml" r2 --max-steps 30 --set partition.recompute=all
same rc0 rc2 "recompute all, reproducible: shard 2 = shard 0"

# shard on the data axis of data x pipeline and data x tensor, against the same grid unsharded
cluster hyb0 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, bucket_mb: 0.001}'
cluster hyb2 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, bucket_mb: 0.001, shard: 2}'
cluster dt0 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001}'
cluster dt2 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001, shard: 2}'
mpi_run h0 4 "$D/pp-mlp.yaml" hyb0
mpi_run h2 4 "$D/pp-mlp.yaml" hyb2
same h0 h2 "data 2 x pipeline 2: shard 2 = unsharded"
mpi_run t0 4 "$D/tp-mlp.yaml" dt0
mpi_run t2 4 "$D/tp-mlp.yaml" dt2
same t0 t2 "data 2 x tensor 2: shard 2 = unsharded"

# checkpoints stay layout-free: a shard-2 run stopped at step 30 continues on 1 rank, and a 1-rank
# run stopped there continues under shard 2 on 4 ranks, both bitwise the uninterrupted run
mpi_run full 1 "$TMP/mlp.yaml" r0
mpi_run a2 2 "$TMP/mlp.yaml" r2 --max-steps 30
cp -r "$TMP/a2" "$TMP/a1"
mpi_run a1 1 "$TMP/mlp.yaml" r0 --resume
same full a1 "shard 2 checkpoint resumed on 1 rank"
mpi_run b1 1 "$TMP/mlp.yaml" r0 --max-steps 30
cp -r "$TMP/b1" "$TMP/b4"
mpi_run b4 4 "$TMP/mlp.yaml" r2 --resume
same full b4 "1-rank checkpoint resumed under shard 2 on 4 ranks"
mpi_run c1 2 "$TMP/mlp.yaml" r1 --max-steps 30
cp -r "$TMP/c1" "$TMP/c2"
mpi_run c2 2 "$TMP/mlp.yaml" r2 --resume
same full c2 "shard 1 checkpoint resumed under shard 2"

# dtrain bench: the shard's figures (what this rank owns, the all-gather's bytes and time)
expect_rc 0 "bench under shard 2" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$D/dp-mlp.yaml" --cluster "$TMP/n2.yaml" \
  --iters 3 --warmup 1 --threads 1 --json
python3 - "$TMP/out" <<'PY' && pass "bench reports the shard's collectives" || fail "bench shard fields"
import json, sys
m = json.load(open(sys.argv[1]))[0]
s = m["shard"]
assert s["stage"] == 2 and s["gradient"] == "reduce-scatter", s
assert 0 < s["owned_floats"] < m["params"] and s["gather_bytes_in"] == 4 * (m["params"] - s["owned_floats"]), s
assert s["gather_ms"] > 0 and s["gather_gbs"] > 0, s
PY
expect_rc 0 "bench unsharded" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$D/dp-mlp.yaml" --iters 2 --warmup 1 --threads 1 --json
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[0]['shard'] is None" "$TMP/out" \
  && pass "bench: shard null unsharded" || fail "bench: shard not null unsharded"

# refusals, at the key
bad() { # bad NAME YAML WANT
  printf '%s\n' "$2" > "$TMP/bad.yaml"
  expect_rc 2 "$1" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/dp-mlp.yaml" --cluster "$TMP/bad.yaml"
  grep -q "bad.yaml:1:[0-9]*: error: .*$3" "$TMP/err" && pass "$1: at the key" || { fail "$1: $(cat "$TMP/err")"; }
}
bad "shard 4" 'partition: {shard: 4}' "shard"

bad "shard 2 with fp16" 'partition: {shard: 2, compression: fp16}' "compression: none"
bad "shard 1 with averaging" 'partition: {shard: 1, sync: average}' "sync: allreduce"
finish
