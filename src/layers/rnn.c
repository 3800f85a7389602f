/* layers/rnn.c - stacked Elman RNN, PyTorch's nn.RNN(batch_first=True): (T,F) -> (H) last step of
 * the top layer, or (T,H) with return_sequences.
 *   h_t = f(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),  f = tanh or relu,  h_{-1} = 0
 * Tensors weight_ih_l{k} (H,in), weight_hh_l{k} (H,H), bias_ih_l{k} (H), bias_hh_l{k} (H).
 * bptt = k > 0 truncates backpropagation through time to chunks of k steps. Layout as in lstm.c:
 * time-major (T, B, .) inside; f and f' go through the backend's activation ops.
 *
 * Split by hidden unit (recurrent.h): a rank's U = H/t units get their pre-activations and h in
 * hl (T, B, U); each step all-gathers them into the full h, the next step's and layer's input. */
#include "layers/layer.h"
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
        int Bm;
        dt_rnn_desc dd;                 /* device backends: the fused op's plan (dd.state set) */
        float *xt;                      /* (T, Bm, F) the input, time-major */
        float *h[RNN_MAX_LAYERS];       /* (T, Bm, H) the layer's output sequence; f' is read from it */
        float *dh[2];                   /* (T, Bm, max(F,H)) ping-pong: d(loss)/d(a layer's output, then input) */
        float *b;                       /* (U) b_ih + b_hh, then d(b) in backward; U = H/t, this rank's units */
        /* split only (NULL whole): */
        float *hl[RNN_MAX_LAYERS];      /* (T, Bm, U) the output sequence on this rank's units; f' is read from it */
        float *dhl;                     /* (T, Bm, U) this rank's columns of dH, then of dP */
        float *part;                    /* (Bm, H) a step's dP_t W_hh, this rank's part of the sum */
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

static size_t rnn_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct rnn_cfg *c = cfg;
        size_t T = (size_t)in->d[0], F = (size_t)in->d[1], H = (size_t)c->r.hidden, U = (size_t)dt_rec_units(&c->r);
        size_t n = T * F + (size_t)c->r.layers * T * H + 2 * T * (F > H ? F : H);
        return dt_rec_nshards(&c->r) > 1 ? n + (size_t)c->r.layers * T * U + T * U + H : n;    /* + hl, dhl, part */
}

/* ---- state ---- */
static int rnn_setup(dt_layer *l, int max_batch)
{
        const struct rnn_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        if (o->rnn_plan) {      /* device backend: its fused recurrent op (cuDNN) instead of the code below */
                if (c->r.bptt > 0) {
                        dt_error("layer '%s' (rnn): bptt is not supported on the %s backend; remove it or use --device cpu",
                                 l->name, o->name);
                        return -1;
                }
                struct rnn_priv *q = dt_calloc(1, sizeof *q);
                l->priv = q;
                q->Bm = max_batch;
                q->dd = (dt_rnn_desc){ .mode = c->act == DT_ACT_RELU ? DT_RNN_RELU : DT_RNN_TANH, .T = l->in.d[0], .I = l->in.d[1], .H = c->r.hidden,
                                       .L = c->r.layers, .bias = c->r.bias, .return_seq = c->r.return_seq };
                if (o->rnn_plan(l->be, &q->dd, max_batch) == 0) return 0;
                dt_error("layer '%s' (rnn) cannot run on the %s backend", l->name, o->name);
                return -1;
        }
        if (!dt_backend_supports(l->be, DT_CAP_HOST_MEMORY)) {
                dt_error("layer '%s' (rnn) runs on the cpu backend only, not '%s'", l->name, o->name);
                return -1;
        }
        struct rnn_priv *p = dt_calloc(1, sizeof *p);
        size_t B = (size_t)max_batch, T = (size_t)l->in.d[0], F = (size_t)l->in.d[1], H = (size_t)c->r.hidden;
        p->Bm = max_batch;
        p->xt = o->alloc(l->be, T * B * F);
        size_t U = (size_t)dt_rec_units(&c->r);
        int split = dt_rec_nshards(&c->r) > 1;
        for (int k = 0; k < c->r.layers; k++) {
                p->h[k] = o->alloc(l->be, T * B * H);
                if (split) p->hl[k] = o->alloc(l->be, T * B * U);
        }
        for (int k = 0; k < 2; k++) p->dh[k] = o->alloc(l->be, T * B * (F > H ? F : H));
        p->b = o->alloc(l->be, U);
        if (split) {
                p->dhl = o->alloc(l->be, T * B * U);
                p->part = o->alloc(l->be, B * H);
        }
        l->priv = p;
        return 0;
}

