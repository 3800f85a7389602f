/* layers/lstm.c - stacked LSTM, PyTorch's nn.LSTM(batch_first=True): (T,F) -> (H) last step of
 * the top layer, or (T,H) with return_sequences. Gate order i, f, g, o; tensors weight_ih_l{k}
 * (4H,in), weight_hh_l{k} (4H,H), bias_ih_l{k} (4H), bias_hh_l{k} (4H), so checkpoints load into
 * torch. h0 = c0 = 0. bptt = k > 0 truncates backpropagation through time to chunks of k steps.
 *
 * Layout: inside the layer everything is time-major (T, B, .), so a step is one contiguous
 * (B, .) block: x W_ih^T for all steps is one GEMM, a step's recurrent term one GEMM for the four
 * gates, and dW_hh one GEMM over all steps (rows of step t against h rows of step t-1). The
 * per-element cell math runs in plain C on host memory (CPU backend).
 *
 * Split by hidden unit (recurrent.h): gates, c and tanh(c) hold the rank's Hl = H/t units, h the
 * full H (each step all-gathers it), the backward dH its units' columns (dhl). */
#include "layers/layer.h"
#include "layers/recurrent.h"
#include "layers/stepgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LSTM_MAX_LAYERS 4

struct lstm_cfg {
        struct dt_rec_cfg r;            /* hidden, layers, return_seq, bptt, bias */
        float forget_bias;
};

struct lstm_priv {
        int Bm;
        /* below, U = Hl, this rank's units (H unsplit) */
        dt_rnn_desc dd;                 /* device backends: the fused op's plan (dd.state set) */
        float *xt;                      /* (T, Bm, F) the input, time-major */
        float *g[LSTM_MAX_LAYERS];      /* (T, Bm, 4U) gate activations i,f,g,o; backward turns them into d(pre-activation) */
        float *c[LSTM_MAX_LAYERS];      /* (T, Bm, U) cell state */
        float *tc[LSTM_MAX_LAYERS];     /* (T, Bm, U) tanh(c) */
        float *h[LSTM_MAX_LAYERS];      /* (T, Bm, H) hidden state = the layer's output sequence */
        float *dh[2];                   /* (T, Bm, max(F,H)) ping-pong: d(loss)/d(a layer's output, then input) */
        float *dc;                      /* (Bm, U) d(loss)/d(c_{t-1}) carried backwards */
        float *bsum;                    /* (4U) b_ih + b_hh (zeros without bias), added in the cell */
        float *whht;                    /* (H, 4U) W_hh^T of the layer being run forward, for dt_stepgemm
                                         * (NULL: the backend's gemm runs the steps) */
        float *zeros;                   /* (Bm, U) c_{-1} */
        float *db;                      /* (nt, 4U) sum of d(pre-activation) over a layer's steps and rows;
                                         * row t > 0: thread t's rows, added to row 0 in t order */
        int nt;                         /* threads, dt_par_threads at setup */
        /* split only (NULL whole): */
        float *hl;                      /* (Bm, U) a step's h on this rank's units, before the all-gather */
        float *dhl;                     /* (T, Bm, U) this rank's columns of dH */
        float *part;                    /* (Bm, H) a step's dG_t W_hh, this rank's part of the sum */
};

/* Threads split the batch rows: a row's recurrence never reads another row, so thread t runs all
 * T steps of its rows (the step GEMM on its rows, then the cell) with no barrier between steps.
 * Below this many rows per thread the step GEMMs get too thin and one thread runs them whole.
 * A split layer always runs them whole: its steps meet the other ranks in a collective each, which
 * one caller must make for all the rows. */
#define ROWS_PER_THREAD 8

#include "layers/cellmath.h"

/* One step forward for B rows; gt (B,4H) holds pre-activations less the bias bs (4H) on entry,
 * activations on exit; cp = c_{t-1} (zeros at t = 0).
 *   i = sigm(.), f = sigm(.), g = tanh(.), o = sigm(.)
 *   c_t = f c_{t-1} + i g;   h_t = o tanh(c_t)
 * Whole vectors first, the last H mod 16 lanes of a row in scalar code (libm). */
