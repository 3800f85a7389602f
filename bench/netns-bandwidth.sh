#!/usr/bin/env bash
# bench/netns-bandwidth.sh - the data-parallel gradient sync across 2 emulated nodes
# (tests/tools/netns-cluster.sh: network namespaces, Open MPI over TCP through veths, each node's
# egress capped by tc tbf): `dtrain bench MODEL --json` on 1 rank per node at each rate, beside
# the same 2 ranks on this machine with shared memory. Prints, per setting, the raw MPI_Allreduce
# and dtrain's bucketed sync of the gradient (ms, GB/s = gradient bytes / time), the share of the
# sync hidden behind backward, the whole step, and the bytes each node's link sent.
# Needs root (see netns-cluster.sh); both "nodes" share this machine's cores.
# Usage: bench/netns-bandwidth.sh [MODEL.yaml] [dtrain bench flags...]
#   e.g. bench/netns-bandwidth.sh models/mlp.yaml --iters 20 --threads 1
# Env: RATES (default "1gbit none"; none = uncapped), DTRAIN (src/dtrain), MPIRUN (mpirun),
#      PYTHON (python3).
set -eu
cd "$(dirname "$0")/.."
MODEL=models/mlp.yaml
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then MODEL=$1; shift; fi
[ $# -gt 0 ] || set -- --iters 20 --warmup 3 --threads 1
RATES=${RATES:-1gbit none}
DTRAIN=$(cd "$(dirname "${DTRAIN:-src/dtrain}")" && pwd)/$(basename "${DTRAIN:-src/dtrain}")
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
export MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the reference: 2 ranks on this machine, Open MPI's shared memory (vader)
if ! timeout -k 5 300 "$MPIRUN" -np 2 "$DTRAIN" bench "$MODEL" --json "$@" >"$tmp/local.json" 2>"$tmp/local.err"; then
  echo "error: mpirun -np 2 dtrain bench failed:" >&2; cat "$tmp/local.err" >&2; exit 1
fi
: >"$tmp/settings"
echo "local shared-memory -" >>"$tmp/settings"
for rate in $RATES; do
  rc=0
  NETNS_STATS=$tmp/$rate.stats bash tests/tools/netns-cluster.sh --nodes 2 --slots 1 --rate "$rate" -- \
    sh -c 'exec timeout -k 5 300 "$MPIRUN" $MPIRUN_NETNS_ARGS -np 2 "$@"' sh "$DTRAIN" bench "$MODEL" --json "$@" \
    >"$tmp/$rate.json" 2>"$tmp/$rate.err" || rc=$?
  if [ "$rc" = 77 ]; then grep SKIP "$tmp/$rate.err" >&2; exit 77; fi
  [ "$rc" = 0 ] || { echo "error: dtrain bench on 2 emulated nodes at $rate failed (exit $rc):" >&2; cat "$tmp/$rate.err" >&2; exit 1; }
  echo "$rate 2-nodes-tcp $tmp/$rate.stats" >>"$tmp/settings"
done

echo "ran: $MPIRUN -np 2 $DTRAIN bench $MODEL --json $*"
for rate in $RATES; do
  echo "     tests/tools/netns-cluster.sh --nodes 2 --slots 1 --rate $rate -- \\"
  echo "       $MPIRUN \$MPIRUN_NETNS_ARGS -np 2 $DTRAIN bench $MODEL --json $*"
done
"$PY" - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rows = []
for line in open(f"{tmp}/settings"):
    rate, kind, stats = line.split()
    if stats == "-":
        label, m, sent = "1 machine, shared memory", json.load(open(f"{tmp}/local.json"))[0], "-"
    else:
        label = f"2 nodes, TCP, {'uncapped' if rate == 'none' else rate}"
        m = json.load(open(f"{tmp}/{rate}.json"))[0]
        per = [dict(kv.split("=", 1) for kv in l.split()) for l in open(stats)]
        sent = " / ".join(f"{int(p['tx_bytes']) / 2**20:.1f}" for p in per)
    rows.append((label, m, sent))
m0 = rows[0][1]
print(f"model {m0['model']}: {m0['params']} parameters, gradient {m0['allreduce']['bytes'] / 2**20:.2f} MiB "
      f"in {m0['allreduce']['buckets']} bucket(s); 2 ranks, global batch {m0['batch']}, "
      f"{m0['threads']} thread(s) per rank; medians of {m0['iters']} iterations")
print(f"{'':<26} {'MPI_Allreduce':>19} {'dtrain sync':>19} {'hidden':>6} {'step ms':>8} {'samples/s':>9}"
      f"  MiB sent by node 0 / 1")
for label, m, sent in rows:
    a = m["allreduce"]
    print(f"{label:<26} {a['mpi_ms']:>7.3f} ms {a['mpi_gbs']:>5.3f} GB/s {a['dtrain_ms']:>7.3f} ms {a['dtrain_gbs']:>5.3f} GB/s"
          f" {100 * a['hidden']:>5.0f}% {m['step_ms']:>8.3f} {m['samples_per_sec']:>9.0f}  {sent}")
PY
