/* layers/fc.c - fully connected layer: y = f(x W^T + b) on the last dimension (PyTorch's
 * nn.Linear), so (I) -> (O) and sequences (T,I) -> (T,O). Shapes: R = B*T rows, I in, O out.
 * weight (O, I), bias (O). */
#include "layers/layer.h"

#include <stdio.h>
#include <stdlib.h>

struct fc_cfg {
        int units;
        dt_act act;
        float alpha;
        dt_init init;
        int bias;
};

struct fc_priv {
        float *z;       /* (R, O) pre-activation, kept only when f'(z) cannot be read from y */
};

static int fc_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct fc_cfg *c = cfg;
        long units = 0;
        int rc = 0;
        if (dt_ymap_int(m, "units", &units, 0, 1, 1 << 24, 1) < 0) rc = -1;
        c->units = (int)units;
        if (dt_parse_act(m, "activation", &c->act, &c->alpha, DT_ACT_NONE) < 0) rc = -1;
        if (dt_parse_init(m, "init", &c->init, DT_INIT_TORCH) < 0) rc = -1;
        if (dt_ymap_bool(m, "bias", &c->bias, 1, 0) < 0) rc = -1;
        return rc;
}

static int fc_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        const struct fc_cfg *c = cfg;
        if (in->n > 2) {
                char b[64];
                snprintf(why, n, "needs a flat (I) or sequence (T,I) input, got %s; add a flatten layer before it",
                         dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = *in;
        out->d[in->n - 1] = c->units;
        return 0;
}

static int fc_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        const struct fc_cfg *c = cfg;
        int I = in->d[in->n - 1], O = c->units;
        ps[0] = (dt_param_spec){ .suffix = "weight", .shape = { 2, { O, I } }, .init = c->init,
                                 .init_arg = 1.0f, .fan_in = I, .fan_out = O, .trainable = 1 };
        if (!c->bias) return 1;
        /* PyTorch draws the bias from U(-1/sqrt(I), 1/sqrt(I)); with an explicit scheme, zeros */
        ps[1] = (dt_param_spec){ .suffix = "bias", .shape = { 1, { O } },
                                 .init = c->init == DT_INIT_TORCH ? DT_INIT_TORCH : DT_INIT_ZERO,
                                 .fan_in = I, .fan_out = O, .trainable = 1 };
        return 2;
}

static int rows_of(const dt_shape *in) { return in->n == 2 ? in->d[0] : 1; }

static double fc_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg;
        return 2.0 * rows_of(in) * in->d[in->n - 1] * out->d[out->n - 1];
}

/* gelu needs z in backward; relu, leaky relu (alpha > 0 keeps the sign), tanh and sigmoid
 * can take their derivative from y alone. */
static int needs_z(const struct fc_cfg *c)
{
        return c->act == DT_ACT_GELU || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0);
}

static size_t fc_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)in;
        return needs_z(cfg) ? dt_shape_size(out) : 0;
}

static int fc_setup(dt_layer *l, int max_batch)
{
        struct fc_priv *p = dt_calloc(1, sizeof *p);
        if (needs_z(l->cfg)) p->z = l->be->ops->alloc(l->be, (size_t)max_batch * dt_shape_size(&l->out));
        l->priv = p;
        return 0;
}

static void fc_teardown(dt_layer *l)
{
        struct fc_priv *p = l->priv;
        if (!p) return;
        if (p->z) l->be->ops->free(l->be, p->z);
        free(p);
        l->priv = NULL;
}

static void fc_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct fc_priv *p = l->priv;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = c->units;
        float *z = p->z ? p->z : y;
        o->gemm(l->be, 0, 1, R, O, I, 1.0f, x, I, l->p[0], I, 0.0f, z, O);   /* z = x W^T */
        if (c->bias) o->bias_add(l->be, z, l->p[1], R, O);
        if (c->act != DT_ACT_NONE) o->act_fwd(l->be, c->act, c->alpha, z, y, (size_t)R * O);
}

/* The backward in zb-h1's two halves; fc_backward runs them back to back. The input half leaves
 * dz = f'(z) dy in dy for the weight half: the two read disjoint outputs, so their order changes
 * no bit of either. */
static void fc_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                              const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)x;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct fc_priv *p = l->priv;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = c->units;
        /* dz = f'(z) dy, written over dy (the graph lets a layer consume its dy) */
        if (c->act != DT_ACT_NONE)
                o->act_bwd(l->be, c->act, c->alpha, p->z ? p->z : y, y, dy, (float *)dy, (size_t)R * O);
        if (dx) o->gemm(l->be, 0, 0, R, I, O, 1.0f, dy, O, l->p[0], I, 0.0f, dx, I); /* dx = dz W */
}

/* dy holds dz here (fc_backward_input rewrote it) */
static void fc_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                               const float *dy, int B)
{
        (void)ctx;
        (void)y;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = c->units;
        o->gemm(l->be, 1, 0, O, I, R, 1.0f, dy, O, x, I, 1.0f, l->g[0], I);   /* dW += dz^T x */
        if (c->bias) o->bias_grad(l->be, l->g[1], dy, R, O);                 /* db += sum_r dz */
}

static void fc_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        fc_backward_input(l, ctx, x, y, dy, dx, B);
        fc_backward_weight(l, ctx, x, y, dy, B);
}

const dt_layer_ops dt_fc_layer = {
        .name = "fc", .cfg_size = sizeof(struct fc_cfg),
        .parse = fc_parse, .infer = fc_infer, .params = fc_params, .flops = fc_flops,
        .scratch = fc_scratch, .setup = fc_setup, .teardown = fc_teardown,
        .forward = fc_forward, .backward = fc_backward,
        .summary = "fully connected: units, activation, alpha, init, bias",
        .backward_input = fc_backward_input, .backward_weight = fc_backward_weight,
};
