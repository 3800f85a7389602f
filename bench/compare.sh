#!/usr/bin/env bash
# bench/compare.sh - dtrain vs PyTorch on the same models, batches and thread count: training-step
# samples/s (`dtrain bench` and `torch_models.py --bench`, both on random in-memory data, medians)
# and peak resident memory, one process per measurement so each peak belongs to one model.
# Usage: bench/compare.sh [BATCHES] [THREADS]   (BATCHES: "64,256" by default; THREADS: 2)
# Env: DTRAIN (default src/dtrain), MODELS ("mlp lenet cnn lstm"), ITERS (20), PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
BATCHES=${1:-64,256}
T=${2:-2}
DTRAIN=${DTRAIN:-src/dtrain}
MODELS=${MODELS:-mlp lenet cnn lstm}
ITERS=${ITERS:-20}
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%-8s %6s %14s %14s %7s %11s %11s\n' model batch "dtrain smp/s" "torch smp/s" ratio "dtrain MiB" "torch MiB"
for m in $MODELS; do
  if [ ! -r "models/$m.yaml" ]; then
    echo "note: models/$m.yaml not found; skipped" >&2
    continue
  fi
  for B in ${BATCHES//,/ }; do
    if ! "$DTRAIN" bench "models/$m.yaml" --batch "$B" --threads "$T" --iters "$ITERS" --json >"$tmp/d.json" 2>"$tmp/d.err"; then
      echo "error: dtrain bench models/$m.yaml --batch $B failed:" >&2; cat "$tmp/d.err" >&2; exit 1
    fi
    if ! "$PY" bench/torch_models.py "$m" --bench --batch "$B" --threads "$T" --steps "$ITERS" --json >"$tmp/t.json" 2>"$tmp/t.err"; then
      echo "error: torch_models.py $m --bench --batch $B failed:" >&2; cat "$tmp/t.err" >&2; exit 1
    fi
    "$PY" - "$m" "$B" "$tmp/d.json" "$tmp/t.json" <<'PY'
import json, sys
m, B, dj, tj = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
d = json.load(open(dj))[0]
t = json.loads(open(tj).read().strip().splitlines()[-1])
r = d["samples_per_sec"] / t["samples_per_sec"] if t["samples_per_sec"] else float("nan")
print(f"{m:<8} {B:>6} {d['samples_per_sec']:>14.0f} {t['samples_per_sec']:>14.0f} {r:>6.2f}x "
      f"{d['peak_rss_mib']:>11.1f} {t['peak_rss_mib']:>11.1f}")
PY
  done
done
echo "ratio = dtrain / torch samples/s (> 1: dtrain faster); torch's MiB include ~0.5 GiB of the torch import itself"
