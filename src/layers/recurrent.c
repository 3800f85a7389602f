/* layers/recurrent.c - the keys, shapes, tensors and FLOPs common to rnn, lstm and gru, and the
 * driver that runs their cells (recurrent.h), whole or split by hidden unit. */
#include "layers/recurrent.h"
#include "layers/stepgemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dt_rec_parse(dt_ymap *m, struct dt_rec_cfg *c, int max_layers)
{
        long hidden = 0, layers = 1, bptt = 0;
        int rc = 0;
        if (dt_ymap_int(m, "hidden", &hidden, 0, 1, 1 << 16, 1) < 0) rc = -1;
        if (dt_ymap_int(m, "layers", &layers, 1, 1, max_layers, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "return_sequences", &c->return_seq, 0, 0) < 0) rc = -1;
        if (dt_ymap_int(m, "bptt", &bptt, 0, 0, 1 << 24, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "bias", &c->bias, 1, 0) < 0) rc = -1;
        c->hidden = (int)hidden;
        c->layers = (int)layers;
        c->bptt = (int)bptt;
        return rc;
}

int dt_rec_infer(const struct dt_rec_cfg *c, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        if (in->n != 2) {
                char b[64];
                snprintf(why, n, "needs a sequence input (T,F), got %s; give the data as (T,F), e.g. input: [28, 28]",
                         dt_shape_str(in, b, sizeof b));
                return -1;
        }
        if (c->return_seq) *out = (dt_shape){ 2, { in->d[0], c->hidden } };
        else *out = (dt_shape){ 1, { c->hidden } };
        return 0;
}

/* Split: G blocks of the rank's Hl rows each (parallel/tensor.c cuts and joins them block by
 * block, .groups = G); the fans stay the whole tensor's, which the initialisation draws. */
int dt_rec_params(const struct dt_rec_cfg *c, int G, const dt_shape *in, dt_param_spec *ps)
{
        int H = c->hidden, R = G * dt_rec_units(c), k = 0;
        for (int l = 0; l < c->layers; l++) {
                int I = l ? H : in->d[1];
                const char *names[4] = { "weight_ih_l%d", "weight_hh_l%d", "bias_ih_l%d", "bias_hh_l%d" };
                dt_shape shapes[4] = { { 2, { R, I } }, { 2, { R, H } }, { 1, { R } }, { 1, { R } } };
                for (int t = 0; t < (c->bias ? 4 : 2); t++, k++) {
                        ps[k] = (dt_param_spec){ .shape = shapes[t], .init = DT_INIT_TORCH, .fan_in = H,
                                                 .fan_out = G * H, .trainable = 1, .groups = G };
                        snprintf(ps[k].suffix, sizeof ps[k].suffix, names[t], l);
                }
        }
        return k;
}

/* this rank's share: its Hl units' gates */
double dt_rec_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in)
{
        double T = in->d[0], H = c->hidden, U = dt_rec_units(c), f = 0;
        for (int l = 0; l < c->layers; l++) f += 2.0 * T * G * U * ((l ? H : in->d[1]) + H);
        return f;
}

double dt_rec_bwd_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in, int dx)
{
        int T = in->d[0];
        double H = c->hidden, U = dt_rec_units(c), f = 0;
        double carried = T - 1 - (c->bptt > 0 ? (T - 1) / c->bptt : 0);        /* steps bwd_rows carries */
        for (int l = 0; l < c->layers; l++) {
                double I = l ? H : in->d[1];
                f += 2.0 * T * G * U * I;                       /* dW_ih = dA^T X */
                f += 2.0 * (T - 1) * G * U * H;                 /* dW_hh = dGH^T h */
                f += 2.0 * carried * G * U * H;                 /* dh_{t-1} += dA_t W_hh */
                if (l || dx) f += 2.0 * T * G * U * I;          /* dX = dA W_ih */
        }
        return f;
}

