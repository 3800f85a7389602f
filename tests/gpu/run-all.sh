#!/usr/bin/env bash
# tests/gpu/run-all.sh - everything GPU-side in one script, for a machine WITH a GPU: CUDA, cuDNN
# (perhaps only inside a PyTorch install), gcc and make; libyaml, OpenBLAS, Open MPI and Check may
# come from the prefix that tests/gpu/prepare-carry.sh made. Steps, each timed, all within ~8 min:
#   1. environment: prefix paths, .pc files relocated, cuDNN/NCCL found (system or pip wheels)
#   2. build: the dist tarball, ./configure --with-cuda, make, make check (CPU tests too)
#   3. device query and tests/gpu/test_gpu_parity (every layer CPU vs GPU, rel. error <= 1e-4, the
#      transformer layers among them), then tests/gpu/gpt-train.sh (transformers trained on both:
#      weights within 1e-4 after 20 SGD steps, char-gpt's within 1e-3 after 30 AdamW steps)
#   4. train models/cnn.yaml (>= 91.6%) and models/lstm.yaml (>= 88.0%) with --device cuda
#   5. 2 ranks on one GPU through mpirun (tiny model), same loss as 1 rank
#   6. training-step throughput on the GPU: dtrain beside PyTorch, bundled models (char-gpt too)
# Usage: bash run-all.sh [--smoke] [CARRY_DIR]   (--smoke: steps 1-3 only)
# Env: JOBS (make -j, default nproc), KEEP=1 keeps the build directory.
set -u
SMOKE=0
[ "${1:-}" = "--smoke" ] && { SMOKE=1; shift; }
CARRY=$(cd "${1:-$(dirname "$0")}" && pwd)
T0=$(date +%s)
FAILS=0
step() { echo; echo "==== [$(( $(date +%s) - T0 ))s] $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

step "1. environment"
P=$CARRY/prefix
ML=x86_64-linux-gnu
if [ ! -d "$P/usr" ] && [ -d "$CARRY/debs" ]; then
  # the carry holds only the .deb files (smaller): unpack them with ar + tar (no dpkg needed)
  mkdir -p "$P" "$CARRY/x"
  for d in "$CARRY"/debs/*.deb; do
    (cd "$CARRY/x" && rm -f data.tar.* && ar x "$d" && tar -xf data.tar.* -C "$P") || echo "note: could not unpack $d"
  done
fi
if [ -d "$P/usr" ]; then
  # .pc files say prefix=/usr: rewrite them into a private copy pointing at the prefix
  mkdir -p "$CARRY/pc"
  for pc in "$P"/usr/lib/$ML/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc "$P"/usr/lib/$ML/openmpi/lib/pkgconfig/*.pc; do
    [ -f "$pc" ] || continue
    sed -e "s|^prefix=/usr|prefix=$P/usr|" -e "s|=/usr/|=$P/usr/|g" -e "s| -I/usr/| -I$P/usr/|g" \
        -e "s| -L/usr/| -L$P/usr/|g" "$pc" >"$CARRY/pc/$(basename "$pc")"
  done
  export PKG_CONFIG_PATH="$CARRY/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CPATH="$P/usr/include:$P/usr/include/$ML:$P/usr/lib/$ML/openmpi/include${CPATH:+:$CPATH}"
  LIBS_P="$P/usr/lib/$ML:$P/usr/lib/$ML/openblas-pthread:$P/usr/lib/$ML/openmpi/lib:$P/lib/$ML"
  export LIBRARY_PATH="$LIBS_P${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$LIBS_P${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$P/usr/bin:$PATH"
  # Open MPI relocated: its wrappers, help files and components live under the prefix
  export OPAL_PREFIX="$P/usr" OPAL_LIBDIR="$P/usr/lib/$ML/openmpi/lib" OPAL_BINDIR="$P/usr/bin"
  export OMPI_MCA_mca_base_component_path="$P/usr/lib/$ML/openmpi/lib/openmpi3"
  [ -x "$P/usr/bin/pkgconf" ] && [ ! -x "$(command -v pkg-config)" ] && export PKG_CONFIG="$P/usr/bin/pkgconf"
  # OpenBLAS: Debian's alternatives symlink libopenblas.so -> openblas-pthread/libopenblas.so
  for so in libopenblas.so libopenblas.so.0 libblas.so.3; do
    [ -e "$P/usr/lib/$ML/$so" ] || [ ! -e "$P/usr/lib/$ML/openblas-pthread/$so" ] || ln -sf "openblas-pthread/$so" "$P/usr/lib/$ML/$so"
  done
fi
[ -d "$CARRY/datasets" ] && export DTRAIN_DATA_PATH="$CARRY/datasets${DTRAIN_DATA_PATH:+:$DTRAIN_DATA_PATH}"
CUDA=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA/bin/nvcc" ] || CUDA=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")
[ -x "$CUDA/bin/nvcc" ] || { echo "FATAL: no nvcc (set CUDA_HOME)"; exit 1; }
export PATH="$CUDA/bin:$PATH"
# cuDNN / NCCL from a PyTorch install when the toolkit has none
CONF_EXTRA=""
if [ ! -e "$CUDA/include/cudnn.h" ]; then
  D=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || true)
  if [ -n "$D" ]; then
    echo "cuDNN from $D"
    export CPATH="$D/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$D/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" LD_LIBRARY_PATH="$D/lib:$LD_LIBRARY_PATH"
    [ -e "$D/lib/libcudnn.so" ] || ln -sf libcudnn.so.9 "$D/lib/libcudnn.so" 2>/dev/null || true
    CONF_EXTRA="CPPFLAGS=-I$D/include LDFLAGS=-L$D/lib"
  fi
fi
if [ ! -e "$CUDA/include/nccl.h" ]; then
  N=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$N" ]; then
    export CPATH="$N/include:$CPATH" LIBRARY_PATH="$N/lib:$LIBRARY_PATH" LD_LIBRARY_PATH="$N/lib:$LD_LIBRARY_PATH"
    [ -e "$N/lib/libnccl.so" ] || ln -sf libnccl.so.2 "$N/lib/libnccl.so" 2>/dev/null || true
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4
nvcc --version | tail -1

step "2. build"
B=${TMPDIR:-/tmp}/dtrain-gpu-build
rm -rf "$B"; mkdir -p "$B"
TARBALL=$(ls "$CARRY"/dtrain-*.tar.gz 2>/dev/null | head -1)
if [ -n "$TARBALL" ]; then
  tar -xzf "$TARBALL" -C "$B" && SRC=$(ls -d "$B"/dtrain-*/ | head -1)
