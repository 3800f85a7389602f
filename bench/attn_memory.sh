#!/usr/bin/env bash
# bench/attn_memory.sh - the attention kernels' memory against the sequence length: one attention
# layer (F = 64, 4 heads, causal) on T = 128 .. 2048, kernel plain (keeps each head's T x T
# probabilities for backward) and blocked (FlashAttention's tiles: one log-sum-exp per row). Per row:
# the planned activations of `dtrain check` (what the layer keeps, counted by its scratch op), the
# peak RSS and the attention layer's forward and backward times from `dtrain bench` (batch B).
# usage: bench/attn_memory.sh [DTRAIN] [B]       (default src/dtrain, B = 2)
set -u
DTRAIN=${1:-src/dtrain}
B=${2:-2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
printf '%-8s %6s %16s %14s %10s %10s\n' kernel T "activations MiB" "peak RSS MiB" "fwd ms" "bwd ms"
for kernel in plain blocked; do
  for T in 128 256 512 1024 2048; do
    cat >"$W/a.yaml" <<YAML
name: attn-mem
input: [$T, 64]
layers:
  - {type: attention, name: att, heads: 4, causal: true, kernel: $kernel}
  - {type: fc, name: out, units: 8}
loss: mse
data:
  train: {format: synthetic, n: 16}
train:
  batch: $B
YAML
    act=$("$DTRAIN" check "$W/a.yaml" 2>&1 | sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p' | head -1)
    out=$("$DTRAIN" bench "$W/a.yaml" --iters 2 --warmup 1 --threads 1 2>&1)
    rss=$(printf '%s\n' "$out" | sed -n 's/^memory: peak RSS \([0-9.]*\) MiB.*/\1/p')
    t=$(printf "%s\n" "$out" | awk '$1 == "att" { print $4, $5 }')
    printf '%-8s %6d %16s %14s %10s %10s\n' "$kernel" "$T" "$act" "$rss" $t
  done
done
