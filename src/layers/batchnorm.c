/* layers/batchnorm.c - batch normalisation with PyTorch's semantics: per-channel statistics over
 * (B, H, W) for (C,H,W) inputs (BatchNorm2d) and over B for (F) inputs (BatchNorm1d).
 * weight (C) = gamma, bias (C) = beta (when affine), buffers running_mean (C), running_var (C).
 * Training normalises with the batch's biased variance and updates the running statistics with
 * the unbiased one: running = (1 - momentum) running + momentum batch. Evaluation uses the running
 * statistics. PyTorch's state_dict also holds num_batches_tracked, which only matters there when
 * momentum is None; it is not stored here.
 *
 * activation: f (relu, ...) is applied to the output, fused into the same pass (PyTorch's
 * BatchNorm2d followed by ReLU, without the separate layer's two passes each way).
 *
 * Data parallel: each rank normalises its own slice of the batch with that slice's statistics
 * (PyTorch DDP without SyncBatchNorm), so N ranks match 1 rank only up to that difference; the
 * running statistics are per rank too until the trainer averages or broadcasts buffers.
 * The cpu backend runs the host loops below; device backends their fused op. */
#include "layers/layer.h"
#include "util/prefetch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

struct bn_cfg {
        float momentum, eps;
        int affine;
        dt_act act;             /* applied to the output, as fc's and conv's activation */
        float alpha;
};

struct bn_priv {
        float *mean;    /* (C) batch mean of the last training forward */
        float *invstd;  /* (C) 1/sqrt(var + eps) of the same batch */
        dt_bn_desc dd;  /* device backends: the fused op's plan (dd.state set) */
        float *z;       /* device backends with an activation whose f' needs z: (B, C, S) pre-activation */
        float *dz;      /* device backends with an activation: (B, C, S) f'(z) dy */
};

static int bn_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct bn_cfg *c = cfg;
        double mo = 0.1, e = 1e-5;
        int rc = 0;
        if (dt_ymap_num(m, "momentum", &mo, 0.1, 0.0, 1.0, 0) < 0) rc = -1;
        if (dt_ymap_num_excl(m, "eps", &e, 1e-5, 0.0, 1.0, DT_YEXCL_MIN, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "affine", &c->affine, 1, 0) < 0) rc = -1;
        if (dt_parse_act(m, "activation", &c->act, &c->alpha, DT_ACT_NONE) < 0) rc = -1;
        c->momentum = (float)mo;
        c->eps = (float)e;
        return rc;
}

static int bn_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg;
        if (in->n != 1 && in->n != 3) {
                char b[64];
                snprintf(why, n, "needs a (C,H,W) or flat (F) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = *in;
        return 0;
}

static int bn_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        const struct bn_cfg *c = cfg;
        int C = in->d[0], k = 0;
        if (c->affine) {
                ps[k++] = (dt_param_spec){ .suffix = "weight", .shape = { 1, { C } }, .init = DT_INIT_ONE,
                                           .fan_in = 1, .fan_out = 1, .trainable = 1 };
                ps[k++] = (dt_param_spec){ .suffix = "bias", .shape = { 1, { C } }, .init = DT_INIT_ZERO,
                                           .fan_in = 1, .fan_out = 1, .trainable = 1 };
        }
        ps[k++] = (dt_param_spec){ .suffix = "running_mean", .shape = { 1, { C } }, .init = DT_INIT_ZERO,
                                   .fan_in = 1, .fan_out = 1, .trainable = 0 };
        ps[k++] = (dt_param_spec){ .suffix = "running_var", .shape = { 1, { C } }, .init = DT_INIT_ONE,
                                   .fan_in = 1, .fan_out = 1, .trainable = 0 };
        return k;
}

static double bn_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return 4.0 * (double)dt_shape_size(in);
}

/* training: forward reads x for the statistics, then x again and writes y (3 passes of the
 * tensor's size); backward reads dy and x for its two sums, then dy and x again and writes dx (5) */
static double bn_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out;
        return (backward ? 5.0 : 3.0) * sizeof(float) * (double)dt_shape_size(in);
}

