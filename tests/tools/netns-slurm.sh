#!/usr/bin/env bash
# tests/tools/netns-slurm.sh - an emulated K-node Slurm cluster on this one machine: the nodes of
# tests/tools/netns-cluster.sh (network namespaces, a bridge, tc tbf caps), a private munged and
# slurmctld in the head namespace, one slurmd per node namespace, and COMMAND run in the head
# namespace with SLURM_CONF set, so that sbatch, srun, squeue and scontrol use the cluster.
# Everything is removed on exit, also on failure or signal. Exit 77 (skip) where the machine
# cannot (not root, no ip netns/veth/tbf, no Slurm or munge, daemons that do not come up here);
# otherwise COMMAND's exit status.
#
# usage: netns-slurm.sh [--nodes K] [--rate RATE|none] [--cpus C] [--dir DIR] -- COMMAND...
#   --nodes K    slurmd nodes n0 .. nK-1, one per namespace (default 2)
#   --rate RATE  tc rate of each node's egress, e.g. 1gbit (default 1gbit); none: uncapped
#   --cpus C     CPUs each node advertises to Slurm (default: this machine's, nproc)
#   --dir DIR    where the cluster's state goes (default /var/tmp): NOT /tmp, which every node
#                has its own of; DIR must be seen by all nodes, as a cluster's shared file system
#
# COMMAND's environment: SLURM_CONF; NETNS_SLURM_DIR, the state directory (slurm.conf, logs, pid
# files, spools; removed on exit); NETNS_SLURM_NODES, the node names (n0 first); and what
# netns-cluster.sh exports (NETNS_NAMESPACES, NETNS_ADDRS: node K is NodeName nK in namespace
# K of NETNS_NAMESPACES at address K of NETNS_ADDRS; NETNS_HEAD, NETNS_SUBNET, MPIRUN_NETNS_ARGS).
# The per-link byte counters follow COMMAND on stderr (and in $NETNS_STATS), as netns-cluster.sh
# prints them; `tc -n NS -s qdisc show dev eth0` reads them while COMMAND runs.
#
# What each node is (why, from ../shared/notes/mpi-and-slurm.md):
#   - slurmd -N nK runs in node K's namespace, started by `ip netns exec`, which gives it a mount
#     namespace of its own with a /sys for that network namespace, without the cgroup file
#     systems slurmd insists on ("No filesystem mounted on /sys/fs/cgroup"): the cgroup mounts of
#     this machine are mounted again there, read from /proc/self/mounts before any namespace.
#   - each node's /tmp is a directory of its own bound over /tmp in that mount namespace: PMIx
#     makes /tmp/spmix_appdir_<uid>_<job>.<step> on every node of a step, and the second node
#     fails ("File exists") when they share one. Job steps inherit it, ranks included. What lives
#     under the machine's /tmp and the nodes must see (the working directory, the tree this tool
#     is in, NETNS_SLURM_SHARE's paths: a clone built in /tmp) is bound back into it.
#   - and its own /dev/shm (a fresh tmpfs): Open MPI's shared-memory transport names its files
#     there by host name, job and node-local rank, the same on every emulated node (one host
#     name), so two nodes' local rank 0 shared one segment and crashed (SIGSEGV in vader).
#   - and its own spool directory, bound over the one SlurmdSpoolDir names: Slurm's PMIx plugin
#     builds its stepd socket path from SlurmdSpoolDir without expanding %n (".../spool-%n/stepd.
#     slurm.pmix.J.S": a relaunched step hung on "Cannot send message"), and that socket's name
#     is the same on every node, so one shared directory would not do either.
#   - slurm.conf: SlurmctldHost is this host's short name (slurmctld refuses any other) with the
#     head's bridge address; NodeName=nK NodeAddr=<node K's address>, config_overrides (the CPUs
#     are declared, not probed); per-node pid and log files (%n); no cgroup plugins
#     (proctrack/linuxproc, task/none); MpiDefault=pmix (Debian's Open MPI works under srun with
#     PMIx only); AuthInfo points at this cluster's own munged socket, so a Slurm or munged that
#     already runs on the machine is neither used nor disturbed.
#   - Slurm's ports are those of the head and node namespaces, not the machine's: a single-node
#     Slurm (tests/slurm/start-slurm.sh) can run beside it.
set -u
PROG=netns-slurm
HERE=$(cd "$(dirname "$0")" && pwd)
NODES=2 RATE=1gbit CPUS=$(nproc) DIR=/var/tmp INSIDE=0
say() { echo "$PROG: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
usage() { sed -n 's/^# \{0,1\}//; 10,15p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --cpus) CPUS=${2:?}; shift 2 ;;
    --dir) DIR=${2:?}; shift 2 ;;
    --inside) INSIDE=1; shift ;;       # internal: the second half, in the head namespace
    --) shift; break ;;
    -h|--help) usage ;;
    *) say "unknown option '$1'"; usage ;;
  esac
