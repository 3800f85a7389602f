/* layers/gru.c - stacked GRU, PyTorch's nn.GRU(batch_first=True): (T,F) -> (H) last step of the
 * top layer, or (T,H) with return_sequences. Gate order r, z, n; tensors weight_ih_l{k} (3H,in),
 * weight_hh_l{k} (3H,H), bias_ih_l{k} (3H), bias_hh_l{k} (3H); h0 = 0. bptt = k > 0 truncates
 * backpropagation through time to chunks of k steps.
 *   r = sigm(x W_ir^T + b_ir + h W_hr^T + b_hr)
 *   z = sigm(x W_iz^T + b_iz + h W_hz^T + b_hz)
 *   n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn))
 *   h' = (1 - z) n + z h
 * recurrent.c's driver runs the steps: one GEMM for the input side of all steps, one per step for
 * the hidden side, which it keeps apart (r scales its n part), one each for dW_ih, dW_hh and dX.
 *
 * Split by hidden unit (recurrent.h): the hidden side h W_hn^T is per unit like the rest, so a
 * rank's r, z, n and h' need only its own gate rows and the full h_{t-1}. Gate arrays hold its
 * U = H/t units; the cell's h_{t-1} is its units' (the driver's hl), for the z h term. */
#include "layers/layer.h"
#include "layers/cells.h"
#include "layers/recurrent.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRU_MAX_LAYERS 4

struct gru_cfg {
        struct dt_rec_cfg r;            /* hidden, layers, return_seq, bptt, bias */
};

struct gru_priv {
        struct dt_rec_state s;
        /* below, U = Hl, this rank's units (H unsplit) */
        float *a[GRU_MAX_LAYERS];       /* (T, Bm, 3U) input-side pre-activations, then r, z, n; backward: d(input-side pre) */
        float *hn[GRU_MAX_LAYERS];      /* (T, Bm, U) h W_hn^T + b_hn, kept for dr */
        float *dgh;                     /* (T, Bm, 3U) backward: d(hidden-side pre-activations) */
        float *db;                      /* (2, 3U) d b_ih, d b_hh summed over a layer's steps and rows */
        float *zeros;                   /* (Bm, 3U) h_{-1}, h_{-1} W_hh^T, absent biases */
        float *sink;                    /* (Bm, U) dL/dh_{t-1} across a bptt cut: computed, dropped */
};

/* One step's cell math on the CPU path in force (cells.h; the math is in cellkern.h) */
static inline void cell_fwd(int B, int H, float *at, const float *gh, const float *bih, const float *bhh,
                            const float *hp, float *hn, float *h)
{
        dt_cell_kern_get()->gru_fwd(B, H, at, gh, bih, bhh, hp, hn, h);
}

static inline void cell_bwd(int B, int H, float *at, const float *hn, const float *hp, const float *dh,
                            float *dgh, float *dhp, float *dbi, float *dbh)
{
        dt_cell_kern_get()->gru_bwd(B, H, at, hn, hp, dh, dgh, dhp, dbi, dbh);
}

/* ---- spec ---- */
static int gru_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        return dt_rec_parse(m, &((struct gru_cfg *)cfg)->r, GRU_MAX_LAYERS);
}

static int gru_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        return dt_rec_infer(&((const struct gru_cfg *)cfg)->r, in, out, why, n);
}

/* Per layer: weight_ih, weight_hh[, bias_ih, bias_hh]; torch draws all from U(-1/sqrt(H), 1/sqrt(H)). */
static int gru_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        return dt_rec_params(&((const struct gru_cfg *)cfg)->r, 3, in, ps);
}

static double gru_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        return dt_rec_flops(&((const struct gru_cfg *)cfg)->r, 3, in);
}

static double gru_bwd_flops(const void *cfg, const dt_shape *in, const dt_shape *out, int dx)
{
        (void)out;
        return dt_rec_bwd_flops(&((const struct gru_cfg *)cfg)->r, 3, in, dx);
}

static size_t gru_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct gru_cfg *c = cfg;
        size_t T = (size_t)in->d[0], U = (size_t)dt_rec_units(&c->r);
        /* + a, hn per layer, dgh, and gh, db, zeros, sink */
        return dt_rec_scratch(&c->r, in, 1) + (size_t)c->r.layers * T * 4 * U + T * 3 * U + 7 * U;
}

/* ---- the cell ---- */

static dt_rnn_mode gru_mode(const void *cfg)
{
        (void)cfg;
        return DT_RNN_GRU;
}

static void gru_alloc(dt_layer *l, size_t B, size_t T, size_t U)
{
        const struct gru_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct gru_priv *p = l->priv;
        for (int k = 0; k < c->r.layers; k++) {
                p->a[k] = o->alloc(l->be, T * B * 3 * U);
                p->hn[k] = o->alloc(l->be, T * B * U);
        }
        p->dgh = o->alloc(l->be, T * B * 3 * U);
        p->db = o->alloc(l->be, 6 * U);
        p->zeros = o->alloc(l->be, B * 3 * U);
        p->sink = o->alloc(l->be, B * U);
}

