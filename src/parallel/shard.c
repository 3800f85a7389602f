/* parallel/shard.c - sharded data parallelism over the all-reduce's buckets (see shard.h). */
#include "parallel/shard.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/pages.h"
#include "util/trace.h"

#define K DT_SHARD_BLOCK

static size_t nblocks(size_t len)
{
        return (len + K - 1) / K;
}

static int bucket_of(const dt_shard *sh, size_t p);
static void need(void *ud, int layer, int backward);

/* Stage 3's tables: each layer's bucket, the next one each walk needs; the parameters' other parts
 * handed back (dt_grid_init_params wrote them all). */
static void init_stage3(dt_shard *sh)
{
        dt_graph *g = sh->g;
        int n = g->n;
        sh->lb = dt_calloc((size_t)n + 1, sizeof *sh->lb);
        sh->nxt = dt_calloc(2 * (size_t)n + 1, sizeof *sh->nxt);
        sh->res = dt_calloc((size_t)sh->nb + 1, sizeof *sh->res);
        sh->gres = dt_calloc((size_t)sh->nb + 1, sizeof *sh->gres);
        sh->stamp = dt_calloc((size_t)sh->nb + 1, sizeof *sh->stamp);
        sh->grq = dt_calloc((size_t)sh->nb + 1, sizeof *sh->grq);
        for (int i = 0; i < n; i++) {
                const dt_layer *l = &g->layers[i];
                sh->lb[i] = -1;
                for (int k = 0; k < l->np && sh->lb[i] < 0; k++)
                        if (l->ps[k].trainable && l->len[k]) sh->lb[i] = bucket_of(sh, l->off[k]);
        }
        for (int i = 0; i < n; i++) {
                int f = -1, b = -1;
                for (int k = i + 1; k < n && f < 0; k++) if (sh->lb[k] >= 0 && sh->lb[k] != sh->lb[i]) f = sh->lb[k];
                for (int k = i - 1; k >= 0 && b < 0; k--) if (sh->lb[k] >= 0 && sh->lb[k] != sh->lb[i]) b = sh->lb[k];
                sh->nxt[2 * (size_t)i] = f;
                sh->nxt[2 * (size_t)i + 1] = b;
        }
        for (int j = 0; j < sh->nb; j++) sh->grq[j] = MPI_REQUEST_NULL;
        long again = 0;                 /* the backward gathers all but the forward's last two again */
        for (int j = 0; j + 2 < sh->nb; j++)
                again += (long)((sh->len[j] - (size_t)sh->cnt[(size_t)j * sh->D + sh->r]) * sizeof(float));
        sh->gather_bytes += again;
        g->need = need;
        g->need_ud = sh;
        dt_shard_release(sh);           /* every part was written: hand the others back */
}

