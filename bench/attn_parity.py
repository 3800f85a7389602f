#!/usr/bin/env python3
"""bench/attn_parity.py - one SGD step of a pre-norm causal transformer block in dtrain and in PyTorch
from the same weights: the updates must agree within 1e-5 (relative, per tensor).

The model is models/char-gpt.yaml's in miniature: embedding, positions, layernorm, attention
(nn.MultiheadAttention with a causal mask), residual add, layernorm, fc + gelu, fc, add, final
layernorm, fc to the vocabulary, softmax cross-entropy over every step. PyTorch draws the weights;
they go to dtrain through a safetensors file under PyTorch's own names (so dtrain's names are
checked too: loading is strict), dtrain takes one step (train.optimizer sgd, the whole training set
as one batch), and its model.safetensors is compared with PyTorch's step computed in float64 from
the same float32 weights. The learning rate is large (10, the most dtrain takes) so that each update is large against
its parameter and the float32 rounding of the new parameters (1 ulp of p, about 6e-8 |p|) stays
far below the limit: the update then measures the gradient. Run once per attention kernel (plain, and blocked with tiles smaller
than T, with the MLP's gelu_tanh, PyTorch's gelu(approximate='tanh')). Needs torch and numpy only (safetensors is read and written here).

usage: attn_parity.py DTRAIN [WORKDIR]      exit 0 when every tensor agrees, 1 otherwise
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

T, F, H, FF, N, LR = 12, 16, 4, 32, 6, 10.0
TOL = 1e-5


def save_st(path, tensors):
    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v.detach().cpu().numpy().astype("<f4")).tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        assert v["dtype"] == "F32", (k, v["dtype"])
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(v["shape"]).astype(np.float64)
    return out


class Gpt(nn.Module):
    """the same names as the spec's layers below"""
    def __init__(self, V, approximate="none"):
        super().__init__()
        self.approximate = approximate
        self.emb = nn.Embedding(V, F)
        self.pos = nn.Embedding(T, F)
        self.h0_ln1 = nn.LayerNorm(F)
        self.h0_attn = nn.MultiheadAttention(F, H, batch_first=True)
        self.h0_ln2 = nn.LayerNorm(F)
        self.h0_fc1 = nn.Linear(F, FF)
        self.h0_fc2 = nn.Linear(FF, F)
        self.ln_f = nn.LayerNorm(F)
        self.head = nn.Linear(F, V)

    def forward(self, ids):
        x = self.emb(ids) + self.pos.weight
        mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1)
        h = self.h0_ln1(x)
        x = x + self.h0_attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        x = x + self.h0_fc2(nn.functional.gelu(self.h0_fc1(self.h0_ln2(x)), approximate=self.approximate))
        return self.head(self.ln_f(x))


SPEC = """name: attn-parity
input: [{T}]
layers:
  - {{type: embedding, name: emb, vocab: {V}, dim: {F}}}
  - {{type: positions, name: pos}}
  - {{type: layernorm, name: h0_ln1}}
  - {{type: attention, name: h0_attn, heads: {H}, causal: true, {kernel}}}
  - {{type: add, name: h0_res1, inputs: [h0_attn, pos]}}
  - {{type: layernorm, name: h0_ln2}}
  - {{type: fc, name: h0_fc1, units: {FF}, activation: {act}}}
  - {{type: fc, name: h0_fc2, units: {F}}}
  - {{type: add, name: h0_res2, inputs: [h0_fc2, h0_res1]}}
  - {{type: layernorm, name: ln_f}}
  - {{type: fc, name: head, units: {V}}}
loss: softmax_cross_entropy
data:
  train: {{format: text, path: {text}, seq_len: {T}, holdout: 0}}
train:
  epochs: 1
  batch: {N}
  optimizer: {{type: sgd, lr: {LR}}}
"""


def main():
    dtrain = sys.argv[1]
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="attn-parity.")
    os.makedirs(work, exist_ok=True)
    # N windows of T bytes and the byte after the last: every window's labels are in the text
    words = b"the quick brown fox jumps over a lazy dog; pack my box with five dozen liquor jugs. "
    text = (words * 4)[:N * T + 1]
    with open(os.path.join(work, "text.txt"), "wb") as f:
        f.write(text)
    vocab = sorted(set(text))
    V = len(vocab)
    ids = torch.tensor([vocab.index(c) for c in text])
    x = torch.stack([ids[k * T:(k + 1) * T] for k in range(N)])
    y = torch.stack([ids[k * T + 1:(k + 1) * T + 1] for k in range(N)])

    torch.manual_seed(0)
    m = Gpt(V)
    with torch.no_grad():       # biases and layer norms away from their 0/1 starts, so each is tested
        for k, p in m.named_parameters():
            if "bias" in k or "ln" in k:
                p.add_(0.1 * torch.randn_like(p))
    init = {k: v.detach().clone() for k, v in m.state_dict().items()}
    save_st(os.path.join(work, "init.safetensors"), init)

    bad = 0
    for kernel, act in (("kernel: plain", "gelu"), ("kernel: blocked, block: 5", "gelu_tanh")):
        # PyTorch in float64 from the float32 weights: the reference, one SGD step
        md = Gpt(V, "tanh" if act == "gelu_tanh" else "none").double()
        md.load_state_dict({k: v.double() for k, v in init.items()})
        loss = nn.functional.cross_entropy(md(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        want = {k: -LR * p.grad.numpy() for k, p in md.named_parameters()}
        print("torch %s, %s: loss %.6f, %d tensors" % (torch.__version__, act, loss.item(), len(want)))
        spec = os.path.join(work, "spec.yaml")
        with open(spec, "w") as f:
            f.write(SPEC.format(T=T, V=V, F=F, H=H, FF=FF, N=N, LR=LR, kernel=kernel, act=act,
                                text=os.path.join(work, "text.txt")))
        out = os.path.join(work, "run-" + kernel.split(",")[0].split()[1])
        r = subprocess.run([dtrain, "run", spec, "--out", out, "--force", "--threads", "1",
                            "--weights", os.path.join(work, "init.safetensors"), "--max-steps", "1"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("dtrain run failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
            return 1
        got = load_st(os.path.join(out, "model.safetensors"))
        worst = 0.0
        for k, w in want.items():
            d = got[k] - init[k].double().numpy()
            rel = np.linalg.norm(d - w) / max(np.linalg.norm(w), 1e-30)
            worst = max(worst, rel)
            if rel > TOL:
                print("  %-24s update differs: relative %.3g (|update| %.3g)" % (k, rel, np.linalg.norm(w)))
                bad += 1
        print("%-26s %-10s worst relative difference of an update %.3g (limit %g)" % (kernel, act, worst, TOL))
    print("ok: dtrain's step equals PyTorch's" if not bad else "FAIL: %d tensors differ" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
