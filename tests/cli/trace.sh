#!/usr/bin/env bash
# tests/cli/trace.sh - --trace writes a Chrome trace-event file per rank: valid structure, spans
# nested or disjoint, forward and backward of every layer, optimizer, data, and under mpirun the
# collectives and their waits, recomputed forwards; a bad path fails before training.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
tiny_spec "$TMP/t.yaml"
expect_rc 0 "one rank" "$DTRAIN" run "$TMP/t.yaml" --out "$TMP/one" --max-steps 20 --trace "$TMP/one.json" --quiet
python3 tests/tools/tracesum.py --layers fc1,dropout1,fc2 "$TMP/one.json" > "$TMP/sum" 2>&1 && pass "one rank: $(tail -1 "$TMP/sum")" || fail "$(cat "$TMP/sum")"
timeout -k 5 120 $MPIRUN -np 2 "$DTRAIN" run "$TMP/t.yaml" --out "$TMP/two" --threads 1 --max-steps 20 --trace "$TMP/tr.json" --quiet \
  > "$TMP/mpi.log" 2>&1 || fail "mpirun: $(tail -3 "$TMP/mpi.log")"
[ -s "$TMP/tr.rank0.json" ] && [ -s "$TMP/tr.rank1.json" ] || fail "one file per rank: $(ls "$TMP")"
python3 tests/tools/tracesum.py --layers fc1,fc2 --expect-comm "$TMP/tr.rank0.json" "$TMP/tr.rank1.json" > "$TMP/sum" 2>&1 \
  && pass "two ranks: $(tail -1 "$TMP/sum")" || fail "$(cat "$TMP/sum")"
cat "$TMP/sum"
grep -q '"name":"gradient allreduce","cat":"wait"' "$TMP/tr.rank1.json" || fail "the gradient allreduce's wait is traced"
# a 2-stage pipeline (zb-h1: backward's input and weight halves): both stages' spans, messages waited on
printf 'partition: {strategy: model, micro_batches: 4, schedule: zb-h1}\n' > "$TMP/pp.yaml"
timeout -k 5 120 $MPIRUN -np 2 "$DTRAIN" run tests/cli/pp-mlp.yaml --cluster "$TMP/pp.yaml" --out "$TMP/pp" --threads 1 --max-steps 10 \
  --trace "$TMP/pp.json" --quiet > "$TMP/pp.log" 2>&1 || fail "pipeline run: $(tail -3 "$TMP/pp.log")"
python3 tests/tools/tracesum.py --expect-comm "$TMP/pp.rank0.json" "$TMP/pp.rank1.json" > "$TMP/sum" 2>&1 \
  && pass "pipeline stages: $(tail -1 "$TMP/sum")" || fail "$(cat "$TMP/sum")"
grep -q '"name":"fc3 (weight)","cat":"backward"' "$TMP/pp.rank1.json" || fail "zb-h1's weight pass of the last stage is traced"
# shard 3: each layer's parameters made ready in a span of their own, nested in the layer's (what
# dtrain plan --validate takes out of the layers' time)
printf 'partition: {data: 2, shard: 3}\n' > "$TMP/s3.yaml"
timeout -k 5 120 $MPIRUN -np 2 "$DTRAIN" run "$TMP/t.yaml" --cluster "$TMP/s3.yaml" --out "$TMP/s3" --threads 1 --max-steps 10 \
  --trace "$TMP/s3.json" --quiet > "$TMP/s3.log" 2>&1 || fail "shard 3 run: $(tail -3 "$TMP/s3.log")"
python3 tests/tools/tracesum.py --layers fc1,fc2 "$TMP/s3.rank0.json" "$TMP/s3.rank1.json" > "$TMP/sum" 2>&1 \
  && pass "shard 3: $(tail -1 "$TMP/sum")" || fail "$(cat "$TMP/sum")"
python3 - "$TMP/s3.rank0.json" <<'PY' && pass "shard 3's readying is traced inside the layers' spans" || fail "no shard span inside a layer's"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
lay = [e for e in ev if e["cat"] in ("forward", "backward")]
sh = [e for e in ev if e["cat"] == "shard" and e["name"] == "parameters made ready (shard 3)"]
inside = [s for s in sh if any(l["ts"] <= s["ts"] and s["ts"] + s["dur"] <= l["ts"] + l["dur"] for l in lay)]
sys.exit(not (sh and len(inside) == len(sh)))
PY
# recompute all: each recomputed layer's forward again in a span of its own, a valid trace that
# counts it as compute (dtrain plan --validate counts it with the layers' time)
printf 'partition: {recompute: all}\n' > "$TMP/rc.yaml"
expect_rc 0 "recompute all" "$DTRAIN" run "$TMP/t.yaml" --cluster "$TMP/rc.yaml" --out "$TMP/rc" --max-steps 10 \
  --trace "$TMP/rc.json" --quiet
python3 tests/tools/tracesum.py --layers fc1,fc2 "$TMP/rc.json" > "$TMP/sum" 2>&1 && pass "recompute: $(tail -1 "$TMP/sum")" \
  || fail "$(cat "$TMP/sum")"
grep -q '"name":"fc1","cat":"recompute"' "$TMP/rc.json" && pass "a recomputed layer's forward is traced" \
  || fail "no recompute span: $(grep -o '"cat":"[a-z]*"' "$TMP/rc.json" | sort | uniq -c)"
# the validator can fail: a span that overlaps its neighbour without nesting
sed 's/"ph":"X","ts":\([0-9.]*\),"dur":\([0-9.]*\)/"ph":"X","ts":\1,"dur":9\2/' "$TMP/one.json" > "$TMP/bad.json"
python3 tests/tools/tracesum.py "$TMP/bad.json" > "$TMP/sum" 2>&1 && fail "a malformed trace passes" || pass "a malformed trace is caught"
expect_rc 3 "a trace path that cannot be written" "$DTRAIN" run "$TMP/t.yaml" --out "$TMP/bad" --trace /nonexistent/dir/t.json --quiet
[ -e "$TMP/bad/metrics.jsonl" ] && [ "$(wc -l < "$TMP/bad/metrics.jsonl")" != 0 ] && fail "the run trained despite the bad trace path"
finish
