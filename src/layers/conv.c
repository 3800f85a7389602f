/* layers/conv.c - 2-D convolution (PyTorch's nn.Conv2d) on (C,H,W) inputs: y = f(W * x + b) with
 * stride, zero padding (symmetric, per side or 'same'), dilation and groups. weight (F, C/G, KH, KW),
 * bias (F). Lowered to im2col + SGEMM over a chunk of samples at once, so each GEMM is large; one
 * input channel takes the direct kernel instead (convdirect.h, direct_rule).
 *
 * Tensor parallel: an output-channel split keeps F/t filters (rows of the weight and bias) and
 * all-gathers the output channels; backward takes its channels of dy and all-reduces dx. It is its
 * own ops (conv_shard returns them): the whole layer's forward and backward around the collectives.
 *
 * The im2col/col2im loops run on host memory: right for the CPU backend, whose pointers are host
 * memory. im2col.c has them per CPU path (the AVX-512 stride-1 forms move whole rows with masked
 * vector loads and stores and sum dx rows in registers), each checked against the row-by-row
 * forms bit for bit. A device backend routes convolution to its conv_plan/conv_fwd/conv_bwd ops.
 *
 * On the cpu backend a layer may instead run through oneDNN (backend/onednn.h), on the same
 * threads and sample ranges as below; which path a layer takes is the backend's 'conv' and, for
 * auto, onednn_rule. Every path is checked against the others and against finite differences. */
#include "layers/layer.h"
#include "backend/onednn.h"
#include "layers/convdirect.h"
#include "layers/im2col.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bound on the per-layer column + reorder scratch (floats); samples are processed in chunks
 * that fit, at least one sample per chunk. 64K floats = 256 KiB: im2col, the GEMMs and col2im of a
 * chunk then run in L2, which measured faster on LeNet-sized layers than one huge GEMM over a
 * column matrix that spills to memory (B=256: 66 ms with 16 MiB chunks against ~30 ms, 1 thread).
 * Not static: the unit tests lower it to exercise the chunk loop, benchmarks may tune it (extern
 * declaration there; read at setup). */
size_t dt_conv_scratch_limit = (size_t)64 << 10;

struct conv_cfg {
        int filters;
        int kh, kw, sh, sw, dh, dw;
        int pt, pb, pl, pr;     /* padding top, bottom, left, right */
        int groups;
        int bias;
        dt_act act;
        float alpha;
        dt_init init;
        int t;                  /* set by conv_shard: filters is then this rank's F/t of t x filters */
};

static int nshards(const struct conv_cfg *c) { return c->t > 1 ? c->t : 1; }

/* Geometry of one layer instance. Shapes: x (B, C, H, W), y (B, F, OH, OW), P = OH*OW,
 * G groups of Cg = C/G input and Fg = F/G output channels, Kg = Cg*KH*KW. */
struct geo { int C, H, W, F, OH, OW, P, G, Cg, Fg, Kg; };

struct conv_priv {
        struct geo g;
        int chunk;              /* samples per im2col chunk */
        int direct;             /* 1x1, stride 1, no padding: x is already the column matrix */
        int nt;                 /* threads the buffers below are made for (dt_par_threads at setup) */
        struct conv_tls {       /* one per thread: thread t works on its own samples (see conv_forward) */
                float *cols;    /* (C*KH*KW, chunk*P) column matrix, groups stacked */
                float *tmp;     /* (F, chunk*P) GEMM output / dz in channel-major order */
                float *dks;     /* the direct kernel's frame, packed weights and lane sums */
                float *dw, *db; /* t > 0: (F, Kg) and (F) partial gradients, added to thread 0's in t order */
                /* cols still holds im2col of x[b0 .. b0+nb) from the last forward (see conv_backward) */
                const float *cols_x;
                int cols_b0, cols_nb;
        } *tl;
        float *z;               /* (B, F, P) pre-activation, only when f'(z) needs z */
        float *yl, *dyl;        /* channel split: this shard's output and its gradient (B, F, P) */
        dt_conv_desc dd;        /* device backends: the fused op's plan (dd.state set) */
        dt_onednn_conv *dn;     /* cpu backend through oneDNN (else im2col) */
        int fused_relu;         /* dn applies relu in its forward */
        dt_convd_geo dk;        /* the direct kernel (convdirect.h) when dk.C, else im2col or dn */
};

/* ---- parse and shapes ---- */

