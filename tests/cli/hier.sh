#!/usr/bin/env bash
# tests/cli/hier.sh - the two-level gradient all-reduce (partition.hierarchical, parallel/hier.c):
# 4 ranks on this machine split into 2 fake nodes of 2 (DTRAIN_HIER_RANKS_PER_NODE) train the MLP
# with dropout and the CNN (several buckets, overlapped with backward) to within 1e-6 of the flat
# all-reduce (another summation order: not bitwise); an uneven split (3 + 1) too; auto picks it only
# when a node holds several ranks, there are several nodes and the spec's network is slow (1 Gbit);
# reproducible mode is untouched by it; topk's and powersgd's dense warm-up takes it, bitwise as
# the uncompressed run
# (bitwise 1 rank); hierarchical: true on 4 nodes of 1 rank (the leaders' all-reduce alone) equals
# flat too; dtrain plan predicts both paths and says which auto takes by cost and why; bad values
# exit 2 at file:line:col. Then, where tests/tools/netns-cluster.sh can emulate nodes, 2 nodes x 2
# ranks at 1gbit: auto takes it from Open MPI's node identity and equals flat, and the waits count
# the 4 ranks sharing this machine's cores (bench --json).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
D=tests/cli
TWO="two-level, 2 nodes"
# tight NAME A B WHAT: max|A - B| / max|A| <= 1e-6
tight() {
  $CMP "$TMP/$1/model.safetensors" "$TMP/$2/model.safetensors" --tol 1e-6 >"$TMP/cmp" 2>&1 \
    && pass "$3 ($(cat "$TMP/cmp"))" || fail "$3: $(cat "$TMP/cmp")"
}
noted() { grep -q "$2" "$TMP/$1.log" && pass "$3" || fail "$3: $(grep note "$TMP/$1.log")"; }

cluster flat 'partition: {hierarchical: false}'
cluster on 'partition: {hierarchical: true}'
# auto weighs the paths on the spec's links: a 1 Gbit network (under the defaults, 10 GB/s beside
# 8 GB/s shared memory, the flat ring is predicted faster and auto keeps it)
cluster auto 'network: {latency_us: 50, bandwidth_gbs: 0.125}
partition: {hierarchical: auto}'
export DTRAIN_HIER_RANKS_PER_NODE=2
for m in mlp cnn; do
  mpi_run "$m-flat" 4 "$D/dp-$m.yaml" flat --max-steps 60
  mpi_run "$m-on" 4 "$D/dp-$m.yaml" on --max-steps 60
  tight "$m-flat" "$m-on" "$m: 2 fake nodes x 2 ranks, two-level = flat within 1e-6"
  noted "$m-on" "$TWO (up to 2 ranks each)" "$m: the two-level path was taken"
done
grep -q "two-level" "$TMP/mlp-flat.log" && fail "hierarchical: false still took it" || pass "hierarchical: false stays flat"
mpi_run mlp-auto 4 "$D/dp-mlp.yaml" auto --max-steps 60
noted mlp-auto "$TWO" "auto: several nodes with several ranks each take it"
# topk's and powersgd's dense warm-up steps sum as an uncompressed run does: warm-up over the whole
# run gives its weights bit for bit (the flat ring's sum, before, agreed to rounding only)
for c in topk powersgd; do
  cluster "$c-warm" "network: {latency_us: 50, bandwidth_gbs: 0.125}
partition: {hierarchical: auto, compression: $c, compression_warmup: 1000}"
  mpi_run "mlp-$c-warm" 4 "$D/dp-mlp.yaml" "$c-warm" --max-steps 60
  same mlp-auto "mlp-$c-warm" "$c: its warm-up takes the two-level path, bitwise the uncompressed run"
