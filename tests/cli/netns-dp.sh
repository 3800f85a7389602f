#!/usr/bin/env bash
# tests/cli/netns-dp.sh - dtrain across emulated nodes (tests/tools/netns-cluster.sh: network
# namespaces joined by a bridge, each node's egress capped at 1gbit with tc tbf, ranks talking only
# Open MPI TCP, no shared memory). Data parallel over 2 nodes x 1 slot equals 1 rank within 1e-5,
# and the tc counters of each node's link show at least the gradient bytes of every step crossed
# it; a data 2 x pipeline 2 grid over 2 nodes x 2 slots (replicas on different nodes, the stages of
# a replica on one node) is bitwise the 2-rank data-parallel run. The script leaves no namespace,
# link, file or process behind: after success, after a failing command, after a set-up failing
# half-way, after SIGTERM. Skips (77) where the machine cannot: not root, no `ip netns`, veth, tbf.
. "$(dirname "$0")/lib.sh"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
D=$top_srcdir/tests/cli
CLUSTER=$top_srcdir/tests/tools/netns-cluster.sh
export MPIRUN
# can this machine emulate nodes at all (root, ip netns, veth, bridge, tc tbf)? if not, skip saying why
bash "$CLUSTER" --nodes 1 -- true >/dev/null 2>"$TMP/probe.err"
[ $? = 77 ] && { sed -n 's/.*SKIP: /SKIP: /p' "$TMP/probe.err"; exit 77; }