static int conv_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct conv_cfg *c = cfg;
        long f = 0, g = 1;
        int rc = 0;
        if (dt_ymap_int(m, "filters", &f, 0, 1, 65536, 1) < 0) rc = -1;
        c->filters = (int)f;
        if (dt_ymap_pair(m, "kernel", &c->kh, &c->kw, 1, 1, 4096, 1) < 0) rc = -1;
        if (dt_ymap_pair(m, "stride", &c->sh, &c->sw, 1, 1, 4096, 0) < 0) rc = -1;
        if (dt_ymap_pair(m, "dilation", &c->dh, &c->dw, 1, 1, 4096, 0) < 0) rc = -1;
        if (dt_ymap_int(m, "groups", &g, 1, 1, 65536, 0) < 0) rc = -1;
        c->groups = (int)g;

        /* padding: integer, [ph, pw], 'same' (stride 1 only) or 'valid' (= 0) */
        dt_ykey_describe("integer|[a,b]|same|valid", "0");
        yaml_node_t *pv = dt_ymap_get(m, "padding");
        const char *ps = dt_ynode_str(pv);
        int ph = 0, pw = 0;
        if (ps && (!strcmp(ps, "same") || !strcmp(ps, "valid"))) {
                if (!strcmp(ps, "same")) {
                        if (c->sh != 1 || c->sw != 1) {
                                dt_yerr(m->d, m->y, pv, "padding 'same' needs stride 1, got stride [%d, %d]",
                                        c->sh, c->sw);
                                rc = -1;
                        }
                        /* PyTorch: total dilation*(k-1), the smaller half before, the rest after */
                        int th = c->dh * (c->kh - 1), tw = c->dw * (c->kw - 1);
                        c->pt = th / 2; c->pb = th - th / 2;
                        c->pl = tw / 2; c->pr = tw - tw / 2;
                } else {
                        c->pt = c->pb = c->pl = c->pr = 0;
                }
        } else if (ps && ps[0] && !(ps[0] >= '0' && ps[0] <= '9') && ps[0] != '-' && ps[0] != '+') {
                dt_yerr(m->d, m->y, pv, "'padding' must be an integer, a pair [ph, pw], 'same' or 'valid', got '%s'", ps);
                rc = -1;
        } else {
                if (dt_ymap_pair(m, "padding", &ph, &pw, 0, 0, 4096, 0) < 0) rc = -1;
                c->pt = c->pb = ph;
                c->pl = c->pr = pw;
        }
        if (dt_ymap_bool(m, "bias", &c->bias, 1, 0) < 0) rc = -1;
        if (dt_parse_act(m, "activation", &c->act, &c->alpha, DT_ACT_NONE) < 0) rc = -1;
        if (dt_parse_init(m, "init", &c->init, DT_INIT_TORCH) < 0) rc = -1;
        return rc;
}

static int out_dim(int in, int p0, int p1, int k, int dil, int s)
{
        long span = (long)dil * (k - 1) + 1, padded = (long)in + p0 + p1;
        return padded < span ? 0 : (int)((padded - span) / s + 1);
}

static int conv_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        const struct conv_cfg *c = cfg;
        char b[64];
        if (in->n != 3) {
                snprintf(why, n, "needs a (C,H,W) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        int C = in->d[0];
        if (C % c->groups || c->filters % c->groups) {
                snprintf(why, n, "groups %d must divide both the input channels (%d) and filters (%d)",
                         c->groups, C, c->filters);
                return -1;
        }
        int OH = out_dim(in->d[1], c->pt, c->pb, c->kh, c->dh, c->sh);
        int OW = out_dim(in->d[2], c->pl, c->pr, c->kw, c->dw, c->sw);
        if (OH < 1 || OW < 1) {
                snprintf(why, n, "kernel %dx%d (dilation %dx%d) is larger than the padded input %s",
                         c->kh, c->kw, c->dh, c->dw, dt_shape_str(in, b, sizeof b));
                return -1;
        }
        if ((long)C / c->groups * c->kh * c->kw > (1L << 24)) {
                snprintf(why, n, "kernel volume C/groups*KH*KW = %ld is too large",
                         (long)C / c->groups * c->kh * c->kw);
                return -1;
        }
        *out = (dt_shape){ 3, { c->filters * nshards(c), OH, OW } };
        return 0;
}

static int conv_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        const struct conv_cfg *c = cfg;
        int Cg = in->d[0] / c->groups, F = c->filters;
        int fan_in = Cg * c->kh * c->kw, fan_out = F / c->groups * c->kh * c->kw;
        /* torch: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)), the DT_INIT_TORCH bound */
        ps[0] = (dt_param_spec){ .suffix = "weight", .shape = { 4, { F, Cg, c->kh, c->kw } },
                                 .init = c->init, .init_arg = 1.0f, .fan_in = fan_in,
                                 .fan_out = fan_out, .trainable = 1 };
        if (!c->bias) return 1;
        ps[1] = (dt_param_spec){ .suffix = "bias", .shape = { 1, { F } },
                                 .init = c->init == DT_INIT_TORCH ? DT_INIT_TORCH : DT_INIT_ZERO,
                                 .fan_in = fan_in, .fan_out = fan_out, .trainable = 1 };
        return 2;
}

static double conv_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        const struct conv_cfg *c = cfg;
        return 2.0 * c->filters * out->d[1] * out->d[2] * (double)(in->d[0] / c->groups) * c->kh * c->kw;
}

static int needs_z(const struct conv_cfg *c)
{
        return c->act == DT_ACT_GELU || c->act == DT_ACT_GELU_TANH || (c->act == DT_ACT_LEAKY_RELU && c->alpha <= 0);
}

static int is_direct(const struct conv_cfg *c)
{
        return c->kh == 1 && c->kw == 1 && c->sh == 1 && c->sw == 1 &&
               !(c->pt | c->pb | c->pl | c->pr);
}

/* Per sample: the pre-activation when kept. The im2col chunk buffers do not grow with the batch
 * (at most dt_conv_scratch_limit floats per layer, or one sample's worth when that is larger). */
