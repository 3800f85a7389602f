/* parallel/compress_threshold.c - partition.compression threshold (Strom 2015, as DL4J's encoded
 * gradient sharing): each rank adds its gradient to its residual and sends only the entries whose
 * residual reached tau, each as the whole units of tau it holds (one int32 a unit: the entry's
 * index + 1, negated for -tau), taking what it sent out of the residual; the rest waits.
 *
 * Why units and not one +-tau an entry, as Strom and DL4J send: DL4J thresholds the optimizer's
 * update, whose entries are all about the learning rate; a raw gradient's entries span orders of
 * magnitude, and a large one sent as one tau a step piled up in its residual until the clip at
 * 5 tau threw it away (mlp, 4 ranks, 2 epochs: 81.4% against 84.3% uncompressed; units: 82.1%).
 * An entry sends at most 127 / ranks units a step, so the net count of an entry over all ranks
 * fits an int8; what is past that stays in the residual, clipped to +-5 tau as DL4J's
 * ResidualClippingPostProcessor does, so a gradient that vanished does not keep trickling out.
 *
 * Exchange: the unit counts are all-gathered, then the codes, and every rank decodes every rank's
 * codes into the same net count per entry, times tau: the same update on every rank, exact
 * (integer counts), whatever the order they arrive in. A sparse all-reduce tree would need each
 * hop to merge index lists; the all-gather is one collective and its cost, 4 bytes per unit per
 * rank, is what the density keeps small. When the codes would outweigh a dense message (4 x all
 * ranks' units > 2 x bucket entries: a ring all-reduce moves each byte about twice), this rank's
 * counts are all-reduced as int8 instead (int16 beyond 127 ranks): the same sums, n bytes a rank.
 *
 * tau adapts per bucket as DL4J's AdaptiveThresholdAlgorithm does: below the target density range
 * (the units sent over all ranks / (ranks x entries); above 1 an entry sends several) tau shrinks by
 * the decay 0.965936 (half in 20 steps), above it tau grows by its inverse; every rank sees the same
 * counts, so every rank keeps the same tau. The default range is 0.5 to 2 units an entry: the int8
 * path, 4x fewer bytes than fp32, with tau near the residuals' typical size, which keeps mlp, lenet
 * and cnn within 0.3 points of uncompressed (4 ranks, 2 epochs: -0.07, +0.16, -0.04). DL4J's
 * 0.0001 to 0.01 (sparse: ~200x fewer bytes) lost 2.2 points on mlp, as top-k at 1% does (a sparse
 * gradient starves Adam: an entry sent every k-th step moves sqrt(k) times less), and 0.1 to 0.5
 * still lost 0.7 on lenet.
 * tau 0 is no encoding: the residual stays 0 and the bucket is all-reduced in fp32, exactly. */
#include "parallel/compress.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

#define DECAY 0.965936
#define CLIP 5.0f

typedef struct thr_st {
        double *tau;            /* per bucket */
        float *res;
        int8_t *q;              /* per entry of a bucket: this rank's units of tau */
        int16_t *net;           /* per entry: the units of all ranks, summed (past 127 ranks they
                                 * may leave int8's range) */
        int32_t *code;          /* this rank's codes, then everyone's: the sparse path only runs while */
        int32_t *all;           /* all ranks' codes together are at most half a bucket's entries */
        long *units;            /* every rank's units this step (an entry may send several: past int) */
        int *counts, *displs;   /* the sparse path's, where they fit an int */
} thr_st;

static void *thr_init(dt_cx *c)
{
        thr_st *s = dt_calloc(1, sizeof *s);
        size_t P = (size_t)c->comm->size, most = 1;
        for (int j = 0; j < c->nb; j++)
                if (c->b[j].len > most) most = c->b[j].len;
        s->tau = dt_calloc((size_t)c->nb, sizeof *s->tau);
        for (int j = 0; j < c->nb; j++) s->tau[j] = c->cs->threshold;
        s->res = dt_falloc(c->g->nparams);
        s->q = dt_calloc(most, sizeof *s->q);
        s->net = dt_calloc(most, sizeof *s->net);
        s->code = dt_malloc((most / 2 + 1) * sizeof *s->code);
        s->all = dt_malloc((most / 2 + 1) * sizeof *s->all);
        s->units = dt_calloc(P, sizeof *s->units);
        s->counts = dt_calloc(P, sizeof *s->counts);
        s->displs = dt_calloc(P, sizeof *s->displs);
        return s;
}

/* Residual += gradient; an entry at or past tau sends as many whole units of tau as it holds, up
 * to qmax, into q (signed) and they leave the residual; the residual is then clipped to +-CLIP tau.
 * Returns the units sent (the sum of |q|). */