void dt_shard_init(dt_shard *sh, int stage, dt_comm *comm, dt_graph *g, const dt_bucket *b, int nb)
{
        memset(sh, 0, sizeof *sh);
        sh->D = comm->size > 1 ? comm->size : 1;
        sh->r = comm->size > 1 ? comm->rank : 0;
        sh->stage = sh->D > 1 ? stage : 0;      /* one rank owns everything: nothing to move */
        sh->comm = comm;
        sh->g = g;
        sh->nb = nb;
        int D = sh->D;
        sh->off = dt_calloc((size_t)nb + 1, sizeof *sh->off);
        sh->len = dt_calloc((size_t)nb + 1, sizeof *sh->len);
        sh->coff = dt_calloc((size_t)nb + 1, sizeof *sh->coff);
        sh->blk0 = dt_calloc((size_t)nb + 1, sizeof *sh->blk0);
        sh->cnt = dt_calloc((size_t)nb * D + 1, sizeof *sh->cnt);
        sh->dsp = dt_calloc((size_t)nb * D + 1, sizeof *sh->dsp);
        for (int j = 0; j < nb; j++) {          /* dp's order is the last layer's first */
                const dt_bucket *bk = &b[nb - 1 - j];
                sh->off[j] = bk->off;
                sh->len[j] = bk->len;
                sh->blk0[j] = sh->nblk;
                size_t nbk = nblocks(bk->len);
                sh->nblk += nbk;
                for (int r = 0; r < D; r++) {   /* part r: blocks [nbk r / D, nbk (r + 1) / D) */
                        size_t a = DT_MIN(K * (nbk * r / D), bk->len), e = DT_MIN(K * (nbk * (r + 1) / D), bk->len);
                        DT_ASSERT(e - a <= INT32_MAX && a <= INT32_MAX);        /* MPI counts */
                        sh->cnt[(size_t)j * D + r] = (int)(e - a);
                        sh->dsp[(size_t)j * D + r] = (int)a;
                }
                sh->coff[j] = sh->n;
                sh->n += sh->stage ? (size_t)sh->cnt[(size_t)j * D + sh->r] : bk->len;
                sh->gather_bytes += (long)((bk->len - (size_t)sh->cnt[(size_t)j * D + sh->r]) * sizeof(float));
        }
        if (!sh->stage) {
                sh->n = g->nparams;
                sh->gather_bytes = 0;
        }
        sh->part = dt_calloc(sh->nblk + 1, sizeof *sh->part);
        if (sh->stage >= 2) {   /* the ring's buffer: the largest part of any bucket */
                int most = 1;
                for (size_t i = 0; i < (size_t)nb * D; i++) most = DT_MAX(most, sh->cnt[i]);
                sh->tmp = dt_falloc((size_t)most);
                sh->queue = dt_calloc((size_t)nb + 1, sizeof *sh->queue);
                sh->rq[0] = sh->rq[1] = MPI_REQUEST_NULL;
        }
        if (sh->stage == 3) init_stage3(sh);
}

void dt_shard_free(dt_shard *sh)
{
        if (sh->bounded) dt_comm_set_progress(NULL, NULL);
        free(sh->off);
        free(sh->len);
        free(sh->coff);
        free(sh->blk0);
        free(sh->cnt);
        free(sh->dsp);
        free(sh->part);
        free(sh->tmp);
        free(sh->queue);
        if (sh->stage == 3) {   /* the graph may be freed already: its hook only is undone */
                sh->g->need = NULL;
                sh->g->need_ud = NULL;
        }
        free(sh->lb);
        free(sh->nxt);
        free(sh->res);
        free(sh->gres);
        free(sh->stamp);
        free(sh->grq);
        memset(sh, 0, sizeof *sh);
}

/* The bucket (ascending index) holding flat offset p; -1 when none does. */
static int bucket_of(const dt_shard *sh, size_t p)
{
        int lo = 0, hi = sh->nb - 1;
        while (lo <= hi) {
                int m = lo + (hi - lo) / 2;
                if (p < sh->off[m]) hi = m - 1;
                else if (p >= sh->off[m] + sh->len[m]) lo = m + 1;
                else return m;
        }
        return -1;
}

/* This rank's part of bucket j: [a, e) from the bucket's start. */
static void mine(const dt_shard *sh, int j, size_t *a, size_t *e)
{
        if (!sh->stage) {
                *a = 0;
                *e = sh->len[j];
                return;
        }
        size_t i = (size_t)j * sh->D + sh->r;
        *a = (size_t)sh->dsp[i];
        *e = *a + (size_t)sh->cnt[i];
}

/* ---- stage 2: ring reduce-scatter of each bucket, progressed between layers ----
 *
 * Open MPI's nonblocking reduce-scatter (libnbc) reduces the whole bucket to one rank and scatters
 * it: two whole-bucket buffers there and log D whole buckets of traffic (measured on mlp-4096, 4
 * ranks: +60 MiB peak on two ranks). The ring moves (D - 1) / D of the bucket per rank, as the
 * all-reduce's first half does, and holds one part in flight. Step k (0 .. D-2): rank r sends its
 * sum of part r - k - 1 to r + 1 and adds part r - k - 2 from r - 1 into its own; after D - 1 steps
 * it holds the sum of part r, where the bucket has it in g->grads. One bucket's ring at a time, in
 * the order the buckets were started (the last layer's first). */