static size_t conv_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)in;
        const struct conv_cfg *c = cfg;
        return needs_z(c) ? (size_t)c->filters * out->d[1] * out->d[2] : 0;
}

static struct geo geo_of(const dt_layer *l)
{
        const struct conv_cfg *c = l->cfg;
        struct geo g = { .C = l->in.d[0], .H = l->in.d[1], .W = l->in.d[2], .F = c->filters,
                         .OH = l->out.d[1], .OW = l->out.d[2], .G = c->groups };
        g.P = g.OH * g.OW;
        g.Cg = g.C / g.G;
        g.Fg = g.F / g.G;
        g.Kg = g.Cg * c->kh * c->kw;
        return g;
}

static dt_conv_desc desc_of(const struct conv_cfg *c, const struct geo *g)
{
        return (dt_conv_desc){ .C = g->C, .H = g->H, .W = g->W, .F = g->F, .OH = g->OH, .OW = g->OW,
                               .KH = c->kh, .KW = c->kw, .SH = c->sh, .SW = c->sw, .DH = c->dh, .DW = c->dw,
                               .G = g->G, .pt = c->pt, .pb = c->pb, .pl = c->pl, .pr = c->pr };
}

/* conv: auto takes oneDNN for a layer when this rule holds. Measured per layer against im2col
 * (bench/conv-paths.sh and `dtrain bench --conv`, 2-core AVX-512 machine, 1 thread, batch 256,
 * forward + backward): 3x3 and 5x5 kernels 1.3-3x faster through oneDNN (cnn's conv2 ~270 against
 * ~90 GFLOP/s; grouped 2x, depthwise 2.8x, lenet's 5x5 with 6 and 16 channels 1.3x), first layers
 * with one input channel even (28x28, 16-32 filters). 1x1 kernels move more bytes than they
 * compute: stride 1 even (128 channels at 4x4), stride 2 (resnet's projections, 16-64 channels)
 * 10-20% slower through oneDNN, whose copies into its blocked format read the skipped columns too;
 * im2col has its direct path for them. */
static int onednn_rule(const struct conv_cfg *c, const struct geo *g)
{
        (void)g;
        return !(c->kh == 1 && c->kw == 1);
}

/* conv: auto takes the direct kernel (convdirect.h) for one input channel and up to 5x5 taps on the
 * AVX2 and AVX-512 paths: K = KH*KW = 9-25 is too short a GEMM for im2col or oneDNN (measured
 * there: faster for lenet's, cnn's and cnn-bn's conv1; slower with 2-3 channels, and as generic C) */
static int direct_rule(const struct conv_cfg *c, const struct geo *g)
{
        return c->sh == 1 && c->sw == 1 && g->G == 1 && g->C == 1 && c->kh * c->kw <= 25 &&
               dt_kfam_isa(&dt_convd_kfam) >= DT_ISA_AVX2;
}

/* Sets p->dn when the backend's choice (and for auto the rule) takes oneDNN for this layer and it
 * can run it; -1 after an error when 'conv: onednn' was asked for and it cannot. */
static int pick_onednn(dt_layer *l, int max_batch)
{
        const struct conv_cfg *c = l->cfg;
        struct conv_priv *p = l->priv;
        int want = l->be->conv;
        if (want == DT_CONV_IM2COL || (want == DT_CONV_AUTO && !onednn_rule(c, &p->g))) return 0;
        dt_conv_desc d = desc_of(c, &p->g);
        const char *why = "";
        /* a thread's share of the batch: the sub-batch its primitives are made for first */
        int mb = max_batch >= p->nt ? (max_batch + p->nt - 1) / p->nt : max_batch;
        p->fused_relu = c->act == DT_ACT_RELU;
        p->dn = dt_onednn_conv_new(&d, c->bias, p->fused_relu, mb, p->nt, &why);
        if (p->dn || want == DT_CONV_AUTO) return 0;
        dt_error("layer '%s' (conv) cannot run through oneDNN (conv: onednn): %s", l->name, why);
        return -1;
}