void dt_rec_time_major(float *dst, const float *src, int B, int T, int F)
{
        for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                        memcpy(dst + ((size_t)t * B + b) * F, src + ((size_t)b * T + t) * F, (size_t)F * sizeof *dst);
}

void dt_rec_batch_major(float *dst, const float *src, int B, int T, int F)
{
        for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                        memcpy(dst + ((size_t)b * T + t) * F, src + ((size_t)t * B + b) * F, (size_t)F * sizeof *dst);
}

void dt_rec_output(const struct dt_rec_cfg *c, float *y, const float *top, int B, int T)
{
        size_t sB = (size_t)B * c->hidden;
        if (c->return_seq) dt_rec_batch_major(y, top, B, T, c->hidden);
        else memcpy(y, top + (size_t)(T - 1) * sB, sB * sizeof *y);
}

void dt_rec_seed_grad(const struct dt_rec_cfg *c, float *dH, const float *dy, int B, int T)
{
        size_t sB = (size_t)B * c->hidden;
        if (c->return_seq) {
                dt_rec_time_major(dH, dy, B, T, c->hidden);
        } else {
                memset(dH, 0, (size_t)(T - 1) * sB * sizeof *dH);
                memcpy(dH + (T - 1) * sB, dy, sB * sizeof *dH);
        }
}

int dt_rec_supports(const struct dt_rec_cfg *c, const char *backend, unsigned caps, char *why, size_t n)
{
        if (caps & DT_CAP_HOST_MEMORY) return 0;
        if (dt_rec_nshards(c) > 1) {    /* the fused op runs whole layers; a shard's steps need collectives */
                snprintf(why, n, "a hidden-unit split runs on the cpu backend only, not %s; use --device cpu", backend);
                return -1;
        }
        if (!(caps & DT_CAP_FUSED_RNN)) {
                snprintf(why, n, "the %s backend has no recurrent op; use --device cpu", backend);
                return -1;
        }
        if (c->bptt > 0 && !(caps & DT_CAP_RNN_BPTT)) {
                snprintf(why, n, "bptt is not supported on the %s backend; remove it or use --device cpu", backend);
                return -1;
        }
        return 0;
}

const dt_split_way dt_rec_splits[] = {
        { .split = DT_SPLIT_HIDDEN, .role = DT_ROLE_ALONE, .what = "the units of every gate", .ncoll = 3,
          .coll = { { 1, 0, DT_COLL_STEP, DT_COLL_ALWAYS }, { 0, 1, DT_COLL_STEP, DT_COLL_ALWAYS },
                    { 0, 1, DT_COLL_INPUT, DT_COLL_IF_DX } } },
};

int dt_rec_shard(const struct dt_rec_cfg *c, const dt_placement *pl, struct dt_rec_cfg *lc, char *why, size_t n)
{
        if (pl->nshards < 1 || c->hidden % pl->nshards) {
                snprintf(why, n, "hidden %d does not divide into %d shards of hidden units", c->hidden, pl->nshards);
                return -1;
        }
        lc->t = pl->nshards;
        return 0;
}

/* ---- the driver ---- */

/* What differs between a whole layer and its hidden-unit shard: the collectives, and where the
 * cells' h and dL/dh on the rank's units live. */
struct dt_rec_split {
        /* forward, after a step's cells: h (B, H) of step t from the units' hu (B, U) */
        void (*publish)(dt_layer *l, const float *hu, float *h, int B);
        /* backward, layer k: dL/dh on the rank's units (T, B, U) from dH (T, B, H) */
        float *(*units_grad)(dt_layer *l, float *dH, int T, int B);
        /* dL/dh_{t-1} (nr, U) += dG_t W_hh on the rank's units; dG (nr, G U) */
        void (*carry)(dt_layer *l, int k, const float *dG, float *dhp, int nr);
        /* dx (n floats) of layer k's input, from this rank's gates */
        void (*input_grad)(dt_layer *l, float *dx, size_t n);
};

