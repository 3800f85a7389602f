#!/usr/bin/env python3
"""bench/torch_models.py - the bundled dtrain models rebuilt in PyTorch, module for module, with
dtrain's layer names, so a dtrain model.safetensors loads into them (--load) and both frameworks
can be timed on the same batch and thread count.

A model is built from its dtrain spec: MODEL names models/MODEL.yaml (or is a path to a spec).
When the spec is not there (or PyYAML is missing), a built-in equivalent is used (mlp, lenet,
cnn, cnn-bn, lstm, char-lstm, char-gpt, gpt-block), written in the same YAML schema.
Transformer layers (layernorm, attention, positions, gelu_tanh) map to nn.LayerNorm,
nn.MultiheadAttention with a causal mask, a learned position table and
nn.GELU(approximate="tanh") (models/char-gpt.yaml).

usage: torch_models.py MODEL [--batch N] [--threads N] [--steps N] [--load FILE]
       torch_models.py MODEL --bench [--batch N] [--threads N] [--steps N] [--warmup N] [--json]

Default mode: trains on Fashion-MNIST ($FASHION) like dtrain run and prints samples/s.
--load: loads a dtrain model.safetensors (strict load_state_dict) and prints the test loss and
accuracy (--json: one object). Specs whose layers name their inputs (input:, inputs:, add,
concat: models/resnet.yaml) build a Graph module run in spec order.
--bench: like `dtrain bench`: random in-memory data, median time of forward + loss + backward +
optimizer step over --steps after --warmup; prints samples/s and peak RSS (--json: one object).
"""
import argparse, collections, gzip, json, os, resource, statistics, sys, time
import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("FASHION", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530

# Built-in specs, used when models/NAME.yaml does not exist (same keys as dtrain-model(5)).
_FM = {"train": {"batch": 128, "optimizer": {"type": "adamw", "lr": 0.001}, "weight_decay": 0.0001},
       "loss": "softmax_cross_entropy"}
BUILTIN = {
    "mlp": dict(_FM, name="mlp", input=[784], layers=[
        {"type": "fc", "name": "fc1", "units": 256, "activation": "relu"},
        {"type": "dropout", "rate": 0.1},
        {"type": "fc", "name": "fc2", "units": 128, "activation": "relu"},
        {"type": "fc", "name": "fc3", "units": 10}]),
    "lenet": dict(_FM, name="lenet", input=[1, 28, 28], layers=[
        {"type": "conv", "name": "conv1", "filters": 6, "kernel": 5, "padding": 2, "activation": "relu"},
        {"type": "maxpool", "name": "pool1", "kernel": 2},
        {"type": "conv", "name": "conv2", "filters": 16, "kernel": 5, "activation": "relu"},
        {"type": "maxpool", "name": "pool2", "kernel": 2},
        {"type": "flatten", "name": "flatten"},
        {"type": "fc", "name": "fc1", "units": 120, "activation": "relu"},
        {"type": "fc", "name": "fc2", "units": 84, "activation": "relu"},
        {"type": "fc", "name": "fc3", "units": 10}]),
    "cnn": dict(_FM, name="cnn", input=[1, 28, 28], layers=[
        {"type": "conv", "name": "conv1", "filters": 32, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "maxpool", "name": "pool1", "kernel": 2},
        {"type": "conv", "name": "conv2", "filters": 64, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "maxpool", "name": "pool2", "kernel": 2},
        {"type": "flatten", "name": "flatten"},
        {"type": "dropout", "name": "dropout1", "rate": 0.25},
        {"type": "fc", "name": "fc1", "units": 128, "activation": "relu"},
        {"type": "dropout", "name": "dropout2", "rate": 0.25},
        {"type": "fc", "name": "fc2", "units": 10}]),
    "cnn-bn": dict(_FM, name="cnn-bn", input=[1, 28, 28], layers=[
        {"type": "conv", "name": "conv1", "filters": 32, "kernel": 3, "padding": "same", "bias": False},
        {"type": "batchnorm", "name": "bn1"},
        {"type": "activation", "name": "relu1", "function": "relu"},
        {"type": "maxpool", "name": "pool1", "kernel": 2},
        {"type": "conv", "name": "conv2", "filters": 64, "kernel": 3, "padding": "same", "bias": False},
        {"type": "batchnorm", "name": "bn2"},
        {"type": "activation", "name": "relu2", "function": "relu"},
        {"type": "maxpool", "name": "pool2", "kernel": 2},
        {"type": "flatten", "name": "flatten"},
        {"type": "fc", "name": "fc1", "units": 128, "activation": "relu"},
        {"type": "dropout", "name": "dropout1", "rate": 0.25},
        {"type": "fc", "name": "fc2", "units": 10}]),
    "lstm": dict(_FM, name="lstm", input=[28, 28], layers=[
        {"type": "lstm", "name": "lstm", "hidden": 128},
        {"type": "fc", "name": "fc1", "units": 10}]),
    "char-lstm": {"name": "char-lstm", "input": [64], "loss": "softmax_cross_entropy",
                  "train": {"batch": 64, "optimizer": {"type": "adam", "lr": 0.002}},
                  "data": {"train": {"format": "text"}, "classes": 65},
                  "layers": [
                      {"type": "embedding", "name": "embed", "vocab": 65, "dim": 64},
                      {"type": "lstm", "name": "lstm", "hidden": 256, "return_sequences": True},
                      {"type": "fc", "name": "fc1", "units": 65}]},
    # one pre-norm causal transformer block of width 128, 4 heads, MLP 512 (char-gpt's first shape)
    "gpt-block": {"name": "gpt-block", "input": [64], "loss": "softmax_cross_entropy",
                  "train": {"batch": 32, "optimizer": {"type": "adamw", "lr": 0.003}, "weight_decay": 0.01},
                  "layers": [
                      {"type": "embedding", "name": "embedding", "vocab": 86, "dim": 128},
                      {"type": "positions", "name": "pos"},
                      {"type": "layernorm", "name": "ln1"},
                      {"type": "attention", "name": "attn", "heads": 4, "causal": True},
                      {"type": "add", "name": "res1", "inputs": ["attn", "pos"]},
                      {"type": "layernorm", "name": "ln2"},
                      {"type": "fc", "name": "fc1", "units": 512, "activation": "gelu_tanh"},
                      {"type": "fc", "name": "fc2", "units": 128},
                      {"type": "add", "name": "res2", "inputs": ["fc2", "res1"]},
                      {"type": "layernorm", "name": "ln_f"},
                      {"type": "fc", "name": "head", "units": 86}]},
}


def _gpt(name, blocks):
    """models/char-gpt.yaml's layers with BLOCKS pre-norm blocks (h<i>_ln1 ... h<i>_res2)."""
    L = [{"type": "embedding", "name": "embedding", "vocab": 86, "dim": 128}, {"type": "positions", "name": "pos"}]
    prev = "pos"
    for i in range(blocks):
        h = f"h{i}_"
        L += [{"type": "layernorm", "name": h + "ln1"},
              {"type": "attention", "name": h + "attn", "heads": 4, "causal": True},
              {"type": "dropout", "name": h + "d1", "rate": 0.1},
              {"type": "add", "name": h + "res1", "inputs": [h + "d1", prev]},
              {"type": "layernorm", "name": h + "ln2"},
              {"type": "fc", "name": h + "fc1", "units": 256, "activation": "gelu_tanh"},
              {"type": "fc", "name": h + "fc2", "units": 128},
              {"type": "dropout", "name": h + "d2", "rate": 0.1},
              {"type": "add", "name": h + "res2", "inputs": [h + "d2", h + "res1"]}]
        prev = h + "res2"
    L += [{"type": "layernorm", "name": "ln_f"}, {"type": "fc", "name": "head", "units": 86}]
    return {"name": name, "input": [64], "loss": "softmax_cross_entropy", "layers": L,
            "train": {"batch": 24, "optimizer": {"type": "adamw", "lr": 0.005}, "weight_decay": 0.1}}


BUILTIN["char-gpt"] = _gpt("char-gpt", 3)


def load_spec(model):
    """The dtrain spec for MODEL: a path, models/MODEL.yaml, or the built-in one."""
    paths = [model] if model.endswith((".yaml", ".yml")) else [
        os.path.join("models", model + ".yaml"), os.path.join(ROOT, "models", model + ".yaml")]
    base = os.path.splitext(os.path.basename(model))[0]
    for p in paths:
        if os.path.exists(p):
            try:
                import yaml
            except ImportError:     # a torch-only venv: the built-in copy of a bundled spec
                if base in BUILTIN:
                    return BUILTIN[base], "built-in"
                raise
            with open(p) as f:
                return yaml.safe_load(f), p
    if model in BUILTIN:
        return BUILTIN[model], "built-in"
    sys.exit(f"torch_models.py: error: no spec {paths[0]} and no built-in model '{model}' "
             f"(built-in: {', '.join(sorted(BUILTIN))})")


def act_module(name, alpha=None):
    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU,
            "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
            "leaky_relu": lambda: nn.LeakyReLU(0.01 if alpha is None else alpha)}[name]()


