#!/usr/bin/env bash
# tests/cli/compress-resume.sh - the compressors' error-feedback state is checkpointed: on 2 ranks,
# 30 steps + a resume to 60 gives weights bitwise equal to 60 uninterrupted steps for topk,
# threshold (residual and adaptive tau) and powersgd (residual and warm-start Q); a checkpoint of 4
# ranks resumed on 2 sums the residuals onto them and says so; another method or one rank drops
# them with a note, as another cut into pipeline stages does; shard 1 with threshold resumes
# bitwise too (its checkpoint is gathered, not streamed); an optimizer file whose
# "dtrain.compress" tensors were damaged is refused.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
cluster topk 'partition: {compression: topk, topk_ratio: 0.05, compression_warmup: 10, bucket_mb: 0.001}'
cluster threshold 'partition: {compression: threshold, bucket_mb: 0.001}'
cluster powersgd 'partition: {compression: powersgd, powersgd_rank: 2, compression_warmup: 10, bucket_mb: 0.001}'
for m in topk threshold powersgd; do
  mpi_run "$m-all" 2 "$D/dp-mlp.yaml" "$m" --max-steps 60
  mpi_run "$m-cut" 2 "$D/dp-mlp.yaml" "$m" --max-steps 30
  grep -q "dtrain.compress.rank1.residual" "$TMP/$m-cut/checkpoints/step-00000030/optim.safetensors" \
    && pass "$m: the checkpoint holds rank 1's residual" || fail "$m: no residual in the checkpoint"
  mpi_run "$m-cut" 2 "$D/dp-mlp.yaml" "$m" --max-steps 60 --resume=auto
  same "$m-all" "$m-cut" "$m: 30 + resumed 30 = 60 steps"
done
# shard 1 with a compressor: its checkpoint is gathered (a streamed one has no residuals), so a
# resume is still bitwise
cluster shthr 'partition: {compression: threshold, shard: 1, bucket_mb: 0.001}'
mpi_run shthr-all 2 "$D/dp-mlp.yaml" shthr --max-steps 60
mpi_run shthr-cut 2 "$D/dp-mlp.yaml" shthr --max-steps 30
mpi_run shthr-cut 2 "$D/dp-mlp.yaml" shthr --max-steps 60 --resume=auto
same shthr-all shthr-cut "shard 1 + threshold: 30 + resumed 30 = 60 steps"
# another data-parallel count: the residuals are summed onto the new ranks
mpi_run thr4 4 "$D/dp-mlp.yaml" threshold --max-steps 30
cp -r "$TMP/thr4" "$TMP/thr4b"
( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/threshold.yaml" \
  --out "$TMP/thr4" --threads 1 --max-steps 60 --resume=auto --collective-timeout 30 ) >"$TMP/thr4.log" 2>&1 \
  || fail "4 -> 2 ranks: exit $?"
grep -q "residuals of 4 data-parallel ranks are summed onto this run's 2" "$TMP/thr4.log" \
  && pass "4 -> 2 ranks: summed, with a note" || { fail "4 -> 2 ranks: no note"; tail -3 "$TMP/thr4.log"; }
# another method, or one rank (nothing compressed): dropped, with a note
( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/powersgd.yaml" \
  --out "$TMP/thr4b" --threads 1 --max-steps 40 --resume=auto --collective-timeout 30 ) >"$TMP/other.log" 2>&1 \
  || fail "threshold -> powersgd: exit $?"
grep -q "holds the threshold residuals of 4 ranks; they are dropped (this run uses compression powersgd)" "$TMP/other.log" \
  && pass "another method: dropped, with a note" || { fail "another method: no note"; tail -3 "$TMP/other.log"; }
( cd "$top_srcdir" && "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/powersgd.yaml" --out "$TMP/thr4b" --threads 1 \
  --max-steps 50 --resume=auto ) >"$TMP/one.log" 2>&1 || fail "2 -> 1 rank: exit $?"
grep -q "they are dropped (this run has one data-parallel rank and compresses nothing)" "$TMP/one.log" \
  && pass "one rank: dropped, with a note" || { fail "one rank: no note"; tail -3 "$TMP/one.log"; }
# data 2 x pipeline 2 keeps each stage's replicas' residuals; resumed as plain data 2 (another cut
# into stages): dropped, with a note
cluster hyb 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, compression: threshold, bucket_mb: 0.001}'
mpi_run hyb 4 "$D/dp-mlp.yaml" hyb --max-steps 20
grep -q "dtrain.compress.rank3.residual" "$TMP/hyb/checkpoints/step-00000020/optim.safetensors" \
  && pass "data 2 x pipeline 2: every rank's residual kept" || fail "data 2 x pipeline 2: residuals missing"
( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/threshold.yaml" \
  --out "$TMP/hyb" --threads 1 --max-steps 30 --resume=auto --collective-timeout 30 ) >"$TMP/hyb2.log" 2>&1 \
  || fail "pipeline 2 -> 1: exit $?"
grep -q "they are dropped (they belong to 2 pipeline stages x 1 tensor shard, this run has 1 x 1)" "$TMP/hyb2.log" \
  && pass "other stages: dropped, with a note" || { fail "other stages: no note"; tail -3 "$TMP/hyb2.log"; }
# the compressor's tensors are covered by the optimizer file's crc like the moments
f="$TMP/threshold-cut/checkpoints/step-00000060/optim.safetensors"
python3 - "$f" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); o = h['dtrain.compress.rank1.residual']['data_offsets'][0] + 8 + n
b[o] ^= 0x40; open(p, 'wb').write(b)
PY
( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/threshold.yaml" \
  --out "$TMP/threshold-cut" --threads 1 --max-steps 70 --resume="$TMP/threshold-cut/checkpoints/step-00000060" \
  --collective-timeout 30 ) >"$TMP/bad.log" 2>&1
rc=$?
[ "$rc" = 4 ] && grep -q 'crc32' "$TMP/bad.log" && pass "a damaged residual is refused (exit 4, crc32)" \
  || { fail "damaged residual: exit $rc"; tail -3 "$TMP/bad.log"; }
finish
