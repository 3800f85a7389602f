/* parallel/dp.c - bucketed, overlapped gradient allreduce (Horovod/DDP style) with optional fp16
 * or top-k compression (each large matrix its own top k, the rest whole: dt_topk_keep), and
 * parameter averaging.
 *
 * Buckets are contiguous slices of the flat gradient buffer, cut at layer boundaries from the END
 * (the last layer's gradients are ready first), each about bucket_mb. A bucket's MPI_Iallreduce
 * starts as soon as the backward of its lowest layer is done; backward pokes the in-flight ones
 * between layers (Open MPI progresses nonblocking collectives only inside MPI calls).
 *
 * Device backends (cuda) take one other path, chosen once in dt_dp_init: the whole gradient in one
 * dt_devcomm_allreduce after backward (NCCL, CUDA-aware MPI or staged through host memory). */
#include "util/trace.h"
#include "parallel/dp.h"
#include "parallel/devcomm.h"
#include "parallel/compress.h"
#include "parallel/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

/* ---- fp16: cast, reduce with a half-precision sum, cast back ---- */
static void half_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
        (void)dt;
        dt_half_get()->sum(in, inout, (size_t)*len);
}
static MPI_Op half_op = MPI_OP_NULL;

static size_t layer_grad_begin(const dt_graph *g, int i)
{
        const dt_layer *l = &g->layers[i];
        for (int k = 0; k < l->np; k++)
                if (l->ps[k].trainable) return l->off[k];
        return SIZE_MAX;
}

int dt_dp_buckets(const dt_graph *g, double bucket_mb, dt_bucket *b)
{
        size_t target = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
        if (target < 1024) target = 1024;
        /* walk layers from the last: a bucket closes at a layer's first parameter once it holds
         * at least 'target' floats, and at the first layer that has parameters */
        size_t end = g->nparams;
        int lowest = -1, nb = 0;
        for (int i = 0; i < g->n && lowest < 0; i++)
                if (layer_grad_begin(g, i) != SIZE_MAX) lowest = i;
        for (int i = g->n - 1; i >= 0; i--) {
                size_t beg = layer_grad_begin(g, i);
                if (beg == SIZE_MAX) continue;
                if (end - beg >= target || i == lowest) {
                        b[nb++] = (dt_bucket){ .off = beg, .len = end - beg, .first_layer = i,
                                               .req = MPI_REQUEST_NULL };
                        end = beg;
                }
        }
        return nb;
}

size_t dt_topk_keep(const dt_param_spec *ps, size_t n, double ratio)
{
        if (!ps->trainable) return 0;
        if (ps->shape.n < 2 || n < DT_TOPK_MIN_ENTRIES) return n;
        size_t k = (size_t)ceil(ratio * (double)n);
        return k < 1 ? 1 : k > n ? n : k;
}

/* Each bucket's tensors and what each sends (dt_topk_keep); the exchange buffers for the most
 * pairs a bucket sends. */
static void topk_init(dt_dp *dp)
{
        const dt_graph *g = dp->g;
        int nt = 0, ns = 0;
        for (int i = 0; i < g->n; i++) nt += g->layers[i].np;
        dp->tk_seg = dt_calloc((size_t)nt + 1, sizeof *dp->tk_seg);
        dp->tk_first = dt_calloc((size_t)dp->nb + 1, sizeof *dp->tk_first);
        dp->residual = dt_falloc(g->nparams);
        size_t most = 1;
        for (int j = 0; j < dp->nb; j++) {
                const dt_bucket *b = &dp->b[j];
                size_t pairs = 0;
                dp->tk_first[j] = ns;
                for (int i = 0; i < g->n; i++)
                        for (int k = 0; k < g->layers[i].np; k++) {
                                const dt_layer *l = &g->layers[i];
                                if (l->off[k] < b->off || l->off[k] >= b->off + b->len) continue;
                                size_t keep = dt_topk_keep(&l->ps[k], l->len[k], dp->cs->topk_ratio);
                                dp->tk_seg[ns++] = (dt_topk_seg){ .off = l->off[k], .len = l->len[k], .k = keep };
                                pairs += keep;
                        }
                if (pairs > most) most = pairs;
        }
        dp->tk_first[dp->nb] = ns;
        dp->tk_idx = dt_malloc(most * (size_t)dp->comm->size * sizeof *dp->tk_idx);
        dp->tk_val = dt_falloc(most * (size_t)dp->comm->size);
}

