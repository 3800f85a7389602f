#!/usr/bin/env bash
# bench/vstages.sh [ROUNDS] [NP] [MODEL] - the bubble of each pipeline schedule (gpipe, 1f1b, zb-h1,
# interleaved, zb-v, v-half) on NP ranks (default 4) at 8 micro-batches, measured by dtrain bench --cluster
# (the walker's own clocks: idle = the slowest stage's walk less the stage's F, B and W time) beside
# the schedule's formula and the simulator's prediction from the measured costs (with free messages,
# "sim free", and with the measured message costs), and the steady-state bubble ("steady": the wall
# time of the timed steps back to back, each stage's idle = that per step less its F, B, W and update;
# "-" from a binary without it) and its formula ("st form", the schedule's bubble when steps run back to
# back from the measured F, B, W: below the one-step formula only for zb-v) beside the simulator's play of the same steps back to back ("sim
# run", bubble_sim_run); ROUNDS (default 3)
# alternated rounds, each schedule's row the round with the least measured bubble (the others say
# how noisy). Then each rank's planned and measured peak memory under each schedule (dtrain run,
# 4 steps; the metrics' mem_planned_mib and mem_peak_mib). Run from the source tree.
# CAP=F holds every rank to F of a core (tests/tools/cpu-cap.sh, root): NP ranks on fewer cores then
# run as NP slower cores of their own, e.g. CAP=0.5 for 4 ranks on this 2-core machine.
# BATCH=N sets the global batch (bench --batch, run's train.batch). Under CAP two ranks share a core in
# slices of a scheduler tick (4 ms), so an action is stretched unevenly unless it is long: at batch 128
# (0.5 ms actions) measured bubbles were 47-58% against simulated 34-47%, at 4096 (18 ms actions)
# within 0.3-4 points of simulated. PERIOD=US sets cpu-cap.sh's quota period (default 10 ms; the
# old 2 ms, under the tick, left each rank 36-39% of a core and equal stages up to 14% apart).
# SCHEDULES="..." runs only those (a lock hold each); MEM=0 skips the memory runs; KEEP=DIR keeps each bench's JSON there (SCHEDULE.ROUND.json).
# ITERS=N timed steps (default 10; the fill and drain are paid once over them); SET="k=v ..." bench
# --set's (e.g. SET=train.clip_norm=1e30: every step waits for the norm, as before the overlap).
set -eu
R=${1:-3}; NP=${2:-4}; MODEL=${3:-bench/models/mlp-even8.yaml}
DT=${DTRAIN:-src/dtrain}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
CAPT=$(dirname "$0")/../tests/tools/cpu-cap.sh
mpi() {
  if [ -n "${CAP:-}" ]; then "$CAPT" --share "$CAP" ${PERIOD:+--period "$PERIOD"} -- mpirun -np "$NP" --bind-to none "$CAPT" "$@"
  else mpirun -np "$NP" "$@"; fi
}
S=${SCHEDULES:-gpipe 1f1b zb-h1 interleaved zb-v v-half}
B=(); [ -n "${BATCH:-}" ] && B=(--batch "$BATCH")
for kv in ${SET:-}; do B+=(--set "$kv"); done
for s in $S; do printf 'partition: {strategy: model, micro_batches: 8, schedule: %s}\n' "$s" > "$T/$s.yaml"; done
for r in $(seq "$R"); do
  for s in $S; do
    mpi "$DT" bench "$MODEL" --cluster "$T/$s.yaml" --iters "${ITERS:-10}" --warmup 3 --json "${B[@]}" > "$T/$s.$r.json"
  done
done
python3 - "$T" "$R" $S <<'PY'
import json, sys
T, R, S = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'schedule':12} {'measured':>9} {'(rounds)':>24} {'formula':>8} {'sim free':>9} {'simulated':>9} {'steady':>7} {'st form':>8} {'sim run':>8}  per-stage idle ms measured / formula / simulated (best round)")
for s in S:
    runs = [json.load(open(f"{T}/{s}.{r}.json"))[0] for r in range(1, R + 1)]
    best = min(runs, key=lambda m: m["pipeline"]["bubble"])
    p = best["pipeline"]
    rounds = " ".join(f"{100 * m['pipeline']['bubble']:.1f}" for m in runs)
    st = ", ".join(f"{x['idle_ms']:.1f}/{x['formula_idle_ms']:.1f}/{x['sim_idle_ms']:.1f}" for x in best["stages"])
    fmt = lambda x: f"{100 * x:8.1f}%" if x is not None else f"{'-':>9}"
    steady = min((m['pipeline'].get('bubble_steady') for m in runs if 'bubble_steady' in m['pipeline']), default=None)
    steady = f"{100 * steady:6.1f}%" if steady is not None else f"{'-':>7}"
    stf = p.get('bubble_theory_steady')
    stf = f"{100 * stf:7.1f}%" if stf is not None else f"{'-':>8}"
    print(f"{s:12} {100 * p['bubble']:8.1f}% {rounds:>24} {100 * p['bubble_theory']:7.1f}% {fmt(p.get('bubble_sim_free'))} {100 * p['bubble_sim']:8.1f}% {steady} {stf} {fmt(p.get('bubble_sim_run'))[1:]}  {st}")
PY
[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$T"/*.json "$KEEP"/
[ "${MEM:-1}" = 0 ] && exit 0
echo
echo "memory per rank, MiB planned / measured peak (dtrain run, 4 steps):"
for s in $S; do
  mpi "$DT" run "$MODEL" --cluster "$T/$s.yaml" --out "$T/run-$s" --threads 1 --quiet --max-steps 4 ${BATCH:+--set train.batch=$BATCH} >/dev/null 2>&1
  python3 - "$T/run-$s/metrics.jsonl" "$s" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if '"mem_peak_mib"' in l][-1]
print(f"{sys.argv[2]:12} " + "  ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(last["mem_planned_mib"], last["mem_peak_mib"])))
PY
done
