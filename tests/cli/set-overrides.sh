#!/usr/bin/env bash
# tests/cli/set-overrides.sh - `--set KEY=VALUE` (issue 25 item 10): an override trains exactly as
# the spec file saying the same (bitwise), a layer by name or index, a cluster key under mpirun (into
# the model's parallel: or the --cluster file); mistakes are reported as the spec's are, naming the
# argument; the run records its overrides in OUT/overrides.yaml, which --resume (and the command
# printed after a stop, which has no --set), eval and predict apply again; --force replaces it.
. "$(dirname "$0")/lib.sh"
cd "$TMP" || exit 1
tiny_spec t.yaml
sed 's/lr: 0.01/lr: 0.003/' t.yaml >lr.yaml
sed 's/name: fc1, units: 32/name: fc1, units: 48/' t.yaml >units.yaml
run() { "$DTRAIN" run "$@" --threads 1 --quiet; }
same() { cmp -s "$1/model.safetensors" "$2/model.safetensors"; }

# ---- the override is the spec ----
expect_rc 0 "run lr.yaml" run lr.yaml --out lr-file
expect_rc 0 "run --set train.optimizer.lr=0.003" run t.yaml --set train.optimizer.lr=0.003 --out lr-set
same lr-file lr-set && pass "lr by --set = lr in the file, bitwise" || fail "lr by --set differs from the file's"
expect_rc 0 "run units.yaml" run units.yaml --out u-file
expect_rc 0 "run --set layers.fc1.units=48" run t.yaml --set layers.fc1.units=48 --out u-name
expect_rc 0 "run --set layers.0.units=48" run t.yaml --set layers.0.units=48 --out u-index
same u-file u-name && pass "a layer by name, bitwise" || fail "layers.fc1.units differs from the file's"
same u-file u-index && pass "a layer by index, bitwise" || fail "layers.0.units differs from the file's"
# a later --set of the same key wins; a flow value
expect_rc 0 "later --set wins" run t.yaml --set train.optimizer.lr=0.5 --set 'train.optimizer={type: adam, lr: 0.003}' --out lr-flow
same lr-file lr-flow && pass "a flow mapping as VALUE, the later --set winning" || fail "flow value / order"

# ---- the record ----
if [ -f lr-set/overrides.yaml ] && grep -qx -- '- "train.optimizer.lr=0.003"' lr-set/overrides.yaml; then
  pass "OUT/overrides.yaml records the override"
else
  fail "no overrides.yaml record"; cat lr-set/overrides.yaml 2>&1 | sed 's/^/  | /'
fi
[ ! -e lr-file/overrides.yaml ] && pass "no record without --set" || fail "a run without --set wrote overrides.yaml"

# ---- resume re-applies them: the command printed after a stop has no --set ----
cat >long.yaml <<'YAML'
name: long
input: [16]
layers:
  - {type: fc, name: fc1, units: 256, activation: relu}
  - {type: fc, name: fc2, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 4096, seed: 3, noise: 1.0}
  classes: 4
train:
  epochs: 1000
  batch: 32
  seed: 5
  optimizer: {type: adam, lr: 0.01}
YAML
SETS=(--set train.optimizer.lr=0.002 --set layers.fc1.units=96)
"$DTRAIN" run long.yaml "${SETS[@]}" --out stop --threads 1 --max-steps 3000 --progress-steps 1 >stop.out 2>stop.err &
PID=$!
for ((i = 0; i < 600; i++)); do grep -q '^progress: ' stop.out 2>/dev/null && break; sleep 0.05; done
kill -TERM $PID
wait $PID
rc=$?
CONT=$(grep -A1 'continue with:' stop.err | tail -1 | sed 's/^ *//')
if [ "$rc" = 75 ] && [ -n "$CONT" ]; then
  pass "stopped by SIGTERM (exit 75): $CONT"
  case $CONT in *--set*) fail "the continue command repeats --set" ;; *) pass "the continue command has no --set" ;; esac
  eval "$CONT" >cont.out 2>cont.err; crc=$?
  [ "$crc" = 0 ] && pass "the printed command continues the run" || { fail "continue: exit $crc"; sed 's/^/  | /' cont.err | head; }
  grep -q 'resume: applying the --set overrides recorded in stop/overrides.yaml: train.optimizer.lr=0.002, layers.fc1.units=96' cont.err \
    && pass "resume names the recorded overrides" || { fail "no note naming the recorded overrides"; cat cont.err; }
  expect_rc 0 "uninterrupted with --set" "$DTRAIN" run long.yaml "${SETS[@]}" --out ref --threads 1 --max-steps 3000 --quiet
  same stop ref && pass "stopped + resumed without --set = uninterrupted with --set, bitwise" \
    || fail "the resumed run differs from the uninterrupted one"
