#!/usr/bin/env bash
# tests/cli/dp-accuracy.sh - on real Fashion-MNIST (30000 images, 4 epochs, 4 ranks): SSP (s = 2),
# parameter averaging (k = 4) and top-k compression (1%) each reach within 1.5 points of the
# synchronous allreduce test accuracy.
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
[ -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: no dataset-fashion-mnist"; exit 77; }
sed 's/limit: 12000/limit: 30000/; s/epochs: 3/epochs: 4/; s/name: mlp-ci/name: mlp-dp/' \
  "$top_srcdir/tests/cli/mlp-ci.yaml" > "$TMP/mlp.yaml"
acc() { grep '"split":"test"' "$TMP/$1/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/'; }
for mode in "ar|{sync: allreduce}" "ssp2|{sync: ssp, staleness: 2}" "avg4|{sync: average, average_every: 4}" \
            "topk|{sync: allreduce, compression: topk, topk_ratio: 0.01}"; do
  name=${mode%%|*}
  printf 'threads_per_rank: 1\npartition: %s\n' "${mode#*|}" > "$TMP/$name.yaml"
  timeout 300 "$MPIRUN" -np 4 "$DTRAIN" run "$TMP/mlp.yaml" --cluster "$TMP/$name.yaml" --out "$TMP/$name" \
    --quiet >"$TMP/$name.log" 2>&1 || { fail "$name run"; head "$TMP/$name.log"; }
done
ref=$(acc ar)
echo "synchronous allreduce: $ref"
for name in ssp2 avg4 topk; do
  a=$(acc $name)
  awk -v a="$a" -v r="$ref" 'BEGIN { exit !(a >= r - 0.015) }' \
    && pass "$name accuracy $a within 1.5 points of $ref" || fail "$name accuracy $a vs $ref"
done
finish
