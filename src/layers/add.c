/* layers/add.c - element-wise sum of two or more same-shaped inputs, then an optional activation:
 * y = f(x_1 + ... + x_k) (a residual connection: f(F(x) + x)). Shapes: any, all equal. */
#include "layers/layer.h"

#include <stdio.h>
#include <stdlib.h>

struct add_cfg {
        dt_act act;
        float alpha;
};

/* What forward leaves for backward: z = the sum, when f'(z) cannot be read from y (gelu), and a
 * place for dz when no input's gradient can take it first. */
struct add_priv {
        float *z, *dz;
};

static int add_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct add_cfg *c = cfg;
        return dt_parse_act(m, "activation", &c->act, &c->alpha, DT_ACT_NONE);
}

static int add_infer(const void *cfg, const dt_shape *in, const char *const *from, int nin, dt_shape *out,
                     char *why, size_t n)
{
        (void)cfg;
        for (int k = 1; k < nin; k++)
                if (!dt_shape_eq(&in[k], &in[0])) {
                        char a[64], b[64];
                        snprintf(why, n, "needs equal shapes, got %s from '%s' and %s from '%s'; put a 1x1 conv "
                                 "(with a stride where H and W differ) or an fc on one of them to match",
                                 dt_shape_str(&in[0], a, sizeof a), from[0], dt_shape_str(&in[k], b, sizeof b), from[k]);
                        return -1;
                }
        *out = in[0];
        return 0;
}

/* relu and leaky relu read their slope from y's sign, tanh and sigmoid from y; gelu needs z */
static int keeps_z(const struct add_cfg *c) { return c->act == DT_ACT_GELU || c->act == DT_ACT_GELU_TANH; }

static double add_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return (double)dt_shape_size(in);
}

static size_t add_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)in;
        const struct add_cfg *c = cfg;
        return c->act == DT_ACT_NONE ? 0 : (keeps_z(c) ? 2 : 1) * dt_shape_size(out);
}

static int add_setup(dt_layer *l, int max_batch)
{
        const struct add_cfg *c = l->cfg;
        struct add_priv *p = calloc(1, sizeof *p);
        if (!p) return -1;
        l->priv = p;
        size_t n = (size_t)max_batch * dt_shape_size(&l->out);
        if (keeps_z(c)) p->z = l->be->ops->alloc(l->be, n);
        if (c->act != DT_ACT_NONE) p->dz = l->be->ops->alloc(l->be, n);
        return 0;
}

static void add_teardown(dt_layer *l)
{
        struct add_priv *p = l->priv;
        l->be->ops->free(l->be, p->z);
        l->be->ops->free(l->be, p->dz);
        free(p);
        l->priv = NULL;
}

static void add_forward(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, float *y, int B)
{
        (void)c;
        const struct add_cfg *a = l->cfg;
        struct add_priv *p = l->priv;
        const dt_backend_ops *o = l->be->ops;
        size_t n = (size_t)B * dt_shape_size(&l->out);
        float *z = p->z ? p->z : y;     /* z = x_1 + ... + x_k */
        o->add(l->be, n, x[0], x[1], z);
        for (int k = 2; k < l->nin; k++) o->axpy(l->be, n, 1.0f, x[k], z);
        if (a->act != DT_ACT_NONE) o->act_fwd(l->be, a->act, a->alpha, z, y, n);
}

static void add_backward(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, const float *y,
                         const float *dy, float *const *dx, const int *acc, int B)
{
        (void)c; (void)x;
        const struct add_cfg *a = l->cfg;
        struct add_priv *p = l->priv;
        const dt_backend_ops *o = l->be->ops;
        size_t n = (size_t)B * dt_shape_size(&l->out);
        /* dz = f'(z) dy, written straight into the first input gradient that is overwritten, if any */
        const float *dz = dy;
        int first = -1;
        if (a->act != DT_ACT_NONE) {
                for (int k = 0; k < l->nin && first < 0; k++)
                        if (dx[k] && !acc[k]) first = k;
                float *to = first >= 0 ? dx[first] : p->dz;
                o->act_bwd(l->be, a->act, a->alpha, p->z ? p->z : y, y, dy, to, n);
                dz = to;
        }
        /* dx_k = dz for every input (+= where another reader wrote that gradient first) */
        for (int k = 0; k < l->nin; k++) {
                if (!dx[k] || k == first) continue;
                if (acc[k]) o->axpy(l->be, n, 1.0f, dz, dx[k]);
                else o->copy(l->be, dx[k], dz, n);
        }
}

const dt_layer_ops dt_add_layer = {
        .name = "add", .cfg_size = sizeof(struct add_cfg),
        .parse = add_parse, .flops = add_flops, .scratch = add_scratch,
        .setup = add_setup, .teardown = add_teardown,
        .min_inputs = 2, .infer_n = add_infer, .forward_n = add_forward, .backward_n = add_backward,
        .summary = "element-wise sum of the layers named in inputs (equal shapes): activation (after the sum)",
};
