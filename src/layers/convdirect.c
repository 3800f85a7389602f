/* layers/convdirect.c - the direct convolution (convdirect.h): each sample padded into a frame once,
 * then every output a chain over the taps, every weight gradient 16 lane sums; generic C (no FMA),
 * and AVX2 and AVX-512 kernels from one body (convdirect_body.h) that give each other's bits. */
#include "layers/convdirect.h"
#include "layers/im2col.h"

#include <stdint.h>
#include <string.h>
#if DT_ISA_X86
#include <immintrin.h>
#endif

/* floats a frame's last block may read past its end (the widest block, 32 columns) */
#define SLACK 32
/* the widest filter block of any path (FB, FBN): packed weights are sized for it */
#define FB_MAX 8

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* ---- generic ---- */

static void fwd_generic(const struct dt_convd_core *g, const float *xp, const float *wp, const float *bias, float *z)
{
        for (int f = 0; f < g->co; f++)
                for (int oh = 0; oh < g->OH; oh++) {
                        float *restrict zr = z + ((size_t)f * g->OH + oh) * g->OW;
                        const float *wk = wp + (size_t)f * g->K;
                        for (int ow = 0; ow < g->OW; ow++) zr[ow] = 0;
                        for (int c = 0; c < g->Ci; c++)
                                for (int i = 0; i < g->kh; i++) {
                                        const float *r = xp + ((size_t)c * g->Hp + oh + i * g->dh) * g->Wp;
                                        for (int j = 0; j < g->kw; j++, wk++, r += g->dw) {
                                                const float wv = *wk;
                                                for (int ow = 0; ow < g->OW; ow++) zr[ow] += wv * r[ow];
                                        }
                                }
                        if (bias)
                                for (int ow = 0; ow < g->OW; ow++) zr[ow] += bias[f];
                }
}

static void wgrad_generic(const struct dt_convd_core *g, const float *xp, const float *dz, float *lacc)
{
        const int khw = g->kh * g->kw;
        for (int f = 0; f < g->co; f++)
                for (int k = 0; k < g->K; k++) {
                        float *restrict a = lacc + ((size_t)f * g->K + k) * 16;
                        const int c = k / khw, i = k % khw / g->kw, j = k % g->kw;
                        const float *xk = xp + ((size_t)c * g->Hp + (size_t)i * g->dh) * g->Wp + (size_t)j * g->dw;
                        for (int oh = 0; oh < g->OH; oh++) {
                                const float *dr = dz + ((size_t)f * g->OH + oh) * g->OW, *xr = xk + (size_t)oh * g->Wp;
                                for (int ow = 0; ow < g->OW; ow++) a[ow & 15] += dr[ow] * xr[ow];
                        }
                }
}

static const dt_convd_kern k_generic = { .fb = 1, .fbn = 1, .fwd = fwd_generic, .fwd_few = fwd_generic,
                                         .wgrad = wgrad_generic };

#if DT_ISA_X86
/* ---- AVX2: 8 lanes; blocks of 6 filters x 16 columns (dx: 4 rows), 5 taps x 16 lanes (16 registers) ---- */
DT_ISA_BEGIN_AVX2
static const int32_t mask8[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };
static inline __m256i first8(int n) /* lanes [0, n) set */
{
        n = n < 0 ? 0 : n > 8 ? 8 : n;
        return _mm256_loadu_si256((const __m256i *)(mask8 + 8 - n));
}
#define V(f) f##_avx2
#define VT __m256
#define VW 8
#define NV 2
#define FB 6
#define FBN 3
#define RB 4
#define FW 1
#define TG 5
#define V_ZERO() _mm256_setzero_ps()
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_LOADN(p, n) _mm256_maskload_ps((p), first8(n))
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_STOREN(p, v, n) do { int n_ = (n); if (n_ >= 8) _mm256_storeu_ps((p), (v)); \
                               else if (n_ > 0) _mm256_maskstore_ps((p), first8(n_), (v)); } while (0)