static void gru_release(dt_layer *l)
{
        const struct gru_cfg *c = l->cfg;
        struct gru_priv *p = l->priv;
        float *all[] = { p->dgh, p->db, p->zeros, p->sink };
        for (int k = 0; k < c->r.layers; k++) {
                if (p->a[k]) l->be->ops->free(l->be, p->a[k]);
                if (p->hn[k]) l->be->ops->free(l->be, p->hn[k]);
        }
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                if (all[i]) l->be->ops->free(l->be, all[i]);
}

static float *gru_gates(dt_layer *l, int k) { return ((struct gru_priv *)l->priv)->a[k]; }

/* r, z, n, h_t from A_t = x W_ih^T and gh = h_{t-1} W_hh^T (b_ih, b_hh added in the cell) */
static void gru_cell_fwd(dt_layer *l, const dt_rec_step *s)
{
        const struct gru_cfg *c = l->cfg;
        struct gru_priv *p = l->priv;
        int k = s->k, U = p->s.U;
        size_t sU = (size_t)s->B * U, sG = 3 * sU;
        const float *bih = c->r.bias ? dt_rec_p(l, k, 2) : p->zeros, *bhh = c->r.bias ? dt_rec_p(l, k, 3) : p->zeros;
        cell_fwd(s->nr, U, p->a[k] + s->t * sG, s->gh ? s->gh : p->zeros, bih, bhh, s->hp ? s->hp : p->zeros,
                 p->hn[k] + s->t * sU, s->h);
}

static void gru_bwd_begin(dt_layer *l, int k, int B, int t0, long r0, int nr)
{
        (void)k; (void)t0; (void)r0; (void)nr;
        struct gru_priv *p = l->priv;
        memset(p->db, 0, (size_t)6 * p->s.U * sizeof *p->db);
        memset(p->sink, 0, (size_t)B * p->s.U * sizeof *p->sink);      /* stays bounded */
}

/* dA_t (in place of the gates), dGH_t, dL/dh_{t-1} += dh z (into the sink across a bptt cut) */
static const float *gru_cell_bwd(dt_layer *l, const dt_rec_step *s)
{
        struct gru_priv *p = l->priv;
        int k = s->k, U = p->s.U;
        size_t sU = (size_t)s->B * U, sG = 3 * sU;
        float *dGt = p->dgh + s->t * sG;
        cell_bwd(s->nr, U, p->a[k] + s->t * sG, p->hn[k] + s->t * sU, s->hp ? s->hp : p->zeros, s->dh, dGt,
                 s->dhp ? s->dhp : p->sink, p->db, p->db + 3 * U);
        return dGt;
}

/* dW_ih, dX from dA; dW_hh from dGH; db_hh sums dGH over all steps: b_hh acts at t = 0 too */
static void gru_grads(dt_layer *l, int k, int B, float *dL, const float **dA, const float **dGH, const float **dbi,
                      const float **dbh)
{
        (void)B; (void)dL;
        struct gru_priv *p = l->priv;
        *dA = p->a[k];
        *dGH = p->dgh;
        *dbi = p->db;
        *dbh = p->db + 3 * p->s.U;
}

static const dt_rec_kind gru_kind = {
        .G = 3, .hidden_apart = 1, .keeps_h = 1, .stepgemm = 1, .priv_size = sizeof(struct gru_priv), .mode = gru_mode,
        .alloc = gru_alloc, .release = gru_release, .gates = gru_gates, .cell_fwd = gru_cell_fwd,
        .bwd_begin = gru_bwd_begin, .cell_bwd = gru_cell_bwd, .grads = gru_grads,
};

static int gru_setup(dt_layer *l, int max_batch) { return dt_rec_setup_whole(l, max_batch, &gru_kind); }
static int gru_hidden_setup(dt_layer *l, int max_batch) { return dt_rec_setup_hidden(l, max_batch, &gru_kind); }

static int gru_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct gru_cfg *)cfg)->r, backend, caps, why, n);
}

static const dt_layer_ops *gru_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                     char *why, size_t n);

#define GRU_OPS(set) \
        .name = "gru", .cfg_size = sizeof(struct gru_cfg), \
        .parse = gru_parse, .infer = gru_infer, .params = gru_params, \
        .flops = gru_flops, .bwd_flops = gru_bwd_flops, \
        .scratch = gru_scratch, .supports = gru_supports, .setup = set, .teardown = dt_rec_teardown, \
        .forward = dt_rec_forward, .backward = dt_rec_backward, \
        .splits = dt_rec_splits, .nsplits = 1, .shard = gru_shard, \
        .summary = "GRU over (T,F): hidden, layers, return_sequences, bptt, bias"

const dt_layer_ops dt_gru_layer = { GRU_OPS(gru_setup) };
static const dt_layer_ops gru_hidden = { GRU_OPS(gru_hidden_setup) };

static const dt_layer_ops *gru_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                     char *why, size_t n)
{
        (void)in;
        *(struct gru_cfg *)local = *(const struct gru_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &gru_hidden;
}