static int conv_setup(dt_layer *l, int max_batch)
{
        const struct conv_cfg *c = l->cfg;
        struct conv_priv *p = dt_calloc(1, sizeof *p);
        l->priv = p;
        p->g = geo_of(l);
        p->direct = is_direct(c);
        const struct geo *g = &p->g;
        if (l->be->ops->conv_plan) {    /* device backend: its fused convolution (cuDNN), no im2col */
                p->dd = desc_of(c, g);
                if (needs_z(c) && !(p->z = l->be->ops->alloc(l->be, (size_t)max_batch * g->F * g->P))) return -1;
                if (l->be->ops->conv_plan(l->be, &p->dd, max_batch) == 0) return 0;
                dt_error("layer '%s' (conv) cannot run on the %s backend", l->name, l->be->ops->name);
                return -1;
        }
        p->nt = dt_par_threads(l->be);
        if (l->be->conv == DT_CONV_AUTO && direct_rule(c, g))
                p->dk = (dt_convd_geo){ g->C, g->H, g->W, g->F, g->OH, g->OW, c->kh, c->kw, c->pt, c->pl, c->dh, c->dw };
        else if (pick_onednn(l, max_batch) < 0)
                return -1;
        size_t per = ((size_t)g->G * g->Kg + (size_t)g->F) * g->P;   /* cols + tmp per sample */
        size_t nb = dt_conv_scratch_limit / per;
        if (nb < 1) nb = 1;
        if (nb > (size_t)max_batch) nb = (size_t)max_batch;
        p->chunk = (int)nb;
        p->tl = dt_calloc((size_t)p->nt, sizeof *p->tl);
        for (int t = 0; t < p->nt; t++) {
                struct conv_tls *q = &p->tl[t];
                if (p->dk.C) {
                        if (!(q->dks = l->be->ops->alloc(l->be, dt_convd_scratch(&p->dk)))) return -1;
                } else if (!p->direct && !p->dn) {
                        q->cols = l->be->ops->alloc(l->be, nb * g->G * g->Kg * g->P);
                        q->tmp = l->be->ops->alloc(l->be, nb * g->F * g->P);
                        if (!q->cols || !q->tmp) return -1;
                }
                if (t > 0) {
                        q->dw = l->be->ops->alloc(l->be, (size_t)g->F * g->Kg);
                        q->db = l->be->ops->alloc(l->be, (size_t)g->F);
                        if (!q->dw || !q->db) return -1;
                }
        }
        if (needs_z(c)) {
                p->z = l->be->ops->alloc(l->be, (size_t)max_batch * g->F * g->P);
                if (!p->z) return -1;
        }
        return 0;
}

static void conv_teardown(dt_layer *l)
{
        struct conv_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);
        dt_onednn_conv_free(p->dn);
        if (p->yl) l->be->ops->free(l->be, p->yl);
        if (p->dyl) l->be->ops->free(l->be, p->dyl);
        for (int t = 0; p->tl && t < p->nt; t++) {
                struct conv_tls *q = &p->tl[t];
                if (q->cols) l->be->ops->free(l->be, q->cols);
                if (q->tmp) l->be->ops->free(l->be, q->tmp);
                if (q->dks) l->be->ops->free(l->be, q->dks);
                if (q->dw) l->be->ops->free(l->be, q->dw);
                if (q->db) l->be->ops->free(l->be, q->db);
        }
        free(p->tl);
        if (p->z) l->be->ops->free(l->be, p->z);
        free(p);
        l->priv = NULL;
}

/* ---- im2col / col2im: the CPU path's row kernels (im2col.c) ---- */

static void im2col(const struct conv_cfg *c, const struct geo *g, const float *x, int nb, float *cols)
{
        const dt_im2col_geo ig = { g->C, g->H, g->W, g->OH, g->OW, g->P, c->kh, c->kw, c->sh, c->sw, c->pt, c->pl, c->dh, c->dw };
        dt_conv_kern_get()->im2col(&ig, x, nb, cols);
}

static void col2im(const struct conv_cfg *c, const struct geo *g, const float *cols, int nb, float *dx)
{
        const dt_im2col_geo ig = { g->C, g->H, g->W, g->OH, g->OW, g->P, c->kh, c->kw, c->sh, c->sw, c->pt, c->pl, c->dh, c->dw };
        dt_conv_kern_get()->col2im(&ig, cols, nb, dx);
}

/* ---- forward ---- */

/* A region's arguments: thread t of nt takes samples dt_par_range(B, t, nt) and runs the serial
 * code below on them with its own buffers, so with one thread everything is what it was. */
struct job {
        dt_layer *l;
        const float *x, *y;
        float *out;             /* forward: y; backward: dx (NULL: not wanted) */
        float *dz;              /* backward: dy, overwritten by f'(z) dy */
        int B;
        int nt;                 /* backward: the thread count the region ran with (set by thread 0) */
        int parts;              /* backward: BWD_INPUT, BWD_WEIGHT or both (zb-h1 runs them apart) */
};

enum { BWD_INPUT = 1, BWD_WEIGHT = 2 };

/* For a chunk of nb samples, N = nb*P columns, and each group g:
 *   cols = im2col(x)                                  (C*KH*KW, N), rows of group g: [g*Kg, (g+1)*Kg)
 *   T_g  = W_g cols_g                                 (Fg, Kg) x (Kg, N) -> (Fg, N), one SGEMM
 *   z[b][f][p] = T[f][b*P + p] + bias[f]              reorder to (nb, F, P), bias fused
 *   y = f(z)
 * With one sample per chunk T already is z's layout and the reorder is skipped. 1x1 stride-1
 * unpadded convolutions skip im2col: sample b's column matrix is x[b] itself (C, P). */
