#!/usr/bin/env bash
# bench/netns-plan.sh - the planner on an emulated 2-node cluster (tests/tools/netns-cluster.sh):
# for each link rate, `dtrain plan --validate` predicts and then runs (over TCP between two network
# namespaces, one rank per node, 1 thread) the best layouts of lenet and the 784-4096-4096-10 MLP,
# printing predicted beside measured step times. The cluster spec tells the planner what the
# emulation is: one rank and one core per node, and the link as `dtrain bench --network` measures it.
# usage: bench/netns-plan.sh [MODEL.yaml ...]   (as root; RATES="1gbit none" by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
models=(); for a in "$@"; do models+=("$(realpath "$a")"); done
[ ${#models[@]} -gt 0 ] || models=("$top/models/lenet.yaml" "$top/bench/models/mlp-4096.yaml")
tmp=$(mktemp -d /tmp/netns-plan.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for rate in ${RATES:-1gbit none}; do
  # the link as dtrain bench --network measures it across the two nodes
  "$top/tests/tools/netns-cluster.sh" --nodes 2 --slots 1 --rate "$rate" -- sh -c \
    "mpirun \$MPIRUN_NETNS_ARGS -np 2 '$top/src/dtrain' bench --network --iters 10 --json" 2>/dev/null > "$tmp/net-$rate.json"
  read -r lat gbs eager so sg < <(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['latency_us'], j['bandwidth_gbs'], j['eager_kb'] or 64, j['send_overhead_us'], j['send_overhead_gbs'])" "$tmp/net-$rate.json")
  printf 'ranks_per_node: 1\ncores_per_node: 1\nnetwork: {latency_us: %s, bandwidth_gbs: %s, eager_kb: %s, send_overhead_us: %s, send_overhead_gbs: %s}\n' \
    "$lat" "$gbs" "$eager" "$so" "$sg" > "$tmp/c-$rate.yaml"
  for m in "${models[@]}"; do
    echo "== $(basename "$m"), 2 nodes x 1 rank, link $rate (measured: $gbs GB/s, $lat us, eager limit $eager KiB, a send costs its core $so us + 1 B per $sg GB/s)"
    "$top/tests/tools/netns-cluster.sh" --nodes 2 --slots 1 --rate "$rate" -- sh -c \
      "cd '$tmp' && DTRAIN_PLAN_MPIRUN=\"mpirun \$MPIRUN_NETNS_ARGS\" '$top/src/dtrain' plan '$m' --cluster '$tmp/c-$rate.yaml' \
       --ranks 2 --top 3 --validate --steps 20 --no-scaling" 2>&1 | grep -E '^ +[0-9] |measured|chosen|why|rror'
  done
done
