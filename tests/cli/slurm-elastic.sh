#!/usr/bin/env bash
# tests/cli/slurm-elastic.sh - examples/slurm/train-elastic.sbatch on an emulated 3-node Slurm
# (tests/tools/netns-slurm.sh): data parallel, reproducible, 3 nodes x 1 rank; node n1's rank is
# killed (SIGKILL, from outside) once the checkpoint of step 40 exists; the job relaunches on n0
# and n2 without n1, completes, and its weights are bitwise those of a clean 2-rank resume from the
# checkpoint it resumed from (and of 1 uninterrupted rank); the relaunch's metrics.jsonl has its
# restart line (lost rank and node, steps redone, seconds from the kill to its first step). The same with n1 cut off (its link
# down, then up again once the job has gone on without it). A rank killed before the first
# checkpoint: the relaunch starts over, equal to 1 rank too. With the fixed grid of
# cluster-hybrid.yaml (data 2 x pipeline 2) on 2 nodes x 2, the relaunch on the one node left runs
# data 1 x pipeline 2 (elastic: replan, the default), says so in the log and the restart line, and
# equals a clean 2-rank resume on that layout; with elastic: strict it is refused by dtrain at the
# key and the job ends with exit 2 and the script's line saying why.
# Skips (77) when not root, or without ip netns/veth/tbf, Slurm, munge or mpirun.
TMPDIR=/var/tmp           # each emulated node has its own /tmp: the job's files go here
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (namespaces, Slurm's daemons)"; exit 77; }
EX=$top_srcdir/examples/slurm
SPEC=$top_srcdir/tests/cli/dp-mlp.yaml
STEPS=100
# a checkpoint every 10 steps, all kept (the clean resume below starts from the one used)
ARGS="--max-steps $STEPS --set train.checkpoint_every=10 --set train.keep_checkpoints=100"
# rank 0 sleeps 30 ms a step, so that the kill lands mid-run (the model trains 100 steps in 0.3 s)
SLOW="slow@rank=0,step=1,secs=0.03"
chmod 755 "$TMP"
printf 'threads_per_rank: 1\ncollective_timeout: 30\npartition: {strategy: data, sync: allreduce, reproducible: true, chunks: 16}\n' \
  >"$TMP/repro.yaml"
sed 's/^collective_timeout: .*/collective_timeout: 5/' "$TMP/repro.yaml" >"$TMP/repro5.yaml"
sed 's/^threads_per_rank: .*/threads_per_rank: 1/' "$EX/cluster-hybrid.yaml" >"$TMP/hybrid.yaml"
{ cat "$TMP/hybrid.yaml"; echo 'elastic: strict'; } >"$TMP/strict.yaml"
# the nearest layout to hybrid.yaml on 2 ranks, written out, for the clean resume
sed -e '/^ranks:/d' -e 's/^  data: 2$/  data: 1/' "$TMP/hybrid.yaml" >"$TMP/near.yaml"
cat >"$TMP/where.sh" <<EOF
#!/bin/sh
echo "rank=\${PMIX_RANK:-\${SLURM_PROCID:-?}} node=\${SLURMD_NODENAME:-?} pid=\$\$" >>"$TMP/where.\$SLURM_JOB_ID"
exec "$DTRAIN" "\$@"
EOF
chmod 755 "$TMP/where.sh"

cat >"$TMP/jobs.sh" <<'EOF'
# jobs.sh TMP EX SPEC ARGS SLOW: in netns-slurm.sh's head namespace
TMP=$1 EX=$2 SPEC=$3 ARGS=$4 SLOW=$5
field() { scontrol show job -o "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 | cut -d= -f2-; }
ms() { echo $(($(date +%s%N) / 1000000)); }
read -r -a NS <<<"$NETNS_NAMESPACES"
# job NAME CLUSTER NODES PER KILLRANK CKPT: submit, kill rank KILLRANK once checkpoint CKPT exists;
# KILLRANK "cut" takes node n1's link down instead, and up again once the job has relaunched
# without it (a partition that heals: Slurm can then end the old step there, and the job ends)
job() {
  local name=$1 id state end pid= t
  local args=$ARGS
  [ "$6" = early ] && args=${ARGS%% --set*}
  id=$(env DTRAIN="$TMP/where.sh" DTRAIN_MODEL="$SPEC" DTRAIN_CLUSTER="$TMP/$2.yaml" DTRAIN_OUT="$TMP/$name" \
       DTRAIN_ARGS="$args" DTRAIN_FAULT="$SLOW" \
       sbatch --parsable --nodes="$3" --ntasks-per-node="$4" --cpus-per-task=1 --chdir "$TMP" \
       -o "$TMP/$name.out" "$EX/train-elastic.sbatch") || { echo "$name state=NOT_SUBMITTED" >>"$TMP/jobs"; return; }
  end=$((SECONDS + 60))
  if [ "$6" = early ]; then     # 1 s into training, before any checkpoint (none is asked for)
    until [ "$(wc -l <"$TMP/where.$id" 2>/dev/null)" = $(($3 * $4)) ] || [ $SECONDS -ge $end ]; do sleep 0.05; done
    sleep 1
  else
    until [ -d "$TMP/$name/checkpoints/$6" ] || [ $SECONDS -ge $end ]; do sleep 0.05; done
  fi
  t=$(ms)
  if [ "$5" = cut ]; then
    ip -n "${NS[1]}" link set eth0 down && pid=cut
    end=$((SECONDS + 90))
    until grep -q '^== restart 1 ' "$TMP/$name.out" || [ $SECONDS -ge $end ]; do sleep 0.2; done
    ip -n "${NS[1]}" link set eth0 up
  else
    pid=$(sed -n "s/^rank=$5 .* pid=\([0-9]*\)$/\1/p" "$TMP/where.$id" 2>/dev/null | head -n 1)
    [ -n "$pid" ] && kill -KILL "$pid"
  fi
  end=$((SECONDS + 120))
  while :; do
    state=$(field "$id" JobState)
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
    [ $SECONDS -lt $end ] || { scancel "$id"; state=STUCK; break; }
    sleep 0.2
  done
  mv "$TMP/where.$id" "$TMP/$name.where" 2>/dev/null
  echo "$name id=$id state=$state exit=$(field "$id" ExitCode) killed=${pid:-none} at_ms=$t" >>"$TMP/jobs"
}
job el repro 3 1 1 step-00000040
job cut repro5 3 1 cut step-00000040
job early repro 3 1 2 early
job fixed hybrid 2 2 2 step-00000020
job strict strict 2 2 2 step-00000020
EOF
timeout -k 10 400 bash "$top_srcdir/tests/tools/netns-slurm.sh" --nodes 3 --rate 1gbit -- \
  bash "$TMP/jobs.sh" "$TMP" "$EX" "$SPEC" "$ARGS" "$SLOW" >"$TMP/cluster.log" 2>&1
rc=$?
[ $rc = 77 ] && { sed -n 's/.*SKIP: /SKIP: /p' "$TMP/cluster.log"; exit 77; }
[ $rc = 0 ] || { fail "netns-slurm.sh: exit $rc"; sed 's/^/  | /' "$TMP/cluster.log" | tail -20; }
show() { tr '\r' '\n' <"$TMP/$1.out" | grep -v '^epoch' | tail -n 40 | sed 's/^/  | /'; }

# ---- the elastic run: killed on n1, finished on n0 and n2 ----
l=$(grep '^el ' "$TMP/jobs")
case $l in *" state=COMPLETED exit=0:0 killed="[0-9]*) pass "elastic: rank 1 killed, the job COMPLETED with exit 0" ;;
  *) fail "elastic: $l"; show el ;; esac
