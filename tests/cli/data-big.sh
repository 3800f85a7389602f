#!/usr/bin/env bash
# tests/cli/data-big.sh - a 4 GB .npy dataset (written here by tests/tools/bignpy.py, removed at the
# end) trains the mlp for some steps with a peak RSS under 300 MB per rank, on 1 and 2 ranks: the
# samples stay on disk and each batch reads only its own. Skipped (77) when the disk lacks room.
# DTRAIN_BIG_BYTES overrides the size (bytes).
. "$(dirname "$0")/lib.sh"
BYTES=${DTRAIN_BIG_BYTES:-4294967296}
LIMIT_KB=$((300 * 1024))
free_kb=$(df -Pk "$TMP" | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((BYTES / 1024 + 1048576)) ]; then
  echo "SKIP: $((BYTES >> 20)) MiB dataset needs more free space than the $((free_kb >> 10)) MiB in $TMP"; exit 77
fi
n=$(python3 "$top_srcdir/tests/tools/bignpy.py" "$TMP/x.npy" "$TMP/y.npy" "$BYTES" 784) || { fail "writing the dataset"; finish; }
pass "wrote $(($(stat -c %s "$TMP/x.npy") >> 20)) MiB of samples ($n x 784 float32)"
cat > "$TMP/big.yaml" <<YAML
name: big
input: [784]
layers:
  - {type: fc, name: fc1, units: 256, activation: relu, init: he_uniform}
  - {type: dropout, rate: 0.1}
  - {type: fc, name: fc2, units: 128, activation: relu, init: he_uniform}
  - {type: fc, name: fc3, units: 10}
loss: softmax_cross_entropy
data:
  train: {format: npy, x: x.npy, y: y.npy}
  classes: 10
train: {epochs: 1, batch: 128, seed: 42, optimizer: {type: adamw, lr: 0.001}}
YAML
# each rank runs under a python parent that reports the rank's peak RSS (getrusage of its child)
cat > "$TMP/peak.py" <<'PY'
import os, resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0"))
with open("%s.%s" % (sys.argv[1], rank), "w") as f:
    f.write("%d %d\n" % (rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
PY
for np in 1 2; do
  timeout -k 5 300 "$MPIRUN" -np $np python3 "$TMP/peak.py" "$TMP/rss$np" "$DTRAIN" run "$TMP/big.yaml" \
    --max-steps 40 --out "$TMP/run$np" --threads 1 --quiet >"$TMP/run$np.log" 2>&1 \
    || { fail "$np rank(s): exit $?"; sed 's/^/  | /' "$TMP/run$np.log" | head; }
  grep -q '"step":40' "$TMP/run$np/metrics.jsonl" || fail "$np rank(s): no metrics line at step 40"
  for r in $(seq 0 $((np - 1))); do
    read -r rc kb < "$TMP/rss$np.$r" || { fail "$np rank(s): rank $r reported no peak RSS"; continue; }
    [ "$rc" = 0 ] && [ "$kb" -lt "$LIMIT_KB" ] && pass "$np rank(s), rank $r: 40 steps, peak RSS $((kb >> 10)) MiB < 300 MiB" \
      || fail "$np rank(s), rank $r: exit $rc, peak RSS $((kb >> 10)) MiB (limit 300 MiB)"
  done
done
rm -f "$TMP/x.npy" "$TMP/y.npy"
finish