void dt_dp_init(dt_dp *dp, dt_comm *comm, const dt_cluster_spec *cs, dt_graph *g)
{
        memset(dp, 0, sizeof *dp);
        dp->comm = comm;
        dp->cs = cs;
        dp->g = g;
        dp->b = dt_calloc((size_t)g->n + 1, sizeof *dp->b);
        dp->nb = dt_dp_buckets(g, cs->bucket_mb, dp->b);
        int np = 0;
        for (int j = 0; j < dp->nb; j++) {
                size_t per = (size_t)DT_COMM_PIECE_BYTES / sizeof(float);
                dp->b[j].npiece = dp->b[j].len > per ? (int)((dp->b[j].len + per - 1) / per) : 0;
                dp->b[j].p0 = np;
                np += dp->b[j].npiece;
        }
        dp->piece = dt_malloc((size_t)(np + 1) * sizeof *dp->piece);
        for (int p = 0; p < np; p++) dp->piece[p] = MPI_REQUEST_NULL;
        dp->q = dt_malloc((size_t)(np + dp->nb + 1) * sizeof *dp->q);
        dp->bytes = (long)(g->nparams * sizeof(float));
        dt_shard_init(&dp->sh, cs->shard, comm, g, dp->b, dp->nb);
        /* the two-level path sums plain float buckets on the host: an uncompressed run's, and topk's
         * and powersgd's dense warm-up steps, which so sum as the uncompressed run does and send its
         * bytes across the nodes once, not the flat ring's 1.5 times (the wide MLP's 12 warm-up
         * steps, 120 MB each out of a node over 2 x 2, were 1.44 GB of its 1.7 GB run); the other
         * paths stay flat */
        int dense = cs->compression == DT_COMP_NONE ||
                    ((cs->compression == DT_COMP_TOPK || cs->compression == DT_COMP_POWERSGD) && cs->compression_warmup > 0);
        int plain = cs->sync == DT_SYNC_ALLREDUCE && dense && cs->shard < 2 &&
                    !(g->be && !dt_backend_supports(g->be, DT_CAP_HOST_MEMORY));
        /* the two-level path takes a bucket's pieces as buckets of its own */
        double *bytes = dt_malloc((size_t)(dp->nb + np + 1) * sizeof *bytes);
        int nh = 0;
        for (int j = 0; j < dp->nb; j++) {
                size_t per = (size_t)DT_COMM_PIECE_BYTES / sizeof(float), len = dp->b[j].len;
                dp->b[j].h0 = nh;
                for (size_t at = 0; at < len; at += per) bytes[nh++] = 4.0 * (double)(len - at < per ? len - at : per);
        }
        dt_hier_init(&dp->hier, comm, plain ? cs->hierarchical : 1, cs, bytes, nh);
        free(bytes);
        if (comm->size > 1 && g->be && !dt_backend_supports(g->be, DT_CAP_HOST_MEMORY)) {
                const char *why = "";
                size_t most = g->nparams > g->nbuffers ? g->nparams : g->nbuffers;
                dp->dev = dt_devcomm_new(g->be, comm, !strcmp(cs->comm, "nccl"), most, &why);
                /* the one way to fail, 'comm: nccl' without NCCL, is dt_cluster_spec_validate_run's */
                DT_ASSERT(dp->dev);
                if (comm->rank == 0) dt_note("gradient allreduce on %s: %s", g->be->ops->name, dt_devcomm_name(dp->dev));
        }
        if (cs->compression == DT_COMP_FP16) {
                dp->half = dt_malloc(g->nparams * sizeof *dp->half);
                if (half_op == MPI_OP_NULL && comm->size > 1) MPI_Op_create(half_sum, 1, &half_op);
                dp->bytes /= 2;
        }
        if (comm->size > 1 && !dp->dev) dp->cx = dt_cx_new(cs, comm, g, dp->b, dp->nb);
        if (cs->compression == DT_COMP_TOPK) topk_init(dp);
}

