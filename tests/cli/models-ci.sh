#!/usr/bin/env bash
# tests/cli/models-ci.sh - the shipped models (models/*.yaml) on real data, cut short to fit CI: each
# Fashion-MNIST model trains for part of one epoch (--epochs 1 --max-steps N, so its cosine schedule
# spans one epoch and it stops early) and must clear a lower test accuracy, measured on all 10000
# test images, than its full run (the full runs reach lenet >= 90.0%, cnn >= 91.6%,
# cnn-bn >= 92.6%, lstm >= 88.0%). The character models (char-lstm, char-gpt) train a few steps on
# /usr/share/common-licenses: its holdout loss must fall well below the loss of a uniform guess,
# ln(86), and `dtrain sample` must print text. Each run takes well under a minute on 2 cores.
. "$(dirname "$0")/lib.sh"
if [ ! -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: dataset-fashion-mnist is not installed"; exit 77
fi
M="$top_srcdir/models"
THREADS=${DTRAIN_TEST_THREADS:-2}

# last NAME FIELD: FIELD of the last test line of run NAME's metrics.jsonl
last() {
  grep '"split":"test"' "$TMP/$1/metrics.jsonl" 2>/dev/null | tail -1 | sed "s/.*\"$2\":\([0-9.e+-]*\).*/\1/"
}

# image MODEL STEPS MIN_ACCURACY
image() {
  local model=$1 steps=$2 min=$3
  expect_rc 0 "train $model for $steps steps" "$DTRAIN" run "$M/$model.yaml" --epochs 1 --max-steps "$steps" \
    --threads "$THREADS" --out "$TMP/$model" --quiet
  local acc
  acc=$(last "$model" accuracy)
  if [ -n "$acc" ] && awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }'; then
    pass "$model: test accuracy $acc >= $min"
  else
    fail "$model: test accuracy '${acc}' < $min"
  fi
}

image lenet 300 0.80
image cnn 150 0.80
image cnn-bn 200 0.75
if "$DTRAIN" keys 2>/dev/null | grep -q '^data\.source\.sequence '; then
  image lstm 150 0.65
else
  echo "skip: lstm (this dtrain has no data.source.sequence)"
fi

# the character model: a few steps must already learn the letter frequencies
if [ -d /usr/share/common-licenses ] && "$DTRAIN" keys 2>/dev/null | grep -q '^data\.source\.seq_len '; then
  expect_rc 0 "train char-lstm for 30 steps" "$DTRAIN" run "$M/char-lstm.yaml" --epochs 1 --max-steps 30 \
    --threads "$THREADS" --out "$TMP/char-lstm" --quiet
  loss=$(last char-lstm loss)
  # ln(86) = 4.454: the loss of a uniform guess over the text's 86 bytes, where training starts
  if [ -n "$loss" ] && awk -v l="$loss" 'BEGIN { exit !(l <= 3.9) }'; then
    pass "char-lstm: holdout loss $loss <= 3.9 (from ln 86 = 4.45)"
  else
    fail "char-lstm: holdout loss '${loss}' > 3.9"
  fi
  expect_rc 0 "sample char-lstm" "$DTRAIN" sample "$M/char-lstm.yaml" --out "$TMP/char-lstm" --length 200 --seed 3
  n=$(wc -c <"$TMP/out")
  [ "$n" = 200 ] && pass "sample printed $n bytes" || fail "sample printed $n bytes, wanted 200"
  # the transformer (30 steps: 2.96 measured)
  expect_rc 0 "train char-gpt for 30 steps" "$DTRAIN" run "$M/char-gpt.yaml" --epochs 1 --max-steps 30 \
    --threads "$THREADS" --out "$TMP/char-gpt" --quiet
  loss=$(last char-gpt loss)
  if [ -n "$loss" ] && awk -v l="$loss" 'BEGIN { exit !(l <= 3.5) }'; then
    pass "char-gpt: holdout loss $loss <= 3.5 (from ln 86 = 4.45)"
  else
    fail "char-gpt: holdout loss '${loss}' > 3.5"
  fi
  expect_rc 0 "sample char-gpt" "$DTRAIN" sample "$M/char-gpt.yaml" --out "$TMP/char-gpt" --length 200 --seed 3
  n=$(wc -c <"$TMP/out")
  [ "$n" = 200 ] && pass "sample printed $n bytes" || fail "sample printed $n bytes, wanted 200"
else
  echo "skip: char-lstm (no /usr/share/common-licenses or no text format)"
fi
finish
