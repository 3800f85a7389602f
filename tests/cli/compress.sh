#!/usr/bin/env bash
# tests/cli/compress.sh - partition.compression bf16, powersgd and threshold under real mpirun on 2
# ranks: each run twice gives bitwise equal weights, each trains close to the uncompressed run, and
# each differs from it (the compression did something).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
# small buckets: several per model, each compressed on its own
cluster none 'partition: {bucket_mb: 0.001}'
cluster bf16 'partition: {compression: bf16, bucket_mb: 0.001}'
mpi_run none 2 "$D/dp-mlp.yaml" none --max-steps 40
for m in bf16; do
  mpi_run "$m-a" 2 "$D/dp-mlp.yaml" "$m" --max-steps 40
  mpi_run "$m-b" 2 "$D/dp-mlp.yaml" "$m" --max-steps 40
  same "$m-a" "$m-b" "$m: two runs"
  $CMP "$TMP/none/model.safetensors" "$TMP/$m-a/model.safetensors" --tol 0 >/dev/null 2>&1 \
    && fail "$m: equal to the uncompressed run" || pass "$m: differs from the uncompressed run"
  $CMP "$TMP/none/model.safetensors" "$TMP/$m-a/model.safetensors" --tol 0.05 >"$TMP/cmp" 2>&1 \
    && pass "$m: within 5% of the uncompressed weights ($(cat "$TMP/cmp"))" || fail "$m: $(cat "$TMP/cmp")"
done
finish