grep -q '^== restart 1 at .*: dtrain exited [0-9]*, node n1 (ranks 1) left out; 2 rank(s) on n0 n2 continue from step-' "$TMP/el.out" \
  && pass "elastic: relaunched once, on n0 n2 without n1 ($(grep -o 'continue from .*' "$TMP/el.out"))" \
  || { fail "elastic: no relaunch line leaving n1 out"; show el; }
[ "$(wc -l <"$TMP/el/elastic.jsonl")" = 1 ] && grep -q '^{"restart":1,"time":"[^"]*","exit":[0-9]*,"node":"n1","ranks":\[1\],"from":"step-[0-9]*","logged_step":[0-9]*,"ranks_now":2,"nodes_now":"n0 n2"}$' "$TMP/el/elastic.jsonl" \
  && pass "elastic: elastic.jsonl records the restart" || fail "elastic.jsonl: $(cat "$TMP/el/elastic.jsonl" 2>&1)"
# restart NAME: the relaunched run's restart line in metrics.jsonl (train/restart.h): n1's rank 1
# lost, continued from the checkpoint it resumed, recovery within the minute
restart() {
  local line
  line=$(grep '^{"restart":' "$TMP/$1/metrics.jsonl" 2>/dev/null)
  if printf '%s\n' "$line" | grep -qE '^\{"restart":1,"failed_at":[0-9.]+,"lost_ranks":\[1\],"lost_nodes":"n1","from_step":[0-9]+,"first_step":[0-9]+,"steps_redone":[0-9]+,"recovery_s":[0-9.]+\}$' &&
     [ "$(printf '%s\n' "$line" | wc -l)" = 1 ] &&
     python3 -c 'import json, sys; o = json.loads(sys.argv[1]); assert 0 < o["recovery_s"] < 60 and o["first_step"] == o["from_step"] + 1' "$line"; then
    pass "$1: metrics.jsonl's restart line ($line)"
  else
    fail "$1: restart line: ${line:-none}"
  fi
}
restart el
# the second launch's two ranks ran on n0 and n2
[ "$(sed -n '4,$p' "$TMP/el.where" | sed 's/ pid=.*//' | sort | tr '\n' ' ')" = "rank=0 node=n0 rank=1 node=n2 " ] \
  && pass "elastic: the relaunch's ranks ran on n0 and n2" || fail "elastic: ranks: $(tr '\n' ' ' <"$TMP/el.where")"
