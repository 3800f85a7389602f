/* layers/lstm.c - stacked LSTM, PyTorch's nn.LSTM(batch_first=True): (T,F) -> (H) last step of
 * the top layer, or (T,H) with return_sequences. Gate order i, f, g, o; tensors weight_ih_l{k}
 * (4H,in), weight_hh_l{k} (4H,H), bias_ih_l{k} (4H), bias_hh_l{k} (4H), so checkpoints load into
 * torch. h0 = c0 = 0. bptt = k > 0 truncates backpropagation through time to chunks of k steps.
 *
 * recurrent.c's driver runs the steps, time-major (T, B, .): x W_ih^T for all steps is one GEMM, a
 * step's recurrent term one GEMM for the four gates (through dt_stepgemm where it applies), and
 * dW_hh one GEMM over all steps; threads may take disjoint row ranges. The per-element cell math
 * runs in plain C on host memory (CPU backend).
 *
 * Split by hidden unit (recurrent.h): gates, c and tanh(c) hold the rank's Hl = H/t units, h the
 * full H (each step all-gathers it), the backward dH its units' columns. */
#include "layers/layer.h"
#include "layers/cells.h"
#include "layers/recurrent.h"

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
        struct dt_rec_state s;
        /* below, U = Hl, this rank's units (H unsplit) */
        float *g[LSTM_MAX_LAYERS];      /* (T, Bm, 4U) gate activations i,f,g,o; backward turns them into d(pre-activation) */
        float *c[LSTM_MAX_LAYERS];      /* (T, Bm, U) cell state */
        float *tc[LSTM_MAX_LAYERS];     /* (T, Bm, U) tanh(c) */
        float *dc;                      /* (Bm, U) d(loss)/d(c_{t-1}) carried backwards */
        float *bsum;                    /* (4U) b_ih + b_hh (zeros without bias), added in the cell */
        float *zeros;                   /* (Bm, U) c_{-1} */
        float *db;                      /* (nt, 4U) sum of d(pre-activation) over a layer's steps and rows;
                                         * row t > 0: thread t's rows, added to row 0 in t order */
};

/* One step's cell math on the CPU path in force (cells.h; the math is in cellkern.h) */
static inline void cell_fwd(int B, int H, float *gt, const float *bs, const float *cp, float *c, float *tc, float *h)
{
        dt_cell_kern_get()->lstm_fwd(B, H, gt, bs, cp, c, tc, h);
}

static inline void cell_bwd(int B, int H, float *gt, const float *cp, const float *tc, const float *dh, float *dc, float *db)
{
        dt_cell_kern_get()->lstm_bwd(B, H, gt, cp, tc, dh, dc, db);
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

static double lstm_bwd_flops(const void *cfg, const dt_shape *in, const dt_shape *out, int dx)
{
        (void)out;
        return dt_rec_bwd_flops(&((const struct lstm_cfg *)cfg)->r, 4, in, dx);
}

static size_t lstm_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct lstm_cfg *c = cfg;
        size_t T = (size_t)in->d[0], U = (size_t)dt_rec_units(&c->r);
        /* + g, c, tc per layer, and dc, c_{-1} */
        return dt_rec_scratch(&c->r, in, 0) + (size_t)c->r.layers * T * 6 * U + 2 * U;
}

/* ---- the cell ---- */

static dt_rnn_mode lstm_mode(const void *cfg)
{
        (void)cfg;
        return DT_RNN_LSTM;
}

static void lstm_alloc(dt_layer *l, size_t B, size_t T, size_t U)
{
        const struct lstm_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct lstm_priv *p = l->priv;
        for (int k = 0; k < c->r.layers; k++) {
                p->g[k] = o->alloc(l->be, T * B * 4 * U);
                p->c[k] = o->alloc(l->be, T * B * U);
                p->tc[k] = o->alloc(l->be, T * B * U);
        }
        p->dc = o->alloc(l->be, B * U);
        p->bsum = o->alloc(l->be, 4 * U);
        p->zeros = o->alloc(l->be, B * U);
        p->db = o->alloc(l->be, (size_t)p->s.nt * 4 * U);
}

static void lstm_release(dt_layer *l)
{
        const struct lstm_cfg *c = l->cfg;
        struct lstm_priv *p = l->priv;
        float *all[] = { p->dc, p->bsum, p->zeros, p->db };
        for (int k = 0; k < c->r.layers; k++) {
                float *mine[] = { p->g[k], p->c[k], p->tc[k] };
                for (int i = 0; i < 3; i++)
                        if (mine[i]) l->be->ops->free(l->be, mine[i]);
        }
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                if (all[i]) l->be->ops->free(l->be, all[i]);
}

static float *lstm_gates(dt_layer *l, int k) { return ((struct lstm_priv *)l->priv)->g[k]; }

