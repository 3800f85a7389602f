#!/usr/bin/env python3
"""tests/tools/tbcheck.py - checks a run's TensorBoard events against its metrics.jsonl.

usage: tbcheck.py RUN_DIR
Every record's framing is verified here (length, masked CRC32C of the length and of the data),
then TensorBoard's own EventAccumulator reads the directory: the epoch and step scalars must be
there with the values and steps metrics.jsonl has (to float32 precision). Exit 0, 1 on a
mismatch, 77 when tensorboard cannot be imported.
"""
import glob, json, os, struct, sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # noqa: BLE001 - any import failure means: skip
    print("skip: tensorboard is not importable (%s)" % e)
    sys.exit(77)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def check_framing(path):
    raw = open(path, "rb").read()
    i, n = 0, 0
    while i < len(raw):
        (length,) = struct.unpack_from("<Q", raw, i)
        (lc,) = struct.unpack_from("<I", raw, i + 8)
        if lc != masked(crc32c(raw[i:i + 8])):
            sys.exit("FAIL: %s: record %d: length crc" % (path, n))
        data = raw[i + 12:i + 12 + length]
        (dc,) = struct.unpack_from("<I", raw, i + 12 + length)
        if dc != masked(crc32c(data)):
            sys.exit("FAIL: %s: record %d: data crc" % (path, n))
        i += 16 + length
        n += 1
    return n


def main():
    run = sys.argv[1]
    files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    if not files:
        sys.exit("FAIL: no events file in %s" % run)
    if crc32c(b"123456789") != 0xE3069283:
        sys.exit("FAIL: the test's own crc32c")
    records = sum(check_framing(f) for f in files)
    ea = EventAccumulator(run, size_guidance={"scalars": 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    want = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        m = json.loads(line)
        if "resumed_from" in m:     # a resume: a dead run's steps past it are dropped (dtrain(1))
            for tag in want:
                want[tag] = {s: v for s, v in want[tag].items() if s <= m["resumed_from"]}
            continue
        if m["split"] == "step":
            for k in ("loss", "accuracy", "lr", "grad_norm"):
                want.setdefault("step/" + k, {})[m["step"]] = m[k]
        else:
            for k in ("loss", "accuracy"):
                want.setdefault("epoch/%s_%s" % (m["split"], k), {})[m["step"]] = m[k]
    bad = 0
    for tag, steps in sorted(want.items()):
        if tag not in tags:
            print("FAIL: tag %s missing (have %s)" % (tag, sorted(tags)))
            bad += 1
            continue
        got = {e.step: e.value for e in ea.Scalars(tag)}
        for s, v in steps.items():
            if s not in got or abs(got[s] - v) > 1e-5 * max(1.0, abs(v)):
                print("FAIL: %s at step %d: events %s, metrics %s" % (tag, s, got.get(s), v))
                bad += 1
    print("%d records in %d file(s), %d tags, %d checked against metrics.jsonl"
          % (records, len(files), len(tags), sum(len(s) for s in want.values())))
    sys.exit(1 if bad else 0)


main()
