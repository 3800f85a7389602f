/* layers/dropout.c - inverted dropout: y = x * m / (1 - p) in training, y = x in evaluation.
 * The mask is a pure function of (seed, step, layer, global sample position, element), so it is
 * the same whatever the rank count, and backward rebuilds nothing: it reuses the stored mask.
 * On a tensor slice (between a column and a row fc) its variant cuts the mask from the whole one. */
#include "layers/layer.h"

#include <stdlib.h>

struct dropout_cfg {
        float rate;
};

struct dropout_priv {
        float *mask;    /* (B, size) */
        float *whole;   /* on a tensor shard (between a column and a row fc): the unsplit mask (B, size t) */
};


static int dropout_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct dropout_cfg *c = cfg;
        double r = 0.5;
        int rc = dt_ymap_num(m, "rate", &r, 0.5, 0.0, 0.99, 0);
        c->rate = (float)r;
        return rc < 0 ? -1 : 0;
}

static int dropout_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg; (void)why; (void)n;
        *out = *in;
        return 0;
}

static size_t dropout_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return dt_shape_size(in);
}

/* training: forward reads x, writes the mask and y; backward reads dy and the mask, writes dx */
static double dropout_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)out; (void)backward;
        return 3.0 * sizeof(float) * (double)dt_shape_size(in);
}

static int dropout_setup(dt_layer *l, int max_batch)
{
        struct dropout_priv *p = dt_calloc(1, sizeof *p);
        p->mask = l->be->ops->alloc(l->be, (size_t)max_batch * dt_shape_size(&l->in));
        l->priv = p;
        return 0;
}

static void dropout_teardown(dt_layer *l)
{
        struct dropout_priv *p = l->priv;
        if (!p) return;
        l->be->ops->free(l->be, p->mask);
        free(p->whole);
        free(p);
        l->priv = NULL;
}

/* the mask's key: (seed, step, layer) */
static uint64_t key_of(const dt_layer *l, const dt_fwd_ctx *c)
{
        return dt_hash64(dt_hash64(c->seed, (uint64_t)c->step), (uint64_t)l->index);
}

/* evaluation, or rate 0: y = x, and no mask */
static int identity(const dt_layer *l, const dt_fwd_ctx *c)
{
        return !c->training || ((const struct dropout_cfg *)l->cfg)->rate == 0.0f;
}

/* Evaluation or rate 0: y = x; 1 when it was */
static int pass_through(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, size_t n)
{
        if (!identity(l, c)) return 0;
        l->be->ops->copy(l->be, y, x, n);
        return 1;
}

static void dropout_forward(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, int B)
{
        const struct dropout_cfg *cfg = l->cfg;
        struct dropout_priv *p = l->priv;
        size_t per = dt_shape_size(&l->in), n = (size_t)B * per;
        if (pass_through(l, c, x, y, n)) return;
        l->be->ops->dropout_mask(l->be, p->mask, B, per, key_of(l, c), c->pos0, cfg->rate);
        l->be->ops->mul(l->be, n, x, p->mask, y);
}

/* ---- on a slice: its elements are the columns [shard w, (shard + 1) w) of the unsplit last
 * dimension, so its mask is cut from the whole one: the same units drop as on one rank ---- */

static int slice_setup(dt_layer *l, int max_batch)
{
        dropout_setup(l, max_batch);
        struct dropout_priv *p = l->priv;
        p->whole = dt_falloc((size_t)max_batch * dt_shape_size(&l->in) * l->place.nshards);
        return 0;
}

static void slice_forward(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, int B)
{
        const struct dropout_cfg *cfg = l->cfg;
        struct dropout_priv *p = l->priv;
        size_t per = dt_shape_size(&l->in), n = (size_t)B * per;
        if (pass_through(l, c, x, y, n)) return;
        size_t w = (size_t)l->in.d[l->in.n - 1], t = (size_t)l->place.nshards;
        l->be->ops->dropout_mask(l->be, p->whole, B, per * t, key_of(l, c), c->pos0, cfg->rate);
        dt_cols_take(p->mask, p->whole, n / w, w * t, (size_t)l->place.shard * w, w);
        l->be->ops->mul(l->be, n, x, p->mask, y);
}

static void dropout_backward(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                             const float *dy, float *dx, int B)
{
        (void)x; (void)y;
        const struct dropout_cfg *cfg = l->cfg;
        struct dropout_priv *p = l->priv;
        size_t n = (size_t)B * dt_shape_size(&l->in);
        if (!dx) return;
        if (!c->training || cfg->rate == 0.0f) l->be->ops->copy(l->be, dx, dy, n);
        else l->be->ops->mul(l->be, n, dy, p->mask, dx);
}

/* dx = dy * mask, elementwise (or a copy, which takes dst == src) */
static unsigned dropout_bwd_reads(const dt_layer *l, const dt_backend *be)
{
        (void)l; (void)be;
        return DT_BWD_INPLACE;
}

static const dt_split_way dropout_splits[] = { { .split = DT_SPLIT_PASS, .role = DT_ROLE_PASSES } };

static const dt_layer_ops *dropout_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                         char *why, size_t n);

#define DROPOUT_OPS(set, fwd) \
        .name = "dropout", .cfg_size = sizeof(struct dropout_cfg), \
        .parse = dropout_parse, .infer = dropout_infer, .scratch = dropout_scratch, .traffic = dropout_traffic, \
        .setup = set, .teardown = dropout_teardown, .forward = fwd, .backward = dropout_backward, \
        .bwd_reads = dropout_bwd_reads, \
        .splits = dropout_splits, .nsplits = 1, .shard = dropout_shard, \
        .summary = "inverted dropout: rate (probability of zeroing, default 0.5)"

const dt_layer_ops dt_dropout_layer = { DROPOUT_OPS(dropout_setup, dropout_forward) };
static const dt_layer_ops dropout_slice = { DROPOUT_OPS(slice_setup, slice_forward) };

static const dt_layer_ops *dropout_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                         char *why, size_t n)
{
        (void)in; (void)why; (void)n;
        *(struct dropout_cfg *)local = *(const struct dropout_cfg *)cfg;
        return pl->nshards > 1 ? &dropout_slice : &dt_dropout_layer;
}