else
  SRC=$(cd "$CARRY/../.." && pwd)/   # run from a checkout: tests/gpu/run-all.sh
  [ -f "$SRC/configure" ] || (cd "$SRC" && ./bootstrap)
fi
cd "$SRC" || exit 1
mkdir -p build && cd build
# shellcheck disable=SC2086
if ! ../configure --with-cuda="$CUDA" $CONF_EXTRA >configure.out 2>&1; then
  tail -30 configure.out; echo "FATAL: configure failed (config.log in $PWD)"; exit 1
fi
grep 'summary:' configure.out
JOBS=${JOBS:-$(nproc)}
make -j"$JOBS" >make.out 2>&1 || { grep -E 'error|warning' make.out | head -40; echo "FATAL: make failed"; exit 1; }
grep -iE 'warning' make.out | head -10
DT=$PWD/src/dtrain
"$DT" --version

step "3. device and parity"
# the CUDA backend is a module (src/dtrain-cuda.so) that the binary loads; the parity test, outside
# src/, is told where it is. A CPU run of the binary maps no CUDA library.
[ -f src/dtrain-cuda.so ] || fail "the build made no CUDA module src/dtrain-cuda.so"
ldd src/dtrain | grep -E 'libcu(dnn|blas|dart)|libnccl' && fail "src/dtrain links CUDA libraries (they belong to the module)"
DTRAIN_CUDA_MODULE=$PWD/src/dtrain-cuda.so tests/gpu/test_gpu_parity 2>&1 | tee parity.out
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || fail "test_gpu_parity exit $rc"
# the out-of-tree build's binary and module, the checkout's specs and tools
top_srcdir=$SRC DTRAIN=$DT DTRAIN_CUDA_MODULE=$PWD/src/dtrain-cuda.so bash ../tests/gpu/gpt-train.sh 2>&1 | tee gpt-train.out
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || fail "gpt-train.sh exit $rc"
if [ "$SMOKE" = 1 ]; then
  echo; echo "smoke run done in $(( $(date +%s) - T0 ))s: $FAILS failure(s)"
  exit $((FAILS > 0))
fi
# the CPU test suite too, in the background while the GPU trains (CPU only, no GPU contention)
(make -j"$JOBS" check >check.out 2>&1; echo "make check exit $?" >>check.out) &
CHECK_PID=$!