#define V_BCAST(p) _mm256_broadcast_ss(p)
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#include "layers/convdirect_body.h"
static const dt_convd_kern k_avx2 = { .fb = FB, .fbn = FBN, .fwd = fwd_avx2, .fwd_few = fwd_few_avx2,
                                      .wgrad = wgrad_avx2 };
#undef V
#undef VT
#undef VW
#undef NV
#undef FB
#undef FBN
#undef RB
#undef FW
#undef TG
#undef V_LOADN
#undef V_STOREN
#undef V_ZERO
#undef V_LOAD
#undef V_STORE
#undef V_BCAST
#undef V_FMA
#undef V_ADD
DT_ISA_END

/* ---- AVX-512: 16 lanes; blocks of 8 filters x 32 columns (dx: 6 rows), 3 filters x 9 taps x 16 lanes ---- */
DT_ISA_BEGIN_AVX512
static inline __mmask16 first16(int n) { return (__mmask16)(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1); }
#define V(f) f##_avx512
#define VT __m512
#define VW 16
#define NV 2
#define FB 8
#define FBN 3
#define RB 6
#define FW 3
#define TG 9
#define V_ZERO() _mm512_setzero_ps()
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_LOADN(p, n) _mm512_maskz_loadu_ps(first16(n), (p))
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_STOREN(p, v, n) do { int n_ = (n); if (n_ > 0) _mm512_mask_storeu_ps((p), first16(n_), (v)); } while (0)
#define V_BCAST(p) _mm512_set1_ps(*(p))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#include "layers/convdirect_body.h"
static const dt_convd_kern k_avx512 = { .fb = FB, .fbn = FBN, .fwd = fwd_avx512, .fwd_few = fwd_few_avx512,
                                        .wgrad = wgrad_avx512 };
DT_ISA_END
#endif

const dt_kfam dt_convd_kfam = {
        .name = "convdirect",
#if DT_ISA_X86
        .v = { &k_generic, &k_avx2, &k_avx512 },
#else
        .v = { &k_generic },
#endif
};

/* ---- drivers: pad, pack, loop the samples ---- */

/* xp (C, Hp, Wp) + SLACK: x (C, H, W) placed at row pt, column pl (either may be negative: a
 * crop), zeros around it */
static void pad(const float *x, int C, int H, int W, int pt, int pl, int Hp, int Wp, float *xp)
{
        const int s0 = pl > 0 ? pl : 0, s1 = W + pl < Wp ? W + pl : Wp;    /* frame columns from x */
        for (int c = 0; c < C; c++)
                for (int r = 0; r < Hp; r++) {
                        float *d = xp + ((size_t)c * Hp + r) * Wp;
                        const int ih = r - pt;
                        if (ih < 0 || ih >= H || s1 <= s0) {
                                memset(d, 0, (size_t)Wp * sizeof *d);
                                continue;
                        }
                        if (s0 > 0) memset(d, 0, (size_t)s0 * sizeof *d);
                        memcpy(d + s0, x + ((size_t)c * H + ih) * W + (s0 - pl), (size_t)(s1 - s0) * sizeof *d);
                        if (s1 < Wp) memset(d + s1, 0, (size_t)(Wp - s1) * sizeof *d);
                }
        memset(xp + (size_t)C * Hp * Wp, 0, SLACK * sizeof *xp);
}

/* the frame and packed weights of the forward (transposed: of dx) */
static struct dt_convd_core core_of(const dt_convd_geo *g, int transposed)
{
        struct dt_convd_core q = { .kh = g->kh, .kw = g->kw, .dh = g->dh, .dw = g->dw };
        q.co = transposed ? g->C : g->F;
        q.Ci = transposed ? g->F : g->C;
        q.OH = transposed ? g->H : g->OH;
        q.OW = transposed ? g->W : g->OW;
        q.Hp = q.OH + g->dh * (g->kh - 1);
        q.Wp = q.OW + g->dw * (g->kw - 1);
        q.K = q.Ci * g->kh * g->kw;
        return q;
}