/* Threads split the batch rows (kinds with rows set): a row's recurrence never reads another row,
 * so thread t runs all T steps of its rows (the step GEMM on its rows, then the cell) with no
 * barrier between steps. Below this many rows per thread the step GEMMs get too thin and one thread
 * runs them whole. A split layer always runs them whole: its steps meet the other ranks in a
 * collective each, which one caller must make for all the rows. */
#define ROWS_PER_THREAD 8

#define WIH(k) dt_rec_p(l, k, 0)
#define WHH(k) dt_rec_p(l, k, 1)

static void *alloc0(dt_layer *l, size_t n) { return l->be->ops->alloc(l->be, n); }
static void put(dt_layer *l, float *p)
{
        if (p) l->be->ops->free(l->be, p);
}

/* whole: the cells write the output sequence itself, and the collectives are none */
static void whole_publish(dt_layer *l, const float *hu, float *h, int B) { (void)l; (void)hu; (void)h; (void)B; }
static float *whole_units_grad(dt_layer *l, float *dH, int T, int B) { (void)l; (void)T; (void)B; return dH; }
static void whole_carry(dt_layer *l, int k, const float *dG, float *dhp, int nr)
{
        const struct dt_rec_cfg *c = l->cfg;
        const struct dt_rec_state *p = l->priv;
        int H = c->hidden, GU = p->kind->G * p->U;
        if (p->whhp) dt_stepgemm(nr, H, GU, dG, GU, p->whhp, dhp, H);
        else l->be->ops->gemm(l->be, 0, 0, nr, H, GU, 1.0f, dG, GU, WHH(k), H, 1.0f, dhp, H);
}
static void whole_input_grad(dt_layer *l, float *dx, size_t n) { (void)l; (void)dx; (void)n; }

static const struct dt_rec_split whole = { whole_publish, whole_units_grad, whole_carry, whole_input_grad };

/* split by hidden unit: h all-gathered each step; this rank's columns of dH; the recurrent gradient
 * summed over the ranks each step (each holds its units' gate rows of W_hh), dx once per layer */
static void hidden_publish(dt_layer *l, const float *hu, float *h, int B)
{
        const struct dt_rec_state *p = l->priv;
        l->place.tp->allgather_cols(l->place.tp, hu, h, (size_t)B, (size_t)p->U);
}

static float *hidden_units_grad(dt_layer *l, float *dH, int T, int B)
{
        const struct dt_rec_cfg *c = l->cfg;
        struct dt_rec_state *p = l->priv;
        dt_cols_take(p->dhl, dH, (size_t)T * B, (size_t)c->hidden, (size_t)l->place.shard * p->U, (size_t)p->U);
        return p->dhl;
}

static void hidden_carry(dt_layer *l, int k, const float *dG, float *dhp, int nr)
{
        const struct dt_rec_cfg *c = l->cfg;
        const struct dt_rec_state *p = l->priv;
        int H = c->hidden, U = p->U, GU = p->kind->G * U;
        l->be->ops->gemm(l->be, 0, 0, nr, H, GU, 1.0f, dG, GU, WHH(k), H, 0.0f, p->part, H);
        l->place.tp->allreduce(l->place.tp, p->part, (size_t)nr * H);
        const float *mine = p->part + (size_t)l->place.shard * U;
        for (int b = 0; b < nr; b++)
                for (int j = 0; j < U; j++) dhp[(size_t)b * U + j] += mine[(size_t)b * H + j];
}

static void hidden_input_grad(dt_layer *l, float *dx, size_t n) { l->place.tp->allreduce(l->place.tp, dx, n); }

static const struct dt_rec_split hidden = { hidden_publish, hidden_units_grad, hidden_carry, hidden_input_grad };

