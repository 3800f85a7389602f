/* layers/layernorm.c - layer normalisation over the last dimension, PyTorch's nn.LayerNorm(F):
 * every row of F values (a flat (F) sample, or each step of a (T,F) sequence) is normalised by
 * its own mean and biased variance, then scaled and shifted per feature. weight (F), bias (F)
 * (when affine); no running statistics, so training and evaluation compute the same. Host loops on
 * the cpu backend, the same bits for any thread count: rows are independent, and the parameter
 * gradients are summed per feature over the rows in row order; on a device backend, its ln ops. */
#include "layers/layer.h"
#include "layers/layernorm_kern.h"

#include <stdio.h>
#include <stdlib.h>

struct ln_cfg {
        float eps;
        int affine;
};

struct ln_priv {
        float *mean, *rstd;     /* (R) per row, from forward for backward */
        int device;             /* the backend's ln ops, on its memory (mean, rstd its allocations) */
};

static int ln_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct ln_cfg *c = cfg;
        double e = 1e-5;
        int rc = 0;
        if (dt_ymap_num_excl(m, "eps", &e, 1e-5, 0.0, 1.0, DT_YEXCL_MIN, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "affine", &c->affine, 1, 0) < 0) rc = -1;
        c->eps = (float)e;
        return rc;
}

static int ln_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg;
        if (in->n > 2) {
                char b[64];
                snprintf(why, n, "needs a flat (F) or sequence (T,F) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = *in;
        return 0;
}

static int ln_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        const struct ln_cfg *c = cfg;
        int F = in->d[in->n - 1];
        if (!c->affine) return 0;
        ps[0] = (dt_param_spec){ .suffix = "weight", .shape = { 1, { F } }, .init = DT_INIT_ONE,
                                 .fan_in = 1, .fan_out = 1, .trainable = 1 };
        ps[1] = (dt_param_spec){ .suffix = "bias", .shape = { 1, { F } }, .init = DT_INIT_ZERO,
                                 .fan_in = 1, .fan_out = 1, .trainable = 1 };
        return 2;
}

static int width(const dt_shape *s) { return s->d[s->n - 1]; }
static size_t rows_per_sample(const dt_shape *s) { return s->n == 2 ? (size_t)s->d[0] : 1; }

static double ln_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return 8.0 * (double)dt_shape_size(in);
}

/* forward reads x twice (the statistics, then y) and writes y; backward reads x and dy twice
 * (the two row sums, then dx) and writes dx */
static double ln_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out;
        return (backward ? 5.0 : 3.0) * sizeof(float) * (double)dt_shape_size(in);
}

static size_t ln_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return 2 * rows_per_sample(in);
}

static int ln_setup(dt_layer *l, int max_batch)
{
        struct ln_priv *p = dt_calloc(1, sizeof *p);
        size_t R = (size_t)max_batch * rows_per_sample(&l->in);
        l->priv = p;
        if (l->be->ops->ln_fwd) {
                p->device = 1;
                p->mean = l->be->ops->alloc(l->be, R);
                p->rstd = l->be->ops->alloc(l->be, R);
                return p->mean && p->rstd ? 0 : -1;
        }
        p->mean = dt_falloc(R);
        p->rstd = dt_falloc(R);
        return 0;
}

static void ln_teardown(dt_layer *l)
{
        struct ln_priv *p = l->priv;
        if (!p) return;
        if (p->device) {
                if (p->mean) l->be->ops->free(l->be, p->mean);
                if (p->rstd) l->be->ops->free(l->be, p->rstd);
        } else {
                free(p->mean);
                free(p->rstd);
        }
        free(p);
        l->priv = NULL;
}

struct ln_job {
        dt_layer *l;
        const float *x, *dy;
        float *y, *dx;
        size_t R;
};

/* the rows of this thread's share (layernorm_kern.h) */
static void fwd_rows(void *arg, int t, int nt)
{
        const struct ln_job *j = arg;
        const struct ln_cfg *c = j->l->cfg;
        struct ln_priv *p = j->l->priv;
        long lo, hi;
        dt_par_range((long)j->R, t, nt, 1, &lo, &hi);
        dt_ln_get()->fwd(j->x, j->y, p->mean, p->rstd, c->affine ? j->l->p[0] : NULL, c->affine ? j->l->p[1] : NULL,
                         c->eps, (size_t)width(&j->l->in), (size_t)lo, (size_t)hi);
}