void dt_dp_cx_state(dt_dp *dp, dt_cx_state *out)
{
        dt_cx_state_of(dp->cx, out);
        if (dp->residual && dp->comm->size > 1 && !dp->dev)
                *out = (dt_cx_state){ .res = dp->residual, .nres = dp->g->nparams };
}

void dt_dp_free(dt_dp *dp)
{
        dt_devcomm_free(dp->dev);
        dt_cx_free(dp->cx);
        dt_shard_free(&dp->sh);
        dt_hier_free(&dp->hier);
        free(dp->b);
        free(dp->piece);
        free(dp->q);
        free(dp->half);
        free(dp->residual);
        free(dp->tk_idx);
        free(dp->tk_val);
        free(dp->tk_seg);
        free(dp->tk_first);
        free(dp->repro);
        memset(dp, 0, sizeof *dp);
}

/* topk and powersgd sum the first compression_warmup steps uncompressed (PowerSGD's
 * start_powerSGD_iter, Deep Gradient Compression's warm-up): early gradients change fast, and what
 * a sparse or low-rank sum delays there costs accuracy that later steps do not win back. Deep
 * Gradient Compression lowers the density exponentially over its warm-up instead; on 4 ranks the
 * pairs outweigh the dense sum above a density of 1/4, so that ramp is dense for most of the
 * warm-up and then drops as this does, and it did no better (lenet 84.50 against 84.44, mlp 83.91
 * against 84.03). */
static int warming(const dt_dp *dp)
{
        return dp->step < dp->cs->compression_warmup &&
               (dp->cs->compression == DT_COMP_TOPK || dp->cs->compression == DT_COMP_POWERSGD);
}

/* Queue entry u's request and its part of its bucket: n entries from at */
static MPI_Request *q_req(dt_dp *dp, int u)
{
        const struct dt_dp_q *e = &dp->q[u];
        return e->piece < 0 ? &dp->b[e->b].req : &dp->piece[dp->b[e->b].p0 + e->piece];
}

static size_t q_count(const dt_dp *dp, int u, size_t *at)
{
        const struct dt_dp_q *e = &dp->q[u];
        const dt_bucket *b = &dp->b[e->b];
        size_t per = (size_t)DT_COMM_PIECE_BYTES / sizeof(float);
        *at = e->piece < 0 ? 0 : (size_t)e->piece * per;
        return e->piece < 0 ? b->len : (b->len - *at < per ? b->len - *at : per);
}

/* Tests the posted all-reduces not yet known complete, then posts queued ones in order while those
 * in flight stay under DT_DP_INFLIGHT_BYTES (one at least). */
static void pump(dt_dp *dp)
{
        double busy = 0;
        int lead = 1;   /* still in the prefix known complete */
        for (int u = dp->qdone; u < dp->qpost; u++) {
                MPI_Request *r = q_req(dp, u);
                int done = *r == MPI_REQUEST_NULL;
                if (!done) MPI_Test(r, &done, MPI_STATUS_IGNORE);
                size_t at;
                if (!done) busy += (double)q_count(dp, u, &at) * (double)dp->b[dp->q[u].b].esz;
                lead = lead && done;
                if (lead) dp->qdone = u + 1;
        }
        while (dp->qpost < dp->nq) {
                const struct dt_dp_q *e = &dp->q[dp->qpost];
                dt_bucket *b = &dp->b[e->b];
                size_t at, n = q_count(dp, dp->qpost, &at);
                double bytes = (double)n * (double)b->esz;
                if (busy > 0 && busy + bytes > (double)DT_DP_INFLIGHT_BYTES) break;
                MPI_Iallreduce(MPI_IN_PLACE, (char *)b->x + at * b->esz, (int)n, b->t, b->op, dp->comm->comm,
                               q_req(dp, dp->qpost));
                if (e->piece < 0) {
                        dt_trace_mark("comm", b->op == MPI_SUM ? "allreduce issued (gradient bucket)"
                                                               : "allreduce issued (fp16 gradient bucket)");
                } else {
                        char what[64];
                        snprintf(what, sizeof what, "allreduce issued (gradient bucket, piece %d of %d)", e->piece + 1, b->npiece);
                        dt_trace_mark("comm", what);
                }
                dp->qpost++;
                busy += bytes;
        }
}