static int bn_setup(dt_layer *l, int max_batch)
{
        struct bn_priv *p = dt_calloc(1, sizeof *p);
        l->priv = p;
        p->mean = l->be->ops->alloc(l->be, (size_t)l->in.d[0]);
        p->invstd = l->be->ops->alloc(l->be, (size_t)l->in.d[0]);
        if (!p->mean || !p->invstd) return -1;
        if (l->be->ops->bn_plan) {      /* device backend: its fused batch norm (cuDNN) */
                const struct bn_cfg *c = l->cfg;
                p->dd = (dt_bn_desc){ .C = l->in.d[0], .S = l->in.n == 3 ? l->in.d[1] * l->in.d[2] : 1,
                                      .eps = c->eps, .momentum = c->momentum };
                if (l->be->ops->bn_plan(l->be, &p->dd, max_batch) < 0) {
                        dt_error("layer '%s' (batchnorm) cannot run on the %s backend", l->name, l->be->ops->name);
                        return -1;
                }
                size_t n = (size_t)max_batch * dt_shape_size(&l->in);
                if (c->act != DT_ACT_NONE && !(p->dz = l->be->ops->alloc(l->be, n))) return -1;
                if ((c->act == DT_ACT_GELU || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0)) &&
                    !(p->z = l->be->ops->alloc(l->be, n)))
                        return -1;
        }
        return 0;
}

static void bn_teardown(dt_layer *l)
{
        struct bn_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);
        if (p->mean) l->be->ops->free(l->be, p->mean);
        if (p->invstd) l->be->ops->free(l->be, p->invstd);
        if (p->z) l->be->ops->free(l->be, p->z);
        if (p->dz) l->be->ops->free(l->be, p->dz);
        free(p);
        l->priv = NULL;
}

/* Views: C channels of S = H*W (1 for flat inputs) contiguous values per sample. */
struct bn_view {
        int C;
        size_t S;
        const float *gamma, *beta;
        float *rmean, *rvar;
        float *dgamma, *dbeta;
};

static struct bn_view view_of(const dt_layer *l)
{
        const struct bn_cfg *c = l->cfg;
        struct bn_view v = { .C = l->in.d[0], .S = l->in.n == 3 ? (size_t)l->in.d[1] * l->in.d[2] : 1 };
        int k = 0;
        if (c->affine) {
                v.gamma = l->p[0]; v.beta = l->p[1];
                v.dgamma = l->g[0]; v.dbeta = l->g[1];
                k = 2;
        }
        v.rmean = l->p[k];
        v.rvar = l->p[k + 1];
        return v;
}

/* ---- host loops (cpu backend) ----
 * Channel c's n = B*S values are B rows of S contiguous floats, a stride of C*S apart. Each row is
 * summed in LANES float accumulators (independent, so the compiler vectorises them without
 * reassociating anything), folded in lane order and added into doubles across rows: one fixed order
 * per channel. Channels are split over the backend's threads, each channel on one thread, so the
 * results do not depend on the thread count. A fused activation is applied on the way out and its
 * derivative recomputed from x in backward (z = a x + b is the same expression, no FMA contraction
 * under -std=c11, so bit for bit the z of forward): no pass over a separate pre-activation, no
 * stored z, and the activation layer's own passes are gone. */
#define LANES 16
#define CHUNK 256       /* floats of z or dz at a time for activations other than relu */

static inline double fold(const float *acc)
{
        float s = 0;
        for (int k = 0; k < LANES; k++) s += acc[k];
        return s;
}

/* s1 += sum (r - k), s2 += sum (r - k)^2 over one row */
static void row_moments(const float *restrict r, size_t S, float k, double *s1, double *s2)
{
        float a[LANES] = { 0 }, q2[LANES] = { 0 };
        size_t q = 0;
        for (; q + LANES <= S; q += LANES)
                for (int j = 0; j < LANES; j++) {
                        float d = r[q + j] - k;
                        a[j] += d;
                        q2[j] += d * d;
                }
        for (int j = 0; q < S; q++, j++) {
                float d = r[q] - k;
                a[j] += d;
                q2[j] += d * d;
        }
        *s1 += fold(a);
        *s2 += fold(q2);
}

/* One row of y = f(a x + b); z may be y. */
static void row_out(const dt_layer *l, const float *restrict x, float *restrict y, size_t S, float a, float b)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_RELU) {
                for (size_t q = 0; q < S; q++) {
                        float z = a * x[q] + b;
                        y[q] = z > 0 ? z : 0.0f;
                }
                return;
        }
        for (size_t q = 0; q < S; q++) y[q] = a * x[q] + b;
        if (cf->act != DT_ACT_NONE) l->be->ops->act_fwd(l->be, cf->act, cf->alpha, y, y, S);
}

