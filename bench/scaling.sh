#!/usr/bin/env bash
# bench/scaling.sh - data-parallel strong scaling of one model: `mpirun -np k dtrain bench MODEL
# --json` for k = 1..MAXRANKS at the same global batch, printing samples/s, speedup over 1 rank,
# efficiency (speedup / k) and the share of the gradient sync hidden behind backward.
# Usage: bench/scaling.sh MODEL.yaml [MAXRANKS] [dtrain bench flags...]
#   e.g. bench/scaling.sh models/cnn.yaml 4 --batch 256 --threads 1
# Env: DTRAIN (default src/dtrain), MPIRUN (mpirun), PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: bench/scaling.sh MODEL.yaml [MAXRANKS] [dtrain bench flags...]" >&2
  exit 2
fi
MODEL=$1; shift
MAX=$(nproc)
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then MAX=$1; shift; fi
DTRAIN=${DTRAIN:-src/dtrain}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in $(seq 1 "$MAX"); do
  if ! "$MPIRUN" -np "$k" "$DTRAIN" bench "$MODEL" --json "$@" >"$tmp/$k.json" 2>"$tmp/$k.err"; then
    echo "error: mpirun -np $k dtrain bench $MODEL failed:" >&2; cat "$tmp/$k.err" >&2; exit 1
  fi
done
"$PY" - "$tmp" "$MAX" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rows = [json.load(open(f"{tmp}/{k}.json"))[0] for k in range(1, n + 1)]
base = rows[0]["samples_per_sec"]
print(f"model {rows[0]['model']}: global batch {rows[0]['batch']}, {rows[0]['threads']} thread(s) per rank")
print(f"{'ranks':>5} {'samples/s':>11} {'ms/step':>9} {'speedup':>8} {'efficiency':>10} {'sync ms':>8} {'hidden':>7}")
for k, r in enumerate(rows, 1):
    s = r["samples_per_sec"] / base
    a = r.get("allreduce") or {}
    sync = f"{a['dtrain_ms']:.3f}" if a else "-"
    hid = f"{100 * a['hidden']:.0f}%" if a else "-"
    print(f"{k:>5} {r['samples_per_sec']:>11.0f} {r['step_ms']:>9.3f} {s:>7.2f}x {100 * s / k:>9.0f}% {sync:>8} {hid:>7}")
PY
