# tests/cli/attn-spec.sh - sourced by the attention tests after lib.sh: writes $TMP/gpt.yaml, a
# two-block character transformer (heads 2, attention dropout 0.1) on a tiny corpus, and sets S to it.
for i in $(seq 1 80); do
  printf 'abc def gh. hgf edc ba.%s\n' "$(printf '%*s' $((i % 5)) '' | tr ' ' 'a')"
done >"$TMP/corpus.txt"
V=$(od -An -tu1 -v "$TMP/corpus.txt" | tr -s ' ' '\n' | grep -v '^$' | sort -u | wc -l)
block() {       # block N INPUT
  cat <<YAML
  - {type: layernorm, name: h$1_ln1}
  - {type: attention, name: h$1_attn, heads: 2, causal: true, dropout: 0.1}
  - {type: add, name: h$1_res1, inputs: [h$1_attn, $2]}
  - {type: layernorm, name: h$1_ln2}
  - {type: fc, name: h$1_fc1, units: 32, activation: gelu}
  - {type: fc, name: h$1_fc2, units: 16}
  - {type: add, name: h$1_res2, inputs: [h$1_fc2, h$1_res1]}
YAML
}
{
  printf 'name: gpt\ninput: [16]\nlayers:\n'
  printf '  - {type: embedding, name: emb, vocab: %s, dim: 16}\n  - {type: positions, name: pos}\n' "$V"
  block 0 pos
  block 1 h0_res2
  cat <<YAML
  - {type: layernorm, name: ln_f}
  - {type: fc, name: head, units: $V}
loss: softmax_cross_entropy
data:
  train: {format: text, path: $TMP/corpus.txt, seq_len: 16, stride: 8, holdout: 0.2, limit: 192}
  test: {format: text, path: $TMP/corpus.txt, seq_len: 16, holdout: 0.2}
train:
  epochs: 3
  batch: 16
  seed: 3
  optimizer: {type: sgd, lr: 0.3}
YAML
} >"$TMP/gpt.yaml"
S=$TMP/gpt.yaml