/* dz = f'(z) dy for one row's values [q0, q0 + m), m <= CHUNK, z = a x + b recomputed. */
static const float *row_dz(const dt_layer *l, const float *x, const float *y, const float *dy, size_t m,
                           float a, float b, float *zbuf, float *dzbuf)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_NONE) return dy;
        if (cf->act == DT_ACT_RELU) {
                for (size_t q = 0; q < m; q++) {
                        float z = a * x[q] + b, g = dy[q];
                        dzbuf[q] = z > 0 ? g : 0.0f;
                }
                return dzbuf;
        }
        for (size_t q = 0; q < m; q++) zbuf[q] = a * x[q] + b;
        l->be->ops->act_bwd(l->be, cf->act, cf->alpha, zbuf, y, dy, dzbuf, m);
        return dzbuf;
}

struct bn_job {
        dt_layer *l;
        int training, B;
        const float *x, *y, *dy;
        float *out;     /* forward: y; backward: dx (NULL: not wanted) */
};

/* ---- flat inputs (F features, S = 1: BatchNorm1d) ----
 * A channel's values are a column, C apart: the per-channel row loops above would handle one value
 * per call. Here a block of FB channels is walked row by row, vectorised across the channels, with
 * the same arithmetic per value as the row loops (float d and d*d, summed into doubles in sample
 * order), so the statistics are those the general path would compute. */
#define FB 256

static void fwd_flat(const struct bn_job *j, int c0, int c1)
{
        dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        double s1[FB], s2[FB];
        float k[FB], a[FB], bb[FB];
        for (int cb = c0; cb < c1; cb += FB) {
                const int m = c1 - cb < FB ? c1 - cb : FB;
                if (j->training) {
                        for (int c = 0; c < m; c++) {
                                k[c] = j->x[cb + c];
                                s1[c] = s2[c] = 0;
                        }
                        for (int b = 0; b < B; b++) {
                                const float *r = j->x + (size_t)b * C + cb;
                                for (int c = 0; c < m; c++) {
                                        float d = r[c] - k[c];
                                        s1[c] += d;
                                        s2[c] += d * d;
                                }
                        }
                }
                for (int c = 0; c < m; c++) {
                        float mean, invstd;
                        if (j->training) {
                                double m1 = s1[c] / (double)B, var = s2[c] / (double)B - m1 * m1;
                                if (var < 0) var = 0;
                                double uvar = B > 1 ? var * (double)B / (double)(B - 1) : var;
                                mean = (float)(k[c] + m1);
                                invstd = (float)(1.0 / sqrt(var + cf->eps));
                                p->mean[cb + c] = mean;
                                p->invstd[cb + c] = invstd;
                                v.rmean[cb + c] = (1.0f - cf->momentum) * v.rmean[cb + c] + cf->momentum * mean;
                                v.rvar[cb + c] = (1.0f - cf->momentum) * v.rvar[cb + c] + cf->momentum * (float)uvar;
                        } else {
                                mean = v.rmean[cb + c];
                                invstd = (float)(1.0 / sqrt((double)v.rvar[cb + c] + cf->eps));
                        }
                        a[c] = (v.gamma ? v.gamma[cb + c] : 1.0f) * invstd;
                        bb[c] = (v.beta ? v.beta[cb + c] : 0.0f) - a[c] * mean;
                }
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + (size_t)b * C + cb;
                        float *o = j->out + (size_t)b * C + cb;
                        if (cf->act == DT_ACT_RELU) {
                                for (int c = 0; c < m; c++) {
                                        float z = a[c] * r[c] + bb[c];
                                        o[c] = z > 0 ? z : 0.0f;
                                }
                                continue;
                        }
                        for (int c = 0; c < m; c++) o[c] = a[c] * r[c] + bb[c];
                        if (cf->act != DT_ACT_NONE) l->be->ops->act_fwd(l->be, cf->act, cf->alpha, o, o, (size_t)m);
                }
        }
}

/* dz = f'(z) dy for m channels of one sample, z = a x + b recomputed */
static const float *flat_dz(const dt_layer *l, const float *x, const float *y, const float *dy, int m,
                            const float *a, const float *b, float *zbuf, float *dzbuf)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_NONE) return dy;
        if (cf->act == DT_ACT_RELU) {
                for (int c = 0; c < m; c++) {
                        float z = a[c] * x[c] + b[c], g = dy[c];
                        dzbuf[c] = z > 0 ? g : 0.0f;
                }
                return dzbuf;
        }
        for (int c = 0; c < m; c++) zbuf[c] = a[c] * x[c] + b[c];
        l->be->ops->act_bwd(l->be, cf->act, cf->alpha, zbuf, y, dy, dzbuf, (size_t)m);
        return dzbuf;
}

