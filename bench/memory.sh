#!/usr/bin/env bash
# bench/memory.sh [DTRAIN] [FILTER] [STEPS] - the memory plan against the measured peak: every
# bundled model (models/*.yaml, bench/models/*.yaml) on 1, 2 and 4 ranks (data parallel, 1 thread
# per rank), STEPS training steps (default 100: what a short run maps of the data grows with the steps, as the plan models from what one read maps; an epoch maps it all) and the end's evaluation and checkpoint. Prints one
# row per run and rank set: model, ranks, layout, the largest rank's planned and measured peak
# (VmHWM, the run's own "memory: rank R planned ... measured peak ..." lines) and the error of the
# worst rank, planned against measured. FILTER (grep -E) picks runs by "model/ranks". CLUSTER=FILE
# adds --cluster FILE to every run (e.g. partition: {recompute: all, shard: 2}: the plan with them).
set -u
BIN=${1:-$PWD/src/dtrain} FILTER=${2:-.} STEPS=${3:-100}
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-memory.XXXXXX")
trap 'rm -rf "$T"' EXIT
printf '%-12s %5s %-6s %12s %13s %8s\n' model ranks layout "planned MiB" "measured MiB" "error %"
for spec in models/*.yaml bench/models/*.yaml; do
  m=$(basename "$spec" .yaml)
  for np in 1 2 4; do
    printf '%s/%s\n' "$m" "$np" | grep -qE -- "$FILTER" || continue
    out=$T/$m-$np
    mpirun -np "$np" "$BIN" run "$spec" --max-steps "$STEPS" --threads 1 --out "$out" ${CLUSTER:+--cluster "$CLUSTER"} 2>&1 |
      awk -v m="$m" -v np="$np" '/^memory: rank [0-9]+ planned/ {
            p = $5; q = $9; e = 100 * (p - q) / q
            if (p > P) P = p; if (q > Q) Q = q; if (e * e > E * E) E = e; n++ }
          END { if (n) printf "%-12s %5s %-6s %12.1f %13.1f %+8.1f\n", m, np, "data", P, Q, E
                else printf "%-12s %5s %-6s no memory lines\n", m, np, "data" }'
  done
done
