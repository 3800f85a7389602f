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
#include "layers/batchnorm_int.h"
#include "layers/bnpool.h"
#include "layers/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
                if ((c->act == DT_ACT_GELU || c->act == DT_ACT_GELU_TANH || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0)) &&
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

/* Training, per channel c over its n = B*S values, in one pass over x for the statistics (shifted
 * by the channel's first value k, so that the sums stay small where the mean is large):
 *   mean = k + sum (x - k) / n,  var = sum (x - k)^2 / n - (mean - k)^2
 *   y = f(gamma (x - mean) / sqrt(var + eps) + beta)  = f(a x + b)
 *   running_mean = (1-m) running_mean + m mean
 *   running_var  = (1-m) running_var  + m var n/(n-1)                  (unbiased, as PyTorch)
 * Evaluation: y = f(gamma (x - running_mean) / sqrt(running_var + eps) + beta).
 * Channel c's coefficients a, b from its sums s1, s2 (training) or the running statistics. */
void dt_bn_fwd_coef(const struct bn_job *j, int c, float k, double s1, double s2, float *a, float *b)
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
void dt_bn_bwd_coef(const struct bn_job *j, int c, float *mean, float *invstd, float *a, float *b)
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
void dt_bn_bwd_finish(const struct bn_job *j, int c, double sdy, double sdyx, float a, float invstd, float *kk,
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

/* Nonzero (the tests): the plain loops also where a path's vector kernels would run */
int dt_bn_plain = 0;

#define BN_VEC 0
#define V(f) f##_generic
#include "layers/batchnorm_loops.h"
#undef V
static const struct bn_kern k_generic = { fwd_part_generic, bwd_part_generic, 0 };

#if DT_ISA_X86
const dt_kfam dt_bn_kfam = {
        .name = "batchnorm",
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &dt_bn_kern_avx2, [DT_ISA_AVX512] = &dt_bn_kern_avx512 },
};
#else
const dt_kfam dt_bn_kfam = { .name = "batchnorm", .v = { [DT_ISA_GENERIC] = &k_generic } };
#endif

const struct bn_kern *dt_bn_kern(void) { return dt_kfam_pick(&dt_bn_kfam); }

/* about 32K floats before a region pays for its wake-up; one channel per thread at least */
void dt_bn_run(dt_layer *l, int backward, struct bn_job *j)
{
        const struct bn_kern *k = dt_bn_kern();
        dt_par_fn fn = backward ? k->bwd_part : k->fwd_part;
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
        dt_bn_run(l, 0, &j);
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
        dt_bn_run(l, 1, &j);
}

/* The host loops take f' of none and relu from z = a x + b, recomputed from x; the others from y
 * too. Each dx value is written after its dy is read (the sums' pass reads dy first, whole). The
 * fused device op reads x and y, and gets no dx == dy. */
static unsigned bn_bwd_reads(const dt_layer *l, const dt_backend *be)
{
        const struct bn_cfg *c = l->cfg;
        if (be && be->ops->bn_plan) return DT_BWD_X | DT_BWD_Y;
        return DT_BWD_X | DT_BWD_INPLACE | (c->act == DT_ACT_NONE || c->act == DT_ACT_RELU ? 0 : DT_BWD_Y);
}

static int bn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_BN, backend, "batch normalisation", why, n);
}

const dt_layer_ops dt_batchnorm_layer = {
        .name = "batchnorm", .cfg_size = sizeof(struct bn_cfg),
        .parse = bn_parse, .infer = bn_infer, .params = bn_params, .flops = bn_flops, .traffic = bn_traffic,
        .setup = bn_setup, .teardown = bn_teardown, .supports = bn_supports, .bwd_reads = bn_bwd_reads,
        .forward = bn_forward, .backward = bn_backward,
        .forward_pair = dt_bnpool_forward, .backward_pair = dt_bnpool_backward,
        .summary = "batch normalisation over (C,H,W) per channel or (F): momentum, eps, affine, activation",
};
