#!/usr/bin/env bash
# tests/gpu/gpt-train.sh - transformers trained on the GPU against the same run on the CPU: the
# two-block character transformer of tests/cli/attn-spec.sh (SGD, attention dropout 0.1, one block's
# MLP in gelu_tanh) for 20 steps, weights within 1e-4 (max|cpu - gpu| / max|cpu|); and
# models/char-gpt.yaml (AdamW, warmup, clipping) for 30 steps, weights within 1e-3 and the held-out
# loss within 1e-3 relative. The bounds leave room for the GPU's other summation orders: on the CPU,
# two kernel paths (plain vs blocked attention, generic vs AVX-512, OpenBLAS Haswell vs SkylakeX)
# differ by 4.2e-8 after the first run and 1.5e-5 after the second. Also: kernel: blocked refused
# on cuda. Exit 77 (skip) where no GPU answers.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/../cli/attn-spec.sh"
cd "$top_srcdir"

# the probe: one step on the GPU; a missing GPU skips, any other failure is the test's
sed 's/h1_fc1, units: 32, activation: gelu}/h1_fc1, units: 32, activation: gelu_tanh}/' "$S" >"$TMP/gptt.yaml"
grep -q gelu_tanh "$TMP/gptt.yaml" || fail "the spec has no gelu_tanh block"
if ! "$DTRAIN" run "$TMP/gptt.yaml" --device cuda --max-steps 1 --out "$TMP/probe" --quiet >"$TMP/out" 2>"$TMP/err"; then
  if grep -Eq 'no CUDA device|no GPU|built without CUDA|cannot load the CUDA module' "$TMP/err"; then
    echo "SKIP: $(cat "$TMP/err")"
    exit 77
  fi
  fail "one step on the GPU: $(cat "$TMP/err")"
  finish
fi

# train DEVICE NAME SPEC STEPS
train() {
  timeout -k 5 300 "$DTRAIN" run "$3" --device "$1" --threads 1 --max-steps "$4" --out "$TMP/$2" --quiet \
    --set train.log_every=10 >"$TMP/$2.log" 2>&1 || { fail "$2: exit $?"; sed 's/^/  | /' "$TMP/$2.log" | head -20; }
}
# held-out loss of a run (the last test line of metrics.jsonl)
test_loss() { grep '"split":"test"' "$TMP/$1/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([^,]*\).*/\1/'; }

train cpu cpu "$TMP/gptt.yaml" 20
train cuda gpu "$TMP/gptt.yaml" 20
$CMP "$TMP/cpu/model.safetensors" "$TMP/gpu/model.safetensors" --tol 1e-4 >"$TMP/cmp" 2>&1 \
  && pass "2-block transformer, 20 SGD steps: GPU = CPU ($(cat "$TMP/cmp"))" || fail "2-block transformer: $(cat "$TMP/cmp")"

if [ -r /usr/share/common-licenses/GPL-3 ]; then
  train cpu cg-cpu models/char-gpt.yaml 30
  train cuda cg-gpu models/char-gpt.yaml 30
  $CMP "$TMP/cg-cpu/model.safetensors" "$TMP/cg-gpu/model.safetensors" --tol 1e-3 >"$TMP/cmp" 2>&1 \
    && pass "char-gpt, 30 AdamW steps: GPU = CPU ($(cat "$TMP/cmp"))" || fail "char-gpt: $(cat "$TMP/cmp")"
  a=$(test_loss cg-cpu) b=$(test_loss cg-gpu)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-3 * a) }' \
    && pass "char-gpt held-out loss: cpu $a, gpu $b" || fail "char-gpt held-out loss: cpu $a, gpu $b"
else
  echo "note: /usr/share/common-licenses is absent: char-gpt not trained"
fi

# the blocked kernel is the cpu's: refused on cuda when the spec is checked, at the layer
sed 's/causal: true, dropout: 0.1}/causal: true, dropout: 0.1, kernel: blocked}/' "$TMP/gptt.yaml" >"$TMP/blocked.yaml"
expect_rc 2 "kernel: blocked on cuda" "$DTRAIN" check "$TMP/blocked.yaml" --device cuda
grep -q "blocked.yaml:7:5: error: layer 'h0_attn' (attention): kernel: blocked runs on the cpu backend only" "$TMP/err" \
  || fail "kernel: blocked on cuda: $(cat "$TMP/err")"
finish
