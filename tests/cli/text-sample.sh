#!/usr/bin/env bash
# tests/cli/text-sample.sh - a character model end to end: format: text with per-step labels
# (embedding -> lstm with return_sequences -> fc), a short training run whose model.safetensors
# carries the vocabulary, then `dtrain sample`: exact output length, only bytes of the text,
# reproducible by seed, and its errors (missing or mismatched weights exit 4, bad prime or flags
# exit 2). Skips (77) while the embedding or lstm layer is not registered.
. "$(dirname "$0")/lib.sh"

if ! "$DTRAIN" keys 2>/dev/null | grep -q '^layers\.lstm\.' ||
   ! "$DTRAIN" keys 2>/dev/null | grep -q '^layers\.embedding\.'; then
  echo "skip: this dtrain has no embedding or lstm layer"
  exit 77
fi
cd "$TMP" || exit 99

# a small text over a known alphabet, with a newline
chars='abcdefgh .'
for i in $(seq 1 60); do
  printf 'abc def gh. hgf edc ba.%s\n' "$(printf '%*s' $((i % 5)) '' | tr ' ' 'a')"
done >corpus.txt
V=$(od -An -tu1 -v corpus.txt | tr -s ' ' '\n' | grep -v '^$' | sort -u | wc -l)
[ "$V" = 11 ] || fail "corpus has $V distinct bytes, expected 11"

char_spec() {   # char_spec FILE [return_sequences]
  cat >"$1" <<YAML
name: chars
input: [16]
layers:
  - {type: embedding, name: emb, vocab: $V, dim: 8}
  - {type: lstm, name: lstm, hidden: 24, return_sequences: ${2:-true}}
  - {type: fc, name: out, units: $V}
loss: softmax_cross_entropy
data:
  train: {format: text, path: corpus.txt, seq_len: 16, holdout: 0.2}
  test: {format: text, path: corpus.txt, seq_len: 16, holdout: 0.2}
train:
  epochs: 3
  batch: 8
  seed: 1
  optimizer: {type: adam, lr: 0.02}
YAML
}
char_spec chars.yaml

expect_rc 0 "check a text model" "$DTRAIN" check chars.yaml
grep -q 'data: train [0-9]* samples, test [0-9]* samples' "$TMP/out" || fail "check reports both parts"
expect_rc 0 "train a text model" "$DTRAIN" run chars.yaml --out run --quiet
[ -s run/model.safetensors ] || fail "no model.safetensors"
head -c 4096 run/model.safetensors | grep -aq '"vocab"' || fail "model.safetensors has no vocab metadata"
# per-step loss: the test split is scored per step, so accuracy is a fraction of B*T rows
grep -q '"split":"test"' run/metrics.jsonl || fail "no test metrics"

expect_rc 0 "sample 200 bytes" "$DTRAIN" sample chars.yaml --out run --length 200 --seed 7
[ "$(wc -c <"$TMP/out")" = 200 ] || fail "sample wrote $(wc -c <"$TMP/out") bytes, wanted 200"
[ "$(LC_ALL=C tr -d "$chars"'\n' <"$TMP/out" | wc -c)" = 0 ] || fail "sample wrote bytes outside the text's vocabulary"
cp "$TMP/out" s1
expect_rc 0 "the same seed again" "$DTRAIN" sample chars.yaml --weights run/model.safetensors --length 200 --seed 7
cmp -s s1 "$TMP/out" || fail "the same seed gives other text"
expect_rc 0 "greedy with a prime" "$DTRAIN" sample chars.yaml --out run --length 50 --temperature 0 --prime 'abc d'
[ "$(wc -c <"$TMP/out")" = 50 ] || fail "greedy sample length"
expect_rc 0 "default length" "$DTRAIN" sample chars.yaml --out run
[ "$(wc -c <"$TMP/out")" = 500 ] || fail "default length is not 500"
expect_rc 0 "sample --help" "$DTRAIN" sample --help
grep -q -- '--temperature' "$TMP/out" || fail "sample --help lists --temperature"

# the user's mistakes: exit 2
expect_rc 2 "prime outside the vocabulary" "$DTRAIN" sample chars.yaml --out run --prime 'xyz'
grep -q "'x'.*not in the model's vocabulary" "$TMP/err" || fail "bad prime message: $(cat "$TMP/err")"
expect_rc 2 "negative temperature" "$DTRAIN" sample chars.yaml --out run --temperature -1
expect_rc 2 "length not a number" "$DTRAIN" sample chars.yaml --out run --length many
expect_rc 2 "no model" "$DTRAIN" sample
expect_rc 2 "unknown flag" "$DTRAIN" sample chars.yaml --tempo 3

# weights: exit 4, naming the file
expect_rc 4 "missing weights" "$DTRAIN" sample chars.yaml --out nowhere
grep -q 'nowhere/model.safetensors' "$TMP/err" || fail "missing weights message names the file"
expect_rc 4 "missing --weights file" "$DTRAIN" sample chars.yaml --weights no.safetensors
ck=$(ls -d run/checkpoints/step-* | head -1)
expect_rc 4 "weights without a vocabulary" "$DTRAIN" sample chars.yaml --weights "$ck/model.safetensors"
grep -q 'not a character model' "$TMP/err" || fail "no-vocab message: $(cat "$TMP/err")"
sed 's/hidden: 24/hidden: 20/' chars.yaml >other.yaml
expect_rc 4 "weights of another shape" "$DTRAIN" sample other.yaml --out run
grep -q 'run/model.safetensors: shape' "$TMP/err" || fail "shape mismatch message: $(cat "$TMP/err")"

# per-step labels need per-step outputs
char_spec last.yaml false
expect_rc 3 "text labels on a one-row output" "$DTRAIN" run last.yaml --out last --quiet
grep -q 'return_sequences' "$TMP/err" || fail "one-row output message: $(cat "$TMP/err")"
# normalisation and other formats' keys do not apply to text
sed 's/^train:/  scale: 0.5\ntrain:/' chars.yaml >scaled.yaml
expect_rc 2 "scale with text" "$DTRAIN" check scaled.yaml
grep -q "key 'scale' does not apply to format 'text'" "$TMP/err" || fail "scale message: $(cat "$TMP/err")"
finish