#define RING_TAG 0x5a52

static int wrap(int x, int D)
{
        return ((x % D) + D) % D;
}

/* Posts step sh->step of the current bucket's ring. */
static void ring_post(dt_shard *sh)
{
        int j = sh->queue[sh->head], D = sh->D, r = sh->r, k = sh->step;
        int ps = wrap(r - k - 1, D), pr = wrap(r - k - 2, D);
        const int *cnt = sh->cnt + (size_t)j * D, *dsp = sh->dsp + (size_t)j * D;
        float *b = sh->g->grads + sh->off[j];
        MPI_Irecv(sh->tmp, cnt[pr], MPI_FLOAT, wrap(r - 1, D), RING_TAG, sh->comm->comm, &sh->rq[0]);
        MPI_Isend(b + dsp[ps], cnt[ps], MPI_FLOAT, wrap(r + 1, D), RING_TAG, sh->comm->comm, &sh->rq[1]);
}

/* The current step is complete: its part added, the next step (or bucket) posted. */
static void ring_advance(dt_shard *sh)
{
        int j = sh->queue[sh->head], D = sh->D, pr = wrap(sh->r - sh->step - 2, D);
        float *x = sh->g->grads + sh->off[j] + sh->dsp[(size_t)j * D + pr];
        const float *t = sh->tmp;
        for (int i = 0, n = sh->cnt[(size_t)j * D + pr]; i < n; i++) x[i] += t[i];
        if (++sh->step < D - 1) {
                ring_post(sh);
                return;
        }
        sh->step = 0;
        if (sh->stage == 3) {   /* the other parts' partial sums are done with */
                size_t a, e;
                mine(sh, j, &a, &e);
                float *b = sh->g->grads + sh->off[j];
                dt_pages_zero(b, a);
                dt_pages_zero(b + e, sh->len[j] - e);
                sh->gres[j] = 0;
        }
        if (++sh->head < sh->tail) ring_post(sh);
}

/* Until at most 'keep' buckets' rings are queued or in flight */
static void ring_bound(dt_shard *sh, int keep)
{
        sh->waiting++;
        while (sh->tail - sh->head > keep) {
                dt_comm_wait(sh->comm, 2, sh->rq, "gradient reduce-scatter (one bucket in flight)");
                ring_advance(sh);
        }
        sh->waiting--;
}

/* Between the polls of the thread's other waits (dt_comm_set_progress) */
static void progress_hook(void *ud)
{
        dt_shard *sh = ud;
        if (!sh->waiting) dt_shard_progress(sh);
}

int dt_shard_init_params(dt_shard *sh, void (*draw)(void *ud, int layer), void *ud)
{
        if (sh->stage != 3 || !sh->g->paged) return 0;
        for (int i = 0; i < sh->g->n; i++) {
                draw(ud, i);
                dt_shard_release(sh);
        }
        return 1;
}

void dt_shard_bound_grads(dt_shard *sh, int on)
{
        sh->bounded = on && sh->stage == 3;
        dt_comm_set_progress(sh->bounded ? progress_hook : NULL, sh);
}

void dt_shard_start_bucket(dt_shard *sh, const dt_bucket *b)
{
        int j = bucket_of(sh, b->off);
        DT_ASSERT(j >= 0 && sh->stage >= 2 && sh->tail < sh->nb);
        sh->queue[sh->tail++] = j;
        if (sh->tail - sh->head == 1) ring_post(sh);    /* none in flight */
        dt_trace_mark("comm", "reduce-scatter queued (gradient bucket)");
}

