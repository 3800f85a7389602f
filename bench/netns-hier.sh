#!/usr/bin/env bash
# bench/netns-hier.sh - the two-level gradient all-reduce (partition.hierarchical) against the flat
# one on an emulated cluster of 2 nodes x 2 ranks (tests/tools/netns-cluster.sh), beside the
# planner's prediction of both. Both links are measured first with `dtrain bench --network` as the
# 4 ranks of the runs see them (2 nodes x 2 ranks: rank 0 and 3 across the link; 1 node x 4 ranks:
# rank 0 and 3 through the node's loopback; the other two ranks waiting in MPI as in a sum, since
# on this 2-core machine 4 ranks take turns and a message's latency is mostly the receiver's wait
# for a core), written as a cluster spec (network and intra_* keys), and `dtrain plan --json`
# predicts the data 4 layout's gradient sum each way (gradient_sum). Then ROUNDS rounds of
# `dtrain bench` alternate flat and two-level (the machine's drift falls on both alike) and each
# keeps the median of its rounds' "dtrain N bucket(s)" times (the sync alone, not overlapped); min
# and max show the noise.
# usage: bench/netns-hier.sh [MODEL.yaml]   (as root; RATE=1gbit ROUNDS=5 ITERS=20 NETITERS=5 by
# default; LOCK=FILE holds flock FILE over each measurement, the links and the rounds, apart)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
model=$(realpath "${1:-$top/models/mlp.yaml}")
rate=${RATE:-1gbit} rounds=${ROUNDS:-5} iters=${ITERS:-20} netiters=${NETITERS:-5}
dtrain=$top/src/dtrain
tmp=$(mktemp -d /tmp/netns-hier.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
net() {  # net NODES SLOTS FILE: bench --network's JSON across the emulated nodes
  locked "$top/tests/tools/netns-cluster.sh" --nodes "$1" --slots "$2" --rate "$rate" -- sh -c \
    "mpirun \$MPIRUN_NETNS_ARGS -np 4 '$dtrain' bench --network --iters $netiters --json" 2>/dev/null >"$3"
}
net 2 2 "$tmp/link.json" || { echo "netns-hier: bench --network failed" >&2; exit 1; }
net 1 4 "$tmp/intra.json" || { echo "netns-hier: bench --network in a node failed" >&2; exit 1; }
read -r ilat igbs < <(python3 -c 'import json, sys; l = json.load(open(sys.argv[1])); print(l["latency_us"], l["bandwidth_gbs"])' \
  "$tmp/intra.json")
read -r lat gbs eager big < <(python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))
p = {q["bytes"]: q["p2p_us"] for q in l["points"]}
print(l["latency_us"], l["bandwidth_gbs"], l["eager_kb"] or 64, " ".join("%d:%.0f" % (b, p[b]) for b in sorted(p) if b >= 65536))' \
  "$tmp/link.json")
spec="ranks_per_node: 2
threads_per_rank: 1
network: {latency_us: $lat, bandwidth_gbs: $gbs, eager_kb: $eager, intra_latency_us: $ilat, intra_bandwidth_gbs: $igbs}"
printf '%s\npartition: {hierarchical: false}\n' "$spec" >"$tmp/flat.yaml"
printf '%s\npartition: {hierarchical: true}\n' "$spec" >"$tmp/two.yaml"
printf '%s\n' "$spec" >"$tmp/plan.yaml"
echo "== $(basename "$model"), 2 nodes x 2 ranks, link $rate: measured $gbs GB/s, $lat us (eager $eager KiB;" \
     "one-way bytes:us $big); in a node $igbs GB/s, $ilat us"
"$dtrain" plan "$model" --cluster "$tmp/plan.yaml" --ranks 4 --top 100 --no-scaling --json >"$tmp/plan.json" 2>/dev/null
read -r pflat ptwo < <(python3 -c '
import json, sys
def walk(o):
    if isinstance(o, dict):
        if o.get("grid") == [4, 1, 1] and "shard" not in o["layout"] and "gradient_sum" in o:
            yield o["gradient_sum"]
        for v in o.values(): yield from walk(v)
    elif isinstance(o, list):
        for v in o: yield from walk(v)
g = next(walk(json.load(open(sys.argv[1]))), None)
print(*(("%.2f" % g["flat_ms"], "%.2f" % g["two_level_ms"]) if g else ("nan", "nan")))' "$tmp/plan.json")
cat >"$tmp/rounds.sh" <<EOF
for r in \$(seq $rounds); do
  for h in flat two; do
    mpirun \$MPIRUN_NETNS_ARGS -np 4 '$dtrain' bench '$model' --cluster "$tmp/\$h.yaml" --iters $iters 2>&1 |
      sed -n "s/^allreduce of .* dtrain [0-9]* buckets\{0,1\} \([0-9.]*\) ms.*/\$h \1/p"
  done
done
EOF
locked "$top/tests/tools/netns-cluster.sh" --nodes 2 --slots 2 --rate "$rate" -- bash "$tmp/rounds.sh" 2>/dev/null >"$tmp/rounds.txt"
python3 - "$tmp/rounds.txt" "$pflat" "$ptwo" <<'PY'
import statistics, sys
runs = {"flat": [], "two": []}
for line in open(sys.argv[1]):
    k, v = line.split()
    runs[k].append(float(v))
pred = {"flat": float(sys.argv[2]), "two": float(sys.argv[3])}
med = {}
for k, name in (("flat", "flat"), ("two", "two-level")):
    v = runs[k]
    if not v:
        print(f"  {name}: no runs"); continue
    med[k] = statistics.median(v)
    print(f"  {name:9s} measured {med[k]:8.2f} ms (median of {len(v)}; {min(v):.2f} .. {max(v):.2f}), "
          f"predicted {pred[k]:8.2f} ms: error {100 * (pred[k] - med[k]) / med[k]:+.1f}%")
if len(med) == 2:
    print(f"  two-level over flat: measured {med['flat'] / med['two']:.2f}x, predicted {pred['flat'] / pred['two']:.2f}x")
PY
