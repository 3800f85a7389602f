#!/usr/bin/env python3
"""tests/tools/stcmp.py - compare the weights of two safetensors files (pure Python, no numpy).

usage: stcmp.py A.safetensors B.safetensors [--tol T] [--skip SUBSTRING]...
Prints max|A - B| / max|A| over all tensors and exits 1 when it exceeds T (default 1e-5), or when
the names or shapes differ. --skip leaves out the tensors whose name contains SUBSTRING from the
comparison (e.g. batch norm's running statistics, which N ranks average and 1 rank does not). With --sha256 prints the sha256 of each file's tensor data instead.
"""
import array, hashlib, json, struct, sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        a = array.array("f")
        a.frombytes(data[b:e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (tuple(t["shape"]), a)
    return out, data


def main():
    args = sys.argv[1:]
    if "--sha256" in args:
        for p in [a for a in args if a != "--sha256"]:
            print(hashlib.sha256(load(p)[1]).hexdigest(), p)
        return 0
    tol = 1e-5
    if "--tol" in args:
        i = args.index("--tol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    skip = []
    while "--skip" in args:
        i = args.index("--skip")
        skip.append(args[i + 1])
        del args[i:i + 2]
    a, _ = load(args[0])
    b, _ = load(args[1])
    for k in [k for k in a if any(s in k for s in skip)]:
        del a[k]
    for k in [k for k in b if any(s in k for s in skip)]:
        del b[k]
    if sorted(a) != sorted(b):
        print("tensor names differ:", sorted(set(a) ^ set(b)))
        return 1
    diff = ref = 0.0
    for k in a:
        if a[k][0] != b[k][0]:
            print(f"{k}: shape {a[k][0]} vs {b[k][0]}")
            return 1
        for x, y in zip(a[k][1], b[k][1]):
            diff = max(diff, abs(x - y))
            ref = max(ref, abs(x))
    rel = diff / ref if ref else diff
    print(f"max|A-B|/max|A| = {rel:.3e} (tolerance {tol:g})")
    return 0 if rel <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