size_t dt_rec_scratch(const struct dt_rec_cfg *c, const dt_shape *in, int keeps_h)
{
        size_t T = (size_t)in->d[0], F = (size_t)in->d[1], H = (size_t)c->hidden, U = (size_t)dt_rec_units(c);
        size_t n = T * F + (size_t)c->layers * T * H + 2 * T * (F > H ? F : H);
        if (dt_rec_nshards(c) == 1) return n;
        return n + (keeps_h ? (size_t)c->layers * T * U : U) + T * U + H;     /* + hl, dhl, part */
}

/* the fused op of a device backend, instead of the code below */
static int setup_device(dt_layer *l, int max_batch, const dt_rec_kind *kind)
{
        const struct dt_rec_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        if (c->bptt > 0) {
                dt_error("layer '%s' (%s): bptt is not supported on the %s backend; remove it or use --device cpu",
                         l->name, l->ops->name, o->name);
                return -1;
        }
        struct dt_rec_state *q = dt_calloc(1, kind->priv_size);
        l->priv = q;
        q->kind = kind;
        q->Bm = max_batch;
        q->dd = (dt_rnn_desc){ .mode = kind->mode(l->cfg), .T = l->in.d[0], .I = l->in.d[1], .H = c->hidden,
                               .L = c->layers, .bias = c->bias, .return_seq = c->return_seq };
        if (o->rnn_plan(l->be, &q->dd, max_batch) == 0) return 0;
        dt_error("layer '%s' (%s) cannot run on the %s backend", l->name, l->ops->name, o->name);
        return -1;
}

/* the state, the kind's buffers and split's: the setups' common part */
static int setup(dt_layer *l, int max_batch, const dt_rec_kind *kind, const struct dt_rec_split *sp)
{
        const struct dt_rec_cfg *c = l->cfg;
        if (l->be->ops->rnn_plan) return setup_device(l, max_batch, kind);
        if (!dt_backend_supports(l->be, DT_CAP_HOST_MEMORY)) {
                dt_error("layer '%s' (%s) runs on the cpu backend only, not '%s'", l->name, l->ops->name,
                         l->be->ops->name);
                return -1;
        }
        struct dt_rec_state *p = dt_calloc(1, kind->priv_size);
        size_t B = (size_t)max_batch, T = (size_t)l->in.d[0], F = (size_t)l->in.d[1], H = (size_t)c->hidden;
        size_t U = (size_t)dt_rec_units(c);
        l->priv = p;
        p->kind = kind;
        p->sp = sp;
        p->Bm = max_batch;
        p->U = (int)U;
        p->nt = dt_par_threads(l->be);
        p->rows_nt = 1;
        p->xt = alloc0(l, T * B * F);
        for (int k = 0; k < c->layers; k++) p->hu[k] = p->h[k] = alloc0(l, T * B * H);
        p->hu_w = (int)H;
        for (int k = 0; k < 2; k++) p->dh[k] = alloc0(l, T * B * (F > H ? F : H));
        if (kind->hidden_apart) p->gh = alloc0(l, B * kind->G * U);
        kind->alloc(l, B, T, U);
        return 0;
}

int dt_rec_setup_whole(dt_layer *l, int max_batch, const dt_rec_kind *kind)
{
        if (setup(l, max_batch, kind, &whole) < 0) return -1;
        const struct dt_rec_cfg *c = l->cfg;
        struct dt_rec_state *p = l->priv;
        if (p->dd.state) return 0;
        int GU = kind->G * p->U;
        if (kind->stepgemm && dt_stepgemm_ok(GU) && dt_stepgemm_ok(c->hidden)) {
                p->whht = alloc0(l, (size_t)c->hidden * GU);
                p->whhp = alloc0(l, (size_t)c->hidden * GU);
        }
        if (kind->rows) p->rows_nt = p->nt;
        return 0;
}

