#!/usr/bin/env bash
# tests/cli/recompute.sh - partition.recompute (activation recomputation): the weights after training
# with all, auto or a list of layers recomputed are bitwise those of none, on one rank (cnn-bn: batch
# norm, dropout; lstm; resnet: residual adds and projection shortcuts), on 2 pipeline stages (1f1b and
# gpipe; a branched graph) and under tensor 2 (LSTMs); backward really remakes the layers (their
# "recompute" spans in --trace, the checkpoints' absent), the memory plan shrinks, bench prints the
# cost, and the key's mistakes are refused at file:line:col with exit 2.
. "$(dirname "$0")/lib.sh"
D=$top_srcdir/tests/cli
cluster none 'partition: {recompute: none}'
cluster all 'partition: {recompute: all}'
cluster auto 'partition: {recompute: auto}'
cluster list 'partition: {recompute: [bn*, "pool?", dropout1]}'
# one NAME SPEC CLUSTER STEPS: one rank from the source tree (the models name their data relative to it)
one() {
  ( cd "$top_srcdir" && "$DTRAIN" run "$2" --cluster "$TMP/$3.yaml" --out "$TMP/$1" --max-steps "$4" --threads 1 \
    --quiet ) >"$TMP/$1.log" 2>&1 || { fail "$1: exit $?"; sed 's/^/  | /' "$TMP/$1.log" | head; }
}
bitwise() { cmp -s "$TMP/$1/model.safetensors" "$TMP/$2/model.safetensors" && pass "$3" || fail "$3: weights differ"; }

one cnn-none models/cnn-bn.yaml none 20
one cnn-all models/cnn-bn.yaml all 20
one cnn-list models/cnn-bn.yaml list 20
bitwise cnn-none cnn-all "cnn-bn, recompute all = none (20 steps)"
bitwise cnn-none cnn-list "cnn-bn, recompute [bn*, pool?, dropout1] = none"
one lstm-none models/lstm.yaml none 20
one lstm-all models/lstm.yaml all 20
bitwise lstm-none lstm-all "lstm, recompute all = none"
one res-none models/resnet.yaml none 8
one res-all models/resnet.yaml all 8
one res-auto models/resnet.yaml auto 8
bitwise res-none res-all "resnet, recompute all = none (residual branches)"
bitwise res-none res-auto "resnet, recompute auto = none"

# backward remakes the recomputed layers, once per step, and not the checkpoints
( cd "$top_srcdir" && "$DTRAIN" run models/cnn-bn.yaml --cluster "$TMP/all.yaml" --out "$TMP/tr" --max-steps 2 \
  --threads 1 --quiet --trace "$TMP/trace.json" ) >"$TMP/tr.log" 2>&1 || fail "traced run: exit $?"
python3 - "$TMP/trace.json" <<'PY' && pass "trace: conv1, bn1, fc1 remade once per step; pool1, dropout1 kept" || fail "trace"
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
n = collections.Counter(e["name"] for e in ev if e.get("cat") == "recompute")
ok = n["conv1"] == 2 and n["bn1"] == 2 and n["fc1"] == 2 and n["pool1"] == 0 and n["dropout1"] == 0
print(dict(n))
sys.exit(0 if ok else 1)
PY

# dtrain check's table marks the layers all picked: the windows' checkpoints pool1, bn3, dropout1 are kept
"$DTRAIN" check "$top_srcdir/models/cnn-bn.yaml" --cluster "$TMP/all.yaml" >"$TMP/check.out" 2>&1
[ "$(awk '/recomputed$/ { printf "%s ", $1 }' "$TMP/check.out")" = "conv1 bn1 conv2 bn2 pool2 conv3 pool3 flatten fc1 " ] \
  && pass "check marks the recomputed layers" || { fail "check's table"; cat "$TMP/check.out"; }
# the memory plan's activations at batch 256 (issue 27: at least halved): what bn1's backward
# reads (x, not y: a remade output no backward reads dies at once) and its gradient written over its
# output's (in place)
planned() { "$DTRAIN" check "$top_srcdir/models/cnn-bn.yaml" --cluster "$TMP/$1.yaml" --batch 256 2>&1 \
  | sed -n 's/.*planned memory per rank: .*activations \([0-9.]*\) MiB.*/\1/p'; }
p0=$(planned none) p1=$(planned all)
awk -v a="$p0" -v b="$p1" 'BEGIN { exit !(a > 0 && b > 0 && b <= 0.5 * a) }' \
  && pass "batch 256: planned activations $p0 -> $p1 MiB with recompute all" || fail "planned activations: none '$p0', all '$p1'"
