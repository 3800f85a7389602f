#!/usr/bin/env python3
"""tests/tools/campaign.py - hostile-input campaigns against a dtrain binary (best an
--enable-sanitizers build): mutated specs through `check` and `run`, corrupted data files,
corrupted checkpoints, and kill -9 during checkpoint writes. Every case must end per the
exit-code contract (dtrain(1) EXIT STATUS) within its timeout and without a sanitizer report;
anything else is listed. Not part of `make check` (minutes); the figures go in release notes.

usage: campaign.py DTRAIN [--seed N] [--specs N] [--runs N] [--data N] [--ckpt N] [--kills N]
"""
import argparse, gzip, os, random, shutil, signal, struct, subprocess, sys, tempfile, time

CONTRACT = {0, 1, 2, 3, 4, 5, 6, 75}
SAN = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")

TINY = """name: tiny
input: [16]
layers:
  - {type: fc, name: fc1, units: 32, activation: relu}
  - {type: dropout, rate: 0.2}
  - {type: fc, name: fc2, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 512, seed: 3}
  test: {format: synthetic, n: 128, seed: 3}
  classes: 4
train:
  epochs: 2
  batch: 32
  seed: 5
  optimizer: {type: adam, lr: 0.01}
  checkpoint_every: 1
"""


class Tally:
    def __init__(self, name):
        self.name, self.n, self.codes, self.bad = name, 0, {}, []

    def add(self, what, rc, err, allowed):
        self.n += 1
        self.codes[rc] = self.codes.get(rc, 0) + 1
        why = None
        if rc == "timeout":
            why = "hang (timeout)"
        elif any(s in err for s in SAN):
            why = "sanitizer: " + next(l for l in err.splitlines() if any(s in l for s in SAN))[:160]
        elif rc not in allowed:
            why = "exit %s outside %s" % (rc, sorted(allowed))
        if why:
            self.bad.append("%s: %s" % (what, why))

    def report(self):
        codes = ", ".join("%s: %d" % (k, v) for k, v in sorted(self.codes.items(), key=str))
        print("%-28s %5d cases  exits {%s}  failures %d" % (self.name, self.n, codes, len(self.bad)))
        for b in self.bad[:20]:
            print("    " + b)


def run(cmd, timeout, cwd=None):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=timeout)
        return p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return "timeout", (e.stderr or b"").decode("utf-8", "replace")


def mutate(b, rng):
    b = bytearray(b)
    for _ in range(rng.choice((1, 1, 2, 3))):
        op = rng.randrange(6)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            del b[i:i + rng.randint(1, 16)]
        elif op == 2:
            b[i:i] = bytes(rng.choice(b" :-[]{}\n\t#&*!|>'\"0123456789.eE+-\x00\xff") for _ in range(rng.randint(1, 8)))
        elif op == 3 and b:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        elif op == 4:
            b[i:i] = rng.choice([b"1e400", b"-1", b"99999999999999999999", b"nan", b".inf", b"!!str ", b"~",
                                 b"[[[[[[[[", b"{a: b}", b"0x10", b"\xc3\x28"])
        elif op == 5 and b:
            b = b[:i]
    return bytes(b)


def specs(top):
    out = []
    for d in ("models", "tests/specs", "examples"):
        for root, _, files in os.walk(os.path.join(top, d)):
            out += [os.path.join(root, f) for f in files if f.endswith(".yaml")]
    return sorted(out)


def campaign_specs(dt, top, tmp, rng, n, tally, cmd):
    seeds = specs(top) if cmd == "check" else [None]
    for k in range(n):
        src = rng.choice(seeds)
        base = TINY.encode() if src is None else open(src, "rb").read()
        p = os.path.join(tmp, "m%d.yaml" % k)
        open(p, "wb").write(mutate(base, rng))
        if cmd == "check":
            rc, err = run([dt, "check", p], 30, cwd=top)
        else:
            rc, err = run([dt, "run", p, "--out", os.path.join(tmp, "r%d" % k), "--max-steps", "3", "--quiet",
                           "--threads", "1"], 60, cwd=top)
        tally.add("%s of mutated %s" % (cmd, os.path.basename(src or "tiny.yaml")), rc, err, CONTRACT)


