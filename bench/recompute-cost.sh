#!/usr/bin/env bash
# bench/recompute-cost.sh - what partition.recompute all costs, layer by layer, and what the planner
# predicts it costs: ROUNDS rounds of `dtrain bench` and `dtrain plan --ranks 1` with recompute none
# and all in turn (all rounds under one flock on /work/measure.lock when it exists; the plans share a
# profile cache of their own, so each round adds samples), one rank, THREADS threads; prints per
# layer the medians of forward, backward and the recomputed forward (all) against none's forward and
# backward, the step's, and the planner's predicted steps (medians). usage:
# bench/recompute-cost.sh MODEL.yaml [BATCH]   (ROUNDS=3 ITERS=10 THREADS=1 by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
m=$(realpath "$1"); batch=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/recompute-cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for r in none all; do printf 'partition: {recompute: %s}\n' "$r" > "$tmp/$r.yaml"; done
lock=(); [ -e /work/measure.lock ] && lock=(flock /work/measure.lock)
"${lock[@]}" bash -c 'for i in $(seq "$8"); do for r in none all; do
    (cd "$1" && "$1/src/dtrain" bench "$2" --cluster "$3/$r.yaml" --threads "$4" --iters "$5" ${6:+--batch "$6"} --json \
      2>/dev/null) > "$3/$r-$i.json"
    (cd "$3" && XDG_CACHE_HOME="$3/cache" "$1/src/dtrain" plan "$2" --cluster "$3/$r.yaml" --threads "$4" --ranks 1 \
      --top 1 --no-scaling ${6:+--set train.batch="$6"} --json 2>/dev/null) > "$3/plan-$r-$i.json"
  done; done' _ "$top" "$m" "$tmp" "${THREADS:-1}" "${ITERS:-10}" "$batch" "" "${ROUNDS:-3}"
python3 - "$tmp" "${ROUNDS:-3}" <<'PY'
import json, statistics, sys
d, R = sys.argv[1], int(sys.argv[2])
runs = {r: [json.load(open("%s/%s-%d.json" % (d, r, i)))[0] for i in range(1, R + 1)] for r in ("none", "all")}
med = lambda r, f: statistics.median(f(o) for o in runs[r])
print("%-10s %9s %9s | %9s %9s %9s   (ms, medians of %d rounds)" % ("layer", "fwd none", "bwd none", "fwd all", "bwd all", "remade", R))
again = 0
for k, l in enumerate(runs["none"][0]["layers"]):
    fn, bn = med("none", lambda o: o["layers"][k]["fwd_ms"]), med("none", lambda o: o["layers"][k]["bwd_ms"])
    fa, ba = med("all", lambda o: o["layers"][k]["fwd_ms"]), med("all", lambda o: o["layers"][k]["bwd_ms"])
    rc = med("all", lambda o: o["layers"][k].get("recompute_ms") or 0)
    again += fn if rc > 0 else 0
    print("%-10s %9.3f %9.3f | %9.3f %9.3f %9.3f" % (l["name"], fn, bn, fa, ba, rc))
sn, sa = med("none", lambda o: o["step_ms"]), med("all", lambda o: o["step_ms"])
print("step: none %.2f ms, all %.2f ms: %+.1f%% measured; the remade layers' forward (none) %.2f ms: %+.1f%%" %
      (sn, sa, 100 * (sa - sn) / sn, again, 100 * again / sn))
print("rounds: none " + " ".join("%.1f" % o["step_ms"] for o in runs["none"]) + "; all " +
      " ".join("%.1f" % o["step_ms"] for o in runs["all"]))
plan = {r: [json.load(open("%s/plan-%s-%d.json" % (d, r, i)))["counts"][0]["plans"][0]["step_ms"] for i in range(1, R + 1)]
        for r in ("none", "all")}
pn, pa = statistics.median(plan["none"]), statistics.median(plan["all"])
print("planned: none %.2f ms, all %.2f ms: %+.1f%% predicted against %+.1f%% measured (rounds: none %s; all %s)" %
      (pn, pa, 100 * (pa - pn) / pn, 100 * (sa - sn) / sn, " ".join("%.1f" % x for x in plan["none"]),
       " ".join("%.1f" % x for x in plan["all"])))
PY