/* Bucket b's all-reduce of x (b->len entries of t, esz bytes each), in pieces when it has them:
 * queued, and posted as those in flight allow (pump). */
static void iallreduce(dt_dp *dp, dt_bucket *b, void *x, MPI_Datatype t, size_t esz, MPI_Op op)
{
        b->x = x, b->t = t, b->esz = esz, b->op = op;
        b->req = MPI_REQUEST_NULL;
        int j = (int)(b - dp->b);
        if (!b->npiece) dp->q[dp->nq++] = (struct dt_dp_q){ j, -1 };
        for (int p = 0; p < b->npiece; p++) dp->q[dp->nq++] = (struct dt_dp_q){ j, p };
        pump(dp);
}

int dt_dp_sum_esz(const dt_cluster_spec *cs, int shard)
{
        if (cs->sync != DT_SYNC_ALLREDUCE || shard >= 2) return 0;
        if (cs->compression == DT_COMP_FP16) return 2;
        int warm = (cs->compression == DT_COMP_TOPK || cs->compression == DT_COMP_POWERSGD) && cs->compression_warmup > 0;
        return cs->compression == DT_COMP_NONE || warm ? 4 : 0;
}

double dt_dp_inflight_bytes(const dt_graph *g, double bucket_mb, size_t esz)
{
        dt_bucket *b = dt_calloc((size_t)g->n + 1, sizeof *b);
        int nb = dt_dp_buckets(g, bucket_mb, b);
        double all = 0, most = 0, piece = (double)DT_COMM_PIECE_BYTES / sizeof(float);
        for (int j = 0; j < nb; j++) {
                all += (double)b[j].len;
                most = DT_MAX(most, DT_MIN((double)b[j].len, piece));
        }
        free(b);
        return DT_MAX(most * (double)esz, DT_MIN(all * (double)esz, (double)DT_DP_INFLIGHT_BYTES));
}

static void start_bucket(dt_dp *dp, dt_bucket *b)
{
        float *gr = dp->g->grads + b->off;
        b->started = 1;
        if (dp->sh.stage >= 2) {        /* sharded gradients: compression is refused with them */
                dt_shard_start_bucket(&dp->sh, b);
                b->req = MPI_REQUEST_NULL;
                return;
        }
        if (dp->cs->compression == DT_COMP_FP16) {
                uint16_t *h = dp->half + b->off;
                dt_half_get()->to_half(gr, h, b->len);
                iallreduce(dp, b, h, MPI_UINT16_T, sizeof *h, half_op);
                return;
        }
        if (dp->cx && !warming(dp)) {
                dt_cx_start(dp->cx, (int)(b - dp->b));
                b->req = MPI_REQUEST_NULL;
                return;
        }
        if (dp->cs->compression == DT_COMP_TOPK && !warming(dp)) {
                b->req = MPI_REQUEST_NULL;  /* top-k is exchanged in dt_dp_finish (needs selection) */
                return;
        }
        if (dp->hier.on) {
                size_t per = (size_t)DT_COMM_PIECE_BYTES / sizeof(float);
                for (size_t at = 0, u = 0; at < b->len; at += per, u++)
                        dt_hier_start(&dp->hier, b->h0 + (int)u, gr + at, (int)(b->len - at < per ? b->len - at : per));
                b->req = MPI_REQUEST_NULL;
                return;
        }
        iallreduce(dp, b, gr, MPI_FLOAT, sizeof *gr, MPI_SUM);
}

