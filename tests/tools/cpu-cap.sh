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
# core of half the speed (CFS enforces the quota every period; the period is short so that an action
# is stretched evenly rather than stopped for a long slice). The bandwidth caps of netns-cluster.sh
# emulate slower links the same way. Needs root and the cgroup v1 cpu controller; exit 77 without.
# Every group is removed on exit.
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
share=; period=2000
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
dir="$root/dtrain-cap.$$"
mkdir "$dir" || exit 77
cleanup() {
        for g in "$dir"/rank*; do
                [ -d "$g" ] || continue
                # a rank still listed (killed job) goes back to the root group first
                while read -r p; do echo "$p" > "$root/cgroup.procs" 2>/dev/null || true; done < "$g/cgroup.procs"
                rmdir "$g" 2>/dev/null || true
        done
        rmdir "$dir" 2>/dev/null || true
}
trap cleanup EXIT
export DTRAIN_CPUCAP_DIR="$dir" DTRAIN_CPUCAP_PERIOD="$period" DTRAIN_CPUCAP_QUOTA="$quota"
# each rank spins inside its own quota; a yield would only delay its message by a tick. A wait that
# sleeps between polls (20 us) instead, leaving the quota to the next action, measured no better
# (4 ranks at 0.5, mlp-even8, 1f1b and zb-v at batch 128, 1024 and 4096: within 1-3 points either
# way), nor did a longer period (10 or 100 ms: an action then runs at full speed until the quota is
# spent, so the ranks are no longer half-speed cores). What evens the emulation is actions much
# longer than the 2 ms period (bench/vstages.sh BATCH=).
export DTRAIN_WAIT_YIELD=${DTRAIN_WAIT_YIELD:-0}
set +e
"$@"
rc=$?
exit $rc
