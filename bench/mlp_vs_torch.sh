#!/usr/bin/env bash
# bench/mlp_vs_torch.sh - training samples/s of models/mlp.yaml in dtrain and in PyTorch on the same
# batch and thread count (PyTorch from `pip install torch`). Usage: bench/mlp_vs_torch.sh [THREADS] [BATCH]
set -eu
cd "$(dirname "$0")/.."
T=${1:-2}; B=${2:-128}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
src/dtrain run models/mlp.yaml --epochs 1 --batch "$B" --threads "$T" --out "$out" --quiet
sps=$(grep '"split":"train"' "$out/metrics.jsonl" | sed 's/.*"samples_per_sec":\([0-9.]*\).*/\1/')
echo "dtrain mlp: batch $B, $T threads: $sps samples/s (one epoch, whole train step incl. data gather)"
python3 bench/torch_models.py mlp --batch "$B" --threads "$T"
