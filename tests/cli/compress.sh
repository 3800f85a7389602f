#!/usr/bin/env bash
# tests/cli/compress.sh - partition.compression bf16, powersgd and threshold under real mpirun on 2
# ranks (dp-mlp, 4 epochs): each run twice gives bitwise equal weights, each differs from the
# uncompressed run (it compressed) yet reaches its test accuracy within 2 points; bf16's weights
# stay within 1% of the uncompressed ones; threshold with tau 0 equals uncompressed within 1e-6;
# thrdense (tau so small that every entry is sent) takes the int8 dense fallback; dtrain bench
# prints each bucket's bytes and encode time; compression: auto picks threshold over a slow network
# and none inside a node, and says why. topk and powersgd whose compression_warmup outlasts the run
# equal the uncompressed run bitwise (every step summed dense), and a shorter one is compressed after;
# topk sends tensors under 16384 entries whole, and a larger matrix sparse (deterministically); its
# default warm-up covers the learning rate's. fp16 on the CPU's vector path (parallel/half.c) gives
# the portable _Float16 loops' weights (DTRAIN_CPU=generic), buckets of odd lengths included.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
acc() { grep '"split":"test"' "$TMP/$1/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/'; }
# small buckets: several per model, each compressed on its own
cluster none 'partition: {bucket_mb: 0.001}'
cluster bf16 'partition: {compression: bf16, bucket_mb: 0.001}'
cluster powersgd 'partition: {compression: powersgd, powersgd_rank: 2, bucket_mb: 0.001}'
cluster threshold 'partition: {compression: threshold, bucket_mb: 0.001}'
cluster topk 'partition: {compression: topk, compression_warmup: 10, bucket_mb: 0.001}'
cluster topk0 'partition: {compression: topk, compression_warmup: 0, bucket_mb: 0.001}'
cluster thrdense 'partition: {compression: threshold, threshold: 1e-7, threshold_min_density: 0.5, threshold_max_density: 1, bucket_mb: 0.001}'
cluster thrsparse 'partition: {compression: threshold, threshold_min_density: 0.0001, threshold_max_density: 0.01, bucket_mb: 0.001}'
cluster thr0 'partition: {compression: threshold, threshold: 0, bucket_mb: 0.001}'
cluster topkwarm 'partition: {compression: topk, compression_warmup: 1000, bucket_mb: 0.001}'
cluster psgdwarm 'partition: {compression: powersgd, compression_warmup: 1000, bucket_mb: 0.001}'
cluster psgdwarm20 'partition: {compression: powersgd, powersgd_rank: 2, compression_warmup: 20, bucket_mb: 0.001}'
mpi_run none 2 "$D/dp-mlp.yaml" none
ref=$(acc none)
for m in bf16 powersgd threshold thrdense thrsparse; do
  mpi_run "$m-a" 2 "$D/dp-mlp.yaml" "$m"
  mpi_run "$m-b" 2 "$D/dp-mlp.yaml" "$m"
  same "$m-a" "$m-b" "$m: two runs"
  $CMP "$TMP/none/model.safetensors" "$TMP/$m-a/model.safetensors" --tol 0 >/dev/null 2>&1 \
    && fail "$m: equal to the uncompressed run" || pass "$m: differs from the uncompressed run"
  a=$(acc "$m-a")
  awk -v a="$a" -v r="$ref" 'BEGIN { exit !(a >= r - 0.02) }' \
    && pass "$m: test accuracy $a within 2 points of $ref" || fail "$m: test accuracy $a vs $ref"
done
$CMP "$TMP/none/model.safetensors" "$TMP/bf16-a/model.safetensors" --tol 0.01 >"$TMP/cmp" 2>&1 \
  && pass "bf16: within 1% of the uncompressed weights ($(cat "$TMP/cmp"))" || fail "bf16: $(cat "$TMP/cmp")"
mpi_run thr0 2 "$D/dp-mlp.yaml" thr0
$CMP "$TMP/none/model.safetensors" "$TMP/thr0/model.safetensors" --tol 1e-6 >"$TMP/cmp" 2>&1 \
  && pass "threshold 0 = uncompressed ($(cat "$TMP/cmp"))" || fail "threshold 0: $(cat "$TMP/cmp")"
cluster fp16 'partition: {compression: fp16, bucket_mb: 0.001}'
mpi_run fp16-best 2 "$D/dp-mlp.yaml" fp16
DTRAIN_CPU=generic mpi_run fp16-generic 2 "$D/dp-mlp.yaml" fp16
same fp16-best fp16-generic "fp16: the CPU's vector path = the portable loops"
# topk sends tensors under 16384 entries whole: on dp-mlp (all small) it is the uncompressed sum;
# with fc1 at 20 x 1024 that matrix goes sparse, the same in two runs, and within 2 points
mpi_run topk0 2 "$D/dp-mlp.yaml" topk0
same none topk0 "topk, every tensor under 16384 entries: uncompressed"
sed 's/units: 64/units: 1024/' "$D/dp-mlp.yaml" >"$TMP/wide.yaml"
mpi_run widenone 2 "$TMP/wide.yaml" none
mpi_run topk-a 2 "$TMP/wide.yaml" topk
mpi_run topk-b 2 "$TMP/wide.yaml" topk
same topk-a topk-b "topk: two runs"
$CMP "$TMP/widenone/model.safetensors" "$TMP/topk-a/model.safetensors" --tol 0 >/dev/null 2>&1 \
  && fail "topk: a 20 x 1024 matrix: equal to the uncompressed run" || pass "topk: a 20 x 1024 matrix: compressed"
a=$(acc topk-a) r=$(acc widenone)
awk -v a="$a" -v r="$r" 'BEGIN { exit !(a >= r - 0.02) }' \
  && pass "topk: test accuracy $a within 2 points of $r" || fail "topk: test accuracy $a vs $r"
# topk without compression_warmup stays dense over the learning rate's warm-up when that is longer
# than the default 100 steps (here 1000: the whole run, 128 steps)
cluster topkdef 'partition: {compression: topk, bucket_mb: 0.001}'
sed 's/warmup_steps: 10}/warmup_steps: 1000}/' "$TMP/wide.yaml" >"$TMP/widewarm.yaml"
mpi_run widewarmnone 2 "$TMP/widewarm.yaml" none
mpi_run topkdef 2 "$TMP/widewarm.yaml" topkdef
same widewarmnone topkdef "topk, no compression_warmup, 1000 learning-rate warm-up steps: uncompressed"
for m in topkwarm psgdwarm; do
  mpi_run "$m" 2 "$D/dp-mlp.yaml" "$m"
  same none "$m" "$m: a warm-up longer than the run = uncompressed"
done
mpi_run psgdwarm20 2 "$D/dp-mlp.yaml" psgdwarm20
for m in none powersgd-a; do
  $CMP "$TMP/$m/model.safetensors" "$TMP/psgdwarm20/model.safetensors" --tol 0 >/dev/null 2>&1 \
    && fail "powersgd, 20 dense steps: equal to $m" || pass "powersgd, 20 dense steps: differs from $m"
done
# compression: auto: the planner's pick, and why, in the banner: threshold over a 1 Gbit/s network
# (each rank its own node), none over one node's shared memory
cluster autonet 'partition: {compression: auto}
ranks_per_node: 1
network: {bandwidth_gbs: 0.125, latency_us: 50}'
cluster autoshm 'partition: {compression: auto}'
for a in autonet autoshm; do
  ( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/$a.yaml" \
    --out "$TMP/$a" --threads 1 --max-steps 3 --collective-timeout 30 ) >"$TMP/$a.log" 2>&1 || fail "$a: exit $?"
done
grep -q '^compression auto: threshold: the 2 ranks sum over the network (1 Gbit/s); it sends' "$TMP/autonet.log" \
  && grep -q 'compression threshold' "$TMP/autonet.log" && pass "auto over 1 Gbit/s: threshold, and why" \
  || { fail "auto over the network"; grep -i compression "$TMP/autonet.log"; }
grep -q '^compression auto: none: the 2 ranks sum over one node' "$TMP/autoshm.log" \
  && pass "auto in one node: none, and why" || { fail "auto in one node"; grep -i compression "$TMP/autoshm.log"; }
# dtrain bench: per bucket the bytes sent and the encode/decode time
( cd "$top_srcdir" && timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$D/dp-mlp.yaml" --cluster "$TMP/threshold.yaml" \
  --iters 3 --warmup 1 --threads 1 ) >"$TMP/bench.out" 2>&1 || fail "bench: exit $?"
grep -q '^compression threshold' "$TMP/bench.out" && grep -Eq '^  bucket 0: [0-9]+ of [0-9]+ bytes \([0-9.]+%\), [0-9.]+ ms' \
  "$TMP/bench.out" && pass "bench reports each bucket's bytes and encode time" || { fail "bench lines"; tail -5 "$TMP/bench.out"; }
finish