static void fwd_part(void *arg, int t, int nt)
{
        const struct job *j = arg;
        dt_layer *l = j->l;
        const struct conv_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct conv_priv *p = l->priv;
        struct conv_tls *q = &p->tl[t];
        const struct geo *g = &p->g;
        const float *w = l->p[0], *bias = c->bias ? l->p[1] : NULL, *x = j->x;
        const size_t xs = (size_t)g->C * g->H * g->W, ys = (size_t)g->F * g->P;
        const size_t wg = (size_t)g->Fg * g->Kg;   /* weight floats per group */
        float *y = j->out, *z = p->z ? p->z : y;
        long s0, s1;
        dt_par_range(j->B, t, nt, 1, &s0, &s1);
        if (s1 <= s0) return;

        if (p->dn) {    /* oneDNN, chunk by chunk: z = conv + b, or y = relu(conv + b) in one pass */
                const int ch = dt_onednn_conv_chunk(p->dn);
                for (long b0 = s0; b0 < s1; b0 += ch) {
                        int nb = (int)DT_MIN(ch, s1 - b0);
                        dt_onednn_conv_fwd(p->dn, t, x + b0 * xs, w, bias, (p->fused_relu ? y : z) + b0 * ys, nb);
                        if (c->act != DT_ACT_NONE && !p->fused_relu)
                                o->act_fwd(l->be, c->act, c->alpha, z + b0 * ys, y + b0 * ys, (size_t)nb * ys);
                }
                return;
        }
        if (p->dk.C) {
                const dt_convd_run r = { &p->dk, l->be, c->act, c->alpha, p->chunk, q->dks };
                dt_convd_run_fwd(&r, x, w, bias, z, y, s0, s1);
                return;
        }
        if (p->direct) {
                for (long b = s0; b < s1; b++)
                        for (int k = 0; k < g->G; k++)
                                o->gemm(l->be, 0, 0, g->Fg, g->P, g->Kg, 1.0f, w + (size_t)k * wg, g->Kg,
                                        x + b * xs + (size_t)k * g->Kg * g->P, g->P, 0.0f,
                                        z + b * ys + (size_t)k * g->Fg * g->P, g->P);
                if (bias)
                        for (long b = s0; b < s1; b++)
                                for (int f = 0; f < g->F; f++) {
                                        float *zr = z + b * ys + (size_t)f * g->P, bv = bias[f];
                                        for (int r = 0; r < g->P; r++) zr[r] += bv;
                                }
                if (c->act != DT_ACT_NONE)
                        o->act_fwd(l->be, c->act, c->alpha, z + s0 * ys, y + s0 * ys, (size_t)(s1 - s0) * ys);
                return;
        }

        for (long b0 = s0; b0 < s1; b0 += p->chunk) {
                int nb = (int)DT_MIN(p->chunk, s1 - b0);
                size_t N = (size_t)nb * g->P;
                float *zc = z + b0 * ys;
                float *tt = nb == 1 ? zc : q->tmp;
                im2col(c, g, x + b0 * xs, nb, q->cols);
                for (int k = 0; k < g->G; k++)
                        o->gemm(l->be, 0, 0, g->Fg, (int)N, g->Kg, 1.0f, w + (size_t)k * wg, g->Kg,
                                q->cols + (size_t)k * g->Kg * N, (int)N, 0.0f, tt + (size_t)k * g->Fg * N, (int)N);
                if (nb == 1) {
                        if (bias)
                                for (int f = 0; f < g->F; f++) {
                                        float *zr = zc + (size_t)f * g->P, bv = bias[f];
                                        for (int r = 0; r < g->P; r++) zr[r] += bv;
                                }
                } else {
                        for (int f = 0; f < g->F; f++) {
                                float bv = bias ? bias[f] : 0.0f;
                                for (int b = 0; b < nb; b++) {
                                        const float *sr = tt + ((size_t)f * nb + b) * g->P;
                                        float *d = zc + b * ys + (size_t)f * g->P;
                                        for (int r = 0; r < g->P; r++) d[r] = sr[r] + bv;
                                }
                        }
                }
                if (c->act != DT_ACT_NONE)
                        o->act_fwd(l->be, c->act, c->alpha, zc, y + b0 * ys, (size_t)nb * ys);
        }
        /* the thread's last chunk's columns stay in its cols; its backward starts from that chunk */
        q->cols_x = x;
        q->cols_b0 = (int)(s0 + ((s1 - 1 - s0) / p->chunk) * p->chunk);
        q->cols_nb = (int)(s1 - q->cols_b0);
}

/* With fewer samples than threads the region would leave threads idle: one thread then, whose
 * GEMMs the backend splits instead. */
static void run(dt_layer *l, dt_par_fn fn, struct job *j)
{
        struct conv_priv *p = l->priv;
        if (j->B >= p->nt && p->nt > 1) dt_par_run(l->be, fn, j);
        else fn(j, 0, 1);
}

/* y = f(W * x + b) into y */
static void forward_into(dt_layer *l, const float *x, float *y, int B)
{
        const struct conv_cfg *c = l->cfg;
        struct conv_priv *p = l->priv;

        if (p->dd.state) {      /* device backend: z = conv(x) + b in one op, then y = f(z) */
                const dt_backend_ops *o = l->be->ops;
                const size_t ys = (size_t)p->g.F * p->g.P;
                float *z = p->z ? p->z : y;
                o->conv_fwd(l->be, &p->dd, x, l->p[0], c->bias ? l->p[1] : NULL, z, B);
                if (c->act != DT_ACT_NONE) o->act_fwd(l->be, c->act, c->alpha, z, y, (size_t)B * ys);
                return;
        }
        for (int t = 0; t < p->nt; t++) p->tl[t].cols_x = NULL;
        if (p->dn) dt_onednn_conv_forget(p->dn);
        struct job j = { .l = l, .x = x, .out = y, .B = B };
        run(l, fwd_part, &j);
}

