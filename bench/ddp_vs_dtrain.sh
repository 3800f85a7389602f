#!/usr/bin/env bash
# bench/ddp_vs_dtrain.sh - data-parallel training throughput on one machine: dtrain under
# `mpirun -np P` (bucketed, overlapped MPI allreduce) next to PyTorch DistributedDataParallel with
# the gloo backend (localhost), P processes x T threads each, the same model and global batch,
# random in-memory data, medians of the slowest rank.
# Usage: bench/ddp_vs_dtrain.sh [MODEL] [BATCH] [PROCS] [THREADS]   (defaults: cnn 128 2 1)
# Env: DTRAIN (default src/dtrain), MPIRUN (mpirun), ITERS (20), PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
M=${1:-cnn}; B=${2:-128}; P=${3:-2}; T=${4:-1}
DTRAIN=${DTRAIN:-src/dtrain}
MPIRUN=${MPIRUN:-mpirun}
ITERS=${ITERS:-20}
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec=models/$M.yaml
[ -r "$spec" ] || { echo "error: $spec not found" >&2; exit 2; }
if ! "$MPIRUN" -np "$P" "$DTRAIN" bench "$spec" --batch "$B" --threads "$T" --iters "$ITERS" --json \
     >"$tmp/d.json" 2>"$tmp/d.err"; then
  echo "error: mpirun -np $P dtrain bench $spec failed:" >&2; cat "$tmp/d.err" >&2; exit 1
fi
if ! "$PY" bench/torch_ddp.py "$M" --procs "$P" --threads "$T" --batch "$B" --steps "$ITERS" --json \
     >"$tmp/t.json" 2>"$tmp/t.err"; then
  echo "error: torch_ddp.py $M failed:" >&2; cat "$tmp/t.err" >&2; exit 1
fi
"$PY" - "$tmp/d.json" "$tmp/t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))[0]
t = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
print(f"model {d['model']}: global batch {d['batch']}, {d['ranks']} processes x {d['threads']} thread(s)")
print(f"{'':<30} {'samples/s':>10} {'ms/step':>9}")
print(f"{'dtrain (MPI allreduce)':<30} {d['samples_per_sec']:>10.0f} {d['step_ms']:>9.3f}")
print(f"{'torch DDP (gloo) ' + t['torch']:<30} {t['samples_per_sec']:>10.0f} {t['step_ms']:>9.3f}")
print(f"ratio dtrain / torch: {d['samples_per_sec'] / t['samples_per_sec']:.2f}x")
a = d.get("allreduce")
if a:
    print(f"dtrain sync: {a['dtrain_ms']:.3f} ms for {a['bytes'] / 1048576:.2f} MiB in {a['buckets']} bucket(s) "
          f"(raw MPI_Allreduce {a['mpi_ms']:.3f} ms); {100 * a['hidden']:.0f}% hidden behind backward")
PY
