#!/usr/bin/env bash
# tests/cli/memory-plan.sh - the memory plan: memory_per_rank's units and bad values at
# file:line:col, a limit the plan does not fit refused before training naming what takes the
# memory, strategy auto under a limit nothing meets refused with the smallest layout's need, and
# every run's planned peak within 10% of the measured one (VmHWM; memory is deterministic).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

cluster badunit 'memory_per_rank: 300 parsecs'
expect_rc 2 "memory_per_rank with a bad unit" "$DTRAIN" check models/mlp.yaml --cluster "$TMP/badunit.yaml"
grep -q 'badunit.yaml:1:18: error: .memory_per_rank. must be a size' "$TMP/err" || fail "bad unit message at file:line:col"
cluster tiny 'memory_per_rank: 10KiB'
expect_rc 2 "memory_per_rank below 1MiB" "$DTRAIN" check models/mlp.yaml --cluster "$TMP/tiny.yaml"
grep -q 'tiny.yaml:1:18: error: .memory_per_rank. must be between' "$TMP/err" || fail "range message"

cluster small 'memory_per_rank: 12MiB'
expect_rc 2 "a plan over memory_per_rank (check)" "$DTRAIN" check models/mlp.yaml --cluster "$TMP/small.yaml"
grep -q 'small.yaml:1:18: error: rank 0 needs [0-9.]* MiB besides the dataset caches mapped from disk but memory_per_rank is 12.0 MiB (.*data .*parameters' "$TMP/err" ||
  fail "the refusal names what takes the memory"
expect_rc 2 "a plan over memory_per_rank (run)" "$DTRAIN" run models/mlp.yaml --cluster "$TMP/small.yaml" --out "$TMP/small"
[ ! -e "$TMP/small/metrics.jsonl" ] || fail "refused before training"
cluster roomy 'memory_per_rank: 2GiB'
expect_rc 0 "a plan within memory_per_rank" "$DTRAIN" check models/mlp.yaml --cluster "$TMP/roomy.yaml"

if [ -n "${DTRAIN_SAN_CFLAGS:-}" ]; then
  # the sanitizers' shadow memory and redzones are no part of the plan: the limits and the 10%
  # below hold for a plain build only
  echo "skip: the planned-against-measured checks under --enable-sanitizers"; finish
fi

cluster autosmall 'memory_per_rank: 30MiB
partition: {strategy: auto}'
expect_rc 2 "auto under a limit nothing meets" timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" check bench/models/mlp-4096.yaml \
  --cluster "$TMP/autosmall.yaml"
cat "$TMP/out" "$TMP/err" | grep -q 'autosmall.yaml:1:18: error: no layout .* fits memory_per_rank 30.0 MiB; the smallest, .* needs' ||
  fail "auto names the smallest layout's need"

within() {   # within LABEL FILE: every "memory: rank" line within 10%
  awk '/^memory: rank [0-9]+ planned/ { n++; e = ($5 - $9) / $9; if (e < -0.10 || e > 0.10) bad++ } END { exit !(n && !bad) }' "$2" ||
    fail "$1: planned not within 10% of measured: $(grep -E '^memory: rank [0-9]+ planned' "$2" | tr '\n' ' ')"
}
# auto under a limit between the 2-rank need (~56 MiB besides the mapped dataset caches: the
# activations of half the batch) and the 1-rank one (~79 MiB): 1 rank is refused, 2 ranks pick a
# layout that fits (the run's own check passes) and train within 10% of its plan
cluster automid 'memory_per_rank: 68MiB
partition: {strategy: auto}'
expect_rc 2 "auto on 1 rank under a limit only 2 ranks meet" "$DTRAIN" check models/mlp.yaml --set train.batch=4096 \
  --cluster "$TMP/automid.yaml"
expect_rc 0 "auto on 2 ranks under that limit" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run models/mlp.yaml \
  --set train.batch=4096 --cluster "$TMP/automid.yaml" --max-steps 3 --threads 1 --out "$TMP/automid"
within "auto on 2 ranks" "$TMP/out"
grep -q '^plan: ' "$TMP/out" || fail "auto names its plan"

