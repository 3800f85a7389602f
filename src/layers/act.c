/* layers/act.c - elementwise activation layer: y = f(x), any shape. The math is the backend's
 * act_fwd/act_bwd, shared with layers that fuse an activation. */
#include "layers/layer.h"

struct act_cfg {
        dt_act f;
        float alpha;
};

static int act_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct act_cfg *c = cfg;
        dt_ykey_describe(NULL, "(required)");
        int rc = dt_parse_act(m, "function", &c->f, &c->alpha, DT_ACT_RELU);
        if (!dt_ymap_get(m, "function") && rc == 0) {
                /* an activation layer without a function is almost surely a mistake */
                dt_yerr(d, m->y, m->node, "layer of type 'activation' needs 'function' (one of relu, leaky_relu, tanh, sigmoid, gelu)");
                return -1;
        }
        return rc;
}

static int act_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg; (void)why; (void)n;
        *out = *in;
        return 0;
}

static double act_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return (double)dt_shape_size(in);
}

/* forward reads x, writes y; backward reads x (or y) and dy, writes dx */
static double act_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out;
        return (backward ? 3.0 : 2.0) * sizeof(float) * (double)dt_shape_size(in);
}

static void act_forward(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, int B)
{
        (void)c;
        const struct act_cfg *a = l->cfg;
        l->be->ops->act_fwd(l->be, a->f, a->alpha, x, y, (size_t)B * dt_shape_size(&l->in));
}

static void act_backward(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                         const float *dy, float *dx, int B)
{
        (void)c;
        const struct act_cfg *a = l->cfg;
        if (dx) l->be->ops->act_bwd(l->be, a->f, a->alpha, x, y, dy, dx, (size_t)B * dt_shape_size(&l->in));
}

/* elementwise, so it runs on a tensor slice as it runs whole */
static const dt_split_way act_splits[] = { { .split = DT_SPLIT_PASS, .role = DT_ROLE_PASSES } };

const dt_layer_ops dt_act_layer = {
        .name = "activation", .cfg_size = sizeof(struct act_cfg),
        .parse = act_parse, .infer = act_infer, .flops = act_flops, .traffic = act_traffic,
        .forward = act_forward, .backward = act_backward, .splits = act_splits, .nsplits = 1,
        .summary = "elementwise activation: function (relu, leaky_relu, tanh, sigmoid, gelu), alpha",
};