CELL_CLONES
static void cell_fwd(int B, int H, float *gt, const float *bs, const float *cp, float *c, float *tc, float *h)
{
        for (int b = 0; b < B; b++) {
                float *gi = gt + (size_t)b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j + VL <= H; j += VL) {
                        vec vi = ld(gi + j) + ld(bs + j), vf = ld(gf + j) + ld(bs + H + j);
                        vec vg = ld(gg + j) + ld(bs + 2 * H + j), vo = ld(go + j) + ld(bs + 3 * H + j);
                        vi = vsigm(&vi); vf = vsigm(&vf); vg = vtanh(&vg); vo = vsigm(&vo);
                        vec vc = vf * ld(cp + r + j) + vi * vg;
                        vec vt = vtanh(&vc), vh = vo * vt;
                        st(gi + j, &vi); st(gf + j, &vf); st(gg + j, &vg); st(go + j, &vo);
                        st(c + r + j, &vc); st(tc + r + j, &vt); st(h + r + j, &vh);
                }
                for (; j < H; j++) {
                        float i = sigmf(gi[j] + bs[j]), f = sigmf(gf[j] + bs[H + j]);
                        float g = tanhf(gg[j] + bs[2 * H + j]), o = sigmf(go[j] + bs[3 * H + j]);
                        gi[j] = i; gf[j] = f; gg[j] = g; go[j] = o;
                        c[r + j] = f * cp[r + j] + i * g;
                        tc[r + j] = tanhf(c[r + j]);
                        h[r + j] = o * tc[r + j];
                }
        }
}

/* One step backward. dh (B,H) = dL/dh_t (from above and from step t+1); dc (B,H) = dL/dc_t from
 * step t+1 on entry, dL/dc_{t-1} = dc_t f on exit; cp = c_{t-1} (zeros at t = 0).
 *   dc_t = dc + dh o (1 - tanh^2 c_t)
 *   d(pre i) = dc_t g i(1-i)      d(pre f) = dc_t c_{t-1} f(1-f)
 *   d(pre g) = dc_t i (1-g^2)     d(pre o) = dh tanh(c_t) o(1-o)
 * gt (B,4H): activations in, d(pre-activation) out; db (4H) += its column sums. */
CELL_CLONES
static void cell_bwd(int B, int H, float *gt, const float *cp, const float *tc, const float *dh, float *dc, float *db)
{
        const vec one = vset(1.0f);
        for (int b = 0; b < B; b++) {
                float *gi = gt + (size_t)b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j + VL <= H; j += VL) {
                        vec vi = ld(gi + j), vf = ld(gf + j), vg = ld(gg + j), vo = ld(go + j);
                        vec vt = ld(tc + r + j), vdh = ld(dh + r + j);
                        vec vc = ld(dc + r + j) + vdh * vo * (one - vt * vt);
                        vec di = vc * vg * vi * (one - vi), df = vc * ld(cp + r + j) * vf * (one - vf);
                        vec dg = vc * vi * (one - vg * vg), dO = vdh * vt * vo * (one - vo), dcp = vc * vf;
                        st(gi + j, &di); st(gf + j, &df); st(gg + j, &dg); st(go + j, &dO);
                        st(dc + r + j, &dcp);
                        di += ld(db + j); df += ld(db + H + j); dg += ld(db + 2 * H + j); dO += ld(db + 3 * H + j);
                        st(db + j, &di); st(db + H + j, &df); st(db + 2 * H + j, &dg); st(db + 3 * H + j, &dO);
                }
                for (; j < H; j++) {
                        float i = gi[j], f = gf[j], g = gg[j], o = go[j], t = tc[r + j], d = dh[r + j];
                        float vc = dc[r + j] + d * o * (1 - t * t);
                        gi[j] = vc * g * i * (1 - i);
                        gf[j] = vc * cp[r + j] * f * (1 - f);
                        gg[j] = vc * i * (1 - g * g);
                        go[j] = d * t * o * (1 - o);
                        dc[r + j] = vc * f;
                        db[j] += gi[j]; db[H + j] += gf[j]; db[2 * H + j] += gg[j]; db[3 * H + j] += go[j];
                }
        }
}

/* ---- spec ---- */
static int lstm_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        struct lstm_cfg *c = cfg;
        double fb = 0;
        int rc = dt_rec_parse(m, &c->r, LSTM_MAX_LAYERS);
        if (dt_ymap_num(m, "forget_bias", &fb, 0.0, -100.0, 100.0, 0) < 0) rc = -1;
        if (rc == 0 && !c->r.bias && fb != 0) {
                dt_yerr(d, m->y, dt_ymap_get(m, "forget_bias"), "'forget_bias' needs 'bias: true'");
                rc = -1;
        }
        c->forget_bias = (float)fb;
        return rc;
}

