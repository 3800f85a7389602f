#!/usr/bin/env bash
# bench/compare.sh - dtrain vs PyTorch on the same models, batches and thread counts: training-step
# samples/s (`dtrain bench` and `torch_models.py --bench`, both on random in-memory data, medians)
# and peak resident memory, one process per measurement so each peak belongs to one model.
# Each cell runs dtrain and PyTorch alternately REPEAT times and reports the medians, so that a
# background job slows both sides alike rather than one; a shared machine still moves the figures.
# Usage: bench/compare.sh [BATCHES] [THREADS]   (BATCHES: "64,256" by default; THREADS: "2", or a
#        list such as "1,2")
# Env: DTRAIN (default src/dtrain), MODELS ("mlp lenet cnn cnn-bn lstm"; also char-gpt, and
#      bench/models/ specs such as gpt-block), ITERS (20), REPEAT (3),
#      PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
BATCHES=${1:-64,256}
THREADS=${2:-2}
DTRAIN=${DTRAIN:-src/dtrain}
MODELS=${MODELS:-mlp lenet cnn cnn-bn lstm}
ITERS=${ITERS:-20}
REPEAT=${REPEAT:-3}
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%-8s %6s %3s %14s %14s %7s %11s %11s\n' model batch thr "dtrain smp/s" "torch smp/s" ratio "dtrain MiB" "torch MiB"
for m in $MODELS; do
  spec=models/$m.yaml
  [ -r "$spec" ] || spec=bench/models/$m.yaml
  if [ ! -r "$spec" ]; then
    echo "note: models/$m.yaml (or bench/models/) not found; skipped" >&2
    continue
  fi
  for T in ${THREADS//,/ }; do
    for B in ${BATCHES//,/ }; do
      for r in $(seq "$REPEAT"); do
        if ! "$DTRAIN" bench "$spec" --batch "$B" --threads "$T" --iters "$ITERS" --json >"$tmp/d$r.json" 2>"$tmp/d.err"; then
          echo "error: dtrain bench models/$m.yaml --batch $B --threads $T failed:" >&2; cat "$tmp/d.err" >&2; exit 1
        fi
        if ! "$PY" bench/torch_models.py "$spec" --bench --batch "$B" --threads "$T" --steps "$ITERS" --json >"$tmp/t$r.json" 2>"$tmp/t.err"; then
          echo "error: torch_models.py $m --bench --batch $B --threads $T failed:" >&2; cat "$tmp/t.err" >&2; exit 1
        fi
      done
      "$PY" - "$m" "$B" "$T" "$REPEAT" "$tmp" <<'PY'
import json, statistics, sys
m, B, T, n, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
d = [json.load(open(f"{tmp}/d{r}.json"))[0] for r in range(1, n + 1)]
t = [json.loads(open(f"{tmp}/t{r}.json").read().strip().splitlines()[-1]) for r in range(1, n + 1)]
ds = statistics.median(x["samples_per_sec"] for x in d)
ts = statistics.median(x["samples_per_sec"] for x in t)
dm = statistics.median(x["peak_rss_mib"] for x in d)
tm = statistics.median(x["peak_rss_mib"] for x in t)
r = ds / ts if ts else float("nan")
print(f"{m:<8} {B:>6} {T:>3} {ds:>14.0f} {ts:>14.0f} {r:>6.2f}x {dm:>11.1f} {tm:>11.1f}", flush=True)
PY
    done
  done
done
echo "ratio = dtrain / torch samples/s (> 1: dtrain faster), medians of $REPEAT alternating runs each;" \
     "torch's MiB include ~0.5 GiB of the torch import itself"