int dt_rec_setup_hidden(dt_layer *l, int max_batch, const dt_rec_kind *kind)
{
        if (setup(l, max_batch, kind, &hidden) < 0) return -1;
        const struct dt_rec_cfg *c = l->cfg;
        struct dt_rec_state *p = l->priv;
        if (p->dd.state) {      /* setup refuses a split off the cpu first */
                dt_error("layer '%s' (%s): a hidden-unit split runs on the cpu backend only", l->name, l->ops->name);
                return -1;
        }
        size_t B = (size_t)max_batch, T = (size_t)l->in.d[0], U = (size_t)p->U;
        for (int k = 0; k < c->layers; k++)
                p->hu[k] = kind->keeps_h || k == 0 ? (p->hl[k] = alloc0(l, (kind->keeps_h ? T : 1) * B * U)) : p->hl[0];
        p->hu_w = kind->keeps_h ? (int)U : 0;
        p->dhl = alloc0(l, T * B * U);
        p->part = alloc0(l, B * (size_t)c->hidden);
        return 0;
}

void dt_rec_teardown(dt_layer *l)
{
        const struct dt_rec_cfg *c = l->cfg;
        struct dt_rec_state *p = l->priv;
        if (!p) return;
        if (p->dd.state) {      /* the other buffers are NULL then */
                l->be->ops->op_release(l->be, p->dd.state);
        } else {
                p->kind->release(l);
                put(l, p->xt);
                for (int k = 0; k < c->layers; k++) {
                        put(l, p->h[k]);
                        put(l, p->hl[k]);
                }
                put(l, p->dh[0]);
                put(l, p->dh[1]);
                put(l, p->gh);
                put(l, p->whht);
                put(l, p->whhp);
                put(l, p->dhl);
                put(l, p->part);
        }
        free(p);
        l->priv = NULL;
}

/* ---- the steps, on a range of batch rows [r0, r1) (see ROWS_PER_THREAD) ---- */
struct rjob {
        dt_layer *l;
        int k, B;
        float *dL;      /* backward: dL/dh of layer k on the rank's units, (T, B, U) */
        int nt;         /* backward: the thread count the region ran with (set by thread 0) */
};

static void run(dt_layer *l, dt_par_fn fn, struct rjob *j)
{
        const struct dt_rec_state *p = l->priv;
        if (p->rows_nt > 1 && j->B >= ROWS_PER_THREAD * p->rows_nt) dt_par_run(l->be, fn, j);
        else fn(j, 0, 1);
}

/* this step's h on the rank's units at row r0 */
static float *units_h(const struct dt_rec_state *p, int k, int t, int B, long r0)
{
        return p->hu[k] + ((size_t)t * B) * p->hu_w + (size_t)r0 * p->U;
}

/* Rows [r0, r1) of layer k, t = 0 .. T-1:
 *   hidden_apart:  gh = h_{t-1} W_hh^T            else  G_t += h_{t-1} W_hh^T    (t > 0)
 *   the cell;  h_t whole from the units' (split: all-gathered) */
