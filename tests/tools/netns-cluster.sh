#!/usr/bin/env bash
# tests/tools/netns-cluster.sh - an emulated K-node cluster on this one machine: K network
# namespaces ("nodes") joined by a bridge, each node's egress capped with tc tbf, and COMMAND run
# with what mpirun needs to start ranks in the nodes over Open MPI's TCP transport. Everything it
# creates is removed on exit, also on failure or signal. Exit 77 (skip) where the machine cannot
# (not root, no `ip netns`, no veth/bridge/tbf); otherwise COMMAND's exit status.
#
# usage: netns-cluster.sh [--nodes K] [--rate RATE|none] [--slots S] [--burst B] [--packet P] -- COMMAND...
#   --nodes K    node namespaces (default 2)
#   --rate RATE  tc rate of each node's egress, e.g. 1gbit, 100mbit (default 1gbit); none: uncapped
#   --slots S    slots per node in the hostfile (default 1)
#   --burst B    tbf bucket in bytes (default 8192: one of the largest packets)
#   --packet P   largest packet a node's stack hands its link, bytes (default 8192; the veth's
#                GSO size). A wire has no bucket: each message takes its size / rate. With the
#                kernel's 64 KiB packets and a 128 KiB bucket to hold them, a 37 KB message that
#                found the link idle crossed a 1gbit cap at once, not in the 0.3 ms a wire takes.
#                At 8 KiB both, 32 KiB ping-pong messages take their wire time (265 us) and long
#                ones get 0.105 GB/s of the 0.125 (16 KiB both: 187 us and 0.118)
#
# COMMAND runs inside the head namespace (see the picture) with these in its environment:
#   MPIRUN_NETNS_ARGS  mpirun options: hostfile, rsh agent, TCP only, interfaces, no binding
#   NETNS_HOSTFILE     the hostfile: one line "ADDR slots=S" per node
#   NETNS_NODES        K
#   NETNS_NAMESPACES   the node namespaces, space-separated (node 0 first)
#   NETNS_ADDRS        their addresses, in the same order
#   NETNS_HEAD         the head namespace; NETNS_SUBNET the /24
# so that `mpirun $MPIRUN_NETNS_ARGS -np N prog` places ranks by slot: node 0 takes ranks 0..S-1.
# After COMMAND, one line per node with the byte counters of its link goes to stderr and, when
# NETNS_STATS names a file, to that file (appended):
#   node=0 ns=NS addr=A dev=eth0 rate=1gbit qdisc_bytes=N qdisc_pkts=N qdisc_dropped=N
#   qdisc_overlimits=N tx_bytes=N rx_bytes=N
# qdisc_* count what passed the tbf cap (absent with --rate none), tx/rx_bytes the veth's totals.
#
# The picture (nothing is created in the root namespace, so concurrent runs cannot collide and the
# machine's own addresses and routes are never touched):
#
#   ns dtrain-PID-head: lo, br0 (SUBNET.1)  <- mpirun and COMMAND run here
#        |-- h0 ==veth== eth0 in ns dtrain-PID-n0 (SUBNET.11), tbf on eth0's egress
#        |-- h1 ==veth== eth0 in ns dtrain-PID-n1 (SUBNET.12), tbf on eth0's egress
#        ...
#
# Why each mpirun option (MPIRUN_NETNS_ARGS):
#   --hostfile, --mca plm rsh, --mca ras ^slurm,gridengine: the nodes are the hostfile's addresses,
#       started through the rsh launcher even inside a Slurm allocation.
#   --mca plm_rsh_agent AGENT: Open MPI runs "AGENT ADDR orted..."; the agent maps ADDR to its
#       namespace and runs the command there with `ip netns exec` (no sshd needed).
#   --mca plm_rsh_no_tree_spawn 1: mpirun starts every daemon itself, not daemons each other.
#   --mca orte_leave_session_attached 1: the daemons stay children of their agent instead of
#       daemonizing, so a daemon that dies is seen by mpirun (which then stops with an error and
#       the daemon's own message) rather than waited for forever in silence.
#   --mca oob_tcp_if_include / btl_tcp_if_include SUBNET: daemons and ranks talk only over the
#       bridge, never over loopback or the machine's interfaces.
#   --mca pml ob1 --mca btl tcp,self: no shared memory (vader) between ranks at all, so every
#       byte between nodes crosses the capped veths. Two ranks inside one node also talk TCP, to
#       the node's own address; the kernel routes that through the namespace's loopback, so it does
#       not cross (nor count on) the link - as on a real cluster, where they would use shared memory.
#   --bind-to none: each daemon sees the whole machine and would pin rank 0 of every node to core 0.
#   --allow-run-as-root: the script runs as root.
# (Never --mca btl ^openib: that replaces Debian's exclusion list and slows every launch.)
set -u
PROG=netns-cluster
NODES=2 RATE=1gbit SLOTS=1 BURST=8192 PACKET=8192
say() { echo "$PROG: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
usage() { sed -n 's/^# \{0,1\}//; 8,18p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --slots) SLOTS=${2:?}; shift 2 ;;
    --burst) BURST=${2:?}; shift 2 ;;
    --packet) PACKET=${2:?}; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) say "unknown option '$1'"; usage ;;
  esac
