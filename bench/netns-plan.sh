#!/usr/bin/env bash
# bench/netns-plan.sh - the planner on an emulated 2-node cluster (tests/tools/netns-cluster.sh):
# for each link rate, `dtrain plan --validate` predicts and then runs (over TCP between two network
# namespaces, one rank per node, 1 thread) the best layouts of lenet and the 784-4096-4096-10 MLP,
# printing predicted beside measured step times. The cluster spec tells the planner what the
# emulation is: one rank and one core per node, the link's rate and a TCP round's latency.
# usage: bench/netns-plan.sh [MODEL.yaml ...]   (as root; RATES="1gbit none" by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
models=(); for a in "$@"; do models+=("$(realpath "$a")"); done
[ ${#models[@]} -gt 0 ] || models=("$top/models/lenet.yaml" "$top/bench/models/mlp-4096.yaml")
tmp=$(mktemp -d /tmp/netns-plan.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for rate in ${RATES:-1gbit none}; do
  case $rate in
    none) gbs=3.5 ;;                                    # uncapped veth, measured by bench/netns-bandwidth.sh
    *bit) n=${rate%bit}; case $n in *g) gbs=$(awk "BEGIN { print ${n%g} / 8 }") ;; *m) gbs=$(awk "BEGIN { print ${n%m} / 8000 }") ;; esac ;;
  esac
  printf 'ranks_per_node: 1\ncores_per_node: 1\nnetwork: {latency_us: 50, bandwidth_gbs: %s}\n' "$gbs" > "$tmp/c-$rate.yaml"
  for m in "${models[@]}"; do
    echo "== $(basename "$m"), 2 nodes x 1 rank, link $rate ($gbs GB/s, 50 us)"
    "$top/tests/tools/netns-cluster.sh" --nodes 2 --slots 1 --rate "$rate" -- sh -c \
      "cd '$tmp' && DTRAIN_PLAN_MPIRUN=\"mpirun \$MPIRUN_NETNS_ARGS\" '$top/src/dtrain' plan '$m' --cluster '$tmp/c-$rate.yaml' \
       --ranks 2 --top 3 --validate --steps 20 --no-scaling" 2>&1 | grep -E '^ +[0-9] |measured|chosen|why|rror'
  done
done