static void bwd_flat(const struct bn_job *j, int c0, int c1)
{
        dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        double sdy[FB], sdyx[FB];
        float mean[FB], invstd[FB], a[FB], bb[FB], kk[FB], bx[FB], zbuf[FB], dzbuf[FB];
        for (int cb = c0; cb < c1; cb += FB) {
                const int m = c1 - cb < FB ? c1 - cb : FB;
                for (int c = 0; c < m; c++) {
                        if (j->training) {
                                mean[c] = p->mean[cb + c];
                                invstd[c] = p->invstd[cb + c];
                        } else {
                                mean[c] = v.rmean[cb + c];
                                invstd[c] = (float)(1.0 / sqrt((double)v.rvar[cb + c] + cf->eps));
                        }
                        a[c] = (v.gamma ? v.gamma[cb + c] : 1.0f) * invstd[c];
                        bb[c] = (v.beta ? v.beta[cb + c] : 0.0f) - a[c] * mean[c];
                        sdy[c] = sdyx[c] = 0;
                }
                for (int b = 0; b < B; b++) {
                        size_t o = (size_t)b * C + cb;
                        const float *r = j->x + o;
                        const float *dz = flat_dz(l, r, j->y + o, j->dy + o, m, a, bb, zbuf, dzbuf);
                        for (int c = 0; c < m; c++) {
                                sdy[c] += dz[c];
                                sdyx[c] += dz[c] * (r[c] - mean[c]);
                        }
                }
                for (int c = 0; c < m; c++) {
                        sdyx[c] *= invstd[c];   /* sum dz xhat */
                        if (v.dbeta) {
                                v.dbeta[cb + c] += (float)sdy[c];
                                v.dgamma[cb + c] += (float)sdyx[c];
                        }
                        bx[c] = j->training ? (float)(a[c] * sdy[c] / (double)B) : 0.0f;
                        kk[c] = j->training ? (float)(a[c] * sdyx[c] * invstd[c] / (double)B) : 0.0f;
                }
                if (!j->out) continue;
                for (int b = 0; b < B; b++) {
                        size_t o = (size_t)b * C + cb;
                        const float *r = j->x + o;
                        const float *dz = flat_dz(l, r, j->y + o, j->dy + o, m, a, bb, zbuf, dzbuf);
                        float *dx = j->out + o;
                        for (int c = 0; c < m; c++) dx[c] = a[c] * dz[c] - kk[c] * (r[c] - mean[c]) - bx[c];
                }
        }
}


/* Training, per channel c over its n = B*S values, in one pass over x for the statistics (shifted
 * by the channel's first value k, so that the sums stay small where the mean is large):
 *   mean = k + sum (x - k) / n,  var = sum (x - k)^2 / n - (mean - k)^2
 *   y = f(gamma (x - mean) / sqrt(var + eps) + beta)  = f(a x + b)
 *   running_mean = (1-m) running_mean + m mean
 *   running_var  = (1-m) running_var  + m var n/(n-1)                  (unbiased, as PyTorch)
 * Evaluation: y = f(gamma (x - running_mean) / sqrt(running_var + eps) + beta).
 * Channel c's coefficients a, b from its sums s1, s2 (training) or the running statistics. */
static void fwd_coef(const struct bn_job *j, int c, float k, double s1, double s2, float *a, float *b)
{
        const dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const size_t n = (size_t)j->B * v.S;
        float mean, invstd;
        if (j->training) {
                double m1 = s1 / (double)n, var = s2 / (double)n - m1 * m1;
                if (var < 0) var = 0;
                /* n == 1 has no unbiased variance (PyTorch refuses); keep the biased 0 */
                double uvar = n > 1 ? var * (double)n / (double)(n - 1) : var;
                mean = (float)(k + m1);
                invstd = (float)(1.0 / sqrt(var + cf->eps));
                p->mean[c] = mean;
                p->invstd[c] = invstd;
                v.rmean[c] = (1.0f - cf->momentum) * v.rmean[c] + cf->momentum * mean;
                v.rvar[c] = (1.0f - cf->momentum) * v.rvar[c] + cf->momentum * (float)uvar;
        } else {
                mean = v.rmean[c];
                invstd = (float)(1.0 / sqrt((double)v.rvar[c] + cf->eps));
        }
        *a = (v.gamma ? v.gamma[c] : 1.0f) * invstd;
        *b = (v.beta ? v.beta[c] : 0.0f) - *a * mean;
}

