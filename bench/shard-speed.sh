#!/usr/bin/env bash
# bench/shard-speed.sh - partition.shard's step time against shard 0 on the same ranks: for each model,
# ROUNDS rounds of `dtrain bench` at shard 0, 1, 2 and 3 in turn (each model's rounds under one flock
# on /work/measure.lock when that file exists: keep ROUNDS x 4 runs under its 6 minutes), one
# thread per rank; prints each stage's median step and its ratio to shard 0's median, and every
# round's figures. usage: bench/shard-speed.sh [MODEL.yaml ...]  (NP=2 ROUNDS=3 ITERS=15 by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
models=("$@"); [ ${#models[@]} -gt 0 ] || models=("$top/bench/models/mlp-4096.yaml" "$top/models/cnn-bn.yaml")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shard-speed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for s in 0 1 2 3; do printf 'partition: {shard: %d}\n' "$s" > "$tmp/s$s.yaml"; done
lock=(); [ -e /work/measure.lock ] && lock=(flock /work/measure.lock)
for m in "${models[@]}"; do
  name=$(basename "$m" .yaml)
  # one hold of the lock per model (ROUNDS x 4 runs): the stages of every round see the same machine
  "${lock[@]}" bash -c 'for r in $(seq "$8"); do for s in 0 1 2 3; do
      (cd "$1" && mpirun -np "$2" "$1/src/dtrain" bench "$3" --cluster "$4/s$s.yaml" --threads 1 --iters "$5" --json 2>/dev/null) |
        python3 -c "import json, sys; print(json.load(sys.stdin)[0][\"step_ms\"])" > "$4/$6-$s-$r" || echo nan > "$4/$6-$s-$r"
    done; done' _ "$top" "${NP:-2}" "$m" "$tmp" "${ITERS:-15}" "$name" "" "${ROUNDS:-3}"
  python3 - "$tmp" "$name" "${ROUNDS:-3}" <<'PY'
import statistics, sys
d, name, R = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = {s: [float(open("%s/%s-%d-%d" % (d, name, s, r)).read()) for r in range(1, R + 1)] for s in range(4)}
base = statistics.median(t[0])
for s in range(4):
    m = statistics.median(t[s])
    print("%-10s shard %d  median %7.1f ms  x%.3f of shard 0   rounds: %s" % (name, s, m, m / base,
          " ".join("%.1f" % x for x in t[s])))
PY
done