def recurrent(cls, return_seq, **kw):
    """nn.LSTM/GRU/RNN with dtrain's output: the last step's hidden state, or every step's."""
    class Seq(cls):
        def forward(self, x):
            out, _ = super().forward(x)
            return out if return_seq else out[:, -1]
    return Seq(batch_first=True, **kw)


def pair(v, default=None):
    if v is None:
        return default
    return tuple(v) if isinstance(v, list) else v


class Add(nn.Module):
    """dtrain's add layer: the sum of its inputs, then its activation."""
    def __init__(self, act):
        super().__init__()
        self.act = act_module(act) if act and act != "none" else None

    def forward(self, *xs):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return self.act(y) if self.act else y


class Positions(nn.Module):
    """dtrain's positions layer: x + weight, a learned (T, F) table (tensor pos.weight)."""
    def __init__(self, T, F):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(T, F) * 0.02)

    def forward(self, x):
        return x + self.weight


class Attention(nn.MultiheadAttention):
    """dtrain's attention layer: self-attention over (B, T, F), nn.MultiheadAttention's tensors
    (in_proj_weight, out_proj.weight, ...), the causal mask as an additive -inf upper triangle."""
    def __init__(self, F, heads, causal, dropout):
        super().__init__(F, heads, dropout=dropout, batch_first=True)
        self.causal = causal

    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1) if self.causal else None
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]


