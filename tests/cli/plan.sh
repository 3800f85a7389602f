#!/usr/bin/env bash
# tests/cli/plan.sh - `dtrain plan` and strategy: auto: the report's parts (layouts, per-layer table,
# why, cluster spec, scaling table, SVG, JSON), --validate really runs the layouts, a bad flag is a
# usage error, and a run under strategy: auto writes its plan and trains what 1 rank trains (the
# planner may pick any layout; the model has no batch norm, so every layout must agree to 1e-5).
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
D=$top_srcdir/tests/cli
export XDG_CACHE_HOME=$TMP/cache      # the planner's profile cache stays in the test's scratch

expect_rc 0 "plan for 1, 2 and 4 ranks" "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 1,2,4 --plot "$TMP/scaling.svg"
for want in "^2 ranks (" "  chosen: " "  why: " "^layer .*split" "^partition:" "^scaling to 1024 ranks, a core per rank"; do
  grep -q "$want" "$TMP/out" || fail "plan output lacks '$want'"
done
# the scaling table: a row for 1, 2 and 4 ranks, each with a speedup and what limits it
for n in 1 2 4; do
  grep -qE "^ +$n +[0-9.]+ +[0-9]+ +[0-9.]+x  (compute|tensor collectives|pipeline messages|bubble|gradient all-reduce|update|data and loss) " \
    "$TMP/out" || fail "scaling table lacks the $n-rank row: $(sed -n '/^scaling/,$p' "$TMP/out" | head -5)"
done
grep -q "<svg" "$TMP/scaling.svg" && grep -q "polyline" "$TMP/scaling.svg" && pass "--plot wrote an SVG" || fail "no SVG"
# the tables agree where they overlap: the scaling rows for 1 and 2 ranks (a core per rank, as the
# per-count tables here on 2+ cores) repeat the per-count tables' chosen layouts and steps, marked
# 'measured'; before, the 1-rank step was FLOP-modelled in one and measured in the other
python3 - "$TMP/out" <<'PY' && pass "scaling rows for 1 and 2 ranks repeat the per-count tables" || fail "tables disagree"
import re, sys
t = open(sys.argv[1]).read()
per, cur = {}, None
for line in t.split("\n"):
    m = re.match(r"^(\d+) ranks? \(", line)
    if m: cur = int(m.group(1)); continue
    m = re.match(r"^  1 +([0-9.]+) +\d+ +[0-9.]+x +[0-9.]+  (.*)$", line)
    if m and cur and cur not in per: per[cur] = (float(m.group(1)), m.group(2))
    if line.startswith("scaling"): cur = None
rows = {int(m.group(1)): (float(m.group(2)), m.group(3), m.group(4)) for m in
        re.finditer(r"^ +(\d+) +([0-9.]+) +\d+ +[0-9.]+x  .{22} (\w+) +(.*)$", t, re.M)}
import os
ok = True
for n in (1, 2) if os.cpu_count() >= 2 else (1,):
    step, lay = per[n]
    s, frm, slay = rows[n]
    if abs(s - step) > 0.006 or slay != lay or frm != "measured":
        print(f"{n} ranks: per-count {step} {lay!r}; scaling {s} {frm} {slay!r}"); ok = False
for n, r in rows.items():   # counts no table above planned
    if n > 4 and r[1] != "modelled": print(f"{n}: {r}"); ok = False
sys.exit(0 if ok else 1)
PY
# the plot: log2 on both axes with a tick per power of two, the ideal straight, a legend, and
# the default network marked assumed (before: one y tick, no legend, the ideal bent)
[ "$(grep -c 'class="ytick"' "$TMP/scaling.svg")" -ge 4 ] && grep -q 'class="legend"' "$TMP/scaling.svg" \
  && grep -q '<line class="ideal"' "$TMP/scaling.svg" && grep -q 'assumed' "$TMP/scaling.svg" \
  && grep -q "network 1.0 us (assumed)" "$TMP/out" && pass "SVG: ticks, legend, straight ideal, network assumed" \
  || fail "SVG: $(grep -c ytick "$TMP/scaling.svg") ticks; $(grep -c legend "$TMP/scaling.svg") legend"
# the table goes to 1024 ranks as dtrain(1) says: it gave each rank a node's memory over all N
# ranks, not over the node's, and stopped at the first count where nothing fitted (here 128, an
# embedding of 64 MiB that no layout splits, on a 23 GiB machine; lenet 256, cnn 32); a count
# without a layout is a row that says so
printf '%s\n' "name: vocab" "input: [4]" "layers:" "  - {type: embedding, name: embed, vocab: 131072, dim: 128}" \
  "  - {type: flatten, name: flat}" "  - {type: fc, name: fc, units: 10}" "loss: mse" \
  "data: {train: {format: synthetic, n: 64}}" "train: {batch: 1024}" > "$TMP/vocab.yaml"