done
[ $# -gt 0 ] || { say "no COMMAND after --"; usage; }

# ---------------- first half: check, then let netns-cluster.sh build the nodes ----------------
if [ "$INSIDE" = 0 ]; then
  case $NODES in ''|*[!0-9]*) say "--nodes must be a positive integer, got '$NODES'"; exit 2 ;; esac
  [ "$NODES" -ge 1 ] && [ "$NODES" -le 64 ] || { say "--nodes must be 1..64, got $NODES"; exit 2; }
  case $CPUS in ''|*[!0-9]*) say "--cpus must be a positive integer, got '$CPUS'"; exit 2 ;; esac
  [ "$CPUS" -ge 1 ] || { say "--cpus must be at least 1"; exit 2; }
  DIR=$(cd "$DIR" 2>/dev/null && pwd) || { say "--dir: no directory '$DIR'"; exit 2; }
  case $DIR/ in /tmp/*) say "--dir must not be under /tmp: every node has its own /tmp"; exit 2 ;; esac
  case $DIR in *[[:space:]]*) say "--dir must not contain white space: '$DIR'"; exit 2 ;; esac
  [ "$(id -u)" = 0 ] || skip "needs root (namespaces, daemons as root)"
  for c in munged munge slurmctld slurmd sbatch srun squeue scontrol sinfo scancel unshare; do
    command -v "$c" >/dev/null || skip "no '$c' (packages munge slurmctld slurmd slurm-client util-linux)"
  done
  # the cgroup mounts slurmd needs, as this mount namespace has them (netns-cluster.sh's
  # `ip netns exec` hides them): "TYPE OPTIONS PATH" per line, the tmpfs holding them first
  CGROUPS=$(awk '$2 ~ /^\/sys\/fs\/cgroup(\/|$)/ && ($3 == "tmpfs" || $3 ~ /^cgroup2?$/) { print $3, $4, $2 }' /proc/self/mounts)
  [ -n "$CGROUPS" ] || skip "no cgroup file system under /sys/fs/cgroup (slurmd needs one)"
  export NETNS_SLURM_CGROUPS=$CGROUPS
  # paths under the machine's /tmp every node must still see (a clone built there): the working
  # directory, the tree this tool is in, and NETNS_SLURM_SHARE's (one per line)
  share=${NETNS_SLURM_SHARE:-}
  for p in "$PWD" "$(cd "$HERE/../.." && pwd)"; do
    case $p/ in /tmp/?*) share="$share
$p" ;; esac
  done
  export NETNS_SLURM_SHARE=$share
  exec bash "$HERE/netns-cluster.sh" --nodes "$NODES" --rate "$RATE" -- \
    bash "$0" --inside --nodes "$NODES" --cpus "$CPUS" --dir "$DIR" -- "$@"
fi

# ---------------- second half: in the head namespace, with NETNS_* set ----------------
read -r -a NS <<<"$NETNS_NAMESPACES"
read -r -a ADDRS <<<"$NETNS_ADDRS"
HEADADDR=${NETNS_SUBNET%.0/24}.1
STATE=
CHILD=
alive() { # alive PIDFILE NAME: a live process (not a zombie) called NAME
  local pid st
  pid=$(tr -dc 0-9 2>/dev/null <"$1") || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
  [ "$st" != Z ] && [ "$st" != X ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
# stop NAME PIDFILE: SIGTERM, up to 2 s, then SIGKILL (netns-cluster.sh waits 5 s for all of this
# on a signal before it ends what is left in the namespaces itself)
stop() {
  local pid
  alive "$2" "$1" || return 0
  pid=$(tr -dc 0-9 <"$2")
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 20); do alive "$2" "$1" || return 0; sleep 0.1; done
  say "$1 (pid $pid) ignored SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null
}
cleanup() {
  local i ids
  trap - EXIT INT TERM
  [ -n "$STATE" ] || return
  # jobs first, while slurmd can still end their steps
  if alive "$STATE/slurmctld.pid" slurmctld; then
    ids=$(squeue -h -o %i 2>/dev/null)
    if [ -n "$ids" ]; then
      scancel $ids 2>/dev/null
      for _ in $(seq 15); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  for ((i = 0; i < ${#NS[@]}; i++)); do stop slurmd "$STATE/slurmd-n$i.pid"; done
  stop slurmctld "$STATE/slurmctld.pid"
  stop munged "$STATE/munge/munged.pid"
  rm -rf "$STATE"
}
on_signal() {
  say "signal $1: stopping"
  [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null && sleep 0.5
  exit $((128 + $2))
}
trap cleanup EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
wait_for() { local n=$(($1 * 10)); shift; while [ $n -gt 0 ]; do "$@" && return 0; n=$((n - 1)); sleep 0.1; done; return 1; }
# cannot NAME LOG: a daemon did not come up; this machine cannot run it here (77), with its log
cannot() { say "$1 did not come up; its log:"; tail -n 15 "$2" 2>/dev/null | sed 's/^/  | /' >&2; skip "cannot run Slurm here ($1)"; }

STATE=$(mktemp -d "$DIR/$PROG.XXXXXX") || exit 1
chmod 755 "$STATE"
say "Slurm state in $STATE"
export SLURM_CONF=$STATE/slurm.conf NETNS_SLURM_DIR=$STATE

# ---- munge: a daemon and key of this cluster's own, on its own socket ----
# munged wants its socket directory open to all (0755) and its key private
mkdir -m 700 "$STATE/munge" && mkdir -m 755 "$STATE/munge-socket" || exit 1
head -c 1024 /dev/urandom >"$STATE/munge/munge.key" && chmod 600 "$STATE/munge/munge.key" || exit 1
SOCK=$STATE/munge-socket/munge.socket
setsid munged --socket="$SOCK" --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
  --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" </dev/null >/dev/null 2>&1
wait_for 5 alive "$STATE/munge/munged.pid" munged || cannot munged "$STATE/munge/munged.log"

# ---- slurm.conf ----
NAMES=()
for ((i = 0; i < ${#NS[@]}; i++)); do NAMES+=("n$i"); done
export NETNS_SLURM_NODES="${NAMES[*]}"
LAST=$((${#NS[@]} - 1))
{
  echo "# $PROG: ${#NS[@]} emulated nodes in namespaces ${NS[*]}"
  echo "ClusterName=netns"
  echo "SlurmctldHost=$(hostname -s)($HEADADDR)"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  # cred_expire is also how long a requeued job waits before it starts again (default 120 s)
  echo "AuthInfo=socket=$SOCK,cred_expire=10"
  echo "StateSaveLocation=$STATE/ctld"
  echo "SlurmdSpoolDir=$STATE/spool"
  echo "SlurmctldPidFile=$STATE/slurmctld.pid"
  echo "SlurmdPidFile=$STATE/slurmd-%n.pid"
  echo "SlurmctldLogFile=$STATE/slurmctld.log"
  echo "SlurmdLogFile=$STATE/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobCompType=jobcomp/none"
  echo "SchedulerParameters=batch_sched_delay=0,sched_interval=2"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "EnforcePartLimits=ALL"
  echo "MpiDefault=pmix"
  echo "MailProg=/bin/true"
  echo "ReturnToService=2"
  echo "KillWait=5"
  echo "InactiveLimit=0"
  echo "MinJobAge=300"
  echo "SlurmdParameters=config_overrides"
  for ((i = 0; i < ${#NS[@]}; i++)); do
    echo "NodeName=n$i NodeAddr=${ADDRS[i]} CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=1024 State=UNKNOWN"
  done
  echo "PartitionName=nodes Nodes=n[0-$LAST] Default=YES MaxTime=INFINITE State=UP"
} >"$SLURM_CONF"
mkdir "$STATE/ctld" || exit 1

# ---- slurmctld, here in the head namespace ----
setsid slurmctld -f "$SLURM_CONF" </dev/null >>"$STATE/slurmctld.out" 2>&1
wait_for 30 eval 'scontrol ping 2>/dev/null | grep -q "is UP"' || cannot slurmctld "$STATE/slurmctld.log"

# ---- one slurmd per node: its namespace, its cgroup mounts, its /tmp ----
cat >"$STATE/node.sh" <<'EOF'
# netns-slurm's node start: in the mount namespace `ip netns exec` made, mount the machine's
# cgroup file systems again, the node's own /tmp, /dev/shm and spool directory, then become slurmd
# (it daemonizes)
set -e
node=$1 tmp=$2 conf=$3 spool=$4 own=$5 hold=$6
printf '%s\n' "$NETNS_SLURM_CGROUPS" | while read -r type opts path; do
  [ -d "$path" ] || mkdir -p "$path"
  mount -t "$type" -o "$opts" "$type" "$path"
done
# what lives under the machine's /tmp and every node must see (a build tree cloned there) is
# bound back into the node's own /tmp from a view of the machine's one
mount --bind /tmp "$hold"
mount --bind "$tmp" /tmp
printf '%s\n' "$NETNS_SLURM_SHARE" | while read -r p; do
  [ -n "$p" ] || continue
  rel=${p#/tmp/}
  mkdir -p "/tmp/$rel"
  mount --bind "$hold/$rel" "/tmp/$rel"
done
mount --bind "$own" "$spool"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
exec slurmd -f "$conf" -N "$node"
EOF
for ((i = 0; i < ${#NS[@]}; i++)); do
  mkdir -p "$STATE/spool" "$STATE/spool-n$i" "$STATE/hold-n$i" && mkdir -m 1777 "$STATE/tmp-n$i" || exit 1
  setsid ip netns exec "${NS[i]}" sh "$STATE/node.sh" "n$i" "$STATE/tmp-n$i" "$SLURM_CONF" "$STATE/spool" "$STATE/spool-n$i" \
    "$STATE/hold-n$i" \
    </dev/null >>"$STATE/slurmd-n$i.out" 2>&1
  wait_for 10 alive "$STATE/slurmd-n$i.pid" slurmd \
    || { cat "$STATE/slurmd-n$i.out" >&2; cannot "slurmd n$i" "$STATE/slurmd-n$i.log"; }
done
idle() { [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" = "${#NS[@]}" ]; }
wait_for 30 idle || { sinfo -N >&2; cannot "the nodes (not idle in 30 s)" "$STATE/slurmd-n0.log"; }
say "${#NS[@]} Slurm node(s) idle: ${NAMES[*]} at ${ADDRS[*]}, $CPUS CPUs each; slurmctld at $HEADADDR"

# ---- COMMAND, in the background so that a signal reaches the trap at once ----
"$@" <&0 &
CHILD=$!
wait "$CHILD"
rc=$?
CHILD=
exit "$rc"
