/* layers/fc.c - fully connected layer: y = f(x W^T + b) on the last dimension (PyTorch's
 * nn.Linear), so (I) -> (O) and sequences (T,I) -> (T,O). Shapes: R = B*T rows, I in, O out.
 * weight (O, I), bias (O).
 *
 * Tensor parallel (Megatron-LM's pairing): a column split keeps O/t outputs (rows of W and b) and
 * all-gathers them, unless a row layer takes the shard as it is; then backward all-reduces dx. A
 * row split keeps I/t inputs (columns of W), all-reduces x W^T before the bias and activation, and
 * needs no collective backward. So a column-row pair costs one all-reduce each way. Each split is its
 * own ops (fc_shard returns them) built from the same steps: matmul, finish (bias, activation),
 * input_grad, weight_grad, with the collectives between them. */
#include "layers/layer.h"

#include <stdio.h>
#include <stdlib.h>

struct fc_cfg {
        int units;
        dt_act act;
        float alpha;
        dt_init init;
        int bias;
        /* set by fc_shard, which also makes units this shard's under a column split; zero as parsed
         * (the checkpoint's spec hash reads the parsed bytes) */
        dt_split split;
        int t;          /* the tensor group's size */
        int gather;     /* a column shard's output is all-gathered: t x units wide */
};

struct fc_priv {
        float *z;       /* (R, O) pre-activation, kept only when f'(z) cannot be read from y */
        float *yl, *dyl;        /* column split with gather: this shard's output and its gradient (R, O/t) */
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
        out->d[in->n - 1] = c->gather ? c->units * c->t : c->units;
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
        (void)out;
        return 2.0 * rows_of(in) * in->d[in->n - 1] * ((const struct fc_cfg *)cfg)->units;
}

/* gelu needs z in backward; relu, leaky relu (alpha > 0 keeps the sign), tanh and sigmoid
 * can take their derivative from y alone. */
static int needs_z(const struct fc_cfg *c)
{
        return c->act == DT_ACT_GELU || c->act == DT_ACT_GELU_TANH || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0);
}

static size_t fc_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct fc_cfg *c = cfg;
        return needs_z(c) ? (size_t)rows_of(in) * c->units : 0;
}

static int fc_setup(dt_layer *l, int max_batch)
{
        const struct fc_cfg *c = l->cfg;
        struct fc_priv *p = dt_calloc(1, sizeof *p);
        if (needs_z(c)) p->z = l->be->ops->alloc(l->be, (size_t)max_batch * rows_of(&l->in) * c->units);
        l->priv = p;
        return 0;
}

static void fc_teardown(dt_layer *l)
{
        struct fc_priv *p = l->priv;
        if (!p) return;
        if (p->z) l->be->ops->free(l->be, p->z);
        if (p->yl) l->be->ops->free(l->be, p->yl);
        if (p->dyl) l->be->ops->free(l->be, p->dyl);
        free(p);
        l->priv = NULL;
}

/* ---- the steps every split shares ---- */

/* z (R, O) = x W^T */
static void matmul(dt_layer *l, const float *x, float *z, int R)
{
        const struct fc_cfg *c = l->cfg;
        int I = l->in.d[l->in.n - 1], O = c->units;
        l->be->ops->gemm(l->be, 0, 1, R, O, I, 1.0f, x, I, l->p[0], I, 0.0f, z, O);
}

/* y = f(z + b), z in place */
static void finish(dt_layer *l, float *z, float *y, int R)
{
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        if (c->bias) o->bias_add(l->be, z, l->p[1], R, c->units);
        if (c->act != DT_ACT_NONE) o->act_fwd(l->be, c->act, c->alpha, z, y, (size_t)R * c->units);
}

/* where forward builds z for output y: its own buffer when backward needs it */
static float *pre(const dt_layer *l, float *y)
{
        const struct fc_priv *p = l->priv;
        return p->z ? p->z : y;
}