class Concat(nn.Module):
    """dtrain's concat layer: channels of (C,H,W), features of (F) and (T,F)."""
    def forward(self, *xs):
        return torch.cat(xs, dim=2 if xs[0].dim() == 3 else 1)


class Graph(nn.Module):
    """A dtrain layer graph (layers naming their inputs): the modules registered under dtrain's layer
    names, in spec order (so state_dict keys are dtrain's tensor names), run in that order, each on
    the tensors it names ('input': the model's input; none named: the previous layer's output)."""
    def __init__(self, mods, reads):
        super().__init__()
        for name, m in mods.items():
            self.add_module(name, m)
        self.reads = reads      # [(module name, [input names] or None, output name)]

    def forward(self, x):
        out, prev = {"input": x}, x
        for name, ins, res in self.reads:
            m = getattr(self, name)
            prev = m(*[out[i] for i in ins]) if ins else m(prev)
            if res:
                out[res] = prev
        return prev


def build(spec):
    """nn.Sequential whose module names are dtrain's layer names (unnamed layers get dtrain's
    <type><k> names); an activation fused into fc/conv becomes a parameterless <name>_act. A spec
    whose layers name their inputs ('input:', 'inputs:') builds a Graph instead."""
    shape = tuple(spec["input"])
    layers = spec["layers"]
    ids = any(l["type"] == "embedding" for l in layers[:1])
    graph = any("input" in l or "inputs" in l for l in layers)
    x = torch.zeros((2,) + shape, dtype=torch.long if ids else torch.float32)
    mods, count = collections.OrderedDict(), collections.Counter()
    reads, outs = [], {"input": x}
    for l in layers:
        t = l["type"]
        count[t] += 1
        name = l.get("name", f"{t}{count[t]}")
        act = l.get("activation") if t in ("fc", "conv") else None
        ins = l.get("inputs", l.get("input"))
        ins = [ins] if isinstance(ins, str) else ins
        if ins:
            x = outs[ins[0]]
        if t == "add":
            m = Add(l.get("activation"))
        elif t == "concat":
            m = Concat()
        elif t == "fc":
            m = nn.Linear(x.shape[-1], l["units"], bias=l.get("bias", True))
        elif t == "conv":
            pad = l.get("padding", 0)
            m = nn.Conv2d(x.shape[1], l["filters"], pair(l["kernel"]), stride=pair(l.get("stride"), 1),
                          padding=pair(pad), dilation=pair(l.get("dilation"), 1), groups=l.get("groups", 1),
                          bias=l.get("bias", True))
        elif t in ("maxpool", "avgpool"):
            k = pair(l["kernel"])
            kw = dict(stride=pair(l.get("stride"), k), padding=pair(l.get("padding"), 0))
            m = nn.MaxPool2d(k, **kw) if t == "maxpool" else nn.AvgPool2d(k, count_include_pad=True, **kw)
        elif t == "global_avgpool":
            m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        elif t == "flatten":
            m = nn.Flatten()
        elif t == "dropout":
            m = nn.Dropout(l.get("rate", 0.5))
        elif t == "activation":
            m = act_module(l["function"], l.get("alpha"))
        elif t == "batchnorm":
            bn = nn.BatchNorm2d if x.dim() == 4 else nn.BatchNorm1d
            m = bn(x.shape[1], eps=l.get("eps", 1e-5), momentum=l.get("momentum", 0.1), affine=l.get("affine", True))
        elif t == "embedding":
            m = nn.Embedding(l["vocab"], l["dim"])
        elif t == "positions":
            m = Positions(x.shape[1], x.shape[2])
        elif t == "layernorm":
            m = nn.LayerNorm(x.shape[-1], eps=l.get("eps", 1e-5))
        elif t == "attention":
            m = Attention(x.shape[-1], l.get("heads", 1), l.get("causal", False), l.get("dropout", 0.0))
        elif t in ("lstm", "gru", "rnn"):
            cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[t]
            kw = dict(input_size=x.shape[-1], hidden_size=l["hidden"], num_layers=l.get("layers", 1),
                      bias=l.get("bias", True))
            if t == "rnn":
                kw["nonlinearity"] = l.get("nonlinearity", "tanh")
            m = recurrent(cls, l.get("return_sequences", False), **kw)
        else:
            sys.exit(f"torch_models.py: error: layer type '{t}' has no PyTorch equivalent here")
        mods[name] = m
        with torch.no_grad():
            x = m.eval()(*[outs[i] for i in ins]) if ins and t in ("add", "concat") else m.eval()(x)
        reads.append((name, ins if t in ("add", "concat") else (ins[:1] if ins else None), None))
        if act:
            mods[name + "_act"] = act_module(act, l.get("alpha"))
            x = mods[name + "_act"](x)
            reads.append((name + "_act", None, None))
        reads[-1] = reads[-1][:2] + (name,)
        outs[name] = x
    model = Graph(mods, reads) if graph else nn.Sequential(mods)
    return model, shape, ids, tuple(x.shape[1:])


