#!/usr/bin/env bash
# tests/cli/restart-record.sh - the restart line of metrics.jsonl (train/restart.h): a run resumed
# with an elastic launcher's DTRAIN_RESTART* variables writes, after its first step, which ranks
# and nodes were lost, the step it continued from, the steps redone and the seconds from the
# failure; without them no such line; a value that does not parse exits 2 naming the variable.
. "$(dirname "$0")/lib.sh"
tiny_spec "$TMP/tiny.yaml"
cat >>"$TMP/tiny.yaml" <<YAML
  log_every: 4
  checkpoint_every: 20
  keep_checkpoints: 5
YAML
expect_rc 0 "a run to 48 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 48 --quiet
# the failed launch had logged step 48, its last committed checkpoint was step 40
echo step-00000040 >"$TMP/a/checkpoints/latest"
rm -rf "$TMP/a/checkpoints/step-00000048" "$TMP/a/model.safetensors"
cp -r "$TMP/a" "$TMP/b"
failed=$(( $(date +%s) - 3 ))
expect_rc 0 "relaunch: resume from step 40" env DTRAIN_RESTART=1 DTRAIN_RESTART_FAILED_AT=$failed.25 \
  DTRAIN_RESTART_LOST_RANKS=2,3 DTRAIN_RESTART_LOST_NODES=n1 DTRAIN_RESTART_LOGGED_STEP=48 \
  "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 64 --resume --quiet
grep -E '^\{"restart":1,"failed_at":[0-9]+\.250,"lost_ranks":\[2,3\],"lost_nodes":"n1","from_step":40,"first_step":41,"steps_redone":8,"recovery_s":[0-9.]+\}$' \
  "$TMP/a/metrics.jsonl" >"$TMP/line" && pass "the restart line: $(cat "$TMP/line")" \
  || { fail "no restart line"; tail -n 8 "$TMP/a/metrics.jsonl"; }
python3 - "$TMP/a/metrics.jsonl" <<'PY' && pass "recovery_s counts from the failure (3 s ago) to the first step" || fail "recovery_s"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
i = next(k for k, o in enumerate(lines) if "restart" in o)
assert 2.5 < lines[i]["recovery_s"] < 60, lines[i]
assert "resumed_from" in lines[i - 1], lines[i - 1]         # right after the resume marker
assert all(o.get("step", 41) > 40 for o in lines[i + 1:]), "a step line before it"
PY
expect_rc 0 "a plain resume" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 64 --resume --quiet
grep -q '"restart"' "$TMP/b/metrics.jsonl" && fail "a restart line without DTRAIN_RESTART" || pass "no restart line without it"
expect_rc 2 "a bad DTRAIN_RESTART_LOST_RANKS exits 2" env DTRAIN_RESTART=1 DTRAIN_RESTART_LOST_RANKS='1,,x' \
  "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 80 --resume --quiet
grep -q "DTRAIN_RESTART_LOST_RANKS=1,,x: expected rank numbers" "$TMP/err" && pass "the variable named" || fail "message: $(cat "$TMP/err")"
expect_rc 2 "a bad DTRAIN_RESTART exits 2" env DTRAIN_RESTART=one "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 80 --resume --quiet
finish
