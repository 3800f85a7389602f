#!/usr/bin/env bash
# tests/cli/mpirun-elastic.sh - examples/mpirun/train-elastic.sh over 3 emulated hosts
# (tests/tools/netns-cluster.sh, 1 rank each, reproducible data parallel): rank 1 is killed
# (SIGKILL) once the checkpoint of step 40 exists; the recipe relaunches on hosts 0 and 2 without
# host 1, the run completes, its weights are bitwise those of 1 uninterrupted rank, and
# metrics.jsonl has the restart line. Skips (77) where the machine cannot emulate hosts.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
CLUSTER=$top_srcdir/tests/tools/netns-cluster.sh
bash "$CLUSTER" --nodes 1 -- true >/dev/null 2>"$TMP/probe.err"
[ $? = 77 ] && { sed -n 's/.*SKIP: /SKIP: /p' "$TMP/probe.err"; exit 77; }
SPEC=$top_srcdir/tests/cli/dp-mlp.yaml
ARGS="--max-steps 100 --set train.checkpoint_every=10 --set train.keep_checkpoints=100 --threads 1 --quiet"
printf 'collective_timeout: 30\npartition: {strategy: data, reproducible: true, chunks: 16}\n' >"$TMP/repro.yaml"
cat >"$TMP/where.sh" <<EOF
#!/bin/sh
echo "rank=\$OMPI_COMM_WORLD_RANK ns=\$(ip netns identify \$\$) pid=\$\$" >>"$TMP/where"
exec "$DTRAIN" "\$@"
EOF
chmod 755 "$TMP/where.sh"
cat >"$TMP/in.sh" <<EOF
# in the head namespace: the recipe over the hosts' addresses, and the kill of rank 1 at step 40
args=\$(echo "\$MPIRUN_NETNS_ARGS" | sed 's/--hostfile [^ ]* //')
( end=\$((SECONDS + 60))
  until [ -d "$TMP/el/checkpoints/step-00000040" ] || [ \$SECONDS -ge \$end ]; do sleep 0.05; done
  kill -KILL "\$(sed -n 's/^rank=1 .* pid=\([0-9]*\)\$/\1/p' "$TMP/where" | head -n 1)" ) &
DTRAIN="$TMP/where.sh" DTRAIN_HOSTS="\$NETNS_ADDRS" MPIRUN_ARGS="\$args" DTRAIN_FAULT=slow@rank=0,step=1,secs=0.03 \
  timeout -k 5 150 bash "$top_srcdir/examples/mpirun/train-elastic.sh" "$SPEC" --cluster "$TMP/repro.yaml" \
  --out "$TMP/el" $ARGS
EOF
bash "$CLUSTER" --nodes 3 --slots 1 --rate 1gbit -- bash "$TMP/in.sh" >"$TMP/el.log" 2>&1
rc=$?
[ $rc = 0 ] && pass "rank 1 killed, the run completed (exit 0)" || { fail "exit $rc"; tail -n 30 "$TMP/el.log" | sed 's/^/  | /'; }
grep -q '^== restart 1 at .*: dtrain exited [0-9]*, host [0-9.]*\.12 (ranks 1) left out; 2 rank(s) on [0-9.]*\.11 [0-9.]*\.13 continue' "$TMP/el.log" \
  && pass "relaunched once without host 1" || { fail "no relaunch line"; grep '^==' "$TMP/el.log"; }
# the second launch's ranks: in the namespaces of hosts 0 and 2
sed -n '4,$p' "$TMP/where" | sed 's/.* ns=\([^ ]*\) .*/\1/' | sed 's/.*-//' | sort | tr '\n' ' ' >"$TMP/ns2"
[ "$(cat "$TMP/ns2")" = "n0 n2 " ] && pass "the relaunch ran on hosts 0 and 2" || fail "relaunch namespaces: $(cat "$TMP/where")"
grep -qE '^\{"restart":1,"failed_at":[0-9.]+,"lost_ranks":\[1\],"lost_nodes":"[0-9.]+\.12","from_step":[0-9]+,"first_step":[0-9]+,"steps_redone":[0-9]+,"recovery_s":[0-9.]+\}$' \
  "$TMP/el/metrics.jsonl" && pass "metrics.jsonl's restart line ($(grep '^{"restart"' "$TMP/el/metrics.jsonl"))" \
  || fail "restart line: $(grep restart "$TMP/el/metrics.jsonl")"
"$DTRAIN" run "$SPEC" --cluster "$TMP/repro.yaml" --out "$TMP/one" $ARGS >"$TMP/one.log" 2>&1 || fail "1 rank: exit $?"
same one el "the elastic run = 1 uninterrupted rank (reproducible)"
finish
