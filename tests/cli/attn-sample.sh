#!/usr/bin/env bash
# tests/cli/attn-sample.sh - a character transformer end to end (models/char-gpt.yaml's layers in
# miniature: embedding, positions, pre-norm causal attention and gelu MLP blocks with residual adds,
# a final layernorm): it trains (the test loss falls well below the uniform guess), and
# `dtrain sample` writes exactly the bytes asked for, only bytes of the text, the same for a seed.
. "$(dirname "$0")/lib.sh"
cd "$TMP" || exit 99

chars='abcdefgh .'
for i in $(seq 1 60); do
  printf 'abc def gh. hgf edc ba.%s\n' "$(printf '%*s' $((i % 5)) '' | tr ' ' 'a')"
done >corpus.txt
V=$(od -An -tu1 -v corpus.txt | tr -s ' ' '\n' | grep -v '^$' | sort -u | wc -l)

block() {       # block N INPUT: a pre-norm block reading INPUT
  cat <<YAML
  - {type: layernorm, name: h$1_ln1}
  - {type: attention, name: h$1_attn, heads: 2, causal: true}
  - {type: add, name: h$1_res1, inputs: [h$1_attn, $2]}
  - {type: layernorm, name: h$1_ln2}
  - {type: fc, name: h$1_fc1, units: 64, activation: gelu}
  - {type: fc, name: h$1_fc2, units: 16}
  - {type: add, name: h$1_res2, inputs: [h$1_fc2, h$1_res1]}
YAML
}
{
  cat <<YAML
name: gpt
input: [16]
layers:
  - {type: embedding, name: emb, vocab: $V, dim: 16}
  - {type: positions, name: pos}
YAML
  block 0 pos
  block 1 h0_res2
  cat <<YAML
  - {type: layernorm, name: ln_f}
  - {type: fc, name: head, units: $V}
loss: softmax_cross_entropy
data:
  train: {format: text, path: corpus.txt, seq_len: 16, stride: 4, holdout: 0.2}
  test: {format: text, path: corpus.txt, seq_len: 16, holdout: 0.2}
train:
  epochs: 4
  batch: 16
  seed: 1
  optimizer: {type: adamw, lr: 0.01}
YAML
} >gpt.yaml

expect_rc 0 "train a character transformer" "$DTRAIN" run gpt.yaml --out run --quiet
loss=$(grep '"split":"test"' run/metrics.jsonl | tail -1 | sed 's/.*"loss":\([0-9.]*\).*/\1/')
# ln 11 = 2.40 nats is the uniform guess; the text is nearly periodic
awk -v l="$loss" 'BEGIN { exit !(l < 1.2) }' && pass "test loss $loss < 1.2" || fail "test loss $loss, not below 1.2"
expect_rc 0 "sample 200 bytes" "$DTRAIN" sample gpt.yaml --out run --length 200 --seed 3
[ "$(wc -c <"$TMP/out")" = 200 ] || fail "sample wrote $(wc -c <"$TMP/out") bytes, wanted 200"
[ "$(LC_ALL=C tr -d "$chars"'\n' <"$TMP/out" | wc -c)" = 0 ] || fail "sample wrote bytes outside the text's vocabulary"
cp "$TMP/out" s1
expect_rc 0 "the same seed again" "$DTRAIN" sample gpt.yaml --out run --length 200 --seed 3
cmp -s s1 "$TMP/out" || fail "the same seed gives other text"
expect_rc 0 "greedy with a prime" "$DTRAIN" sample gpt.yaml --out run --length 40 --temperature 0 --prime 'abc d'
head -c 40 "$TMP/out" | sed 's/^/  | /'; echo
finish