void dt_dp_layer_done(void *ud, int layer)
{
        dt_dp *dp = ud;
        if (dp->dev) return;    /* device backend: one allreduce in dt_dp_finish */
        if (dp->sh.stage >= 2) dt_shard_progress(&dp->sh);
        if (dp->hier.on) dt_hier_progress(&dp->hier);
        for (int j = 0; j < dp->nb; j++) {
                dt_bucket *b = &dp->b[j];
                if (!b->started && b->first_layer == layer) start_bucket(dp, b);
        }
        pump(dp);
}

/* The k-th largest of n magnitudes (quickselect; mag is scrambled). */
static float kth_largest(float *mag, size_t n, size_t k)
{
        ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)(n - k);
        while (lo < hi) {
                float p = mag[lo + (hi - lo) / 2];
                ptrdiff_t i = lo, j = hi;
                while (i <= j) {
                        while (mag[i] < p) i++;
                        while (mag[j] > p) j--;
                        if (i <= j) {
                                float t = mag[i]; mag[i] = mag[j]; mag[j] = t;
                                i++; j--;
                        }
                }
                if (want <= j) hi = j;
                else if (want >= i) lo = i;
                else break;
        }
        return mag[want];
}

/* Tensor t's k largest |g + residual| (all its entries when k is its length) into this
 * rank's pairs at idx, val (offsets in the bucket, which starts at boff); what was not sent stays
 * in the residual for the next step (error feedback). */
static void topk_tensor(dt_dp *dp, const dt_topk_seg *t, size_t boff, int32_t *idx, float *val)
{
        float *gr = dp->g->grads + t->off, *res = dp->residual + t->off;
        size_t n = t->len, k = t->k, m = 0, at = t->off - boff;
        if (!k) return;
        for (size_t i = 0; i < n; i++) res[i] += gr[i];
        float thr = 0;
        if (k < n) {
                float *mag = dt_malloc(n * sizeof *mag);
                for (size_t i = 0; i < n; i++) mag[i] = fabsf(res[i]);
                thr = kth_largest(mag, n, k);
                free(mag);
        }
        for (size_t i = 0; i < n && m < k; i++)
                if (k == n || (res[i] != 0.0f && fabsf(res[i]) >= thr)) {
                        idx[m] = (int32_t)(at + i);
                        val[m] = res[i];
                        res[i] = 0.0f;
                        m++;
                }
        for (; m < k; m++) { idx[m] = -1; val[m] = 0; }
}

/* Each tensor's pairs of bucket j (topk_tensor), gathered from every rank and summed. */
static void topk_bucket(dt_dp *dp, int j)
{
        const dt_bucket *b = &dp->b[j];
        float *gr = dp->g->grads + b->off;
        size_t k = 0, m = 0;
        int P = dp->comm->size, me = dp->comm->rank;
        for (int t = dp->tk_first[j]; t < dp->tk_first[j + 1]; t++) k += dp->tk_seg[t].k;
        int32_t *idx = dp->tk_idx + (size_t)me * k;     /* this rank's block, in place */
        float *val = dp->tk_val + (size_t)me * k;
        for (int t = dp->tk_first[j]; t < dp->tk_first[j + 1]; t++) {
                topk_tensor(dp, &dp->tk_seg[t], b->off, idx + m, val + m);
                m += dp->tk_seg[t].k;
        }
        MPI_Request r[2];
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dp->tk_idx, (int)k, MPI_INT32_T, dp->comm->comm, &r[0]);
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dp->tk_val, (int)k, MPI_FLOAT, dp->comm->comm, &r[1]);
        dt_comm_wait(dp->comm, 2, r, "top-k gradient exchange");
        memset(gr, 0, b->len * sizeof *gr);
        for (size_t e = 0; e < k * (size_t)P; e++)
                if (dp->tk_idx[e] >= 0) gr[dp->tk_idx[e]] += dp->tk_val[e];
}

