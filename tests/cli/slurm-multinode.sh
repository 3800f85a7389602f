#!/usr/bin/env bash
# tests/cli/slurm-multinode.sh - the multi-node Slurm examples on an emulated 3-node Slurm cluster
# (tests/tools/netns-slurm.sh: a slurmd per network namespace, links capped at 1gbit), with only
# their documented site variables changed (sbatch's --nodes/--ntasks-per-node/--cpus-per-task,
# the cluster spec's EDIT keys, DTRAIN, DTRAIN_MODEL, DTRAIN_OUT, DTRAIN_ARGS, DTRAIN_LAUNCHER):
#   train-multinode.sbatch, srun --mpi=pmix, 2 nodes x 2 ranks: within 1e-5 of 1 rank;
#   train-multinode.sbatch, mpirun in the allocation, 3 nodes x 1 rank, reproducible: bitwise 1 rank;
#   train-hybrid.sbatch, data 2 x pipeline 3 on 3 nodes x 2 ranks (each replica's pipeline spans
#   two nodes), under srun and under mpirun: within 1e-5 of 1 rank, and the two launches bitwise.
# Each rank runs through a DTRAIN wrapper that records its rank, SLURMD_NODENAME and network
# namespace before it becomes dtrain: the ranks ran in the namespaces of the nodes Slurm placed
# them on. The tc counters of each node's link grew by at least the gradient bytes that node had to
# send. The cluster leaves nothing behind, also when stopped by SIGTERM. Skips (77) when not root,
# or without ip netns/veth/tbf, Slurm, munge or mpirun.
# Everything the nodes read or write is under /var/tmp, the "shared file system": each emulated
# node has a /tmp of its own.
TMPDIR=/var/tmp
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces, Slurm's daemons)"; exit 77; }
EX=$top_srcdir/examples/slurm
SPEC=$top_srcdir/tests/cli/dp-mlp.yaml
SLURM=$top_srcdir/tests/tools/netns-slurm.sh
STEPS=30
T0=$(date +%s%N)
say() { printf '[%6d ms] %s\n' $((($(date +%s%N) - T0) / 1000000)) "$*"; }
chmod 755 "$TMP"          # the ranks read and write here

# ---- the site's edits: threads_per_rank = --cpus-per-task = 1, ranks_per_node = --ntasks-per-node ----
sed 's/^threads_per_rank: .*/threads_per_rank: 1/; s/^ranks_per_node: .*/ranks_per_node: 2/' \
  "$EX/cluster-multinode.yaml" >"$TMP/multinode.yaml"
# the same for 1 rank per node, in reproducible mode
sed 's/^threads_per_rank: .*/threads_per_rank: 1/; s/^ranks_per_node: .*/ranks_per_node: 1/; /^  bucket_mb:/a\
  reproducible: true\
  chunks: 16' "$EX/cluster-multinode.yaml" >"$TMP/repro.yaml"
# the grid: data 2 x pipeline 3 = 6 ranks on 3 nodes x 2: ranks 0 1 | 2 3 | 4 5, so replica 0's
# stages 0 1 sit on n0 and its stage 2 on n1, replica 1's stage 0 on n1 and stages 1 2 on n2
sed 's/^ranks: .*/ranks: 6/; s/^threads_per_rank: .*/threads_per_rank: 1/; s/^  pipeline: .*/  pipeline: 3/' \
  "$EX/cluster-hybrid.yaml" >"$TMP/hybrid.yaml"
grep -q '^  reproducible: true' "$TMP/repro.yaml" && grep -q '^  pipeline: 3' "$TMP/hybrid.yaml" \
  || { fail "the example cluster specs no longer have the keys this test edits"; finish; }
MB=$(sed -n 's/^  micro_batches: //p' "$TMP/hybrid.yaml")
BATCH=$(sed -n 's/^  batch: //p' "$SPEC")
printf 'threads_per_rank: 1\npartition: {micro_batch: %d}\n' $((BATCH / 2 / MB)) >"$TMP/micro.yaml"

# the DTRAIN wrapper: one line per rank, then the rank becomes dtrain (same process). Its parent
# is what started it: slurmstepd under srun, Open MPI's orted under mpirun
cat >"$TMP/where.sh" <<EOF
#!/bin/sh
r=\${OMPI_COMM_WORLD_RANK:-\${PMIX_RANK:-\${SLURM_PROCID:-?}}}
echo "rank=\$r node=\${SLURMD_NODENAME:-?} \$(readlink /proc/self/ns/net) by=\$(cat /proc/\$PPID/comm)" >>"$TMP/where.\$SLURM_JOB_ID"
exec "$DTRAIN" "\$@"
EOF
chmod 755 "$TMP/where.sh"

