/* layers/gru.c - stacked GRU, PyTorch's nn.GRU(batch_first=True): (T,F) -> (H) last step of the
 * top layer, or (T,H) with return_sequences. Gate order r, z, n; tensors weight_ih_l{k} (3H,in),
 * weight_hh_l{k} (3H,H), bias_ih_l{k} (3H), bias_hh_l{k} (3H); h0 = 0. bptt = k > 0 truncates
 * backpropagation through time to chunks of k steps.
 *   r = sigm(x W_ir^T + b_ir + h W_hr^T + b_hr)
 *   z = sigm(x W_iz^T + b_iz + h W_hz^T + b_hz)
 *   n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn))
 *   h' = (1 - z) n + z h
 * Layout as in lstm.c: time-major (T, B, .) inside, one GEMM for the input side of all steps,
 * one per step for the hidden side, one each for dW_ih, dW_hh and dX.
 *
 * Split by hidden unit (recurrent.h): the hidden side h W_hn^T is per unit like the rest, so a
 * rank's r, z, n and h' need only its own gate rows and the full h_{t-1}. Gate arrays hold its
 * U = H/t units; h the full H (each step all-gathers it), hl its units' h for the cell's z h term. */
#include "layers/layer.h"
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
        int Bm;
        /* below, U = Hl, this rank's units (H unsplit) */
        dt_rnn_desc dd;                 /* device backends: the fused op's plan (dd.state set) */
        float *xt;                      /* (T, Bm, F) the input, time-major */
        float *a[GRU_MAX_LAYERS];       /* (T, Bm, 3U) input-side pre-activations, then r, z, n; backward: d(input-side pre) */
        float *hn[GRU_MAX_LAYERS];      /* (T, Bm, U) h W_hn^T + b_hn, kept for dr */
        float *h[GRU_MAX_LAYERS];       /* (T, Bm, H) the layer's output sequence */
        float *gh;                      /* (Bm, 3U) forward: the step's hidden side h W_hh^T */
        float *dgh;                     /* (T, Bm, 3U) backward: d(hidden-side pre-activations) */
        float *dh[2];                   /* (T, Bm, max(F,H)) ping-pong: d(loss)/d(a layer's output, then input) */
        float *db;                      /* (2, 3U) d b_ih, d b_hh summed over a layer's steps and rows */
        float *zeros;                   /* (Bm, 3U) h_{-1}, h_{-1} W_hh^T, absent biases */
        float *sink;                    /* (Bm, U) dL/dh_{t-1} across a bptt cut: computed, dropped */
        /* split only (NULL whole): */
        float *hl[GRU_MAX_LAYERS];      /* (T, Bm, U) the layer's output sequence on this rank's units */
        float *dhl;                     /* (T, Bm, U) this rank's columns of dH */
        float *part;                    /* (Bm, H) a step's dGH_t W_hh, this rank's part of the sum */
};

#include "layers/cellmath.h"

/* One step forward for B rows. at (B,3H): x W_ih^T in, r, z, n out; gh (B,3H) = h_{t-1} W_hh^T,
 * bih, bhh (3H), hp = h_{t-1} (all zeros where absent). hn (B,H) = gh_n + b_hn is kept for dr.
 * Whole vectors first, the last H mod 16 lanes of a row in scalar code (libm). */