# in-cluster.sh runs in the head namespace and starts mpirun across the nodes. The timeout is
# inside, so that the cluster script itself is never killed before its clean-up.
cat >"$TMP/in-cluster.sh" <<'EOF'
exec timeout -k 5 50 "$MPIRUN" $MPIRUN_NETNS_ARGS "$@"
EOF
# nodes NAME NODES SLOTS NP SPEC CLUSTER [flags...] : a dtrain run on NODES emulated nodes at 1gbit
nodes() {
  local name=$1 k=$2 s=$3 np=$4 spec=$5 cl=$6 rc; shift 6
  NETNS_STATS=$TMP/$name.stats bash "$CLUSTER" --nodes "$k" --slots "$s" --rate 1gbit -- \
    sh "$TMP/in-cluster.sh" -np "$np" "$DTRAIN" run "$spec" ${cl:+--cluster "$cl"} --out "$TMP/$name" \
    --threads 1 --quiet --collective-timeout 60 "$@" >"$TMP/$name.log" 2>&1
  rc=$?
  [ "$rc" = 77 ] && { sed 's/^/  | /' "$TMP/$name.log"; echo "SKIP: this machine cannot emulate nodes"; exit 77; }
  [ "$rc" = 0 ] || { fail "$name: exit $rc"; sed 's/^/  | /' "$TMP/$name.log" | tail -15; }
}
local_run() { # local_run NAME NP SPEC CLUSTER [flags...] : the reference, plain mpirun on this machine
  local name=$1 np=$2 spec=$3 cl=$4; shift 4
  timeout -k 5 60 "$MPIRUN" -np "$np" "$DTRAIN" run "$spec" ${cl:+--cluster "$cl"} --out "$TMP/$name" \
    --threads 1 --quiet --collective-timeout 60 "$@" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: exit $?"; sed 's/^/  | /' "$TMP/$name.log" | head; }
}
# crossed NAME SPEC WHAT : every node's egress through the tbf >= steps x 4 x parameters. Each of
# the two data-parallel replicas ends a step with the sum of both gradients, so it has to receive
# the other's contribution to every element: 4 bytes per parameter per step, at the least, leave
# each node (more with the TCP/IP headers, the daemons' messages and the loss averages).
crossed() {
  local name=$1 params steps want
  params=$("$DTRAIN" check "$2" 2>/dev/null | sed -n 's/^parameters: \([0-9]*\).*/\1/p')
  steps=$(tail -1 "$TMP/$name/metrics.jsonl" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
  want=$((${steps:-0} * 4 * ${params:-0}))
  if [ "$want" -gt 0 ] && [ "$(wc -l <"$TMP/$name.stats")" = 2 ] &&
     awk -v want="$want" '{ for (i = 1; i <= NF; i++) if ($i ~ /^qdisc_bytes=/) { split($i, kv, "="); if (kv[2] + 0 < want) bad = 1; n++ } }
                          END { exit bad || n != 2 }' "$TMP/$name.stats"; then
    pass "$3: each node sent >= $want bytes ($steps steps x 4 x $params) through its 1gbit cap ($(grep -o 'qdisc_bytes=[0-9]*' "$TMP/$name.stats" | tr '\n' ' '))"
  else
    fail "$3: wanted >= $want bytes ($steps steps x 4 x $params) on each link; counters: $(cat "$TMP/$name.stats" 2>/dev/null)"
  fi
}
# gone LOG WHAT : what the run logged in LOG ("setting up: namespaces dtrain-PID-*, files in DIR")
# is gone: no namespace dtrain-PID-*, no DIR (hostfile, agent), no process naming DIR (daemons,
# ranks), and no link in the root namespace that was not there before this test
links() { ip -o link show | awk -F': ' '{ print $2 }' | sed 's/@.*//' | sort; }
links >"$TMP/links.before"
gone() {
  local tag dir left=
  tag=$(sed -n 's/.*setting up: namespaces \(dtrain-[0-9]*-\)\*, files in .*/\1/p' "$1" | head -1)
  dir=$(sed -n 's/.*setting up: namespaces dtrain-[0-9]*-\*, files in \(.*\)/\1/p' "$1" | head -1)
  [ -n "$tag" ] && [ -n "$dir" ] || { fail "$2: no set-up line in $1"; return; }
  left=$(ip netns list | awk '{ print $1 }' | grep -F "$tag" | sed 's/^/ namespace:/' | tr -d '\n')
  [ -e "$dir" ] && left="$left dir:$dir"
  pgrep -f "$dir" >/dev/null && left="$left processes:$(pgrep -f "$dir" | tr '\n' ,)"
  links >"$TMP/links.after"
  left="$left$(comm -13 "$TMP/links.before" "$TMP/links.after" | sed 's/^/ link:/' | tr -d '\n')"
  [ -z "$left" ] && pass "$2: nothing left behind (${tag}*, $dir)" || fail "$2: left behind:$left"
}

# ---- data parallel: 2 nodes x 1 slot against 1 rank, 100 steps of the MLP with dropout ----
local_run ref 1 "$D/dp-mlp.yaml" "" --max-steps 100
nodes dp 2 1 2 "$D/dp-mlp.yaml" "" --max-steps 100
$CMP "$TMP/ref/model.safetensors" "$TMP/dp/model.safetensors" --tol 1e-5 >"$TMP/cmp" 2>&1 \
  && pass "2 nodes x 1 rank = 1 rank ($(cat "$TMP/cmp"))" || fail "2 nodes x 1 rank vs 1 rank: $(cat "$TMP/cmp")"
crossed dp "$D/dp-mlp.yaml" "data parallel"
gone "$TMP/dp.log" "data parallel"

# ---- data 2 x pipeline 2 over 2 nodes x 2 slots: ranks 0, 1 (replica 0's two stages) on node 0,
# ranks 2, 3 on node 1; the stages' gradients cross the link, the stage-to-stage messages do not ----
printf 'partition: {micro_batch: 8}\n' >"$TMP/acc8.yaml"
printf 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2}\n' >"$TMP/hyb.yaml"
local_run dp2 2 "$D/pp-mlp.yaml" "$TMP/acc8.yaml"
nodes hyb 2 2 4 "$D/pp-mlp.yaml" "$TMP/hyb.yaml"
a=$($CMP --sha256 "$TMP/dp2/model.safetensors" | cut -d' ' -f1); b=$($CMP --sha256 "$TMP/hyb/model.safetensors" | cut -d' ' -f1)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "data 2 x pipeline 2 on 2 nodes x 2 slots = data parallel 2: bitwise equal" \
  || fail "hybrid on 2 nodes vs data parallel 2: $($CMP "$TMP/dp2/model.safetensors" "$TMP/hyb/model.safetensors" --tol 0 2>&1)"
crossed hyb "$D/pp-mlp.yaml" "data 2 x pipeline 2"
gone "$TMP/hyb.log" "hybrid"

# ---- the clean-up on the other ways out ----
expect_rc 3 "a command failing with 3: exit 3" bash "$CLUSTER" --nodes 2 -- sh -c 'exit 3'
gone "$TMP/err" "after a failing command"
# the head and node 0 exist when tc refuses node 0's rate
expect_rc 1 "set-up failing half-way (a rate tc refuses): exit 1" bash "$CLUSTER" --nodes 2 --rate 1parsec -- true
grep -q "tc tbf rate 1parsec" "$TMP/err" && pass "the refused rate named" || fail "rate message: $(cat "$TMP/err")"
gone "$TMP/err" "after a failed set-up"
# SIGTERM while the command runs: the command is stopped, everything removed, exit 143
bash "$CLUSTER" --nodes 2 -- sh -c 'touch "$0"; exec sleep 30' "$TMP/started" >/dev/null 2>"$TMP/term.err" &
cpid=$!
for _ in $(seq 100); do [ -e "$TMP/started" ] && break; sleep 0.1; done
kill -TERM "$cpid"; wait "$cpid"; rc=$?
[ "$rc" = 143 ] && pass "SIGTERM: exit 143" || fail "SIGTERM: exit $rc: $(cat "$TMP/term.err")"
gone "$TMP/term.err" "after SIGTERM"
finish