done
[ $# -gt 0 ] || { say "no COMMAND after --"; usage; }
case $NODES in ''|*[!0-9]*) say "--nodes must be a positive integer, got '$NODES'"; exit 2 ;; esac
case $SLOTS in ''|*[!0-9]*) say "--slots must be a positive integer, got '$SLOTS'"; exit 2 ;; esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || { say "--nodes must be 1..200, got $NODES"; exit 2; }
[ "$SLOTS" -ge 1 ] || { say "--slots must be at least 1"; exit 2; }
case $BURST in ''|*[!0-9]*) say "--burst must be a number of bytes, got '$BURST'"; exit 2 ;; esac
case $PACKET in ''|*[!0-9]*) say "--packet must be a number of bytes, got '$PACKET'"; exit 2 ;; esac
[ "$PACKET" -ge 1500 ] && [ "$PACKET" -le 65536 ] || { say "--packet must be 1500..65536, got $PACKET"; exit 2; }
[ "$BURST" -ge "$PACKET" ] || { say "--burst ($BURST) must hold a --packet ($PACKET)"; exit 2; }

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, veths, tc)"
command -v ip >/dev/null || skip "no 'ip' (iproute2)"
command -v tc >/dev/null || skip "no 'tc' (iproute2)"

TAG=dtrain-$$
HEAD=$TAG-head
NS=()           # node namespaces actually created, for the cleanup
CREATED=()      # every namespace created, head first
CHILD=
WORK=

# ---- cleanup: runs on every exit, also half-way through the set-up ----
cleanup() {
  local ns pids p
  trap - EXIT INT TERM
  # a namespace with processes left in it outlives `ip netns del` (with its veths): end the
  # processes we started there (mpirun's daemons and ranks, if COMMAND left any) first
  for ns in "${CREATED[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] || continue
    say "ending what is left in $ns:$(for p in $pids; do printf ' %s %.100s;' "$p" "$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)"; done)"
    kill -TERM $pids 2>/dev/null
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=
    for ns in "${CREATED[@]}"; do pids="$pids$(ip netns pids "$ns" 2>/dev/null)"; done
    [ -z "$pids" ] && break
    sleep 0.2
  done
  for ns in "${CREATED[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  # deleting a namespace deletes the veth ends and the bridge in it (a veth pair goes with either end)
  for ns in "${CREATED[@]}"; do
    ip netns del "$ns" 2>/dev/null || say "warning: could not delete namespace $ns"
  done
  [ -n "$WORK" ] && rm -rf "$WORK"
}
on_signal() { # forward to COMMAND, give it 5 s to end (mpirun stops its job), then clean up
  say "signal $1: stopping"
  if [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null; then
    for _ in $(seq 25); do kill -0 "$CHILD" 2>/dev/null || break; sleep 0.2; done
  fi
  exit $((128 + $2))    # the EXIT trap ends whatever is still running in the namespaces
}
trap cleanup EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM

# step WHAT CMD... : run a set-up command; on failure say what failed and exit 1 (the trap cleans)
step() {
  local what=$1 err; shift
  err=$("$@" 2>&1) || { say "error: $what failed: ${err:-exit $?}"; exit 1; }
}
# addns NAME : create a namespace with loopback up and IPv6 off (no router solicitations or DAD
# packets on the links: the counters then hold only what the command sent)
addns() {
  local err
  if ip netns list | grep -q "^$1\( \|$\)"; then
    say "error: namespace $1 already exists (left by a killed run with this pid?); remove it with: ip netns del $1"
    exit 1
  fi
  err=$(ip netns add "$1" 2>&1) || skip "'ip netns add $1' failed: $err"
  CREATED+=("$1")
  step "loopback up in $1" ip -n "$1" link set lo up
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    >/dev/null 2>&1 || true
}

# ---- a private /24 that the machine does not use ----
# The namespaces have their own routing tables, so any subnet would work; still take one that no
# address or route of the root namespace covers, so that no reader of a log can confuse the two.
SUBNET=
for n in $(seq $(($$ % 200)) 255) $(seq 0 $(($$ % 200))); do
  c=10.213.$n
  ip -4 -o addr show | grep -q " $c\." && continue
  ip -4 route show match "$c.0/24" | grep -vq '^default' && continue
  SUBNET=$c; break
done
[ -n "$SUBNET" ] || { say "error: no free /24 in 10.213.0.0/16"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX") || exit 1
# its paths go unquoted into MPIRUN_NETNS_ARGS
case $WORK in *[[:space:]]*) say "error: TMPDIR must not contain white space: '$WORK'"; exit 1 ;; esac
# first, so that what a killed run (SIGKILL: no trap) left behind can be found and removed by hand
say "setting up: namespaces $TAG-*, files in $WORK"

# ---- the head namespace: a bridge that every node's veth joins ----
addns "$HEAD"
err=$(ip -n "$HEAD" link add br0 type bridge 2>&1) || skip "no bridge support: $err"
step "bridge address" ip -n "$HEAD" addr add "$SUBNET.1/24" dev br0
step "bridge up" ip -n "$HEAD" link set br0 up

# ---- the nodes ----
ADDRS=()
: >"$WORK/hostfile"
for ((i = 0; i < NODES; i++)); do
  ns=$TAG-n$i addr=$SUBNET.$((11 + i))
  addns "$ns"
  NS+=("$ns") ADDRS+=("$addr")
  err=$(ip -n "$HEAD" link add "h$i" type veth peer name eth0 netns "$ns" 2>&1) || skip "no veth support: $err"
  step "h$i into br0" ip -n "$HEAD" link set "h$i" master br0
  step "h$i up" ip -n "$HEAD" link set "h$i" up
  step "address of $ns" ip -n "$ns" addr add "$addr/24" dev eth0
  step "eth0 up in $ns" ip -n "$ns" link set eth0 up
  if [ "$RATE" != none ]; then
    # packets no larger than a wire would carry in a few tens of microseconds, so that the bucket
    # can stay small: a message then takes its size / rate, as on a real link
    step "packet size of $ns" ip -n "$ns" link set dev eth0 gso_max_size "$PACKET"
    # the cap sits on the node's egress: every byte a node sends to another crosses exactly one
    # tbf (its own), so the qdisc counters of the sender count it once
    err=$(tc -n "$ns" qdisc add dev eth0 root tbf rate "$RATE" burst "$BURST" latency 50ms 2>&1) \
      || { case $err in *nknown*|*"not supported"*|*"No such file"*) skip "tc tbf not available: $err" ;; esac
           say "error: tc tbf rate $RATE burst $BURST on $ns: $err"; exit 1; }
  fi
  echo "$addr slots=$SLOTS" >>"$WORK/hostfile"
  mkdir "$WORK/n$i" || exit 1
