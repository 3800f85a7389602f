#!/usr/bin/env bash
# tests/cli/finetune.sh - fine-tuning. Without torch (CI): weights a dtrain run saved load by
# tensor name into a fine-tuning run whose frozen layers stay bitwise unchanged while the others
# train, the layer table marks them and counts trainable and frozen parameters, strict loading of
# another model's weights lists missing, unexpected and mismatched tensors (exit 4), non-strict
# loads what matches, a freeze pattern that matches nothing is a spec error. With a Python that has
# torch and safetensors (DTRAIN_TEST_PYTHON), the same from a PyTorch state_dict (batch norm's
# int64 counter included); without one those checks alone are skipped.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

spec() {   # spec FILE [train lines...]
  local f=$1; shift
  cat > "$f" <<YAML
name: ft
input: [16]
layers:
  - {type: fc, name: fc1, units: 32, activation: relu}
  - {type: batchnorm, name: bn1}
  - {type: fc, name: fc2, units: ${FC2:-4}}
${EXTRA:-}
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
# frozen A B TENSOR...: each named tensor's bytes equal in A and B; the others (but the int64
# counter) differ (pure Python: no numpy here)
frozen() {
  python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n]); d = raw[8 + n:]
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2]); keep = sys.argv[3:]; bad = []
for k in keep:
    if k not in a or k not in b or a[k] != b[k]: bad.append("frozen %s changed" % k)
for k in b:
    if k not in keep and not k.endswith("num_batches_tracked") and k in a and a[k] == b[k]: bad.append("%s did not train" % k)
print("; ".join(bad) if bad else "frozen tensors bitwise equal, the others trained")
sys.exit(1 if bad else 0)
PY
}
FROZEN="fc1.weight fc1.bias bn1.weight bn1.bias bn1.running_mean bn1.running_var"

# ---- weights from a dtrain run (no torch) ----
spec "$TMP/plain.yaml"
expect_rc 0 "a dtrain run to start from" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/base" --quiet
cp "$TMP/base/model.safetensors" "$TMP/base.safetensors"
spec "$TMP/ftd.yaml" "freeze: [fc1, 'bn*']" "init_from: base.safetensors"
expect_rc 0 "fine-tune from a dtrain run's weights, fc1 and bn1 frozen" "$DTRAIN" run "$TMP/ftd.yaml" --out "$TMP/ftd"
grep -q 'weights: 8 of 8 tensors loaded from .*base.safetensors' "$TMP/out" || fail "load report: $(grep weights "$TMP/out")"
grep -q 'frozen: fc1, bn1' "$TMP/out" || fail "frozen report: $(grep frozen "$TMP/out")"
out=$(frozen "$TMP/base.safetensors" "$TMP/ftd/model.safetensors" $FROZEN) && pass "$out" || fail "$out"
# the layer table marks the frozen layers and splits the total
expect_rc 0 "check a spec with train.freeze" "$DTRAIN" check "$TMP/ftd.yaml"
grep -qE '^fc1 +fc +\(32\) +544 .*  frozen$' "$TMP/out" && grep -qE '^bn1 +batchnorm .*  frozen$' "$TMP/out" \
  && ! grep -qE '^fc2 .*frozen' "$TMP/out" && pass "the layer table marks fc1 and bn1 frozen" || fail "table: $(cat "$TMP/out")"
grep -qE '^trainable +132$' "$TMP/out" && grep -qE '^frozen +608$' "$TMP/out" \
  && pass "the table counts 132 trainable and 608 frozen parameters" || fail "trainable/frozen counts: $(grep -E '^(total|trainable|frozen)' "$TMP/out")"
expect_rc 0 "check without train.freeze" "$DTRAIN" check "$TMP/plain.yaml"
grep -qE '^(trainable|frozen) ' "$TMP/out" && fail "a table without freeze shows trainable/frozen rows"

# strict and non-strict against another model's weights (fc2 of 5 units, an extra layer 'head')
FC2=5 EXTRA="  - {type: fc, name: head, units: 4}" spec "$TMP/other.yaml"
expect_rc 0 "another model's weights" "$DTRAIN" run "$TMP/other.yaml" --out "$TMP/oth" --max-steps 2 --quiet
expect_rc 4 "strict: weights of another model" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/strict" --weights "$TMP/oth/model.safetensors"
grep -q 'do not match the model (0 missing, 2 unexpected, 2 mismatched)' "$TMP/err" || fail "strict summary: $(head -1 "$TMP/err")"
grep -q 'head.weight' "$TMP/err" && grep -q 'fc2.weight (file (5,32), model (4,32))' "$TMP/err" \
  && pass "strict lists unexpected and mismatched tensors" || fail "strict lists: $(cat "$TMP/err")"
[ -e "$TMP/strict/model.safetensors" ] && fail "a refused load trained anyway"
expect_rc 0 "non-strict loads what matches" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/loose" --weights "$TMP/oth/model.safetensors" --non-strict --max-steps 2
grep -q 'weights: 6 of 8 tensors loaded' "$TMP/out" || fail "non-strict report: $(grep weights "$TMP/out")"
expect_rc 2 "--non-strict without --weights" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/x" --non-strict
spec "$TMP/nofreeze.yaml" "freeze: conv*"
expect_rc 2 "a freeze pattern that matches no layer" "$DTRAIN" run "$TMP/nofreeze.yaml" --out "$TMP/nf"
grep -q "nofreeze.yaml:[0-9]*:[0-9]*: error: freeze: 'conv\*' matches no layer name" "$TMP/err" || fail "freeze message: $(cat "$TMP/err")"
expect_rc 4 "missing weights file" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/mw" --weights "$TMP/nope.safetensors"

# ---- a PyTorch state_dict (needs torch) ----
# torch is not installed for the tests (PyPI's wheel brings gigabytes of CUDA): set
# DTRAIN_TEST_PYTHON to a python that has it
if ! PY=$("$top_srcdir/tests/tools/pyenv.sh" "import torch, safetensors.torch, numpy" 2>"$TMP/py.err"); then
  echo "skip: the PyTorch state_dict checks: $(cat "$TMP/py.err") (set DTRAIN_TEST_PYTHON to a python with torch, safetensors and numpy)"
  finish
fi
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
expect_rc 4 "strict: a state_dict of another model" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/strict" --weights "$TMP/other.safetensors"
grep -q 'do not match the model (0 missing, 2 unexpected, 2 mismatched)' "$TMP/err" || fail "strict summary: $(head -1 "$TMP/err")"
expect_rc 0 "non-strict loads what matches of torch's" "$DTRAIN" run "$TMP/plain.yaml" --out "$TMP/loose2" --weights "$TMP/other.safetensors" --non-strict --max-steps 2
grep -q 'weights: 6 of 8 tensors loaded' "$TMP/out" || fail "non-strict report: $(grep weights "$TMP/out")"
finish
