/* layers/rnn.c - stacked Elman RNN, PyTorch's nn.RNN(batch_first=True): (T,F) -> (H) last step of
 * the top layer, or (T,H) with return_sequences.
 *   h_t = f(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),  f = tanh or relu,  h_{-1} = 0
 * Tensors weight_ih_l{k} (H,in), weight_hh_l{k} (H,H), bias_ih_l{k} (H), bias_hh_l{k} (H).
 * bptt = k > 0 truncates backpropagation through time to chunks of k steps. recurrent.c's driver
 * runs the steps; the cell here is f on the pre-activations built in place of the units' h
 * (h_t W_hh^T added into them): tanh by the cells' vector kernel, relu and f' by the backend's
 * activation ops.
 *
 * Split by hidden unit (recurrent.h): a rank's U = H/t units get their pre-activations and h in
 * the driver's hl (T, B, U); each step all-gathers them into the full h. */
#include "layers/layer.h"
#include "layers/cells.h"
#include "layers/recurrent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNN_MAX_LAYERS 4

static const char *const rnn_nl_names[] = { "tanh", "relu", NULL };

struct rnn_cfg {
        struct dt_rec_cfg r;            /* hidden, layers, return_seq, bptt, bias */
        dt_act act;
};

struct rnn_priv {
        struct dt_rec_state s;
        float *b;                       /* (U) b_ih + b_hh, then d(b) in backward; U = H/t, this rank's units */
};

/* ---- spec ---- */
static int rnn_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct rnn_cfg *c = cfg;
        int nl = 0, rc = dt_rec_parse(m, &c->r, RNN_MAX_LAYERS);
        if (dt_ymap_enum(m, "nonlinearity", rnn_nl_names, &nl, 0, 0) < 0) rc = -1;
        c->act = nl == 1 ? DT_ACT_RELU : DT_ACT_TANH;
        return rc;
}

static int rnn_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        return dt_rec_infer(&((const struct rnn_cfg *)cfg)->r, in, out, why, n);
}

/* Per layer: weight_ih, weight_hh[, bias_ih, bias_hh]; torch draws all from U(-1/sqrt(H), 1/sqrt(H)). */
static int rnn_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        return dt_rec_params(&((const struct rnn_cfg *)cfg)->r, 1, in, ps);
}

static double rnn_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        return dt_rec_flops(&((const struct rnn_cfg *)cfg)->r, 1, in);
}

static double rnn_bwd_flops(const void *cfg, const dt_shape *in, const dt_shape *out, int dx)
{
        (void)out;
        return dt_rec_bwd_flops(&((const struct rnn_cfg *)cfg)->r, 1, in, dx);
}

static size_t rnn_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        return dt_rec_scratch(&((const struct rnn_cfg *)cfg)->r, in, 1);
}

/* ---- the cell ---- */

static dt_rnn_mode rnn_mode(const void *cfg)
{
        return ((const struct rnn_cfg *)cfg)->act == DT_ACT_RELU ? DT_RNN_RELU : DT_RNN_TANH;
}

static void rnn_alloc(dt_layer *l, size_t Bm, size_t T, size_t U)
{
        (void)Bm; (void)T;
        ((struct rnn_priv *)l->priv)->b = l->be->ops->alloc(l->be, U);
}

static void rnn_release(dt_layer *l)
{
        struct rnn_priv *p = l->priv;
        if (p->b) l->be->ops->free(l->be, p->b);
}

/* the pre-activations, in place of the units' h */
static float *rnn_gates(dt_layer *l, int k) { return ((struct rnn_priv *)l->priv)->s.hu[k]; }

/* P = X W_ih^T + b_ih + b_hh, all steps */
static void rnn_layer_fwd(dt_layer *l, int k, int B)
{
        const struct rnn_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct rnn_priv *p = l->priv;
        int U = p->s.U;
        if (!c->r.bias) return;
        o->copy(l->be, p->b, dt_rec_p(l, k, 2), (size_t)U);
        o->axpy(l->be, (size_t)U, 1.0f, dt_rec_p(l, k, 3), p->b);
        o->bias_add(l->be, rnn_gates(l, k), p->b, l->in.d[0] * B, U);
}

