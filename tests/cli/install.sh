#!/usr/bin/env bash
# tests/cli/install.sh - `make install` puts every bundled model, their data and the Slurm
# examples under $(pkgdatadir), and the installed dtrain uses them from any directory: `dtrain
# bench` with no model finds the models beside itself, a model's relative data path resolves, and
# a spec argument not found as given (NAME.yaml, models/NAME.yaml) is the bundled model for every
# command that takes one, with a note saying so; a file of the user's by that name wins.
. "$(dirname "$0")/lib.sh"
: "${top_builddir:=$top_srcdir}"
D=$TMP/dest
make -s -C "$top_builddir" install DESTDIR="$D" > "$TMP/install.log" 2>&1 || { fail "make install: $(tail -5 "$TMP/install.log")"; finish; }
bin=$(find "$D" -path '*/bin/dtrain' -type f | head -1)
share=$(dirname "$bin")/../share/dtrain
[ -x "$bin" ] || { fail "no installed dtrain under $D"; finish; }
for m in "$top_srcdir"/models/*.yaml; do
  [ -r "$share/models/${m##*/}" ] || fail "not installed: share/dtrain/models/${m##*/}"
done
for f in models/mlp.yaml models/lenet.yaml models/cnn.yaml models/lstm.yaml models/blobs-csv.yaml data/blobs-train.csv \
         examples/slurm/README examples/slurm/train-data-parallel.sbatch examples/slurm/train-gpu.sbatch \
         examples/slurm/train-multinode.sbatch examples/slurm/train-hybrid.sbatch examples/slurm/cluster-hybrid.yaml \
         examples/slurm/train-elastic.sbatch examples/slurm/cluster-elastic.yaml; do
  [ -r "$share/$f" ] || fail "not installed: share/dtrain/$f"
done
[ -x "$share/examples/slurm/train-data-parallel.sbatch" ] || fail "the batch scripts are installed executable"
mkdir -p "$TMP/elsewhere" && cd "$TMP/elsewhere"
expect_rc 0 "installed dtrain bench, no model, from another directory" "$bin" bench --iters 1 --warmup 0 --threads 1
grep -q 'not found; skipped' "$TMP/err" && fail "bench skipped a bundled model: $(cat "$TMP/err")"
[ "$(grep -c '^model: \|^== ' "$TMP/out")" -ge 1 ] || grep -q 'step:' "$TMP/out" || fail "bench output: $(head -5 "$TMP/out")"
[ "$(grep -c 'step: ' "$TMP/out")" = 4 ] && pass "bench timed the 4 bundled models" || fail "bench timed $(grep -c 'step: ' "$TMP/out") models"
expect_rc 0 "an installed model's relative data path resolves" "$bin" check "$share/models/blobs-csv.yaml"

# a spec not found as given falls back to the installed models, saying so
real_share=$(cd "$share" && pwd -P)
note() { grep -q "note: $1: not found here; using the bundled $real_share/models/$2" "$TMP/err" || fail "$3: no note: $(cat "$TMP/err")"; }
expect_rc 0 "check blobs-csv.yaml from another directory" "$bin" check blobs-csv.yaml
note blobs-csv.yaml blobs-csv.yaml check
grep -q "^model: blobs (${real_share}/models/blobs-csv.yaml)" "$TMP/out" || fail "check names the bundled file: $(head -1 "$TMP/out")"
expect_rc 0 "run models/blobs-csv.yaml from another directory" "$bin" run models/blobs-csv.yaml --epochs 1 --out "$TMP/b" --quiet
note models/blobs-csv.yaml blobs-csv.yaml run
expect_rc 0 "eval blobs-csv.yaml" "$bin" eval blobs-csv.yaml --out "$TMP/b"
note blobs-csv.yaml blobs-csv.yaml eval
printf '0.5,1,-1,2\n' > "$TMP/x.csv"
expect_rc 0 "predict blobs-csv.yaml" "$bin" predict blobs-csv.yaml --out "$TMP/b" --input "$TMP/x.csv"
note blobs-csv.yaml blobs-csv.yaml predict
expect_rc 0 "bench blobs-csv.yaml" "$bin" bench blobs-csv.yaml --iters 1 --warmup 0 --threads 1
note blobs-csv.yaml blobs-csv.yaml bench
expect_rc 0 "plan blobs-csv.yaml" "$bin" plan blobs-csv.yaml --ranks 1 --no-scaling --threads 1
note blobs-csv.yaml blobs-csv.yaml plan
expect_rc 4 "sample char-lstm.yaml finds the spec (then wants weights)" "$bin" sample char-lstm.yaml --out "$TMP/none"
note char-lstm.yaml char-lstm.yaml sample
expect_rc 2 "a spec found nowhere" "$bin" check nope.yaml
grep -q "note:" "$TMP/err" && fail "a missing spec printed a note: $(cat "$TMP/err")"
expect_rc 2 "a path of the user's does not fall back" "$bin" check ./blobs-csv.yaml
tiny_spec "$TMP/elsewhere/blobs-csv.yaml"
expect_rc 0 "a file of the user's by a bundled name wins" "$bin" check blobs-csv.yaml
grep -q "note:" "$TMP/err" && fail "the user's file printed a note: $(cat "$TMP/err")"
grep -q "^model: tiny (blobs-csv.yaml)" "$TMP/out" || fail "the user's file was not used: $(head -1 "$TMP/out")"
finish
