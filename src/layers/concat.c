/* layers/concat.c - concatenation of two or more inputs: along channels for (C,H,W) (H and W
 * equal), along features for flat (F) and for sequences (T,F) (T equal). Per sample the output is
 * [rows][sum of widths]: one row for (C,H,W) and (F), T rows for (T,F). */
#include "layers/layer.h"

#include <stdio.h>

/* the concatenated dimension of a shape of n dimensions */
static int axis_of(int n) { return n == 2 ? 1 : 0; }

/* floats per sample of one input's block in each output row; the rows per sample */
static size_t width_of(const dt_shape *s)
{
        int a = axis_of(s->n);
        size_t w = 1;
        for (int i = a; i < s->n; i++) w *= (size_t)s->d[i];
        return w;
}

static size_t rows_of(const dt_shape *s)
{
        return s->n == 2 ? (size_t)s->d[0] : 1;
}

static int concat_infer(const void *cfg, const dt_shape *in, const char *const *from, int nin, dt_shape *out,
                        char *why, size_t n)
{
        (void)cfg;
        const char *what = in[0].n == 3 ? "channels" : in[0].n == 2 ? "features (the last dimension)" : "features";
        if (in[0].n == 4) {
                snprintf(why, n, "cannot concatenate 4-dimensional inputs; it takes (C,H,W), (T,F) or (F)");
                return -1;
        }
        *out = in[0];
        int a = axis_of(in[0].n);
        for (int k = 1; k < nin; k++) {
                int ok = in[k].n == in[0].n;
                for (int i = 0; ok && i < in[0].n; i++) ok = i == a || in[k].d[i] == in[0].d[i];
                if (!ok) {
                        char b0[64], b1[64];
                        snprintf(why, n, "concatenates along %s, so the other dimensions must be equal, got %s from "
                                 "'%s' and %s from '%s'%s", what, dt_shape_str(&in[0], b0, sizeof b0), from[0],
                                 dt_shape_str(&in[k], b1, sizeof b1), from[k],
                                 in[0].n == 3 && in[k].n == 3 ? "; pool or stride one of them to match H and W" : "");
                        return -1;
                }
                out->d[a] += in[k].d[a];
        }
        return 0;
}

static void concat_forward(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, float *y, int B)
{
        (void)c;
        size_t W = width_of(&l->out), rows = (size_t)B * rows_of(&l->out), off = 0;
        for (int k = 0; k < l->nin; k++) {
                size_t w = width_of(&l->ins[k]);
                l->be->ops->copy_cols(l->be, y + off, W, x[k], w, rows, w, 0);
                off += w;
        }
}

static void concat_backward(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, const float *y,
                            const float *dy, float *const *dx, const int *acc, int B)
{
        (void)c; (void)x; (void)y;
        size_t W = width_of(&l->out), rows = (size_t)B * rows_of(&l->out), off = 0;
        for (int k = 0; k < l->nin; k++) {
                size_t w = width_of(&l->ins[k]);
                /* dx_k = the columns of dy it filled (+= where another reader wrote it first) */
                if (dx[k]) l->be->ops->copy_cols(l->be, dx[k], w, dy + off, W, rows, w, acc[k]);
                off += w;
        }
}

/* every input read once and the output written once, and back: 2 x the output either way */
static double concat_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)in; (void)backward;
        return 2.0 * sizeof(float) * (double)dt_shape_size(out);
}

const dt_layer_ops dt_concat_layer = {
        .name = "concat", .cfg_size = 1,
        .min_inputs = 2, .infer_n = concat_infer, .forward_n = concat_forward, .backward_n = concat_backward,
        .traffic = concat_traffic,
        .summary = "concatenation of the layers named in inputs: channels of (C,H,W), features of (F) or (T,F)",
};