/* With xhat = (x - mean) invstd and dz = f'(z) dy (dz = dy without an activation), per channel:
 *   dbeta += sum dz,  dgamma += sum dz xhat
 * training (mean and invstd depend on x):
 *   dx = gamma invstd / n (n dz - sum dz - xhat sum(dz xhat))
 * evaluation (running statistics are constants):
 *   dx = gamma invstd dz
 * Channel c's mean, invstd and forward coefficients a, b. */
static void bwd_coef(const struct bn_job *j, int c, float *mean, float *invstd, float *a, float *b)
{
        const dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        const struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        if (j->training) {
                *mean = p->mean[c];
                *invstd = p->invstd[c];
        } else {
                *mean = v.rmean[c];
                *invstd = (float)(1.0 / sqrt((double)v.rvar[c] + cf->eps));
        }
        *a = (v.gamma ? v.gamma[c] : 1.0f) * *invstd;
        *b = (v.beta ? v.beta[c] : 0.0f) - *a * *mean;
}

/* From channel c's sums: the parameter gradients, and dx = a dz - kk (x - mean) - bx's kk, bx */
static void bwd_finish(const struct bn_job *j, int c, double sdy, double sdyx, float a, float invstd, float *kk,
                       float *bx)
{
        struct bn_view v = view_of(j->l);
        const size_t n = (size_t)j->B * v.S;
        sdyx *= invstd;         /* sum dz xhat */
        if (v.dbeta) {
                v.dbeta[c] += (float)sdy;
                v.dgamma[c] += (float)sdyx;
        }
        *bx = *kk = 0;
        if (j->training) {
                *bx = (float)(a * sdy / (double)n);
                *kk = (float)(a * sdyx * invstd / (double)n);
        }
}

/* ---- AVX-512 (f none or relu): the same arithmetic, in memory order, 16 folds at once ----
 * The plain loops walk a channel's B rows, C S floats apart: rows of 49 or 196 values (cnn-bn's
 * bn3, bn2) then came from memory one miss after another, and each row's 16 lane sums fold in a
 * chain of 16 dependent additions. Here the rows go in memory order, sample by sample and within
 * a sample channel by channel, so the tensor streams; a channel still sees its rows in sample
 * order. The lane vectors of 16 rows (or, backward, 16 chunks of CHUNK values) wait in a queue
 * and fold together: vector k of the transposed block holds lane k of each, so 16 vector additions
 * make the 16 folds, each in lane order as fold() adds; the results go into their channels' doubles
 * in queue order, which is each channel's row order. The lanes are the plain loops' (a masked
 * addition for the tail lanes, no FMA contraction), so every bit matches them. dt_bn_plain (tests)
 * keeps the plain loops. */
int dt_bn_plain = 0;

#if defined(__AVX512F__)
#define VEC_BN 1

/* s[r] = ((0 + v[r][0]) + v[r][1]) + ... + v[r][15] for the rows r of the 16 x 16 block v */
static inline __m512 fold16(const float *v)
{
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(LANES));
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < LANES; k++) s = _mm512_add_ps(s, _mm512_i32gather_ps(idx, v + k, 4));
        return s;
}

/* one cache line (a vector) of a streaming loop, DT_AHEAD_BYTES ahead */
#define AHEAD(p) dt_prefetch_ahead((p), 1, 0)

static inline __mmask16 tail_mask(size_t n) { return (__mmask16)(n >= LANES ? 0xffffu : (1u << n) - 1); }

/* Pairs of lane vectors waiting to fold, each for channel ch[i]: s1[ch] += fold(a), s2[ch] += fold(b) */
struct foldq {
        float va[LANES * LANES], vb[LANES * LANES];
        int ch[LANES], n;
        double *s1, *s2;        /* indexed by channel */
};

static void fq_flush(struct foldq *q)
{
        if (!q->n) return;
        float fa[LANES], fb[LANES];
        _mm512_storeu_ps(fa, fold16(q->va));
        _mm512_storeu_ps(fb, fold16(q->vb));
        for (int i = 0; i < q->n; i++) {
                q->s1[q->ch[i]] += fa[i];
                q->s2[q->ch[i]] += fb[i];
        }
        q->n = 0;
}

static inline void fq_push(struct foldq *q, int c, __m512 a, __m512 b)
{
        _mm512_storeu_ps(q->va + q->n * LANES, a);
        _mm512_storeu_ps(q->vb + q->n * LANES, b);
        q->ch[q->n++] = c;
        if (q->n == LANES) fq_flush(q);
}