static void conv_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        forward_into(l, x, y, B);
}

/* ---- backward ---- */

/* db[f] += sum over b, p of dz[b][f][p]   (dz is (nb, F, P)), each row summed by the CPU path's
 * row_sum: 16 interleaved partial sums added pairwise at the end, the same order on every path
 * and for any thread count, and no chain of P dependent adds (784 for a 28x28 map: that chain, not
 * memory, bounded a first layer's backward) */
static void bias_grad(float *restrict db, const float *restrict dz, int nb, int F, int P)
{
        float (*row_sum)(const float *, int) = dt_conv_kern_get()->row_sum;
        for (int b = 0; b < nb; b++)
                for (int f = 0; f < F; f++) db[f] += row_sum(dz + ((size_t)b * F + f) * P, P);
}

/* Per chunk: dz = f'(z) dy (written over dy), db[f] += sum over (b, p) of dz[b][f][p]; then per group g:
 *   dZ[f][b*P + p] = dz[b][f][p]                      reorder to (F, N)
 *   dW_g += dZ_g cols_g^T                             (Fg, N) x (N, Kg), one SGEMM
 *   dcols_g = W_g^T dZ_g                              (Kg, Fg) x (Fg, N), into cols (no longer needed)
 *   dx = col2im(dcols)
 * Chunks run last to first: the last chunk's columns are still in the thread's cols from the
 * forward of the same x (recorded there), so a share that fits in one chunk never recomputes
 * im2col. This relies on backward following the forward of the same batch with x unchanged, as
 * the graph runs them. Thread 0 accumulates into dW and db themselves, thread t > 0 into its own
 * zeroed partials, which conv_backward then adds in t order: the sums depend on the thread count,
 * never on timing, and one thread computes exactly the serial sums.
 * zb-h1 runs the halves apart: BWD_INPUT the activation derivative and dx, BWD_WEIGHT (later, from
 * the dz left in dy) db and dW, over the same threads' samples and chunks in the same order, so
 * every sum is the one the two together make; only im2col of the forward's last chunk is redone
 * when dx's columns overwrote it. */
