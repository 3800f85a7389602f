#!/usr/bin/env bash
# bench/elastic-campaign.sh - a campaign of failures against examples/slurm/train-elastic.sbatch on
# an emulated 3-node Slurm (tests/tools/netns-slurm.sh): N jobs (default 20), each data parallel
# and reproducible on 3 nodes x 1 rank, each hit once at a random step by a random failure: a
# random rank's process killed (SIGKILL), or, every CUT_EVERY-th job (default 5), the link of n1
# or n2 taken down (up again once the job went on without it; never n0's, the batch script's). Per job: what failed, the step the
# failed launch had reached, the checkpoint it resumed, the steps redone, the seconds from the
# failure to the relaunch line and to the first step after it, the final state, and whether the
# weights are bitwise those of 1 uninterrupted rank. Then: hangs, jobs finished, median and max.
# Needs root (see netns-slurm.sh); the nodes share this machine's cores.
# Usage: bench/elastic-campaign.sh [N]    Env: SEED (default 1), CUT_EVERY, DTRAIN (src/dtrain)
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${1:-}" != --inside ]; then
  N=${1:-20}
  DTRAIN=$(cd "$(dirname "${DTRAIN:-src/dtrain}")" && pwd)/$(basename "${DTRAIN:-src/dtrain}")
  W=$(mktemp -d /var/tmp/elastic-campaign.XXXXXX) || exit 1   # not /tmp: each node has its own
  chmod 755 "$W"
  trap 'rm -rf "$W"' EXIT
  SPEC=$ROOT/tests/cli/dp-mlp.yaml
  printf 'threads_per_rank: 1\ncollective_timeout: 5\npartition: {strategy: data, sync: allreduce, reproducible: true, chunks: 16}\n' >"$W/repro.yaml"
  "$DTRAIN" run "$SPEC" --cluster "$W/repro.yaml" --out "$W/one" --max-steps 100 --quiet >/dev/null 2>&1 \
    || { echo "error: the 1-rank reference failed" >&2; exit 1; }
  cat >"$W/where.sh" <<EOF
#!/bin/sh
echo "rank=\${PMIX_RANK:-\${SLURM_PROCID:-?}} node=\${SLURMD_NODENAME:-?} pid=\$\$" >>"$W/where.\$SLURM_JOB_ID"
exec "$DTRAIN" "\$@"
EOF
  chmod 755 "$W/where.sh"
  bash tests/tools/netns-slurm.sh --nodes 3 --rate 1gbit -- bash "$0" --inside "$W" "$N" "$SPEC" "$DTRAIN"
  exit $?
fi