void dt_shard_progress(dt_shard *sh)
{
        while (sh->head < sh->tail) {
                int done = 0;
                MPI_Testall(2, sh->rq, &done, MPI_STATUSES_IGNORE);
                if (!done) return;
                ring_advance(sh);
        }
}

void dt_shard_drain(dt_shard *sh)
{
        sh->waiting++;
        while (sh->head < sh->tail) {
                dt_comm_wait(sh->comm, 2, sh->rq, "gradient reduce-scatter");
                ring_advance(sh);
        }
        sh->waiting--;
        sh->head = sh->tail = 0;
}

void dt_shard_keep(dt_shard *sh)
{
        if (sh->stage != 3) return;     /* the parts already lie where the reduce-scatter leaves them */
        for (int j = 0; j < sh->nb; j++) {      /* the whole sum was made here: the others' parts go */
                size_t a, e;
                mine(sh, j, &a, &e);
                dt_pages_zero(sh->g->grads + sh->off[j], a);
                dt_pages_zero(sh->g->grads + sh->off[j] + e, sh->len[j] - e);
                sh->gres[j] = 0;
        }
}

/* Where the gradient at flat offset p (in bucket j, owned or stage < 2) lies. */
static const float *at(const dt_shard *sh, const float *grads, int j, size_t p)
{
        (void)sh;
        (void)j;
        return grads + p;       /* every stage keeps the owned parts where they lie in g->grads */
}

/* Adds the squares of [p, q) (counted, inside one block of bucket j) to that block's sum. */
static void add_block(dt_shard *sh, const float *grads, int j, size_t p, size_t q)
{
        size_t bi = (p - sh->off[j]) / K;
        if (sh->stage >= 2) {
                size_t a, e;
                mine(sh, j, &a, &e);
                if (p - sh->off[j] < a || p - sh->off[j] >= e) return;  /* another rank's block */
        }
        dt_backend *be = sh->g->be;
        sh->part[sh->blk0[j] + bi] += be->ops->sumsq(be, at(sh, grads, j, p), q - p);
}

double dt_shard_sumsq(dt_shard *sh, const float *grads, int (*count)(void *ud, int layer, int k), void *ud)
{
        const dt_graph *g = sh->g;
        memset(sh->part, 0, sh->nblk * sizeof *sh->part);
        /* tensor by tensor in layer order, each cut at block and bucket boundaries: a block's sum
         * adds its tensors' pieces in the same order on every rank and at every stage */
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                for (int k = 0; k < l->np; k++) {
                        if (!l->ps[k].trainable || (count && !count(ud, i, k))) continue;
                        size_t p = l->off[k], end = l->off[k] + l->len[k];
                        while (p < end) {
                                int j = bucket_of(sh, p);
                                DT_ASSERT(j >= 0);
                                size_t bend = sh->off[j] + K * ((p - sh->off[j]) / K + 1);
                                size_t q = DT_MIN(DT_MIN(bend, end), sh->off[j] + sh->len[j]);
                                add_block(sh, grads, j, p, q);
                                p = q;
                        }
                }
        }
        /* each block was summed by one rank: adding zeros elsewhere keeps its bits */
        if (sh->stage >= 2) dt_comm_allreduce(sh->comm, sh->part, (long)sh->nblk, MPI_DOUBLE, "gradient norm blocks");
        double ss = 0;
        for (size_t b = 0; b < sh->nblk; b++) ss += sh->part[b];
        return ss;
}

size_t dt_shard_first_nonfinite(const dt_shard *sh, const float *grads)
{
        for (int j = 0; j < sh->nb; j++) {
                size_t a, e;
                mine(sh, j, &a, &e);
                const float *x = at(sh, grads, j, sh->off[j] + a);
                for (size_t i = 0; i < e - a; i++)
                        if (!isfinite(x[i])) return sh->off[j] + a + i;
        }
        return SIZE_MAX;
}