static void fwd_rows(void *arg, int t0, int nt)
{
        const struct rjob *j = arg;
        dt_layer *l = j->l;
        const struct dt_rec_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct dt_rec_state *p = l->priv;
        const dt_rec_kind *kd = p->kind;
        const int k = j->k, B = j->B, T = l->in.d[0], H = c->hidden, GU = kd->G * p->U;
        const size_t sB = (size_t)B * H, sG = (size_t)B * GU;
        long r0, r1;
        dt_par_range(B, t0, nt, 1, &r0, &r1);
        const int nr = (int)(r1 - r0);
        if (nr <= 0) return;
        const float *Hs = p->h[k] + r0 * H;
        float *A = kd->gates(l, k) + r0 * GU, *gh = p->gh ? p->gh + r0 * GU : NULL;
        for (int t = 0; t < T; t++) {
                dt_rec_step s = { .k = k, .t = t, .B = B, .r0 = r0, .nr = nr, .thread = t0, .h = units_h(p, k, t, B, r0),
                                  .hp = t ? units_h(p, k, t - 1, B, r0) : NULL };
                if (t && gh && p->whht) {
                        memset(gh, 0, (size_t)nr * GU * sizeof *gh);
                        dt_stepgemm(nr, GU, H, Hs + (t - 1) * sB, H, p->whht, gh, GU);
                        s.gh = gh;
                } else if (t && gh) {
                        o->gemm(l->be, 0, 1, nr, GU, H, 1.0f, Hs + (t - 1) * sB, H, WHH(k), H, 0.0f, gh, GU);
                        s.gh = gh;
                } else if (t && p->whht) {
                        dt_stepgemm(nr, GU, H, Hs + (t - 1) * sB, H, p->whht, A + t * sG, GU);
                } else if (t) {
                        o->gemm(l->be, 0, 1, nr, GU, H, 1.0f, Hs + (t - 1) * sB, H, WHH(k), H, 1.0f, A + t * sG, GU);
                }
                kd->cell_fwd(l, &s);
                p->sp->publish(l, s.h, p->h[k] + t * sB, B);
        }
}

/* Rows [r0, r1) of layer k, t = T-1 .. 0: the cell -> dG_t; dL/dh_{t-1} += dG_t W_hh (or the bptt cut) */
static void bwd_rows(void *arg, int t0, int nt)
{
        struct rjob *j = arg;
        dt_layer *l = j->l;
        const struct dt_rec_cfg *c = l->cfg;
        struct dt_rec_state *p = l->priv;
        const dt_rec_kind *kd = p->kind;
        const int k = j->k, B = j->B, T = l->in.d[0], U = p->U;
        const size_t sU = (size_t)B * U;
        long r0, r1;
        dt_par_range(B, t0, nt, 1, &r0, &r1);
        if (t0 == 0) j->nt = nt;
        const int nr = (int)(r1 - r0);
        if (kd->bwd_begin) kd->bwd_begin(l, k, B, t0, r0, nr);
        if (nr <= 0) return;
        float *dL = j->dL + r0 * U;
        for (int t = T - 1; t >= 0; t--) {
                int carry = t > 0 && !(c->bptt > 0 && t % c->bptt == 0);
                dt_rec_step s = { .k = k, .t = t, .B = B, .r0 = r0, .nr = nr, .thread = t0, .h = units_h(p, k, t, B, r0),
                                  .hp = t ? units_h(p, k, t - 1, B, r0) : NULL, .dh = dL + t * sU,
                                  .dhp = carry ? dL + (t - 1) * sU : NULL };
                const float *dG = kd->cell_bwd(l, &s);
                if (carry) p->sp->carry(l, k, dG, s.dhp, nr);
        }
}

/* ---- forward ----
 * per layer k, input X (T,B,I):
 *   A = X W_ih^T                                   all steps, one GEMM (T*B, G U, I)
 *   the kind's layer step (biases), W_hh^T packed for dt_stepgemm
 *   per step: the recurrent product and the cell  fwd_rows
 * Split: G U gate columns (the rank's units) against the full h_{t-1}; the cell's h_t on those units
 * all-gathered into the full h_t before the next step reads it. */
void dt_rec_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        struct dt_rec_state *p = l->priv;
        if (p->dd.state) {      /* device backend: the fused op */
                l->be->ops->rnn_fwd(l->be, &p->dd, ctx->training, l->p, x, y, B);
                return;
        }
        const struct dt_rec_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        int T = l->in.d[0], F = l->in.d[1], H = c->hidden, GU = p->kind->G * p->U;
        DT_ASSERT(B <= p->Bm);
        dt_rec_time_major(p->xt, x, B, T, F);
        for (int k = 0; k < c->layers; k++) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                o->gemm(l->be, 0, 1, T * B, GU, I, 1.0f, X, I, WIH(k), I, 0.0f, p->kind->gates(l, k), GU);
                if (p->kind->layer_fwd) p->kind->layer_fwd(l, k, B);
                if (p->whht) dt_stepgemm_pack(GU, H, WHH(k), H, 1, p->whht);   /* W_hh^T once per layer and pass */
                struct rjob j = { .l = l, .k = k, .B = B };
                run(l, fwd_rows, &j);
        }
        dt_rec_output(c, y, p->h[c->layers - 1], B, T);
}

