/* layers/flatten.c - (C,H,W) or (T,F) -> (C*H*W): the row-major data is unchanged, only the shape. */
#include "layers/layer.h"

static int flatten_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg; (void)why; (void)n;
        out->n = 1;
        out->d[0] = (int)dt_shape_size(in);
        return 0;
}

/* a copy each way: read and write every value */
static double flatten_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out; (void)backward;
        return 2.0 * sizeof(float) * (double)dt_shape_size(in);
}

static void flatten_forward(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, int B)
{
        (void)c;
        l->be->ops->copy(l->be, y, x, (size_t)B * dt_shape_size(&l->in));
}

static void flatten_backward(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                             const float *dy, float *dx, int B)
{
        (void)c; (void)x; (void)y;
        if (dx) l->be->ops->copy(l->be, dx, dy, (size_t)B * dt_shape_size(&l->in));
}

/* a copy of dy (which takes dst == src) */
static unsigned flatten_bwd_reads(const dt_layer *l, const dt_backend *be)
{
        (void)l; (void)be;
        return DT_BWD_INPLACE;
}

const dt_layer_ops dt_flatten_layer = {
        .name = "flatten", .cfg_size = 1,
        .infer = flatten_infer, .traffic = flatten_traffic, .forward = flatten_forward, .backward = flatten_backward,
        .bwd_reads = flatten_bwd_reads,
        .summary = "reshape to one dimension (no keys)",
};