void dt_shard_scale(dt_shard *sh, float a, float *grads)
{
        dt_backend *be = sh->g->be;
        if (!sh->stage) {
                be->ops->scale(be, sh->g->nparams, a, grads);
                return;
        }
        for (int j = 0; j < sh->nb; j++) {
                size_t s, e;
                mine(sh, j, &s, &e);
                be->ops->scale(be, e - s, a, (float *)at(sh, grads, j, sh->off[j] + s));
        }
}

void dt_shard_zero(dt_shard *sh, float *grads, size_t off, size_t len)
{
        dt_backend *be = sh->g->be;
        if (sh->stage < 2) {
                be->ops->zero(be, grads + off, len);
                return;
        }
        for (int j = 0; j < sh->nb; j++) {
                size_t a, e;
                mine(sh, j, &a, &e);
                size_t lo = DT_MAX(off, sh->off[j] + a), hi = DT_MIN(off + len, sh->off[j] + e);
                if (lo < hi) be->ops->zero(be, (float *)at(sh, grads, j, lo), hi - lo);
        }
}

void dt_shard_optim(dt_shard *sh, const dt_optim_hp *hp, float lr, long t, float *grads, float *m, float *v)
{
        dt_backend *be = sh->g->be;
        float *p = sh->g->params;
        if (!sh->stage) {       /* one call, as before sharding existed */
                be->ops->optim_step(be, hp, lr, t, p, grads, m, v, sh->g->nparams);
                return;
        }
        /* element-wise updates: each part alone gives the bits the whole buffer would */
        for (int j = 0; j < sh->nb; j++) {
                size_t a, e, c = sh->coff[j];
                mine(sh, j, &a, &e);
                if (e == a) continue;
                be->ops->optim_step(be, hp, lr, t, p + sh->off[j] + a, at(sh, grads, j, sh->off[j] + a),
                                    m ? m + c : NULL, v ? v + c : NULL, e - a);
        }
}

void dt_shard_gather_params(dt_shard *sh)
{
        if (!sh->stage || sh->stage == 3 || !sh->nb) return;    /* 3: gathered per layer */
        double t0 = dt_now();
        MPI_Request *r = dt_malloc((size_t)sh->nb * sizeof *r);
        for (int j = 0; j < sh->nb; j++)
                MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, sh->g->params + sh->off[j], sh->cnt + (size_t)j * sh->D,
                                sh->dsp + (size_t)j * sh->D, MPI_FLOAT, sh->comm->comm, &r[j]);
        dt_trace_mark("comm", "all-gather issued (updated parameters)");
        dt_comm_wait(sh->comm, sh->nb, r, "parameter all-gather");
        free(r);
        sh->t_gather += dt_now() - t0;
}

void dt_shard_gather(dt_shard *sh, const float *compact, float *full)
{
        if (!sh->stage || !sh->nb) {
                if (full && full != compact) memcpy(full, compact, sh->g->nparams * sizeof *full);
                return;
        }
        MPI_Request *r = dt_malloc((size_t)sh->nb * sizeof *r);
        int root = sh->r == 0;
        for (int j = 0; j < sh->nb; j++)
                MPI_Igatherv(compact + sh->coff[j], sh->cnt[(size_t)j * sh->D + sh->r], MPI_FLOAT,
                             root ? full + sh->off[j] : NULL, sh->cnt + (size_t)j * sh->D, sh->dsp + (size_t)j * sh->D,
                             MPI_FLOAT, 0, sh->comm->comm, &r[j]);
        dt_comm_wait(sh->comm, sh->nb, r, "optimizer moments to the checkpoint");
        free(r);
}

void dt_shard_take(const dt_shard *sh, const float *full, float *compact)
{
        for (int j = 0; j < sh->nb; j++) {
                size_t a, e;
                mine(sh, j, &a, &e);
                memcpy(compact + sh->coff[j], full + sh->off[j] + a, (e - a) * sizeof *full);
        }
}

/* ---- stage 3: the parameters gathered per bucket, before the layers that need them ---- */