CELL_CLONES
static void cell_fwd(int B, int H, float *at, const float *gh, const float *bih, const float *bhh,
                     const float *hp, float *hn, float *h)
{
        for (int b = 0; b < B; b++) {
                float *ar = at + (size_t)b * 3 * H, *az = ar + H, *an = az + H;
                const float *hr = gh + (size_t)b * 3 * H, *hz = hr + H, *hh = hz + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j + VL <= H; j += VL) {
                        vec vr = ld(ar + j) + ld(bih + j) + ld(hr + j) + ld(bhh + j);
                        vec vz = ld(az + j) + ld(bih + H + j) + ld(hz + j) + ld(bhh + H + j);
                        vec vh = ld(hh + j) + ld(bhh + 2 * H + j);
                        vr = vsigm(&vr);
                        vz = vsigm(&vz);
                        vec vn = ld(an + j) + ld(bih + 2 * H + j) + vr * vh;
                        vn = vtanh(&vn);
                        vec out = vn + vz * (ld(hp + r + j) - vn);
                        st(ar + j, &vr); st(az + j, &vz); st(an + j, &vn);
                        st(hn + r + j, &vh); st(h + r + j, &out);
                }
                for (; j < H; j++) {
                        float rr = sigmf(ar[j] + bih[j] + hr[j] + bhh[j]);
                        float z = sigmf(az[j] + bih[H + j] + hz[j] + bhh[H + j]);
                        float vh = hh[j] + bhh[2 * H + j];
                        float n = tanhf(an[j] + bih[2 * H + j] + rr * vh);
                        ar[j] = rr; az[j] = z; an[j] = n;
                        hn[r + j] = vh;
                        h[r + j] = n + z * (hp[r + j] - n);
                }
        }
}

/* One step backward. dh (B,H) = dL/dh_t. at (B,3H): r, z, n in; d(input-side pre) out:
 *   dn = dh (1 - z) (1 - n^2)        (d pre of n, input side)
 *   dz = dh (h_{t-1} - n) z (1 - z)
 *   dr = dn hn r (1 - r)
 * dgh (B,3H) = d(hidden-side pre) = (dr, dz, dn r). dhp (B,H) += dh z, the direct path to
 * h_{t-1}. dbi, dbh (3H) += column sums of the two. */
CELL_CLONES
static void cell_bwd(int B, int H, float *at, const float *hn, const float *hp, const float *dh,
                     float *dgh, float *dhp, float *dbi, float *dbh)
{
        const vec one = vset(1.0f);
        for (int b = 0; b < B; b++) {
                float *ar = at + (size_t)b * 3 * H, *az = ar + H, *an = az + H;
                float *gr = dgh + (size_t)b * 3 * H, *gz = gr + H, *gn = gz + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j + VL <= H; j += VL) {
                        vec vr = ld(ar + j), vz = ld(az + j), vn = ld(an + j), vdh = ld(dh + r + j);
                        vec dn = vdh * (one - vz) * (one - vn * vn);
                        vec dz = vdh * (ld(hp + r + j) - vn) * vz * (one - vz);
                        vec dr = dn * ld(hn + r + j) * vr * (one - vr);
                        vec dnh = dn * vr, dp = ld(dhp + r + j) + vdh * vz;
                        st(ar + j, &dr); st(az + j, &dz); st(an + j, &dn);
                        st(gr + j, &dr); st(gz + j, &dz); st(gn + j, &dnh);
                        st(dhp + r + j, &dp);
                        dnh += ld(dbh + 2 * H + j);
                        dn += ld(dbi + 2 * H + j);
                        dr += ld(dbi + j);
                        dz += ld(dbi + H + j);
                        st(dbi + j, &dr); st(dbi + H + j, &dz); st(dbi + 2 * H + j, &dn);
                        st(dbh + j, &dr); st(dbh + H + j, &dz); st(dbh + 2 * H + j, &dnh);
                }
                for (; j < H; j++) {
                        float rr = ar[j], z = az[j], n = an[j], d = dh[r + j];
                        float dn = d * (1 - z) * (1 - n * n);
                        float dz = d * (hp[r + j] - n) * z * (1 - z);
                        float dr = dn * hn[r + j] * rr * (1 - rr);
                        ar[j] = gr[j] = dr; az[j] = gz[j] = dz; an[j] = dn; gn[j] = dn * rr;
                        dhp[r + j] += d * z;
                        dbi[j] += dr; dbi[H + j] += dz; dbi[2 * H + j] += dn;
                        dbh[j] += dr; dbh[H + j] += dz; dbh[2 * H + j] += dn * rr;
                }
        }
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

