#!/usr/bin/env bash
# tests/cli/startup.sh - start-up without what a run does not use (issue 12): a process no launcher
# started runs without MPI (no Open MPI session directory appears) and computes what it computes
# with MPI started (DTRAIN_MPI_INIT=1: weights bitwise equal), `check`/`run`/`bench` still work
# under mpirun -np 1 and -np 2, and in a CUDA build the binary links no CUDA library while a CPU
# run (also --device auto) maps none; the module sits next to the binary. No timing is asserted.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
MPIRUN=${MPIRUN:-mpirun}
SPEC=$TMP/tiny.yaml
TINY_EPOCHS=2 tiny_spec "$SPEC"

# one process, no launcher: no MPI session directory (Open MPI makes one under TMPDIR at MPI_Init)
mkdir -p "$TMP/t-solo" "$TMP/t-mpi"
expect_rc 0 "run without a launcher" env TMPDIR="$TMP/t-solo" "$DTRAIN" run "$SPEC" --out "$TMP/solo" --quiet
[ -z "$(ls -A "$TMP/t-solo")" ] && pass "no MPI started" || fail "MPI started: $(ls -A "$TMP/t-solo")"
expect_rc 0 "run with DTRAIN_MPI_INIT=1" env TMPDIR="$TMP/t-mpi" DTRAIN_MPI_INIT=1 "$DTRAIN" run "$SPEC" \
  --out "$TMP/mpi" --quiet
if [ -n "$(ls -A "$TMP/t-mpi")" ]; then pass "DTRAIN_MPI_INIT=1 starts MPI"
else echo "note: this MPI makes no session directory under TMPDIR; the probe above proves nothing"; fi
cmp -s "$TMP/solo/model.safetensors" "$TMP/mpi/model.safetensors" \
  && pass "weights bitwise equal with and without MPI" || fail "weights differ with and without MPI"
# times and memory are measurements (MPI itself takes memory); the rest must agree
strip() { grep '"train"' "$1" | tail -1 | sed 's/"time[^,]*,//; s/"samples_per_sec[^,]*,//; s/"step_ms[^,}]*//; s/,"mem_[a-z_]*":\[[^]]*\]//g'; }
a=$(strip "$TMP/solo/metrics.jsonl")
b=$(strip "$TMP/mpi/metrics.jsonl")
[ "$a" = "$b" ] && pass "the same metrics" || fail "metrics differ: $a vs $b"
expect_rc 0 "check without a launcher" "$DTRAIN" check "$SPEC"
expect_rc 0 "bench without a launcher" "$DTRAIN" bench "$SPEC" --iters 2 --warmup 1 --threads 1

if command -v "$MPIRUN" >/dev/null; then
  for np in 1 2; do
    expect_rc 0 "mpirun -np $np check" timeout 120 "$MPIRUN" -np $np "$DTRAIN" check "$SPEC"
    expect_rc 0 "mpirun -np $np run" timeout 120 "$MPIRUN" -np $np "$DTRAIN" run "$SPEC" --out "$TMP/np$np" --quiet
    expect_rc 0 "mpirun -np $np bench" timeout 120 "$MPIRUN" -np $np "$DTRAIN" bench "$SPEC" --iters 2 --warmup 1 --threads 1
  done
  cmp -s "$TMP/solo/model.safetensors" "$TMP/np1/model.safetensors" \
    && pass "mpirun -np 1: weights bitwise equal to the run without a launcher" || fail "mpirun -np 1 weights differ"
fi

# a CUDA build: the backend is the module next to the binary, and nothing of CUDA is linked or
# mapped by a CPU run
MOD=$(dirname "$DTRAIN")/dtrain-cuda.so
if [ -f "$MOD" ]; then
  ldd "$DTRAIN" | grep -E 'libcu(dnn|blas|blasLt|dart)|libnccl' && fail "the binary links CUDA libraries" \
    || pass "the binary links no CUDA library"
  ldd "$MOD" | grep -q 'libcudart' && pass "the module links the CUDA runtime" || fail "the module lacks libcudart"
  for dev in cpu auto; do
    # without DTRAIN_CUDA_MODULE (make check sets it for the test programs; it loads regardless)
    env -u DTRAIN_CUDA_MODULE LD_DEBUG=files "$DTRAIN" run "$SPEC" --out "$TMP/ld-$dev" --quiet --device $dev \
      >/dev/null 2>"$TMP/ld"
    if [ "$dev" = auto ] && ls /dev/nvidia[0-9]* >/dev/null 2>&1; then continue; fi    # a GPU: it loads, rightly
    grep -E 'file=[^ ]*(libcud|libnccl|dtrain-cuda)' "$TMP/ld" | head -3 | sed 's/^/  | /'
    grep -qE 'file=[^ ]*(libcud|libnccl|dtrain-cuda)' "$TMP/ld" && fail "--device $dev loaded CUDA libraries" \
      || pass "--device $dev maps no CUDA library"
  done
else
  echo "note: no CUDA module here (a build without CUDA): the module checks are skipped"
  ldd "$DTRAIN" | grep -qE 'libcudart|libcudnn' && fail "a build without CUDA links CUDA libraries"
fi
finish
