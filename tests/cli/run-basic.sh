#!/usr/bin/env bash
# tests/cli/run-basic.sh - the commands as a user runs them: help, version, usage errors, a
# tiny training run and its output files, numerical abort, signal stop, BLAS core choice.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

expect_rc 0 "--version" "$DTRAIN" --version
grep -q '^dtrain [0-9]' "$TMP/out" || fail "--version output"
expect_rc 0 "--help" "$DTRAIN" --help
expect_rc 0 "run --help" "$DTRAIN" run --help
expect_rc 2 "no command" "$DTRAIN"
expect_rc 2 "unknown command" "$DTRAIN" frobnicate
expect_rc 2 "run without model" "$DTRAIN" run
expect_rc 2 "unknown flag" "$DTRAIN" run models/mlp.yaml --epoks 3
expect_rc 2 "bad number" "$DTRAIN" run models/mlp.yaml --batch -4
expect_rc 2 "missing spec file" "$DTRAIN" check no/such.yaml

tiny_spec "$TMP/tiny.yaml"
expect_rc 0 "check tiny" "$DTRAIN" check "$TMP/tiny.yaml"
grep -q 'fc1' "$TMP/out" && grep -q 'FLOPs' "$TMP/out" || fail "check prints the layer table"
expect_rc 1 "--device cuda without a CUDA backend" "$DTRAIN" run "$TMP/tiny.yaml" --device cuda --out "$TMP/cuda"
grep -qi 'cuda' "$TMP/err" || fail "--device cuda message"

expect_rc 0 "run tiny" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/run"
for f in metrics.jsonl model.safetensors checkpoints/latest; do
  [ -s "$TMP/run/$f" ] || fail "output file $f missing"
done
[ -d "$TMP/run/checkpoints/$(cat "$TMP/run/checkpoints/latest")" ] || fail "latest names a checkpoint directory"
[ "$(ls -d "$TMP/run/checkpoints"/step-* | wc -l)" = 1 ] || fail "older checkpoints are removed"
[ "$(grep -c '"split":"train"' "$TMP/run/metrics.jsonl")" = 3 ] || fail "one train line per epoch"
[ "$(grep -c '"split":"test"' "$TMP/run/metrics.jsonl")" = 3 ] || fail "one test line per epoch"
for k in epoch step split loss accuracy samples_per_sec time; do
  grep -q "\"$k\":" "$TMP/run/metrics.jsonl" || fail "metrics key $k"
done
acc=$(grep '"split":"test"' "$TMP/run/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' && pass "tiny reaches $acc >= 0.9" || fail "tiny test accuracy $acc < 0.9"
grep -q 'samples/s' "$TMP/out" || fail "per-epoch console line"

# the same run again with --resume=auto finds the finished run and changes nothing
cp "$TMP/run/model.safetensors" "$TMP/model.before"
expect_rc 0 "resume=auto on a finished run" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/run" --resume=auto
cmp -s "$TMP/model.before" "$TMP/run/model.safetensors" || fail "a finished run resumed changes the weights"

# non-finite values stop the run with exit 5, naming the step and tensor
sed 's/classes: 4/classes: 4\n  scale: 1.0e300/' "$TMP/tiny.yaml" > "$TMP/nan.yaml"
expect_rc 5 "non-finite loss" "$DTRAIN" run "$TMP/nan.yaml" --out "$TMP/nan" --quiet
grep -q 'non-finite .* at step 1' "$TMP/err" || { fail "exit 5 message names the step"; cat "$TMP/err"; }

# SIGTERM: a checkpoint is written, exit 75, and the run continues from it. DTRAIN_FAULT raises it
# at the start of step 20, so the test does not depend on when an outside kill lands
TINY_EPOCHS=2000 tiny_spec "$TMP/long.yaml"
expect_rc 75 "SIGTERM exits 75" env DTRAIN_FAULT=signal@step=20,sig=TERM "$DTRAIN" run "$TMP/long.yaml" --out "$TMP/sig" --quiet
[ "$(cat "$TMP/sig/checkpoints/latest" 2>/dev/null)" = step-00000020 ] || fail "checkpoint of step 20 written on SIGTERM"
grep -q 'stopped by SIGTERM after step 20; checkpoint committed' "$TMP/err" || fail "the stop is reported: $(cat "$TMP/err")"
expect_rc 0 "resume after SIGTERM" "$DTRAIN" run "$TMP/long.yaml" --out "$TMP/sig" --resume --max-steps 99999999 --epochs 1 --quiet

# OpenBLAS: on an AVX-512 CPU the fast kernels are used, and the result matches the slow ones
if grep -q avx512bw /proc/cpuinfo && grep -q avx512vl /proc/cpuinfo && grep -q avx512dq /proc/cpuinfo; then
  expect_rc 0 "check reports the BLAS core" env -u OPENBLAS_CORETYPE "$DTRAIN" check "$TMP/tiny.yaml"
  grep -Eq 'core (SkylakeX|Cooperlake|SapphireRapids)' "$TMP/out" || fail "BLAS core is not an AVX-512 one: $(grep BLAS "$TMP/out")"
fi
OPENBLAS_CORETYPE=Prescott "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/presc" --quiet || fail "Prescott run"
l1=$(grep '"split":"test"' "$TMP/run/metrics.jsonl" | head -3 | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
l2=$(grep '"split":"test"' "$TMP/presc/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3 * (a > 0 ? a : -a) + 1e-6) }' \
  && pass "same loss with either BLAS core ($l1 vs $l2)" || fail "BLAS cores disagree: $l1 vs $l2"
finish