static void bwd_part(void *arg, int t, int nt)
{
        struct job *j = arg;
        dt_layer *l = j->l;
        const struct conv_cfg *c = l->cfg;
        const dt_backend_ops *o = l->be->ops;
        struct conv_priv *p = l->priv;
        struct conv_tls *q = &p->tl[t];
        const struct geo *g = &p->g;
        const float *w = l->p[0], *x = j->x, *y = j->y;
        float *dw = l->g[0], *db = c->bias ? l->g[1] : NULL, *dx = j->out, *dz = j->dz;
        const size_t xs = (size_t)g->C * g->H * g->W, ys = (size_t)g->F * g->P;
        const size_t wg = (size_t)g->Fg * g->Kg;
        const float *zsrc = p->z ? p->z : y;
        long s0, s1;
        dt_par_range(j->B, t, nt, 1, &s0, &s1);
        const int in = j->parts & BWD_INPUT, wt = j->parts & BWD_WEIGHT;
        if (t == 0) j->nt = nt;
        if (t > 0 && wt) {
                memset(q->dw, 0, (size_t)g->F * g->Kg * sizeof *q->dw);
                memset(q->db, 0, (size_t)g->F * sizeof *q->db);
                dw = q->dw;
                if (db) db = q->db;
        }
        if (s1 <= s0) return;

        if (p->dn) {    /* oneDNN, chunk by chunk, last first (its x is still converted from the
                         * forward): dz = f'(z) dy here, then dx, dW and db */
                const int ch = dt_onednn_conv_chunk(p->dn);
                for (long b0 = s0 + ((s1 - 1 - s0) / ch) * ch; b0 >= s0; b0 -= ch) {
                        int nb = (int)DT_MIN(ch, s1 - b0);
                        if (in && c->act != DT_ACT_NONE)
                                o->act_bwd(l->be, c->act, c->alpha, zsrc + b0 * ys, y + b0 * ys, dz + b0 * ys,
                                           dz + b0 * ys, (size_t)nb * ys);
                        dt_onednn_conv_bwd(p->dn, t, x + b0 * xs, w, dz + b0 * ys, in && dx ? dx + b0 * xs : NULL,
                                           wt ? dw : NULL, wt ? db : NULL, nb);
                }
                return;
        }
        const dt_convd_run r = { &p->dk, l->be, c->act, c->alpha, p->chunk, q->dks };
        if (p->dk.C) { dt_convd_run_bwd(&r, in, x, w, zsrc, y, dz, dx, wt ? dw : NULL, wt ? db : NULL, s0, s1); return; }
        if (p->direct) {
                if (in && c->act != DT_ACT_NONE)
                        o->act_bwd(l->be, c->act, c->alpha, zsrc + s0 * ys, y + s0 * ys, dz + s0 * ys, dz + s0 * ys,
                                   (size_t)(s1 - s0) * ys);
                if (wt && db) bias_grad(db, dz + s0 * ys, (int)(s1 - s0), g->F, g->P);
                for (long b = s0; b < s1; b++)
                        for (int k = 0; k < g->G; k++) {
                                const float *dzb = dz + b * ys + (size_t)k * g->Fg * g->P;
                                if (wt)
                                        o->gemm(l->be, 0, 1, g->Fg, g->Kg, g->P, 1.0f, dzb, g->P,
                                                x + b * xs + (size_t)k * g->Kg * g->P, g->P, 1.0f,
                                                dw + (size_t)k * wg, g->Kg);
                                if (in && dx)
                                        o->gemm(l->be, 1, 0, g->Kg, g->P, g->Fg, 1.0f, w + (size_t)k * wg, g->Kg,
                                                dzb, g->P, 0.0f, dx + b * xs + (size_t)k * g->Kg * g->P, g->P);
                        }
                return;
        }

        for (long b0 = s0 + ((s1 - 1 - s0) / p->chunk) * p->chunk; b0 >= s0; b0 -= p->chunk) {
                int nb = (int)DT_MIN(p->chunk, s1 - b0);
                size_t N = (size_t)nb * g->P;
                float *dzc = dz + b0 * ys;
                float *tt = nb == 1 ? dzc : q->tmp;
                /* chunk by chunk, so that dz stays in cache from here to the GEMMs */
                if (in && c->act != DT_ACT_NONE)
                        o->act_bwd(l->be, c->act, c->alpha, zsrc + b0 * ys, y + b0 * ys, dzc, dzc, (size_t)nb * ys);
                if (wt && db) bias_grad(db, dzc, nb, g->F, g->P);
                if (wt && !(q->cols_x == x && q->cols_b0 == b0 && q->cols_nb == nb))
                        im2col(c, g, x + b0 * xs, nb, q->cols);
                if (!wt && !(in && dx)) continue;       /* cols untouched: the weight half may use them */
                q->cols_x = NULL;
                if (nb > 1)
                        for (int f = 0; f < g->F; f++)
                                for (int b = 0; b < nb; b++) {
                                        const float *src = dzc + b * ys + (size_t)f * g->P;
                                        float *dst = tt + ((size_t)f * nb + b) * g->P;
                                        for (int r = 0; r < g->P; r++) dst[r] = src[r];
                                }
                for (int k = 0; wt && k < g->G; k++)
                        o->gemm(l->be, 0, 1, g->Fg, g->Kg, (int)N, 1.0f, tt + (size_t)k * g->Fg * N, (int)N,
                                q->cols + (size_t)k * g->Kg * N, (int)N, 1.0f, dw + (size_t)k * wg, g->Kg);
                if (!(in && dx)) continue;
                for (int k = 0; k < g->G; k++)
                        o->gemm(l->be, 1, 0, g->Kg, (int)N, g->Fg, 1.0f, w + (size_t)k * wg, g->Kg,
                                tt + (size_t)k * g->Fg * N, (int)N, 0.0f, q->cols + (size_t)k * g->Kg * N, (int)N);
                col2im(c, g, q->cols, nb, dx + b0 * xs);
        }
}

/* dz: dy, which the layer consumes (the graph lets it) */
static void backward_parts(dt_layer *l, const float *x, const float *y, float *dz, float *dx, int B, int parts)
{
        const struct conv_cfg *c = l->cfg;
        struct conv_priv *p = l->priv;
        float *dw = l->g[0], *db = c->bias ? l->g[1] : NULL;
        const float *dy = dz;

        if (p->dd.state) {      /* device backend: dz = f'(z) dy, then dW, db, dx in one op */
                /* the fused op has no dx-only form: the input half does it all, the weight half
                 * nothing (the gradients are the same, only complete earlier) */
                if (!(parts & BWD_INPUT)) return;
                const dt_backend_ops *o = l->be->ops;
                const size_t ys = (size_t)p->g.F * p->g.P;
                if (c->act != DT_ACT_NONE)
                        o->act_bwd(l->be, c->act, c->alpha, p->z ? p->z : y, y, dy, dz, (size_t)B * ys);
                o->conv_bwd(l->be, &p->dd, x, l->p[0], dz, dx, dw, db, B);
                return;
        }
        struct job j = { .l = l, .x = x, .y = y, .out = dx, .dz = dz, .B = B, .parts = parts };
        run(l, bwd_part, &j);
        if (!(parts & BWD_WEIGHT)) return;
        const size_t nw = (size_t)p->g.F * p->g.Kg;
        for (int t = 1; t < j.nt; t++) {
                const float *pw = p->tl[t].dw, *pb = p->tl[t].db;
                for (size_t i = 0; i < nw; i++) dw[i] += pw[i];
                if (db)
                        for (int f = 0; f < p->g.F; f++) db[f] += pb[f];
        }
}

static void conv_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                          const float *dy, float *dx, int B)
{
        (void)ctx;
        backward_parts(l, x, y, (float *)dy, dx, B, BWD_INPUT | BWD_WEIGHT);
}

static void conv_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                const float *dy, float *dx, int B)
{
        (void)ctx;
        backward_parts(l, x, y, (float *)dy, dx, B, BWD_INPUT);
}

