#!/usr/bin/env bash
# tests/cli/conv-paths.sh - choosing the cpu backend's convolutions (--conv, the cluster spec's
# conv): bad values are usage errors (the key's at file:line:col); with oneDNN built in, both paths
# train a CNN to the same weights up to rounding, `bench` names the path per layer, oneDNN's runs
# are bitwise repeatable and resume bitwise, libdnnl is loaded only by runs with convolutions, and
# oneDNN adds no thread to the process (no OpenMP team: it runs on dtrain's own threads); without
# oneDNN, asking for it is an error at the flag and at the key (run, check, bench), and auto runs
# im2col.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
CNN=tests/cli/dp-cnn.yaml
CFG=${top_builddir:-$top_srcdir}/config.h

expect_rc 2 "--conv with a bad value" "$DTRAIN" run "$CNN" --conv fast --out "$TMP/bad"
grep -q "conv must be auto, im2col or onednn, got 'fast'" "$TMP/err" || fail "the --conv message: $(cat "$TMP/err")"
expect_rc 2 "bench --conv with a bad value" "$DTRAIN" bench "$CNN" --conv gemm
printf 'conv: fast\n' >"$TMP/c-bad.yaml"
expect_rc 2 "cluster conv: fast" "$DTRAIN" run "$CNN" --cluster "$TMP/c-bad.yaml" --out "$TMP/bad2"
grep -q "c-bad.yaml:1:7: error: .*conv" "$TMP/err" || fail "the key's error at file:line:col: $(cat "$TMP/err")"
printf 'conv: onednn\n' >"$TMP/c-dnn.yaml"
printf 'conv: im2col\n' >"$TMP/c-i2c.yaml"

if ! grep -q 'define DT_HAVE_ONEDNN 1' "$CFG"; then
  echo "note: this dtrain is built without oneDNN: the oneDNN runs are skipped"
  expect_rc 2 "--conv onednn without oneDNN" "$DTRAIN" run "$CNN" --conv onednn --out "$TMP/no" --max-steps 2
  grep -q "built without oneDNN" "$TMP/err" || fail "says why: $(cat "$TMP/err")"
  expect_rc 2 "conv: onednn without oneDNN" "$DTRAIN" run "$CNN" --cluster "$TMP/c-dnn.yaml" --out "$TMP/no2" --max-steps 2
  grep -q "c-dnn.yaml:1:1: error: conv: onednn cannot run here" "$TMP/err" || fail "error at the key: $(cat "$TMP/err")"
  expect_rc 2 "check: conv: onednn without oneDNN" "$DTRAIN" check "$CNN" --cluster "$TMP/c-dnn.yaml"
  expect_rc 2 "bench: conv: onednn without oneDNN" "$DTRAIN" bench "$CNN" --cluster "$TMP/c-dnn.yaml" --iters 1
  expect_rc 0 "auto runs im2col" "$DTRAIN" bench "$CNN" --iters 1 --warmup 0 --threads 1
  grep -q "conv/im2col" "$TMP/out" || fail "bench names im2col"
  finish
fi

expect_rc 0 "check with conv: onednn" "$DTRAIN" check "$CNN" --cluster "$TMP/c-dnn.yaml"

# both paths, the flag and the key; 2 threads each
run() { expect_rc 0 "$1" "$DTRAIN" run "$CNN" --out "$TMP/$1" --max-steps 60 --threads 2 --quiet "${@:2}"; }
run i2c --conv im2col
run dnn --conv onednn
run dnn-again --cluster "$TMP/c-dnn.yaml"
run i2c-key --cluster "$TMP/c-i2c.yaml"
run dnn-over --cluster "$TMP/c-i2c.yaml" --conv onednn      # the flag wins over the key
$CMP "$TMP/i2c/model.safetensors" "$TMP/dnn/model.safetensors" --tol 1e-5 >"$TMP/cmp" \
  && pass "im2col and oneDNN train to the same weights ($(cat "$TMP/cmp"))" || fail "paths differ: $(cat "$TMP/cmp")"
