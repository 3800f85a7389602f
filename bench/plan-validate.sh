#!/usr/bin/env bash
# bench/plan-validate.sh - the planner's predictions against measurement on this machine: for each
# model, one plain `dtrain plan` (so the profile is measured and cached), then `dtrain plan
# --validate` for 1, 2 and 4 ranks (4 share the 2 cores), its JSON summarised as one table row per
# rank count: each shown layout's error (predicted - measured) / measured, and whether the measured
# order of the top layouts is the predicted one (layouts within the measured runs' range count as tied).
# usage: bench/plan-validate.sh [MODEL.yaml ...]   (REPEAT=5 TOP=3 RANKS=1,2,4 by default, STEPS=N as
# --steps, else dtrain plan's default: 2 s of training a run by the prediction;
# CLUSTER=FILE plans under that cluster spec, e.g. 'partition: {shard: 3}' or '{recompute: all}', whose
# keys the planner keeps fixed; DATA=D or DATA=all passes --data, so that only layouts of that data
# degree (all: the rank count, data parallelism alone) are shown and run: with CLUSTER fixing shard
# and recompute, one layout per rank count). Where the runs' traces give their layers' time, a cell
# also shows the predicted/measured compute a step and the error of the rest of the step's model: each
# run's step scaled by predicted over measured compute, which takes out the speed the machine had;
# and the error of the prediction with its compute at the machine's drift around each run (the
# model's layers timed alone before and after it): the whole model judged apart from how fast the
# machine ran, the runs' own compute not used;
# KEEP=DIR keeps each model's `dtrain plan --json` there as MODEL.json)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
models=(); for a in "$@"; do models+=("$(realpath "$a")"); done
[ ${#models[@]} -gt 0 ] || models=("$top/models/mlp.yaml" "$top/bench/models/mlp-4096.yaml" \
                                    "$top/models/lenet.yaml" "$top/models/cnn.yaml" "$top/models/lstm.yaml")
tmp=$(mktemp -d /tmp/plan-validate.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
within=0; total=0; errs=""; rwithin=0; rerrs=""; swithin=0; serrs=""
for m in "${models[@]}"; do
  name=$(basename "$m" .yaml)
  cl=(); [ -n "${CLUSTER:-}" ] && cl=(--cluster "$(realpath "$CLUSTER")")
  [ -n "${DATA:-}" ] && cl+=(--data "$DATA")
  (cd "$tmp" && "$top/src/dtrain" plan "$m" "${cl[@]}" --ranks "${RANKS:-1,2,4}" --top "${TOP:-3}" --no-scaling >/dev/null 2>&1)
  (cd "$tmp" && "$top/src/dtrain" plan "$m" "${cl[@]}" --ranks "${RANKS:-1,2,4}" --top "${TOP:-3}" --validate \
     --repeat "${REPEAT:-5}" ${STEPS:+--steps "$STEPS"} --no-scaling --json > "$tmp/$name.json" 2>"$tmp/$name.err") ||
    { echo "$name: dtrain plan failed: $(tail -3 "$tmp/$name.err")"; continue; }
  [ -n "${KEEP:-}" ] && cp "$tmp/$name.json" "$KEEP/$name.json"
  read -r w t e rw re sw se < <(python3 - "$tmp/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); w = t = rw = sw = 0; errs = []; rerrs = []; serrs = []
for c in j["counts"]:
    cells = []
    for p in c["plans"]:
        if p.get("measured_step_ms") is None: cells.append("not run"); continue
        e = 100 * (p["step_ms"] - p["measured_step_ms"]) / p["measured_step_ms"]
        t += 1; w += abs(e) <= 15; errs.append("%.2f" % abs(e))
        at = p.get("measured_at_predicted_compute_ms")
        rest = ""
        if at:
            re = 100 * (p["step_ms"] - at) / at
            rw += abs(re) <= 15; rerrs.append("%.2f" % abs(re))
            rest = ", compute %.2f/%.2f, rest %+.1f" % (p["compute_ms"], p["measured_compute_ms"], re)
        se = p.get("error_at_drift")
        if se is not None:
            sw += abs(se) <= 0.15; serrs.append("%.2f" % abs(100 * se))
            rest += ", at the drift: %+.1f" % (100 * se)
        cells.append("%+.1f (%s; %.2f/%.2f ms, drift %.2f%s)" % (e, p.get("layout", "?"), p["step_ms"], p["measured_step_ms"],
                                                              p.get("machine_drift") or 0, rest))
    order = "" if "order_holds" not in c else "; order " + ("as predicted" if c["order_holds"] else
            "as predicted up to ties" if c.get("order_holds_beyond_noise") else "differs")
    print("%-10s %d ranks: %s%s" % (sys.argv[2], c["ranks"], " | ".join(cells), order), file=sys.stderr)
print(w, t, ",".join(errs) or "-", rw, ",".join(rerrs) or "-", sw, ",".join(serrs) or "-")
PY
)
  within=$((within + w)); total=$((total + t)); rwithin=$((rwithin + ${rw:-0})); swithin=$((swithin + ${sw:-0}))
  [ "${se:--}" != - ] && serrs="$serrs ${se//,/ }"
  [ "${e:--}" != - ] && errs="$errs ${e//,/ }"
  [ "${re:--}" != - ] && rerrs="$rerrs ${re//,/ }"
done 2>&1
summary() { python3 -c 'import statistics, sys; e = [float(x) for x in sys.argv[2:]]
print("%s: median %.1f%%, max %.1f%% over %d layouts" % (sys.argv[1], statistics.median(e), max(e), len(e)))' "$@"; }
echo "within +-15%: $within of $total; at the predicted compute: $rwithin; at the drift: $swithin"
[ "$total" -gt 0 ] && summary "|error|" $errs
[ -n "$rerrs" ] && summary "|error| at the predicted compute (the rest of the step's model)" $rerrs
[ -n "$serrs" ] && summary "|error| with the compute at the machine's drift around each run (the whole model)" $serrs
