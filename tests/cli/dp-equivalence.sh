#!/usr/bin/env bash
# tests/cli/dp-equivalence.sh - data parallel under real mpirun: N ranks against 1 rank on the same
# global batch and seed after 100 steps, max|W_N - W_1| / max|W_1| <= 1e-5 (MLP with dropout, CNN,
# LSTM); reproducible mode bitwise identical for 1, 2 and 4 ranks; average (k = 1, plain SGD) and
# SSP (s = 0) equal to allreduce; fp16 and top-k compressed runs stay close.
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=$top_srcdir/tests/cli
CMP="python3 $top_srcdir/tests/tools/stcmp.py"
run() { # run NAME NP SPEC [CLUSTER] : 100 steps, one BLAS thread per rank
  local name=$1 np=$2 spec=$3 cl=${4:-}
  timeout 120 "$MPIRUN" -np "$np" "$DTRAIN" run "$spec" ${cl:+--cluster "$cl"} --out "$TMP/$name" \
    --max-steps 100 --threads 1 --quiet --collective-timeout 60 >"$TMP/$name.log" 2>&1 \
    || { fail "$name: exit $?"; sed 's/^/  | /' "$TMP/$name.log" | head; }
}
cluster() { printf '%s\n' "$2" > "$TMP/$1.yaml"; }

for m in mlp cnn lstm; do
  for n in 1 2 4; do run "$m-$n" $n "$D/dp-$m.yaml"; done
  for n in 2 4; do
    $CMP "$TMP/$m-1/model.safetensors" "$TMP/$m-$n/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
      && pass "allreduce $m: $n ranks = 1 rank ($(cat "$TMP/cmp"))" || fail "allreduce $m $n ranks: $(cat "$TMP/cmp")"
  done
done

cluster repro 'partition: {sync: allreduce, reproducible: true, chunks: 16}'
for n in 1 2 4; do run "repro-$n" $n "$D/dp-mlp.yaml" "$TMP/repro.yaml"; done
h1=$($CMP --sha256 "$TMP/repro-1/model.safetensors" | cut -d' ' -f1)
for n in 2 4; do
  hn=$($CMP --sha256 "$TMP/repro-$n/model.safetensors" | cut -d' ' -f1)
  [ -n "$h1" ] && [ "$h1" = "$hn" ] && pass "reproducible: sha256 of $n ranks = 1 rank ($h1)" || fail "reproducible $n ranks: $hn != $h1"
done
for n in 1 2 4; do run "repro-cnn-$n" $n "$D/dp-cnn.yaml" "$TMP/repro.yaml"; done
[ "$($CMP --sha256 "$TMP"/repro-cnn-{1,2,4}/model.safetensors | cut -d' ' -f1 | sort -u | wc -l)" = 1 ] \
  && pass "reproducible CNN: one sha256 for 1, 2, 4 ranks" || fail "reproducible CNN differs"

cluster avg1 'partition: {sync: average, average_every: 1}'
run sgd-ar-4 4 "$D/dp-mlp-sgd.yaml"
run sgd-avg-4 4 "$D/dp-mlp-sgd.yaml" "$TMP/avg1.yaml"
$CMP "$TMP/sgd-ar-4/model.safetensors" "$TMP/sgd-avg-4/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
  && pass "average k=1 with SGD = allreduce ($(cat "$TMP/cmp"))" || fail "average k=1: $(cat "$TMP/cmp")"

cluster ssp0 'partition: {sync: ssp, staleness: 0}'
run ssp0-4 4 "$D/dp-mlp.yaml" "$TMP/ssp0.yaml"
$CMP "$TMP/mlp-1/model.safetensors" "$TMP/ssp0-4/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
  && pass "ssp s=0 = synchronous ($(cat "$TMP/cmp"))" || fail "ssp s=0: $(cat "$TMP/cmp")"

cluster fp16 'partition: {sync: allreduce, compression: fp16}'
run fp16-2 2 "$D/dp-mlp.yaml" "$TMP/fp16.yaml"
$CMP "$TMP/mlp-1/model.safetensors" "$TMP/fp16-2/model.safetensors" --tol 2e-2 >"$TMP/cmp" \
  && pass "fp16 compression stays within 2e-2 ($(cat "$TMP/cmp"))" || fail "fp16: $(cat "$TMP/cmp")"
finish
