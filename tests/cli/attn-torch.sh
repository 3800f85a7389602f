#!/usr/bin/env bash
# tests/cli/attn-torch.sh - one SGD step of a pre-norm causal transformer block (embedding, positions,
# layernorm, attention, gelu MLP, residual adds) equals PyTorch's (nn.LayerNorm, nn.MultiheadAttention
# with a causal mask; F.gelu exact and approximate="tanh") from the same weights, within 1e-5
# relative per tensor, for the plain and the blocked attention kernel (bench/attn_parity.py). Skips
# (77) without a python that imports torch and numpy ($DTRAIN_TEST_PYTHON or python3; nothing is
# installed for it).
. "$(dirname "$0")/lib.sh"

if ! PY=$("$top_srcdir/tests/tools/pyenv.sh" "import torch, numpy" 2>"$TMP/py.err"); then
  echo "skip: $(cat "$TMP/py.err") (set DTRAIN_TEST_PYTHON to a python with torch and numpy)"
  exit 77
fi
if "$PY" "$top_srcdir/bench/attn_parity.py" "$DTRAIN" "$TMP/work" >"$TMP/out" 2>&1; then
  pass "$(tail -1 "$TMP/out")"
else
  fail "dtrain's step differs from PyTorch's:"
  sed 's/^/  | /' "$TMP/out"
fi
sed 's/^/  /' "$TMP/out"
finish