# checkpoint_snapshots: 1 (default) plans (and the writer holds) one copy of the model, 2 two
cluster snap1 'checkpoint_snapshots: 1'
cluster snap2 'checkpoint_snapshots: 2'
expect_rc 0 "check with checkpoint_snapshots 2" "$DTRAIN" check models/mlp.yaml --set train.epochs=3 --cluster "$TMP/snap2.yaml"
s2=$(grep -o 'checkpoint snapshots [0-9.]* MiB' "$TMP/out" | grep -o '[0-9.]*')
expect_rc 0 "check with checkpoint_snapshots 1" "$DTRAIN" check models/mlp.yaml --set train.epochs=3 --cluster "$TMP/snap1.yaml"
s1=$(grep -o 'checkpoint snapshots [0-9.]* MiB' "$TMP/out" | grep -o '[0-9.]*')
expect_rc 0 "check by default" "$DTRAIN" check models/mlp.yaml --set train.epochs=3
s0=$(grep -o 'checkpoint snapshots [0-9.]* MiB' "$TMP/out" | grep -o '[0-9.]*')
awk -v a="$s1" -v b="$s2" -v c="$s0" 'BEGIN { exit !(a > 0 && b > 1.99 * a && b < 2.01 * a && c == a) }' \
  || fail "snapshots planned: $s1 (1) vs $s2 (2), $s0 by default"
expect_rc 0 "a run keeping one snapshot" "$DTRAIN" run models/mlp.yaml --set train.epochs=2 --set train.checkpoint_every=20 \
  --max-steps 60 --threads 1 --cluster "$TMP/snap1.yaml" --out "$TMP/snap1"
within "one snapshot" "$TMP/out"
[ -s "$TMP/snap1/model.safetensors" ] && [ -s "$TMP/snap1/checkpoints/latest" ] || fail "one snapshot: checkpoints written"

# planned against measured, 1 and 2 ranks, and the figures in metrics.jsonl
expect_rc 0 "mlp 1 rank" "$DTRAIN" run models/mlp.yaml --max-steps 30 --threads 1 --out "$TMP/m1"
within "mlp 1 rank" "$TMP/out"
grep -q '"mem_planned_mib":\[[0-9.]*\],"mem_peak_mib":\[[0-9.]*\]' "$TMP/m1/metrics.jsonl" || fail "metrics.jsonl memory"
expect_rc 0 "lenet 1 rank" "$DTRAIN" run models/lenet.yaml --max-steps 10 --threads 1 --out "$TMP/l1"
within "lenet 1 rank" "$TMP/out"
expect_rc 0 "mlp 2 ranks" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run models/mlp.yaml --max-steps 100 --threads 1 --out "$TMP/m2"
within "mlp 2 ranks" "$TMP/out"
# a CSV parse peaks during setup and frees it all: the plan's floor (the fixed part is measured
# after that heap is given back, so without the floor both ranks were 20-32% under)
expect_rc 0 "blobs-csv 2 ranks" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run models/blobs-csv.yaml --max-steps 50 --threads 1 --out "$TMP/b2"
within "blobs-csv 2 ranks" "$TMP/out"
# large gradient buckets past an epoch's end: rank 0 copies its checkpoint snapshot (one, the
# default) while rank 1's all-reduces wait for it in flight, at most 8 MiB of them. Before both
# were bounded and counted, rank 0 planned two snapshots (+20%) and rank 1 held 78 MiB of
# all-reduce temporaries beyond its plan (-21.5%)
expect_rc 0 "the 10-layer 2048-wide MLP, 2 ranks, past an epoch" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run \
  bench/models/mlp-even10.yaml --max-steps 34 --threads 1 --out "$TMP/e10"
within "the 10-layer MLP, 2 ranks" "$TMP/out"
# shard 3 on 4 ranks (2 cores): backward waits for all but one bucket's reduce-scatter before it
# writes the next, and the parameters are drawn layer by layer. Before, the ring left most of the
# gradient resident (-32%) and the initialisation held the whole model (-14%)
cluster s3 'partition: {shard: 3}'
expect_rc 0 "the 10-layer MLP, 4 ranks, shard 3" timeout -k 5 300 "$MPIRUN" -np 4 "$DTRAIN" run \
  bench/models/mlp-even10.yaml --max-steps 6 --threads 1 --cluster "$TMP/s3.yaml" --out "$TMP/e10s3"
within "the 10-layer MLP, 4 ranks, shard 3" "$TMP/out"
# a short run on 4 ranks reads a quarter of each batch: what its random reads map of the training
# set's cache, from the grain each rank measured (counted whole, mlp planned +18.7% at 30 steps)
expect_rc 0 "mlp 4 ranks, shard 3, 30 steps" timeout -k 5 300 "$MPIRUN" -np 4 "$DTRAIN" run models/mlp.yaml \
  --max-steps 30 --threads 1 --cluster "$TMP/s3.yaml" --out "$TMP/m4s3"