else
  fail "the run did not stop on SIGTERM with a continue command (exit $rc)"; sed 's/^/  | /' stop.err | head
fi
# a --set given with --resume wins over the recorded one of the same key and updates the record
expect_rc 0 "resume with a new --set" "$DTRAIN" run long.yaml --out stop --resume --max-steps 3010 --threads 1 --quiet \
  --set train.optimizer.lr=0.001
grep -qx -- '- "train.optimizer.lr=0.001"' stop/overrides.yaml && ! grep -q 'lr=0.002' stop/overrides.yaml \
  && grep -qx -- '- "layers.fc1.units=96"' stop/overrides.yaml \
  && pass "the record updated: the new lr replaces the old, units kept" || { fail "record after resume"; cat stop/overrides.yaml; }

# ---- eval and predict apply the recorded ones (the architecture changed: without them nothing loads) ----
expect_rc 0 "eval --out DIR" "$DTRAIN" eval t.yaml --out u-name
grep -q 'eval: applying the --set overrides recorded in u-name/overrides.yaml: layers.fc1.units=48' "$TMP/err" \
  && pass "eval says it applies the recorded overrides" || fail "eval: no note"
expect_rc 0 "eval --resume DIR/checkpoints/best" "$DTRAIN" eval t.yaml --resume u-name/checkpoints/best
expect_rc 0 "eval --weights DIR/model.safetensors" "$DTRAIN" eval t.yaml --weights u-name/model.safetensors
for i in 1 2 3; do printf '0.5%.0s,' $(seq 15); echo 0.25; done >x.csv
expect_rc 0 "predict --out DIR" "$DTRAIN" predict t.yaml --out u-name --input x.csv
grep -q 'predict: applying the --set overrides recorded in u-name/overrides.yaml' "$TMP/err" \
  && pass "predict applies them" || fail "predict: no note"
expect_rc 4 "eval of the same weights without the record" "$DTRAIN" eval t.yaml --weights u-file/model.safetensors

# ---- --force starts over: the record is replaced ----
expect_rc 0 "--force without --set" run t.yaml --out u-name --force
[ ! -e u-name/overrides.yaml ] && pass "--force without --set removes the record" || fail "stale overrides.yaml after --force"
expect_rc 0 "--force with --set" run t.yaml --out u-name --force --set train.epochs=1
grep -qx -- '- "train.epochs=1"' u-name/overrides.yaml && pass "--force with --set writes the new record" || fail "record after --force"
# a record left by a run that wrote nothing else does not make a fresh run refuse
mkdir -p early && printf -- '- "train.epochs=1"\n' >early/overrides.yaml
expect_rc 0 "fresh run over a lone overrides.yaml" run t.yaml --out early
[ ! -e early/overrides.yaml ] && pass "... and it is replaced" || fail "the lone record stayed"

# ---- mistakes, reported at the argument (exit 2) ----
err() {   # err NAME PATTERN ARGS...: exit 2 and PATTERN on stderr
  local name=$1 pat=$2; shift 2
  expect_rc 2 "$name" "$DTRAIN" check t.yaml "$@"
  grep -qF -- "$pat" "$TMP/err" && pass "$name: message" || { fail "$name: wanted '$pat'"; sed 's/^/  | /' "$TMP/err"; }
}
err "bad value" "--set train.optimizer.lr=abc: error: 'lr' must be a number in (0, 10], got 'abc'" --set train.optimizer.lr=abc
err "unknown key" "--set train.optimizer.lrr=0.1: error: unknown key 'lrr' in 'train.optimizer'; did you mean 'lr'?" \
  --set train.optimizer.lrr=0.1
