/* parallel/agree.c - agreed failures printed once (see agree.h). stderr is swapped for a memory
 * stream around fn on ranks other than 0; the swap is undone before anything else runs. */
#include "parallel/agree.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>

static int world(int *rank, int *size)
{
        int inited = 0, fin = 0;
        MPI_Initialized(&inited);
        MPI_Finalized(&fin);
        if (!inited || fin) return 0;
        MPI_Comm_rank(MPI_COMM_WORLD, rank);
        MPI_Comm_size(MPI_COMM_WORLD, size);
        return *size > 1;
}

int dt_agree_rc(int rc)
{
        int rank = 0, size = 1;
        if (!world(&rank, &size)) return rc;
        int all = rc;
        MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        return all ? all | DT_EXIT_AGREED : 0;
}

int dt_agree_run(int (*fn)(void *ud), void *ud)
{
        int rank = 0, size = 1;
        if (!world(&rank, &size)) return fn(ud);
        char *buf = NULL;
        size_t len = 0;
        FILE *saved = stderr, *mem = rank ? open_memstream(&buf, &len) : NULL;
        if (mem) stderr = mem;
        int rc = fn(ud);
        if (mem) {
                fflush(mem);
                stderr = saved;
        }
        int v[2] = { rc, rc ? rank : INT_MAX }, all[2];
        MPI_Allreduce(&v[0], &all[0], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&v[1], &all[1], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (mem) {
                if (rc && all[1] == rank && buf) fputs(buf, stderr);   /* rank 0 did not fail: the first that did says why */
                fclose(mem);
                free(buf);
        }
        return all[0] ? all[0] | DT_EXIT_AGREED : 0;
}
