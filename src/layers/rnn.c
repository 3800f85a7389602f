/* layers/rnn.c - stacked Elman RNN, PyTorch's nn.RNN(batch_first=True): (T,F) -> (H) last step of
 * the top layer, or (T,H) with return_sequences.
 *   h_t = f(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),  f = tanh or relu,  h_{-1} = 0
 * Tensors weight_ih_l{k} (H,in), weight_hh_l{k} (H,H), bias_ih_l{k} (H), bias_hh_l{k} (H).
 * bptt = k > 0 truncates backpropagation through time to chunks of k steps. Layout as in lstm.c:
 * time-major (T, B, .) inside; f and f' go through the backend's activation ops. */
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
        float *b;                       /* (H) b_ih + b_hh, then d(b) in backward */
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
        size_t T = (size_t)in->d[0], F = (size_t)in->d[1], H = (size_t)c->r.hidden;
        return T * F + (size_t)c->r.layers * T * H + 2 * T * (F > H ? F : H);
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
        for (int k = 0; k < c->r.layers; k++) p->h[k] = o->alloc(l->be, T * B * H);
        for (int k = 0; k < 2; k++) p->dh[k] = o->alloc(l->be, T * B * (F > H ? F : H));
        p->b = o->alloc(l->be, H);
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
        for (int k = 0; k < c->r.layers; k++) be->ops->free(be, p->h[k]);
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
 *   Hs_t += h_{t-1} W_hh^T;  h_t = f(Hs_t)         per step, one GEMM (B, H, H) */
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
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden;
        size_t sB = (size_t)B * H;
        DT_ASSERT(B <= p->Bm);
        dt_rec_time_major(p->xt, x, B, T, F);
        for (int k = 0; k < c->r.layers; k++) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *Hs = p->h[k];
                o->gemm(l->be, 0, 1, T * B, H, I, 1.0f, X, I, WIH(k), I, 0.0f, Hs, H);
                if (c->r.bias) {
                        o->copy(l->be, p->b, l->p[4 * k + 2], (size_t)H);
                        o->axpy(l->be, (size_t)H, 1.0f, l->p[4 * k + 3], p->b);
                        o->bias_add(l->be, Hs, p->b, T * B, H);
                }
                for (int t = 0; t < T; t++) {
                        float *ht = Hs + t * sB;
                        if (t) o->gemm(l->be, 0, 1, B, H, H, 1.0f, ht - sB, H, WHH(k), H, 1.0f, ht, H);
                        o->act_fwd(l->be, c->act, 0.0f, ht, ht, sB);
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
 *   dX = dP W_ih                                    (T*B, I, H)  the layer below's dH */
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
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, cur = 0;
        size_t sB = (size_t)B * H;
        float *dH = p->dh[0];
        dt_rec_seed_grad(&c->r, dH, dy, B, T);
        for (int k = c->r.layers - 1; k >= 0; k--) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *Hs = p->h[k];
                for (int t = T - 1; t >= 0; t--) {
                        float *dP = dH + t * sB;
                        o->act_bwd(l->be, c->act, 0.0f, Hs + t * sB, Hs + t * sB, dP, dP, sB);
                        if (t > 0 && !(c->r.bptt > 0 && t % c->r.bptt == 0))
                                o->gemm(l->be, 0, 0, B, H, H, 1.0f, dP, H, WHH(k), H, 1.0f, dP - sB, H);
                }
                o->gemm(l->be, 1, 0, H, I, T * B, 1.0f, dH, H, X, I, 1.0f, l->g[NPL * k], I);
                if (T > 1) o->gemm(l->be, 1, 0, H, H, (T - 1) * B, 1.0f, dH + sB, H, Hs, H, 1.0f, l->g[NPL * k + 1], H);
                if (c->r.bias) {
                        o->zero(l->be, p->b, (size_t)H);
                        o->bias_grad(l->be, p->b, dH, T * B, H);
                        o->axpy(l->be, (size_t)H, 1.0f, p->b, l->g[4 * k + 2]);
                        o->axpy(l->be, (size_t)H, 1.0f, p->b, l->g[4 * k + 3]);
                }
                if (k == 0 && !dx) break;
                float *dX = p->dh[cur ^ 1];
                o->gemm(l->be, 0, 0, T * B, I, H, 1.0f, dH, H, WIH(k), I, 0.0f, dX, I);
                cur ^= 1;
                dH = dX;
        }
        if (dx) dt_rec_batch_major(dx, dH, B, T, F);
}

static int rnn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct rnn_cfg *)cfg)->r, backend, caps, why, n);
}

const dt_layer_ops dt_rnn_layer = {
        .name = "rnn", .cfg_size = sizeof(struct rnn_cfg),
        .parse = rnn_parse, .infer = rnn_infer, .params = rnn_params, .flops = rnn_flops,
        .scratch = rnn_scratch, .supports = rnn_supports, .setup = rnn_setup, .teardown = rnn_teardown,
        .forward = rnn_forward, .backward = rnn_backward,
        .summary = "Elman RNN over (T,F): hidden, nonlinearity (tanh|relu), layers, return_sequences, bptt, bias",
};