err "unknown section" "--set trian.epochs=2: error: unknown key 'trian' (neither the model spec's nor the cluster spec's); did you mean 'train'?" \
  --set trian.epochs=2
err "missing =" "--set train.epochs: error: expected KEY=VALUE (e.g. --set train.optimizer.lr=0.01), got no '='" --set train.epochs
err "into a scalar" "--set train.epochs.x=1: error: 'train.epochs' is a value ('3'), not a mapping: it has no key 'x'" \
  --set train.epochs.x=1
err "no such layer" "--set layers.fc3.units=8: error: no layer named 'fc3' in 'layers'; did you mean 'fc1'?" --set layers.fc3.units=8
err "index out of range" "--set layers.3.units=8: error: 'layers' has 3 items; index 3 is out of range (0 to 2)" --set layers.3.units=8
err "both specs' key" "--set device=cpu: error: 'device' is a key of both the model spec and the cluster spec: write model.device or cluster.device" \
  --set device=cpu
err "YAML syntax in VALUE" "--set data.mean=[0.5,: error: VALUE: YAML syntax" --set 'data.mean=[0.5,'
err "bad layer value" "--set layers.fc1.units=0: error: 'units' must be an integer in [1, 16777216], got '0'" --set layers.fc1.units=0
err "cluster key" "--set partition.sync=bogus: error: 'sync' must be one of allreduce, average, ssp; got 'bogus'" --set partition.sync=bogus
err "summary" "dtrain: 2 errors in 2 --set arguments; nothing was run" --set layers.fc1.units=0 --set partition.sync=bogus
expect_rc 0 "check with good overrides" "$DTRAIN" check t.yaml --set model.device=cpu --set 'data.mean=[0.0]' \
  --set 'train.schedule={type: step, step_size: 10}'

# ---- a cluster key under mpirun: into parallel:, or into the --cluster file ----
if command -v "$MPIRUN" >/dev/null 2>&1; then
  printf 'partition:\n  sync: average\n  average_every: 2\n' >avg.yaml
  printf 'partition:\n  bucket_mb: 2\n' >base.yaml
  mpi() { timeout -k 5 120 "$MPIRUN" -np 2 "$DTRAIN" run t.yaml --threads 1 --quiet --collective-timeout 30 "$@"; }
  expect_rc 0 "mpirun -np 2 --cluster avg.yaml" mpi --cluster avg.yaml --out m-file
  expect_rc 0 "mpirun -np 2 --set partition.sync=average" mpi --set partition.sync=average --set partition.average_every=2 --out m-set
  expect_rc 0 "mpirun -np 2 --cluster base.yaml --set cluster.partition.sync" \
    mpi --cluster base.yaml --set cluster.partition.sync=average --set partition.average_every=2 --out m-cl
  expect_rc 0 "mpirun -np 2 plain" mpi --out m-plain
  same m-file m-set && pass "cluster keys by --set = the cluster file, bitwise" || fail "cluster keys by --set differ"
  same m-file m-cl && pass "--set into the --cluster file, bitwise" || fail "--set into the cluster file differs"
  same m-file m-plain && fail "sync: average made no difference (the test proves nothing)" || pass "average differs from allreduce"
  expect_rc 2 "mpirun -np 2 check, a bad cluster --set" timeout 60 "$MPIRUN" -np 2 "$DTRAIN" check t.yaml --set partition.micro_batches=abc
  grep -qF -- "--set partition.micro_batches=abc: error: 'micro_batches' must be an integer" "$TMP/err" \
    && pass "a cluster key's error names the argument under mpirun" || { fail "mpirun message"; sed 's/^/  | /' "$TMP/err" | head -3; }
else
  echo "note: no $MPIRUN; the cluster-key runs are skipped"
fi
finish