/* The other parts of bucket j of buffer x (params or grads) made resident at once (see need). */
static void populate_others(const dt_shard *sh, float *x, int j)
{
        size_t a, e;
        mine(sh, j, &a, &e);
        dt_pages_populate(x + sh->off[j], a);
        dt_pages_populate(x + sh->off[j] + e, sh->len[j] - e);
}

static void fetch_start(dt_shard *sh, int j)
{
        populate_others(sh, sh->g->params, j);
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, sh->g->params + sh->off[j], sh->cnt + (size_t)j * sh->D,
                        sh->dsp + (size_t)j * sh->D, MPI_FLOAT, sh->comm->comm, &sh->grq[j]);
        dt_trace_mark("comm", "all-gather issued (a layer's parameters)");
        sh->res[j] = 1;
        sh->stamp[j] = ++sh->clock;
        sh->fetches++;
}

static void fetch_wait(dt_shard *sh, int j)
{
        double t0 = dt_now();
        /* the ring moved on meanwhile: a peer may wait for its next step (ring_bound) before it
         * takes part in this gather */
        sh->waiting++;
        while (sh->grq[j] != MPI_REQUEST_NULL) {
                MPI_Request r[3] = { sh->grq[j], sh->rq[0], sh->rq[1] };
                int n = sh->head < sh->tail ? 3 : 1;
                dt_comm_wait_any(sh->comm, n, r, "parameter all-gather (shard 3)");
                sh->grq[j] = r[0];
                if (n == 3) sh->rq[0] = r[1], sh->rq[1] = r[2];
                dt_shard_progress(sh);
        }
        sh->waiting--;
        sh->t_gather += dt_now() - t0;
        sh->res[j] = 2;
}

/* Bucket j's other parts handed back (its gather waited for first: MPI still writes into them). */
static void drop(dt_shard *sh, int j)
{
        if (sh->res[j] == 1) fetch_wait(sh, j);
        size_t a, e;
        mine(sh, j, &a, &e);
        float *p = sh->g->params + sh->off[j];
        dt_pages_zero(p, a);
        dt_pages_zero(p + e, sh->len[j] - e);
        sh->res[j] = 0;
}

/* At most one bucket besides 'keep' stays: the least recently used others are handed back. The
 * choice depends only on the walks, so every rank of the data axis makes the same. */
static void make_room(dt_shard *sh, int keep)
{
        for (;;) {
                int held = 0, lru = -1;
                for (int j = 0; j < sh->nb; j++) {
                        if (!sh->res[j]) continue;
                        held++;
                        if (j != keep && (lru < 0 || sh->stamp[j] < sh->stamp[lru])) lru = j;
                }
                if (held < 2 || lru < 0) return;
                drop(sh, lru);
        }
}

/* Before layer 'layer' runs (forward, or backward when 'backward'): its bucket gathered, the next
 * one the walk needs started. The pages the walk is about to write are made resident in one call
 * each (dt_pages_populate): the other parts of a bucket before its gather, its gradient's before
 * its first backward. Left to the writes, the gradient's cost two faults per page (the GEMM's
 * beta = 1 reads the zero page first): on mlp-4096 at 2 ranks 80 MiB of them took ~56 ms a step,
 * more than the gathers' copies themselves. */
static void ready(dt_shard *sh, int layer, int backward)
{
        int j = sh->lb[layer];
        if (backward && !sh->gres[j]) { /* its gradient is written now */
                if (sh->bounded) ring_bound(sh, 1);
                populate_others(sh, sh->g->grads, j);
                sh->gres[j] = 1;
        }
        if (sh->pinned) return;
        if (!sh->res[j]) {
                make_room(sh, j);
                fetch_start(sh, j);
        }
        if (sh->res[j] == 1) fetch_wait(sh, j);
        sh->stamp[j] = ++sh->clock;
        int k = sh->nxt[2 * (size_t)layer + (backward ? 1 : 0)];
        if (k < 0) return;
        if (!sh->res[k]) {      /* the next layer's, while this one computes */
                make_room(sh, j);
                fetch_start(sh, k);
        } else if (sh->res[k] == 1) {   /* moved on (Open MPI progresses it inside MPI calls) */
                int done = 0;
                MPI_Test(&sh->grq[k], &done, MPI_STATUS_IGNORE);
                if (done) sh->res[k] = 2;
        }
}

