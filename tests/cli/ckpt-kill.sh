#!/usr/bin/env bash
# tests/cli/ckpt-kill.sh - checkpoints under the background writer. (1) SIGKILL at random moments
# while checkpoints are being written (by the writer's thread, and every third run with
# DTRAIN_CKPT_SYNC=1 by the training thread): after every kill, latest and best name complete
# directories, no step directory is partial, the latest loads with every byte checked, and the
# run resumed to its end is bitwise the uninterrupted run. (2) A writer slowed down by
# DTRAIN_FAULT=ckpt_slow, so that requests are coalesced, leaves the same best and latest
# checkpoints, bitwise, as a run that writes every checkpoint synchronously, and keeps all of
# train.keep_checkpoints. The kill moments come from DTRAIN_TEST_SEED (default: the pid), printed.
. "$(dirname "$0")/lib.sh"
S=$TMP/k.yaml
TINY_EPOCHS=600 tiny_spec "$S"
sed -i 's/  clip_norm: 1.0/  clip_norm: 1.0\n  checkpoint_every: 3/; s/units: 32/units: 512/' "$S"
grep -q 'checkpoint_every: 3' "$S" || { echo "FAIL: could not derive $S"; exit 1; }

"$DTRAIN" run "$S" --out "$TMP/full" --quiet || fail "the uninterrupted run"

# complete DIR: a step directory holding its three files
complete() { [ -s "$1/model.safetensors" ] && [ -s "$1/optim.safetensors" ] && [ -s "$1/state.json" ]; }
# after_kill K: the invariants of $TMP/k after kill K
after_kill() {
  local ck=$TMP/k/checkpoints p d ok=1
  for p in latest best; do
    [ -e "$ck/$p" ] || continue
    d=$(cat "$ck/$p")
    complete "$ck/$d" || { fail "kill $1: $p names '$d', not a complete checkpoint: $(ls -a "$ck" | tr '\n' ' ')"; ok=0; }
  done
  for d in "$ck"/step-*; do
    [ -d "$d" ] || continue
    complete "$d" || { fail "kill $1: $(basename "$d") is partial"; ok=0; }
  done
  [ -e "$ck/latest" ] || return 0
  # the latest loads: a copy resumed at its own step reads and checks every file and stops
  local step; step=$(sed -n 's/^step-0*//p' "$ck/latest")
  [ -n "$step" ] && [ "$step" -gt 0 ] || return 0
  rm -rf "$TMP/chk"; cp -r "$TMP/k" "$TMP/chk"
  "$DTRAIN" run "$S" --out "$TMP/chk" --quiet --resume --max-steps "$step" >"$TMP/chk.log" 2>&1 \
    || { fail "kill $1: the latest checkpoint (step $step) does not load: $(head -3 "$TMP/chk.log")"; ok=0; }
  [ $ok = 1 ]
}

seed=${DTRAIN_TEST_SEED:-$$}
RANDOM=$seed
echo "kill moments from DTRAIN_TEST_SEED=$seed: 20 to 1500 ms into each run (a run takes seconds)"
kills=0 mid=0 good=0 done_runs=0
for k in $(seq 12); do
  sync=0; [ $((k % 3)) = 0 ] && sync=1
  DTRAIN_CKPT_SYNC=$sync "$DTRAIN" run "$S" --out "$TMP/k" --quiet --resume >"$TMP/k.log" 2>&1 &
  pid=$!
  ms=$(( 20 + RANDOM % 1480 ))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid"; rc=$?
  if [ "$rc" = 0 ]; then      # it finished first (near the end of the chain): start over
    cmp -s "$TMP/full/model.safetensors" "$TMP/k/model.safetensors" && done_runs=$((done_runs + 1)) \
      || fail "run $k finished, but its weights differ from the uninterrupted run"
    rm -rf "$TMP/k"
    continue
  fi
  [ "$rc" = 137 ] || { fail "run $k: exit $rc, wanted 137 (killed) or 0: $(head -3 "$TMP/k.log")"; continue; }
  kills=$((kills + 1))
  ls -a "$TMP/k/checkpoints" 2>/dev/null | grep -q '^\.tmp-' && mid=$((mid + 1))
  after_kill "$k" && good=$((good + 1))
done
pass "$kills kills ($mid of them with a checkpoint half-written), $done_runs runs finished first"
[ "$kills" -ge 6 ] || fail "only $kills of 12 runs were killed"
[ "$mid" -ge 1 ] && pass "kills landed in the middle of checkpoint writes" \
  || fail "no kill left a temporary: none landed mid-write"
[ "$good" = "$kills" ] && pass "after every kill latest and best name complete checkpoints and the latest loads"
expect_rc 0 "resume to the end after the kills" "$DTRAIN" run "$S" --out "$TMP/k" --quiet --resume
cmp -s "$TMP/full/model.safetensors" "$TMP/k/model.safetensors" \
  && pass "resumed after $kills kills: weights bitwise equal to the uninterrupted run" \
  || fail "resumed after the kills: weights differ from the uninterrupted run"
