#!/usr/bin/env bash
# bench/memory-bound.sh - every memory-bound layer (pooling, batchnorm, activations, dropout,
# flatten, the optimizer update) of the given models as a fraction of the measured triad
# bandwidth, from `dtrain bench --json`, for each batch and thread count. Prints one row per
# layer and, last, the rows under 50%.
# Usage: bench/memory-bound.sh [MODELS] [BATCHES] [THREADS]   (defaults: "lenet cnn cnn-bn",
#        "64,256", "1,2")    Env: DTRAIN (default src/dtrain), ITERS (20)
set -eu
cd "$(dirname "$0")/.."
MODELS=${1:-lenet cnn cnn-bn}
BATCHES=${2:-64,256}
THREADS=${3:-1,2}
DTRAIN=${DTRAIN:-src/dtrain}
ITERS=${ITERS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in $MODELS; do
  for T in ${THREADS//,/ }; do
    for B in ${BATCHES//,/ }; do
      "$DTRAIN" bench "models/$m.yaml" --batch "$B" --threads "$T" --iters "$ITERS" --json >"$tmp/$m-$B-$T.json"
    done
  done
done
python3 - "$tmp" <<'PY'
import glob, json, os, sys
low = []
print("%-8s %5s %3s %-10s %-10s %8s %8s %7s" % ("model", "batch", "thr", "layer", "type", "fwd GB/s", "bwd GB/s", "% triad"))
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r = json.load(open(f))[0]
    rows = [(l["name"], l["type"], l["fwd_gbs"], l["bwd_gbs"], l["peak_fraction"]) for l in r["layers"] if l["memory_bound"]]
    rows.append(("(update)", "optimizer", r["update_gbs"], 0.0, r["update_gbs"] / r["triad_gbs"]))
    for name, kind, fg, bg, frac in rows:
        line = "%-8s %5d %3d %-10s %-10s %8.1f %8.1f %6.0f%%" % (r["model"], r["batch"], r["threads"], name, kind, fg, bg, 100 * frac)
        print(line)
        if frac < 0.5: low.append(line)
    print("%-8s %5d %3d triad %.1f GB/s" % (r["model"], r["batch"], r["threads"], r["triad_gbs"]))
print("\nunder 50%% of the triad: %d rows" % len(low))
for line in low: print(line)
PY
