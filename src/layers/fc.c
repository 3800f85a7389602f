/* layers/fc.c - fully connected layer: y = f(x W^T + b) on the last dimension (PyTorch's
 * nn.Linear), so (I) -> (O) and sequences (T,I) -> (T,O). Shapes: R = B*T rows, I in, O out.
 * weight (O, I), bias (O).
 *
 * Tensor parallel (Megatron-LM's pairing): a column split keeps O/t outputs (rows of W and b) and
 * all-gathers them, unless a row layer takes the shard as it is; then backward all-reduces dx. A
 * row split keeps I/t inputs (columns of W), all-reduces x W^T before the bias and activation, and
 * needs no collective backward. So a column-row pair costs one all-reduce each way. */
#include "layers/layer.h"

#include <stdio.h>
#include <stdlib.h>

struct fc_cfg {
        int units;
        dt_act act;
        float alpha;
        dt_init init;
        int bias;
        /* set by fc_shard: */
        dt_split split; /* NONE, COLUMN or ROW */
        int t;          /* the tensor group's size */
        int gather;     /* COLUMN: all-gather the output */
};

struct fc_priv {
        float *z;       /* (R, O) pre-activation, kept only when f'(z) cannot be read from y */
        float *yl, *dyl;        /* column split with gather: this shard's output and its gradient (R, O/t) */
};

/* the outputs this rank computes */
static int local_out(const struct fc_cfg *c) { return c->split == DT_SPLIT_COLUMN ? c->units / c->t : c->units; }
static int gathers(const struct fc_cfg *c) { return c->split == DT_SPLIT_COLUMN && c->gather; }

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
        out->d[in->n - 1] = gathers(c) ? c->units : local_out(c);
        return 0;
}

static int fc_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        const struct fc_cfg *c = cfg;
        int I = in->d[in->n - 1], O = local_out(c);
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
        return 2.0 * rows_of(in) * in->d[in->n - 1] * local_out(cfg);
}

/* gelu needs z in backward; relu, leaky relu (alpha > 0 keeps the sign), tanh and sigmoid
 * can take their derivative from y alone. */
static int needs_z(const struct fc_cfg *c)
{
        return c->act == DT_ACT_GELU || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0);
}

static size_t fc_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        size_t shard = (size_t)rows_of(in) * local_out(cfg);
        return (needs_z(cfg) ? shard : 0) + (gathers(cfg) ? 2 * shard : 0);
}

static int fc_setup(dt_layer *l, int max_batch)
{
        const struct fc_cfg *c = l->cfg;
        struct fc_priv *p = dt_calloc(1, sizeof *p);
        size_t shard = (size_t)max_batch * rows_of(&l->in) * local_out(c);
        if (needs_z(c)) p->z = l->be->ops->alloc(l->be, shard);
        if (gathers(c)) {
                p->yl = l->be->ops->alloc(l->be, shard);
                p->dyl = l->be->ops->alloc(l->be, shard);
        }
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

static void fc_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct fc_priv *p = l->priv;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = local_out(c);
        float *yo = gathers(c) ? p->yl : y;
        float *z = p->z ? p->z : yo;
        o->gemm(l->be, 0, 1, R, O, I, 1.0f, x, I, l->p[0], I, 0.0f, z, O);   /* z = x W^T */
        if (c->split == DT_SPLIT_ROW) l->place.tp->allreduce(l->place.tp, z, (size_t)R * O);
        if (c->bias) o->bias_add(l->be, z, l->p[1], R, O);
        if (c->act != DT_ACT_NONE) o->act_fwd(l->be, c->act, c->alpha, z, yo, (size_t)R * O);
        if (gathers(c)) l->place.tp->allgather_cols(l->place.tp, yo, y, (size_t)R, (size_t)O);
}

/* The backward in zb-h1's two halves; fc_backward runs them back to back. The input half leaves
 * dz = f'(z) dy for the weight half (in dy, or in the shard's dyl when a column split gathers its
 * output) and does the only collective, dx's all-reduce; the two write disjoint outputs, so their
 * order changes no bit of either. */
static void fc_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                              const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)x;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct fc_priv *p = l->priv;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = local_out(c);
        if (gathers(c)) {       /* this shard's columns of dy, against its own output */
                dt_cols_take(p->dyl, dy, (size_t)R, (size_t)c->units, (size_t)l->place.shard * O, (size_t)O);
                dy = p->dyl;
                y = p->yl;
        }
        /* dz = f'(z) dy, written over dy (the graph lets a layer consume its dy) */
        if (c->act != DT_ACT_NONE)
                o->act_bwd(l->be, c->act, c->alpha, p->z ? p->z : y, y, dy, (float *)dy, (size_t)R * O);
        if (dx) o->gemm(l->be, 0, 0, R, I, O, 1.0f, dy, O, l->p[0], I, 0.0f, dx, I); /* dx = dz W */
        if (dx && c->split == DT_SPLIT_COLUMN) l->place.tp->allreduce(l->place.tp, dx, (size_t)R * I);
}

/* dz is where fc_backward_input left it: dy, or the shard's dyl under a gathering column split */
static void fc_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                               const float *dy, int B)
{
        (void)ctx;
        (void)y;
        const struct fc_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        const struct fc_priv *p = l->priv;
        int R = B * rows_of(&l->in), I = l->in.d[l->in.n - 1], O = local_out(c);
        const float *dz = gathers(c) ? p->dyl : dy;
        o->gemm(l->be, 1, 0, O, I, R, 1.0f, dz, O, x, I, 1.0f, l->g[0], I);   /* dW += dz^T x */
        if (c->bias) o->bias_grad(l->be, l->g[1], dz, R, O);                 /* db += sum_r dz */
}

static void fc_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                        const float *dy, float *dx, int B)
{
        fc_backward_input(l, ctx, x, y, dy, dx, B);
        fc_backward_weight(l, ctx, x, y, dy, B);
}

static int fc_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local, char *why, size_t n)
{
        (void)in;
        const struct fc_cfg *c = cfg;
        struct fc_cfg *lc = local;
        *lc = *c;
        lc->t = pl->nshards;
        lc->split = pl->split;
        lc->gather = pl->gather;
        if (pl->split == DT_SPLIT_COLUMN && c->units % pl->nshards) {
                snprintf(why, n, "units %d do not divide into %d column shards", c->units, pl->nshards);
                return -1;
        }
        if (pl->split != DT_SPLIT_COLUMN && pl->split != DT_SPLIT_ROW) {
                snprintf(why, n, "fc splits by column (its outputs) or by row (its inputs), not by %s",
                         dt_split_names[pl->split]);
                return -1;
        }
        return 0;
}

const dt_layer_ops dt_fc_layer = {
        .name = "fc", .cfg_size = sizeof(struct fc_cfg),
        .parse = fc_parse, .infer = fc_infer, .params = fc_params, .flops = fc_flops,
        .scratch = fc_scratch, .setup = fc_setup, .teardown = fc_teardown,
        .forward = fc_forward, .backward = fc_backward, .shard = fc_shard,
        .summary = "fully connected: units, activation, alpha, init, bias",
        .backward_input = fc_backward_input, .backward_weight = fc_backward_weight,
};