void dt_dp_finish(dt_dp *dp)
{
        if (dp->comm->size == 1) return;
        double t0 = dt_now();
        if (dp->dev) {
                dt_devcomm_allreduce(dp->dev, dp->g->grads, dp->g->nparams, "gradient allreduce");
                dp->t_comm_wait += dt_now() - t0;
                return;
        }
        if (dp->cx && !warming(dp)) {
                dt_cx_finish(dp->cx);
                for (int j = 0; j < dp->nb; j++) dp->b[j].started = 0;
                dp->bytes = dp->cx->sent;
                dp->t_comm_wait += dt_now() - t0;
                return;
        }
        if (dp->cs->compression == DT_COMP_TOPK && !warming(dp)) {
                for (int j = 0; j < dp->nb; j++) {
                        topk_bucket(dp, j);
                        dp->b[j].started = 0;
                }
                dp->t_comm_wait += dt_now() - t0;
                return;
        }
        for (int j = 0; j < dp->nb; j++)
                if (!dp->b[j].started) start_bucket(dp, &dp->b[j]);
        /* the queue's rest as those in flight complete, oldest first */
        for (int u = 0; dp->qpost < dp->nq; u++) {
                dt_comm_wait(dp->comm, 1, q_req(dp, u), "gradient allreduce");
                pump(dp);
        }
        MPI_Request *r = dt_malloc((size_t)(dp->nq + 1) * sizeof *r);
        for (int u = 0; u < dp->nq; u++) r[u] = *q_req(dp, u);
        dt_comm_wait(dp->comm, dp->nq, r, "gradient allreduce");
        free(r);
        dp->nq = dp->qpost = dp->qdone = 0;
        if (dp->hier.on) dt_hier_finish(&dp->hier);
        if (dp->sh.stage >= 2) dt_shard_drain(&dp->sh);
        for (int j = 0; j < dp->nb; j++) {
                dt_bucket *b = &dp->b[j];
                b->started = 0;
                b->req = MPI_REQUEST_NULL;
                for (int p = 0; p < b->npiece; p++) dp->piece[b->p0 + p] = MPI_REQUEST_NULL;
                if (dp->cs->compression == DT_COMP_FP16) {
                        dt_half_get()->to_float(dp->half + b->off, dp->g->grads + b->off, b->len);
                }
        }
        dp->t_comm_wait += dt_now() - t0;
}

void dt_dp_allreduce(dt_dp *dp, float *x, size_t n, const char *what)
{
        if (dp->comm->size == 1 || !n) return;
        if (dp->dev) dt_devcomm_allreduce(dp->dev, x, n, what);
        else dt_comm_allreduce(dp->comm, x, (long)n, MPI_FLOAT, what);
}

void dt_dp_average(dt_dp *dp, float *m, float *v)
{
        int P = dp->comm->size;
        if (P == 1) return;
        size_t n = dp->g->nparams;
        float inv = 1.0f / (float)P;
        float *bufs[3] = { dp->g->params, m, v };
        for (int k = 0; k < 3; k++) {
                if (!bufs[k]) continue;
                dt_comm_allreduce(dp->comm, bufs[k], (long)n, MPI_FLOAT, "parameter averaging");
                for (size_t i = 0; i < n; i++) bufs[k][i] *= inv;
        }
        /* running statistics (batch norm) are averaged too, so evaluation sees one model */
        if (dp->g->nbuffers) {
                dt_comm_allreduce(dp->comm, dp->g->buffers, (long)dp->g->nbuffers, MPI_FLOAT, "buffer averaging");
                for (size_t i = 0; i < dp->g->nbuffers; i++) dp->g->buffers[i] *= inv;
        }
}

dt_graph_hooks dt_dp_hooks(dt_dp *dp)
{
        return (dt_graph_hooks){ .bwd_done = dt_dp_layer_done, .ud = dp };
}
