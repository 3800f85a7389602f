# tests/cli/lib.sh - shared set-up for the shell tests: paths, a scratch dir, assertions.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${DTRAIN:=$top_srcdir/src/dtrain}"
# decompressed caches of gzip'd data (Fashion-MNIST) shared by the tests, never the user's own
: "${DTRAIN_CACHE_DIR:=${top_builddir:-$top_srcdir}/tests/data-cache}"
export DTRAIN_CACHE_DIR
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# every pipeline message's buffer checksummed while in flight (man dtrain: a write dies)
export DTRAIN_PIPE_CHECK=1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
# expect_rc WANT NAME CMD... : runs CMD, keeps stdout/stderr in $TMP/out, $TMP/err
expect_rc() {
  local want=$1 name=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then pass "$name (exit $rc)"; else fail "$name: exit $rc, wanted $want"; sed 's/^/  | /' "$TMP/err" | head -20; fi
}
finish() { [ "$FAILS" = 0 ] && { echo "all passed"; exit 0; }; echo "$FAILS failed"; exit 1; }
# tiny_spec FILE [extra train keys...]: a synthetic-data MLP that trains in a second
tiny_spec() {
  cat >"$1" <<YAML
name: tiny
input: [16]
layers:
  - {type: fc, name: fc1, units: 32, activation: relu, init: he_uniform}
  - {type: dropout, rate: 0.2}
  - {type: fc, name: fc2, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 1024, seed: 3, noise: 1.0}
  test: {format: synthetic, n: 256, seed: 3, noise: 1.0}
  classes: 4
train:
  epochs: ${TINY_EPOCHS:-3}
  batch: 32
  seed: 5
  optimizer: {type: adam, lr: 0.01}
  schedule: {type: cosine, warmup_steps: 5}
  clip_norm: 1.0
YAML
}

# ---- multi-rank runs compared with safetensors (pp-, tp-equivalence, tp-rec) ----
CMP="python3 $top_srcdir/tests/tools/stcmp.py"
MPIRUN=${MPIRUN:-mpirun}
# cluster NAME YAML: $TMP/NAME.yaml
cluster() { printf '%s\n' "$2" > "$TMP/$1.yaml"; }
# run NAME NP SPEC CLUSTER [flags...]: dtrain run under mpirun from the source tree (models name
# their data relative to it), output in $TMP/NAME, log in $TMP/NAME.log; a failure is reported
mpi_run() {
  local name=$1 np=$2 spec=$3 cl=$4; shift 4
  ( cd "$top_srcdir" && timeout -k 5 180 "$MPIRUN" -np "$np" "$DTRAIN" run "$spec" --cluster "$TMP/$cl.yaml" \
    --out "$TMP/$name" --threads 1 --quiet --collective-timeout 30 "$@" ) >"$TMP/$name.log" 2>&1 \
    || { fail "$name: exit $?"; sed 's/^/  | /' "$TMP/$name.log" | head; }
}
# same A B WHAT: the two runs' weights bitwise equal
same() {
  local a b; a=$($CMP --sha256 "$TMP/$1/model.safetensors" | cut -d' ' -f1); b=$($CMP --sha256 "$TMP/$2/model.safetensors" | cut -d' ' -f1)
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "$3: bitwise equal" || fail "$3: $($CMP "$TMP/$1/model.safetensors" "$TMP/$2/model.safetensors" --tol 0)"
}
# close A B WHAT: max|A - B| / max|A| <= 1e-5
close() {
  $CMP "$TMP/$1/model.safetensors" "$TMP/$2/model.safetensors" --tol 1e-5 >"$TMP/cmp" 2>&1 \
    && pass "$3 ($(cat "$TMP/cmp"))" || fail "$3: $(cat "$TMP/cmp")"
}
