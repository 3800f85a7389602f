#!/usr/bin/env python3
"""tests/tools/bignpy.py X.npy Y.npy BYTES DIM - writes a float32 .npy of (N, DIM) samples filling
BYTES (rounded down to whole samples) and int32 labels Y (N,), with the standard library only. The
samples repeat a block of 1000: sample i is class i % 10, a class pattern plus a little noise, so a
model can learn from them. Prints N."""
import array, random, struct, sys

def header(shape, descr):
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join("%d" % s for s in shape)
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    pad = 64 - (10 + len(d) + 1) % 64
    d += " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()

def main():
    xp, yp, nbytes, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    n = nbytes // (4 * dim) // 1000 * 1000
    rng = random.Random(7)
    block = array.array("f")
    for i in range(1000):
        c = i % 10
        block.extend(((j * 7 + c * 13) % 17) / 17.0 + 0.1 * rng.random() for j in range(dim))
    raw = block.tobytes()
    with open(xp, "wb") as f:
        f.write(header((n, dim), "<f4"))
        for _ in range(n // 1000):
            f.write(raw)
    with open(yp, "wb") as f:
        f.write(header((n,), "<i4"))
        f.write(array.array("i", [i % 10 for i in range(n)]).tobytes())
    print(n)

main()
