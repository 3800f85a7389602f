#!/usr/bin/env bash
# tests/cli/install.sh - `make install` puts the bundled models, their data and the Slurm
# examples under $(pkgdatadir), and the installed dtrain uses them from any directory: `dtrain
# bench` with no model finds the models beside itself, a model's relative data path resolves.
. "$(dirname "$0")/lib.sh"
: "${top_builddir:=$top_srcdir}"
D=$TMP/dest
make -s -C "$top_builddir" install DESTDIR="$D" > "$TMP/install.log" 2>&1 || { fail "make install: $(tail -5 "$TMP/install.log")"; finish; }
bin=$(find "$D" -path '*/bin/dtrain' -type f | head -1)
share=$(dirname "$bin")/../share/dtrain
[ -x "$bin" ] || { fail "no installed dtrain under $D"; finish; }
for f in models/mlp.yaml models/lenet.yaml models/cnn.yaml models/lstm.yaml models/blobs-csv.yaml data/blobs-train.csv \
         examples/slurm/README examples/slurm/train-data-parallel.sbatch examples/slurm/train-gpu.sbatch \
         examples/slurm/train-multinode.sbatch examples/slurm/train-hybrid.sbatch examples/slurm/cluster-hybrid.yaml; do
  [ -r "$share/$f" ] || fail "not installed: share/dtrain/$f"
done
[ -x "$share/examples/slurm/train-data-parallel.sbatch" ] || fail "the batch scripts are installed executable"
mkdir -p "$TMP/elsewhere" && cd "$TMP/elsewhere"
expect_rc 0 "installed dtrain bench, no model, from another directory" "$bin" bench --iters 1 --warmup 0 --threads 1
grep -q 'not found; skipped' "$TMP/err" && fail "bench skipped a bundled model: $(cat "$TMP/err")"
[ "$(grep -c '^model: \|^== ' "$TMP/out")" -ge 1 ] || grep -q 'step:' "$TMP/out" || fail "bench output: $(head -5 "$TMP/out")"
[ "$(grep -c 'step: ' "$TMP/out")" = 4 ] && pass "bench timed the 4 bundled models" || fail "bench timed $(grep -c 'step: ' "$TMP/out") models"
expect_rc 0 "an installed model's relative data path resolves" "$bin" check "$share/models/blobs-csv.yaml"
finish
