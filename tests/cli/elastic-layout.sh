#!/usr/bin/env bash
# tests/cli/elastic-layout.sh - a fixed layout on an elastic relaunch (train/elastic.h): a data 2 x
# pipeline 2 run checkpoints on 4 ranks; relaunched (DTRAIN_RESTART, as the elastic launchers set
# it) on 2 ranks it runs data 1 x pipeline 2, says so in the log and in metrics.jsonl's restart line,
# and its weights are bitwise those of a clean 2-rank resume written as data 1 x pipeline 2; on 3
# ranks (2 does not divide 3) it is re-planned as strategy auto, bitwise a clean resume with the plan
# it wrote. Refused with exit 2: elastic: strict (the spec's errors at its keys), a first launch
# (no DTRAIN_RESTART), nothing that fits memory_per_rank; a bad value of the key at file:line:col.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
SPEC=tests/cli/dp-mlp.yaml
cluster hy 'ranks: 4
threads_per_rank: 1
partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 4, schedule: 1f1b}'
cluster near 'threads_per_rank: 1
partition: {strategy: hybrid, data: 1, pipeline: 2, micro_batches: 4, schedule: 1f1b}'
mpi_run first 4 $SPEC hy --max-steps 20 --set train.checkpoint_every=20
CK=$TMP/first/checkpoints/step-00000020
[ -d "$CK" ] || { fail "no checkpoint of step 20"; finish; }
RS="env DTRAIN_RESTART=1 DTRAIN_RESTART_LOST_RANKS=2,3 DTRAIN_RESTART_LOST_NODES=n1"

# ---- 2 ranks left: the pipeline kept, one replica ----
( cd "$top_srcdir" && $RS timeout -k 5 120 "$MPIRUN" -np 2 "$DTRAIN" run $SPEC --cluster "$TMP/hy.yaml" --out "$TMP/shrunk" \
  --threads 1 --quiet --max-steps 40 --resume="$CK" ) >"$TMP/shrunk.log" 2>&1 || fail "shrunk: exit $?"
grep -q "note: elastic relaunch on 2 ranks: the cluster spec's strategy hybrid data 2 x pipeline 2, ranks 4 does not fit them; running data 1 x pipeline 2 x tensor 1 (its pipeline and tensor degrees kept" "$TMP/shrunk.log" \
  && pass "2 ranks: the log names the layout replaced and the one run" || { fail "2 ranks: no note"; head "$TMP/shrunk.log"; }
grep -qE '^\{"restart":1,"lost_ranks":\[2,3\],"lost_nodes":"n1","from_step":20,"first_step":21,.*"layout_from":"strategy hybrid data 2 x pipeline 2, ranks 4","layout":"data 1 x pipeline 2 x tensor 1","layout_how":"fewer replicas"\}$' \
  "$TMP/shrunk/metrics.jsonl" && pass "2 ranks: the restart line records it" || fail "2 ranks: $(grep restart "$TMP/shrunk/metrics.jsonl")"
mpi_run clean2 2 $SPEC near --max-steps 40 --resume="$CK"
same clean2 shrunk "2 ranks: = a clean resume as data 1 x pipeline 2"

# ---- 3 ranks left: 2 stages do not divide them, re-planned ----
( cd "$top_srcdir" && $RS timeout -k 5 120 "$MPIRUN" -np 3 "$DTRAIN" run $SPEC --cluster "$TMP/hy.yaml" --out "$TMP/replan" \
  --threads 1 --max-steps 40 --resume="$CK" ) >"$TMP/replan.log" 2>&1 || fail "replan: exit $?"
grep -q "note: elastic relaunch on 3 ranks: the cluster spec's strategy hybrid data 2 x pipeline 2, ranks 4 does not fit them; running data [0-9]* x pipeline [0-9]* x tensor [0-9]* (re-planned as strategy auto" "$TMP/replan.log" \
  && grep -q '"layout_how":"re-planned"}$' "$TMP/replan/metrics.jsonl" \
  && pass "3 ranks: re-planned ($(grep -o 'running data [^(]*' "$TMP/replan.log"))" || { fail "3 ranks: no re-plan"; head "$TMP/replan.log"; }
{ echo 'threads_per_rank: 1'; sed -n '/^as a cluster spec:/,$p' "$TMP/replan/plan.txt" | sed 1d; } >"$TMP/plan3.yaml"
mpi_run clean3 3 $SPEC plan3 --max-steps 40 --resume="$CK"
same clean3 replan "3 ranks: = a clean resume with the plan it wrote"

# ---- refusals: exit 2 with the reason ----
printf 'elastic: strict\n' >>"$TMP/hy.yaml"
cd "$top_srcdir" || exit 1
expect_rc 2 "elastic: strict refuses" $RS "$MPIRUN" -np 2 "$DTRAIN" run $SPEC --cluster "$TMP/hy.yaml" --out "$TMP/x" \
  --threads 1 --quiet --max-steps 40 --resume="$CK"
grep -q "hy.yaml:1:8: error: 'ranks' is 4 but the job has 2 MPI ranks" "$TMP/err" \
  && grep -q "hy.yaml:3:.*error: the grid data 2 x pipeline 2 x tensor 1 = 4 ranks, but the job has 2" "$TMP/err" \
  && pass "strict: the errors at the keys" || fail "strict: $(cat "$TMP/err")"
sed -i '$d' "$TMP/hy.yaml"
expect_rc 2 "a first launch (no DTRAIN_RESTART) refuses" "$MPIRUN" -np 2 "$DTRAIN" run $SPEC --cluster "$TMP/hy.yaml" \
  --out "$TMP/x" --threads 1 --quiet --max-steps 40
grep -q "error: 'ranks' is 4 but the job has 2" "$TMP/err" && pass "first launch: the error at 'ranks'" || fail "first launch: $(cat "$TMP/err")"
printf 'memory_per_rank: 10MiB\n' >>"$TMP/hy.yaml"
expect_rc 2 "nothing fits: refused" $RS "$MPIRUN" -np 3 "$DTRAIN" run $SPEC --cluster "$TMP/hy.yaml" --out "$TMP/x" \
  --threads 1 --quiet --max-steps 40 --resume="$CK"
grep -q "error: elastic relaunch on 3 ranks: the cluster spec's strategy hybrid data 2 x pipeline 2, ranks 4 does not fit them, and no layout strategy auto plans fits memory_per_rank" "$TMP/err" \
  && pass "nothing fits: says why" || fail "nothing fits: $(cat "$TMP/err")"
printf 'elastic: sometimes\n' >"$TMP/bad.yaml"
expect_rc 2 "a bad value" "$DTRAIN" check $SPEC --cluster "$TMP/bad.yaml"
grep -q "bad.yaml:1:10: error: .*elastic.*replan.*strict" "$TMP/err" && pass "bad value at file:line:col" || fail "bad value: $(cat "$TMP/err")"
finish