# measured: the peak RSS falls by at least half the activations none plans (3 steps and the test set)
peak() {
  ( cd "$top_srcdir" && "$DTRAIN" run models/cnn-bn.yaml --cluster "$TMP/$1.yaml" --out "$TMP/pk-$1" --batch 256 \
    --max-steps 3 --threads 1 --quiet ) >"$TMP/pk-$1.log" 2>&1 || fail "peak $1: exit $?"
  tail -1 "$TMP/pk-$1/metrics.jsonl" | sed -n 's/.*"mem_peak_mib":\[\([0-9.]*\)\].*/\1/p'
}
m0=$(peak none) m1=$(peak all)
awk -v a="$m0" -v b="$m1" -v p="$p0" 'BEGIN { exit !(a > 0 && b > 0 && a - b >= 0.5 * p) }' \
  && pass "batch 256: peak RSS $m0 -> $m1 MiB with recompute all (planned activations $p0 MiB)" \
  || fail "measured peaks: none '$m0', all '$m1' MiB, planned activations '$p0'"
# resnet's checkpoints at its block outputs (no shortcut reaches into a segment): less than half
planned_res() { "$DTRAIN" check "$top_srcdir/models/resnet.yaml" --cluster "$TMP/$1.yaml" --batch 256 \
  --set train.eval_batch=256 2>&1 | sed -n 's/.*planned memory per rank: .*activations \([0-9.]*\) MiB.*/\1/p'; }
p0=$(planned_res none) p1=$(planned_res all)
awk -v a="$p0" -v b="$p1" 'BEGIN { exit !(a > 0 && b > 0 && b < 0.5 * a) }' \
  && pass "resnet at batch 256: planned activations $p0 -> $p1 MiB with recompute all" || fail "resnet plan: none '$p0', all '$p1'"
expect_rc 0 "bench with recompute all" "$DTRAIN" bench "$top_srcdir/models/cnn-bn.yaml" --cluster "$TMP/all.yaml" \
  --batch 16 --iters 2 --warmup 1 --threads 1
grep -q '^recompute: [0-9.]* ms per step' "$TMP/out" && grep -q 'recompute ms' "$TMP/out" \
  && pass "bench reports the recomputation" || fail "bench: no recompute figures"

# the key's mistakes, at file:line:col
bad() {
  printf 'partition:\n  recompute: %s\n' "$1" >"$TMP/bad.yaml"
  expect_rc 2 "recompute: $1" "$DTRAIN" check "$top_srcdir/models/cnn-bn.yaml" --cluster "$TMP/bad.yaml"
  grep -q "bad.yaml:2:$2: error: .*$3" "$TMP/err" || { fail "recompute: $1: message"; cat "$TMP/err"; }
}
bad '[]' 14 "empty list, which names no layer"
bad '[bn9, "conv*"]' 15 "entry 'bn9' names no layer of model 'cnn-bn'"
bad 'everything' 14 "must be none, all, auto or a list"
bad '{bn1: yes}' 14 "got a mapping"

command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun for the pipeline and tensor runs"; finish; }
cluster pf 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b}'
cluster pfa 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b, recompute: all}'
cluster pg 'partition: {strategy: model, micro_batches: 4, schedule: gpipe}'
cluster pga 'partition: {strategy: model, micro_batches: 4, schedule: gpipe, recompute: auto}'
cluster t2 'partition: {strategy: model, tensor: 2}'
cluster t2a 'partition: {strategy: model, tensor: 2, recompute: all}'
mpi_run pf 2 "$D/pp-mlp.yaml" pf --max-steps 20
mpi_run pfa 2 "$D/pp-mlp.yaml" pfa --max-steps 20
bitwise pf pfa "mlp (dropout, batch norm), 2 stages 1f1b, recompute all = none"
mpi_run pg 2 "$D/pp-mlp.yaml" pg --max-steps 20
mpi_run pga 2 "$D/pp-mlp.yaml" pga --max-steps 20
bitwise pg pga "mlp, 2 stages gpipe, recompute auto = none"
mpi_run rf 2 "$D/pp-res.yaml" pf --max-steps 20
mpi_run rfa 2 "$D/pp-res.yaml" pfa --max-steps 20
bitwise rf rfa "branched CNN, 2 stages 1f1b, recompute all = none"
mpi_run t2 2 "$D/tp-lstm.yaml" t2 --max-steps 20
mpi_run t2a 2 "$D/tp-lstm.yaml" t2a --max-steps 20
bitwise t2 t2a "LSTMs, tensor 2, recompute all = none"
cluster zb 'partition: {strategy: model, schedule: zb-h1, recompute: all}'
expect_rc 2 "recompute under zb-h1" "$MPIRUN" -np 2 "$DTRAIN" check "$D/pp-mlp.yaml" --cluster "$TMP/zb.yaml"
grep -q "zb.yaml:1:[0-9]*: error: 'recompute' does not combine with schedule zb-h1" "$TMP/err" \
  && pass "zb-h1 refused at the key" || { fail "zb-h1 message"; cat "$TMP/err"; }
finish
