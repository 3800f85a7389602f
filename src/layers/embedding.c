/* layers/embedding.c - token embedding, PyTorch's nn.Embedding: (T) token ids stored as floats
 * (exact integers in [0, vocab)) -> (T, dim), y[t] = weight[id_t]. Tensor weight (vocab, dim),
 * drawn from N(0, 1) as torch does. There is no gradient for the ids. */
#include "layers/layer.h"

#include <stdio.h>
#include <string.h>

struct embedding_cfg {
        int vocab, dim;
};

static int embedding_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct embedding_cfg *c = cfg;
        long vocab = 0, dim = 0;
        int rc = 0;
        /* ids travel as floats: every integer up to 2^24 is exact */
        if (dt_ymap_int(m, "vocab", &vocab, 0, 1, 1 << 24, 1) < 0) rc = -1;
        if (dt_ymap_int(m, "dim", &dim, 0, 1, 1 << 16, 1) < 0) rc = -1;
        c->vocab = (int)vocab;
        c->dim = (int)dim;
        return rc;
}

static int embedding_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        const struct embedding_cfg *c = cfg;
        if (in->n != 1) {
                char b[64];
                snprintf(why, n, "needs a (T) sequence of token ids, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = (dt_shape){ 2, { in->d[0], c->dim } };
        return 0;
}

/* N(0, 1): he_normal draws N(0, 2 / fan_in), so fan_in = 2 gives torch's standard normal. */
static int embedding_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)in; (void)out;
        const struct embedding_cfg *c = cfg;
        ps[0] = (dt_param_spec){ .suffix = "weight", .shape = { 2, { c->vocab, c->dim } },
                                 .init = DT_INIT_HE_NORMAL, .fan_in = 2, .fan_out = c->dim, .trainable = 1 };
        return 1;
}

static int id_of(const struct embedding_cfg *c, float v)
{
        int id = (int)v;
        DT_ASSERT(id >= 0 && id < c->vocab && (float)id == v);   /* embedding_check_input ran on the data */
        return id;
}

static int embedding_check_input(const void *cfg, const dt_shape *in, const float *x, long n, char *why, size_t len)
{
        const struct embedding_cfg *c = cfg;
        size_t per = dt_shape_size(in);
        for (long s = 0; s < n; s++)
                for (size_t j = 0; j < per; j++) {
                        float v = x[(size_t)s * per + j];
                        if (!(v >= 0 && v < (float)c->vocab && (float)(int)v == v)) {
                                snprintf(why, len, "sample %ld, position %zu holds %g, not a token id in [0, %d) (the embedding's vocab)",
                                         s, j, (double)v, c->vocab);
                                return -1;
                        }
                }
        return 0;
}

typedef void (*row_fn)(dt_layer *l, size_t r, size_t w, float *y, const float *dy);

/* fn(l, r, w, y, dy) for every row r of the (B x positions) ids in x, in order, w the offset of
 * its id's weight row. The ids may live on the device: read in blocks. */
static void each_id(dt_layer *l, const float *x, int B, row_fn fn, float *y, const float *dy)
{
        const struct embedding_cfg *c = l->cfg;
        size_t D = (size_t)c->dim, R = (size_t)B * l->in.d[0];
        float ids[256];
        for (size_t r0 = 0; r0 < R; r0 += 256) {
                size_t nr = R - r0 < 256 ? R - r0 : 256;
                l->be->ops->to_host(l->be, ids, x + r0, nr);
                for (size_t r = 0; r < nr; r++) fn(l, r0 + r, (size_t)id_of(c, ids[r]) * D, y, dy);
        }
}

static void copy_row(dt_layer *l, size_t r, size_t w, float *y, const float *dy)
{
        (void)dy;
        size_t D = (size_t)((const struct embedding_cfg *)l->cfg)->dim;
        l->be->ops->copy(l->be, y + r * D, l->p[0] + w, D);
}

static void add_row(dt_layer *l, size_t r, size_t w, float *y, const float *dy)
{
        (void)y;
        size_t D = (size_t)((const struct embedding_cfg *)l->cfg)->dim;
        l->be->ops->axpy(l->be, D, 1.0f, dy + r * D, l->g[0] + w);
}

/* y[b,t,:] = weight[x[b,t], :] */
static void embedding_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        each_id(l, x, B, copy_row, y, NULL);
}

/* dweight[x[b,t], :] += dy[b,t,:]  (repeated ids accumulate); no input gradient */
static void embedding_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                               const float *dy, float *dx, int B)
{
        (void)ctx; (void)y;
        each_id(l, x, B, add_row, NULL, dy);
        if (dx) l->be->ops->zero(l->be, dx, (size_t)B * l->in.d[0]);
}

const dt_layer_ops dt_embedding_layer = {
        .name = "embedding", .cfg_size = sizeof(struct embedding_cfg),
        .parse = embedding_parse, .infer = embedding_infer, .params = embedding_params,
        .forward = embedding_forward, .backward = embedding_backward,
        .summary = "token embedding, (T) ids -> (T,dim): vocab, dim",
        .check_input = embedding_check_input,
};
