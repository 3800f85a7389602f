/* layers/positions.c - learned positional embeddings added to a sequence: (T,F) -> (T,F),
 * y[t] = x[t] + weight[t], weight (T, F) drawn from N(0, 1) as PyTorch's nn.Embedding(T, F), whose
 * .weight it is (GPT-2's wpe: x = wte(ids) + wpe.weight[:T]). Core ops only, so every backend runs it. */
#include "layers/layer.h"

#include <stdio.h>

static int pos_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg;
        if (in->n != 2) {
                char b[64];
                snprintf(why, n, "needs a sequence (T,F) input (an embedding's output), got %s",
                         dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = *in;
        return 0;
}

/* N(0, 1): he_normal draws N(0, 2 / fan_in), so fan_in = 2 */
static int pos_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)cfg; (void)out;
        ps[0] = (dt_param_spec){ .suffix = "weight", .shape = { 2, { in->d[0], in->d[1] } },
                                 .init = DT_INIT_HE_NORMAL, .fan_in = 2, .fan_out = in->d[1], .trainable = 1 };
        return 1;
}

/* reads x and the table, writes y; backward reads dy once for dx and once for the table's gradient */
static double pos_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out;
        (void)backward;
        return 3.0 * sizeof(float) * (double)dt_shape_size(in);
}

/* y[b] = x[b] + weight */
static void pos_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        size_t n = dt_shape_size(&l->in);
        for (int b = 0; b < B; b++) l->be->ops->add(l->be, n, x + (size_t)b * n, l->p[0], y + (size_t)b * n);
}

/* dweight += sum_b dy[b];  dx = dy */
static void pos_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                         const float *dy, float *dx, int B)
{
        (void)ctx; (void)x; (void)y;
        size_t n = dt_shape_size(&l->in);
        for (int b = 0; b < B; b++) l->be->ops->axpy(l->be, n, 1.0f, dy + (size_t)b * n, l->g[0]);
        if (dx) l->be->ops->copy(l->be, dx, dy, (size_t)B * n);
}

const dt_layer_ops dt_positions_layer = {
        .name = "positions", .cfg_size = 0,
        .infer = pos_infer, .params = pos_params, .traffic = pos_traffic,
        .forward = pos_forward, .backward = pos_backward,
        .summary = "learned positional embeddings added to (T,F): weight (T,F)",
};