static void rnn_teardown(dt_layer *l)
{
        const struct rnn_cfg *c = l->cfg;
        struct rnn_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);   /* the other buffers are NULL then */
        dt_backend *be = l->be;
        be->ops->free(be, p->xt);
        for (int k = 0; k < c->r.layers; k++) {
                be->ops->free(be, p->h[k]);
                if (p->hl[k]) be->ops->free(be, p->hl[k]);
        }
        if (p->dhl) be->ops->free(be, p->dhl);
        if (p->part) be->ops->free(be, p->part);
        be->ops->free(be, p->dh[0]);
        be->ops->free(be, p->dh[1]);
        be->ops->free(be, p->b);
        free(p);
        l->priv = NULL;
}

/* parameter views of layer k */
#define NPL (c->r.bias ? 4 : 2)
#define WIH(k) l->p[NPL * (k)]
#define WHH(k) l->p[NPL * (k) + 1]

/* ---- forward ----
 * per layer k, input X (T,B,I), pre-activations built in place of the output sequence Hs:
 *   Hs = X W_ih^T + b_ih + b_hh                    all steps, one GEMM (T*B, H, I)
 *   Hs_t += h_{t-1} W_hh^T;  h_t = f(Hs_t)         per step, one GEMM (B, H, H)
 * Split: the same on this rank's U units in hl (B, U per step) against the full h_{t-1}, then
 * h_t all-gathered into Hs. */
static void rnn_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (((struct rnn_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_fwd(l->be, &((struct rnn_priv *)l->priv)->dd, ctx->training, l->p, x, y, B);
                return;
        }
        const struct rnn_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct rnn_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, U = dt_rec_units(&c->r);
        size_t sB = (size_t)B * H, sU = (size_t)B * U;
        DT_ASSERT(B <= p->Bm);
        dt_rec_time_major(p->xt, x, B, T, F);
        for (int k = 0; k < c->r.layers; k++) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *Hs = p->h[k], *HL = p->hl[k] ? p->hl[k] : Hs;
                o->gemm(l->be, 0, 1, T * B, U, I, 1.0f, X, I, WIH(k), I, 0.0f, HL, U);
                if (c->r.bias) {
                        o->copy(l->be, p->b, l->p[4 * k + 2], (size_t)U);
                        o->axpy(l->be, (size_t)U, 1.0f, l->p[4 * k + 3], p->b);
                        o->bias_add(l->be, HL, p->b, T * B, U);
                }
                for (int t = 0; t < T; t++) {
                        float *ht = HL + t * sU;
                        if (t) o->gemm(l->be, 0, 1, B, U, H, 1.0f, Hs + (t - 1) * sB, H, WHH(k), H, 1.0f, ht, U);
                        o->act_fwd(l->be, c->act, 0.0f, ht, ht, sU);
                        if (p->hl[k]) dt_rec_gather_h(l, ht, Hs + t * sB, B, U);
                }
        }
        const float *top = p->h[c->r.layers - 1];
        dt_rec_output(&c->r, y, top, B, T);
}

/* ---- backward ----
 * per layer k, top down, with dH (T,B,H) = dL/dh from the output or the layer above, turned in
 * place into dP = dL/d(pre-activation):
 *   for t = T-1 .. 0:  dP_t = f'(h_t) dH_t           (relu: h > 0 iff pre > 0; tanh: 1 - h^2)
 *                      dH_{t-1} += dP_t W_hh        (B, H, H); skipped at a bptt chunk start,
 *                      where the carried state counts as a constant
 *   dW_ih += dP^T X                                 (H, I, T*B)
 *   dW_hh += dP_{1..T-1}^T h_{0..T-2}               (H, H, (T-1)*B)
 *   db_ih += sum dP;  db_hh += sum dP
 *   dX = dP W_ih                                    (T*B, I, H)  the layer below's dH
 * Split: dP on this rank's columns of dH (dhl) and its units' h; dH_{t-1} gets its columns of
 * dP_t W_hh summed over the ranks (dt_rec_reduce_h, one all-reduce per step); dX is all-reduced
 * once. Weight and bias gradients are this rank's rows. */
