#!/usr/bin/env bash
# tests/cli/cpu-dispatch.sh - the run-time CPU kernel paths (util/cpu.h). DTRAIN_CPU picks a path
# the CPU has and refuses one it lacks (exit 2) or a word that names none. Under qemu-x86_64 -cpu
# Haswell (Debian's qemu-user; TCG runs AVX2 but no AVX-512 instruction, which is SIGILL there) the
# default build detects AVX2 by itself, trains a small CNN (conv, batchnorm, maxpool, bytes), one
# whose conv has one input channel (the direct kernel) and an LSTM + GRU (the GRU's steps through the
# AVX2 step GEMM), and writes the same weights bit for bit
# as the host forced to DTRAIN_CPU=avx2 with the same OpenBLAS kernels (OPENBLAS_CORETYPE=Haswell):
# no AVX-512 instruction runs on that path, and what it computes does not depend on the CPU under
# it. The qemu checks are skipped without qemu-x86_64, off x86-64, under --enable-sanitizers, and
# for an --enable-native build.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

expect_rc 0 "DTRAIN_CPU=generic" env DTRAIN_CPU=generic "$DTRAIN" check models/mlp.yaml
grep -q '^CPU kernels: generic (DTRAIN_CPU=generic' "$TMP/out" && grep -q 'cells generic' "$TMP/out" \
  || fail "generic: banner: $(grep 'CPU kernels' "$TMP/out")"
expect_rc 2 "DTRAIN_CPU=avx3 refused" env DTRAIN_CPU=avx3 "$DTRAIN" check models/mlp.yaml
grep -q "DTRAIN_CPU=avx3: unknown path; expected generic, avx2 or avx512" "$TMP/err" || fail "avx3: message: $(cat "$TMP/err")"

if [ "$(uname -m)" != x86_64 ] || [ -n "${DTRAIN_ARCH_CFLAGS:-}" ] || [ -n "${DTRAIN_SAN_CFLAGS:-}" ]; then
  # a sanitizer's shadow memory does not map under qemu-user
  echo "skip: the qemu checks: not an x86-64 portable build without sanitizers (ARCH_CFLAGS '${DTRAIN_ARCH_CFLAGS:-}')"; finish
fi
QEMU=$(command -v qemu-x86_64 || true)
if [ -z "$QEMU" ]; then echo "skip: the qemu checks: no qemu-x86_64 (apt-get install qemu-user)"; finish; fi
Q() { "$QEMU" -cpu Haswell "$@"; }
# qemu says which host features TCG leaves out; the tests read only dtrain's lines
qfilter() { grep -v "TCG doesn't support requested feature" "$1" > "$1.f"; mv "$1.f" "$1"; }

expect_rc 2 "qemu Haswell: DTRAIN_CPU=avx512 refused" env DTRAIN_CPU=avx512 "$QEMU" -cpu Haswell "$DTRAIN" check models/mlp.yaml
qfilter "$TMP/err"
grep -q "DTRAIN_CPU=avx512: this CPU (or its OS) runs only the avx2 path" "$TMP/err" || fail "avx512 on Haswell: $(cat "$TMP/err")"

cat > "$TMP/cnn.yaml" <<'YAML'
name: cnn
input: [1, 28, 28]
layers:
  - {type: conv, filters: 4, kernel: 3, padding: same, bias: false}
  - {type: batchnorm, activation: relu}
  - {type: maxpool, kernel: 2}
  - {type: conv, filters: 6, kernel: 5}
  - {type: batchnorm}
  - {type: maxpool, kernel: 2}
  - {type: global_avgpool}
  - {type: fc, units: 10}
loss: softmax_cross_entropy
data:
  train: {format: idx, images: fashion-mnist/train-images-idx3-ubyte.gz, labels: fashion-mnist/train-labels-idx1-ubyte.gz, limit: 96}
  test: {format: idx, images: fashion-mnist/t10k-images-idx3-ubyte.gz, labels: fashion-mnist/t10k-labels-idx1-ubyte.gz, limit: 32}
  classes: 10
  scale: 0.00392156862745098
train: {epochs: 1, batch: 32, seed: 7, optimizer: {type: adamw, lr: 0.01}, clip_norm: 1.0}
YAML
cat > "$TMP/rnn.yaml" <<'YAML'
name: rnn
input: [28, 28]
layers:
  - {type: lstm, hidden: 21, return_sequences: true}
  - {type: gru, hidden: 32}
  - {type: fc, units: 10}
loss: softmax_cross_entropy
data:
  train: {format: idx, images: fashion-mnist/train-images-idx3-ubyte.gz, labels: fashion-mnist/train-labels-idx1-ubyte.gz, sequence: rows, limit: 64}
  test: {format: idx, images: fashion-mnist/t10k-images-idx3-ubyte.gz, labels: fashion-mnist/t10k-labels-idx1-ubyte.gz, sequence: rows, limit: 32}
  classes: 10
  scale: 0.00392156862745098
train: {epochs: 1, batch: 32, seed: 7, optimizer: {type: adam, lr: 0.01}}
YAML
# one input channel only: auto takes the direct convolution (convdirect.h) and nothing of oneDNN
cat > "$TMP/dconv.yaml" <<'YAML'
name: dconv
input: [1, 28, 28]
layers:
  - {type: conv, filters: 13, kernel: 3, padding: same, activation: relu}
  - {type: maxpool, kernel: 2}
  - {type: flatten}
  - {type: fc, units: 10}
loss: softmax_cross_entropy
YAML
sed -n '/^data:/,$p' "$TMP/cnn.yaml" >> "$TMP/dconv.yaml"
expect_rc 0 "dconv: bench names the direct path" env DTRAIN_CPU=avx2 "$DTRAIN" bench "$TMP/dconv.yaml" --iters 1 --warmup 0 --threads 1
grep -q 'conv/direct' "$TMP/out" || fail "dconv: the conv did not take the direct kernel: $(grep '^conv' "$TMP/out")"
# oneDNN picks its own kernels by the CPU (--conv im2col: dtrain's own run here; dconv: the direct kernel)
export OPENBLAS_CORETYPE=Haswell
for m in cnn rnn dconv; do
  conv=im2col; [ $m = dconv ] && conv=auto
  expect_rc 0 "$m: host, DTRAIN_CPU=avx2" env DTRAIN_CPU=avx2 "$DTRAIN" run "$TMP/$m.yaml" --threads 1 --conv $conv --out "$TMP/$m-host"
  grep -q '^CPU kernels: avx2 (DTRAIN_CPU=avx2' "$TMP/out" || fail "$m host: banner: $(grep 'CPU kernels' "$TMP/out")"
  expect_rc 0 "$m: qemu -cpu Haswell, no DTRAIN_CPU" timeout 900 "$QEMU" -cpu Haswell "$DTRAIN" run "$TMP/$m.yaml" --threads 1 --conv $conv --out "$TMP/$m-qemu"
  qfilter "$TMP/err"
  grep -q "^CPU kernels: avx2 (the CPU's best): cells avx2, stepgemm avx2, im2col avx2" "$TMP/out" \
    || fail "$m qemu: banner: $(grep 'CPU kernels' "$TMP/out")"
  if cmp -s "$TMP/$m-host/model.safetensors" "$TMP/$m-qemu/model.safetensors"; then pass "$m: qemu Haswell = host avx2, bit for bit"
  else fail "$m: the qemu Haswell run's weights differ from the host's avx2 run"; fi
done
finish