/* dz = f'(z) dy for f none or relu: z = a x + b > 0 ? dy : 0 */
static inline __m512 dz_vec(__m512 x, __m512 g, __m512 va, __m512 vb, int relu)
{
        if (!relu) return g;
        __m512 z = _mm512_add_ps(_mm512_mul_ps(va, x), vb);
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ), g);
}

/* Channels [c0, c1) forward: statistics (training), then y = f(a x + b) */
static void fwd_vec(const struct bn_job *j, int c0, int c1)
{
        const dt_layer *l = j->l;
        const int relu = ((const struct bn_cfg *)l->cfg)->act == DT_ACT_RELU;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B, nc = c1 - c0;
        const size_t S = v.S, st = (size_t)C * S;
        double *s = dt_calloc(2 * (size_t)nc, sizeof *s);
        float *k = dt_malloc(3 * (size_t)nc * sizeof *k), *ca = k + nc, *cb = ca + nc;
        if (j->training) {
                struct foldq q = { .n = 0, .s1 = s, .s2 = s + nc };
                for (int c = 0; c < nc; c++) k[c] = j->x[(size_t)(c0 + c) * S];
                for (int b = 0; b < B; b++)
                        for (int c = 0; c < nc; c++) {
                                const float *x = j->x + (size_t)b * st + (size_t)(c0 + c) * S;
                                const __m512 kk = _mm512_set1_ps(k[c]);
                                __m512 a = _mm512_setzero_ps(), q2 = _mm512_setzero_ps();
                                size_t i = 0;
                                for (; i + LANES <= S; i += LANES) {
                                        AHEAD(x + i);
                                        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), kk);
                                        a = _mm512_add_ps(a, d);
                                        q2 = _mm512_add_ps(q2, _mm512_mul_ps(d, d));
                                }
                                if (i < S) {
                                        __mmask16 m = tail_mask(S - i);
                                        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), kk);
                                        a = _mm512_mask_add_ps(a, m, a, d);
                                        q2 = _mm512_mask_add_ps(q2, m, q2, _mm512_mul_ps(d, d));
                                }
                                fq_push(&q, c, a, q2);
                        }
                fq_flush(&q);
        }
        for (int c = 0; c < nc; c++) fwd_coef(j, c0 + c, k[c], s[c], s[nc + c], &ca[c], &cb[c]);
        const __m512 zero = _mm512_setzero_ps();
        for (int b = 0; b < B; b++)
                for (int c = 0; c < nc; c++) {
                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                        const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]);
                        size_t i = 0;
                        for (; i + LANES <= S; i += LANES) {
                                AHEAD(j->x + o + i);
                                /* z > 0 ? z : 0, as max(z, 0) gives it: NaN and -0 become +0 */
                                __m512 z = _mm512_add_ps(_mm512_mul_ps(va, _mm512_loadu_ps(j->x + o + i)), vb);
                                if (relu) z = _mm512_max_ps(z, zero);
                                _mm512_storeu_ps(j->out + o + i, z);
                        }
                        if (i < S) {
                                __mmask16 m = tail_mask(S - i);
                                __m512 z = _mm512_add_ps(_mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, j->x + o + i)), vb);
                                if (relu) z = _mm512_max_ps(z, zero);
                                _mm512_mask_storeu_ps(j->out + o + i, m, z);
                        }
                }
        free(s);
        free(k);
}

/* Channels [c0, c1) backward: the sums (over rows, then CHUNK-value chunks, as bwd_part folds
 * them), the parameter gradients, then dx */