done
DTRAIN_HIER_RANKS_PER_NODE=3 mpi_run mlp-uneven 4 "$D/dp-mlp.yaml" on --max-steps 60
tight mlp-flat mlp-uneven "nodes of 3 and 1 ranks = flat within 1e-6"
# a bucket in chunks within the eager limit (1 KiB here: 8 of mlp's 14 KB), each moving on alone
cluster chunked 'network: {eager_kb: 1}
partition: {hierarchical: true}'
DTRAIN_HIER_RANKS_PER_NODE=2 mpi_run mlp-chunks 4 "$D/dp-mlp.yaml" chunked --max-steps 60
tight mlp-flat mlp-chunks "in chunks of 1 KiB a segment = flat within 1e-6"
noted mlp-chunks "1 bucket in 8 chunks" "eager_kb 1: 8 chunks"
# 4 nodes of 1: no node step, the leaders' all-reduce alone
DTRAIN_HIER_RANKS_PER_NODE=1 mpi_run mlp-four 4 "$D/dp-mlp.yaml" on --max-steps 60
tight mlp-flat mlp-four "hierarchical: true on 4 nodes of 1 (the leaders' all-reduce) = flat within 1e-6"
noted mlp-four "two-level, 4 nodes (up to 1 ranks each)" "4 nodes of 1: the two-level path was taken"
DTRAIN_HIER_RANKS_PER_NODE=1 mpi_run mlp-auto1 4 "$D/dp-mlp.yaml" auto --max-steps 5
grep -q "two-level" "$TMP/mlp-auto1.log" && fail "auto with one rank per node took it" || pass "auto: one rank per node stays flat"
unset DTRAIN_HIER_RANKS_PER_NODE
mpi_run mlp-auto-one 4 "$D/dp-mlp.yaml" auto --max-steps 5
grep -q "two-level" "$TMP/mlp-auto-one.log" && fail "auto on one machine took it" || pass "auto: one node stays flat"

cluster repro 'partition: {reproducible: true, chunks: 16, hierarchical: true}'
cluster repro1 'partition: {reproducible: true, chunks: 16}'
mpi_run repro-1 1 "$D/dp-mlp.yaml" repro1 --max-steps 30
DTRAIN_HIER_RANKS_PER_NODE=2 mpi_run repro-4 4 "$D/dp-mlp.yaml" repro --max-steps 30
same repro-1 repro-4 "reproducible with hierarchical: true on 2 fake nodes x 2 = 1 rank"

# the planner: 2 nodes of 2 ranks at 1 GB/s, data 4 chosen for the CNN; its gradient sum two-level
# by cost under auto (the flat ring carries 1.5 buckets across the link each way, the two-level
# path 1), and said; hierarchical: false keeps it flat, said too
printf 'ranks_per_node: 2\nnetwork: {latency_us: 5, bandwidth_gbs: 1}\n' >"$TMP/plan.yaml"
{ cat "$TMP/plan.yaml"; echo 'partition: {hierarchical: false}'; } >"$TMP/plan-flat.yaml"
expect_rc 0 "plan: 4 ranks, 2 per node" "$DTRAIN" plan "$D/dp-cnn.yaml" --cluster "$TMP/plan.yaml" --ranks 4 --top 1 --no-scaling
grep -q "^  gradient sum: two-level, predicted [0-9.]* ms a step against [0-9.]* ms flat (partition.hierarchical auto): the cheaper; the flat ring sends 2(D - 1)/D of each bucket" "$TMP/out" \
  && pass "plan: two-level by cost, and why" || fail "plan: $(grep -E 'chosen|gradient' "$TMP/out")"
"$DTRAIN" plan "$D/dp-cnn.yaml" --cluster "$TMP/plan.yaml" --ranks 4 --top 100 --no-scaling --json >"$TMP/plan.json" 2>/dev/null
python3 - "$TMP/plan.json" <<'PY' && pass "plan --json: data 4's gradient_sum, two-level below flat" || fail "plan --json: gradient_sum"
import json, sys
def walk(o):
    if isinstance(o, dict):
        if o.get("grid") == [4, 1, 1] and "gradient_sum" in o: yield o["gradient_sum"]
        for v in o.values(): yield from walk(v)
    elif isinstance(o, list):
        for v in o: yield from walk(v)
