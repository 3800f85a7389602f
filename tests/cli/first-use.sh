#!/usr/bin/env bash
# tests/cli/first-use.sh - rough edges a new user hits first (issue 25): `dtrain check` into a pipe
# keeps its table before the error; a data file that cannot be found names every place looked in,
# the current directory too, and the near file meant; the placement line of a data-parallel job
# says nothing of pipelines; run --help leaves the test-only DTRAIN_FAULT to dtrain(1); the auto
# strategy is an item of its own in dtrain-cluster(5); the README lists plan.
. "$(dirname "$0")/lib.sh"

# ---- check into a pipe or a file: stdout in order with stderr ----
mkdir -p "$TMP/d/sub"
cp "$top_srcdir/data/blobs-train.csv" "$TMP/d/sub/train.csv"
sed -e 's|path: ../data/blobs-train.csv|path: sbu/trian.csv|' -e 's|path: ../data/blobs-test.csv|path: sub/train.csv|' \
  "$top_srcdir/models/blobs-csv.yaml" > "$TMP/d/typo.yaml"
mkdir -p "$TMP/cwd" && cd "$TMP/cwd"
"$DTRAIN" check "$TMP/d/typo.yaml" > "$TMP/both" 2>&1; rc=$?
[ "$rc" = 3 ] && pass "a missing data file (exit 3)" || fail "a missing data file: exit $rc"
head -1 "$TMP/both" | grep -q '^model: blobs' && pass "the header comes first" || fail "first line: $(head -1 "$TMP/both")"
err=$(grep -n 'error: cannot find data file' "$TMP/both" | cut -d: -f1)
tot=$(grep -n '^total ' "$TMP/both" | cut -d: -f1)
[ -n "$err" ] && [ -n "$tot" ] && [ "$err" -gt "$tot" ] && pass "the error follows the table (line $err after $tot)" \
  || fail "order: $(cat "$TMP/both")"
# ---- the message: where it looked, the current directory last, the file meant ----
msg=$(grep 'cannot find data file' "$TMP/both")
case $msg in
  *"typo.yaml:9:"*"error: cannot find data file 'sbu/trian.csv' (looked in: the model file's directory $TMP/d, \$DTRAIN_DATA_PATH"*", /usr/share/datasets, the current directory $TMP/cwd); did you mean 'sub/train.csv'?")
    pass "the message names the current directory and the near file" ;;
  *) fail "message: $msg" ;;
esac
sed 's|path: sbu/trian.csv|path: nothing/like/it.csv|' "$TMP/d/typo.yaml" > "$TMP/d/none.yaml"
expect_rc 3 "a data file with nothing near" "$DTRAIN" check "$TMP/d/none.yaml"
grep -q "did you mean" "$TMP/err" && fail "a suggestion with nothing near: $(cat "$TMP/err")"
# a near file in $DTRAIN_DATA_PATH, and an absolute path
sed "s|path: sbu/trian.csv|path: $TMP/d/sub/trainn.csv|" "$TMP/d/typo.yaml" > "$TMP/d/abs.yaml"
expect_rc 3 "an absolute path with a typo" "$DTRAIN" check "$TMP/d/abs.yaml"
grep -q "cannot find data file '$TMP/d/sub/trainn.csv' (No such file or directory); did you mean '$TMP/d/sub/train.csv'?" "$TMP/err" \
  && pass "an absolute path gets its near file" || fail "absolute: $(cat "$TMP/err")"
sed "s|path: sbu/trian.csv|path: trian.csv|" "$TMP/d/typo.yaml" > "$TMP/d/dp.yaml"
DTRAIN_DATA_PATH=$TMP/d/sub expect_rc 3 "a typo of a file in DTRAIN_DATA_PATH" "$DTRAIN" check "$TMP/d/dp.yaml"
grep -q "\$DTRAIN_DATA_PATH=$TMP/d/sub,.*did you mean 'train.csv'?" "$TMP/err" && pass "DTRAIN_DATA_PATH's near file" || fail "data path: $(cat "$TMP/err")"
cd "$top_srcdir"

# ---- placement: a data-parallel job has no pipeline to speak of ----
if command -v "$MPIRUN" >/dev/null 2>&1 && [ "$(nproc)" -lt 3 ]; then
  tiny_spec "$TMP/tiny.yaml"
  printf 'partition: {strategy: data}\n' > "$TMP/dp.yaml"
  printf 'partition: {strategy: model}\n' > "$TMP/pp.yaml"
  for c in dp pp; do
    timeout -k 5 120 "$MPIRUN" -np 3 "$DTRAIN" run "$TMP/tiny.yaml" --cluster "$TMP/$c.yaml" --out "$TMP/$c" --threads 1 \
      --max-steps 2 --collective-timeout 30 > "$TMP/$c.log" 2>&1 || fail "3 ranks, $c: $(tail -3 "$TMP/$c.log")"
  done
  grep -q "^placement: ranks outnumber the cores; the ranks share them round robin (rank 0 on cpu" "$TMP/dp.log" \
    && ! grep -q "pipeline" "$TMP/dp.log" && pass "data parallel: the placement line names no pipeline" \
    || fail "data-parallel placement: $(grep placement "$TMP/dp.log")"
  grep -q "^placement: ranks outnumber the cores; each pipeline's ranks share cores" "$TMP/pp.log" \
    && pass "a pipeline's placement line says so" || fail "pipeline placement: $(grep placement "$TMP/pp.log")"
else
  echo "skip: the placement lines (no mpirun, or 3 or more cores: 3 ranks are not pinned)"
fi

# ---- help, man pages, README ----
expect_rc 0 "run --help" "$DTRAIN" run --help
grep -q DTRAIN_FAULT "$TMP/out" && fail "run --help lists DTRAIN_FAULT among the user's options"
grep -q 'dtrain(1), ENVIRONMENT' "$TMP/out" && pass "run --help points to ENVIRONMENT" || fail "run --help: $(tail -4 "$TMP/out")"
sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p' "$top_srcdir/man/dtrain.1" | grep -q '^\.B DTRAIN_FAULT$' \
  && pass "DTRAIN_FAULT is in dtrain(1) ENVIRONMENT" || fail "DTRAIN_FAULT not in ENVIRONMENT"
# strategy auto: its own tagged paragraph after hybrid's (.TP, .B auto), rendered at hybrid's indent
awk '/^\.B hybrid$/ { h = NR } h && /^\.B auto$/ && !a { a = NR; ok = prev == ".TP" } { prev = $0 } END { exit !(h && a && ok) }' \
  "$top_srcdir/man/dtrain-cluster.5" && pass "dtrain-cluster(5): auto is an item of its own" || fail "dtrain-cluster(5): auto inside hybrid's paragraph"
if command -v groff >/dev/null 2>&1; then
  groff -man -Tascii -P-cbou "$top_srcdir/man/dtrain-cluster.5" 2>/dev/null > "$TMP/cl.txt"
  h=$(grep -m1 -E '^ +hybrid +A +process +grid' "$TMP/cl.txt" | sed 's/hybrid.*//' | wc -c)
  a=$(grep -m1 -E '^ +auto +The +planner +chooses' "$TMP/cl.txt" | sed 's/auto.*//' | wc -c)
  [ "$h" -gt 1 ] && [ "$h" = "$a" ] && pass "rendered, auto stands where hybrid does" || fail "rendered: hybrid at $h, auto at $a"
fi
grep -qE '^ +dtrain plan MODEL.yaml' "$top_srcdir/README" && pass "the README's command list has plan" || fail "README lacks plan"
finish