# ---- inside the cluster (netns-slurm.sh's head namespace) ----
W=$2 N=$3 SPEC=$4 DTRAIN=$5
RANDOM=${SEED:-1}
CUT=${CUT_EVERY:-5}
read -r -a NS <<<"$NETNS_NAMESPACES"
now() { echo $(($(date +%s%N) / 1000000)); }
field() { scontrol show job -o "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 | cut -d= -f2-; }
laststep() { tail -n 1 "$1/metrics.jsonl" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
sha() { python3 "$ROOT/tests/tools/stcmp.py" --sha256 "$1" 2>/dev/null | cut -d' ' -f1; }
ref=$(sha "$W/one/model.safetensors")
printf '%-3s %-5s %-4s %-4s %6s %6s %6s %8s %8s  %-10s %s\n' job kind rank node failed resume redone relaunch first state weights
: >"$W/rows"
for ((i = 1; i <= N; i++)); do
  out=$W/run$i rank=$((RANDOM % 3)) at=$((5 + RANDOM % 86)) kind=kill
  # never the first node's link: it runs the batch script, and Slurm ends a job that loses it
  [ $((i % CUT)) = 0 ] && kind=cut rank=$((1 + RANDOM % 2))
  id=$(env DTRAIN="$W/where.sh" DTRAIN_MODEL="$SPEC" DTRAIN_CLUSTER="$W/repro.yaml" DTRAIN_OUT="$out" \
       DTRAIN_ARGS="--max-steps 100 --set train.checkpoint_every=10 --set train.log_every=1" \
       DTRAIN_FAULT="slow@rank=0,step=1,secs=0.03" \
       sbatch --parsable --nodes=3 --ntasks-per-node=1 --cpus-per-task=1 --chdir "$W" -o "$out.out" \
       "$ROOT/examples/slurm/train-elastic.sbatch") || { echo "error: sbatch failed" >&2; exit 1; }
  end=$((SECONDS + 60))
  until [ "$(laststep "$out")" -ge "$at" ] 2>/dev/null || [ $SECONDS -ge $end ]; do sleep 0.02; done
  t0=$(now)
  if [ $kind = kill ]; then
    kill -KILL "$(sed -n "s/^rank=$rank .* pid=\([0-9]*\)$/\1/p" "$W/where.$id" | head -n 1)"
  else
    ip -n "${NS[rank]}" link set eth0 down
  fi
  # the relaunch line, then the first step after it (the slow fault's note at its first step)
  t1= t2= end=$((SECONDS + 120))
  while [ $SECONDS -lt $end ]; do
    [ -z "$t1" ] && grep -q '^== restart 1 ' "$out.out" && { t1=$(now); [ $kind = cut ] && ip -n "${NS[rank]}" link set eth0 up; }
    [ -n "$t1" ] && [ "$(sed -n '/^== restart 1 /,$p' "$out.out" | grep -c 'DTRAIN_FAULT: slow at step')" -ge 1 ] && { t2=$(now); break; }
    case $(field "$id" JobState) in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 0.05
  done
  [ $kind = cut ] && ip -n "${NS[rank]}" link set eth0 up 2>/dev/null
  end=$((SECONDS + 120))
  while :; do
    state=$(field "$id" JobState)
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
    [ $SECONDS -lt $end ] || { scancel "$id"; state=HUNG; break; }
    sleep 0.2
  done
  line=$(grep '^== restart 1 ' "$out.out" | head -n 1)
  node=$(sed -n 's/.* node \(n[0-9]*\) (ranks.*/\1/p' <<<"$line")
  failed=$(sed -n 's/.*the failed launch had logged step \([0-9]*\).*/\1/p' <<<"$line")
  resume=$(sed -n 's/.*continue from step-0*\([0-9][0-9]*\),.*/\1/p' <<<"$line")
  [ -n "$line" ] && grep -q 'continue from the start' <<<"$line" && resume=0
  redone=$([ -n "$failed" ] && [ -n "$resume" ] && echo $((failed - resume)) || echo -)
  rel=$([ -n "$t1" ] && echo "$(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100))" || echo -)
  first=$([ -n "$t2" ] && echo "$(((t2 - t0) / 1000)).$(((t2 - t0) % 1000 / 100))" || echo -)
  wts=$([ "$(sha "$out/model.safetensors")" = "$ref" ] && echo "=1 rank" || echo DIFFER)
  printf '%-3s %-5s %-4s %-4s %6s %6s %6s %8s %8s  %-10s %s\n' "$i" "$kind" "$rank" "${node:--}" "${failed:--}" \
    "${resume:--}" "$redone" "$rel" "$first" "$state" "$wts" | tee -a "$W/rows"
done
awk -v n="$N" '
  function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                  return k ? (k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2) : "-" }
  { if ($10 == "HUNG") hung++; if ($10 == "COMPLETED") done++; if ($11 != "=1") differ++
    if ($9 != "-") { f[++nf] = $9; if ($9 > fmax) fmax = $9 }
    if ($7 != "-") { r[++nr] = $7; if ($7 > rmax) rmax = $7 } }
  END { printf "%d failures: %d hung, %d jobs COMPLETED, %d with weights not bitwise 1 rank\n", n, hung, done, differ
        printf "failure to first step after the relaunch: median %s s, max %s s\n", med(f, nf), fmax
        printf "steps redone: median %s, max %s\n", med(r, nr), rmax }' "$W/rows"