g = list(walk(json.load(open(sys.argv[1]))))
assert g and all(x["runs"] == "two-level" and 0 < x["two_level_ms"] < x["flat_ms"] for x in g), g
PY
expect_rc 0 "plan: hierarchical: false" "$DTRAIN" plan "$D/dp-cnn.yaml" --cluster "$TMP/plan-flat.yaml" --ranks 4 --top 1 --no-scaling
grep -q "^  gradient sum: flat, predicted .* two-level (partition.hierarchical false, as the spec says)" "$TMP/out" \
  && pass "plan: hierarchical: false stays flat, said" || fail "plan false: $(grep -E 'chosen|gradient' "$TMP/out")"

# bad values: exit 2 at the value
printf 'partition:\n  hierarchical: maybe\n' >"$TMP/bad1.yaml"
expect_rc 2 "hierarchical: maybe exits 2" "$DTRAIN" check "$D/dp-mlp.yaml" --cluster "$TMP/bad1.yaml"
grep -q "bad1.yaml:2:17: error: .*auto" "$TMP/err" && pass "named at file:line:col" || fail "message: $(cat "$TMP/err")"
printf 'partition:\n  compression: fp16\n  hierarchical: true\n' >"$TMP/bad2.yaml"
expect_rc 2 "hierarchical: true with fp16 exits 2" "$DTRAIN" check "$D/dp-mlp.yaml" --cluster "$TMP/bad2.yaml"
grep -q "bad2.yaml:3:3: error: 'hierarchical: true' sums uncompressed" "$TMP/err" && pass "fp16 conflict named" \
  || fail "message: $(cat "$TMP/err")"

# ---- 2 emulated nodes x 2 ranks (their own namespaces and 1gbit links): Open MPI's node identity ----
CLUSTER=$top_srcdir/tests/tools/netns-cluster.sh
bash "$CLUSTER" --nodes 1 -- true >/dev/null 2>"$TMP/probe.err"
if [ $? = 77 ]; then
  echo "note: the emulated-nodes part skipped: $(sed -n 's/.*SKIP: //p' "$TMP/probe.err")"
else
  export MPIRUN
  printf 'exec timeout -k 5 90 "$MPIRUN" $MPIRUN_NETNS_ARGS "$@"\n' >"$TMP/in-cluster.sh"
  for h in flat auto; do
    ( cd "$top_srcdir" && bash "$CLUSTER" --nodes 2 --slots 2 --rate 1gbit -- sh "$TMP/in-cluster.sh" -np 4 \
      "$DTRAIN" run "$D/dp-mlp.yaml" --cluster "$TMP/$h.yaml" --out "$TMP/nn-$h" --max-steps 60 --threads 1 \
      --quiet --collective-timeout 60 ) >"$TMP/nn-$h.log" 2>&1 || fail "netns $h: exit $?"
  done
  noted nn-auto "$TWO (up to 2 ranks each)" "emulated nodes: auto found 2 nodes of 2 ranks"
  # the emulated nodes share this machine's cores: waits yield when its 4 ranks outnumber them
  # (Open MPI counts 2 ranks a node; spinning, the flat sum took 60 ms against 20 yielding)
  ( cd "$top_srcdir" && bash "$CLUSTER" --nodes 2 --slots 2 --rate 1gbit -- sh "$TMP/in-cluster.sh" -np 4 \
    "$DTRAIN" bench "$D/dp-mlp.yaml" --cluster "$TMP/flat.yaml" --iters 1 --warmup 0 --threads 1 --json ) \
    >"$TMP/nn-bench.json" 2>"$TMP/nn-bench.log" || fail "netns bench: exit $?"
  python3 - "$TMP/nn-bench.json" "$(getconf _NPROCESSORS_ONLN)" <<'PY' && pass "emulated nodes: 4 ranks on this machine, waits yield where that beats its cores" \
    || fail "bench allreduce: $(head -c 600 "$TMP/nn-bench.json")"
import json, sys
a = json.load(open(sys.argv[1]))[0]["allreduce"]
assert a["ranks_on_machine"] == 4 and a["waits_yield"] == (4 > int(sys.argv[2])), a
PY
  tight nn-flat nn-auto "2 emulated nodes x 2 ranks: two-level = flat within 1e-6"
fi
finish