static void need(void *ud, int layer, int backward)
{
        dt_shard *sh = ud;
        if (sh->lb[layer] < 0) return;
        double t0 = dt_trace_t();
        ready(sh, layer, backward);
        /* a span of its own inside the layer's: its pages, gathers and their waits apart from
         * its compute (dtrain plan --validate takes them out of the layers' time) */
        if (dt_trace_on) dt_trace_end("shard", "parameters made ready (shard 3)", NULL, t0);
}

void dt_shard_gather_all(dt_shard *sh)
{
        if (sh->stage != 3 || sh->pinned) return;
        for (int j = 0; j < sh->nb; j++)
                if (!sh->res[j]) fetch_start(sh, j);
        for (int j = 0; j < sh->nb; j++)
                if (sh->res[j] == 1) fetch_wait(sh, j);
        sh->pinned = 1;
}

void dt_shard_release(dt_shard *sh)
{
        if (sh->stage != 3) return;
        for (int j = 0; j < sh->nb; j++) drop(sh, j);   /* also what a whole model read wrote */
        sh->pinned = 0;
}

void dt_shard_walk_idle(dt_shard *sh, int backward, const dt_graph_hooks *h)
{
        if (sh->stage != 3 || sh->pinned) return;
        int n = sh->g->n;
        for (int i = 0; i < n; i++) need(sh, i, 0);
        for (int i = n - 1; backward && i >= 0; i--) {
                need(sh, i, 1);
                if (h && h->bwd_done) h->bwd_done(h->ud, i);
        }
}

int dt_shard_sums_each(const dt_shard *sh)
{
        return sh->stage == 3 && sh->bounded && dt_shard_per_layer(sh) && sh->D > 1;
}

int dt_shard_zero_grads(dt_shard *sh)
{
        if (sh->stage != 3) return 0;
        /* this rank's parts are resident for good: cleared in place (handing them back too cost a
         * fault per page every step); the others' (normally handed back by the reduce-scatter
         * already) go, as does anything outside the buckets */
        float *x = sh->g->grads;
        size_t at = 0;
        for (int j = 0; j < sh->nb; j++) {
                size_t a, e;
                mine(sh, j, &a, &e);
                dt_pages_zero(x + at, sh->off[j] + a - at);
                sh->g->be->ops->zero(sh->g->be, x + sh->off[j] + a, e - a);
                at = sh->off[j] + e;
                sh->gres[j] = 0;
        }
        dt_pages_zero(x + at, sh->g->nparams - at);
        return 1;
}

int dt_shard_per_layer(const dt_shard *sh)
{
        return sh->stage == 3 && !sh->g->rc;
}

void dt_shard_parts(const dt_shard *sh, size_t p, size_t q, void (*fn)(void *ud, int owner, size_t lo, size_t hi, size_t cpos),
                    void *ud)
{
        while (p < q) {
                int j = bucket_of(sh, p), D = sh->D, r = 0;
                DT_ASSERT(j >= 0 && sh->stage);
                size_t in = p - sh->off[j];
                const int *cnt = sh->cnt + (size_t)j * D, *dsp = sh->dsp + (size_t)j * D;
                while (r < D && !(in >= (size_t)dsp[r] && in < (size_t)dsp[r] + (size_t)cnt[r])) r++;
                DT_ASSERT(r < D);
                size_t e = DT_MIN(q, sh->off[j] + (size_t)dsp[r] + (size_t)cnt[r]);
                fn(ud, r, p, e, r == sh->r ? sh->coff[j] + (in - (size_t)dsp[r]) : SIZE_MAX);
                p = e;
        }
}
