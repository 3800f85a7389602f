#!/usr/bin/env python3
"""bench/torch_models.py - the bundled dtrain models rebuilt in PyTorch, trained on the same
Fashion-MNIST data with the same batch, optimizer and thread count, to compare samples/s.
Also loads a dtrain model.safetensors into the same torch module and evaluates it, proving the
checkpoint names and layouts match.

usage: torch_models.py MODEL [--batch N] [--threads N] [--steps N] [--load runs/X/model.safetensors]
"""
import argparse, collections, gzip, os, sys, time
import numpy as np
import torch
import torch.nn as nn

DATA = os.environ.get("FASHION", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


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


def mlp():
    return nn.Sequential(collections.OrderedDict(
        fc1=nn.Linear(784, 256), relu1=nn.ReLU(), dropout1=nn.Dropout(0.1),
        fc2=nn.Linear(256, 128), relu2=nn.ReLU(), fc3=nn.Linear(128, 10))), (784,)


MODELS = {"mlp": mlp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--load")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, shape = MODELS[a.model]()
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    xtr, xte = xtr.reshape((-1,) + shape), xte.reshape((-1,) + shape)
    if a.load:
        from safetensors.torch import load_file
        missing, unexpected = model.load_state_dict(load_file(a.load), strict=True), None
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        print(f"loaded {a.load} into torch {a.model}: test accuracy {acc:.4f}")
        return
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    lossf = nn.CrossEntropyLoss()
    perm = torch.randperm(len(xtr))
    model.train()
    done, t0 = 0, None
    for s in range(a.steps + 10):
        if s == 10:  # warm-up steps excluded from the timing
            t0, done = time.perf_counter(), 0
        i = perm[(s * a.batch) % (len(xtr) - a.batch):][:a.batch]
        xb, yb = xtr[i], ytr[i]
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        done += len(xb)
    dt = time.perf_counter() - t0
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch {torch.__version__} {a.model}: batch {a.batch}, {a.threads} threads: "
          f"{done / dt:.0f} samples/s (train step), peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
