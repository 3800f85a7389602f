#!/bin/bash
# examples/mpirun/train-elastic.sh - the mpirun recipe for a dtrain run that carries on when a rank
# or a host fails: the run is started with mpirun over a host list, and when it ends because a
# rank was lost the script starts it again on the hosts that remain, the failed one left out (never
# reused), up to DTRAIN_MAX_RESTARTS times; dtrain continues from the last committed checkpoint
# (checkpoints hold no layout) with the same global batch, the layout re-planned by strategy: auto
# or data; a fixed grid that no longer fits is replaced by the nearest that does (the cluster spec's
# elastic: replan, the default; dtrain's note says which), or, with elastic: strict or where nothing
# fits, ends the job with dtrain's message and exit 2.
# Each relaunch writes its restart line in OUT/metrics.jsonl (dtrain(1), ENVIRONMENT: DTRAIN_RESTART).
#
# usage: DTRAIN_HOSTS="host1 host2 host3" examples/mpirun/train-elastic.sh MODEL.yaml --out DIR [run flags]
#   DTRAIN_HOSTS         the hosts, in rank order (required)
#   DTRAIN_PER_HOST      ranks on each host (default 1): rank r runs on host r / DTRAIN_PER_HOST
#   DTRAIN_MAX_RESTARTS  relaunches after a failure (default 3)
#   DTRAIN_MIN_HOSTS     fewer hosts left than this ends the run instead (default 1)
#   MPIRUN, MPIRUN_ARGS  the launcher and its options (transport, agent; not --hostfile or -np)
#   DTRAIN               the binary (default: dtrain on PATH, else src/dtrain)
# DIR must be on a file system every host sees (the checkpoints, and DIR.elastic: each rank's exit
# status, which names the rank that died). Exit: dtrain's last status (dtrain(1), EXIT STATUS).
set -u
DTRAIN=${DTRAIN:-$(command -v dtrain || echo src/dtrain)}
MPIRUN=${MPIRUN:-mpirun}
read -r -a hosts <<<"${DTRAIN_HOSTS:-}"
read -r -a mpiargs <<<"${MPIRUN_ARGS:-}"
per=${DTRAIN_PER_HOST:-1} max=${DTRAIN_MAX_RESTARTS:-3} min=${DTRAIN_MIN_HOSTS:-1}
out= prev=
for a in "$@"; do [ "$prev" = --out ] && out=$a; case $a in --out=*) out=${a#--out=} ;; esac; prev=$a; done
[ ${#hosts[@]} -gt 0 ] || { echo "train-elastic.sh: set DTRAIN_HOSTS (the hosts, in rank order)" >&2; exit 2; }
[ -n "$out" ] || { echo "train-elastic.sh: give --out DIR (the checkpoints a relaunch continues from)" >&2; exit 2; }
rec=$out.elastic
rm -rf "$rec" && mkdir -p "$rec" || exit 3
# each rank runs under a shell that writes "RANK STATUS NANOSECONDS" to $rec/LAUNCH/RANK when it ends
wrap='trap : USR1 USR2 TERM INT; "$@"; rc=$?; echo "$OMPI_COMM_WORLD_RANK $rc $(date +%s%N)" >"$0/$OMPI_COMM_WORLD_RANK"; exit $rc'
# failed_host LOG DIR: a rank dtrain names as not answering, else the first rank a signal ended
# (not SIGPIPE, what its peers die of), else the first that ended badly
failed_host() {
  local r
  r=$(sed -n 's/.*not answering: ranks\{0,1\} \([0-9]*\).*/\1/p' "$1" | head -n 1)
  [ -z "$r" ] && r=$(cat "$2"/* 2>/dev/null | awk '$2 != 0 && $2 != 75 { print ($2 > 128 && $2 != 141) ? 0 : 1, $3, $1 }' |
                     sort -k1,1n -k2,2n | head -n 1 | cut -d' ' -f3)
  [ -n "$r" ] && echo "$((r / per))"
}
last_step() { grep '"step":' "$out/metrics.jsonl" 2>/dev/null | tail -n 1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
export DTRAIN_RESTART= DTRAIN_RESTART_FAILED_AT= DTRAIN_RESTART_LOST_RANKS= DTRAIN_RESTART_LOST_NODES= \
       DTRAIN_RESTART_LOGGED_STEP=
restarts=0
while :; do
  launch=$rec/$((restarts + 1)) log=$rec/log.$((restarts + 1))
  mkdir -p "$launch"
  for h in "${hosts[@]}"; do echo "$h slots=$per"; done >"$rec/hostfile"
  resume=--resume=auto
  [ $restarts -gt 0 ] && [ ! -e "$out/checkpoints/latest" ] && resume=--force
  echo "== launch $((restarts + 1)): $((${#hosts[@]} * per)) rank(s) on ${hosts[*]}, $(date '+%F %T')"
  "$MPIRUN" "${mpiargs[@]}" --hostfile "$rec/hostfile" -np $((${#hosts[@]} * per)) \
    -x DTRAIN_RESTART -x DTRAIN_RESTART_FAILED_AT -x DTRAIN_RESTART_LOST_RANKS -x DTRAIN_RESTART_LOST_NODES \
    -x DTRAIN_RESTART_LOGGED_STEP sh -c "$wrap" "$launch" "$DTRAIN" run "$@" $resume 2> >(tee "$log" >&2)
  rc=$?
  wait
  case $rc in
    0|75) break ;;
    2|3|4|5) echo "== dtrain exited $rc (usage, I/O, checkpoint or numerical error, the message above): not relaunching"
             break ;;
  esac
  [ $restarts -lt "$max" ] || { echo "== dtrain exited $rc; no relaunch left (DTRAIN_MAX_RESTARTS=$max)"; break; }
  i=$(failed_host "$log" "$launch")
  [ -n "$i" ] && [ "$i" -lt ${#hosts[@]} ] || { echo "== dtrain exited $rc and no rank is named as failed: not relaunching"; break; }
  first=$(cat "$launch"/* 2>/dev/null | awk '$2 != 0 && $2 != 75 { print $3 }' | sort -n | head -n 1)
  if [ -n "$first" ]; then at=$(awk -v ns="$first" 'BEGIN { printf "%.3f", ns / 1e9 }'); else at=$(date +%s.%N); fi
  bad=${hosts[i]} ranks=$(seq -s, $((i * per)) $((i * per + per - 1)))
  hosts=("${hosts[@]:0:i}" "${hosts[@]:i+1}")
  [ ${#hosts[@]} -ge "$min" ] && [ ${#hosts[@]} -gt 0 ] ||
    { echo "== dtrain exited $rc on $bad; ${#hosts[@]} host(s) left, fewer than DTRAIN_MIN_HOSTS=$min"; break; }
  restarts=$((restarts + 1))
  DTRAIN_RESTART=$restarts DTRAIN_RESTART_FAILED_AT=$at DTRAIN_RESTART_LOST_RANKS=$ranks
  DTRAIN_RESTART_LOST_NODES=$bad DTRAIN_RESTART_LOGGED_STEP=$(last_step)
  echo "== restart $restarts at $(date '+%F %T'): dtrain exited $rc, host $bad (ranks $ranks) left out;" \
       "$((${#hosts[@]} * per)) rank(s) on ${hosts[*]} continue"
done
echo "== dtrain exited $rc after $restarts relaunch(es), $(date '+%F %T')"
exit $rc
