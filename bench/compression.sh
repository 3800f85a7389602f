#!/usr/bin/env bash
# bench/compression.sh - time to accuracy of the gradient compressors on an emulated cluster:
# 2 nodes x 2 ranks (tests/tools/netns-cluster.sh, each node's egress capped by tc tbf, Open MPI
# over TCP), `dtrain run MODEL` with partition.compression none / fp16 / bf16 / topk / threshold /
# powersgd. Prints per model and method the wall time to the uncompressed run's final test
# accuracy minus 0.3 points (at epoch ends, where dtrain evaluates; "-" when never reached), the
# final test accuracy, the total time, and the bytes each node's link sent; then per method the
# planner's bytes per step (`dtrain plan --json`, the data 4 layout: plan/cxmodel.c), a rank's
# messages (dp_mb) and what leaves each node (dp_link_mb: the collectives' fan-out, e.g. both ranks
# of a node cross in an all-gather, one ring edge leaves it), against what each node's link sent
# per step (tc counters, the whole run over its optimizer steps). topk's and powersgd's first
# compression_warmup steps are the uncompressed sum (the 'none' plan's bytes out of a node: its
# two-level path), counted in the model's per-step mean; so the ratio is the model's error, with
# TCP/IP's headers and acknowledgements (~1-3%) and the run's few other messages in it.
# The cluster spec tells the planner the link: ranks_per_node 2, 1 Gbit/s (compression: auto
# picks by it; add it to METHODS).
# Needs root (see netns-cluster.sh); the 4 ranks share this machine's cores, so on a small loaded
# machine compute, not the link, may dominate: say so beside any figure.
# Usage: bench/compression.sh [MODEL.yaml...]   (default models/mlp.yaml, lenet, cnn and the wide MLP)
# The wide MLP's powersgd figure (rank 16, warm-up 12: 80.94%, 0.20 below uncompressed, in 0.44-0.45x
# its time in two runs on an otherwise idle 2-vCPU Xeon, 61.3 s against 139.6; 0.51-0.53x at load
# 8-11 before waits yielded on emulated nodes: its steady step is compute-bound, so load slows it most):
#   EPOCHS=1 LIMIT=8000 METHODS="none powersgd+compression_warmup=12+powersgd_rank=16" \
#     bench/compression.sh bench/models/mlp-4096.yaml
# (one epoch is evaluated once, at its end: a method's time to target is then its whole run)
# Env: RATE (1gbit), EPOCHS (2), LIMIT (training images, 20000; 0: all), TEST_LIMIT (test images;
#      default all), METHODS (the six; an
#      entry may add keys, e.g. powersgd+powersgd_rank=8),
#      EXTRA (more dtrain run flags, e.g. "--threads 1"), DTRAIN (src/dtrain), MPIRUN (mpirun),
#      OUTDIR (keep each run there instead of a temporary folder; a model's 'none' run found there
#      is the target's reference even when METHODS leaves it out), RUN (1; 0 only prints the table
#      from OUTDIR's runs and their plans): a long campaign runs METHODS subsets one at a time (each under its own
#      hold of a measurement lock) and then prints the whole table with RUN=0.
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- models/mlp.yaml models/lenet.yaml models/cnn.yaml bench/models/mlp-4096.yaml
RATE=${RATE:-1gbit} EPOCHS=${EPOCHS:-2} LIMIT=${LIMIT:-20000}
METHODS=${METHODS:-none fp16 bf16 topk threshold powersgd}
DTRAIN=$(cd "$(dirname "${DTRAIN:-src/dtrain}")" && pwd)/$(basename "${DTRAIN:-src/dtrain}")
export MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUN=${RUN:-1}
if [ -n "${OUTDIR:-}" ]; then mkdir -p "$OUTDIR"; tmp=$(cd "$OUTDIR" && pwd)
else tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; fi
sets=(--set "train.epochs=$EPOCHS")
[ "$LIMIT" = 0 ] || sets+=(--set "data.train.limit=$LIMIT")
[ -z "${TEST_LIMIT:-}" ] || sets+=(--set "data.test.limit=$TEST_LIMIT")
echo "emulated cluster: 2 nodes x 2 ranks, egress $RATE each; $EPOCHS epochs, $([ "$LIMIT" = 0 ] && echo all || echo "$LIMIT") training images"
for model in "$@"; do
  M=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
  name=$(basename "$model" .yaml)
  for m in $METHODS; do
    # a method may carry its keys: threshold+threshold_max_density=0.1+threshold_min_density=0.01
    keys=$(printf '%s' "$m" | sed 's/^[^+]*//; s/+\([^=]*\)=/, \1: /g')
    out=$tmp/$name-$m
    printf 'partition: {compression: %s%s}\nranks_per_node: 2\nnetwork: {bandwidth_gbs: 0.125, latency_us: 50}\n' \
      "${m%%+*}" "$keys" >"$tmp/$m.yaml"
    [ "$RUN" = 1 ] || continue
    # the model's bytes for the data 4 layout (measured layer costs do not change them)
    "$DTRAIN" plan "$M" --ranks 4 --cluster "$tmp/$m.yaml" --json --top 100 "${sets[@]}" >"$out.plan.json" 2>/dev/null \
      || echo '{}' >"$out.plan.json"
    rc=0
    rm -rf "$out" "$out.stats"   # a run kept in OUTDIR is replaced, never resumed
    NETNS_STATS=$out.stats bash tests/tools/netns-cluster.sh --nodes 2 --slots 2 --rate "$RATE" -- \
      sh -c 'exec timeout -k 5 3000 "$MPIRUN" $MPIRUN_NETNS_ARGS -np 4 "$@"' sh "$DTRAIN" run "$M" \
      --cluster "$tmp/$m.yaml" --out "$out" --quiet "${sets[@]}" ${EXTRA:-} >"$out.log" 2>&1 || rc=$?
    [ "$rc" = 77 ] && { grep SKIP "$out.log" >&2; exit 77; }
    [ "$rc" = 0 ] || { echo "error: $name $m failed (exit $rc):" >&2; tail -5 "$out.log" >&2; exit 1; }
  done
  # topk's default warm-up is the longer of the key's default and the learning rate's warm-up
  # (dt_cluster_cx_warmup): the model's warmup_steps, when it has one
  python3 - "$tmp" "$name" "$("$DTRAIN" keys | awk '$1 == "parallel.partition.compression_warmup" {print $3}')" \
    "$(sed -n 's/.*warmup_steps: *\([0-9]*\).*/\1/p' "$M" | head -1)" $METHODS <<'PY'