/* dz = f'(z) dy, written over dy (the graph lets a layer consume its dy); dx = dz W (dx may be NULL) */
static void input_grad(dt_layer *l, const float *y, const float *dy, float *dx, int R)
{
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        const struct fc_priv *p = l->priv;
        int I = l->in.d[l->in.n - 1], O = c->units;
        if (c->act != DT_ACT_NONE)
                o->act_bwd(l->be, c->act, c->alpha, p->z ? p->z : y, y, dy, (float *)dy, (size_t)R * O);
        if (dx) o->gemm(l->be, 0, 0, R, I, O, 1.0f, dy, O, l->p[0], I, 0.0f, dx, I);
}

/* dW += dz^T x;  db += sum_r dz */
static void weight_grad(dt_layer *l, const float *x, const float *dz, int R)
{
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        int I = l->in.d[l->in.n - 1], O = c->units;
        o->gemm(l->be, 1, 0, O, I, R, 1.0f, dz, O, x, I, 1.0f, l->g[0], I);
        if (c->bias) o->bias_grad(l->be, l->g[1], dz, R, O);
}

static int rows(const dt_layer *l, int B) { return B * rows_of(&l->in); }

/* ---- whole (and a column shard that a row layer takes: the same, but for dx's all-reduce) ---- */

static void fc_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        float *z = pre(l, y);
        matmul(l, x, z, rows(l, B));
        finish(l, z, y, rows(l, B));
}

/* The backward in zb-h1's two halves; the backward ops run them back to back. The input half
 * leaves dz = f'(z) dy for the weight half (in dy, or in the shard's dyl when a column split
 * gathers its output) and does the only collective, dx's all-reduce; the two write disjoint
 * outputs, so their order changes no bit of either. */
static void fc_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                              const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)x;
        input_grad(l, y, dy, dx, rows(l, B));
}

static void fc_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                               const float *dy, int B)
{
        (void)ctx;
        (void)y;
        weight_grad(l, x, dy, rows(l, B));
}

static void fc_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        fc_backward_input(l, ctx, x, y, dy, dx, B);
        fc_backward_weight(l, ctx, x, y, dy, B);
}

/* ---- column split, its slice taken by a row layer: dx sums over the shards' units ---- */

static void column_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                  const float *dy, float *dx, int B)
{
        fc_backward_input(l, ctx, x, y, dy, dx, B);
        if (dx) l->place.tp->allreduce(l->place.tp, dx, (size_t)rows(l, B) * l->in.d[l->in.n - 1]);
}

static void column_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                            const float *dy, float *dx, int B)
{
        column_backward_input(l, ctx, x, y, dy, dx, B);
        fc_backward_weight(l, ctx, x, y, dy, B);
}

/* ---- column split, gathered: this shard's output in yl, its columns of dy in dyl ---- */

static size_t gathered_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        return fc_scratch(cfg, in, out) + 2 * (size_t)rows_of(in) * ((const struct fc_cfg *)cfg)->units;
}

static int gathered_setup(dt_layer *l, int max_batch)
{
        fc_setup(l, max_batch);
        struct fc_priv *p = l->priv;
        size_t shard = (size_t)max_batch * rows_of(&l->in) * ((const struct fc_cfg *)l->cfg)->units;
        p->yl = l->be->ops->alloc(l->be, shard);
        p->dyl = l->be->ops->alloc(l->be, shard);
        return 0;
}

static void gathered_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        struct fc_priv *p = l->priv;
        int R = rows(l, B);
        float *z = pre(l, p->yl);
        matmul(l, x, z, R);
        finish(l, z, p->yl, R);
        l->place.tp->allgather_cols(l->place.tp, p->yl, y, (size_t)R, (size_t)((const struct fc_cfg *)l->cfg)->units);
}