def optimizer(spec, params):
    tr = spec.get("train", {})
    o = tr.get("optimizer", {"type": "adamw", "lr": 0.001})
    lr, wd, t = o.get("lr", 0.001), tr.get("weight_decay", 0.0), o["type"]
    if t == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if t == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if t == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd, momentum=o.get("momentum", 0.0))
    return torch.optim.SGD(params, lr=lr, weight_decay=wd, momentum=o.get("momentum", 0.9 if t != "sgd" else 0.0),
                           nesterov=t == "nesterov")


def loss_fn(spec):
    return nn.MSELoss() if spec.get("loss") == "mse" else nn.CrossEntropyLoss()


def random_batch(spec, shape, ids, out, B, gen):
    """Random inputs (token ids for an embedding), labels per output row; as dtrain bench."""
    C = out[-1]
    if ids:
        vocab = spec["layers"][0]["vocab"]
        x = torch.randint(0, vocab, (B,) + shape, generator=gen)
    else:
        x = torch.randn((B,) + shape, generator=gen)
    if spec.get("loss") == "mse":
        return x, torch.rand((B,) + out, generator=gen)
    return x, torch.randint(0, C, (B,) + out[:-1], generator=gen)


def step(model, opt, lossf, xb, yb):
    opt.zero_grad(set_to_none=True)
    z = model(xb)
    if isinstance(lossf, nn.CrossEntropyLoss):
        loss = lossf(z.reshape(-1, z.shape[-1]), yb.reshape(-1))
    else:
        loss = lossf(z, yb)
    loss.backward()
    opt.step()
    return loss


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench(a, spec):
    model, shape, ids, out = build(spec)
    B = a.batch or spec.get("train", {}).get("batch", 128)
    opt, lossf = optimizer(spec, model.parameters()), loss_fn(spec)
    gen = torch.Generator().manual_seed(0)
    pool = [random_batch(spec, shape, ids, out, B, gen) for _ in range(2)]  # gathered, as dtrain's pool
    model.train()
    times = []
    for s in range(a.warmup + a.steps):
        xb, yb = pool[s % 2]
        t0 = time.perf_counter()
        step(model, opt, lossf, xb, yb)
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    r = {"model": spec["name"], "framework": "torch", "torch": torch.__version__, "batch": B,
         "threads": a.threads, "steps": a.steps, "step_ms": med * 1e3, "samples_per_sec": B / med,
         "peak_rss_mib": peak_rss_mib(), "baseline_rss_mib": a.baseline_rss}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"torch {torch.__version__} {spec['name']}: batch {B}, {a.threads} threads: {B / med:.0f} samples/s "
              f"({med * 1e3:.3f} ms/step, median of {a.steps}), peak RSS {r['peak_rss_mib']:.0f} MiB "
              f"({a.baseline_rss:.0f} MiB after importing torch)")


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def load(split):
    x = idx(f"{DATA}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = idx(f"{DATA}/{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x - MEAN) / STD), torch.from_numpy(y)


