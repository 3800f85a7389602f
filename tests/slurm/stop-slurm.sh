#!/usr/bin/env bash
# tests/slurm/stop-slurm.sh - stop what tests/slurm/start-slurm.sh started: cancel the jobs left,
# then stop slurmd, slurmctld and (only if start-slurm.sh started it) munged, each by the PID in
# its pid file, never by process name. Safe to run when nothing runs.
#   --purge  also remove $DTRAIN_SLURM_DIR (state, logs) and the slurm.conf start-slurm.sh wrote
set -uo pipefail
DIR=${DTRAIN_SLURM_DIR:-/tmp/dtrain-slurm}
CONF=/etc/slurm/slurm.conf
rc=0
say() { echo "[stop-slurm] $*"; }

alive() {   # alive PIDFILE NAME: as in start-slurm.sh (a zombie does not count)
  local pid st
  pid=$(tr -dc 0-9 2>/dev/null < "$1") || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
  [ "$st" != Z ] && [ "$st" != X ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
stop() {    # stop NAME PIDFILE: SIGTERM, up to 15 s, then SIGKILL
  local pid
  alive "$2" "$1" || { rm -f "$2"; return 0; }
  pid=$(tr -dc 0-9 < "$2")
  say "stopping $1 (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 150); do alive "$2" "$1" || break; sleep 0.1; done
  if alive "$2" "$1"; then say "$1 ignored SIGTERM: SIGKILL"; kill -KILL "$pid"; sleep 0.5; fi
  if alive "$2" "$1"; then echo "[stop-slurm] ERROR: $1 (pid $pid) still runs" >&2; rc=1; else rm -f "$2"; fi
}

[ "$(id -u)" = 0 ] || { echo "[stop-slurm] ERROR: must run as root" >&2; exit 1; }

# jobs first, while the daemons can still end their steps (slurmstepd and the ranks)
if alive "$DIR/pids/slurmctld.pid" slurmctld && [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
  say "cancelling jobs: $(squeue -h -o %i | tr '\n' ' ')"
  # shellcheck disable=SC2046
  scancel $(squeue -h -o %i) 2>/dev/null
  for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
fi
stop slurmd "$DIR/pids/slurmd.pid"
stop slurmctld "$DIR/pids/slurmctld.pid"
[ -e "$DIR/pids/munged.pid" ] && stop munged "$DIR/pids/munged.pid"

if [ "${1:-}" = --purge ]; then
  grep -qF '# written by dtrain tests/slurm/start-slurm.sh' "$CONF" 2>/dev/null && rm -f "$CONF"
  case $DIR in /|/tmp|/var|/var/tmp|'') ;; *) rm -rf "$DIR" ;; esac
  say "purged $DIR and $CONF"
fi
[ $rc = 0 ] && say "done"
exit $rc
