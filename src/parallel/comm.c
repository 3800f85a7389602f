/* parallel/comm.c - rank bookkeeping and deadline waits. Open MPI has no timeout on collectives,
 * so every collective dtrain runs is nonblocking and waited on here: MPI_Testall in a loop with a
 * short sleep once nothing moves, and MPI_Abort (through dt_die) past the deadline. */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include "util/common.h"
#include "util/fault.h"
#include "parallel/mpierr.h"

enum { TAG_ARRIVE = 7001 };

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
        c->announced = -1;
        c->my_arrive = MPI_REQUEST_NULL;
        if (c->size > 1)
                snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", c->rank, c->size);
        if (c->rank == 0 && c->size > 1) {
                c->arrive_req = dt_calloc((size_t)c->size, sizeof *c->arrive_req);
                c->arrive_buf = dt_calloc((size_t)c->size, sizeof *c->arrive_buf);
                c->arrive_rx = dt_calloc((size_t)c->size, sizeof *c->arrive_rx);
                for (int r = 0; r < c->size; r++) {
                        c->arrive_buf[r] = -1;
                        c->arrive_req[r] = MPI_REQUEST_NULL;
                }
        }
}

void dt_comm_free(dt_comm *c)
{
        if (c->size == 0) return;       /* never initialised (dtrain check) */
        /* outstanding arrival messages are cancelled: the job is ending in step with every rank */
        if (c->arrive_req)
                for (int r = 1; r < c->size; r++)
                        if (c->arrive_req[r] != MPI_REQUEST_NULL) {
                                MPI_Cancel(&c->arrive_req[r]);
                                MPI_Request_free(&c->arrive_req[r]);
                        }
        if (c->my_arrive != MPI_REQUEST_NULL) MPI_Wait(&c->my_arrive, MPI_STATUS_IGNORE);
        free(c->arrive_req);
        free(c->arrive_buf);
        free(c->arrive_rx);
        c->arrive_rx = NULL;
        c->arrive_req = NULL;
        c->arrive_buf = NULL;
}

/* rank 0: take in every arrival that has come (the newest step per peer lands in arrive_buf),
 * keeping one receive posted per peer into arrive_rx */
static void poll_arrivals(dt_comm *c)
{
        if (!c->arrive_req) return;
        for (int r = 1; r < c->size; r++) {
                for (;;) {
                        if (c->arrive_req[r] == MPI_REQUEST_NULL)
                                MPI_Irecv(&c->arrive_rx[r], 1, MPI_LONG, r, TAG_ARRIVE, MPI_COMM_WORLD, &c->arrive_req[r]);
                        int done = 0;
                        MPI_Test(&c->arrive_req[r], &done, MPI_STATUS_IGNORE);
                        if (!done) break;
                        c->arrive_buf[r] = c->arrive_rx[r];
                }
        }
}

void dt_comm_announce(dt_comm *c, long step)
{
        c->step = step;
}

/* "I reached the communication of step s": sent once per step, when a rank first waits on a
 * collective, so a rank stalled in its computation is the one not announced. */
static void arrive(dt_comm *c, long step)
{
        if (c->size == 1 || c->announced >= step) return;
        if (c->rank == 0) {
                c->announced = step;
                poll_arrivals(c);
                return;
        }
        if (c->my_arrive != MPI_REQUEST_NULL) {
                int done = 0;
                MPI_Test(&c->my_arrive, &done, MPI_STATUS_IGNORE);
                if (!done) return;  /* rank 0 is behind; the previous announcement still stands */
        }
        c->my_arrive_buf = step;
        MPI_Isend(&c->my_arrive_buf, 1, MPI_LONG, 0, TAG_ARRIVE, MPI_COMM_WORLD, &c->my_arrive);
        c->announced = step;
}

static void missing_ranks(dt_comm *c, char *buf, size_t n)
{
        size_t k = 0;
        buf[0] = 0;
        if (!c->arrive_req) {
                snprintf(buf, n, "rank 0 names the ranks that did not arrive; if it printed nothing, rank 0 stalled");
                return;
        }
        poll_arrivals(c);
        int any = 0;
        for (int r = 1; r < c->size && k + 16 < n; r++)
                if (c->arrive_buf[r] < c->step) {
                        k += (size_t)snprintf(buf + k, n - k, "%s%d", any ? ", " : "ranks not arrived: ", r);
                        any = 1;
                }
        if (!any) snprintf(buf, n, "every rank reached the collective; it stalled inside MPI");
}

void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what)
{
        double t0 = dt_now();
        arrive(c, c->step);
        dt_fault_at(DT_FAULT_HANG, c->step + 1);
        /* Open MPI advances nonblocking collectives only inside MPI calls, so poll without
         * sleeping (a sleep between tests made the gradient sync several times slower than
         * MPI_Allreduce); sched_yield lets other ranks run when ranks outnumber cores. */
        for (unsigned long k = 0;; k++) {
                int done = 0;
                MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
                if (done) return;
                if ((k & 255) == 255) {
                        if (dt_now() - t0 > c->timeout) {
                                char who[512];
                                missing_ranks(c, who, sizeof who);
                                dt_die(DT_EXIT_PEER, "%s at step %ld did not complete within %.0f s (%s)", what,
                                       c->step + 1, c->timeout, who);
                        }
                        if (c->arrive_req) poll_arrivals(c);
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