step "4. training on the GPU"
acc_of() { grep -o 'test [0-9.]*%' "$1" | tail -1 | tr -dc '0-9.'; }
for spec in cnn:91.6 lstm:88.0; do
  m=${spec%%:*} want=${spec#*:}
  if [ ! -r "../models/$m.yaml" ]; then fail "models/$m.yaml missing"; continue; fi
  t1=$(date +%s)
  (cd .. && "$DT" run "models/$m.yaml" --device cuda --out "build/run-$m") >"run-$m.out" 2>&1
  rc=$?
  tail -4 "run-$m.out"
  acc=$(acc_of "run-$m.out")
  echo "$m: exit $rc, test accuracy ${acc:-?}% (threshold $want%), $(( $(date +%s) - t1 ))s"
  [ "$rc" = 0 ] || fail "$m run exit $rc"
  awk -v a="${acc:-0}" -v w="$want" 'BEGIN { exit !(a + 0 >= w + 0) }' || fail "$m accuracy ${acc:-?} < $want"
done

step "5. two ranks on one GPU"
cat >tiny.yaml <<YAML
name: tiny
input: [1, 12, 12]
layers:
  - {type: conv, name: c1, filters: 4, kernel: 3, padding: 1, activation: relu}
  - {type: batchnorm, name: bn}
  - {type: maxpool, kernel: 2}
  - {type: flatten}
  - {type: fc, name: fc, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 512, seed: 3, noise: 1.0}
  test: {format: synthetic, n: 128, seed: 3, noise: 1.0}
  classes: 4
train: {epochs: 2, batch: 32, seed: 5, optimizer: {type: adam, lr: 0.01}}
YAML
"$DT" run tiny.yaml --device cuda --out r1 >r1.out 2>&1 || fail "1-rank tiny run"
MPIRUN=$(command -v mpirun || true)
if [ -n "$MPIRUN" ]; then
  "$MPIRUN" -np 2 "$DT" run tiny.yaml --device cuda --out r2 >r2.out 2>&1 || { fail "2-rank run"; tail -20 r2.out; }
  DTRAIN_STAGED=1 "$MPIRUN" -np 2 -x DTRAIN_STAGED "$DT" run tiny.yaml --device cuda --out r3 >r3.out 2>&1 ||
    { fail "2-rank staged run"; tail -20 r3.out; }
  grep -h 'gradient allreduce on' r2.out r3.out
  for f in r1 r2 r3; do grep -E '^epoch 2/2' "$f.out" | sed "s/^/$f: /"; done
else
  fail "no mpirun"
fi

step "6. throughput: dtrain (cuda) beside PyTorch (cuda), training steps"
cd ..
for m in mlp lenet cnn lstm char-gpt; do
  [ -r "models/$m.yaml" ] || continue
  # dtrain: steps/s of a short run (the first epoch's line); bench --device when it exists
  if "$DT" bench --help 2>&1 | grep -q -- '--device'; then
    "$DT" bench "models/$m.yaml" --device cuda 2>&1 | tail -3
  else
    "$DT" run "models/$m.yaml" --device cuda --epochs 1 --out "build/bench-$m" 2>&1 | grep -E '^epoch 1/' | sed "s/^/dtrain $m: /"
  fi
  python3 - "$m" <<'PY' 2>&1 | tail -1
import sys, time, statistics
sys.path.insert(0, "bench")
try:
    import torch, torch_models as tm
    spec = tm.load_spec(sys.argv[1])
    model, shape, ids, out = tm.build(spec)
    dev = torch.device("cuda")
    model = model.to(dev)
    B = spec.get("train", {}).get("batch", 128)
    opt, lossf = tm.optimizer(spec, model.parameters()), tm.loss_fn(spec)
    x, y = tm.random_batch(spec, shape, ids, out, B, torch.Generator().manual_seed(0))
    x, y = x.to(dev), y.to(dev)
    ts = []
    for s in range(30):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        tm.step(model, opt, lossf, x, y)
        torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    med = statistics.median(ts[5:])
    print(f"torch {torch.__version__} {spec['name']} cuda: batch {B}: {B / med:.0f} samples/s ({med * 1e3:.2f} ms/step)")
except Exception as e:
    print(f"torch {sys.argv[1]}: skipped ({type(e).__name__}: {e})")
PY
done
cd build

step "make check (CPU suite, ran in the background)"
wait "$CHECK_PID"
grep -E '^(# |FAIL|ERROR)' check.out | head -20
tail -1 check.out | grep -q 'exit 0' || fail "make check"

echo; echo "==== done in $(( $(date +%s) - T0 ))s: $FAILS failure(s)"
[ "${KEEP:-0}" = 1 ] || echo "(build kept in $B; KEEP is informational)"
exit $((FAILS > 0))