static int lstm_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        return dt_rec_infer(&((const struct lstm_cfg *)cfg)->r, in, out, why, n);
}

/* Per layer: weight_ih, weight_hh[, bias_ih, bias_hh]; torch draws all from U(-1/sqrt(H), 1/sqrt(H)). */
static int lstm_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        return dt_rec_params(&((const struct lstm_cfg *)cfg)->r, 4, in, ps);
}

static double lstm_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        return dt_rec_flops(&((const struct lstm_cfg *)cfg)->r, 4, in);
}

static size_t lstm_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct lstm_cfg *c = cfg;
        size_t T = (size_t)in->d[0], F = (size_t)in->d[1], H = (size_t)c->r.hidden, U = (size_t)dt_rec_units(&c->r);
        size_t n = T * F + (size_t)c->r.layers * T * (6 * U + H) + 2 * T * (F > H ? F : H) + 2 * U; /* + dc, c_{-1} */
        return dt_rec_nshards(&c->r) > 1 ? n + U + T * U + H : n;      /* + hl, dhl, part */
}

/* ---- state ---- */
static int lstm_setup(dt_layer *l, int max_batch)
{
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        if (o->rnn_plan) {      /* device backend: its fused recurrent op (cuDNN) instead of the code below */
                if (c->r.bptt > 0) {
                        dt_error("layer '%s' (lstm): bptt is not supported on the %s backend; remove it or use --device cpu",
                                 l->name, o->name);
                        return -1;
                }
                struct lstm_priv *q = dt_calloc(1, sizeof *q);
                l->priv = q;
                q->Bm = max_batch;
                q->dd = (dt_rnn_desc){ .mode = DT_RNN_LSTM, .T = l->in.d[0], .I = l->in.d[1], .H = c->r.hidden,
                                       .L = c->r.layers, .bias = c->r.bias, .return_seq = c->r.return_seq };
                if (o->rnn_plan(l->be, &q->dd, max_batch) == 0) return 0;
                dt_error("layer '%s' (lstm) cannot run on the %s backend", l->name, o->name);
                return -1;
        }
        if (!dt_backend_supports(l->be, DT_CAP_HOST_MEMORY)) {
                dt_error("layer '%s' (lstm) runs on the cpu backend only, not '%s'", l->name, o->name);
                return -1;
        }
        struct lstm_priv *p = dt_calloc(1, sizeof *p);
        size_t B = (size_t)max_batch, T = (size_t)l->in.d[0], F = (size_t)l->in.d[1], H = (size_t)c->r.hidden;
        size_t U = (size_t)dt_rec_units(&c->r);
        p->Bm = max_batch;
        p->xt = o->alloc(l->be, T * B * F);
        for (int k = 0; k < c->r.layers; k++) {
                p->g[k] = o->alloc(l->be, T * B * 4 * U);
                p->c[k] = o->alloc(l->be, T * B * U);
                p->tc[k] = o->alloc(l->be, T * B * U);
                p->h[k] = o->alloc(l->be, T * B * H);
        }
        for (int k = 0; k < 2; k++) p->dh[k] = o->alloc(l->be, T * B * (F > H ? F : H));
        p->dc = o->alloc(l->be, B * U);
        p->bsum = o->alloc(l->be, 4 * U);
        p->zeros = o->alloc(l->be, B * U);
        if (dt_rec_nshards(&c->r) == 1 && dt_stepgemm_ok(4 * (int)U) && dt_stepgemm_ok((int)H))
                p->whht = o->alloc(l->be, H * 4 * U);
        p->nt = dt_par_threads(l->be);
        p->db = o->alloc(l->be, (size_t)p->nt * 4 * U);
        if (dt_rec_nshards(&c->r) > 1) {
                p->hl = o->alloc(l->be, B * U);
                p->dhl = o->alloc(l->be, T * B * U);
                p->part = o->alloc(l->be, B * H);
        }
        l->priv = p;
        return 0;
}

