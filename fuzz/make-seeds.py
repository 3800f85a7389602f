#!/usr/bin/env python3
# fuzz/make-seeds.py - writes the seed inputs of the harnesses into fuzz/corpus/<name>/seed-*:
# the bundled model specs, the bad specs of the tests, the example cluster specs, and tiny data
# files of every kind the readers take (plain and gzip'd). The checkpoint harness writes its own
# seeds (make fuzz sets DTRAIN_FUZZ_SEEDS). Run once from the source tree when a format gains a
# feature; `make fuzz-merge` then folds them into the minimised corpus.
import glob
import gzip
import os
import shutil
import struct
import sys

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
corpus = os.path.join(top, "fuzz", "corpus")


def put(harness, name, data):
    d = os.path.join(corpus, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, mtime=0)


def damaged(data):
    """gzip'd data cut inside the deflate stream, and with a flipped byte in it"""
    z = gz(data)
    mid = 10 + (len(z) - 18) // 2
    return z[:mid], z[:mid] + bytes([z[mid] ^ 0x55]) + z[mid + 1:]


# ---- specs ----
for pat, harness in (("models/*.yaml", "model_spec"), ("tests/specs/bad-*.yaml", "model_spec"),
                     ("tests/cli/*.yaml", "model_spec"), ("tests/specs/cluster-*.yaml", "cluster_spec"),
                     ("examples/slurm/cluster.yaml", "cluster_spec")):
    for p in sorted(glob.glob(os.path.join(top, pat))):
        with open(p, "rb") as f:
            put(harness, os.path.basename(os.path.dirname(p)) + "-" + os.path.basename(p), f.read())

# ---- IDX: big-endian header 0, 0, type, ndim, dims; then the data ----
IDX = {0x08: "B", 0x09: "b", 0x0B: "h", 0x0C: "i", 0x0D: "f", 0x0E: "d"}


def idx(t, dims, values):
    head = bytes([0, 0, t, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    return head + struct.pack(">%d%s" % (len(values), IDX[t]), *values)


put("idx", "labels-u8", idx(0x08, [4], [0, 1, 2, 1]))
put("idx", "images-u8", idx(0x08, [2, 2, 3], list(range(12))))
put("idx", "images-u8.gz", gz(idx(0x08, [2, 2, 3], list(range(12)))))
put("idx", "images-1hw-u8", idx(0x08, [2, 1, 2, 2], [0, 255, 7, 9, 1, 2, 3, 4]))
put("idx", "i8", idx(0x09, [3, 2], [-1, 0, 1, 2, -128, 127]))
put("idx", "i16", idx(0x0B, [2, 2], [-300, 0, 300, 32767]))
put("idx", "i32", idx(0x0C, [3], [0, 2, 70000]))
put("idx", "f32", idx(0x0D, [2, 3], [0.5, -1.0, 2.25, 0.0, 1e-3, 3.0]))
put("idx", "f64.gz", gz(idx(0x0E, [2, 2], [1.0, -2.5, 0.125, 8.0])))
put("idx", "empty", idx(0x08, [0, 4], []))
cut, flip = damaged(idx(0x08, [4, 8, 8], list(range(256))))
put("idx", "cut.gz", cut)
put("idx", "flip.gz", flip)

# ---- .npy: magic, version, header length, the dict padded to 64 bytes, data in C order ----
NPY = {"|u1": "B", "|i1": "b", "<i2": "h", "<i4": "i", "<i8": "q", "<f4": "f", "<f8": "d"}


def npy(descr, shape, values, version=1):
    sh = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    text = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, sh)
    lenfmt = "<H" if version == 1 else "<I"
    pre = 6 + 2 + struct.calcsize(lenfmt)
    pad = (64 - (pre + len(text) + 1) % 64) % 64
    text = text + " " * pad + "\n"
    head = b"\x93NUMPY" + bytes([version, 0]) + struct.pack(lenfmt, len(text)) + text.encode()
    return head + struct.pack("<%d%s" % (len(values), NPY[descr]), *values)


put("npy", "f32-2x3", npy("<f4", [2, 3], [0.5, -1.0, 2.25, 0.0, 1e-3, 3.0]))
put("npy", "labels-i64", npy("<i8", [4], [0, 1, 2, 1]))
put("npy", "u8-2x2x2.gz", gz(npy("|u1", [2, 2, 2], list(range(8)))))
put("npy", "i8-v2", npy("|i1", [3], [-1, 0, 1], version=2))
put("npy", "i16-v3", npy("<i2", [2, 1], [5, -5], version=3))
put("npy", "i32", npy("<i4", [2, 2], [1, 2, 3, 4]))
put("npy", "f64", npy("<f8", [1, 1, 2, 2], [1.0, 2.0, 3.0, 4.0]))
put("npy", "scalar", npy("<f4", [], [1.0]))
cut, flip = damaged(npy("<f4", [16, 8], [float(i) for i in range(128)]))
put("npy", "cut.gz", cut)
put("npy", "flip.gz", flip)

# ---- CSV ----
with open(os.path.join(top, "data", "blobs-test.csv"), "rb") as f:
    blobs = f.read().splitlines(True)
put("csv", "blobs-head", b"".join(blobs[:12]))
put("csv", "blobs-head.gz", gz(b"".join(blobs[:12])))
put("csv", "plain", b"1,2,3,0\n4,5,6,1\n\n7.5,-8e-1,9,2\n")
put("csv", "crlf", b"a,b,label\r\n1,2,0\r\n3,4,1\r\n")
put("csv", "label-first", b"0,1.0,2.0\n1,3.0,4.0\n2,5.0,6.0\n1,7.0,8.0\n")
put("csv", "spaces", b" 1 , 2 ,0\n3,4 ,1\n")
cut, flip = damaged(b"".join(blobs))
put("csv", "cut.gz", cut)
put("csv", "flip.gz", flip)

# ---- text: four settings bytes (fuzz_text.c), then the text ----
with open(os.path.join(top, "README"), "rb") as f:
    readme = f.read()[:2000]
put("text", "readme-seq16", bytes([15, 0, 26, 0]) + readme)
put("text", "readme-stride", bytes([31, 7, 50, 2 | 4]) + readme)
put("text", "tree", bytes([7, 3, 64, 1]) + b"first file\x1esecond, longer file\n\x1ethird\x1e" + readme[:300])
put("text", "classes", bytes([3, 0, 0, 8]) + b"abcabcabcabc")
put("text", "short", bytes([63, 0, 255, 0]) + b"too short")
sys.exit(0)
