#!/usr/bin/env bash
# tests/cli/plan-memory.sh - strategy auto searches recomputation with the grid: on 1 rank, under a
# memory_per_rank between what recompute all and what keeping the activations needs, it picks
# recompute all, says so in its plan, YAML and check table, and trains within the limit; with no
# limit it keeps the activations (recompute is slower). One rank: on two, a pipeline's slots hold a
# micro-batch each, so a 16-micro-batch pipeline keeping its activations needs within 1 MiB of one
# recomputing them, too close for a limit between.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
if [ -n "${DTRAIN_SAN_CFLAGS:-}" ]; then
  # the sanitizers' shadow memory grows the measured fixed part between the plan and the run's
  # own check; the limits here hold for a plain build only
  echo "skip: memory limits under --enable-sanitizers"; exit 77
fi

# activations dominate: 4 x 512 units at batch 4096 against 0.9M parameters
cat >"$TMP/deep.yaml" <<YAML
name: deep
input: [128]
layers:
  - {type: fc, name: fc1, units: 512, activation: relu}
  - {type: fc, name: fc2, units: 512, activation: relu}
  - {type: fc, name: fc3, units: 512, activation: relu}
  - {type: fc, name: fc4, units: 512, activation: relu}
  - {type: fc, name: fc5, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 8192, seed: 3, noise: 1.0}
  classes: 4
train: {epochs: 1, batch: 4096, seed: 5, optimizer: {type: adamw, lr: 0.001}}
YAML
np1() { timeout -k 5 240 "$DTRAIN" "$@"; }
need() { cat "$TMP/out" "$TMP/err" | grep -o 'needs [0-9.]* MiB' | head -1 | grep -o '[0-9.]*'; }

# the two needs, from the run's own accounting: the least of any layout (recompute all) and the plain one's
cluster tiny 'memory_per_rank: 1MiB
partition: {strategy: auto}'
expect_rc 2 "auto under a limit nothing meets" np1 check "$TMP/deep.yaml" --cluster "$TMP/tiny.yaml"
grep -q 'the smallest, data 1 x pipeline 1 x tensor 1.*recompute all, needs' "$TMP/out" "$TMP/err" ||
  fail "the smallest layout recomputes: $(cat "$TMP/out" "$TMP/err" | grep -o 'the smallest.*')"
least=$(cat "$TMP/out" "$TMP/err" | grep -o 'recompute all, needs [0-9.]* MiB' | head -1 | grep -o '[0-9.]*')
# the least of the layouts keeping their activations (a shard stage: checkpoints stream, so no
# rank gathers the whole moments)
cluster tinyd 'memory_per_rank: 1MiB
partition: {strategy: auto, recompute: none}'
expect_rc 2 "every layout keeping its activations over the limit" np1 check "$TMP/deep.yaml" --cluster "$TMP/tinyd.yaml"
keep=$(need)
mid=$(awk -v a="${least:-0}" -v b="${keep:-0}" 'BEGIN { if (a > 0 && b > a + 8) printf "%.1f", a + 0.6 * (b - a) }')
[ -n "$mid" ] || fail "recompute all needs $least MiB, the least keeping activations $keep: no limit between"
# the same model and limit: check plans, run trains, both choosing recompute all
cluster mid "memory_per_rank: ${mid:-1}MiB
partition: {strategy: auto}"
expect_rc 0 "check under a limit only recomputation meets" np1 check "$TMP/deep.yaml" --cluster "$TMP/mid.yaml"
grep -Eq '^fc1 .*recomputed' "$TMP/out" || fail "check's table marks the recomputed layers"
expect_rc 0 "run under that limit" np1 run "$TMP/deep.yaml" --cluster "$TMP/mid.yaml" --max-steps 2 --threads 1 --out "$TMP/mid"
grep -q '^plan: .*recompute all' "$TMP/out" || fail "the run's plan line names recompute all"
grep -q 'recompute all: fits [0-9.]* MiB of the [0-9.]* MiB per rank' "$TMP/mid/plan.txt" || fail "plan.txt says why: $(grep why "$TMP/mid/plan.txt")"
grep -q '^  recompute: all$' "$TMP/mid/plan.txt" || fail "plan.txt's cluster spec has recompute: all"
awk -v l="${mid:-0}" '/^memory: rank [0-9]+ planned/ { n++; if ($5 > l) bad++ } END { exit !(n == 1 && !bad) }' "$TMP/out" ||
  fail "planned within ${mid} MiB: $(grep '^memory: rank' "$TMP/out" | tr '\n' ' ')"
# no limit: the activations are kept (recompute only costs time)
cluster free 'partition: {strategy: auto}'
expect_rc 0 "check with no limit" np1 check "$TMP/deep.yaml" --cluster "$TMP/free.yaml"
grep -q 'planned memory per rank' "$TMP/out" && ! grep -q 'recomputed' "$TMP/out" ||
  fail "no limit, no recomputation: $(grep -E 'recomputed|planned memory' "$TMP/out")"
finish