static void bwd_vec(const struct bn_job *j, int c0, int c1)
{
        const dt_layer *l = j->l;
        const int relu = ((const struct bn_cfg *)l->cfg)->act == DT_ACT_RELU;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B, nc = c1 - c0;
        const size_t S = v.S, st = (size_t)C * S;
        double *s = dt_calloc(2 * (size_t)nc, sizeof *s);
        float *co = dt_malloc(6 * (size_t)nc * sizeof *co);
        float *mean = co, *invstd = co + nc, *ca = co + 2 * nc, *cb = co + 3 * nc, *kk = co + 4 * nc, *bx = co + 5 * nc;
        for (int c = 0; c < nc; c++) bwd_coef(j, c0 + c, &mean[c], &invstd[c], &ca[c], &cb[c]);
        struct foldq q = { .n = 0, .s1 = s, .s2 = s + nc };
        for (int b = 0; b < B; b++)
                for (int c = 0; c < nc; c++) {
                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                        const float *x = j->x + o, *g = j->dy + o;
                        const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]), vm = _mm512_set1_ps(mean[c]);
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t e = S - q0 < CHUNK ? S : q0 + CHUNK;
                                __m512 t = _mm512_setzero_ps(), u = _mm512_setzero_ps();
                                for (size_t i = q0; i < e; i += LANES) {
                                        __mmask16 m = tail_mask(e - i);
                                        AHEAD(x + i);
                                        AHEAD(g + i);
                                        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
                                        __m512 dz = dz_vec(xv, _mm512_maskz_loadu_ps(m, g + i), va, vb, relu);
                                        t = _mm512_mask_add_ps(t, m, t, dz);
                                        u = _mm512_mask_add_ps(u, m, u, _mm512_mul_ps(dz, _mm512_sub_ps(xv, vm)));
                                }
                                fq_push(&q, c, t, u);
                        }
                }
        fq_flush(&q);
        for (int c = 0; c < nc; c++) bwd_finish(j, c0 + c, s[c], s[nc + c], ca[c], invstd[c], &kk[c], &bx[c]);
        if (j->out)
                for (int b = 0; b < B; b++)
                        for (int c = 0; c < nc; c++) {
                                size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                const float *x = j->x + o, *g = j->dy + o;
                                float *dx = j->out + o;
                                const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]), vm = _mm512_set1_ps(mean[c]);
                                const __m512 vk = _mm512_set1_ps(kk[c]), vx = _mm512_set1_ps(bx[c]);
                                for (size_t i = 0; i < S; i += LANES) {
                                        __mmask16 m = tail_mask(S - i);
                                        AHEAD(x + i);
                                        AHEAD(g + i);
                                        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
                                        __m512 dz = dz_vec(xv, _mm512_maskz_loadu_ps(m, g + i), va, vb, relu);
                                        /* a dz - kk (x - mean) - bx, in that order */
                                        __m512 r = _mm512_sub_ps(_mm512_mul_ps(va, dz), _mm512_mul_ps(vk, _mm512_sub_ps(xv, vm)));
                                        r = _mm512_sub_ps(r, vx);
                                        if (m == 0xffffu) _mm512_storeu_ps(dx + i, r);
                                        else _mm512_mask_storeu_ps(dx + i, m, r);
                                }
                        }
        free(s);
        free(co);
}
#else
#define VEC_BN 0
#endif

#if VEC_BN
static int use_vec(const dt_layer *l)
{
        const dt_act act = ((const struct bn_cfg *)l->cfg)->act;
        return !dt_bn_plain && (act == DT_ACT_NONE || act == DT_ACT_RELU);
}
#endif

static void fwd_part(void *arg, int t, int nt)
{
        const struct bn_job *j = arg;
        dt_layer *l = j->l;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        const size_t S = v.S, st = (size_t)C * S;
        long c0, c1;
        if (S == 1) {
                dt_par_range(C, t, nt, 16, &c0, &c1);
                fwd_flat(j, (int)c0, (int)c1);
                return;
        }
        dt_par_range(C, t, nt, 1, &c0, &c1);
#if VEC_BN
        if (use_vec(l)) {
                if (c1 > c0) fwd_vec(j, (int)c0, (int)c1);
                return;
        }
#endif
        for (int c = (int)c0; c < (int)c1; c++) {
                const float *xc = j->x + (size_t)c * S;
                float k = xc[0], a, bb;
                double s1 = 0, s2 = 0;
                if (j->training)
                        for (int b = 0; b < B; b++) row_moments(xc + b * st, S, k, &s1, &s2);
                fwd_coef(j, c, k, s1, s2, &a, &bb);
                for (int b = 0; b < B; b++) row_out(l, xc + b * st, j->out + (size_t)c * S + b * st, S, a, bb);
        }
}

