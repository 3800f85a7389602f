#!/usr/bin/env bash
# bench/pipeline-speed.sh - what pipeline stages buy on a small machine: 1 rank x 1 thread against
# 2 ranks x 1 thread as 2 pipeline stages with 8 micro-batches under gpipe, 1f1b and zb-h1 (a
# schedule the cluster spec refuses is skipped, with its reason), for LeNet and a 2-layer LSTM,
# each measured by `dtrain bench --json`. The runs alternate (A B C D A B C D ...) so that load from
# other work on a shared machine falls on every configuration alike; the medians over the rounds
# are printed with the speed-up over one rank, the bubble (measured, theory, simulated) and the
# slowest stage. Timings on a busy machine are noisy: compare the min-max spread, not one figure.
# Usage: bench/pipeline-speed.sh [ROUNDS] [dtrain bench flags...]   (default 3 rounds)
#   e.g. bench/pipeline-speed.sh 5 --iters 30
# Env: DTRAIN (src/dtrain), MPIRUN (mpirun), PYTHON (python3), MODELS (default
#   "models/lenet.yaml tests/cli/pp-lstm.yaml"), SCHEDULES ("gpipe 1f1b zb-h1"), MICRO (8).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=3
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then ROUNDS=$1; shift; fi
DTRAIN=${DTRAIN:-src/dtrain}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
MODELS=${MODELS:-models/lenet.yaml tests/cli/pp-lstm.yaml}
SCHEDULES=${SCHEDULES:-gpipe 1f1b zb-h1}
MICRO=${MICRO:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for s in $SCHEDULES; do
  printf 'partition: {strategy: model, pipeline: 2, micro_batches: %s, schedule: %s}\n' "$MICRO" "$s" >"$tmp/$s.yaml"
done

# one NAME CMD...: a run's JSON into $tmp/NAME.json; a schedule refused by the spec (exit 2 naming
# it) marks NAME skipped, anything else stops the script
one() {
  local name=$1; shift
  if "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"; then return 0; fi
  if grep -q "schedule '" "$tmp/$name.err"; then
    : >"$tmp/$name.skip"; rm -f "$tmp/$name.json"; return 0
  fi
  echo "error: $* failed:" >&2; cat "$tmp/$name.err" >&2; exit 1
}

for r in $(seq 1 "$ROUNDS"); do
  i=0
  for m in $MODELS; do
    i=$((i + 1))
    one "m$i-one-$r" "$DTRAIN" bench "$m" --threads 1 --json "$@"
    for s in $SCHEDULES; do
      [ -e "$tmp/m$i-$s-1.skip" ] && continue       # refused once: refused every round
      one "m$i-$s-$r" "$MPIRUN" -np 2 "$DTRAIN" bench "$m" --cluster "$tmp/$s.yaml" --threads 1 --json "$@"
    done
  done
done

"$PY" - "$tmp" "$ROUNDS" "$MICRO" $SCHEDULES -- $MODELS <<'PY'
import glob, json, os, statistics, sys
tmp, rounds, micro = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cut = sys.argv.index("--")
scheds, models = sys.argv[4:cut], sys.argv[cut + 1:]
def load(name):
    runs = [json.load(open(f))[0] for f in sorted(glob.glob(f"{tmp}/{name}-*.json"))]
    return runs
print(f"{rounds} alternating rounds; medians (min-max) of samples/s; 1 thread per rank; "
      f"2 stages x {micro} micro-batches")
for i, path in enumerate(models, 1):
    one = load(f"m{i}-one")
    base = statistics.median(r["samples_per_sec"] for r in one)
    print(f"\nmodel {one[0]['model']} ({path}): global batch {one[0]['batch']}")
    print(f"{'config':<22} {'samples/s':>10} {'min-max':>17} {'speedup':>8} {'bubble':>7} {'theory':>7} "
          f"{'sim':>7} {'slowest stage':>14}")
    sps = [r["samples_per_sec"] for r in one]
    print(f"{'1 rank':<22} {base:>10.0f} {min(sps):>8.0f}-{max(sps):<8.0f} {1:>7.2f}x")
    for s in scheds:
        if os.path.exists(f"{tmp}/m{i}-{s}-1.skip"):
            err = open(f"{tmp}/m{i}-{s}-1.err").read().strip().splitlines()
            why = next((l for l in err if "error:" in l), err[0] if err else "refused")
            print(f"{'2 stages ' + s:<22} skipped: {why.split('error: ', 1)[-1]}")
            continue
        runs = load(f"m{i}-{s}")
        sps = [r["samples_per_sec"] for r in runs]
        med = statistics.median(sps)
        p = lambda k: statistics.median(r["pipeline"][k] for r in runs if r["pipeline"][k] is not None)
        slow = statistics.mode(r["pipeline"]["slowest_stage"] for r in runs)
        print(f"{'2 stages ' + s:<22} {med:>10.0f} {min(sps):>8.0f}-{max(sps):<8.0f} {med / base:>7.2f}x "
              f"{100 * p('bubble'):>6.1f}% {100 * p('bubble_theory'):>6.1f}% {100 * p('bubble_sim'):>6.1f}% "
              f"{slow:>14}")
PY