# ---- in the cluster: the jobs one after another, each with the links' counters around it ----
cat >"$TMP/jobs.sh" <<'EOF'
# jobs.sh TMP EX SPEC STEPS: runs in netns-slurm.sh's head namespace
TMP=$1 EX=$2 SPEC=$3 STEPS=$4
read -r -a NS <<<"$NETNS_NAMESPACES"
for ((i = 0; i < ${#NS[@]}; i++)); do    # node -> its namespace's inode, as readlink shows it
  echo "n$i net:[$(stat -L -c %i "/run/netns/${NS[i]}")]"
done >"$TMP/nodes"
counters() { for ns in "${NS[@]}"; do tc -n "$ns" -s qdisc show dev eth0 | awk '/^ Sent /{ printf "%s ", $2; exit }'; done; }
field() { scontrol show job -o "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 | cut -d= -f2-; }
# job NAME SCRIPT LAUNCHER NODES TASKS_PER_NODE CLUSTER
job() {
  local name=$1 id before state end
  before=$(counters)
  id=$(env DTRAIN="$TMP/where.sh" DTRAIN_MODEL="$SPEC" DTRAIN_CLUSTER="$TMP/$6.yaml" DTRAIN_OUT="$TMP/$name" \
       DTRAIN_ARGS="--max-steps $STEPS" DTRAIN_LAUNCHER=$3 \
       sbatch --parsable --nodes="$4" --ntasks-per-node="$5" --cpus-per-task=1 --chdir "$TMP" \
       -o "$TMP/$name.out" "$EX/$2") || { echo "$name state=NOT_SUBMITTED" >>"$TMP/jobs"; return; }
  end=$((SECONDS + 120))
  while :; do
    state=$(field "$id" JobState)
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
    [ $SECONDS -lt $end ] || { scancel "$id"; state=STUCK; break; }
    sleep 0.2
  done
  mv "$TMP/where.$id" "$TMP/$name.where" 2>/dev/null
  echo "$name id=$id state=$state exit=$(field "$id" ExitCode) nodes=$(field "$id" NodeList) before=$before after=$(counters)" >>"$TMP/jobs"
}
job mn-srun   train-multinode.sbatch srun   2 2 multinode
job mn-mpirun train-multinode.sbatch mpirun 3 1 repro
job hy-srun   train-hybrid.sbatch    srun   3 2 hybrid
job hy-mpirun train-hybrid.sbatch    mpirun 3 2 hybrid
EOF
say "cluster: 3 nodes at 1gbit, 4 jobs"
timeout -k 10 600 bash "$SLURM" --nodes 3 --rate 1gbit -- bash "$TMP/jobs.sh" "$TMP" "$EX" "$SPEC" "$STEPS" \
  >"$TMP/cluster.log" 2>&1
rc=$?
[ $rc = 77 ] && { sed -n 's/.*SKIP: /SKIP: /p' "$TMP/cluster.log"; exit 77; }
[ $rc = 0 ] && pass "the cluster came up, ran the jobs and went away (exit 0)" \
  || { fail "netns-slurm.sh: exit $rc"; sed 's/^/  | /' "$TMP/cluster.log" | tail -20; }
say "cluster done"

# ---- the 1-rank references, one thread like the ranks ----
ref() { "$DTRAIN" run "$SPEC" --out "$TMP/$1" --max-steps $STEPS --threads 1 --quiet "${@:2}" >"$TMP/$1.log" 2>&1 \
          || { fail "1-rank $1: exit $?"; sed 's/^/  | /' "$TMP/$1.log" | tail -5; }; }
ref ref
ref ref-repro --cluster "$TMP/repro.yaml"
ref ref-micro --cluster "$TMP/micro.yaml"

# ---- the checks ----
PARAMS=$("$DTRAIN" check "$SPEC" 2>/dev/null | sed -n 's/^parameters: \([0-9]*\).*/\1/p')
jobline() { grep "^$1 " "$TMP/jobs"; }
# done_ok NAME RANKS: the job completed with exit 0, dtrain ran RANKS ranks and wrote its weights
done_ok() {
  local l; l=$(jobline "$1")
  case $l in *" state=COMPLETED exit=0:0 "*) pass "$1: COMPLETED, exit 0 (${l#* }" | sed 's/ before=.*/)/' ;;
    *) fail "$1: $l"; sed 's/^/  | /' "$TMP/$1.out" 2>/dev/null | grep -v '^  | epoch' | tail -20; return 1 ;; esac
  grep -q "^dtrain .* $2 ranks," "$TMP/$1.out" && [ -s "$TMP/$1/model.safetensors" ] \
    && pass "$1: $2 ranks, model written" || fail "$1: no '$2 ranks' header or no model"
}
# placed NAME NODE... : rank k ran on the k-th NODE (SLURMD_NODENAME) and in that node's namespace,
# started by slurmstepd (NAME *-srun) or orted (*-mpirun)
placed() {
  local name=$1 k=0 want ns got bad= by=slurmstepd; shift
  case $name in *-mpirun) by=orted ;; esac
  [ "$(wc -l <"$TMP/$name.where" 2>/dev/null)" = $# ] || { fail "$name: $# ranks expected in $(cat "$TMP/$name.where" 2>/dev/null)"; return; }
  for want; do
    ns=$(sed -n "s/^$want //p" "$TMP/nodes")
    got=$(grep "^rank=$k " "$TMP/$name.where")
    [ "$got" = "rank=$k node=$want $ns by=$by" ] || bad="$bad [rank $k: wanted $want $ns by=$by, got '$got']"
    k=$((k + 1))
  done
  [ -z "$bad" ] && pass "$name: ranks 0..$((k - 1)) ran on $* (SLURMD_NODENAME and the node's netns), started by $by" || fail "$name:$bad"
}
# crossed NAME MIN... : the tc byte counter of node k's link grew by at least MIN_k during the job
crossed() {
  local name=$1 l b a k=0 grew= bad=; shift
  l=$(jobline "$name")
  read -r -a b <<<"$(sed 's/.* before=\(.*\) after=.*/\1/' <<<"$l")"
  read -r -a a <<<"$(sed 's/.* after=//' <<<"$l")"
  for min; do
    grew="$grew n$k:+$((${a[k]:-0} - ${b[k]:-0}))>=$min"
    [ $((${a[k]:-0} - ${b[k]:-0})) -ge "$min" ] || bad=1
    k=$((k + 1))
  done
  [ -z "$bad" ] && pass "$name: bytes through each node's 1gbit cap:$grew" || fail "$name: too few bytes crossed:$grew"
}
grad=$((STEPS * 4 * PARAMS))    # each data-parallel node must receive the others' sum of every gradient

done_ok mn-srun 4 && {
  placed mn-srun n0 n0 n1 n1
  close ref mn-srun "multinode, srun, 2 nodes x 2 ranks = 1 rank"
  crossed mn-srun $grad $grad
}
done_ok mn-mpirun 3 && {
  placed mn-mpirun n0 n1 n2
  same ref-repro mn-mpirun "multinode, mpirun in the allocation, 3 nodes x 1 rank, reproducible = 1 rank"
  crossed mn-mpirun $grad $grad $grad
}
# the hybrid's stage sizes from its own table ("  stage S: ..." then the rank line with its params)
read -r -a SP <<<"$(awk '/^  stage [0-9]+:/ { s = 1; next } s && /^[0-9]/ { printf "%s ", $4; s = 0 }' "$TMP/hy-srun.out" 2>/dev/null)"
for name in hy-srun hy-mpirun; do
  done_ok $name 6 || continue
  placed $name n0 n0 n1 n1 n2 n2
  close ref-micro $name "hybrid data 2 x pipeline 3 on 3 nodes, ${name#hy-} = 1 rank"
  # stage s's two replicas sit on different nodes, so each node sends the gradients of its two
  # stages: n0 holds stages 0 1, n1 stages 2 0, n2 stages 1 2
  [ ${#SP[@]} = 3 ] && crossed $name $((STEPS * 4 * (SP[0] + SP[1]))) $((STEPS * 4 * (SP[2] + SP[0]))) \
    $((STEPS * 4 * (SP[1] + SP[2]))) || fail "$name: no stage table in the job output"
done
same hy-srun hy-mpirun "hybrid: srun and mpirun launches"

# ---- nothing left: the state directory, the namespaces, the daemons; also after SIGTERM ----
gone() {
  local dir tag left=
  dir=$(sed -n 's/^netns-slurm: Slurm state in //p' "$1" | head -1)
  tag=$(sed -n 's/.*setting up: namespaces \(dtrain-[0-9]*-\)\*, files in .*/\1/p' "$1" | head -1)
  [ -n "$dir" ] && [ -n "$tag" ] || { fail "$2: no set-up lines in $1"; return; }
  [ -e "$dir" ] && left="$left dir:$dir"
  ip netns list | grep -q "^$tag" && left="$left namespaces:$tag*"
  pgrep -f "$dir" >/dev/null && left="$left processes:$(pgrep -f "$dir" | tr '\n' ,)"
  [ -z "$left" ] && pass "$2: nothing left behind ($dir, $tag*)" || fail "$2: left behind:$left"
}
gone "$TMP/cluster.log" "after the jobs"
bash "$SLURM" --nodes 2 -- sh -c 'touch "$0"; exec sleep 60' "$TMP/started" >/dev/null 2>"$TMP/term.err" &
cpid=$!
for _ in $(seq 300); do [ -e "$TMP/started" ] && break; sleep 0.1; done
kill -TERM "$cpid"; wait "$cpid"; rc=$?
[ "$rc" = 143 ] && pass "SIGTERM while the command runs: exit 143" || fail "SIGTERM: exit $rc: $(tail -5 "$TMP/term.err")"
gone "$TMP/term.err" "after SIGTERM"
say "done"
finish