/* h_t = f(P_t + h_{t-1} W_hh^T), in place (the driver added the recurrent term): tanh by the cells'
 * vector kernel (cells.h), relu by the backend's */
static void rnn_cell_fwd(dt_layer *l, const dt_rec_step *s)
{
        const struct rnn_cfg *c = l->cfg;
        size_t n = (size_t)s->nr * ((struct rnn_priv *)l->priv)->s.U;
        if (c->act == DT_ACT_TANH) dt_cell_kern_get()->rnn_tanh(n, s->h);
        else l->be->ops->act_fwd(l->be, c->act, 0.0f, s->h, s->h, n);
}

/* dP_t = f'(h_t) dH_t in place (relu: h > 0 iff pre > 0; tanh: 1 - h^2) */
static const float *rnn_cell_bwd(dt_layer *l, const dt_rec_step *s)
{
        const struct rnn_cfg *c = l->cfg;
        l->be->ops->act_bwd(l->be, c->act, 0.0f, s->h, s->h, s->dh, s->dh,
                            (size_t)s->nr * ((struct rnn_priv *)l->priv)->s.U);
        return s->dh;
}

/* dP is dL itself, for both weights; db_ih = db_hh = sum dP */
static void rnn_grads(dt_layer *l, int k, int B, float *dL, const float **dA, const float **dGH, const float **dbi,
                      const float **dbh)
{
        (void)k;
        const struct rnn_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct rnn_priv *p = l->priv;
        *dA = *dGH = dL;
        *dbi = *dbh = p->b;
        if (!c->r.bias) return;
        o->zero(l->be, p->b, (size_t)p->s.U);
        o->bias_grad(l->be, p->b, dL, l->in.d[0] * B, p->s.U);
}

static const dt_rec_kind rnn_kind = {
        .G = 1, .keeps_h = 1, .stepgemm = 1, .priv_size = sizeof(struct rnn_priv), .mode = rnn_mode,
        .alloc = rnn_alloc, .release = rnn_release, .gates = rnn_gates, .layer_fwd = rnn_layer_fwd,
        .cell_fwd = rnn_cell_fwd, .cell_bwd = rnn_cell_bwd, .grads = rnn_grads,
};

static int rnn_setup(dt_layer *l, int max_batch) { return dt_rec_setup_whole(l, max_batch, &rnn_kind); }
static int rnn_hidden_setup(dt_layer *l, int max_batch) { return dt_rec_setup_hidden(l, max_batch, &rnn_kind); }

static int rnn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct rnn_cfg *)cfg)->r, backend, caps, why, n);
}

static const dt_layer_ops *rnn_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                     char *why, size_t n);

#define RNN_OPS(set) \
        .name = "rnn", .cfg_size = sizeof(struct rnn_cfg), \
        .parse = rnn_parse, .infer = rnn_infer, .params = rnn_params, \
        .flops = rnn_flops, .bwd_flops = rnn_bwd_flops, \
        .scratch = rnn_scratch, .supports = rnn_supports, .setup = set, .teardown = dt_rec_teardown, \
        .forward = dt_rec_forward, .backward = dt_rec_backward, \
        .splits = dt_rec_splits, .nsplits = 1, .shard = rnn_shard, \
        .summary = "Elman RNN over (T,F): hidden, nonlinearity (tanh|relu), layers, return_sequences, bptt, bias"

const dt_layer_ops dt_rnn_layer = { RNN_OPS(rnn_setup) };
static const dt_layer_ops rnn_hidden = { RNN_OPS(rnn_hidden_setup) };

static const dt_layer_ops *rnn_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                     char *why, size_t n)
{
        (void)in;
        *(struct rnn_cfg *)local = *(const struct rnn_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &rnn_hidden;
}