ls -a "$TMP/k/checkpoints" | grep -q '^\.tmp-' && fail "temporaries left after the final run: $(ls -a "$TMP/k/checkpoints")"

# ---- (2) coalesced requests keep the best: blobs' test loss is lowest at epoch 4 of 20 ----
B=$TMP/blobs.yaml
sed "s#\.\./data/#$top_srcdir/data/#" "$top_srcdir/models/blobs-csv.yaml" > "$B"
# same_ckpt A B NAME: checkpoints/NAME of runs A and B: the same step, the same tensors, the same
# state but for the training time it records
same_ckpt() {
  local a b; a=$(cat "$TMP/$1/checkpoints/$3" 2>/dev/null); b=$(cat "$TMP/$2/checkpoints/$3" 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] || { fail "$1 vs $2: $3 is '$a' and '$b'"; return; }
  cmp -s "$TMP/$1/checkpoints/$a/model.safetensors" "$TMP/$2/checkpoints/$b/model.safetensors" &&
  cmp -s "$TMP/$1/checkpoints/$a/optim.safetensors" "$TMP/$2/checkpoints/$b/optim.safetensors" &&
  cmp -s <(grep -v -e elapsed -e state_crc32 "$TMP/$1/checkpoints/$a/state.json") \
         <(grep -v -e elapsed -e state_crc32 "$TMP/$2/checkpoints/$b/state.json") \
    && pass "$1 vs $2: $3 is $a in both, bitwise" || fail "$1 vs $2: $3 ($a) differs"
}
# two snapshots: a request while one is written goes on in the other, and a queued one may be replaced
printf 'checkpoint_snapshots: 2\n' > "$TMP/snap2.yaml"
for keep in 1 3; do
  sed "s/^  epochs: 20/  epochs: 20\n  keep_checkpoints: $keep/" "$B" > "$TMP/b$keep.yaml"
  expect_rc 0 "keep $keep: slow writer (50 ms a commit)" env DTRAIN_FAULT=ckpt_slow@secs=0.05 \
    "$DTRAIN" run "$TMP/b$keep.yaml" --cluster "$TMP/snap2.yaml" --out "$TMP/slow$keep"
  if [ $keep = 1 ]; then       # the writer lags: the requests it could not take were replaced
    grep -E "^checkpoints: [0-9]+ written, [1-9][0-9]* replaced" "$TMP/out" >/dev/null \
      && pass "keep 1: requests were coalesced ($(grep '^checkpoints:' "$TMP/out"))" \
      || fail "keep 1: nothing was coalesced: $(tail -3 "$TMP/out")"
  else                          # the newest 3 may never be dropped: the run waits for the disk instead
    grep -q "^checkpoints:" "$TMP/out" && fail "keep $keep: requests were coalesced: $(grep '^checkpoints:' "$TMP/out")" \
      || pass "keep $keep: nothing coalesced"
  fi
  expect_rc 0 "keep $keep: synchronous writer" env DTRAIN_CKPT_SYNC=1 "$DTRAIN" run "$TMP/b$keep.yaml" --out "$TMP/sync$keep"
  grep -q "^checkpoints:" "$TMP/out" && fail "keep $keep: the synchronous writer coalesced"
  best_step=$(grep '"split":"test"' "$TMP/sync$keep/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([0-9.e-]*\).*/\2 \1/' \
    | sort -g | head -1 | cut -d' ' -f2)
  [ "$(cat "$TMP/slow$keep/checkpoints/best")" = "$(printf 'step-%08d' "$best_step")" ] \
    && pass "keep $keep: best is the lowest test loss's step ($best_step)" \
    || fail "keep $keep: best is $(cat "$TMP/slow$keep/checkpoints/best"), the lowest test loss is at step $best_step"
  same_ckpt "slow$keep" "sync$keep" best
  same_ckpt "slow$keep" "sync$keep" latest
  [ "$(ls "$TMP/slow$keep/checkpoints")" = "$(ls "$TMP/sync$keep/checkpoints")" ] \
    && pass "keep $keep: the same checkpoint directories ($(ls "$TMP/slow$keep/checkpoints" | tr '\n' ' '))" \
    || fail "keep $keep: directories $(ls "$TMP/slow$keep/checkpoints" | tr '\n' ' ') vs $(ls "$TMP/sync$keep/checkpoints" | tr '\n' ' ')"
done
# one snapshot (the default): a request while the writer lags waits for the write (one queued
# before the writer took it may still be replaced), and the same best and latest are left
expect_rc 0 "one snapshot: slow writer" env DTRAIN_FAULT=ckpt_slow@secs=0.05 "$DTRAIN" run "$TMP/b1.yaml" --out "$TMP/one1"
same_ckpt one1 sync1 best
same_ckpt one1 sync1 latest
finish
