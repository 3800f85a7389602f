/* parallel/comm.c - rank bookkeeping and deadline waits. Open MPI has no timeout on collectives,
 * so every collective dtrain runs is nonblocking and waited on here: MPI_Testall in a loop,
 * heartbeats meanwhile, and MPI_Abort (through dt_die) past the deadline naming the silent ranks. */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include "util/common.h"
#include "util/fault.h"
#include "parallel/mpierr.h"

void dt_comm_init(dt_comm *c, double timeout)
{
        memset(c, 0, sizeof *c);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->size);
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
        dt_mpi_errhandler_set(node);
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
        c->timeout = timeout > 0 ? timeout : 300;
        if (c->size > 1)
                snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", c->rank, c->size);
        c->hb = dt_hb_new(c->rank, c->size, c->timeout);
}

void dt_comm_free(dt_comm *c)
{
        if (c->size == 0) return;       /* never initialised (dtrain check) */
        dt_hb_free(c->hb);
        c->hb = NULL;
}

void dt_comm_announce(dt_comm *c, long step)
{
        c->step = step;
}

void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what)
{
        double t0 = dt_now();
        dt_hb_tick(c->hb, c->step);
        dt_fault_at(DT_FAULT_HANG, c->step + 1);
        /* Open MPI advances nonblocking collectives only inside MPI calls, so poll without
         * sleeping (a sleep between tests made the gradient sync several times slower than
         * MPI_Allreduce); sched_yield lets other ranks run when ranks outnumber cores. */
        for (unsigned long k = 0;; k++) {
                int done = 0;
                MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
                if (done) return;
                if ((k & 255) == 255) {
                        double late = dt_now() - t0 - c->timeout;
                        char who[512];
                        if (late > 0 && dt_hb_blame(c->hb, c->step, late, who, sizeof who))
                                dt_die(DT_EXIT_PEER, "%s at step %ld did not complete within %.0f s (%s)", what,
                                       c->step + 1, c->timeout, who);
                        dt_hb_tick(c->hb, c->step);
                        sched_yield();
                }
        }
}

void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what)
{
        dt_comm_allreduce_op(c, buf, count, t, MPI_SUM, what);
}

void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what)
{
        if (c->size == 1) return;
        int tsz;
        MPI_Type_size(t, &tsz);
        const long chunk = 1L << 28;    /* MPI counts are int */
        for (long off = 0; off < count; off += chunk) {
                MPI_Request r;
                int cnt = (int)(count - off < chunk ? count - off : chunk);
                MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * tsz, cnt, t, op, MPI_COMM_WORLD, &r);
                dt_comm_wait(c, 1, &r, what);
        }
}

void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what)
{
        if (c->size == 1) return;
        MPI_Request r;
        MPI_Ibcast(buf, count, t, root, MPI_COMM_WORLD, &r);
        dt_comm_wait(c, 1, &r, what);
}