size_t dt_threshold_encode(float *res, const float *g, size_t n, float tau, int qmax, int8_t *q)
{
        /* branch-free, so that it vectorises: an entry under tau truncates to 0 units and keeps r */
        const float top = (float)qmax, lim = CLIP * tau;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                float r = res[i] + g[i];
                float u = truncf(r / tau);
                u = u > top ? top : u;
                u = u < -top ? -top : u;
                r -= u * tau;
                r = r > lim ? lim : r;
                r = r < -lim ? -lim : r;
                int k = (int)u;
                q[i] = (int8_t)k;
                m += (size_t)(k < 0 ? -k : k);
                res[i] = r;
        }
        return m;
}

/* q's units as codes: each unit one int32, the entry's index + 1, negated for -tau. */
size_t dt_threshold_codes(const int8_t *q, size_t n, int32_t *code)
{
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
                for (int k = 0; k < abs(q[i]); k++) code[m++] = q[i] > 0 ? (int32_t)(i + 1) : -(int32_t)(i + 1);
        return m;
}

/* The next tau from the density of the step (units over all ranks / (ranks x entries)). */
double dt_threshold_adapt(double tau, double density, double lo, double hi)
{
        if (density < lo) return tau * DECAY;
        if (density > hi) return tau / DECAY;
        return tau;
}

static void exact(dt_cx *c, thr_st *s, int j)
{
        float *g = c->g->grads + c->b[j].off;
        size_t n = c->b[j].len;
        (void)s;
        dt_comm_allreduce(c->comm, g, (long)n, MPI_FLOAT, "gradient allreduce (threshold 0)");
        c->sent += (long)(n * sizeof(float));
}

static void thr_finish(dt_cx *c, void *st, int j)
{
        thr_st *s = st;
        if (s->tau[j] == 0.0) { exact(c, s, j); return; }
        int P = c->comm->size;
        size_t n = c->b[j].len;
        float *g = c->g->grads + c->b[j].off, tau = (float)s->tau[j];
        double t0 = dt_now();
        int qmax = 127 / P > 1 ? 127 / P : 1;
        long m = (long)dt_threshold_encode(s->res + c->b[j].off, g, n, tau, qmax, s->q);
        c->t_encode += dt_now() - t0;
        MPI_Request r;
        MPI_Iallgather(&m, 1, MPI_LONG, s->units, 1, MPI_LONG, c->comm->comm, &r);
        dt_comm_wait(c->comm, 1, &r, "threshold unit counts");
        long total = 0;
        for (int k = 0; k < P; k++) total += s->units[k];
        c->sent += (long)sizeof m;
        if (4 * total > 2 * (long)n && P <= 127) {     /* dense: the net counts, int8 */
                dt_comm_allreduce(c->comm, s->q, (long)n, MPI_INT8_T, "threshold dense fallback");
                for (size_t i = 0; i < n; i++) s->net[i] = s->q[i];
                c->sent += (long)n;
        } else if (4 * total > 2 * (long)n) {  /* the same in int16 */
                for (size_t i = 0; i < n; i++) s->net[i] = s->q[i];
                dt_comm_allreduce(c->comm, s->net, (long)n, MPI_INT16_T, "threshold dense fallback");
                c->sent += (long)(2 * n);
        } else {       /* total <= n / 2: the counts fit an int (a bucket is under 2^31 entries) */
                for (int k = 0, at = 0; k < P; k++) {
                        s->counts[k] = (int)s->units[k];
                        s->displs[k] = at;
                        at += s->counts[k];
                }
                t0 = dt_now();
                dt_threshold_codes(s->q, n, s->code);
                c->t_encode += dt_now() - t0;
                MPI_Iallgatherv(s->code, (int)m, MPI_INT32_T, s->all, s->counts, s->displs, MPI_INT32_T,
                                c->comm->comm, &r);
                dt_comm_wait(c->comm, 1, &r, "threshold code all-gather");
                memset(s->net, 0, n * sizeof *s->net);
                for (long e = 0; e < total; e++) s->net[abs(s->all[e]) - 1] += s->all[e] > 0 ? 1 : -1;
                c->sent += m * (long)sizeof(int32_t);
        }
        t0 = dt_now();
        for (size_t i = 0; i < n; i++) g[i] = tau * (float)s->net[i];
        c->t_encode += dt_now() - t0;
        s->tau[j] = dt_threshold_adapt(s->tau[j], (double)total / ((double)P * (double)n),
                                       c->cs->threshold_min_density, c->cs->threshold_max_density);
}

static void thr_free(void *st)
{
        thr_st *s = st;
        free(s->tau);
        free(s->res);
        free(s->q);
        free(s->net);
        free(s->code);
        free(s->all);
        free(s->units);
        free(s->counts);
        free(s->displs);
        free(s);
}

static void thr_state(dt_cx *c, void *st, dt_cx_state *out)
{
        thr_st *s = st;
        *out = (dt_cx_state){ .res = s->res, .nres = c->g->nparams, .shared = s->tau,
                              .nshared = (size_t)c->nb * sizeof *s->tau / sizeof(float) };
}

const dt_cx_ops dt_cx_threshold = { thr_init, NULL, thr_finish, thr_free, thr_state };