static void lstm_layer_fwd(dt_layer *l, int k, int B)
{
        (void)B;
        const struct lstm_cfg *c = l->cfg;
        struct lstm_priv *p = l->priv;
        const float *bih = dt_rec_p(l, k, 2), *bhh = dt_rec_p(l, k, 3);
        if (c->r.bias)
                for (int j = 0; j < 4 * p->s.U; j++) p->bsum[j] = bih[j] + bhh[j];
}

static void lstm_cell_fwd(dt_layer *l, const dt_rec_step *s)
{
        struct lstm_priv *p = l->priv;
        int k = s->k, t = s->t, U = p->s.U;
        size_t sU = (size_t)s->B * U, sG = 4 * sU;
        float *C = p->c[k] + s->r0 * U, *TC = p->tc[k] + s->r0 * U;
        cell_fwd(s->nr, U, p->g[k] + s->r0 * 4 * U + t * sG, p->bsum, t ? C + (t - 1) * sU : p->zeros, C + t * sU,
                 TC + t * sU, s->h);
}

/* thread t0's rows start: its db row and dc rows from zero */
static void lstm_bwd_begin(dt_layer *l, int k, int B, int t0, long r0, int nr)
{
        (void)k; (void)B;
        struct lstm_priv *p = l->priv;
        int U = p->s.U;
        memset(p->db + (size_t)t0 * 4 * U, 0, (size_t)4 * U * sizeof *p->db);
        if (nr > 0) memset(p->dc + r0 * U, 0, (size_t)nr * U * sizeof *p->dc);
}

/* dG_t in place of the gates, dc_{t-1}; across a bptt cut (no dhp) dc_{t-1} is dropped too */
static const float *lstm_cell_bwd(dt_layer *l, const dt_rec_step *s)
{
        struct lstm_priv *p = l->priv;
        int k = s->k, t = s->t, U = p->s.U;
        size_t sU = (size_t)s->B * U, sG = 4 * sU;
        float *Gt = p->g[k] + s->r0 * 4 * U + t * sG, *C = p->c[k] + s->r0 * U, *TC = p->tc[k] + s->r0 * U;
        float *dc = p->dc + s->r0 * U;
        cell_bwd(s->nr, U, Gt, t ? C + (t - 1) * sU : p->zeros, TC + t * sU, s->dh, dc, p->db + (size_t)s->thread * 4 * U);
        if (!s->dhp) memset(dc, 0, (size_t)s->nr * U * sizeof *dc);
        return Gt;
}

/* the threads' db rows added to row 0 in thread order */
static void lstm_grads(dt_layer *l, int k, int B, float *dL, const float **dA, const float **dGH, const float **dbi,
                       const float **dbh)
{
        (void)B; (void)dL;
        struct lstm_priv *p = l->priv;
        int G4 = 4 * p->s.U;
        for (int t = 1; t < p->s.ran_nt; t++)
                for (int i = 0; i < G4; i++) p->db[i] += p->db[(size_t)t * G4 + i];
        *dA = *dGH = p->g[k];
        *dbi = *dbh = p->db;
}

static const dt_rec_kind lstm_kind = {
        .G = 4, .rows = 1, .stepgemm = 1, .priv_size = sizeof(struct lstm_priv), .mode = lstm_mode,
        .alloc = lstm_alloc, .release = lstm_release, .gates = lstm_gates, .layer_fwd = lstm_layer_fwd,
        .cell_fwd = lstm_cell_fwd, .bwd_begin = lstm_bwd_begin, .cell_bwd = lstm_cell_bwd, .grads = lstm_grads,
};

static int lstm_setup(dt_layer *l, int max_batch) { return dt_rec_setup_whole(l, max_batch, &lstm_kind); }
static int lstm_hidden_setup(dt_layer *l, int max_batch) { return dt_rec_setup_hidden(l, max_batch, &lstm_kind); }

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

static int lstm_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct lstm_cfg *)cfg)->r, backend, caps, why, n);
}

static const dt_layer_ops *lstm_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n);

#define LSTM_OPS(set) \
        .name = "lstm", .cfg_size = sizeof(struct lstm_cfg), \
        .parse = lstm_parse, .infer = lstm_infer, .params = lstm_params, \
        .flops = lstm_flops, .bwd_flops = lstm_bwd_flops, \
        .scratch = lstm_scratch, .supports = lstm_supports, .setup = set, .teardown = dt_rec_teardown, \
        .forward = dt_rec_forward, .backward = dt_rec_backward, .post_init = lstm_post_init, \
        .splits = dt_rec_splits, .nsplits = 1, .shard = lstm_shard, \
        .summary = "LSTM over (T,F): hidden, layers, return_sequences, bptt, forget_bias, bias"

const dt_layer_ops dt_lstm_layer = { LSTM_OPS(lstm_setup) };
static const dt_layer_ops lstm_hidden = { LSTM_OPS(lstm_hidden_setup) };

static const dt_layer_ops *lstm_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        *(struct lstm_cfg *)local = *(const struct lstm_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &lstm_hidden;
}