size_t dt_convd_scratch(const dt_convd_geo *g)
{
        struct dt_convd_core f = core_of(g, 0), b = core_of(g, 1);
        size_t frame = (size_t)f.Ci * f.Hp * f.Wp, tframe = (size_t)b.Ci * b.Hp * b.Wp;
        /* round_up(co, fb) <= co + fb - 1 for every path's fb */
        size_t wp = ((size_t)f.co + FB_MAX - 1) * f.K, twp = ((size_t)b.co + FB_MAX - 1) * b.K;
        size_t lacc = (size_t)f.co * f.K * 16;
        return (frame > tframe ? frame : tframe) + SLACK + (wp > twp ? wp : twp) + lacc;
}

/* wp: co filters as ceil(co/fb) blocks of (K, fb), zeros past co; w(f, k) reads the weight */
static void pack(const dt_convd_geo *g, const struct dt_convd_core *q, int fb, int transposed, const float *w,
                 float *wp)
{
        const int khw = g->kh * g->kw, nf = (int)round_up((size_t)q->co, (size_t)fb);
        for (int f = 0; f < nf; f++)
                for (int k = 0; k < q->K; k++) {
                        float v = 0;
                        if (f < q->co && !transposed) {
                                v = w[(size_t)f * q->K + k];
                        } else if (f < q->co) {      /* w'[c][f'][i][j] = w[f'][c][KH-1-i][KW-1-j] */
                                int f2 = k / khw, i = k % khw / g->kw, j = k % g->kw;
                                v = w[(((size_t)f2 * g->C + f) * g->kh + (g->kh - 1 - i)) * g->kw + (g->kw - 1 - j)];
                        }
                        wp[((size_t)(f / fb) * q->K + k) * fb + f % fb] = v;
                }
}

static float *packed(const dt_convd_geo *g, float *scratch)
{
        const struct dt_convd_core f = core_of(g, 0), b = core_of(g, 1);
        size_t frame = (size_t)f.Ci * f.Hp * f.Wp, tframe = (size_t)b.Ci * b.Hp * b.Wp;
        return scratch + (frame > tframe ? frame : tframe) + SLACK;
}

/* dx of 1-3 channels takes fwd_few: fwd's blocks of FB filters would be mostly zeros */
static int few(const struct dt_convd_core *q, const dt_convd_kern *k) { return q->co <= k->fbn; }

void dt_convd_pack(const dt_convd_geo *g, const float *w, int transposed, float *scratch)
{
        const dt_convd_kern *k = dt_kfam_pick(&dt_convd_kfam);
        const struct dt_convd_core q = core_of(g, transposed);
        pack(g, &q, few(&q, k) ? k->fbn : k->fb, transposed, w, packed(g, scratch));
}

static void forward_on(const dt_convd_geo *g, int transposed, const float *in, const float *bias, int nb, float *out,
                       float *scratch)
{
        const dt_convd_kern *k = dt_kfam_pick(&dt_convd_kfam);
        const struct dt_convd_core q = core_of(g, transposed);
        const int pt = transposed ? g->dh * (g->kh - 1) - g->pt : g->pt;
        const int pl = transposed ? g->dw * (g->kw - 1) - g->pl : g->pl;
        const int ih = transposed ? g->OH : g->H, iw = transposed ? g->OW : g->W;
        const float *wp = packed(g, scratch);
        const size_t ins = (size_t)q.Ci * ih * iw, outs = (size_t)q.co * q.OH * q.OW;
        for (int b = 0; b < nb; b++) {
                pad(in + b * ins, q.Ci, ih, iw, pt, pl, q.Hp, q.Wp, scratch);
                (few(&q, k) ? k->fwd_few : k->fwd)(&q, scratch, wp, bias, out + b * outs);
        }
}

void dt_convd_forward(const dt_convd_geo *g, const float *x, const float *bias, int nb, float *z, float *scratch)
{
        forward_on(g, 0, x, bias, nb, z, scratch);
}

void dt_convd_backward_data(const dt_convd_geo *g, const float *dz, int nb, float *dx, float *scratch)
{
        forward_on(g, 1, dz, NULL, nb, dx, scratch);
}

/* the lane sums (F, K, 16) after the frame and the packed weights */
static float *lanes(const dt_convd_geo *g, float *scratch)
{
        const struct dt_convd_core q = core_of(g, 0);
        return scratch + dt_convd_scratch(g) - (size_t)q.co * q.K * 16;
}

