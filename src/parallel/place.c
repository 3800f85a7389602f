/* parallel/place.c - which cores a rank runs on when a node's ranks want more threads than it has
 * cores (mpirun --oversubscribe, a laptop, a small allocation). Left to itself the kernel spreads
 * the ranks over the cores in no particular order, and a layout's speed then depends on the draw:
 * with data 2 x pipeline 2 on 2 cores, the two stage-0 ranks sharing a core compute at the same
 * time and the stage-1 ranks idle on the other (measured 6.6-7.1 ms per lenet step), while each
 * replica's two stages sharing a core take turns, one computing while the other waits for it
 * (4.6 ms). So the ranks of one pipeline (one replica's stages of one tensor shard) are put on the
 * same cores and different pipelines on different cores, round robin; without stages every rank
 * is busy at once and they are simply spread evenly. The planner's cost model assumes this
 * placement (a waiting stage yields its core to the one it waits on). Nothing changes when the
 * node has enough cores, when a rank's threads alone fill its allowed cores, or with
 * DTRAIN_BIND=0. The allowed set is what the launcher gave (sched_getaffinity), never more. Only
 * the rank's main thread is pinned (with the threads it starts later, the data loader): pinning
 * Open MPI's own helper threads beside it made steps up to 20x slower. */
#include "parallel/place.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "util/common.h"

static int by_group(const void *a, const void *b)
{
        const dt_place_member *x = a, *y = b;
        if (x->group != y->group) return x->group < y->group ? -1 : 1;
        if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
        return (x->rank > y->rank) - (x->rank < y->rank);
}

int dt_place_unit(const dt_place_member *members, int n, int rank, int units)
{
        dt_place_member *m = dt_malloc((size_t)n * sizeof *m);
        memcpy(m, members, (size_t)n * sizeof *m);
        qsort(m, (size_t)n, sizeof *m, by_group);
        int groups = 0, gi = -1, pos = -1;
        for (int i = 0; i < n; i++) {
                if (i == 0 || m[i].group != m[i - 1].group) groups++;
                if (m[i].rank == rank) {
                        gi = groups - 1;
                        pos = i;
                }
        }
        free(m);
        if (pos < 0 || units < 1) return -1;
        /* a pipeline per unit when there are enough pipelines (round robin), else a rank per unit */
        return groups >= units ? gi % units : pos % units;
}

int dt_place_rank(const dt_comm *world, int group, int stage, int threads, char *desc, size_t n)
{
        if (desc && n) desc[0] = 0;
        const char *e = getenv("DTRAIN_BIND");
        if ((e && !strcmp(e, "0")) || world->size < 2 || world->comm == MPI_COMM_NULL) return 0;
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
        int ncpu = CPU_COUNT(&allowed), cpus[CPU_SETSIZE], k = 0;
        for (int c = 0; c < CPU_SETSIZE && k < ncpu; c++)
                if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
        threads = threads > 0 ? threads : 1;
        int units = ncpu / threads;     /* rank-sized groups of cores */
        /* collective over the node: every rank of it takes the same decision */
        MPI_Comm node;
        MPI_Comm_split_type(world->comm, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &node);
        int nr, me;
        MPI_Comm_size(node, &nr);
        MPI_Comm_rank(node, &me);
        int mine[3] = { group, stage, world->rank }, over = nr * threads > ncpu && units >= 1 ? 1 : 0, all_over;
        MPI_Allreduce(&over, &all_over, 1, MPI_INT, MPI_MIN, node);
        if (!all_over || units < 2) {
                MPI_Comm_free(&node);
                return 0;
        }
        int *buf = dt_malloc((size_t)nr * 3 * sizeof *buf);
        MPI_Allgather(mine, 3, MPI_INT, buf, 3, MPI_INT, node);
        MPI_Comm_free(&node);
        dt_place_member *m = dt_malloc((size_t)nr * sizeof *m);
        for (int i = 0; i < nr; i++) m[i] = (dt_place_member){ buf[3 * i], buf[3 * i + 1], buf[3 * i + 2] };
        free(buf);
        int unit = dt_place_unit(m, nr, world->rank, units);
        free(m);
        if (unit < 0) return 0;
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int t = 0; t < threads; t++) CPU_SET(cpus[unit * threads + t], &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) return 0;
        if (desc && n) {
                int len = snprintf(desc, n, "cpu");
                for (int t = 0; t < threads && len > 0 && (size_t)len < n; t++)
                        len += snprintf(desc + len, n - (size_t)len, "%s%d", t ? "," : " ", cpus[unit * threads + t]);
        }
        return 1;
}