static size_t gru_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct gru_cfg *c = cfg;
        size_t T = (size_t)in->d[0], F = (size_t)in->d[1], H = (size_t)c->r.hidden, U = (size_t)dt_rec_units(&c->r);
        size_t n = T * F + (size_t)c->r.layers * T * (4 * U + H) + T * 3 * U + 2 * T * (F > H ? F : H) + 7 * U; /* + gh, zeros, sink */
        return dt_rec_nshards(&c->r) > 1 ? n + (size_t)c->r.layers * T * U + T * U + H : n;    /* + hl, dhl, part */
}

/* ---- state ---- */
static int gru_setup(dt_layer *l, int max_batch)
{
        const struct gru_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        if (o->rnn_plan) {      /* device backend: its fused recurrent op (cuDNN) instead of the code below */
                if (c->r.bptt > 0) {
                        dt_error("layer '%s' (gru): bptt is not supported on the %s backend; remove it or use --device cpu",
                                 l->name, o->name);
                        return -1;
                }
                struct gru_priv *q = dt_calloc(1, sizeof *q);
                l->priv = q;
                q->Bm = max_batch;
                q->dd = (dt_rnn_desc){ .mode = DT_RNN_GRU, .T = l->in.d[0], .I = l->in.d[1], .H = c->r.hidden,
                                       .L = c->r.layers, .bias = c->r.bias, .return_seq = c->r.return_seq };
                if (o->rnn_plan(l->be, &q->dd, max_batch) == 0) return 0;
                dt_error("layer '%s' (gru) cannot run on the %s backend", l->name, o->name);
                return -1;
        }
        if (!dt_backend_supports(l->be, DT_CAP_HOST_MEMORY)) {
                dt_error("layer '%s' (gru) runs on the cpu backend only, not '%s'", l->name, o->name);
                return -1;
        }
        struct gru_priv *p = dt_calloc(1, sizeof *p);
        size_t B = (size_t)max_batch, T = (size_t)l->in.d[0], F = (size_t)l->in.d[1], H = (size_t)c->r.hidden;
        size_t U = (size_t)dt_rec_units(&c->r);
        int split = dt_rec_nshards(&c->r) > 1;
        p->Bm = max_batch;
        p->xt = o->alloc(l->be, T * B * F);
        for (int k = 0; k < c->r.layers; k++) {
                p->a[k] = o->alloc(l->be, T * B * 3 * U);
                p->hn[k] = o->alloc(l->be, T * B * U);
                p->h[k] = o->alloc(l->be, T * B * H);
                if (split) p->hl[k] = o->alloc(l->be, T * B * U);
        }
        p->gh = o->alloc(l->be, B * 3 * U);
        p->dgh = o->alloc(l->be, T * B * 3 * U);
        for (int k = 0; k < 2; k++) p->dh[k] = o->alloc(l->be, T * B * (F > H ? F : H));
        p->db = o->alloc(l->be, 6 * U);
        p->zeros = o->alloc(l->be, B * 3 * U);
        p->sink = o->alloc(l->be, B * U);
        if (split) {
                p->dhl = o->alloc(l->be, T * B * U);
                p->part = o->alloc(l->be, B * H);
        }
        l->priv = p;
        return 0;
}

static void gru_teardown(dt_layer *l)
{
        const struct gru_cfg *c = l->cfg;
        struct gru_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);   /* the other buffers are NULL then */
        dt_backend *be = l->be;
        be->ops->free(be, p->xt);
        for (int k = 0; k < c->r.layers; k++) {
                be->ops->free(be, p->a[k]);
                be->ops->free(be, p->hn[k]);
                be->ops->free(be, p->h[k]);
                if (p->hl[k]) be->ops->free(be, p->hl[k]);
        }
        if (p->dhl) be->ops->free(be, p->dhl);
        if (p->part) be->ops->free(be, p->part);
        be->ops->free(be, p->gh);
        be->ops->free(be, p->dgh);
        be->ops->free(be, p->dh[0]);
        be->ops->free(be, p->dh[1]);
        be->ops->free(be, p->db);
        be->ops->free(be, p->zeros);
        be->ops->free(be, p->sink);
        free(p);
        l->priv = NULL;
}

/* parameter views of layer k */
#define NPL (c->r.bias ? 4 : 2)
#define WIH(k) l->p[NPL * (k)]
#define WHH(k) l->p[NPL * (k) + 1]

