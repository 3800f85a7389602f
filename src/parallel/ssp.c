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
        dt_ssp_ring r;          /* which steps are where */
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
        dt_ssp_ring_init(&s->r, staleness);
        int P = comm->size, W = s->r.W;
        s->buf = dt_calloc((size_t)W * P, sizeof *s->buf);
        for (int i = 0; i < W * P; i++) s->buf[i] = dt_falloc(g->nparams);
        s->req = dt_malloc((size_t)W * P * sizeof *s->req);
        s->sreq = dt_malloc((size_t)W * P * sizeof *s->sreq);
        for (int i = 0; i < W * P; i++) s->req[i] = s->sreq[i] = MPI_REQUEST_NULL;
        s->sum = dt_falloc(g->nparams);
        return s;
}

void dt_ssp_free(dt_ssp *s)
{
        if (!s) return;
        int n = s->r.W * s->comm->size;
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

/* ---- the ring's bookkeeping (no MPI) ---- */

void dt_ssp_ring_init(dt_ssp_ring *r, int staleness)
{
        r->W = staleness + 2;
        r->next_apply = 0;
        r->pushed = 0;
}

int dt_ssp_ring_slot(const dt_ssp_ring *r, long t) { return (int)(t % r->W); }

int dt_ssp_ring_can_push(const dt_ssp_ring *r, long t)
{
        return t == r->pushed && t - r->next_apply < r->W;
}

void dt_ssp_ring_apply(dt_ssp_ring *r, long upto, int (*arrived)(void *ud, long t, int wait),
                       void (*apply)(void *ud, long t), void *ud)
{
        while (r->next_apply < r->pushed) {
                long t = r->next_apply;
                if (!arrived(ud, t, t <= upto)) break;
                apply(ud, t);
                r->next_apply = t + 1;
        }
}

/* ---- MPI ---- */

static int slot(const dt_ssp *s, long t) { return dt_ssp_ring_slot(&s->r, t); }

void dt_ssp_push(dt_ssp *s, long t)
{
        int P = s->comm->size, me = s->comm->rank, k = slot(s, t);
        DT_ASSERT(dt_ssp_ring_can_push(&s->r, t));
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
        s->r.pushed = t + 1;
}

/* The trainer's callback and ud, for the ring's */
typedef struct applying {
        dt_ssp *s;
        dt_ssp_apply_fn fn;
        void *ud;
} applying;

/* Whether every peer's gradient of step t is in; with wait, waits for it (deadline applies). */
static int arrived(void *ud, long t, int wait)
{
        dt_ssp *s = ((applying *)ud)->s;
        int P = s->comm->size, k = slot(s, t), done = 0;
        if (wait) {
                dt_comm_wait(s->comm, P, s->req + (size_t)k * P, "stale-synchronous gradient");
                return 1;
        }
        MPI_Testall(P, s->req + (size_t)k * P, &done, MPI_STATUSES_IGNORE);
        return done;
}

static void apply_one(void *ud, long t)
{
        const applying *a = ud;
        dt_ssp *s = a->s;
        int P = s->comm->size, k = slot(s, t);
        size_t n = s->g->nparams;
        /* rank order, the same on every rank */
        memcpy(s->sum, s->buf[k * P], n * sizeof *s->sum);
        for (int r = 1; r < P; r++) {
                const float *b = s->buf[k * P + r];
                for (size_t i = 0; i < n; i++) s->sum[i] += b[i];
        }
        a->fn(a->ud, t, s->sum);
}

void dt_ssp_apply(dt_ssp *s, long upto, dt_ssp_apply_fn fn, void *ud)
{
        applying a = { s, fn, ud };
        dt_ssp_ring_apply(&s->r, upto, arrived, apply_one, &a);
}

