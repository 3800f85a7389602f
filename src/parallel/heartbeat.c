/* parallel/heartbeat.c - heartbeats between waiting ranks and rank 0, and naming the silent ones
 * when a collective times out. Only a rank inside dt_comm_wait beats: one computing, stopped
 * (SIGSTOP, a debugger), killed or hung is silent, which is what a timed-out collective waits
 * for. Messages go on a duplicate of MPI_COMM_WORLD, so they never match anyone else's. */
#include "parallel/heartbeat.h"

#include <stdio.h>
#include <stdlib.h>
#include "parallel/mpierr.h"
#include "util/common.h"

enum { TAG_BEAT = 7001 };

struct dt_hb {
        MPI_Comm comm;
        int rank, size;
        double timeout;         /* the collective deadline */
        double beat;            /* seconds between beats */
        double silent;          /* a rank not heard for longer is not waiting with us */
        double ticked_at;       /* last dt_hb_tick: a long gap means this rank itself did not run */
        double sent_at;         /* last beat sent (rank 0: to all) */
        long sent_step;         /* step of that beat */
        /* per peer: rank 0 hears every rank; the others hear rank 0 only (slot 0) */
        MPI_Request *rreq, *sreq;
        long *rbuf, *sbuf;
        double *heard_at;       /* < 0: never */
        long *heard_step;
};

void dt_hb_set_timeout(dt_hb *h, double timeout)
{
        if (!h) return;
        h->timeout = timeout;
        /* ten beats per timeout, within [0.05 s, 5 s]; silent after four missed beats (at least a
         * second, for ranks descheduled on a busy node) but never longer than half the timeout,
         * so that a rank that went silent when the collective began is always named */
        h->beat = DT_MIN(5.0, DT_MAX(0.05, timeout / 10));
        h->silent = DT_MIN(DT_MAX(4 * h->beat, 1.0), timeout / 2);
}

dt_hb *dt_hb_new(int rank, int size, double timeout)
{
        if (size < 2) return NULL;
        dt_hb *h = dt_calloc(1, sizeof *h);
        MPI_Comm_dup(MPI_COMM_WORLD, &h->comm);
        dt_mpi_errhandler_set(h->comm);
        h->rank = rank;
        h->size = size;
        dt_hb_set_timeout(h, timeout);
        h->sent_at = -1e300;
        h->ticked_at = dt_now();
        h->sent_step = -1;
        int n = rank == 0 ? size : 1;
        h->rreq = dt_malloc((size_t)n * sizeof *h->rreq);
        h->sreq = dt_malloc((size_t)n * sizeof *h->sreq);
        h->rbuf = dt_calloc((size_t)n, sizeof *h->rbuf);
        h->sbuf = dt_calloc((size_t)n, sizeof *h->sbuf);
        h->heard_at = dt_malloc((size_t)n * sizeof *h->heard_at);
        h->heard_step = dt_malloc((size_t)n * sizeof *h->heard_step);
        for (int i = 0; i < n; i++) {
                h->rreq[i] = h->sreq[i] = MPI_REQUEST_NULL;
                h->heard_at[i] = -1;
                h->heard_step[i] = -1;
        }
        return h;
}

void dt_hb_free(dt_hb *h)
{
        if (!h) return;
        int n = h->rank == 0 ? h->size : 1;
        /* the job ends in step with every rank: beats still on their way are not wanted; sends
         * are one long each (eager), complete once buffered */
        for (int i = 0; i < n; i++) {
                if (h->rreq[i] != MPI_REQUEST_NULL) {
                        MPI_Cancel(&h->rreq[i]);
                        MPI_Request_free(&h->rreq[i]);
                }
                if (h->sreq[i] != MPI_REQUEST_NULL) MPI_Wait(&h->sreq[i], MPI_STATUS_IGNORE);
        }
        MPI_Comm_free(&h->comm);
        free(h->rreq);
        free(h->sreq);
        free(h->rbuf);
        free(h->sbuf);
        free(h->heard_at);
        free(h->heard_step);
        free(h);
}

/* takes in every beat that came from peer (slot i), keeping one receive posted */
static void hear(dt_hb *h, int i, int peer, double now)
{
        for (;;) {
                if (h->rreq[i] == MPI_REQUEST_NULL)
                        MPI_Irecv(&h->rbuf[i], 1, MPI_LONG, peer, TAG_BEAT, h->comm, &h->rreq[i]);
                int done = 0;
                MPI_Test(&h->rreq[i], &done, MPI_STATUS_IGNORE);
                if (!done) return;
                h->heard_at[i] = now;
                h->heard_step[i] = h->rbuf[i];
        }
}

