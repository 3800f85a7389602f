#!/usr/bin/env bash
# tests/cli/shard3.sh - partition.shard 3 (parameters sharded too, gathered per layer) under real
# mpirun: on 2 and 4 ranks against shard 0 (an MLP with dropout and clipping, an LSTM, the
# batch-norm CNN) bitwise in reproducible mode and within 1e-5 otherwise; micro-batches that leave
# the ranks uneven walks (the short ones walk idle), each micro-batch reduce-scattered; frozen layers and Nesterov with weight decay;
# recomputation; on the data axis of data 2 x tensor 2 and data 2 x pipeline 2 against the same grid
# unsharded; the combinations not built refused at the key.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
for s in 0 3; do  # small buckets: each layer's parameters several gathers, parts cut by blocks
  cluster "r$s" "partition: {reproducible: true, chunks: 16, shard: $s, bucket_mb: 0.001}"
  cluster "n$s" "partition: {shard: $s, bucket_mb: 0.001}"
done
sed 's/^  seed: 11$/  seed: 11\n  clip_norm: 0.05/' "$D/dp-mlp.yaml" > "$TMP/mlp.yaml"
# the CNN and the 20M-parameter MLP without their test sets: evaluation is tested on the MLP above
sed '/^  test:$/,/^    labels: .*t10k/d' "$top_srcdir/models/cnn-bn.yaml" > "$TMP/cnnbn.yaml"
grep -v '^  test:' "$top_srcdir/bench/models/mlp-4096.yaml" > "$TMP/m4k.yaml"
grep -q t10k "$TMP/cnnbn.yaml" "$TMP/m4k.yaml" && fail "test sets not removed"
grep -q clip_norm "$TMP/mlp.yaml" || fail "mlp with clipping not written"

# equiv TAG SPEC [flags...]: reproducible bitwise, the others within 1e-5, on 2 and 4 ranks
equiv() {
  local tag=$1 spec=$2; shift 2
  for n in 2 4; do
    for m in r n; do
      mpi_run "$tag-${m}0-$n" $n "$spec" "${m}0" "$@"
      mpi_run "$tag-${m}3-$n" $n "$spec" "${m}3" "$@"
    done
    same "$tag-r0-$n" "$tag-r3-$n" "$tag reproducible: shard 3 on $n ranks = shard 0"
    close "$tag-n0-$n" "$tag-n3-$n" "$tag: shard 3 on $n ranks = shard 0"
  done
}
equiv mlp "$TMP/mlp.yaml" --max-steps 60
equiv lstm "$D/dp-lstm.yaml" --max-steps 40
equiv cnnbn "$TMP/cnnbn.yaml" --max-steps 3 --batch 32
grep -q '"split":"test"' "$TMP/mlp-n3-4/metrics.jsonl" && pass "shard 3 evaluates" || fail "no test line"

# 3 ranks, micro-batches of 7: slices of 21 and 22 samples walk 3 and 4 times, evaluation pieces
# differ too; the shorter ranks issue the same gathers idle
mpi_run u0 3 "$TMP/mlp.yaml" n0 --max-steps 20 --set partition.micro_batch=7
mpi_run u3 3 "$TMP/mlp.yaml" n3 --max-steps 20 --set partition.micro_batch=7
close u0 u3 "uneven walks: shard 3 on 3 ranks = shard 0"
# each micro-batch reduce-scattered into the ranks' parts (FSDP's and ZeRO-3's accumulation): 4 ranks
# of 16 samples in micro-batches of 5 (the last of one sample), and on data 2 x tensor 2
mpi_run v0 4 "$TMP/mlp.yaml" n0 --max-steps 20 --set partition.micro_batch=5
mpi_run v3 4 "$TMP/mlp.yaml" n3 --max-steps 20 --set partition.micro_batch=5
close v0 v3 "micro-batches summed each: shard 3 on 4 ranks = shard 0"
cluster dtm0 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001, micro_batch: 7}'
cluster dtm3 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001, micro_batch: 7, shard: 3}'
mpi_run dtm0 4 "$TMP/mlp.yaml" dtm0 --max-steps 20
mpi_run dtm3 4 "$TMP/mlp.yaml" dtm3 --max-steps 20
close dtm0 dtm3 "micro-batches summed each on data 2 x tensor 2: shard 3 = unsharded"

