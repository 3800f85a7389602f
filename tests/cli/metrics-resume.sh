#!/usr/bin/env bash
# tests/cli/metrics-resume.sh - metrics.jsonl after a kill and a resume (issue 25 item 4): the
# resumed run writes {"resumed_from": STEP, ...} first; the dead run's lines past STEP are
# dropped by dtrain plot (and by any reader following the rule, as TensorBoard purges orphaned
# steps), leaving each step once, with the values of an uninterrupted run.
. "$(dirname "$0")/lib.sh"
tiny_spec "$TMP/tiny.yaml"
cat >>"$TMP/tiny.yaml" <<YAML
  log_every: 4
  checkpoint_every: 20
  keep_checkpoints: 5
YAML
expect_rc 0 "uninterrupted 64 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/ref" --max-steps 64 --quiet
# the dead run: everything up to step 64 written, but the last checkpoint it committed was step 40
expect_rc 0 "a run to 64 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 64 --quiet
echo step-00000040 >"$TMP/a/checkpoints/latest"
rm -rf "$TMP/a/checkpoints/step-00000060" "$TMP/a/checkpoints/step-00000064" "$TMP/a/model.safetensors"
printf '{"epoch":2,"step":6' >>"$TMP/a/metrics.jsonl"       # and a line cut by the kill
expect_rc 0 "resume from step 40" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 64 --resume --quiet
grep -q '^{"resumed_from":40,"epoch":1,.*"checkpoint":".*step-00000040"}$' "$TMP/a/metrics.jsonl" \
  && pass "the marker line" || { fail "no marker line"; grep resumed "$TMP/a/metrics.jsonl"; }
python3 - "$TMP/a/metrics.jsonl" "$TMP/ref/metrics.jsonl" <<'PY' && pass "each step once, the uninterrupted run's values" || fail "metrics after the resume"
import json, sys
def read(path):
    keep = []
    for line in open(path):
        try: o = json.loads(line)
        except ValueError: continue        # the line the kill cut
        if "resumed_from" in o:
            keep = [k for k in keep if k["step"] <= o["resumed_from"]]
            continue
        keep.append(o)
    # an epoch's train line after a resume averages the steps since the resume only
    return [(o["step"], o["split"], o.get("loss") if o["split"] != "train" else None) for o in keep]
a, ref = read(sys.argv[1]), read(sys.argv[2])
assert a == ref, "\n".join(map(str, [x for x in a if x not in ref] + ["--"] + [x for x in ref if x not in a]))
steps = [(s, sp) for s, sp, _ in a]
assert len(steps) == len(set(steps)), "a step twice"
PY
expect_rc 0 "dtrain plot" "$DTRAIN" plot "$TMP/a" -o "$TMP/a.svg"
grep -q 'lines of a killed run past the checkpoint it was resumed from left out' "$TMP/out" \
  && pass "plot drops the orphaned lines and says so" || { fail "plot"; cat "$TMP/out"; }
n_a=$(sed -n 's/.*(\([0-9]*\) metrics lines.*/\1/p' "$TMP/out")
expect_rc 0 "dtrain plot of the reference" "$DTRAIN" plot "$TMP/ref" -o "$TMP/ref.svg"
n_ref=$(sed -n 's/.*(\([0-9]*\) metrics lines.*/\1/p' "$TMP/out")
[ -n "$n_a" ] && [ "$n_a" = "$n_ref" ] && pass "plot draws as many points as for the uninterrupted run ($n_a)" \
  || fail "plot: $n_a lines against the uninterrupted run's $n_ref"
# a resume with nothing left writes nothing, not even the marker
cp "$TMP/a/metrics.jsonl" "$TMP/m.before"
expect_rc 0 "resume at the limit" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 64 --resume
grep -q 'nothing to do' "$TMP/out" && pass "says there is nothing to do" || fail "no 'nothing to do'"
cmp -s "$TMP/m.before" "$TMP/a/metrics.jsonl" && pass "metrics.jsonl untouched" || fail "metrics.jsonl changed"
finish