static void lstm_teardown(dt_layer *l)
{
        const struct lstm_cfg *c = l->cfg;
        struct lstm_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);   /* the other buffers are NULL then */
        dt_backend *be = l->be;
        be->ops->free(be, p->xt);
        for (int k = 0; k < c->r.layers; k++) {
                be->ops->free(be, p->g[k]);
                be->ops->free(be, p->c[k]);
                be->ops->free(be, p->tc[k]);
                be->ops->free(be, p->h[k]);
        }
        be->ops->free(be, p->dh[0]);
        be->ops->free(be, p->dh[1]);
        be->ops->free(be, p->dc);
        be->ops->free(be, p->bsum);
        be->ops->free(be, p->zeros);
        if (p->whht) be->ops->free(be, p->whht);
        be->ops->free(be, p->db);
        if (p->hl) be->ops->free(be, p->hl);
        if (p->dhl) be->ops->free(be, p->dhl);
        if (p->part) be->ops->free(be, p->part);
        free(p);
        l->priv = NULL;
}

/* Adds forget_bias to the forget-gate rows [H, 2H) of every bias_ih, once after a fresh
 * initialisation (never on resume or when loading weights). */
static void lstm_post_init(dt_layer *l)
{
        const struct lstm_cfg *c = l->cfg;
        if (!c->r.bias || c->forget_bias == 0) return;
        int H = c->r.hidden;
        float *b = dt_malloc((size_t)4 * H * sizeof *b);
        for (int k = 0; k < c->r.layers; k++) {
                float *bih = l->p[4 * k + 2];
                l->be->ops->to_host(l->be, b, bih, (size_t)4 * H);
                for (int j = H; j < 2 * H; j++) b[j] += c->forget_bias;
                l->be->ops->to_device(l->be, bih, b, (size_t)4 * H);
        }
        free(b);
}

/* parameter views of layer k */
#define WIH(k) l->p[(c->r.bias ? 4 : 2) * (k)]
#define WHH(k) l->p[(c->r.bias ? 4 : 2) * (k) + 1]

/* ---- the recurrence, on a range of batch rows [r0, r1) (see ROWS_PER_THREAD) ---- */
struct rjob {
        dt_layer *l;
        int k, B;
        float *dH;      /* backward: dL/dh of layer k, (T, B, H) */
        int nt;         /* backward: the thread count the region ran with (set by thread 0) */
};

static void run(dt_layer *l, dt_par_fn fn, struct rjob *j)
{
        struct lstm_priv *p = l->priv;
        if (p->nt > 1 && j->B >= ROWS_PER_THREAD * p->nt && !p->hl) dt_par_run(l->be, fn, j);
        else fn(j, 0, 1);
}

static void fwd_rows(void *arg, int t0, int nt);
static void bwd_rows(void *arg, int t0, int nt);

/* ---- forward ----
 * per layer k, input X (T,B,I):
 *   G = X W_ih^T                                   all steps, one GEMM (T*B, 4H, I)
 *   G_t += h_{t-1} W_hh^T                          per step, one GEMM (B, 4H, H), t > 0
 *   G_t + b_ih + b_hh -> i,f,g,o -> c_t, h_t       cell_fwd
 * Split: 4U gate columns instead of 4H (the rank's units), h_{t-1} still the full (B, H), and the
 * cell's h_t (B, U) all-gathered into the full h_t before the next step reads it. */
static void lstm_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (((struct lstm_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_fwd(l->be, &((struct lstm_priv *)l->priv)->dd, ctx->training, l->p, x, y, B);
                return;
        }
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct lstm_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, G4 = 4 * dt_rec_units(&c->r);
        DT_ASSERT(B <= p->Bm);
        dt_rec_time_major(p->xt, x, B, T, F);
        for (int k = 0; k < c->r.layers; k++) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *G = p->g[k];
                o->gemm(l->be, 0, 1, T * B, G4, I, 1.0f, X, I, WIH(k), I, 0.0f, G, G4);
                if (c->r.bias)
                        for (int j = 0; j < G4; j++) p->bsum[j] = l->p[4 * k + 2][j] + l->p[4 * k + 3][j];
                if (p->whht)    /* W_hh^T once per layer and pass (16 x 16 blocks): the steps read it as it lies */
                        for (int n0 = 0; n0 < G4; n0 += 16)
                                for (int i0 = 0; i0 < H; i0 += 16)
                                        for (int n = n0; n < n0 + 16 && n < G4; n++)
                                                for (int i = i0; i < i0 + 16 && i < H; i++)
                                                        p->whht[(size_t)i * G4 + n] = WHH(k)[(size_t)n * H + i];
                struct rjob j = { .l = l, .k = k, .B = B };
                run(l, fwd_rows, &j);
        }
        const float *top = p->h[c->r.layers - 1];
        dt_rec_output(&c->r, y, top, B, T);
}