expect_rc 0 "plan of a model whose every layout holds 64 MiB of embedding" "$DTRAIN" plan "$TMP/vocab.yaml" --ranks 1 --top 1
grep -qE "^ +1024 +([0-9.]+ |no layout)" "$TMP/out" && pass "the scaling table reaches 1024 ranks" \
  || fail "scaling stops at: $(sed -n '/^scaling/,$p' "$TMP/out" | tail -1)"
printf 'network: {latency_us: 20, bandwidth_gbs: 1}\n' > "$TMP/net.yaml"
expect_rc 0 "plan with the network given" "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 1 --top 1 --cluster "$TMP/net.yaml" \
  --plot "$TMP/net.svg"
! grep -q assumed "$TMP/out" "$TMP/net.svg" && grep -q "20.0 us, 1.00 GB/s" "$TMP/net.svg" \
  && pass "a network the cluster spec gives is not called assumed" || fail "$(grep assumed "$TMP/out" "$TMP/net.svg")"
expect_rc 0 "plan --json" "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 2 --json --no-scaling
python3 - "$TMP/out" <<'PY' && pass "JSON: layouts with step, parts and memory" || fail "JSON: $(head -c 300 "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
p = j["counts"][0]["plans"]
assert j["counts"][0]["ranks"] == 2 and len(p) >= 2 and j["counts"][0]["why"]
for x in p:
    assert x["step_ms"] > 0 and x["memory_mib"] > 0 and len(x["grid"]) == 3 and x["grid"][0] * x["grid"][1] * x["grid"][2] == 2
assert p[0]["step_ms"] <= p[1]["step_ms"] * 1.01    # within 1%: a tie, broken by memory
import os
c = j["counts"][0]      # both ranks on this node: the neighbours' factor their cores were priced with
if len(os.sched_getaffinity(0)) >= 2:
    assert c["busy_cores"] == 2 and c["neighbour_factor"] >= 1.0 and c["neighbour_factor_update"] >= 1.0, c
PY
expect_rc 0 "plan --data all" "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 2,4 --data all --top 5 --json --no-scaling
python3 - "$TMP/out" <<'PY' && pass "--data all: only data-parallel layouts" || fail "--data: $(head -c 300 "$TMP/out")"
import json, sys
c = json.load(open(sys.argv[1]))["counts"]
assert [x["ranks"] for x in c] == [2, 4] and all(x["plans"] for x in c)
assert all(p["grid"] == [x["ranks"], 1, 1] for x in c for p in x["plans"])
PY
expect_rc 2 "a bad --data" "$DTRAIN" plan "$D/tp-mlp.yaml" --data none
grep -q "data wants a data degree" "$TMP/err" || fail "message: $(cat "$TMP/err")"
expect_rc 2 "a bad --ranks" "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 2,x
grep -q "ranks wants rank counts" "$TMP/err" || fail "message: $(cat "$TMP/err")"

