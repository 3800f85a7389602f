#!/usr/bin/env bash
# tests/cli/tensorboard.sh - the TensorBoard event files dtrain writes in C are read by
# TensorBoard's own EventAccumulator with the values of metrics.jsonl, over a resume too (a
# second events file). Skipped (77) when no Python here can import tensorboard.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
PY=$("$top_srcdir/tests/tools/pyenv.sh" "import tensorboard" tensorboard 2>"$TMP/py.err") \
  || { echo "skip: no python with tensorboard: $(cat "$TMP/py.err")"; exit 77; }

sed 's/  clip_norm: 1.0/  clip_norm: 1.0\n  log_every: 10/' <(tiny_spec /dev/stdout) > "$TMP/tb.yaml"
expect_rc 0 "40 steps" "$DTRAIN" run "$TMP/tb.yaml" --out "$TMP/tb" --max-steps 40 --quiet
sleep 1
expect_rc 0 "resume to the end" "$DTRAIN" run "$TMP/tb.yaml" --out "$TMP/tb" --resume --quiet
[ "$(ls "$TMP/tb"/events.out.tfevents.* | wc -l)" = 2 ] || fail "one events file per process"
if "$PY" tests/tools/tbcheck.py "$TMP/tb" > "$TMP/check" 2>&1; then pass "TensorBoard reads the events: $(tail -1 "$TMP/check")"
else fail "tbcheck: $(cat "$TMP/check")"; fi
# the check can fail: a flipped byte in a record is caught
f=$(ls "$TMP/tb"/events.out.tfevents.* | head -1)
printf 'X' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null
"$PY" tests/tools/tbcheck.py "$TMP/tb" > "$TMP/check" 2>&1 && fail "a damaged events file passes" || pass "a damaged record is caught"
finish