static void rnn_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                         const float *dy, float *dx, int B)
{
        (void)ctx; (void)x; (void)y;
        if (((struct rnn_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_bwd(l->be, &((struct rnn_priv *)l->priv)->dd, l->p, l->g, x, y, dy, dx, B);
                return;
        }
        const struct rnn_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct rnn_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, U = dt_rec_units(&c->r), cur = 0;
        size_t sU = (size_t)B * U;
        float *dH = p->dh[0];
        dt_rec_seed_grad(&c->r, dH, dy, B, T);
        for (int k = c->r.layers - 1; k >= 0; k--) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *Hs = p->h[k];
                const float *HL = p->hl[k] ? p->hl[k] : Hs;
                /* dP on this rank's units, so from its columns of dH (all of it unsplit) */
                float *dL = dH;
                if (p->dhl) {
                        dL = p->dhl;
                        dt_cols_take(dL, dH, (size_t)T * B, (size_t)H, (size_t)l->place.shard * U, (size_t)U);
                }
                for (int t = T - 1; t >= 0; t--) {
                        float *dP = dL + t * sU;
                        o->act_bwd(l->be, c->act, 0.0f, HL + t * sU, HL + t * sU, dP, dP, sU);
                        int carry = t > 0 && !(c->r.bptt > 0 && t % c->r.bptt == 0);
                        if (!carry) continue;
                        if (p->part) {  /* split: dP_t W_hh over all H columns, summed over the ranks' units */
                                o->gemm(l->be, 0, 0, B, H, U, 1.0f, dP, U, WHH(k), H, 0.0f, p->part, H);
                                dt_rec_reduce_h(l, p->part, dP - sU, B, H, U);
                        } else {
                                o->gemm(l->be, 0, 0, B, H, H, 1.0f, dP, H, WHH(k), H, 1.0f, dP - sU, H);
                        }
                }
                o->gemm(l->be, 1, 0, U, I, T * B, 1.0f, dL, U, X, I, 1.0f, l->g[NPL * k], I);
                if (T > 1) o->gemm(l->be, 1, 0, U, H, (T - 1) * B, 1.0f, dL + sU, U, Hs, H, 1.0f, l->g[NPL * k + 1], H);
                if (c->r.bias) {
                        o->zero(l->be, p->b, (size_t)U);
                        o->bias_grad(l->be, p->b, dL, T * B, U);
                        o->axpy(l->be, (size_t)U, 1.0f, p->b, l->g[4 * k + 2]);
                        o->axpy(l->be, (size_t)U, 1.0f, p->b, l->g[4 * k + 3]);
                }
                if (k == 0 && !dx) break;
                float *dX = p->dh[cur ^ 1];
                o->gemm(l->be, 0, 0, T * B, I, U, 1.0f, dL, U, WIH(k), I, 0.0f, dX, I);
                if (p->dhl) l->place.tp->allreduce(l->place.tp, dX, (size_t)T * B * I);  /* every rank's units' part */
                cur ^= 1;
                dH = dX;
        }
        if (dx) dt_rec_batch_major(dx, dH, B, T, F);
}

extern const dt_layer_ops dt_rnn_layer;
static const dt_layer_ops *rnn_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        *(struct rnn_cfg *)local = *(const struct rnn_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &dt_rnn_layer;
}

static int rnn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct rnn_cfg *)cfg)->r, backend, caps, why, n);
}

const dt_layer_ops dt_rnn_layer = {
        .name = "rnn", .cfg_size = sizeof(struct rnn_cfg),
        .parse = rnn_parse, .infer = rnn_infer, .params = rnn_params, .flops = rnn_flops,
        .scratch = rnn_scratch, .supports = rnn_supports, .setup = rnn_setup, .teardown = rnn_teardown,
        .forward = rnn_forward, .backward = rnn_backward, .shard = rnn_shard, .splits = dt_rec_splits, .nsplits = 1,
        .summary = "Elman RNN over (T,F): hidden, nonlinearity (tanh|relu), layers, return_sequences, bptt, bias",
};
