#!/usr/bin/env bash
# tests/cli/accuracy-ci.sh - real data: an MLP on 12000 Fashion-MNIST images for 3 epochs must
# reach 83% on the full 10000-image test set (the full default model reaches >= 89%).
. "$(dirname "$0")/lib.sh"
if [ ! -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: dataset-fashion-mnist is not installed"; exit 77
fi
expect_rc 0 "train mlp-ci" "$DTRAIN" run "$top_srcdir/tests/cli/mlp-ci.yaml" --out "$TMP/ci" --quiet
acc=$(grep '"split":"test"' "$TMP/ci/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.83) }' && pass "test accuracy $acc >= 0.83" || fail "test accuracy $acc < 0.83"
finish
