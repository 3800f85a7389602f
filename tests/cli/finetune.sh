#!/usr/bin/env bash
# tests/cli/finetune.sh - fine-tuning: a PyTorch state_dict saved with safetensors (batch norm's
# int64 counter included) loads by tensor name; frozen layers stay bitwise unchanged while the
# others train; strict loading lists missing, unexpected and mismatched tensors (exit 4);
# non-strict loads what matches; a freeze pattern that matches nothing is a spec error.
# Skipped (77) when no Python here has torch and safetensors.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
# torch is not installed for the tests (PyPI's wheel brings gigabytes of CUDA): set
# DTRAIN_TEST_PYTHON to a python that has it
PY=$("$top_srcdir/tests/tools/pyenv.sh" "import torch, safetensors.torch, numpy" 2>"$TMP/py.err") \
  || { echo "skip: $(cat "$TMP/py.err") (set DTRAIN_TEST_PYTHON to a python with torch, safetensors and numpy)"; exit 77; }

spec() {   # spec FILE [train lines...]
  local f=$1; shift
  cat > "$f" <<YAML
name: ft
input: [16]
layers:
  - {type: fc, name: fc1, units: 32, activation: relu}
  - {type: batchnorm, name: bn1}
  - {type: fc, name: fc2, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 512, seed: 3, noise: 1.0}
  test: {format: synthetic, n: 128, seed: 3, noise: 1.0}
  classes: 4
train:
  epochs: 1
  batch: 32
  optimizer: {type: adamw, lr: 0.01}
  weight_decay: 0.1
YAML
  for l in "$@"; do printf '  %s\n' "$l" >> "$f"; done
}
"$PY" - "$TMP" <<'PY'
import sys, torch, torch.nn as nn
from safetensors.torch import save_file
d = sys.argv[1]
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(s, out=4, extra=False):
        super().__init__()
        s.fc1, s.bn1, s.fc2 = nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Linear(32, out)
        if extra: s.head = nn.Linear(4, 2)
    def forward(s, x):
        return s.fc2(s.bn1(torch.relu(s.fc1(x))))
m = Net()
m.train(); m(torch.randn(64, 16))          # running statistics and num_batches_tracked move
save_file({k: v.contiguous() for k, v in m.state_dict().items()}, d + "/torch.safetensors")
save_file({k: v.contiguous() for k, v in Net(out=5, extra=True).state_dict().items()}, d + "/other.safetensors")
PY
[ -s "$TMP/torch.safetensors" ] || { fail "torch could not write the state_dict"; finish; }

spec "$TMP/ft.yaml" "freeze: [fc1, 'bn*']" "init_from: torch.safetensors"
expect_rc 0 "fine-tune from a torch state_dict, fc1 and bn1 frozen" "$DTRAIN" run "$TMP/ft.yaml" --out "$TMP/ft"
grep -q 'weights: 8 of 8 tensors loaded from .*torch.safetensors' "$TMP/out" || fail "load report: $(grep weights "$TMP/out")"
grep -q 'frozen: fc1, bn1' "$TMP/out" || fail "frozen report: $(grep frozen "$TMP/out")"
"$PY" - "$TMP/torch.safetensors" "$TMP/ft/model.safetensors" > "$TMP/cmp" 2>&1 <<'PY'
import sys, numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
bad = 0
for k in ("fc1.weight", "fc1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"):
    if a[k].dtype != b[k].dtype or not np.array_equal(a[k], b[k]):
        print("frozen %s changed" % k); bad = 1
for k in ("fc2.weight", "fc2.bias"):
    if np.array_equal(a[k], b[k]):
        print("%s did not train" % k); bad = 1
print("frozen tensors bitwise equal to torch's, fc2 trained" if not bad else "")
sys.exit(bad)
PY
[ $? = 0 ] && pass "$(cat "$TMP/cmp")" || fail "$(cat "$TMP/cmp")"

spec "$TMP/plain.yaml"
expect_rc 4 "strict: a state_dict of another model" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/strict" --weights "$TMP/other.safetensors"
grep -q 'do not match the model (0 missing, 2 unexpected, 2 mismatched)' "$TMP/err" || fail "strict summary: $(head -1 "$TMP/err")"
grep -q 'head.weight' "$TMP/err" && grep -q 'fc2.weight (file (5,32), model (4,32))' "$TMP/err" \
  && pass "strict lists unexpected and mismatched tensors" || fail "strict lists: $(cat "$TMP/err")"
[ -e "$TMP/strict/model.safetensors" ] && fail "a refused load trained anyway"
expect_rc 0 "non-strict loads what matches" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/loose" --weights "$TMP/other.safetensors" --non-strict --max-steps 2
grep -q 'weights: 6 of 8 tensors loaded' "$TMP/out" || fail "non-strict report: $(grep weights "$TMP/out")"
expect_rc 2 "--non-strict without --weights" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/x" --non-strict
spec "$TMP/nofreeze.yaml" "freeze: conv*"
expect_rc 2 "a freeze pattern that matches no layer" "$DTRAIN" run "$TMP/nofreeze.yaml" --out "$TMP/nf"
grep -q "nofreeze.yaml:[0-9]*:[0-9]*: error: freeze: 'conv\*' matches no layer name" "$TMP/err" || fail "freeze message: $(cat "$TMP/err")"
expect_rc 4 "missing weights file" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/mw" --weights "$TMP/nope.safetensors"
finish
