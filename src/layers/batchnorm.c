/* layers/batchnorm.c - batch normalisation with PyTorch's semantics: per-channel statistics over
 * (B, H, W) for (C,H,W) inputs (BatchNorm2d) and over B for (F) inputs (BatchNorm1d).
 * weight (C) = gamma, bias (C) = beta (when affine), buffers running_mean (C), running_var (C).
 * Training normalises with the batch's biased variance and updates the running statistics with
 * the unbiased one: running = (1 - momentum) running + momentum batch. Evaluation uses the running
 * statistics. PyTorch's state_dict also holds num_batches_tracked, which only matters there when
 * momentum is None; it is not stored here.
 *
 * Data parallel: each rank normalises its own slice of the batch with that slice's statistics
 * (PyTorch DDP without SyncBatchNorm), so N ranks match 1 rank only up to that difference; the
 * running statistics are per rank too until the trainer averages or broadcasts buffers.
 * Plain C on host memory (CPU backend). */
#include "layers/layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct bn_cfg {
        float momentum, eps;
        int affine;
};

struct bn_priv {
        float *mean;    /* (C) batch mean of the last training forward */
        float *invstd;  /* (C) 1/sqrt(var + eps) of the same batch */
        dt_bn_desc dd;  /* device backends: the fused op's plan (dd.state set) */
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

/* Sum of x[b][c][0..S) over b, in double across rows (float within a row, which vectorises). */
static double chan_sum(const float *x, int B, int C, size_t S, int c)
{
        double s = 0;
        for (int b = 0; b < B; b++) {
                const float *r = x + ((size_t)b * C + c) * S;
                float t = 0;
                for (size_t q = 0; q < S; q++) t += r[q];
                s += t;
        }
        return s;
}

/* Training, per channel c over its n = B*S values:
 *   mean = sum x / n,  var = sum (x - mean)^2 / n                       (two passes)
 *   y = gamma (x - mean) / sqrt(var + eps) + beta
 *   running_mean = (1-m) running_mean + m mean
 *   running_var  = (1-m) running_var  + m var n/(n-1)                  (unbiased, as PyTorch)
 * Evaluation: y = gamma (x - running_mean) / sqrt(running_var + eps) + beta. */
static void bn_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C;
        const size_t S = v.S, n = (size_t)B * S;
        if (p->dd.state) {      /* device backend: the fused op */
                l->be->ops->bn_fwd(l->be, &p->dd, ctx->training, x, y, v.gamma, v.beta, v.rmean, v.rvar, p->mean,
                                   p->invstd, B);
                return;
        }
        for (int c = 0; c < C; c++) {
                float mean, invstd;
                if (ctx->training) {
                        double mu = chan_sum(x, B, C, S, c) / (double)n, ss = 0;
                        float muf = (float)mu;
                        for (int b = 0; b < B; b++) {
                                const float *r = x + ((size_t)b * C + c) * S;
                                float t = 0;
                                for (size_t q = 0; q < S; q++) {
                                        float dd = r[q] - muf;
                                        t += dd * dd;
                                }
                                ss += t;
                        }
                        double var = ss / (double)n;
                        /* n == 1 has no unbiased variance (PyTorch refuses); keep the biased 0 */
                        double uvar = n > 1 ? ss / (double)(n - 1) : var;
                        mean = muf;
                        invstd = (float)(1.0 / sqrt(var + cf->eps));
                        p->mean[c] = mean;
                        p->invstd[c] = invstd;
                        v.rmean[c] = (1.0f - cf->momentum) * v.rmean[c] + cf->momentum * mean;
                        v.rvar[c] = (1.0f - cf->momentum) * v.rvar[c] + cf->momentum * (float)uvar;
                } else {
                        mean = v.rmean[c];
                        invstd = (float)(1.0 / sqrt((double)v.rvar[c] + cf->eps));
                }
                /* y = a x + b with a = gamma invstd, b = beta - a mean */
                float a = (v.gamma ? v.gamma[c] : 1.0f) * invstd;
                float bb = (v.beta ? v.beta[c] : 0.0f) - a * mean;
                for (int b = 0; b < B; b++) {
                        const float *r = x + ((size_t)b * C + c) * S;
                        float *o = y + ((size_t)b * C + c) * S;
                        for (size_t q = 0; q < S; q++) o[q] = a * r[q] + bb;
                }
        }
}

/* With xhat = (x - mean) invstd, per channel over its n values:
 *   dbeta += sum dy,  dgamma += sum dy xhat
 * training (mean and invstd depend on x):
 *   dx = gamma invstd / n (n dy - sum dy - xhat sum(dy xhat))
 * evaluation (running statistics are constants):
 *   dx = gamma invstd dy */
static void bn_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        (void)y;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C;
        const size_t S = v.S, n = (size_t)B * S;
        if (p->dd.state) {      /* device backend: the fused op */
                l->be->ops->bn_bwd(l->be, &p->dd, ctx->training, x, dy, dx, v.gamma, v.dgamma, v.dbeta, v.rmean,
                                   v.rvar, p->mean, p->invstd, B);
                return;
        }
        for (int c = 0; c < C; c++) {
                float mean, invstd;
                if (ctx->training) {
                        mean = p->mean[c];
                        invstd = p->invstd[c];
                } else {
                        mean = v.rmean[c];
                        invstd = (float)(1.0 / sqrt((double)v.rvar[c] + cf->eps));
                }
                double sdy = 0, sdyx = 0;
                for (int b = 0; b < B; b++) {
                        const float *r = x + ((size_t)b * C + c) * S, *g = dy + ((size_t)b * C + c) * S;
                        float t = 0, u = 0;
                        for (size_t q = 0; q < S; q++) {
                                t += g[q];
                                u += g[q] * (r[q] - mean);
                        }
                        sdy += t;
                        sdyx += u;
                }
                sdyx *= invstd;         /* sum dy xhat */
                if (v.dbeta) {
                        v.dbeta[c] += (float)sdy;
                        v.dgamma[c] += (float)sdyx;
                }
                if (!dx) continue;
                float gam = v.gamma ? v.gamma[c] : 1.0f;
                float a, bx, k;         /* dx = a dy - k (x - mean) - bx */
                if (ctx->training) {
                        a = gam * invstd;
                        bx = (float)(a * sdy / (double)n);
                        k = (float)(a * sdyx * invstd / (double)n);
                } else {
                        a = gam * invstd;
                        bx = 0;
                        k = 0;
                }
                for (int b = 0; b < B; b++) {
                        const float *r = x + ((size_t)b * C + c) * S, *g = dy + ((size_t)b * C + c) * S;
                        float *o = dx + ((size_t)b * C + c) * S;
                        for (size_t q = 0; q < S; q++) o[q] = a * g[q] - k * (r[q] - mean) - bx;
                }
        }
}

static int bn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_BN, backend, "batch normalisation", why, n);
}

const dt_layer_ops dt_batchnorm_layer = {
        .name = "batchnorm", .cfg_size = sizeof(struct bn_cfg),
        .parse = bn_parse, .infer = bn_infer, .params = bn_params, .flops = bn_flops,
        .setup = bn_setup, .teardown = bn_teardown, .supports = bn_supports,
        .forward = bn_forward, .backward = bn_backward,
        .summary = "batch normalisation over (C,H,W) per channel or (F): momentum, eps, affine",
};