static void bwd_part(void *arg, int t, int nt)
{
        const struct bn_job *j = arg;
        dt_layer *l = j->l;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        const size_t S = v.S, st = (size_t)C * S;
        float zbuf[CHUNK], dzbuf[CHUNK];
        long c0, c1;
        if (S == 1) {
                dt_par_range(C, t, nt, 16, &c0, &c1);
                bwd_flat(j, (int)c0, (int)c1);
                return;
        }
        dt_par_range(C, t, nt, 1, &c0, &c1);
#if VEC_BN
        if (use_vec(l)) {
                if (c1 > c0) bwd_vec(j, (int)c0, (int)c1);
                return;
        }
#endif
        for (int c = (int)c0; c < (int)c1; c++) {
                const size_t off = (size_t)c * S;
                float mean, invstd, a, bb, kk, bx;
                bwd_coef(j, c, &mean, &invstd, &a, &bb);
                double sdy = 0, sdyx = 0;
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + off + b * st, *yr = j->y + off + b * st, *g = j->dy + off + b * st;
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t m = S - q0 < CHUNK ? S - q0 : CHUNK;
                                const float *dz = row_dz(l, r + q0, yr + q0, g + q0, m, a, bb, zbuf, dzbuf);
                                float tt[LANES] = { 0 }, u[LANES] = { 0 };
                                size_t q = 0;
                                for (; q + LANES <= m; q += LANES)
                                        for (int k = 0; k < LANES; k++) {
                                                tt[k] += dz[q + k];
                                                u[k] += dz[q + k] * (r[q0 + q + k] - mean);
                                        }
                                for (int k = 0; q < m; q++, k++) {
                                        tt[k] += dz[q];
                                        u[k] += dz[q] * (r[q0 + q] - mean);
                                }
                                sdy += fold(tt);
                                sdyx += fold(u);
                        }
                }
                bwd_finish(j, c, sdy, sdyx, a, invstd, &kk, &bx);
                if (!j->out) continue;
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + off + b * st, *yr = j->y + off + b * st, *g = j->dy + off + b * st;
                        float *o = j->out + off + b * st;
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t m = S - q0 < CHUNK ? S - q0 : CHUNK;
                                const float *dz = row_dz(l, r + q0, yr + q0, g + q0, m, a, bb, zbuf, dzbuf);
                                for (size_t q = 0; q < m; q++) o[q0 + q] = a * dz[q] - kk * (r[q0 + q] - mean) - bx;
                        }
                }
        }
}

/* about 32K floats before a region pays for its wake-up; one channel per thread at least */
static void run_host(dt_layer *l, dt_par_fn fn, struct bn_job *j)
{
        if (l->in.d[0] >= 2 && (size_t)j->B * dt_shape_size(&l->in) >= ((size_t)32 << 10)) dt_par_run(l->be, fn, j);
        else fn(j, 0, 1);
}

static void bn_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        if (p->dd.state) {      /* device backend: the fused op, then the activation */
                float *z = cf->act == DT_ACT_NONE ? y : p->z ? p->z : y;
                l->be->ops->bn_fwd(l->be, &p->dd, ctx->training, x, z, v.gamma, v.beta, v.rmean, v.rvar, p->mean,
                                   p->invstd, B);
                if (cf->act != DT_ACT_NONE)
                        l->be->ops->act_fwd(l->be, cf->act, cf->alpha, z, y, (size_t)B * dt_shape_size(&l->in));
                return;
        }
        struct bn_job j = { .l = l, .training = ctx->training, .B = B, .x = x, .out = y };
        run_host(l, fwd_part, &j);
}

static void bn_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        if (p->dd.state) {      /* device backend: the activation's derivative, then the fused op */
                if (cf->act != DT_ACT_NONE) {
                        /* relu, tanh, sigmoid and leaky_relu (alpha > 0) take f' from y; z was kept otherwise */
                        l->be->ops->act_bwd(l->be, cf->act, cf->alpha, p->z ? p->z : y, y, dy, p->dz,
                                            (size_t)B * dt_shape_size(&l->in));
                        dy = p->dz;
                }
                l->be->ops->bn_bwd(l->be, &p->dd, ctx->training, x, dy, dx, v.gamma, v.dgamma, v.dbeta, v.rmean,
                                   v.rvar, p->mean, p->invstd, B);
                return;
        }
        struct bn_job j = { .l = l, .training = ctx->training, .B = B, .x = x, .y = y, .dy = dy, .out = dx };
        run_host(l, bwd_part, &j);
}

static int bn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_BN, backend, "batch normalisation", why, n);
}

const dt_layer_ops dt_batchnorm_layer = {
        .name = "batchnorm", .cfg_size = sizeof(struct bn_cfg),
        .parse = bn_parse, .infer = bn_infer, .params = bn_params, .flops = bn_flops, .traffic = bn_traffic,
        .setup = bn_setup, .teardown = bn_teardown, .supports = bn_supports,
        .forward = bn_forward, .backward = bn_backward,
        .summary = "batch normalisation over (C,H,W) per channel or (F): momentum, eps, affine, activation",
};