static void bwd_rows(void *arg, int t, int nt)
{
        const struct ln_job *j = arg;
        const struct ln_cfg *c = j->l->cfg;
        const struct ln_priv *p = j->l->priv;
        const size_t F = (size_t)width(&j->l->in);
        float *g = dt_falloc(2 * F);
        long lo, hi;
        dt_par_range((long)j->R, t, nt, 1, &lo, &hi);
        dt_ln_get()->bwd(j->x, j->dy, j->dx, p->mean, p->rstd, c->affine ? j->l->p[0] : NULL, F, (size_t)lo,
                         (size_t)hi, g);
        free(g);
}

/* dw[i] += sum_r dy[r,i] xhat[r,i];  db[i] += sum_r dy[r,i]: threads take blocks of features, each
 * sums its features over every row in order */
static void bwd_params(void *arg, int t, int nt)
{
        const struct ln_job *j = arg;
        const struct ln_priv *p = j->l->priv;
        const size_t F = (size_t)width(&j->l->in);
        float *dw = j->l->g[0], *db = j->l->g[1];
        long lo, hi;
        dt_par_range((long)F, t, nt, 16, &lo, &hi);
        if (lo >= hi) return;
        size_t n = (size_t)(hi - lo);
        float *aw = dt_calloc(2 * n, sizeof *aw), *ab = aw + n;
        dt_ln_get()->params(j->x, j->dy, p->mean, p->rstd, F, j->R, (size_t)lo, n, aw, ab);
        for (size_t i = 0; i < n; i++) {
                dw[lo + i] += aw[i];
                db[lo + i] += ab[i];
        }
        free(aw);
}

/* about 32K floats before a region pays for its wake-up */
static void run(dt_layer *l, dt_par_fn fn, struct ln_job *j)
{
        if (j->R * (size_t)width(&l->in) >= ((size_t)32 << 10)) dt_par_run(l->be, fn, j);
        else fn(j, 0, 1);
}

static void ln_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        const struct ln_cfg *c = l->cfg;
        struct ln_priv *p = l->priv;
        struct ln_job j = { .l = l, .x = x, .y = y, .R = (size_t)B * rows_per_sample(&l->in) };
        if (p->device) {
                l->be->ops->ln_fwd(l->be, x, y, c->affine ? l->p[0] : NULL, c->affine ? l->p[1] : NULL, p->mean, p->rstd,
                                   (int)j.R, width(&l->in), c->eps);
                return;
        }
        run(l, fwd_rows, &j);
}

static void ln_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        (void)ctx; (void)y;
        const struct ln_cfg *c = l->cfg;
        const struct ln_priv *p = l->priv;
        struct ln_job j = { .l = l, .x = x, .dy = dy, .dx = dx, .R = (size_t)B * rows_per_sample(&l->in) };
        if (p->device) {
                l->be->ops->ln_bwd(l->be, x, dy, dx, c->affine ? l->p[0] : NULL, c->affine ? l->g[0] : NULL,
                                   c->affine ? l->g[1] : NULL, p->mean, p->rstd, (int)j.R, width(&l->in));
                return;
        }
        if (c->affine) run(l, bwd_params, &j);
        if (dx) run(l, bwd_rows, &j);
}

static int ln_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_LN, backend, "layer normalisation", why, n);
}

const dt_layer_ops dt_layernorm_layer = {
        .name = "layernorm", .cfg_size = sizeof(struct ln_cfg),
        .parse = ln_parse, .infer = ln_infer, .params = ln_params, .flops = ln_flops, .traffic = ln_traffic,
        .scratch = ln_scratch, .setup = ln_setup, .teardown = ln_teardown, .supports = ln_supports,
        .forward = ln_forward, .backward = ln_backward,
        .summary = "layer normalisation over the last dimension, (F) or (T,F): eps, affine",
};