S=$(sed -n 's/^resume: .*step-0*\([0-9][0-9]*\) (step [0-9]*, .*written by 3 ranks.*/\1/p' "$TMP/el.out" | head -n 1)
[ -n "$S" ] && [ "$S" -ge 40 ] && pass "elastic: 2 ranks resumed the 3-rank checkpoint of step $S" \
  || { fail "elastic: no resume of a 3-rank checkpoint at or after step 40"; show el; }
restart_ms=$(( $(date -d "$(sed -n 's/^== restart 1 at \([0-9-]* [0-9:]*\):.*/\1/p' "$TMP/el.out")" +%s 2>/dev/null || echo 0) * 1000 \
  - $(sed -n 's/^el .* at_ms=//p' "$TMP/jobs") ))
echo "   (from the kill to the relaunch line: about $((restart_ms / 1000)) s, to the second)"

# ---- the clean resume on 2 ranks from that checkpoint, and 1 uninterrupted rank ----
if [ -n "$S" ]; then
  ck=$(printf '%s/el/checkpoints/step-%08d' "$TMP" "$S")
  timeout -k 5 120 "$MPIRUN" -np 2 "$DTRAIN" run "$SPEC" --cluster "$TMP/repro.yaml" --out "$TMP/clean" \
    --resume="$ck" --quiet $ARGS >"$TMP/clean.log" 2>&1 || { fail "clean resume: exit $?"; tail -5 "$TMP/clean.log"; }
  same clean el "elastic = a clean 2-rank resume from step $S"
fi
"$DTRAIN" run "$SPEC" --cluster "$TMP/repro.yaml" --out "$TMP/one" --quiet $ARGS >"$TMP/one.log" 2>&1 \
  || fail "1 rank: exit $?"
same one el "elastic = 1 uninterrupted rank (reproducible)"

# ---- node n1 cut off (its link down): dtrain names the silent rank after the collective timeout
# (5 s), srun cannot reach n1 to end the step and is ended by the script, the job goes on ----
l=$(grep '^cut ' "$TMP/jobs")
case $l in *" state=COMPLETED exit=0:0 killed=cut "*) pass "cut off: n1's link down, the job COMPLETED with exit 0" ;;
  *) fail "cut off: $l"; show cut ;; esac
grep -q 'fatal: .* (not answering: rank 1 (silent' "$TMP/cut.out" \
  && grep -q '^== srun still waits [0-9]* s after the failure (a node it cannot reach?): ending it' "$TMP/cut.out" \
  && grep -q '^== restart 1 at .*: dtrain exited [0-9]*, node n1 (ranks 1) left out; 2 rank(s) on n0 n2 continue from step-' "$TMP/cut.out" \
  && pass "cut off: rank 1 named silent, srun ended, relaunched on n0 n2" || { fail "cut off: messages"; show cut; }
[ "$(sed -n '4,$p' "$TMP/cut.where" | sed 's/ pid=.*//' | sort | tr '\n' ' ')" = "rank=0 node=n0 rank=1 node=n2 " ] \
  && pass "cut off: the relaunch's ranks ran on n0 and n2" || fail "cut off: ranks: $(tr '\n' ' ' <"$TMP/cut.where")"