# frozen layers; Nesterov with weight decay; recomputation (every layer gathered for the step)
sed 's/^  seed: 11$/  seed: 11\n  freeze: [fc1]/' "$TMP/mlp.yaml" > "$TMP/mlpf.yaml"
sed 's/{type: sgd, lr: 0.05}/{type: nesterov, lr: 0.05, momentum: 0.9}\n  weight_decay: 0.01/' \
  "$D/dp-mlp-sgd.yaml" > "$TMP/sgd.yaml"
grep -q momentum "$TMP/sgd.yaml" || fail "sgd spec not written"
for m in mlpf sgd; do
  mpi_run "$m-0" 2 "$TMP/$m.yaml" r0 --max-steps 40
  mpi_run "$m-3" 4 "$TMP/$m.yaml" r3 --max-steps 40
  same "$m-0" "$m-3" "$m reproducible: shard 3 on 4 ranks = shard 0"
done
mpi_run rc0 2 "$D/dp-cnn.yaml" n0 --max-steps 20 --set partition.recompute=all
mpi_run rc3 2 "$D/dp-cnn.yaml" n3 --max-steps 20 --set partition.recompute=all
close rc0 rc3 "recompute all: shard 3 = shard 0"

# shard 3 on the data axis of data 2 x tensor 2 and data 2 x pipeline 2
cluster dt0 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001}'
cluster dt3 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001, shard: 3}'
cluster hyb0 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, bucket_mb: 0.001}'
cluster hyb3 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, bucket_mb: 0.001, shard: 3}'
mpi_run t0 4 "$D/tp-mlp.yaml" dt0
mpi_run t3 4 "$D/tp-mlp.yaml" dt3
same t0 t3 "data 2 x tensor 2: shard 3 = unsharded"
mpi_run h0 4 "$D/pp-mlp.yaml" hyb0
mpi_run h3 4 "$D/pp-mlp.yaml" hyb3
same h0 h3 "data 2 x pipeline 2: shard 3 = unsharded"

# checkpoints: streamed to rank 0 piece by piece, the same bytes as shard 0's (and shard 1's); a
# shard-3 checkpoint resumes on 1 rank, on 2 ranks under shard 3, and a 1-rank one under shard 3, all
# bitwise the uninterrupted run; a shard-3 checkpoint resumes under data 2 x tensor 2 with and
# without shard 3 alike
cluster r1 'partition: {reproducible: true, chunks: 16, shard: 1, bucket_mb: 0.001}'
mpi_run full 1 "$TMP/mlp.yaml" r0
mpi_run k0 2 "$TMP/mlp.yaml" r0 --max-steps 30
mpi_run k1 2 "$TMP/mlp.yaml" r1 --max-steps 30
mpi_run a3 4 "$TMP/mlp.yaml" r3 --max-steps 30
for k in k1 a3; do
  for f in model optim; do
    cmp -s "$TMP/k0/checkpoints/step-00000030/$f.safetensors" "$TMP/$k/checkpoints/step-00000030/$f.safetensors" \
      && pass "$k: $f.safetensors the same bytes as shard 0's" || fail "$k: $f.safetensors differs from shard 0's"
  done
done
cp -r "$TMP/a3" "$TMP/a1"
mpi_run a1 1 "$TMP/mlp.yaml" r0 --resume
same full a1 "shard 3 checkpoint resumed on 1 rank"
mpi_run b1 1 "$TMP/mlp.yaml" r0 --max-steps 30
cp -r "$TMP/b1" "$TMP/b3"
mpi_run b3 4 "$TMP/mlp.yaml" r3 --resume
same full b3 "1-rank checkpoint resumed under shard 3 on 4 ranks"
cp -r "$TMP/a3" "$TMP/a32"
mpi_run a32 2 "$TMP/mlp.yaml" r3 --resume
same full a32 "shard 3 checkpoint of 4 ranks resumed under shard 3 on 2 ranks"
# a sharded resume maps the files and takes its parts: a damaged file is still refused (exit 4)
cp -r "$TMP/a3" "$TMP/bad3"
python3 - "$TMP/bad3/checkpoints/step-00000030/optim.safetensors" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-5] ^= 1; open(sys.argv[1], "wb").write(b)
PY
expect_rc 4 "a damaged shard-3 resume" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" run "$TMP/mlp.yaml" --cluster "$TMP/r3.yaml" \
  --out "$TMP/bad3" --threads 1 --quiet --resume