if command -v "$MPIRUN" >/dev/null; then
  ( cd "$TMP" && "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 2 --top 2 --validate --steps 10 --repeat 1 --no-scaling ) >"$TMP/val" 2>&1
  [ "$(grep -c '      measured [0-9.]* ms, predicted' "$TMP/val")" = 2 ] && pass "--validate ran both layouts" \
    || fail "validate: $(cat "$TMP/val" | head -20)"
  [ "$(grep -c "took [0-9.]*x \.\. [0-9.]*x their time when planning" "$TMP/val")" = 2 ] \
    && pass "--validate printed the machine's drift over each layout's runs" || fail "no drift line: $(head -20 "$TMP/val")"
  # the layers' time in the runs' traces, for both layouts
  [ "$(grep -c 'its layers computed [0-9.]*[1-9][0-9]* ms a step in the runs against [0-9.]* predicted; at the predicted compute the runs took [0-9.]* ms: error' "$TMP/val")" = 2 ] \
    && pass "--validate printed each layout's compute in its runs" \
    || fail "no compute line: $(grep -E 'measured|computed' "$TMP/val")"
  # the prediction with its compute at the machine's drift around each run
  [ "$(grep -c "with its compute at that drift, run by run, the model predicts [0-9.]* ms: error [-+][0-9.]*%" "$TMP/val")" = 2 ] \
    && pass "--validate printed each layout's prediction at the machine's drift" \
    || fail "no prediction at the drift: $(grep -E 'measured|drift' "$TMP/val")"
  # without --steps a run trains 2 s by the prediction (30 to 2000 steps), and says how many
  ( cd "$TMP" && "$DTRAIN" plan "$D/tp-mlp.yaml" --ranks 1 --top 1 --validate --repeat 1 --no-scaling --json ) >"$TMP/vs" 2>"$TMP/vs.err"
  python3 - "$TMP/vs" <<'PY' && pass "--validate's default steps: 2 s of training by the prediction" || fail "steps: $(head -c 400 "$TMP/vs") $(tail -3 "$TMP/vs.err")"
import json, math, sys
p = json.load(open(sys.argv[1]))["counts"][0]["plans"][0]
want = max(30, min(2000, math.ceil(2000.0 / p["step_ms"] - 1e-9)))
assert p["measured_step_ms"] > 0 and abs(p["validation_steps"] - want) <= 1, (p["validation_steps"], want, p["step_ms"])
PY
  # where a node's ranks outnumber its cores (here by the cluster spec's word) the traced compute is
  # printed, but the rest of the step's error is not made from it: ranks take turns
  printf 'cores_per_node: 1\n' > "$TMP/one-core.yaml"
  ( cd "$TMP" && "$DTRAIN" plan "$D/tp-mlp.yaml" --cluster "$TMP/one-core.yaml" --ranks 2 --data all --top 1 --validate \
      --steps 10 --repeat 1 --no-scaling --json ) >"$TMP/vt" 2>"$TMP/vt.err"
  python3 - "$TMP/vt" <<'PY' && pass "--validate makes no rest-of-step error where ranks outnumber cores" || fail "turns: $(head -c 600 "$TMP/vt") $(tail -3 "$TMP/vt.err")"
import json, sys
p = json.load(open(sys.argv[1]))["counts"][0]["plans"][0]
assert p["measured_step_ms"] > 0 and p["measured_compute_ms"] > 0, p
assert p["measured_at_predicted_compute_ms"] is None, p["measured_at_predicted_compute_ms"]
PY
  printf 'partition: {strategy: auto}\n' > "$TMP/auto.yaml"
  "$DTRAIN" run "$D/tp-mlp.yaml" --out "$TMP/one" --threads 1 --quiet >"$TMP/one.log" 2>&1 || fail "1 rank: $(tail -3 "$TMP/one.log")"
  timeout -k 5 180 "$MPIRUN" -np 2 "$DTRAIN" run "$D/tp-mlp.yaml" --cluster "$TMP/auto.yaml" --out "$TMP/auto" \
    --threads 1 --collective-timeout 30 >"$TMP/auto.log" 2>&1 || fail "auto run: $(tail -5 "$TMP/auto.log")"
  grep -q "^plan: data [0-9]* x pipeline [0-9]* x tensor [0-9]*.*the full plan is in" "$TMP/auto.log" \
    && grep -q "^strategy auto on 2 ranks: " "$TMP/auto/plan.txt" && grep -q "^partition:" "$TMP/auto/plan.txt" \
    && pass "strategy auto: summary and plan.txt" || fail "auto: $(grep plan "$TMP/auto.log")"
  $CMP "$TMP/one/model.safetensors" "$TMP/auto/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
    && pass "strategy auto trains what 1 rank trains ($(cat "$TMP/cmp"))" || fail "auto vs 1 rank: $(cat "$TMP/cmp")"
  # the placement the planner assumes when ranks outnumber cores (parallel/place.c): announced,
  # DTRAIN_BIND=0 turns it off, and it changes no result
  if [ "$(nproc)" -lt 4 ]; then
    printf 'partition: {strategy: data}\n' > "$TMP/dp.yaml"
    for b in 1 0; do
      DTRAIN_BIND=$b timeout -k 5 180 "$MPIRUN" -np 4 "$DTRAIN" run "$D/tp-mlp.yaml" --cluster "$TMP/dp.yaml" --out "$TMP/bind$b" \
        --threads 1 --max-steps 5 --collective-timeout 30 >"$TMP/bind$b.log" 2>&1 || fail "4 ranks, DTRAIN_BIND=$b: $(tail -3 "$TMP/bind$b.log")"
    done
    grep -q "^placement: ranks outnumber the cores; .*rank 0 on cpu [0-9]" "$TMP/bind1.log" && ! grep -q "^placement" "$TMP/bind0.log" \
      && pass "4 ranks on $(nproc) cores are pinned, DTRAIN_BIND=0 leaves them" || fail "placement: $(grep placement "$TMP/bind"*.log)"
    same bind1 bind0 "pinned ranks train what unpinned ones train"
  fi
else
  echo "SKIP: --validate and strategy auto (no mpirun)"
fi
finish
