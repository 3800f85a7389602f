#!/usr/bin/env bash
# tests/cli/pp-virtual-rc.sh - recomputation with virtual pipeline stages (issue 31): under
# interleaved each chunk remakes its own segments in its backward, bitwise equal to no recomputation
# (a residual CNN with batch norm on 2 and 4 stages x 2 chunks, an MLP with dropout on 2); the
# memory plan counts what each chunk keeps (within 8% of the measured peak past the first rank, and
# below the plan without recomputation); zb-v and v-half, whose weight passes wait past other
# backwards, refuse it at the key.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_MCA_rmaps_base_oversubscribe=1
D=$top_srcdir/tests/cli
cluster acc4 'partition: {micro_batch: 4}'
cluster ilr 'partition: {strategy: model, micro_batches: 8, schedule: interleaved, recompute: all}'
S="--max-steps 10"
mpi_run res-1 1 "$D/pp-res.yaml" acc4 $S
for np in 2 4; do
  mpi_run "res-r$np" "$np" "$D/pp-res.yaml" ilr $S
  same res-1 "res-r$np" "pp-res, interleaved, $np stages x 2 chunks, recompute all = 1 rank without"
done
mpi_run mlp-1 1 "$D/pp-v-mlp.yaml" acc4 $S
mpi_run mlp-r2 2 "$D/pp-v-mlp.yaml" ilr $S
same mlp-1 mlp-r2 "pp-v-mlp, interleaved, 2 stages x 2 chunks, recompute all = 1 rank without"

# the plan: mlp-even8 at batch 2048 on 2 stages x 2 chunks, each chunk's first fc recomputed where
# it is not the chunk's output; rank 0 plans checkpoint snapshots a 2-step run never takes
if [ -z "${DTRAIN_SAN_CFLAGS:-}" ]; then
  cluster il 'partition: {strategy: model, micro_batches: 8, schedule: interleaved}'
  for c in il ilr; do
    mpi_run "mem-$c" 2 "$top_srcdir/bench/models/mlp-even8.yaml" "$c" --max-steps 2 --set train.batch=2048
  done
  python3 - "$TMP/mem-il/metrics.jsonl" "$TMP/mem-ilr/metrics.jsonl" <<'PY' && pass "recompute with chunks: memory as planned, less than without" || fail "memory: $(grep -ho '"mem_planned.*' "$TMP"/mem-il*/metrics.jsonl | cut -c1-160)"
import json, sys
def last(f): return [json.loads(x) for x in open(f) if '"mem_peak_mib"' in x][-1]
il, rc = last(sys.argv[1]), last(sys.argv[2])
for a, b in list(zip(rc["mem_planned_mib"], rc["mem_peak_mib"]))[1:]:
    assert abs(a - b) <= 0.08 * b, (a, b)
assert rc["mem_planned_mib"][0] < il["mem_planned_mib"][0] - 4, (rc["mem_planned_mib"], il["mem_planned_mib"])
assert rc["mem_peak_mib"][0] < il["mem_peak_mib"][0] - 2, (rc["mem_peak_mib"], il["mem_peak_mib"])
PY
fi

# the V's deferred weight passes would read what recomputation released
for s in zb-v v-half; do
  cluster "bad-$s" "partition: {strategy: model, schedule: $s, recompute: all}"
  expect_rc 2 "recompute with $s refused" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/bad-$s.yaml"
  grep -qF "bad-$s.yaml:1:" "$TMP/err" && grep -qF "error: 'recompute' does not combine with schedule $s" "$TMP/err" \
    && pass "$s: at the key" || fail "$s message: $(head -2 "$TMP/err")"
done
finish
