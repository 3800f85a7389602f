#!/usr/bin/env bash
# tests/cli/resume-bitwise.sh - K steps, stop, resume to 2K gives weights bitwise identical to an
# uninterrupted 2K-step run (dropout, Adam moments, cosine schedule, mid-epoch data cursor).
. "$(dirname "$0")/lib.sh"
tiny_spec "$TMP/tiny.yaml"
# 32 samples per step, 1024 samples: 32 steps per epoch; 45 stops mid-epoch 2
expect_rc 0 "uninterrupted 90 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 90 --quiet
expect_rc 0 "first 45 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 45 --quiet
grep -q '^step-00000045$' "$TMP/b/checkpoints/latest" || fail "latest is step 45: $(cat "$TMP/b/checkpoints/latest")"
expect_rc 0 "resume to 90 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 90 --resume=auto --quiet
cmp "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" && pass "bitwise identical weights" || fail "weights differ after resume"
cmp "$TMP/a/checkpoints/step-00000090/optim.safetensors" "$TMP/b/checkpoints/step-00000090/optim.safetensors" \
  && pass "bitwise identical optimizer moments" || fail "optimizer moments differ after resume"
# resuming from an explicit directory works the same
expect_rc 0 "resume from a directory" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/c" --max-steps 90 \
  --resume="$TMP/b/checkpoints/step-00000090" --quiet
# a different architecture refuses the checkpoint with exit 4
sed 's/units: 32/units: 33/' "$TMP/tiny.yaml" > "$TMP/other.yaml"
expect_rc 4 "incompatible checkpoint" "$DTRAIN" run "$TMP/other.yaml" --out "$TMP/b" --resume=auto --quiet
grep -q 'config hash' "$TMP/err" || fail "message names the config hash check"
finish
