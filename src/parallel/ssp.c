/* parallel/ssp.c - stale-synchronous parallel without a parameter server. Every rank holds a full
 * replica. After computing its gradient for step t a rank sends it to every other rank
 * (nonblocking point-to-point) and goes on; before computing step t it must have APPLIED the
 * summed gradient of every step <= t - s - 1 (and applies any later step already complete). A
 * step's sum is added in rank order and the optimizer runs on the sums in step order, so every
 * replica applies the same updates in the same order: replicas differ only in how stale they are,
 * and s = 0 is synchronous training. Receive buffers form a ring of s + 2 steps. */
#include "parallel/dp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/common.h"

enum { TAG_BASE = 8000, TAG_MOD = 16384 };

struct dt_ssp {
        dt_comm *comm;
        dt_graph *g;
        int s, W;               /* staleness, ring size */
        long next_apply;        /* first step not yet applied */
        long pushed;            /* steps pushed so far */
        float **buf;            /* [W][P] gradient buffers; buf[slot][me] is this rank's own */
        MPI_Request *req;       /* [W][P]: receives from peers, sends (me slot unused) */
        MPI_Request *sreq;      /* [W][P]: sends to peers */
        float *sum;
};

dt_ssp *dt_ssp_new(dt_comm *comm, dt_graph *g, int staleness)
{
        dt_ssp *s = dt_calloc(1, sizeof *s);
        s->comm = comm;
        s->g = g;
        s->s = staleness;
        s->W = staleness + 2;
        int P = comm->size;
        s->buf = dt_calloc((size_t)s->W * P, sizeof *s->buf);
        for (int i = 0; i < s->W * P; i++) s->buf[i] = dt_falloc(g->nparams);
        s->req = dt_malloc((size_t)s->W * P * sizeof *s->req);
        s->sreq = dt_malloc((size_t)s->W * P * sizeof *s->sreq);
        for (int i = 0; i < s->W * P; i++) s->req[i] = s->sreq[i] = MPI_REQUEST_NULL;
        s->sum = dt_falloc(g->nparams);
        return s;
}

void dt_ssp_free(dt_ssp *s)
{
        if (!s) return;
        int n = s->W * s->comm->size;
        MPI_Waitall(n, s->sreq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < n; i++)
                if (s->req[i] != MPI_REQUEST_NULL) {
                        MPI_Cancel(&s->req[i]);
                        MPI_Request_free(&s->req[i]);
                }
        for (int i = 0; i < n; i++) free(s->buf[i]);
        free(s->buf);
        free(s->req);
        free(s->sreq);
        free(s->sum);
        free(s);
}

static int slot(const dt_ssp *s, long t) { return (int)(t % s->W); }

void dt_ssp_push(dt_ssp *s, long t)
{
        int P = s->comm->size, me = s->comm->rank, k = slot(s, t);
        DT_ASSERT(t == s->pushed && t - s->next_apply < s->W);
        /* the slot's previous sends (step t - W) must be done before its buffer is reused */
        dt_comm_wait(s->comm, P, s->sreq + (size_t)k * P, "stale-synchronous send");
        float *own = s->buf[k * P + me];
        memcpy(own, s->g->grads, s->g->nparams * sizeof *own);
        int tag = TAG_BASE + (int)(t % TAG_MOD);
        for (int r = 0; r < P; r++) {
                if (r == me) continue;
                MPI_Irecv(s->buf[k * P + r], (int)s->g->nparams, MPI_FLOAT, r, tag, s->comm->comm, &s->req[k * P + r]);
                MPI_Isend(own, (int)s->g->nparams, MPI_FLOAT, r, tag, s->comm->comm, &s->sreq[k * P + r]);
        }
        s->pushed = t + 1;
}

static int complete(dt_ssp *s, long t)
{
        int P = s->comm->size, k = slot(s, t), done = 0;
        MPI_Testall(P, s->req + (size_t)k * P, &done, MPI_STATUSES_IGNORE);
        return done;
}

static void apply_one(dt_ssp *s, long t, dt_ssp_apply_fn fn, void *ud)
{
        int P = s->comm->size, k = slot(s, t);
        size_t n = s->g->nparams;
        /* rank order, the same on every rank */
        memcpy(s->sum, s->buf[k * P], n * sizeof *s->sum);
        for (int r = 1; r < P; r++) {
                const float *b = s->buf[k * P + r];
                for (size_t i = 0; i < n; i++) s->sum[i] += b[i];
        }
        fn(ud, t, s->sum);
        s->next_apply = t + 1;
}

void dt_ssp_apply(dt_ssp *s, long upto, dt_ssp_apply_fn fn, void *ud)
{
        int P = s->comm->size;
        while (s->next_apply < s->pushed) {
                long t = s->next_apply;
                if (t > upto && !complete(s, t)) break;
                if (t <= upto) dt_comm_wait(s->comm, P, s->req + (size_t)slot(s, t) * P, "stale-synchronous gradient");
                apply_one(s, t, fn, ud);
        }
}

long dt_ssp_next(const dt_ssp *s) { return s->next_apply; }