def idx_bytes(rng, n, dims, dtype=0x08):
    hdr = struct.pack(">BBBB", 0, 0, dtype, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    return hdr + bytes(rng.randrange(256) for _ in range(n))


def campaign_data(dt, tmp, rng, n, tally):
    """Small valid files of each format, then corrupted, read by `dtrain check`."""
    d = os.path.join(tmp, "data")
    os.makedirs(d, exist_ok=True)
    imgs = idx_bytes(rng, 20 * 4 * 4, [20, 4, 4])
    labs = idx_bytes(rng, 20, [20])
    labs = labs[:8] + bytes(x % 3 for x in labs[8:])
    csv = "".join(",".join(str(rng.random()) for _ in range(4)) + ",%d\n" % rng.randrange(3) for _ in range(20)).encode()
    npy_hdr = b"{'descr': '<f4', 'fortran_order': False, 'shape': (20, 16), }"
    npy_hdr += b" " * (64 - 10 - len(npy_hdr) - 1) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_hdr)) + npy_hdr + struct.pack("<320f", *[rng.random() for _ in range(320)])
    nlab = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_hdr)) + npy_hdr.replace(b"<f4", b"<i8").replace(b"(20, 16)", b"(20,)  ") + struct.pack("<20q", *[rng.randrange(3) for _ in range(20)])
    kinds = {
        "idx.gz": (lambda: gzip.compress(imgs), "{format: idx, images: %s, labels: %s}", [16]),
        "idx": (lambda: imgs, "{format: idx, images: %s, labels: %s}", [16]),
        "csv": (lambda: csv, "{format: csv, path: %s, label_column: -1}", [4]),
        "npy": (lambda: npy, "{format: npy, x: %s, y: %s}", [16]),
    }
    gz_lab = os.path.join(d, "labels.gz")
    open(gz_lab, "wb").write(gzip.compress(labs))
    np_lab = os.path.join(d, "labels.npy")
    open(np_lab, "wb").write(nlab)
    for k in range(n):
        kind = rng.choice(sorted(kinds))
        make, src, inp = kinds[kind]
        p = os.path.join(d, "c%d.%s" % (k, kind))
        open(p, "wb").write(mutate(make(), rng))
        if kind.startswith("idx"):
            s = src % (p, gz_lab)
        elif kind == "npy":
            s = src % (p, np_lab)
        else:
            s = src % p
        spec = TINY.replace("input: [16]", "input: %s" % inp).replace(
            "train: {format: synthetic, n: 512, seed: 3}", "train: " + s).replace(
            "  test: {format: synthetic, n: 128, seed: 3}\n", "").replace("classes: 4", "classes: 3").replace(
            "units: 4}", "units: 3}")
        sp = os.path.join(d, "c%d.yaml" % k)
        open(sp, "w").write(spec)
        rc, err = run([dt, "check", sp], 30)
        tally.add("check of corrupted %s" % kind, rc, err, CONTRACT)


def campaign_ckpt(dt, tmp, rng, n, tally):
    spec = os.path.join(tmp, "tiny.yaml")
    open(spec, "w").write(TINY)
    good = os.path.join(tmp, "ck-good")
    rc, err = run([dt, "run", spec, "--out", good, "--max-steps", "20", "--quiet", "--threads", "1"], 120)
    if rc != 0:
        tally.add("making the checkpoint", rc, err, {0})
        return
    step = open(os.path.join(good, "checkpoints", "latest")).read().strip()
    for k in range(n):
        out = os.path.join(tmp, "ck%d" % k)
        shutil.copytree(good, out)
        f = os.path.join(out, "checkpoints", step, rng.choice(["model.safetensors", "optim.safetensors", "state.json"]))
        open(f, "wb").write(mutate(open(f, "rb").read(), rng))
        rc, err = run([dt, "run", spec, "--out", out, "--resume", "--max-steps", "22", "--quiet", "--threads", "1"], 60)
        # a mutation the reader cannot tell from the original (JSON whitespace) may resume: 0
        tally.add("resume of corrupted %s" % os.path.basename(f), rc, err, {0, 4})
        shutil.rmtree(out, ignore_errors=True)


def campaign_kills(dt, tmp, rng, n, tally):
    spec = os.path.join(tmp, "tiny.yaml")
    open(spec, "w").write(TINY)
    ref = os.path.join(tmp, "kill-ref")
    run([dt, "run", spec, "--out", ref, "--quiet", "--threads", "1"], 120)
    want = open(os.path.join(ref, "model.safetensors"), "rb").read()
    for k in range(n):
        out = os.path.join(tmp, "kill%d" % k)
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        p = subprocess.Popen([dt, "run", spec, "--out", out, "--quiet", "--threads", "1"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        rc, err = run([dt, "run", spec, "--out", out, "--resume", "--quiet", "--threads", "1"], 120)
        same = rc == 0 and open(os.path.join(out, "model.safetensors"), "rb").read() == want
        tally.add("kill -9 then resume", rc if same or rc != 0 else "differs", err, {0})
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dtrain")
    ap.add_argument("--seed", type=int, default=1)
    for k, v in (("specs", 700), ("runs", 60), ("data", 230), ("ckpt", 380), ("kills", 45)):
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    dt = os.path.abspath(a.dtrain)
    top = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="dtrain-campaign.")
    tallies = [Tally("specs through check"), Tally("specs through run"), Tally("data files"),
               Tally("checkpoints"), Tally("kill -9 during training")]
    t0 = time.time()
    try:
        campaign_specs(dt, top, tmp, rng, a.specs, tallies[0], "check")
        campaign_specs(dt, top, tmp, rng, a.runs, tallies[1], "run")
        campaign_data(dt, tmp, rng, a.data, tallies[2])
        campaign_ckpt(dt, tmp, rng, a.ckpt, tallies[3])
        campaign_kills(dt, tmp, rng, a.kills, tallies[4])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("campaign seed %d, %.0f s, %s" % (a.seed, time.time() - t0, dt))
    for t in tallies:
        t.report()
    sys.exit(1 if any(t.bad for t in tallies) else 0)


if __name__ == "__main__":
    main()
