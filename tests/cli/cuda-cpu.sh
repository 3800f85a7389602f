#!/usr/bin/env bash
# tests/cli/cuda-cpu.sh - device selection on a machine without a usable GPU (or a build without
# CUDA): --device cuda (flag or spec) exits 1 with ONE line naming the cause, --device auto runs
# on the cpu with a one-line note, and the 'deterministic' key parses; the transformer layers pass
# the check for cuda (blocked attention refused). On a machine where a GPU answers, the cuda run
# cases are skipped (tests/gpu/ covers them).
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

tiny_spec "$TMP/tiny.yaml"
export TINY_EPOCHS=1
tiny_spec "$TMP/tiny1.yaml"

if [ -z "${DTRAIN_HAVE_GPU:-}" ]; then
  expect_rc 1 "--device cuda without a GPU" "$DTRAIN" run "$TMP/tiny.yaml" --device cuda --out "$TMP/cuda"
  [ "$(wc -l <"$TMP/err")" = 1 ] || { fail "--device cuda: one line on stderr, got:"; sed 's/^/  | /' "$TMP/err"; }
  grep -Eq '^dtrain: error: .*(CUDA|cuda)' "$TMP/err" || fail "--device cuda names CUDA: $(cat "$TMP/err")"
  grep -q 'device cpu' "$TMP/err" || fail "--device cuda suggests --device cpu"
  [ -s "$TMP/out" ] && fail "--device cuda printed to stdout: $(head -3 "$TMP/out")"
  [ -e "$TMP/cuda/metrics.jsonl" ] && fail "--device cuda wrote output"

  # the spec's device: cuda behaves the same
  sed 's/^loss:/device: cuda\nloss:/' "$TMP/tiny.yaml" >"$TMP/tiny-cuda.yaml"
  expect_rc 1 "device: cuda in the spec without a GPU" "$DTRAIN" run "$TMP/tiny-cuda.yaml" --out "$TMP/cuda2"
  [ "$(wc -l <"$TMP/err")" = 1 ] || fail "spec device cuda: one line on stderr"
  grep -q 'tiny-cuda.yaml' "$TMP/err" || fail "spec device cuda names the spec: $(cat "$TMP/err")"

  # auto falls back to the cpu with a note
  expect_rc 0 "--device auto without a GPU" "$DTRAIN" run "$TMP/tiny1.yaml" --device auto --out "$TMP/auto"
  grep -q 'cpu backend' "$TMP/out" || fail "--device auto runs the cpu backend"
  grep -q 'note: device auto' "$TMP/err" || fail "--device auto says why: $(cat "$TMP/err")"
  [ "$(grep -c . "$TMP/err")" = 1 ] || fail "--device auto: one note line"
else
  echo "note: DTRAIN_HAVE_GPU set; the no-GPU cases are skipped"
fi

# --device cpu is the cpu, quietly
expect_rc 0 "--device cpu" "$DTRAIN" run "$TMP/tiny1.yaml" --device cpu --out "$TMP/cpu" --quiet
[ -s "$TMP/err" ] && fail "--device cpu --quiet printed: $(cat "$TMP/err")"

# deterministic: a top-level bool
sed 's/^loss:/deterministic: true\nloss:/' "$TMP/tiny1.yaml" >"$TMP/det.yaml"
expect_rc 0 "deterministic: true" "$DTRAIN" check "$TMP/det.yaml"
sed 's/^loss:/deterministic: maybe\nloss:/' "$TMP/tiny1.yaml" >"$TMP/det-bad.yaml"
expect_rc 2 "deterministic: maybe" "$DTRAIN" check "$TMP/det-bad.yaml"
grep -q 'deterministic' "$TMP/err" || fail "deterministic error names the key: $(cat "$TMP/err")"

# the transformer's layers are the cuda backend's too (check weighs the layers against its caps
# without a device): char-gpt is valid there; attention's blocked kernel is the cpu's, refused at it
expect_rc 0 "char-gpt on cuda" "$DTRAIN" check models/char-gpt.yaml --device cuda
sed 's/h0_attn, heads: 4, causal: true}/h0_attn, heads: 4, causal: true, kernel: blocked}/' models/char-gpt.yaml \
  >"$TMP/gpt-blocked.yaml"
expect_rc 2 "attention kernel: blocked on cuda" "$DTRAIN" check "$TMP/gpt-blocked.yaml" --device cuda
grep -q "gpt-blocked.yaml:[0-9]*:5: error: layer 'h0_attn' (attention): kernel: blocked runs on the cpu backend only" \
  "$TMP/err" || fail "kernel: blocked on cuda: $(cat "$TMP/err")"
[ "$(grep -c error: "$TMP/err")" = 1 ] || fail "kernel: blocked on cuda: one error: $(cat "$TMP/err")"

finish