grep -q 'optim.safetensors: crc32' "$TMP/err" && pass "the damage named" || fail "damage: $(head -3 "$TMP/err")"
cluster rt0 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001}'
cluster rt3 'partition: {strategy: hybrid, data: 2, tensor: 2, bucket_mb: 0.001, shard: 3}'
cp -r "$TMP/a3" "$TMP/at0"
cp -r "$TMP/a3" "$TMP/at3"
mpi_run at0 4 "$TMP/mlp.yaml" rt0 --resume
mpi_run at3 4 "$TMP/mlp.yaml" rt3 --resume
same at0 at3 "shard 3 checkpoint resumed under data 2 x tensor 2: shard 3 = unsharded"

# dtrain bench: the per-layer gathers' bytes and waits
expect_rc 0 "bench under shard 3" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$D/dp-mlp.yaml" --cluster "$TMP/n3.yaml" \
  --iters 3 --warmup 1 --threads 1 --json
python3 - "$TMP/out" <<'PY' && pass "bench reports shard 3's gathers" || fail "bench shard 3 fields"
import json, sys
m = json.load(open(sys.argv[1]))[0]
s = m["shard"]
assert s["stage"] == 3 and s["gradient"] == "reduce-scatter" and s["gather"] == "per layer", s
# the forward gathers the others' parts of every bucket, the backward again all but the two the
# forward left: this MLP has two buckets (fc1; fc2 and fc3), so none again
assert s["gather_bytes_in"] == 4 * (m["params"] - s["owned_floats"]), s
assert s["gather_ms"] > 0, s
PY

# refusals, at the key
bad() { # bad NAME YAML WANT
  printf '%s\n' "$2" > "$TMP/bad.yaml"
  expect_rc 2 "$1" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/dp-mlp.yaml" --cluster "$TMP/bad.yaml"
  grep -q "bad.yaml:1:[0-9]*: error: .*$3" "$TMP/err" && pass "$1: at the key" || { fail "$1: $(cat "$TMP/err")"; }
}
bad "shard 3 with fp16" 'partition: {shard: 3, compression: fp16}' "shard 3 reduce-scatters"
bad "shard 3 with averaging" 'partition: {shard: 3, sync: average}' "sync: allreduce"

if [ -n "${DTRAIN_SAN_CFLAGS:-}" ]; then   # shadow memory and redzones are no part of the plan
  echo "skip: the memory limit checks under --enable-sanitizers"; finish
fi
# the headline: the 20M-parameter MLP (one rank peaks near 670 MiB) on 4 ranks under strategy auto
# and memory_per_rank 300MiB trains, and every rank's training peak stays below 300 MiB (a sharded
# checkpoint streams, so rank 0 is no fuller than the others); a limit nothing meets is refused
# before training with the smallest layout's need
cd "$top_srcdir"
cluster a300 'partition: {strategy: auto}
memory_per_rank: 300MiB'
expect_rc 0 "mlp-4096 on 4 ranks under 300MiB" timeout -k 5 300 "$MPIRUN" -np 4 "$DTRAIN" run "$TMP/m4k.yaml" \
  --cluster "$TMP/a300.yaml" --out "$TMP/a300" --threads 1 --quiet --max-steps 2
python3 - "$TMP/a300/metrics.jsonl" <<'PY' && pass "every rank's peak below 300 MiB" || fail "a rank's peak over 300 MiB"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
peaks = lines[-1]["mem_peak_mib"]
print("peaks", peaks)
assert len(peaks) == 4 and max(peaks) < 300, peaks
PY
cluster a120 'partition: {strategy: auto}
memory_per_rank: 120MiB'
expect_rc 2 "mlp-4096 on 4 ranks under 120MiB" timeout -k 5 300 "$MPIRUN" -np 4 "$DTRAIN" run "$TMP/m4k.yaml" \
  --cluster "$TMP/a120.yaml" --out "$TMP/a120" --threads 1 --quiet --max-steps 2
cat "$TMP/out" "$TMP/err" | grep -q 'a120.yaml:2:18: error: no layout .* fits memory_per_rank 120.0 MiB; the smallest, .* needs' &&
  pass "refused with the smallest layout's need" || fail "120MiB refusal: $(cat "$TMP/err" | head -3)"
[ ! -e "$TMP/a120/metrics.jsonl" ] && pass "refused before training" || fail "trained under 120MiB"
finish