/* ---- forward ----
 * per layer k, input X (T,B,I):
 *   A = X W_ih^T                                   all steps, one GEMM (T*B, 3H, I)
 *   gh = h_{t-1} W_hh^T                            per step, one GEMM (B, 3H, H), t > 0
 *   r, z, n, h_t (b_ih, b_hh added in the cell)    cell_fwd
 * Split: 3U gate columns (the rank's units) against the full h_{t-1}; the cell's h_t on those units
 * (hl, which the next step's z h term reads) is all-gathered into the full h_t. */
static void gru_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (((struct gru_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_fwd(l->be, &((struct gru_priv *)l->priv)->dd, ctx->training, l->p, x, y, B);
                return;
        }
        const struct gru_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct gru_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, U = dt_rec_units(&c->r), G3 = 3 * U;
        size_t sB = (size_t)B * H, sU = (size_t)B * U, sG = (size_t)B * G3;
        DT_ASSERT(B <= p->Bm);
        dt_rec_time_major(p->xt, x, B, T, F);
        for (int k = 0; k < c->r.layers; k++) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *A = p->a[k], *HN = p->hn[k], *Hs = p->h[k], *HL = p->hl[k] ? p->hl[k] : Hs;
                const float *bih = c->r.bias ? l->p[4 * k + 2] : p->zeros, *bhh = c->r.bias ? l->p[4 * k + 3] : p->zeros;
                o->gemm(l->be, 0, 1, T * B, G3, I, 1.0f, X, I, WIH(k), I, 0.0f, A, G3);
                for (int t = 0; t < T; t++) {
                        const float *hp = t ? HL + (t - 1) * sU : p->zeros;     /* this rank's units of h_{t-1} */
                        if (t) o->gemm(l->be, 0, 1, B, G3, H, 1.0f, Hs + (t - 1) * sB, H, WHH(k), H, 0.0f, p->gh, G3);
                        cell_fwd(B, U, A + t * sG, t ? p->gh : p->zeros, bih, bhh, hp, HN + t * sU, HL + t * sU);
                        if (p->hl[k]) dt_rec_gather_h(l, HL + t * sU, Hs + t * sB, B, U);
                }
        }
        const float *top = p->h[c->r.layers - 1];
        dt_rec_output(&c->r, y, top, B, T);
}

/* ---- backward ----
 * per layer k, top down, with dH (T,B,H) = dL/dh from the output or the layer above:
 *   for t = T-1 .. 0:  cell_bwd -> dA_t (in place), dGH_t, dH_{t-1} += dh z
 *                      dH_{t-1} += dGH_t W_hh        (B, H, 3H)
 *                      both skipped at a bptt chunk start: the carried state counts as a constant
 *   dW_ih += dA^T X;  db_ih += sum dA (in cell_bwd) (3H, I, T*B)
 *   dW_hh += dGH_{1..T-1}^T h_{0..T-2};  db_hh += sum dGH, all steps: b_hh acts at t = 0 too
 *   dX = dA W_ih                                    (T*B, I, 3H)  the layer below's dH
 * Split: the cells take this rank's columns of dH (dhl) and its units' h_{t-1}; dH_{t-1} gets its
 * columns of dGH_t W_hh summed over the ranks (dt_rec_reduce_h, one all-reduce per step) after
 * the direct dh z; dX is all-reduced once. Weight and bias gradients are this rank's rows. */