def train_or_load(a, spec):
    model, shape, ids, out = build(spec)
    if ids or len(out) != 1:
        sys.exit("torch_models.py: error: training and --load read Fashion-MNIST; use --bench for this model")
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    xtr, xte = xtr.reshape((-1,) + shape), xte.reshape((-1,) + shape)
    if a.load:
        from safetensors.torch import load_file
        # strict: every tensor of the file has its module and shape, every module's tensor is in the file
        model.load_state_dict(load_file(a.load), strict=True)
        model.eval()
        with torch.no_grad():
            z = torch.cat([model(xte[i:i + 1000]) for i in range(0, len(xte), 1000)])
            loss = nn.functional.cross_entropy(z.double(), yte).item()
            acc = (z.argmax(1) == yte).float().mean().item()
        if a.json:
            print(json.dumps({"model": spec["name"], "file": a.load, "loss": loss, "accuracy": acc}))
        else:
            print(f"loaded {a.load} into torch {spec['name']} (strict): test loss {loss:.6f}, accuracy {acc:.4f}")
        return
    B = a.batch or 128
    opt, lossf = optimizer(spec, model.parameters()), loss_fn(spec)
    perm = torch.randperm(len(xtr))
    model.train()
    done, t0 = 0, None
    for s in range(a.steps + 10):
        if s == 10:  # warm-up steps excluded from the timing
            t0, done = time.perf_counter(), 0
        i = perm[(s * B) % (len(xtr) - B):][:B]
        step(model, opt, lossf, xtr[i], ytr[i])
        done += B
    dt = time.perf_counter() - t0
    print(f"torch {torch.__version__} {spec['name']}: batch {B}, {a.threads} threads: "
          f"{done / dt:.0f} samples/s (train step), peak RSS {peak_rss_mib():.0f} MiB")


def main():
    ap = argparse.ArgumentParser(description="dtrain's models in PyTorch")
    ap.add_argument("model", help="models/MODEL.yaml, a spec path, or a built-in: " + ", ".join(sorted(BUILTIN)))
    ap.add_argument("--batch", type=int, default=0, help="batch (default: 128; --bench: the spec's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default 300; --bench 20)")
    ap.add_argument("--warmup", type=int, default=3, help="--bench: untimed steps first")
    ap.add_argument("--load", help="a dtrain model.safetensors to evaluate")
    ap.add_argument("--bench", action="store_true", help="time training steps on random data")
    ap.add_argument("--json", action="store_true", help="--bench, --load: print one JSON object")
    a = ap.parse_args()
    a.baseline_rss = peak_rss_mib()
    a.steps = a.steps or (20 if a.bench else 300)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    spec, _ = load_spec(a.model)
    if a.bench:
        bench(a, spec)
    else:
        train_or_load(a, spec)


if __name__ == "__main__":
    main()