/* ---- backward ----
 * per layer k, top down, with dH (T,B,H) = dL/dh from the output or the layer above:
 *   for t = T-1 .. 0:  cell_bwd -> dG_t (in place of G_t), dc_{t-1}, db += sum_rows dG_t
 *                      dH_{t-1} += dG_t W_hh        (B, H, 4H); skipped at a bptt chunk start,
 *                      where dc_{t-1} is zeroed too: the carried state counts as a constant
 *   dW_ih += dG^T X                                 (4H, I, T*B)
 *   dW_hh += dG_{1..T-1}^T h_{0..T-2}               (4H, H, (T-1)*B)  rows are time-major, so one GEMM
 *   db_ih += db;  db_hh += db
 *   dX = dG W_ih                                    (T*B, I, 4H)  the layer below's dH
 * Split: the cells take this rank's columns of dH; dH_{t-1} gets its columns of dG_t W_hh summed
 * over the ranks (dt_rec_reduce_h, one all-reduce per step), dX is all-reduced once. dW_ih, dW_hh
 * (against the full h) and db are this rank's rows, no collective. */
static void lstm_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                          const float *dy, float *dx, int B)
{
        (void)ctx; (void)x; (void)y;
        if (((struct lstm_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_bwd(l->be, &((struct lstm_priv *)l->priv)->dd, l->p, l->g, x, y, dy, dx, B);
                return;
        }
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct lstm_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, U = dt_rec_units(&c->r), G4 = 4 * U, cur = 0;
        size_t sG = (size_t)B * G4;
        float *dH = p->dh[0];
        dt_rec_seed_grad(&c->r, dH, dy, B, T);
        for (int k = c->r.layers - 1; k >= 0; k--) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *G = p->g[k], *Hs = p->h[k];
                /* split: the cells run on this rank's units, so on its columns of dH */
                if (p->dhl) dt_cols_take(p->dhl, dH, (size_t)T * B, (size_t)H, (size_t)l->place.shard * U, (size_t)U);
                struct rjob j = { .l = l, .k = k, .B = B, .dH = p->dhl ? p->dhl : dH };
                run(l, bwd_rows, &j);
                for (int t = 1; t < j.nt; t++)
                        for (int i = 0; i < G4; i++) p->db[i] += p->db[(size_t)t * G4 + i];
                float *gih = l->g[(c->r.bias ? 4 : 2) * k], *ghh = l->g[(c->r.bias ? 4 : 2) * k + 1];
                o->gemm(l->be, 1, 0, G4, I, T * B, 1.0f, G, G4, X, I, 1.0f, gih, I);
                if (T > 1) o->gemm(l->be, 1, 0, G4, H, (T - 1) * B, 1.0f, G + sG, G4, Hs, H, 1.0f, ghh, H);
                if (c->r.bias) {
                        o->axpy(l->be, (size_t)G4, 1.0f, p->db, l->g[4 * k + 2]);
                        o->axpy(l->be, (size_t)G4, 1.0f, p->db, l->g[4 * k + 3]);
                }
                if (k == 0 && !dx) break;
                float *dX = p->dh[cur ^ 1];
                o->gemm(l->be, 0, 0, T * B, I, G4, 1.0f, G, G4, WIH(k), I, 0.0f, dX, I);
                if (p->dhl) l->place.tp->allreduce(l->place.tp, dX, (size_t)T * B * I);  /* every rank's units' part */
                cur ^= 1;
                dH = dX;
        }
        if (dx) dt_rec_batch_major(dx, dH, B, T, F);
}

/* Rows [r0, r1) of layer k, all steps:
 *   G_t += h_{t-1} W_hh^T; cell_fwd                           t = 0 .. T-1 */
static void fwd_rows(void *arg, int t0, int nt)
{
        const struct rjob *j = arg;
        dt_layer *l = j->l;
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct lstm_priv *p = l->priv;
        const int k = j->k, B = j->B, T = l->in.d[0], H = c->r.hidden, U = dt_rec_units(&c->r), G4 = 4 * U;
        const size_t sB = (size_t)B * H, sU = (size_t)B * U, sG = (size_t)B * G4;
        long r0, r1;
        dt_par_range(B, t0, nt, 1, &r0, &r1);
        const int nr = (int)(r1 - r0);
        if (nr <= 0) return;
        float *G = p->g[k] + r0 * G4, *C = p->c[k] + r0 * U, *TC = p->tc[k] + r0 * U, *Hs = p->h[k] + r0 * H;
        for (int t = 0; t < T; t++) {
                float *Gt = G + t * sG;
                if (t && p->whht) dt_stepgemm(nr, G4, H, Hs + (t - 1) * sB, H, p->whht, G4, Gt, G4);
                else if (t) o->gemm(l->be, 0, 1, nr, G4, H, 1.0f, Hs + (t - 1) * sB, H, WHH(k), H, 1.0f, Gt, G4);
                /* split: the cell writes this rank's units, the gather makes the full h_t (all rows: r0 = 0) */
                float *ht = p->hl ? p->hl : Hs + t * sB;
                cell_fwd(nr, U, Gt, p->bsum, t ? C + (t - 1) * sU : p->zeros, C + t * sU, TC + t * sU, ht);
                if (p->hl) dt_rec_gather_h(l, p->hl, Hs + t * sB, B, U);
        }
}

/* Rows [r0, r1) of layer k, t = T-1 .. 0:
 *   cell_bwd -> dG_t, dc_{t-1}, db_row += sum_rows dG_t;  dH_{t-1} += dG_t W_hh (or the bptt cut) */
static void bwd_rows(void *arg, int t0, int nt)
{
        struct rjob *j = arg;
        dt_layer *l = j->l;
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct lstm_priv *p = l->priv;
        const int k = j->k, B = j->B, T = l->in.d[0], H = c->r.hidden, U = dt_rec_units(&c->r), G4 = 4 * U;
        const size_t sU = (size_t)B * U, sG = (size_t)B * G4;
        long r0, r1;
        dt_par_range(B, t0, nt, 1, &r0, &r1);
        if (t0 == 0) j->nt = nt;
        const int nr = (int)(r1 - r0);
        float *db = p->db + (size_t)t0 * G4, *dc = p->dc + r0 * U, *dH = j->dH + r0 * U;
        memset(db, 0, (size_t)G4 * sizeof *db);
        if (nr <= 0) return;
        float *G = p->g[k] + r0 * G4, *C = p->c[k] + r0 * U, *TC = p->tc[k] + r0 * U;
        memset(dc, 0, (size_t)nr * U * sizeof *dc);
        for (int t = T - 1; t >= 0; t--) {
                float *Gt = G + t * sG;
                cell_bwd(nr, U, Gt, t ? C + (t - 1) * sU : p->zeros, TC + t * sU, dH + t * sU, dc, db);
                if (t == 0) break;
                if (c->r.bptt > 0 && t % c->r.bptt == 0) {
                        memset(dc, 0, (size_t)nr * U * sizeof *dc);
                } else if (p->part) {   /* split: dG_t W_hh over all H columns, summed over the ranks' units */
                        o->gemm(l->be, 0, 0, nr, H, G4, 1.0f, Gt, G4, WHH(k), H, 0.0f, p->part, H);
                        dt_rec_reduce_h(l, p->part, dH + (t - 1) * sU, nr, H, U);
                } else if (p->whht) {  /* unsplit: sU = B H */
                        dt_stepgemm(nr, H, G4, Gt, G4, WHH(k), H, dH + (t - 1) * sU, H);
                } else {
                        o->gemm(l->be, 0, 0, nr, H, G4, 1.0f, Gt, G4, WHH(k), H, 1.0f, dH + (t - 1) * sU, H);
                }
        }
}

extern const dt_layer_ops dt_lstm_layer;
static const dt_layer_ops *lstm_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        *(struct lstm_cfg *)local = *(const struct lstm_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &dt_lstm_layer;
}

static int lstm_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct lstm_cfg *)cfg)->r, backend, caps, why, n);
}

const dt_layer_ops dt_lstm_layer = {
        .name = "lstm", .cfg_size = sizeof(struct lstm_cfg),
        .parse = lstm_parse, .infer = lstm_infer, .params = lstm_params, .flops = lstm_flops,
        .scratch = lstm_scratch, .supports = lstm_supports, .setup = lstm_setup, .teardown = lstm_teardown,
        .forward = lstm_forward, .backward = lstm_backward, .post_init = lstm_post_init, .shard = lstm_shard, .splits = dt_rec_splits, .nsplits = 1,
        .summary = "LSTM over (T,F): hidden, layers, return_sequences, bptt, forget_bias, bias",
};
