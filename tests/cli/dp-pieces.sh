#!/usr/bin/env bash
# tests/cli/dp-pieces.sh - a gradient bucket over DT_COMM_PIECE_BYTES (8 MiB) is all-reduced in
# pieces, each its own MPI_Iallreduce (one 80 MB all-reduce overflowed an 8 MiB stack inside Open
# MPI's libnbc): 2 ranks equal 1 rank within 1e-5 after 20 steps, fp32 and fp16, and the trace of
# a step shows the bucket issued as 2 pieces. The two-level path (partition.hierarchical, 2 fake
# nodes x 2 ranks) takes the pieces as buckets of their own: 4 ranks equal 1 rank within 1e-5 (its
# node step was libnbc's MPI_Ireduce, whose 8 KiB chain made the 8 MiB piece miss the deadline).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
cluster none 'partition: {bucket_mb: 16}'
cluster fp16 'partition: {bucket_mb: 16, compression: fp16}'
cluster hier 'partition: {hierarchical: true}'
( cd "$top_srcdir" && "$DTRAIN" run "$D/dp-pieces.yaml" --out "$TMP/one" --threads 1 --quiet ) >"$TMP/one.log" 2>&1 \
  || { fail "1 rank: exit $?"; tail -3 "$TMP/one.log"; }
mpi_run two 2 "$D/dp-pieces.yaml" none --trace "$TMP/tr.json" --max-steps 20
( cd "$top_srcdir" && "$DTRAIN" run "$D/dp-pieces.yaml" --out "$TMP/one20" --threads 1 --quiet --max-steps 20 ) \
  >/dev/null 2>&1 || fail "1 rank, 20 steps"
close one20 two "2 ranks, the bucket in pieces"
DTRAIN_HIER_RANKS_PER_NODE=2 mpi_run hier 4 "$D/dp-pieces.yaml" hier --max-steps 20
close one20 hier "two-level, 2 fake nodes x 2 ranks, the 8.8 MiB bucket in 2 pieces"
mpi_run half 2 "$D/dp-pieces.yaml" fp16 --max-steps 20
$CMP "$TMP/one20/model.safetensors" "$TMP/half/model.safetensors" --tol 1e-2 >"$TMP/cmp" 2>&1 \
  && pass "fp16 in pieces: within 1% of 1 rank ($(cat "$TMP/cmp"))" || fail "fp16 in pieces: $(cat "$TMP/cmp")"
n=$(grep -o '"allreduce issued (gradient bucket, piece [0-9]* of 2)"' "$TMP/tr.rank0.json" | sort -u | wc -l)
[ "$n" = 2 ] && pass "the 8.8 MiB bucket went as 2 all-reduces" || fail "pieces in the trace: $n, wanted 2"
finish
