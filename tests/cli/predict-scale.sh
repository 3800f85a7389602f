#!/usr/bin/env bash
# tests/cli/predict-scale.sh - dtrain predict normalises its input once: bytes as the IDX training
# data get them, float32 in [0, 1] (PyTorch's ToTensor()) with --no-scale and fully normalised
# input with --preprocessed give the bytes' predictions; float input whose range says it was
# scaled or normalised already is refused (exit 3) without one of them, never scaled twice.
. "$(dirname "$0")/lib.sh"

# 8x8 byte images of 4 classes (a bright quadrant each, noise elsewhere), as IDX files, and the
# test images as .npy: bytes, bytes / 255 as float32, and ((bytes / 255) - 0.3) / 0.4 as float32
python3 - "$TMP" <<'PY'
import random, struct, sys
d = sys.argv[1]
rnd = random.Random(7)
def images(n):
    xs, ys = [], []
    for i in range(n):
        c = i % 4
        img = [rnd.randrange(0, 60) for _ in range(64)]
        for r in range(4):
            for k in range(4):
                img[(r + 4 * (c // 2)) * 8 + k + 4 * (c % 2)] = rnd.randrange(150, 256)
        xs.append(img); ys.append(c)
    return xs, ys
def idx(path, xs, ys):
    with open(path + "-images", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(xs), 8, 8)); f.write(bytes(v for x in xs for v in x))
    with open(path + "-labels", "wb") as f:
        f.write(struct.pack(">II", 0x801, len(ys))); f.write(bytes(ys))
def npy(path, descr, n, vals, fmt):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, 8, 8), }" % (descr, n)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%d%s" % (len(vals), fmt), *vals))
tx, ty = images(512); idx(d + "/train", tx, ty)
ex, ey = images(64); idx(d + "/test", ex, ey)
flat = [v for x in ex for v in x]
npy(d + "/u8.npy", "|u1", 64, flat, "B")
npy(d + "/f01.npy", "<f4", 64, [v / 255 for v in flat], "f")
npy(d + "/norm.npy", "<f4", 64, [(v / 255 - 0.3) / 0.4 for v in flat], "f")
open(d + "/labels.txt", "w").write("\n".join(map(str, ey)) + "\n")
PY
cat > "$TMP/q.yaml" <<'YAML'
name: quad
input: [64]
layers:
  - {type: fc, name: fc1, units: 16, activation: relu}
  - {type: fc, name: fc2, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: idx, images: train-images, labels: train-labels}
  test: {format: idx, images: test-images, labels: test-labels}
  classes: 4
  scale: 0.00392156862745098   # as the bundled models: bytes to [0, 1]
  mean: 0.3
  std: 0.4
train: {epochs: 3, batch: 32, seed: 1, optimizer: {type: adam, lr: 0.01}}
YAML
expect_rc 0 "train on IDX bytes" "$DTRAIN" run "$TMP/q.yaml" --out "$TMP/q" --quiet
P="$DTRAIN predict $TMP/q.yaml --out $TMP/q"
expect_rc 0 "predict the bytes" $P --input "$TMP/u8.npy" -o "$TMP/u8.csv"
acc=$(paste -d, <(tail -n +2 "$TMP/u8.csv" | cut -d, -f2) "$TMP/labels.txt" | awk -F, '$1 == $2 { k++ } END { print k + 0 }')
[ "$acc" -ge 60 ] && pass "the bytes' predictions are right ($acc of 64)" || fail "the bytes' predictions: $acc of 64 right"

# predicted class equal, probabilities within 1e-4 of the bytes' (float32 rounding of x / 255)
same_as_u8() {
  paste -d, "$TMP/u8.csv" "$TMP/$1" | awk -F, 'NR > 1 { if ($2 != $8) bad = 1; for (i = 3; i <= 6; i++) { d = $i - $(i + 6); if (d < 0) d = -d; if (d > 1e-4) bad = 1 } } END { exit bad }' \
    && pass "$2: the same predictions as the bytes" || fail "$2: predictions differ from the bytes': $(head -3 "$TMP/$1")"
}
expect_rc 3 "float32 in [0, 1] without a flag is refused" $P --input "$TMP/f01.npy"
grep -q "f01.npy: float values in \[0, 1\], but the spec scales the model's input by 0.00392157.*looks scaled already.*--no-scale" "$TMP/err" \
  || fail "refusal message: $(cat "$TMP/err")"
[ -s "$TMP/out" ] && fail "a refused input printed predictions"
expect_rc 0 "float32 in [0, 1] with --no-scale" $P --input "$TMP/f01.npy" --no-scale -o "$TMP/f01.csv"
same_as_u8 f01.csv "--no-scale"
expect_rc 3 "normalised float32 without a flag is refused" $P --input "$TMP/norm.npy"
grep -q "norm.npy: float values in \[-0.75.*trained on bytes.*looks normalised already.*--preprocessed" "$TMP/err" \
  || fail "refusal message: $(cat "$TMP/err")"
expect_rc 0 "normalised float32 with --preprocessed" $P --input "$TMP/norm.npy" --preprocessed -o "$TMP/norm.csv"
same_as_u8 norm.csv "--preprocessed"
# the same refusal for a CSV of [0, 1] values, and --raw overrides it
python3 -c "
import struct
d = open('$TMP/f01.npy', 'rb').read()[128:]
v = struct.unpack('<%df' % (len(d) // 4), d)
print('\n'.join(','.join('%.9g' % x for x in v[i:i + 64]) for i in range(0, len(v), 64)))" > "$TMP/f01.csv.in"
mv "$TMP/f01.csv.in" "$TMP/f01in.csv"
expect_rc 3 "a CSV in [0, 1] without a flag is refused" $P --input "$TMP/f01in.csv"
expect_rc 0 "a CSV in [0, 1] with --no-scale" $P --input "$TMP/f01in.csv" --no-scale -o "$TMP/f01c.csv"
same_as_u8 f01c.csv "CSV with --no-scale"
expect_rc 0 "--raw applies the spec's scale anyway" $P --input "$TMP/f01.npy" --raw
expect_rc 2 "--raw and --no-scale contradict" $P --input "$TMP/f01.npy" --raw --no-scale
# bytes need no flag and --no-scale is not asked of them; a model with scale 1 takes [0, 1] floats
sed 's/^  scale: .*/  scale: 1/' "$TMP/q.yaml" > "$TMP/s1.yaml"
expect_rc 0 "data.scale 1: float input in [0, 1] is what the model expects" "$DTRAIN" predict "$TMP/s1.yaml" --out "$TMP/q" --input "$TMP/f01.npy"
finish