static void gru_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                         const float *dy, float *dx, int B)
{
        (void)ctx; (void)x; (void)y;
        if (((struct gru_priv *)l->priv)->dd.state) {    /* device backend: the fused op */
                l->be->ops->rnn_bwd(l->be, &((struct gru_priv *)l->priv)->dd, l->p, l->g, x, y, dy, dx, B);
                return;
        }
        const struct gru_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct gru_priv *p = l->priv;
        int T = l->in.d[0], F = l->in.d[1], H = c->r.hidden, U = dt_rec_units(&c->r), G3 = 3 * U, cur = 0;
        size_t sU = (size_t)B * U, sG = (size_t)B * G3;
        float *dH = p->dh[0];
        dt_rec_seed_grad(&c->r, dH, dy, B, T);
        for (int k = c->r.layers - 1; k >= 0; k--) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                float *A = p->a[k], *HN = p->hn[k], *Hs = p->h[k], *DGH = p->dgh;
                const float *HL = p->hl[k] ? p->hl[k] : Hs;
                /* the cells run on this rank's units, so on its columns of dH (all of it unsplit) */
                float *dL = dH;
                if (p->dhl) {
                        dL = p->dhl;
                        dt_cols_take(dL, dH, (size_t)T * B, (size_t)H, (size_t)l->place.shard * U, (size_t)U);
                }
                memset(p->db, 0, (size_t)2 * G3 * sizeof *p->db);
                memset(p->sink, 0, sU * sizeof *p->sink);       /* stays bounded */
                for (int t = T - 1; t >= 0; t--) {
                        int carry = t > 0 && !(c->r.bptt > 0 && t % c->r.bptt == 0);
                        float *dGt = DGH + t * sG;
                        cell_bwd(B, U, A + t * sG, HN + t * sU, t ? HL + (t - 1) * sU : p->zeros, dL + t * sU,
                                 dGt, carry ? dL + (t - 1) * sU : p->sink, p->db, p->db + G3);
                        if (!carry) continue;
                        if (p->part) {  /* split: dGH_t W_hh over all H columns, summed over the ranks' units */
                                o->gemm(l->be, 0, 0, B, H, G3, 1.0f, dGt, G3, WHH(k), H, 0.0f, p->part, H);
                                dt_rec_reduce_h(l, p->part, dL + (t - 1) * sU, B, H, U);
                        } else {
                                o->gemm(l->be, 0, 0, B, H, G3, 1.0f, dGt, G3, WHH(k), H, 1.0f, dL + (t - 1) * sU, H);
                        }
                }
                o->gemm(l->be, 1, 0, G3, I, T * B, 1.0f, A, G3, X, I, 1.0f, l->g[NPL * k], I);
                if (T > 1) o->gemm(l->be, 1, 0, G3, H, (T - 1) * B, 1.0f, DGH + sG, G3, Hs, H, 1.0f, l->g[NPL * k + 1], H);
                if (c->r.bias) {
                        o->axpy(l->be, (size_t)G3, 1.0f, p->db, l->g[4 * k + 2]);
                        o->axpy(l->be, (size_t)G3, 1.0f, p->db + G3, l->g[4 * k + 3]);
                }
                if (k == 0 && !dx) break;
                float *dX = p->dh[cur ^ 1];
                o->gemm(l->be, 0, 0, T * B, I, G3, 1.0f, A, G3, WIH(k), I, 0.0f, dX, I);
                if (p->dhl) l->place.tp->allreduce(l->place.tp, dX, (size_t)T * B * I);  /* every rank's units' part */
                cur ^= 1;
                dH = dX;
        }
        if (dx) dt_rec_batch_major(dx, dH, B, T, F);
}

extern const dt_layer_ops dt_gru_layer;
static const dt_layer_ops *gru_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        *(struct gru_cfg *)local = *(const struct gru_cfg *)cfg;
        return dt_rec_shard(cfg, pl, local, why, n) ? NULL : &dt_gru_layer;
}

static int gru_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        return dt_rec_supports(&((const struct gru_cfg *)cfg)->r, backend, caps, why, n);
}

const dt_layer_ops dt_gru_layer = {
        .name = "gru", .cfg_size = sizeof(struct gru_cfg),
        .parse = gru_parse, .infer = gru_infer, .params = gru_params, .flops = gru_flops,
        .scratch = gru_scratch, .supports = gru_supports, .setup = gru_setup, .teardown = gru_teardown,
        .forward = gru_forward, .backward = gru_backward, .shard = gru_shard, .splits = dt_rec_splits, .nsplits = 1,
        .summary = "GRU over (T,F): hidden, layers, return_sequences, bptt, bias",
};