within "mlp 4 ranks, shard 3, 30 steps" "$TMP/out"
# shard 3 whose micro-batches accumulate holds the whole gradient until the last one (planned as
# two buckets: -17% and -19%); reproducible mode's chunk tree holds a whole gradient per node of
# every rank and per depth, and gathers the parameters for the step (planned as shard 3: -79%)
# shard 3 beside tensor splits: the parameters drawn a layer at a time (the unsplit model on every
# rank was 220 MiB here, planned 256) and backward bounded as on a data axis alone (the tensor
# all-reduces' waits move the ring on)
cluster dt3 'partition: {strategy: hybrid, data: 2, tensor: 2, shard: 3}'
expect_rc 0 "the 10-layer MLP, data 2 x tensor 2, shard 3" timeout -k 5 300 "$MPIRUN" -np 4 "$DTRAIN" run \
  bench/models/mlp-even10.yaml --max-steps 6 --threads 1 --cluster "$TMP/dt3.yaml" --out "$TMP/e10dt3"
within "the 10-layer MLP, data 2 x tensor 2, shard 3" "$TMP/out"
awk '/^memory: rank [0-9]+ planned/ { if ($9 > 150) bad++ } END { exit bad > 0 }' "$TMP/out" ||
  fail "data 2 x tensor 2 at shard 3 peaks under 150 MiB a rank: $(grep -E '^memory: rank' "$TMP/out" | tr '\n' ' ')"
cluster s3mb 'partition: {shard: 3, micro_batch: 16}'
expect_rc 0 "the 10-layer MLP, 2 ranks, shard 3, micro-batches" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run \
  bench/models/mlp-even10.yaml --max-steps 6 --threads 1 --cluster "$TMP/s3mb.yaml" --out "$TMP/e10s3mb"
within "the 10-layer MLP, 2 ranks, shard 3, micro-batches" "$TMP/out"
# each micro-batch reduce-scattered keeps the bound: 189.6 MiB a rank, 238 with the gradient whole
awk '/^memory: rank [0-9]+ planned/ { if ($9 > 215) bad++ } END { exit bad > 0 }' "$TMP/out" ||
  fail "shard 3 with micro-batches peaks under 215 MiB a rank: $(grep -E '^memory: rank' "$TMP/out" | tr '\n' ' ')"
cluster s3rep 'partition: {shard: 3, reproducible: true}'
# the tree's buffers are kept from step to step: allocated every step, they landed wherever the
# heap's holes were and in 1 run of 4 the heap grew by one or two of them (rank 0 232-280 MiB)
expect_rc 0 "mlp-even, 2 ranks, shard 3, reproducible" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run bench/models/mlp-even.yaml --max-steps 6 --threads 1 --cluster "$TMP/s3rep.yaml" --out "$TMP/es3rep"
within "mlp-even, 2 ranks, shard 3, reproducible" "$TMP/out"
grep -q 'reproducible chunk sums 120.1 MiB' "$TMP/out" || fail "reproducible mode plans its tree: $(grep -o 'reproducible chunk sums [0-9.]* MiB' "$TMP/out")"
# shard 2 with recompute: rank 0 streams the checkpoints (its pieces were 8 MiB zeroed whatever the
# model, -12.6% here) and every rank holds the ring reduce-scatter's receive buffer, the largest part
# of a bucket (mlp-4096 on 2 ranks: 32 MiB of gradients beyond the whole buffer)
cluster s2rc 'partition: {shard: 2, recompute: all}'
expect_rc 0 "mlp 2 ranks, shard 2, recompute all" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" run models/mlp.yaml \
  --max-steps 40 --threads 1 --cluster "$TMP/s2rc.yaml" --out "$TMP/s2rc"
within "mlp 2 ranks, shard 2, recompute all" "$TMP/out"
expect_rc 0 "check mlp-4096 at shard 2" timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" check bench/models/mlp-4096.yaml \
  --cluster "$TMP/s2rc.yaml"
grep -q 'gradients 108.5 MiB' "$TMP/out" || fail "shard 2 plans the ring's buffer: $(grep -o 'gradients [0-9.]* MiB' "$TMP/out")"
# resnet at batch 128 with its evaluation of the whole test set: forward in pieces of the training
# batch, so the peak stays far below the 2.8 GB the evaluation batch of 1000 took in the training graph
expect_rc 0 "resnet with its evaluation" "$DTRAIN" run models/resnet.yaml --max-steps 2 --threads 1 --out "$TMP/r1"
within "resnet 1 rank" "$TMP/out"
awk '/^memory: rank 0 planned/ { exit !($9 < 800 * 1e6 / 1048576) }' "$TMP/out" || fail "resnet peaks under 800 MB"
finish