same one cut "cut off = 1 uninterrupted rank (reproducible)"
restart cut
restart_ms=$(( $(date -d "$(sed -n 's/^== restart 1 at \([0-9-]* [0-9:]*\):.*/\1/p' "$TMP/cut.out")" +%s 2>/dev/null || echo 0) * 1000 \
  - $(sed -n 's/^cut .* at_ms=//p' "$TMP/jobs") ))
echo "   (from the cut to the relaunch line: about $((restart_ms / 1000)) s: 5 s collective timeout, KillWait 5 + 10 s)"

# ---- a failure before the first checkpoint: the relaunch starts over ----
l=$(grep '^early ' "$TMP/jobs")
case $l in *" state=COMPLETED exit=0:0 killed="[0-9]*) pass "before a checkpoint: rank 2 killed, the job COMPLETED with exit 0" ;;
  *) fail "before a checkpoint: $l"; show early ;; esac
grep -q '^== restart 1 at .*node n2 (ranks 2) left out; 2 rank(s) on n0 n1 continue from the start (no checkpoint yet)' "$TMP/early.out" \
  && pass "before a checkpoint: relaunched on n0 n1 from the start" || { fail "before a checkpoint: no relaunch line"; show early; }
same one early "before a checkpoint: = 1 uninterrupted rank (reproducible)"

# ---- a fixed grid that no longer fits: the nearest that does, data 1 x pipeline 2 on n0 ----
l=$(grep '^fixed ' "$TMP/jobs")
case $l in *" state=COMPLETED exit=0:0 killed="[0-9]*) pass "fixed grid: rank 2 killed, the job COMPLETED with exit 0" ;;
  *) fail "fixed grid: $l"; show fixed ;; esac
grep -q "^== restart 1 at .*node n1 (ranks 2,3) left out; 2 rank(s) on n0 continue" "$TMP/fixed.out" \
  && grep -q "note: elastic relaunch on 2 ranks: the cluster spec's strategy hybrid data 2 x pipeline 2, ranks 4 does not fit them; running data 1 x pipeline 2 x tensor 1" "$TMP/fixed.out" \
  && pass "fixed grid: relaunched on n0 as data 1 x pipeline 2, said so" || { fail "fixed grid: messages"; show fixed; }
grep -qE '"lost_ranks":\[2,3\],"lost_nodes":"n1",.*"layout_from":"strategy hybrid data 2 x pipeline 2, ranks 4","layout":"data 1 x pipeline 2 x tensor 1","layout_how":"fewer replicas"\}$' \
  "$TMP/fixed/metrics.jsonl" && pass "fixed grid: the restart line names the layouts" \
  || fail "fixed grid: restart line: $(grep '"restart"' "$TMP/fixed/metrics.jsonl")"
S=$(sed -n 's/^resume: .*step-0*\([0-9][0-9]*\) (step [0-9]*, .*written by 4 ranks.*/\1/p' "$TMP/fixed.out" | head -n 1)
if [ -n "$S" ]; then
  ck=$(printf '%s/fixed/checkpoints/step-%08d' "$TMP" "$S")
  timeout -k 5 120 "$MPIRUN" -np 2 "$DTRAIN" run "$SPEC" --cluster "$TMP/near.yaml" --out "$TMP/clean-near" \
    --resume="$ck" --quiet $ARGS >"$TMP/clean-near.log" 2>&1 || { fail "clean resume: exit $?"; tail -5 "$TMP/clean-near.log"; }
  same clean-near fixed "fixed grid = a clean 2-rank resume as data 1 x pipeline 2 from step $S"
else
  fail "fixed grid: no resume of the 4-rank checkpoint"; show fixed
fi

# ---- the same with elastic: strict: refused at the key, exit 2, said why ----
l=$(grep '^strict ' "$TMP/jobs")
case $l in *" state=FAILED exit=2:0 killed="[0-9]*) pass "strict: rank 2 killed, the job FAILED with exit 2" ;;
  *) fail "strict: $l"; show strict ;; esac
grep -q "^== restart 1 at .*node n1 (ranks 2,3) left out; 2 rank(s) on n0 continue" "$TMP/strict.out" \
  && grep -q "strict.yaml:[0-9]*:[0-9]*: error: 'ranks' is 4 but the job has 2 MPI ranks" "$TMP/strict.out" \
  && grep -q '^== dtrain refused 1 x 2 ranks (exit 2, the message above): the layout of .* does not fit the nodes left' "$TMP/strict.out" \
  && pass "strict: relaunched on n0, refused at 'ranks' with the reason" || { fail "strict: messages"; show strict; }
finish
