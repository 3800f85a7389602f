/* parallel/compress_threshold.c - partition.compression threshold (Strom 2015, as DL4J's encoded
 * gradient sharing): each rank adds its gradient to its residual and sends only the entries whose
 * residual reached tau, as +tau or -tau (one int32 each: the entry's index + 1, negated for -tau),
 * taking what it sent out of the residual; the rest waits for later steps.
 *
 * Exchange: the messages are all-gathered (counts first, then the codes), and every rank decodes
 * every rank's codes into the same net count per entry, times tau: the same update on every rank,
 * exact (integer counts), whatever the order they arrive in. A sparse all-reduce tree would need
 * each hop to merge index lists; the all-gather is one collective and its cost, 4 bytes per sent
 * entry per rank, is what the density keeps small. When the codes would outweigh a dense message
 * (4 x total codes > 2 x bucket entries: a ring all-reduce moves each byte about twice), the same
 * net counts are all-reduced as int8 instead: the same bits, n bytes a rank.
 *
 * tau adapts per bucket as DL4J's AdaptiveThresholdAlgorithm does: below the target density range
 * (the fraction of entries sent, over all ranks) tau shrinks by the decay 0.965936 (half in 20
 * steps), above it tau grows by its inverse; every rank sees the same counts, so every rank keeps
 * the same tau. The residual is clipped to +-5 tau (DL4J's ResidualClippingPostProcessor default),
 * so a gradient that vanished does not keep trickling out for hundreds of steps.
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
        int32_t *code;          /* this rank's codes, then everyone's (P x the largest bucket) */
        int32_t *all;
        int *counts, *displs;
        int8_t *net;            /* per entry of a bucket: the net count of +tau minus -tau */
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
        s->code = dt_malloc(most * sizeof *s->code);
        s->all = dt_malloc(most * P * sizeof *s->all);
        s->counts = dt_calloc(P, sizeof *s->counts);
        s->displs = dt_calloc(P, sizeof *s->displs);
        s->net = dt_calloc(most, sizeof *s->net);
        return s;
}

/* Residual += gradient; the entries at or past tau become codes and leave the residual; the
 * residual is clipped to +-CLIP tau. Returns the number of codes. */
size_t dt_threshold_encode(float *res, const float *g, size_t n, float tau, int32_t *code)
{
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                float r = res[i] + g[i];
                if (r >= tau) { code[m++] = (int32_t)(i + 1); r -= tau; }
                else if (r <= -tau) { code[m++] = -(int32_t)(i + 1); r += tau; }
                res[i] = fminf(fmaxf(r, -CLIP * tau), CLIP * tau);
        }
        return m;
}

/* The next tau from the density of the step (codes over all ranks / (ranks x entries)). */
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
        int m = (int)dt_threshold_encode(s->res + c->b[j].off, g, n, tau, s->code);
        c->t_encode += dt_now() - t0;
        MPI_Request r;
        MPI_Iallgather(&m, 1, MPI_INT, s->counts, 1, MPI_INT, c->comm->comm, &r);
        dt_comm_wait(c->comm, 1, &r, "threshold code counts");
        long total = 0;
        for (int k = 0; k < P; k++) { s->displs[k] = (int)total; total += s->counts[k]; }
        memset(s->net, 0, n);
        if (P <= 127 && 4 * total > 2 * (long)n) {     /* dense: the net counts, int8 */
                for (int e = 0; e < m; e++) s->net[abs(s->code[e]) - 1] += s->code[e] > 0 ? 1 : -1;
                dt_comm_allreduce(c->comm, s->net, (long)n, MPI_INT8_T, "threshold dense fallback");
                c->sent += (long)n;
        } else {
                MPI_Iallgatherv(s->code, m, MPI_INT32_T, s->all, s->counts, s->displs, MPI_INT32_T,
                                c->comm->comm, &r);
                dt_comm_wait(c->comm, 1, &r, "threshold code all-gather");
                for (long e = 0; e < total; e++) s->net[abs(s->all[e]) - 1] += s->all[e] > 0 ? 1 : -1;
                c->sent += (long)(((size_t)m + 1) * sizeof(int32_t));
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
        free(s->code);
        free(s->all);
        free(s->counts);
        free(s->displs);
        free(s->net);
        free(s);
}

static void thr_state(dt_cx *c, void *st, dt_cx_state *out)
{
        thr_st *s = st;
        *out = (dt_cx_state){ .res = s->res, .nres = c->g->nparams, .shared = s->tau,
                              .nshared = (size_t)c->nb * sizeof *s->tau / sizeof(float) };
}

const dt_cx_ops dt_cx_threshold = { thr_init, NULL, thr_finish, thr_free, thr_state };