/* one beat to peer (slot i), unless the last one is still on its way */
static void send_beat(dt_hb *h, int i, int peer, long step)
{
        if (h->sreq[i] != MPI_REQUEST_NULL) {
                int done = 0;
                MPI_Test(&h->sreq[i], &done, MPI_STATUS_IGNORE);
                if (!done) return;
        }
        h->sbuf[i] = step;
        MPI_Isend(&h->sbuf[i], 1, MPI_LONG, peer, TAG_BEAT, h->comm, &h->sreq[i]);
}

void dt_hb_tick(dt_hb *h, long step)
{
        if (!h) return;
        double now = dt_now();
        /* the other ranks announce each new step at once, so that rank 0 can say where a silent
         * rank was last; rank 0's beats only need to show that it is alive */
        int due = now - h->sent_at >= h->beat || (h->rank != 0 && step != h->sent_step);
        if (h->rank == 0) {
                for (int r = 1; r < h->size; r++) {
                        hear(h, r, r, now);
                        if (due) send_beat(h, r, r, step);
                }
        } else {
                hear(h, 0, 0, now);
                if (due) send_beat(h, 0, 0, step);
        }
        if (due) {
                h->sent_at = now;
                h->sent_step = step;
        }
        h->ticked_at = now;
}

/* appends "R (silent S s, last at step T)" or "R (never heard from)" to buf at k */
static size_t describe(const dt_hb *h, int i, int peer, double now, char *buf, size_t n, size_t k, int first)
{
        if (k >= n) return k;
        const char *sep = first ? "" : ", ";
        if (h->heard_at[i] < 0)
                k += (size_t)snprintf(buf + k, n - k, "%s%d (never heard from)", sep, peer);
        else if (peer == 0)     /* rank 0 beats by time only: its step would be stale */
                k += (size_t)snprintf(buf + k, n - k, "%s0 (silent %.1f s)", sep, now - h->heard_at[i]);
        else
                k += (size_t)snprintf(buf + k, n - k, "%s%d (silent %.1f s, last at step %ld)", sep, peer,
                                      now - h->heard_at[i], h->heard_step[i] + 1);
        return k;
}

int dt_hb_blame(dt_hb *h, long step, double overdue, char *why, size_t n)
{
        if (!h) {
                snprintf(why, n, "a single rank");
                return 1;
        }
        double now = dt_now(), gap = now - h->ticked_at;
        /* ticks come microseconds apart while waiting: a long gap means this rank was stopped
         * (and the launcher's SIGCONT woke it to end the job), so it is the one to blame */
        if (gap > h->silent) {
                snprintf(why, n, "this rank did not run for %.1f s: stopped (SIGSTOP, a debugger) or starved of CPU", gap);
                return 1;
        }
        dt_hb_tick(h, step);
        if (h->rank != 0) {
                /* rank 0 answered when our deadline passed, so it waits too, and past its own
                 * deadline (at most one timeout after ours) it ends the job naming the culprits,
                 * which this rank cannot see; it falls silent while it does, so keep waiting */
                double deadline = now - overdue;
                if (h->heard_at[0] >= 0 && deadline - h->heard_at[0] <= h->silent) {
                        if (overdue < h->timeout) return 0;
                        if (now - h->heard_at[0] <= h->silent) {
                                snprintf(why, n, "rank 0 answers but did not name the ranks it waits for");
                                return 1;
                        }
                }
                size_t k = (size_t)snprintf(why, n, "not answering: rank ");
                describe(h, 0, 0, now, why, n, k, 1);
                return 1;
        }
        int nsilent = 0;
        for (int r = 1; r < h->size; r++)
                nsilent += h->heard_at[r] < 0 || now - h->heard_at[r] > h->silent;
        if (!nsilent) {
                snprintf(why, n, "every rank answers and waits in a collective; it stalled inside MPI");
                return 1;
        }
        size_t k = (size_t)snprintf(why, n, "not answering: rank%s ", nsilent == 1 ? "" : "s");
        int first = 1;
        for (int r = 1; r < h->size; r++)
                if (h->heard_at[r] < 0 || now - h->heard_at[r] > h->silent) {
                        k = describe(h, r, r, now, why, n, k, first);
                        first = 0;
                }
        return 1;
}