cmp -s "$TMP/dnn/model.safetensors" "$TMP/dnn-again/model.safetensors" \
  && pass "oneDNN runs are bitwise repeatable (flag and key)" || fail "two oneDNN runs differ"
cmp -s "$TMP/dnn/model.safetensors" "$TMP/dnn-over/model.safetensors" \
  && pass "--conv overrides the cluster spec's conv" || fail "--conv onednn over conv: im2col is not oneDNN's result"
cmp -s "$TMP/i2c/model.safetensors" "$TMP/i2c-key/model.safetensors" \
  && pass "conv: im2col is im2col" || fail "conv: im2col differs from --conv im2col"
cmp -s "$TMP/i2c/model.safetensors" "$TMP/dnn/model.safetensors" \
  && fail "im2col and oneDNN gave the same bits: was oneDNN used at all?" || pass "the paths are different code"

# resume: 30 steps, stop, resume to 60 = the uninterrupted 60 (oneDNN)
expect_rc 0 "oneDNN: first 30 steps" "$DTRAIN" run "$CNN" --out "$TMP/half" --max-steps 30 --threads 2 --quiet --conv onednn
expect_rc 0 "oneDNN: resume to 60" "$DTRAIN" run "$CNN" --out "$TMP/half" --max-steps 60 --threads 2 --quiet \
  --conv onednn --resume=auto
cmp -s "$TMP/dnn/model.safetensors" "$TMP/half/model.safetensors" \
  && pass "oneDNN: resumed weights bitwise equal" || fail "oneDNN: weights differ after resume"

# bench names each convolution's path
for p in im2col onednn; do
  expect_rc 0 "bench --conv $p" "$DTRAIN" bench "$CNN" --iters 2 --warmup 1 --threads 2 --conv $p
  [ "$(grep -c "conv/$p" "$TMP/out")" = 2 ] || fail "bench shows conv/$p for both layers: $(grep conv "$TMP/out")"
done
expect_rc 0 "bench --json, oneDNN" "$DTRAIN" bench "$CNN" --iters 2 --warmup 1 --threads 1 --conv onednn --json
python3 - "$TMP/out" <<'PY' && pass "JSON impl and impl_detail" || fail "JSON impl fields"
import json, sys
convs = [l for l in json.load(open(sys.argv[1]))[0]["layers"] if l["type"] == "conv"]
assert len(convs) == 2 and all(l["impl"] == "onednn" and l["impl_detail"] for l in convs), convs
PY

# libdnnl is loaded by a run with convolutions only
tiny_spec "$TMP/mlp.yaml"
LD_DEBUG=files "$DTRAIN" run "$TMP/mlp.yaml" --out "$TMP/mlp" --max-steps 2 --quiet >/dev/null 2>"$TMP/ld"
grep -q 'file=libdnnl' "$TMP/ld" && fail "a run without convolutions loaded libdnnl" || pass "an MLP run maps no libdnnl"
LD_DEBUG=files "$DTRAIN" run "$CNN" --out "$TMP/ld-cnn" --max-steps 2 --quiet >/dev/null 2>"$TMP/ld"
grep -q 'file=libdnnl' "$TMP/ld" && pass "a CNN run loads libdnnl" || fail "a CNN run did not load libdnnl"

# no thread beyond dtrain's own: the most threads the process ever has, sampled while it trains,
# is the same for both paths (an OpenMP team would stay alive, idle, once made)
max_threads() {
  "$DTRAIN" run "$CNN" --out "$TMP/thr-$1" --max-steps 150 --threads 2 --quiet --conv "$1" --force &
  local pid=$! most=0 n
  while kill -0 "$pid" 2>/dev/null; do
    n=$(ls "/proc/$pid/task" 2>/dev/null | wc -l)
    [ "$n" -gt "$most" ] && most=$n
    sleep 0.02
  done
  wait "$pid" || fail "the $1 run for the thread count failed"
  echo "$most"
}
a=$(max_threads im2col)
b=$(max_threads onednn)
[ "$a" -gt 0 ] && [ "$a" = "$b" ] && pass "oneDNN adds no thread ($b threads at most, as im2col)" \
  || fail "threads: im2col $a, oneDNN $b"
finish