static void conv_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                 const float *dy, int B)
{
        (void)ctx;
        backward_parts(l, x, y, (float *)dy, NULL, B, BWD_WEIGHT);
}

static const char *conv_impl(const dt_layer *l, const char **detail)
{
        const struct conv_priv *p = l->priv;
        if (detail) *detail = p && p->dn ? dt_onednn_conv_impl(p->dn) : NULL;
        if (!p || p->dd.state) return NULL;     /* a device backend's own */
        return p->dn ? "onednn" : p->dk.C ? "direct" : "im2col";
}

static int conv_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_CONV, backend, "convolution", why, n);
}

/* ---- split by output channel: this shard's F/t channels in yl, its channels of dy in dyl ---- */

static size_t channel_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        const struct conv_cfg *c = cfg;
        return conv_scratch(cfg, in, out) + 2 * (size_t)c->filters * out->d[1] * out->d[2];
}

static int channel_setup(dt_layer *l, int max_batch)
{
        if (conv_setup(l, max_batch) < 0) return -1;
        struct conv_priv *p = l->priv;
        if (p->dd.state) {      /* the fused op writes whole outputs; setup refuses a split off the cpu first */
                dt_error("layer '%s' (conv): a channel split runs on the cpu backend only", l->name);
                return -1;
        }
        p->yl = l->be->ops->alloc(l->be, (size_t)max_batch * p->g.F * p->g.P);
        p->dyl = l->be->ops->alloc(l->be, (size_t)max_batch * p->g.F * p->g.P);
        return p->yl && p->dyl ? 0 : -1;
}

static void channel_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        struct conv_priv *p = l->priv;
        forward_into(l, x, p->yl, B);
        l->place.tp->allgather_cols(l->place.tp, p->yl, y, (size_t)B, (size_t)p->g.F * p->g.P);
}

/* The input half takes this shard's channels of dy and leaves dz there for the weight half; dx
 * sums over the shards' channels. */
static void channel_parts(dt_layer *l, const float *x, const float *dy, float *dx, int B, int parts)
{
        const struct conv_cfg *c = l->cfg;
        struct conv_priv *p = l->priv;
        size_t w = (size_t)p->g.F * p->g.P;
        if (parts & BWD_INPUT) dt_cols_take(p->dyl, dy, (size_t)B, w * c->t, (size_t)l->place.shard * w, w);
        backward_parts(l, x, p->yl, p->dyl, dx, B, parts);
        if (dx) l->place.tp->allreduce(l->place.tp, dx, (size_t)B * p->g.C * p->g.H * p->g.W);
}

static void channel_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                             const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)y;
        channel_parts(l, x, dy, dx, B, BWD_INPUT | BWD_WEIGHT);
}

static void channel_backward_input(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                   const float *dy, float *dx, int B)
{
        (void)ctx;
        (void)y;
        channel_parts(l, x, dy, dx, B, BWD_INPUT);
}

static void channel_backward_weight(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                                    const float *dy, int B)
{
        (void)ctx;
        (void)y;
        channel_parts(l, x, dy, NULL, B, BWD_WEIGHT);
}

static const dt_split_way conv_splits[] = {
        { .split = DT_SPLIT_CHANNEL, .role = DT_ROLE_ALONE, .what = "its output channels", .ncoll = 2,
          .coll = { { 1, 0, DT_COLL_OUTPUT, DT_COLL_ALWAYS }, { 0, 1, DT_COLL_INPUT, DT_COLL_IF_DX } } },
};

static const dt_layer_ops *conv_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n);

#define CONV_OPS(scr, set, fwd, bwd, bwd_in, bwd_w) \
        .name = "conv", .cfg_size = sizeof(struct conv_cfg), \
        .parse = conv_parse, .infer = conv_infer, .params = conv_params, .flops = conv_flops, \
        .scratch = scr, .setup = set, .teardown = conv_teardown, .supports = conv_supports, \
        .forward = fwd, .backward = bwd, .backward_input = bwd_in, .backward_weight = bwd_w, \
        .splits = conv_splits, .nsplits = 1, .shard = conv_shard, .impl = conv_impl, \
        .summary = "2-D convolution: filters, kernel, stride, padding (n, [h, w], same, valid), " \
                   "dilation, groups, bias, activation, alpha, init"

const dt_layer_ops dt_conv_layer = {
        CONV_OPS(conv_scratch, conv_setup, conv_forward, conv_backward, conv_backward_input, conv_backward_weight)
};
static const dt_layer_ops conv_channel = {
        CONV_OPS(channel_scratch, channel_setup, channel_forward, channel_backward, channel_backward_input,
                 channel_backward_weight)
};

static const dt_layer_ops *conv_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        const struct conv_cfg *c = cfg;
        struct conv_cfg *lc = local;
        *lc = *c;
        if (c->groups != 1) {
                snprintf(why, n, "a grouped conv (groups %d) cannot split by channel", c->groups);
                return NULL;
        }
        if (c->filters % pl->nshards) {
                snprintf(why, n, "filters %d do not divide into %d channel shards", c->filters, pl->nshards);
                return NULL;
        }
        lc->filters = c->filters / pl->nshards;
        lc->t = pl->nshards;
        return &conv_channel;
}