done

# ---- the rsh agent: Open MPI calls it as AGENT [options] HOST COMMAND... ----
# Each node gets its own Open MPI session directory (orte_tmpdir_base), as a real node has its own
# /tmp: the nodes share this machine's /tmp and host name, so every daemon would otherwise use the
# same /tmp/ompi.HOST.UID/jf.N, and two daemons writing hwloc's topology file (hwloc.sm) there at
# once crash (orted: SIGSEGV in hwloc_shmem_topology_write, about one launch in ten on a 2-core
# machine). The ranks inherit the setting from their daemon.
{
  echo '#!/bin/sh'
  echo "# $PROG's rsh agent: run COMMAND in the namespace of node HOST, as ssh HOST COMMAND would"
  echo 'while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done'
  echo 'case $1 in'
  for ((i = 0; i < NODES; i++)); do echo "  ${ADDRS[i]}) ns=${NS[i]} tmp=$WORK/n$i ;;"; done
  echo "  *) echo \"$PROG agent: unknown host '\$1'\" >&2; exit 255 ;;"
  echo 'esac'
  echo 'shift'
  echo 'export OMPI_MCA_orte_tmpdir_base="$tmp"'
  echo 'exec ip netns exec "$ns" sh -c "$*"'
} >"$WORK/agent"
chmod +x "$WORK/agent"

export NETNS_HOSTFILE=$WORK/hostfile NETNS_NODES=$NODES NETNS_HEAD=$HEAD NETNS_SUBNET=$SUBNET.0/24
export NETNS_NAMESPACES="${NS[*]}" NETNS_ADDRS="${ADDRS[*]}"
export MPIRUN_NETNS_ARGS="--hostfile $WORK/hostfile --mca plm rsh --mca ras ^slurm,gridengine \
--mca plm_rsh_agent $WORK/agent --mca plm_rsh_no_tree_spawn 1 --mca orte_leave_session_attached 1 \
--mca oob_tcp_if_include $SUBNET.0/24 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $SUBNET.0/24 \
--bind-to none --allow-run-as-root"

say "$NODES node(s) (${NS[*]}) at ${ADDRS[*]}, slots per node: $SLOTS, egress cap: $RATE; head $HEAD ($SUBNET.1)"

# ---- COMMAND, in the head namespace; in the background so that a signal reaches the trap at once ----
ip netns exec "$HEAD" "$@" <&0 &
CHILD=$!
wait "$CHILD"
rc=$?
CHILD=

# ---- the counters of each link ----
for ((i = 0; i < NODES; i++)); do
  ns=${NS[i]}
  line="node=$i ns=$ns addr=${ADDRS[i]} dev=eth0 rate=$RATE"
  if [ "$RATE" != none ]; then
    # " Sent 1234 bytes 56 pkt (dropped 0, overlimits 7 requeues 0)"
    line="$line $(tc -n "$ns" -s qdisc show dev eth0 | awk '/^ Sent /{gsub(/[(),]/, ""); \
      printf "qdisc_bytes=%s qdisc_pkts=%s qdisc_dropped=%s qdisc_overlimits=%s", $2, $4, $7, $9; exit}')"
  fi
  tx=$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes)
  rx=$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)
  line="$line tx_bytes=$tx rx_bytes=$rx"
  say "$line"
  [ -n "${NETNS_STATS:-}" ] && echo "$line" >>"$NETNS_STATS"
done
exit "$rc"
