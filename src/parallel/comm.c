/* parallel/comm.c - communicators as values and deadline waits. Open MPI has no timeout on collectives,
 * so every collective dtrain runs is nonblocking and waited on here: MPI_Testall in a loop with a
 * short sleep once nothing moves, and MPI_Abort (through dt_die) past the deadline. */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include "util/common.h"

enum { TAG_ARRIVE = 7001 };

/* rank, size, world ranks, node-local rank and the arrival bookkeeping of c->comm */
static void describe(dt_comm *c, double timeout)
{
        MPI_Comm_rank(c->comm, &c->rank);
        MPI_Comm_size(c->comm, &c->size);
        c->world = dt_calloc((size_t)c->size, sizeof *c->world);
        int *mine = dt_calloc((size_t)c->size, sizeof *mine);
        MPI_Group g, w;
        MPI_Comm_group(c->comm, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &w);     /* the world is meant: ranks are named by it */
        for (int r = 0; r < c->size; r++) mine[r] = r;
        MPI_Group_translate_ranks(g, c->size, mine, w, c->world);
        MPI_Group_free(&g);
        MPI_Group_free(&w);
        free(mine);
        MPI_Comm node;
        MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
        c->timeout = timeout > 0 ? timeout : 300;
        c->announced = -1;
        c->my_arrive = MPI_REQUEST_NULL;
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

void dt_comm_world(dt_comm *c, double timeout)
{
        memset(c, 0, sizeof *c);
        MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
        describe(c, timeout);
        if (c->size > 1)
                snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", c->rank, c->size);
}

void dt_comm_split(const dt_comm *parent, int color, int key, dt_comm *out)
{
        memset(out, 0, sizeof *out);
        MPI_Comm_split(parent->comm, color, key, &out->comm);
        describe(out, parent->timeout);
}

void dt_comm_free(dt_comm *c)
{
        if (c->size == 0) return;       /* never initialised */
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
        free(c->world);
        MPI_Comm_free(&c->comm);
        memset(c, 0, sizeof *c);
}

/* rank 0: take in every arrival that has come (the newest step per peer lands in arrive_buf),
 * keeping one receive posted per peer into arrive_rx */
static void poll_arrivals(dt_comm *c)
{
        if (!c->arrive_req) return;
        for (int r = 1; r < c->size; r++) {
                for (;;) {
                        if (c->arrive_req[r] == MPI_REQUEST_NULL)
                                MPI_Irecv(&c->arrive_rx[r], 1, MPI_LONG, r, TAG_ARRIVE, c->comm, &c->arrive_req[r]);
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
        MPI_Isend(&c->my_arrive_buf, 1, MPI_LONG, 0, TAG_ARRIVE, c->comm, &c->my_arrive);
        c->announced = step;
}

void dt_comm_missing(const long *arrived, const int *world, int size, long step, char *buf, size_t n)
{
        size_t k = 0;
        int any = 0;
        buf[0] = 0;
        for (int r = 1; r < size && k + 16 < n; r++)
                if (arrived[r] < step) {
                        k += (size_t)snprintf(buf + k, n - k, "%s%d", any ? ", " : "ranks not arrived: ",
                                              world ? world[r] : r);
                        any = 1;
                }
        if (!any) snprintf(buf, n, "every rank reached the collective; it stalled inside MPI");
}

static void missing_ranks(dt_comm *c, char *buf, size_t n)
{
        if (!c->arrive_req) {
                snprintf(buf, n, "rank %d names the ranks that did not arrive; if it printed nothing, rank %d stalled",
                         c->world[0], c->world[0]);
                return;
        }
        poll_arrivals(c);
        dt_comm_missing(c->arrive_buf, c->world, c->size, c->step, buf, n);
}

void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what)
{
        double t0 = dt_now();
        arrive(c, c->step);
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
                MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * tsz, cnt, t, op, c->comm, &r);
                dt_comm_wait(c, 1, &r, what);
        }
}

void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what)
{
        if (c->size == 1) return;
        MPI_Request r;
        MPI_Ibcast(buf, count, t, root, c->comm, &r);
        dt_comm_wait(c, 1, &r, what);
}

int dt_comm_agree(dt_comm *c, int rc, const char *what)
{
        dt_comm_allreduce_op(c, &rc, 1, MPI_INT, MPI_MAX, what);
        return rc;
}