void dt_convd_wgrad_start(const dt_convd_geo *g, float *scratch)
{
        memset(lanes(g, scratch), 0, (size_t)g->F * g->C * g->kh * g->kw * 16 * sizeof(float));
}

void dt_convd_wgrad_add(const dt_convd_geo *g, const float *x, const float *dz, int nb, float *scratch)
{
        const dt_convd_kern *k = dt_kfam_pick(&dt_convd_kfam);
        const struct dt_convd_core q = core_of(g, 0);
        float *lacc = lanes(g, scratch);
        const size_t xs = (size_t)g->C * g->H * g->W, ys = (size_t)g->F * g->OH * g->OW;
        for (int b = 0; b < nb; b++) {
                pad(x + b * xs, g->C, g->H, g->W, g->pt, g->pl, q.Hp, q.Wp, scratch);
                k->wgrad(&q, scratch, dz + b * ys, lacc);
        }
}

/* each (f, tap): its 16 lanes added pairwise, as the bias gradient's row sums */
void dt_convd_wgrad_finish(const dt_convd_geo *g, float *dw, float *scratch)
{
        float *lacc = lanes(g, scratch);
        for (size_t e = 0; e < (size_t)g->F * g->C * g->kh * g->kw; e++) {
                float *a = lacc + e * 16;
                for (int w = 8; w >= 1; w /= 2)
                        for (int l = 0; l < w; l++) a[l] += a[l + w];
                dw[e] += a[0];
        }
}

/* ---- the layer's direct path ---- */

void dt_convd_run_fwd(const dt_convd_run *r, const float *x, const float *w, const float *bias, float *z, float *y,
                      long s0, long s1)
{
        const dt_convd_geo *g = r->g;
        const size_t xs = (size_t)g->C * g->H * g->W, ys = (size_t)g->F * g->OH * g->OW;
        dt_convd_pack(g, w, 0, r->scratch);
        for (long b0 = s0; b0 < s1; b0 += r->chunk) {
                int nb = (int)(s1 - b0 < r->chunk ? s1 - b0 : r->chunk);
                dt_convd_forward(g, x + b0 * xs, bias, nb, z + b0 * ys, r->scratch);
                if (r->act != DT_ACT_NONE)
                        r->be->ops->act_fwd(r->be, r->act, r->alpha, z + b0 * ys, y + b0 * ys, (size_t)nb * ys);
        }
}

/* db sums each (b, f) row as conv.c's bias_grad does, by the same row_sum */
void dt_convd_run_bwd(const dt_convd_run *r, int in, const float *x, const float *w, const float *z, const float *y,
                      float *dz, float *dx, float *dw, float *db, long s0, long s1)
{
        const dt_convd_geo *g = r->g;
        const int P = g->OH * g->OW;
        const size_t xs = (size_t)g->C * g->H * g->W, ys = (size_t)g->F * P;
        float (*row_sum)(const float *, int) = dt_conv_kern_get()->row_sum;
        if (dw) dt_convd_wgrad_start(g, r->scratch);
        if (!in) dx = NULL;
        if (dx) dt_convd_pack(g, w, 1, r->scratch);
        for (long b0 = s0; b0 < s1; b0 += r->chunk) {
                int nb = (int)(s1 - b0 < r->chunk ? s1 - b0 : r->chunk);
                float *dzc = dz + b0 * ys;
                if (in && r->act != DT_ACT_NONE)
                        r->be->ops->act_bwd(r->be, r->act, r->alpha, z + b0 * ys, y + b0 * ys, dzc, dzc, (size_t)nb * ys);
                for (int b = 0; dw && db && b < nb; b++)
                        for (int f = 0; f < g->F; f++) db[f] += row_sum(dzc + ((size_t)b * g->F + f) * P, P);
                if (dw) dt_convd_wgrad_add(g, x + b0 * xs, dzc, nb, r->scratch);
                if (dx) dt_convd_backward_data(g, dzc, nb, dx + b0 * xs, r->scratch);
        }
        if (dw) dt_convd_wgrad_finish(g, dw, r->scratch);
}
