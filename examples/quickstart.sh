#!/usr/bin/env bash
# examples/quickstart.sh - validate, train and resume the default model (run from the source tree).
set -eu
cd "$(dirname "$0")/.."
src/dtrain check models/mlp.yaml
src/dtrain run models/mlp.yaml --out runs/quickstart --epochs 2
# continue the same run for one more epoch from its latest checkpoint
src/dtrain run models/mlp.yaml --out runs/quickstart --epochs 3 --resume=auto