import json, sys
tmp, name, warm_def, lr_warm = sys.argv[1], sys.argv[2], int(sys.argv[3] or 0), int(sys.argv[4] or 0)
methods = sys.argv[5:]
def tests(m):
    return [json.loads(l) for l in open(f"{tmp}/{name}-{m}/metrics.jsonl") if '"split":"test"' in l]
def sent(m):
    per = [dict(kv.split("=", 1) for kv in l.split()) for l in open(f"{tmp}/{name}-{m}.stats")]
    return " / ".join(f"{int(p['tx_bytes']) / 2**20:.0f}" for p in per)
import os
ref = tests("none")[-1]["accuracy"] if os.path.exists(f"{tmp}/{name}-none/metrics.jsonl") else None
print(f"\n{name}: target = uncompressed final accuracy - 0.3 points = "
      + (f"{100 * (ref - 0.003):.2f}%" if ref is not None else "(no 'none' run)"))
w = max(10, *(len(m) for m in methods))
print(f"{'method':<{w}} {'to target (s)':>13} {'final acc':>9} {'total (s)':>9}  MiB sent per node")
def steps(m):
    return max(json.loads(l).get("step", 0) for l in open(f"{tmp}/{name}-{m}/metrics.jsonl"))
def model_mb(m, key="dp_mb"):
    def walk(o):
        if isinstance(o, dict):
            # plain data parallel: a shard 1 candidate adds its parameters' all-gather
            if o.get("grid") == [4, 1, 1] and key in o and "shard" not in o.get("layout", ""): yield o[key]
            for v in o.values(): yield from walk(v)
        elif isinstance(o, list):
            for v in o: yield from walk(v)
    try:
        got = list(walk(json.load(open(f"{tmp}/{name}-{m}.plan.json"))))
    except OSError:
        return None
    return got[0] if got else None
def node_mb(m):
    # the steady step's bytes out of a node, with the dense warm-up steps mixed in
    link = model_mb(m, "dp_link_mb")
    if link is None: return None
    keys = dict(kv.split("=", 1) for kv in m.split("+")[1:])
    method = m.split("+")[0]
    dflt = max(warm_def, lr_warm) if method == "topk" else warm_def
    warm = int(keys.get("compression_warmup", dflt)) if method in ("topk", "powersgd") else 0
    warm, n = min(warm, steps(m)), steps(m)
    dense = model_mb("none", "dp_link_mb")      # an uncompressed step's
    if warm and dense is None: return None
    return (warm * dense + (n - warm) * link) / n if warm else link
for m in methods:
    t = tests(m)
    hit = next((r["time"] for r in t if ref is not None and r["accuracy"] >= ref - 0.003), None)
    print(f"{m:<{w}} {('%.1f' % hit) if hit is not None else '-':>13} {100 * t[-1]['accuracy']:>8.2f}% "
          f"{t[-1]['time']:>9.1f}  {sent(m)}")
print(f"\n{'method':<{w}} {'model MB/step/rank':>18} {'model MB/step/node':>18} {'tc MB/step/node':>15} {'ratio':>6}")
for m in methods:
    per = [dict(kv.split("=", 1) for kv in l.split()) for l in open(f"{tmp}/{name}-{m}.stats")]
    tc = sum(int(p["tx_bytes"]) for p in per) / len(per) / steps(m) / 1e6
    mb, nb = model_mb(m), node_mb(m)
    print(f"{m:<{w}} {('%.3f' % mb) if mb is not None else '-':>18} {('%.3f' % nb) if nb is not None else '-':>18} "
          f"{tc:>15.3f} {('%.2f' % (tc / nb)) if nb else '-':>6}")
PY
done
