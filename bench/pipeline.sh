#!/usr/bin/env bash
# bench/pipeline.sh - pipeline schedules side by side: a LeNet-like CNN on synthetic 28x28 images
# cut into STAGES stages under `mpirun -np STAGES`, MICRO micro-batches per step, one thread per
# rank, the same steps under each schedule. Prints, per schedule, the run's samples/s and dtrain's
# end-of-run line: each stage's ms per step in the schedule / waiting on messages (its bubble).
# The runs alternate schedules REPS times so that a busy machine hurts each alike; the last lines
# are each schedule's medians and least values (each column on its own) over the runs.
# Usage: bench/pipeline.sh [STAGES] [MICRO] [BATCH] [STEPS] [REPS]   (defaults: 2 8 128 60 3)
# Env: DTRAIN (default src/dtrain), MPIRUN (mpirun), SCHEDULES ("1f1b zb-h1").
set -eu
cd "$(dirname "$0")/.."
P=${1:-2}; M=${2:-8}; B=${3:-128}; S=${4:-60}; R=${5:-3}
DTRAIN=${DTRAIN:-src/dtrain}
MPIRUN=${MPIRUN:-mpirun}
SCHEDULES=${SCHEDULES:-1f1b zb-h1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/lenet.yaml" <<YAML
name: lenet-synthetic
input: [1, 28, 28]
layers:
  - {type: conv, name: conv1, filters: 6, kernel: 5, padding: 2, activation: relu}
  - {type: maxpool, name: pool1, kernel: 2}
  - {type: conv, name: conv2, filters: 16, kernel: 5, activation: relu}
  - {type: maxpool, name: pool2, kernel: 2}
  - {type: flatten, name: flatten}
  - {type: fc, name: fc1, units: 120, activation: relu}
  - {type: fc, name: fc2, units: 84, activation: relu}
  - {type: fc, name: fc3, units: 10}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: $((B * S)), seed: 1, noise: 1.0}
  classes: 10
train: {epochs: 1, batch: $B, seed: 1, optimizer: {type: adam, lr: 0.001}}
YAML
for r in $(seq "$R"); do
  for k in $SCHEDULES; do
    printf 'partition: {strategy: model, micro_batches: %d, schedule: %s}\n' "$M" "$k" >"$tmp/c.yaml"
    "$MPIRUN" -np "$P" "$DTRAIN" run "$tmp/lenet.yaml" --cluster "$tmp/c.yaml" --out "$tmp/run" --threads 1 \
      >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    rm -rf "$tmp/run"
    sps=$(grep -o '[0-9]* samples/s' "$tmp/out" | tail -1)
    line=$(grep '^pipeline ' "$tmp/out")
    echo "run $r $k: $sps; $line"
    # one row per run: schedule, samples/s, then ms and wait ms of each stage
    echo "$k ${sps% samples/s} $(echo "${line#*messages:}" | tr -d ',/' | awk '{for (i = 3; i <= NF; i += 4) printf "%s %s ", $i, $(i + 1)}')" >>"$tmp/rows"
  done
done
for k in $SCHEDULES; do
  awk -v k="$k" -v P="$P" '
    function med(col,   n, i, j, t, v) {
      n = 0
      for (i = 1; i <= nr; i++) v[++n] = row[i, col]
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function lo(col,   i, v) { v = row[1, col]; for (i = 2; i <= nr; i++) if (row[i, col] < v) v = row[i, col]; return v }
    $1 == k { nr++; for (c = 2; c <= NF; c++) row[nr, c] = $c }
    END {
      printf "median %s over %d runs: %.0f samples/s;", k, nr, med(2)
      for (s = 0; s < P; s++) printf " stage %d %.3f ms/step, %.3f ms waiting;", s, med(3 + 2 * s), med(4 + 2 * s)
      printf "\nleast  %s over %d runs:", k, nr
      for (s = 0; s < P; s++) printf " stage %d %.3f ms/step, %.3f ms waiting;", s, lo(3 + 2 * s), lo(4 + 2 * s)
      printf "\n"
    }' "$tmp/rows"
done
