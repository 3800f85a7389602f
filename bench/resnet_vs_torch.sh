#!/usr/bin/env bash
# bench/resnet_vs_torch.sh - training samples/s of models/resnet.yaml (a branched graph: residual
# blocks, batch norm, projection shortcuts) in dtrain and in PyTorch (bench/torch_models.py builds
# the same module from the spec), on the same batch, thread count and optimizer (the spec's adamw),
# random in-memory data, the two alternated ROUNDS times so that a shared machine's drift hits both;
# prints each round and the medians. Usage: bench/resnet_vs_torch.sh [THREADS] [BATCH] [ROUNDS]
# Env: DTRAIN (default src/dtrain), PYTHON (default python3; it needs torch), ITERS (10).
set -eu
cd "$(dirname "$0")/.."
T=${1:-2}; B=${2:-128}; R=${3:-3}
DTRAIN=${DTRAIN:-src/dtrain}
ITERS=${ITERS:-10}
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
d_all=""; t_all=""
for r in $(seq 1 "$R"); do
  "$DTRAIN" bench models/resnet.yaml --batch "$B" --threads "$T" --iters "$ITERS" --json >"$tmp/d.json"
  d=$("$PY" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))[0]["samples_per_sec"])' "$tmp/d.json")
  "$PY" bench/torch_models.py models/resnet.yaml --bench --batch "$B" --threads "$T" --steps "$ITERS" --json >"$tmp/t.json"
  t=$("$PY" -c 'import json,sys; print("%.1f" % json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["samples_per_sec"])' "$tmp/t.json")
  echo "round $r: dtrain $d samples/s, torch $t samples/s"
  d_all="$d_all $d"; t_all="$t_all $t"
done
"$PY" - "$d_all" "$t_all" "$B" "$T" <<'PY'
import statistics, sys
d = [float(x) for x in sys.argv[1].split()]
t = [float(x) for x in sys.argv[2].split()]
md, mt = statistics.median(d), statistics.median(t)
print(f"resnet, batch {sys.argv[3]}, {sys.argv[4]} threads, adamw: dtrain {md:.0f} samples/s, torch {mt:.0f} samples/s "
      f"(medians of {len(d)} alternated rounds; dtrain/torch = {md / mt:.2f})")
PY
