#!/usr/bin/env bash
# bench/conv-paths.sh - the cpu backend's two convolution paths side by side: `dtrain bench --conv
# im2col` and `--conv onednn` run alternately REPEAT times per (model, batch, threads), and the
# medians of each conv layer's forward and backward time, the training step, and the step as a
# fraction of the SGEMM peak measured in the same run (with the best of the repeats beside them). Alternating keeps a background job from
# slowing one path rather than the other; a shared machine still moves the figures.
# Usage: bench/conv-paths.sh [BATCHES] [THREADS]   (defaults: "64,256" and "1,2")
# Env: DTRAIN (default src/dtrain), MODELS ("cnn cnn-bn lenet resnet"), ITERS (10), REPEAT (3),
#      PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
BATCHES=${1:-64,256}
THREADS=${2:-1,2}
DTRAIN=${DTRAIN:-src/dtrain}
MODELS=${MODELS:-cnn cnn-bn lenet resnet}
ITERS=${ITERS:-10}
REPEAT=${REPEAT:-3}
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$DTRAIN" bench models/cnn.yaml --conv onednn --iters 1 --warmup 0 --batch 2 >/dev/null 2>"$tmp/err"; then
  echo "error: this dtrain cannot run --conv onednn:" >&2; cat "$tmp/err" >&2; exit 2
fi
for m in $MODELS; do
  [ -r "models/$m.yaml" ] || { echo "note: models/$m.yaml not found; skipped" >&2; continue; }
  for B in ${BATCHES//,/ }; do
    for T in ${THREADS//,/ }; do
      for r in $(seq "$REPEAT"); do
        for path in im2col onednn; do
          "$DTRAIN" bench "models/$m.yaml" --batch "$B" --threads "$T" --iters "$ITERS" --conv "$path" --json \
            >"$tmp/$m.$B.$T.$path.$r.json" 2>/dev/null || { echo "error: dtrain bench $m --conv $path failed" >&2; exit 1; }
        done
      done
    done
  done
done

"$PY" - "$tmp" "$MODELS" "$BATCHES" "$THREADS" "$REPEAT" <<'PY'
import json, os, statistics, sys
tmp, models, batches, threads, rep = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(","), sys.argv[4].split(","), int(sys.argv[5])
med = statistics.median
print(f"{'model':8} {'B':>4} {'T':>2} {'layer':12} {'im2col fwd':>10} {'bwd':>8} {'onednn fwd':>10} {'bwd':>8} {'speed-up':>8}")
steps = []
for m in models:
    for B in batches:
        for T in threads:
            runs = {p: [] for p in ("im2col", "onednn")}
            for p in runs:
                for r in range(1, rep + 1):
                    f = os.path.join(tmp, f"{m}.{B}.{T}.{p}.{r}.json")
                    if os.path.exists(f):
                        runs[p].append(json.load(open(f))[0])
            if not runs["im2col"]:
                continue
            a0 = runs["im2col"][0]
            for i, l in enumerate(a0["layers"]):
                if l["type"] != "conv":
                    continue
                v = {p: (med(x["layers"][i]["fwd_ms"] for x in runs[p]), med(x["layers"][i]["bwd_ms"] for x in runs[p]))
                     for p in runs}
                sp = sum(v["im2col"]) / max(1e-9, sum(v["onednn"]))
                print(f"{m:8} {B:>4} {T:>2} {l['name']:12} {v['im2col'][0]:10.3f} {v['im2col'][1]:8.3f} "
                      f"{v['onednn'][0]:10.3f} {v['onednn'][1]:8.3f} {sp:7.2f}x")
            s = {p: (med(x["step_ms"] for x in runs[p]), med(x["peak_fraction"] for x in runs[p]),
                     med(x["sgemm_gflops"] for x in runs[p]), min(x["step_ms"] for x in runs[p]),
                     max(x["peak_fraction"] for x in runs[p])) for p in runs}
            steps.append((m, B, T, s))
print()
print("step: medians over the repeats (best step and best % of the SGEMM peak in brackets: on a shared")
print("machine the least disturbed run); the SGEMM peak is each run's own, its median shown")
print(f"{'model':8} {'B':>4} {'T':>2} {'im2col step ms':>22} {'% SGEMM':>16} {'onednn step ms':>22} {'% SGEMM':>16} "
      f"{'speed-up':>8} {'SGEMM GF/s':>10}")
for m, B, T, s in steps:
    a, o = s["im2col"], s["onednn"]
    print(f"{m:8} {B:>4} {T:>2} {a[0]:10.2f} ({a[3]:8.2f}) {100 * a[1]:6.1f}% ({100 * a[4]:5.1f}%) "
          f"{o[0]:10.2f} ({o[3]:8.2f}) {100 * o[1]:6.1f}% ({100 * o[4]:5.1f}%) {a[0] / o[0]:7.2f}x {o[2]:10.1f}")
PY
