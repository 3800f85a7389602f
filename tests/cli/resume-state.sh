#!/usr/bin/env bash
# tests/cli/resume-state.sh - a checkpoint's position is trusted only when it adds up: resuming with
# another batch continues the epoch instead of looping, an edited state.json is refused (exit 4),
# and two runs into one directory cannot both write it (exit 2).
. "$(dirname "$0")/lib.sh"
tiny_spec "$TMP/tiny.yaml"

# 1024 samples, batch 32: 20 steps = 640 samples; then batch 64: 6 steps end epoch 1, 16 per epoch after
expect_rc 0 "20 steps of 32" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/r" --max-steps 20 --quiet
expect_rc 0 "resume with batch 64 ends (within 60 s)" timeout 60 "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/r" \
  --resume --batch 64
grep -q 'sample 640 of the epoch' "$TMP/out" || fail "resume names the data cursor: $(head -3 "$TMP/out")"
grep -q 'checkpoint step 58$' "$TMP/out" && pass "20 + 6 + 16 + 16 steps" || fail "final step: $(tail -2 "$TMP/out")"
lines=$(grep -c '"split":"\(train\|test\)"' "$TMP/r/metrics.jsonl")   # the epoch lines
[ "$lines" -le 8 ] && pass "metrics: $lines lines" || fail "metrics grew to $lines lines"
grep -q '"batch_since"' "$TMP/r/checkpoints/step-00000058/state.json" || fail "state.json records batch_since"
# resumed again (complete) with the original batch: position still adds up
expect_rc 0 "resume a complete run" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/r" --resume --quiet

# an edited state.json: each field alone, still valid JSON, is refused and the weights stay
expect_rc 0 "45 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/e" --max-steps 45 --quiet
st="$TMP/e/checkpoints/step-00000045/state.json"
cp "$st" "$TMP/state.good"
cp "$TMP/e/model.safetensors" "$TMP/model.good"
for edit in 's/"step": 45/"step": 44/' 's/"epoch": 1/"epoch": 1000/' 's/"step_in_epoch": 13/"step_in_epoch": 33/' \
            's/"samples_in_epoch": 416/"samples_in_epoch": 0/'; do
  sed "$edit" "$TMP/state.good" >"$st"
  cmp -s "$st" "$TMP/state.good" && { fail "edit '$edit' changed nothing"; continue; }
  expect_rc 4 "edited state.json ($edit)" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/e" --resume --quiet
  grep -q 'state.json: crc32' "$TMP/err" || fail "message: $(cat "$TMP/err")"
done
cmp -s "$TMP/e/model.safetensors" "$TMP/model.good" && pass "model.safetensors untouched" || fail "model rewritten"
cp "$TMP/state.good" "$st"
expect_rc 0 "the intact checkpoint resumes" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/e" --resume --quiet

# the data it was trained on: another training set size is refused
sed 's/n: 1024/n: 1000/' "$TMP/tiny.yaml" >"$TMP/other-n.yaml"
expect_rc 0 "45 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/n" --max-steps 45 --quiet
expect_rc 4 "resume over another data set" "$DTRAIN" run "$TMP/other-n.yaml" --out "$TMP/n" --resume --quiet
grep -q '1024 samples but the data has 1000' "$TMP/err" || fail "message: $(cat "$TMP/err")"

# two runs into one directory: the second is refused while the first holds the lock
TINY_EPOCHS=400 tiny_spec "$TMP/long.yaml"
"$DTRAIN" run "$TMP/long.yaml" --out "$TMP/two" --quiet >/dev/null 2>&1 &
first=$!
for _ in $(seq 100); do [ -s "$TMP/two/.lock" ] && break; sleep 0.1; done
expect_rc 2 "a second run into the same --out" "$DTRAIN" run "$TMP/long.yaml" --out "$TMP/two" --quiet
grep -q "in use by another dtrain run, pid $first" "$TMP/err" || fail "message: $(cat "$TMP/err")"
kill -TERM "$first"; wait "$first"; rc=$?
[ "$rc" = 75 ] && pass "the first run stopped cleanly (75)" || fail "first run exit $rc"
expect_rc 0 "the directory is free again" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/two" --max-steps 2 --quiet --force
finish