/* ---- backward ----
 * per layer k, top down, with dH (T,B,H) = dL/dh from the output or the layer above:
 *   per step t = T-1 .. 0: the cell -> dG_t, then dH_{t-1} += dG_t W_hh (B, H, G U); skipped at a
 *                      bptt chunk start, where the carried state counts as a constant      bwd_rows
 *   dW_ih += dA^T X                                 (G U, I, T*B)
 *   dW_hh += dGH_{1..T-1}^T h_{0..T-2}               (G U, H, (T-1)*B)  rows are time-major, so one GEMM
 *   db_ih += dbi;  db_hh += dbh                     the kind's sums
 *   dX = dA W_ih                                    (T*B, I, G U)  the layer below's dH
 * Split: the cells take this rank's columns of dH; dH_{t-1} gets its columns of dG_t W_hh summed
 * over the ranks (one all-reduce per step), dX is all-reduced once. dW_ih, dW_hh (against the full
 * h) and the biases' gradients are this rank's rows, no collective. */
void dt_rec_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y, const float *dy,
                     float *dx, int B)
{
        struct dt_rec_state *p = l->priv;
        if (p->dd.state) {      /* device backend: the fused op */
                l->be->ops->rnn_bwd(l->be, &p->dd, l->p, l->g, x, y, dy, dx, B);
                return;
        }
        (void)ctx;
        const struct dt_rec_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        int T = l->in.d[0], F = l->in.d[1], H = c->hidden, GU = p->kind->G * p->U, cur = 0;
        size_t sG = (size_t)B * GU;
        float *dH = p->dh[0];
        dt_rec_seed_grad(c, dH, dy, B, T);
        for (int k = c->layers - 1; k >= 0; k--) {
                const float *X = k ? p->h[k - 1] : p->xt;
                int I = k ? H : F;
                if (p->whhp) dt_stepgemm_pack(H, GU, WHH(k), H, 0, p->whhp);    /* W_hh, for the steps' carry */
                struct rjob j = { .l = l, .k = k, .B = B, .dL = p->sp->units_grad(l, dH, T, B) };
                run(l, bwd_rows, &j);
                p->ran_nt = j.nt;
                const float *dA, *dGH, *dbi, *dbh;
                p->kind->grads(l, k, B, j.dL, &dA, &dGH, &dbi, &dbh);
                float *gih = l->g[(c->bias ? 4 : 2) * k], *ghh = l->g[(c->bias ? 4 : 2) * k + 1];
                o->gemm(l->be, 1, 0, GU, I, T * B, 1.0f, dA, GU, X, I, 1.0f, gih, I);
                if (T > 1) o->gemm(l->be, 1, 0, GU, H, (T - 1) * B, 1.0f, dGH + sG, GU, p->h[k], H, 1.0f, ghh, H);
                if (c->bias) {
                        o->axpy(l->be, (size_t)GU, 1.0f, dbi, l->g[4 * k + 2]);
                        o->axpy(l->be, (size_t)GU, 1.0f, dbh, l->g[4 * k + 3]);
                }
                if (k == 0 && !dx) break;
                float *dX = p->dh[cur ^ 1];
                o->gemm(l->be, 0, 0, T * B, I, GU, 1.0f, dA, GU, WIH(k), I, 0.0f, dX, I);
                p->sp->input_grad(l, dX, (size_t)T * B * I);    /* split: every rank's units' part */
                cur ^= 1;
                dH = dX;
        }
        if (dx) dt_rec_batch_major(dx, dH, B, T, F);
}
