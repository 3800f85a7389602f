#!/usr/bin/env bash
# tests/slurm/start-slurm.sh - bring up a real single-node Slurm on localhost (munged, slurmctld,
# slurmd from the Debian packages, no systemd needed) for dtrain's Slurm test and examples.
# Run as root. Idempotent: daemons that already run with the same slurm.conf are left alone.
# Stop everything with tests/slurm/stop-slurm.sh.
#
# Environment:
#   DTRAIN_SLURM_DIR      state, logs, pid files                 (default /tmp/dtrain-slurm)
#   DTRAIN_SLURM_CPUS     CPUs the node advertises; more than the machine has turns on
#                         SlurmdParameters=config_overrides     (default: nproc)
#   DTRAIN_SLURM_TIMEOUT  seconds to wait for each daemon / the idle node      (default 60)
#   DTRAIN_SLURM_INSTALL  1 = apt-get install missing packages                 (default 1)
#   DTRAIN_SLURM_FORCE    1 = replace an /etc/slurm/slurm.conf we did not write
#
# Writes /etc/slurm/slurm.conf, so plain sbatch/srun/squeue/scontrol find the cluster.
# Exit status: 0 when the node is idle (ready), 1 otherwise, with the daemon logs' tails.
set -euo pipefail

DIR=${DTRAIN_SLURM_DIR:-/tmp/dtrain-slurm}
TIMEOUT=${DTRAIN_SLURM_TIMEOUT:-60}
CONF=/etc/slurm/slurm.conf
MARKER='# written by dtrain tests/slurm/start-slurm.sh'
PKGS=(munge slurmctld slurmd slurm-client)
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[start-slurm %d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*"; }
die() { echo "[start-slurm] ERROR: $*" >&2; exit 1; }
tail_log() { [ -f "$1" ] && { echo "---- $1" >&2; tail -n 20 "$1" >&2; }; return 0; }

# alive PIDFILE NAME: the PID in PIDFILE is a live process called NAME. Not `kill -0`: when PID 1
# does not reap (containers), a dead daemon stays a zombie and kill -0 still succeeds.
alive() {
  local pid st
  pid=$(tr -dc 0-9 2>/dev/null < "$1") || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
  [ "$st" != Z ] && [ "$st" != X ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
# wait_for SECONDS CMD...: retry CMD every 0.1 s
wait_for() { local n=$(( $1 * 10 )); shift; while [ $n -gt 0 ]; do "$@" && return 0; n=$((n - 1)); sleep 0.1; done; return 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
mkdir -p "$DIR"/{ctld,spool,log,pids}

# 1. packages. The package scripts do not start the daemons here (policy-rc.d), we do below.
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "${DTRAIN_SLURM_INSTALL:-1}" = 1 ] || die "missing packages: ${missing[*]}"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get -o DPkg::Lock::Timeout=120 update -qq &&
    apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${missing[@]}"; } \
    > "$DIR.apt.log" 2>&1 || { tail -n 20 "$DIR.apt.log" >&2; die "apt-get install failed"; }
fi

# 2. names: slurmd/slurmctld look up the host name, Open MPI/PMIx "localhost"; without an
#    /etc/hosts line each lookup may wait ~5 s for an unreachable DNS server.
H=$(hostname -s)
for name in localhost "$H"; do
  getent -s files hosts "$name" >/dev/null || printf '127.0.0.1\t%s\n' "$name" >> /etc/hosts
done

# 3. munge: authentication between the Slurm commands and daemons. Started as user munge,
#    never with --force (that would let a second munged take over a live one's socket).
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key; chmod 0600 /etc/munge/munge.key
if ! alive /run/munge/munged.pid munged; then
  setsid runuser -u munge -- /usr/sbin/munged </dev/null >>"$DIR/log/munged.out" 2>&1 || true
  wait_for 5 alive /run/munge/munged.pid munged || { tail_log /var/log/munge/munged.log; die "munged did not start"; }
  cp /run/munge/munged.pid "$DIR/pids/munged.pid"    # stop-slurm.sh stops only what we started
  log "munged started"
fi
munge -n | unmunge >/dev/null || die "munge -n | unmunge failed"

# 4. slurm.conf
CPUS=${DTRAIN_SLURM_CPUS:-$(nproc)}
HW=$(slurmd -C | head -n 1)      # this machine: NodeName=.. CPUs=.. ... RealMemory=..
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
if [ "$CPUS" = "$(nproc)" ]; then
  TOPO=$(grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' <<<"$HW" | tr '\n' ' ')
  OVERRIDES=
else   # advertise CPUs the machine does not have: slurmd must not check them against slurmd -C
  TOPO="CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1"
  OVERRIDES=SlurmdParameters=config_overrides
fi
NEW=$(mktemp)
cat > "$NEW" <<EOF
$MARKER; state in $DIR
ClusterName=dtrain
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/pids/slurmctld.pid
SlurmdPidFile=$DIR/pids/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# no cgroups and no accounting daemon: works in containers without systemd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
# start batch jobs at once (default delay 3 s) and look at waiting ones, e.g. requeued, every 2 s
SchedulerParameters=batch_sched_delay=0,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# a job that can never fit is refused at submission instead of pending for ever
EnforcePartLimits=ALL
# Debian's Open MPI runs under srun only through PMIx
MpiDefault=pmix
MailProg=/bin/true
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=300
$OVERRIDES
NodeName=$H NodeAddr=127.0.0.1 $TOPO RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF" && [ "${DTRAIN_SLURM_FORCE:-0}" != 1 ]; then
  rm -f "$NEW"; die "$CONF was not written by this script (DTRAIN_SLURM_FORCE=1 replaces it)"
fi
if ! cmp -s "$NEW" "$CONF"; then
  install -D -m 0644 "$NEW" "$CONF"
  log "wrote $CONF: $TOPO RealMemory=$MEM $OVERRIDES"
  for d in slurmd slurmctld; do   # running daemons must re-read it: restart them
    if alive "$DIR/pids/$d.pid" $d; then
      kill "$(cat "$DIR/pids/$d.pid")"; wait_for 15 eval "! alive $DIR/pids/$d.pid $d" || die "$d did not stop"
      log "stopped $d (config changed)"
    fi
  done
fi
rm -f "$NEW"

# 5. daemons: daemon mode (they fork and write their pid files), setsid and no inherited stdio,
#    so they hold no terminal and none of the caller's pipes (make would wait on them).
if ! alive "$DIR/pids/slurmctld.pid" slurmctld; then
  rm -rf "${DIR:?}/ctld" && mkdir "$DIR/ctld"     # fresh: no jobs or node states of earlier runs
  setsid slurmctld </dev/null >>"$DIR/log/slurmctld.out" 2>&1 || true
  wait_for "$TIMEOUT" eval 'scontrol ping 2>/dev/null | grep -q "is UP"' \
    || { tail_log "$DIR/log/slurmctld.log"; die "slurmctld did not come up"; }
  log "slurmctld started (pid $(cat "$DIR/pids/slurmctld.pid"))"
fi
if ! alive "$DIR/pids/slurmd.pid" slurmd; then
  setsid slurmd </dev/null >>"$DIR/log/slurmd.out" 2>&1 || true
  wait_for 10 alive "$DIR/pids/slurmd.pid" slurmd || { tail_log "$DIR/log/slurmd.log"; die "slurmd did not start"; }
  log "slurmd started (pid $(cat "$DIR/pids/slurmd.pid"))"
fi

# 6. the node must become idle (a node left down by an earlier configuration is resumed)
node_ready() {
  case $(sinfo -h -N -n "$H" -o %T 2>/dev/null) in
    idle|mixed|allocated|completing) return 0 ;;
    down*|drain*|fail*) scontrol update nodename="$H" state=resume 2>/dev/null ;;
  esac
  return 1
}
wait_for "$TIMEOUT" node_ready || { sinfo -N -l >&2; tail_log "$DIR/log/slurmd.log"; die "node $H not idle after ${TIMEOUT}s"; }
log "ready: node $H, $CPUS CPUs, partition debug"
