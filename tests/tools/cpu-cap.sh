#!/usr/bin/env bash
# tests/tools/cpu-cap.sh --share F [--period US] -- COMMAND... : runs COMMAND with every MPI rank it
# launches through this script held to F of one core (its own cgroup v1 CPU quota), so N ranks on
# fewer cores behave as N slower cores of their own instead of time-slicing each other.
#
# Usage: tests/tools/cpu-cap.sh --share 0.5 -- mpirun -np 4 tests/tools/cpu-cap.sh src/dtrain bench ...
# (the inner call, seeing DTRAIN_CPUCAP_DIR, puts its rank in a group of its own and execs the rest).
#
# Why a quota and not sharing: a waiting pipeline stage spins in MPI and, time-sliced, takes the core
# from the stage that has work, so 4 ranks on 2 cores measure the scheduler, not the schedule. Under a
# quota a rank's spin spends only its own share: 4 ranks at 0.5 on 2 cores each run as if alone on a
# core of half the speed. The bandwidth caps of netns-cluster.sh emulate slower links the same way.
# Needs root and the cgroup v1 cpu controller; exit 77 without. Every group is removed on exit.
#
# The period (default 10 ms) must span at least two scheduler ticks: CFS charges a spinning rank's
# runtime only at a tick or a switch, so under a period shorter than the tick (4 ms at this kernel's
# HZ=250) a rank overruns its quota, repays it over the next periods, and the two ranks of a core are
# throttled together. With the old 2 ms period 4 ranks at 0.5 ran 36-39% of a core each, not 50 (the
# rest went to other tasks or idle), and equal stages were uneven (bench/models/mlp-even10.yaml, zb-v,
# 4 ranks, m = 8, batch 2048, rounds under the lock: per-stage busy 1800-2020 ms a step, max-min 1.7-14%,
# median 7.5%; floor 1 - mean/max busy median 3.9%); at 8, 10 or 20 ms each rank ran 47-49.6% of a
# core, busy 1360-1530 ms, max-min 1.6-7.6%, median 4%, floor median 2% (4 ms: 41-45%, max-min 6%).
# Pinning two ranks to each core (taskset) or a quota of 0.45 measured no more even than this.
set -eu
root=/sys/fs/cgroup/cpu
if [ -n "${DTRAIN_CPUCAP_DIR:-}" ] && [ "${1:-}" != --share ]; then
        r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-$$}}}
        g="$DTRAIN_CPUCAP_DIR/rank$r"
        mkdir "$g"
        echo "$DTRAIN_CPUCAP_PERIOD" > "$g/cpu.cfs_period_us"
        echo "$DTRAIN_CPUCAP_QUOTA" > "$g/cpu.cfs_quota_us"
        echo $$ > "$g/cgroup.procs"
        exec "$@"
fi
share=; period=10000
while [ $# -gt 0 ]; do
        case $1 in
        --share) share=$2; shift 2 ;;
        --period) period=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "cpu-cap.sh: unknown option '$1' (expected --share F [--period US] -- COMMAND)" >&2; exit 2 ;;
        esac
done
if [ -z "$share" ] || [ $# -eq 0 ]; then
        echo "cpu-cap.sh: usage: --share F [--period US] -- COMMAND" >&2
        exit 2
fi
quota=$(python3 -c "import sys; f=float(sys.argv[1]); p=int(sys.argv[2]); assert 0<f<=64 and 1000<=p<=1000000; print(max(1000,int(f*p)))" "$share" "$period") || {
        echo "cpu-cap.sh: --share must be in (0, 64] and --period in [1000, 1000000] us" >&2; exit 2; }
if [ "$(id -u)" != 0 ] || [ ! -w "$root/cgroup.procs" ]; then
        echo "cpu-cap.sh: needs root and a writable cgroup v1 cpu controller at $root" >&2
        exit 77
fi
cleanup() {
        for g in "$dir"/rank*; do
                [ -d "$g" ] || continue
                # a rank still listed (killed job) goes back to the root group first
                while read -r p; do echo "$p" > "$root/cgroup.procs" 2>/dev/null || true; done < "$g/cgroup.procs"
                rmdir "$g" 2>/dev/null || true
        done
        rmdir "$dir" 2>/dev/null || true
}
dir="$root/dtrain-cap.$$"
mkdir "$dir" || exit 77
trap cleanup EXIT
# A group's weight against the other tasks is its cpu.shares, not its tasks' nice: 4 ranks at 0.5
# started at nice 19 beside the others' work ran 0.23-0.25 of a core each, half the machine, where a
# nice-19 task gets ~1.5% of a core beside a nice-0 one (a capped test beside a measurement took
# half its cores). The group takes the caller's nice as the kernel weighs it (1024 at 0, 1.25 times
# less a step: 15 at 19).
ni=$(ps -o ni= -p $$ | tr -d ' ')
w=$(python3 -c "import sys; print(max(2, round(1024 / 1.25 ** int(sys.argv[1]))))" "${ni:-0}")
echo "$w" > "$dir/cpu.shares"
export DTRAIN_CPUCAP_DIR="$dir" DTRAIN_CPUCAP_PERIOD="$period" DTRAIN_CPUCAP_QUOTA="$quota"
# each rank spins inside its own quota; a yield would only delay its message by a tick, and hand the
# rest of the neighbour's slice to the rank beside it on the core (which then runs faster than its
# share until its quota ends). Open MPI yields in every poll once the ranks outnumber the cores
# (mpi_yield_when_idle): 6-17 thousand switches a second per rank; off here (mlp-even10 zb-v at
# 10 ms, two rounds each: steady simulated bubble 4.5-4.8% against 5.5-6.1 yielding, measured 11.2-12.2
# against 12.7-13.1). A wait that sleeps between polls (20 us), leaving the quota to the next action,
# measured no better (2 ms period, mlp-even8, 1f1b and zb-v at batch 128-4096: within 1-3 points).
# Actions of a few ms stay uneven at any period: two ranks share a core in slices of a tick, so keep
# actions much longer than the tick (bench/vstages.sh BATCH=).
export DTRAIN_WAIT_YIELD=${DTRAIN_WAIT_YIELD:-0} OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-0}
set +e
"$@"
rc=$?
exit $rc
