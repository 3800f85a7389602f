#!/usr/bin/env bash
# bench/recurrent.sh - the recurrent layers' step kernels, two builds alternating: each round runs
# `dtrain bench MODEL --threads 1 --batch B --json` with OLD and NEW in turn (the order swapped every
# round, so a load that drifts hits both alike) and prints, per model and batch, the medians of the
# recurrent layer's forward and backward ms, its fraction of the SGEMM peak measured in the same
# run (the "% SGEMM" of dtrain bench, range over the rounds), and the step's ms.
# Usage: bench/recurrent.sh OLD NEW [MODELS] [BATCHES] [ROUNDS]   (defaults: "lstm gru rnn", "64 256",
#        5). Models are models/M.yaml or bench/models/M.yaml. The environment passes through:
#        DTRAIN_CPU=avx2 forces the AVX2 path, OPENBLAS_CORETYPE=Haswell OpenBLAS's AVX2 kernels
#        (the SGEMM peak then an AVX2 CPU's). Env: ITERS (default 10).
set -eu
OLD=$1 NEW=$2
MODELS=${3:-lstm gru rnn}
BATCHES=${4:-64 256}
ROUNDS=${5:-5}
ITERS=${ITERS:-10}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    f=models/$m.yaml
    [ -f "$f" ] || f=bench/models/$m.yaml
    for b in $BATCHES; do
      order="old new"
      [ $((r % 2)) = 0 ] && order="new old"
      for w in $order; do
        bin=$OLD
        [ "$w" = new ] && bin=$NEW
        "$bin" bench "$f" --threads 1 --batch "$b" --iters "$ITERS" --json >"$tmp/$m.$b.$w.$r.json"
      done
    done
  done
done
python3 - "$tmp" "$MODELS" "$BATCHES" <<'PY'
import glob, json, os, statistics as st, sys
d, models, batches = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("%-6s %5s %-4s %9s %9s %8s %15s %9s  %s" % ("model", "batch", "build", "fwd ms", "bwd ms", "% SGEMM",
      "(range)", "step ms", "kernels"))
for m in models:
    for b in batches:
        for w in ("old", "new"):
            runs = [json.load(open(f))[0] for f in sorted(glob.glob(os.path.join(d, "%s.%s.%s.*.json" % (m, b, w))))]
            rec = [[l for l in r["layers"] if l["type"] in ("lstm", "gru", "rnn")][0] for r in runs]
            pf = [100 * l["peak_fraction"] for l in rec]
            k = runs[0]["cpu_kernels"].split("): ", 1)[-1].split(", ")[:2]   # "avx2 (...): cells avx2, stepgemm avx2, ..."
            print("%-6s %5s %-4s %9.3f %9.3f %7.1f%% %6.1f-%5.1f%% %9.3f  %s; BLAS %s" % (
                m, b, w, st.median(l["fwd_ms"] for l in rec), st.median(l["bwd_ms"] for l in rec), st.median(pf),
                min(pf), max(pf), st.median(r["step_ms"] for r in runs), ", ".join(k), runs[0]["blas_core"].split()[0]))
PY