static void gathered_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                    const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)x;
        (void)y;
        const struct fc_cfg *c = l->cfg;
        struct fc_priv *p = l->priv;
        int R = rows(l, B);
        dt_cols_take(p->dyl, dy, (size_t)R, (size_t)c->units * c->t, (size_t)l->place.shard * c->units, (size_t)c->units);
        input_grad(l, p->yl, p->dyl, dx, R);
        if (dx) l->place.tp->allreduce(l->place.tp, dx, (size_t)R * l->in.d[l->in.n - 1]);
}

static void gathered_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                     const float *dy, int B)
{
        (void)ctx;
        (void)y;
        (void)dy;
        weight_grad(l, x, ((const struct fc_priv *)l->priv)->dyl, rows(l, B));
}

static void gathered_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                              const float *dy, float *dx, int B)
{
        gathered_backward_input(l, ctx, x, y, dy, dx, B);
        gathered_backward_weight(l, ctx, x, y, dy, B);
}

/* ---- row split: x W^T summed over the shards' inputs before the bias ---- */

static void row_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        int R = rows(l, B);
        float *z = pre(l, y);
        matmul(l, x, z, R);
        l->place.tp->allreduce(l->place.tp, z, (size_t)R * ((const struct fc_cfg *)l->cfg)->units);
        finish(l, z, y, R);
}

/* Column: the outputs' collectives when gathered, dx summed; row: x W^T summed. */
static const dt_split_way fc_splits[] = {
        { .split = DT_SPLIT_COLUMN, .role = DT_ROLE_OPENS, .what = "its outputs", .min_work = 64, .ncoll = 2,
          .coll = { { 1, 0, DT_COLL_OUTPUT, DT_COLL_IF_GATHER }, { 0, 1, DT_COLL_INPUT, DT_COLL_IF_DX } } },
        { .split = DT_SPLIT_ROW, .role = DT_ROLE_CLOSES, .what = "its inputs", .takes = DT_SPLIT_COLUMN, .ncoll = 1,
          .coll = { { 0, 0, DT_COLL_OUTPUT, DT_COLL_ALWAYS } } },
};

static const dt_layer_ops *fc_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                    char *why, size_t n);

#define FC_OPS(fwd, bwd, bwd_in, bwd_w, scr, set) \
        .name = "fc", .cfg_size = sizeof(struct fc_cfg), \
        .parse = fc_parse, .infer = fc_infer, .params = fc_params, .flops = fc_flops, \
        .scratch = scr, .setup = set, .teardown = fc_teardown, \
        .forward = fwd, .backward = bwd, .backward_input = bwd_in, .backward_weight = bwd_w, \
        .splits = fc_splits, .nsplits = 2, .shard = fc_shard, \
        .summary = "fully connected: units, activation, alpha, init, bias"

const dt_layer_ops dt_fc_layer = {
        FC_OPS(fc_forward, fc_backward, fc_backward_input, fc_backward_weight, fc_scratch, fc_setup)
};
static const dt_layer_ops fc_column = {
        FC_OPS(fc_forward, column_backward, column_backward_input, fc_backward_weight, fc_scratch, fc_setup)
};
static const dt_layer_ops fc_gathered = {
        FC_OPS(gathered_forward, gathered_backward, gathered_backward_input, gathered_backward_weight,
               gathered_scratch, gathered_setup)
};
static const dt_layer_ops fc_row = {
        FC_OPS(row_forward, fc_backward, fc_backward_input, fc_backward_weight, fc_scratch, fc_setup)
};

static const dt_layer_ops *fc_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                    char *why, size_t n)
{
        (void)in;
        const struct fc_cfg *c = cfg;
        struct fc_cfg *lc = local;
        *lc = *c;
        lc->split = pl->split;
        lc->t = pl->nshards;
        if (pl->split == DT_SPLIT_ROW) return &fc_row;
        if (c->units % pl->nshards) {
                snprintf(why, n, "units %d do not divide into %d column shards", c->units, pl->nshards);
                return NULL;
        }
        lc->units = c->units / pl->nshards;
        lc->gather = pl->gather;
        return pl->gather ? &fc_gathered : &fc_column;
}
