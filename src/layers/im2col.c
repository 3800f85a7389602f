/* layers/im2col.c - convolution's host row kernels per CPU path (im2col.h): im2col, col2im and
 * the bias gradient's row sums, generic, AVX2 (the same C built for AVX2) and AVX-512 (stride-1 rows
 * as masked vector loads and stores, dx rows summed in registers). Every path gives the generic
 * one's bits: the same additions in the same order, no FMA contraction; the unit tests check it. */
#include "layers/im2col.h"

#include <stddef.h>
#include <string.h>
#if DT_ISA_X86
#include <immintrin.h>
#endif

int dt_conv_plain_rows = 0;

/* col2im_gather's per-j tables */
#define COL2IM_MAX_KW 32

/* Output columns ow whose input column iw = ow*s + off lies in [0, W): [*lo, *hi). */
static inline void valid_range(int off, int s, int W, int OW, int *lo, int *hi)
{
        int a = off >= 0 ? 0 : (-off + s - 1) / s;
        int b = W - 1 - off < 0 ? 0 : (W - 1 - off) / s + 1;
        if (b > OW) b = OW;
        if (a > b) a = b;
        *lo = a;
        *hi = b;
}

/* ---- generic, and the same C for AVX2 ----
 * Rows of im2col are short (OW ~ 10-30 floats) and there are many (C*KH*KW*OH a sample). */
#define ROWS_PLAIN(sfx) \
static inline void row_copy_##sfx(float *restrict d, const float *restrict s, int n)  /* d = s + 0.0f */ \
{ \
        /* '+ 0.0f' keeps the compiler from making this a memcpy call; it maps -0 to +0 only */ \
        for (int q = 0; q < n; q++) d[q] = s[q] + 0.0f; \
} \
static inline void row_zero_##sfx(float *d, int n) { for (int q = 0; q < n; q++) d[q] = 0; } \
static inline void row_add_##sfx(float *restrict d, const float *restrict s, int n)   /* d += s */ \
{ \
        for (int q = 0; q < n; q++) d[q] += s[q]; \
} \
/* r's P values summed in 16 interleaved partial sums (element q into lane q mod 16), added \
 * pairwise in a fixed order at the end: the same order on every path and for any thread count, \
 * and no chain of P dependent adds (784 for a 28x28 map) */ \
static float row_sum_##sfx(const float *restrict r, int P) \
{ \
        float a[16] = { 0 }; \
        int q = 0; \
        for (; q + 16 <= P; q += 16) \
                for (int k = 0; k < 16; k++) a[k] += r[q + k]; \
        for (int k = 0; q < P; q++, k++) a[k] += r[q]; \
        for (int w = 8; w >= 1; w /= 2) \
                for (int k = 0; k < w; k++) a[k] += a[k + w]; \
        return a[0]; \
}

#define IM2COL_AVX512 0
ROWS_PLAIN(generic)
#define V(f) f##_generic
#include "layers/im2col_body.h"
#undef V
static const dt_conv_kern k_generic = { .im2col = im2col_generic, .col2im = col2im_generic, .row_sum = row_sum_generic };

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
ROWS_PLAIN(avx2)
#define V(f) f##_avx2
#include "layers/im2col_body.h"
#undef V
static const dt_conv_kern k_avx2 = { .im2col = im2col_avx2, .col2im = col2im_avx2, .row_sum = row_sum_avx2 };
DT_ISA_END

/* ---- AVX-512: a row is one to two masked loads and stores, all inside the row (no read past it) ---- */
DT_ISA_BEGIN_AVX512
#undef IM2COL_AVX512
#define IM2COL_AVX512 1

static inline __mmask16 first(int n) { return (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1); }

static inline void row_copy_avx512(float *restrict d, const float *restrict s, int n)  /* d = s + 0.0f */
{
        const __m512 z = _mm512_setzero_ps();
        for (int q = 0; q < n; q += 16) {
                __mmask16 m = first(n - q);
                _mm512_mask_storeu_ps(d + q, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, s + q), z));
        }
}

static inline void row_zero_avx512(float *d, int n)
{
        const __m512 z = _mm512_setzero_ps();
        for (int q = 0; q < n; q += 16) _mm512_mask_storeu_ps(d + q, first(n - q), z);
}

static inline void row_add_avx512(float *restrict d, const float *restrict s, int n)    /* d += s */
{
        for (int q = 0; q < n; q += 16) {
                __mmask16 m = first(n - q);
                __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + q), _mm512_maskz_loadu_ps(m, s + q));
                _mm512_mask_storeu_ps(d + q, m, v);
        }
}

/* row_sum_generic's lanes, a vector at a time */
static float row_sum_avx512(const float *restrict r, int P)
{
        float a[16] = { 0 };
        int q = 0;
        __m512 v = _mm512_setzero_ps();
        for (; q + 16 <= P; q += 16) v = _mm512_add_ps(v, _mm512_loadu_ps(r + q));
        _mm512_storeu_ps(a, v);
        for (int k = 0; q < P; q++, k++) a[k] += r[q];
        for (int w = 8; w >= 1; w /= 2)
                for (int k = 0; k < w; k++) a[k] += a[k + w];
        return a[0];
}

/* One row of cols, (i, j) of one channel xp, when the column stride is 1 and an output row has at
 * most 16 columns (a 'valid' 5x5 on 14x14 has 10): each output row is one expand load, which puts
 * the row's [lo, hi) input values into those lanes and zeros elsewhere, and one masked store;
 * the masks are the same for every row. */
static void im2col_narrow_avx512(const dt_im2col_geo *g, const float *restrict xp, int i, int off, int lo, int hi,
                                 float *restrict row)
{
        const int OW = g->OW, W = g->W;
        const __mmask16 mrow = (__mmask16)((1u << OW) - 1);
        const __mmask16 mval = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        const __m512 z = _mm512_setzero_ps();
        for (int oh = 0; oh < g->OH; oh++) {
                int ih = oh * g->sh - g->pt + i * g->dh;
                __m512 v = z;
                if (ih >= 0 && ih < g->H && hi > lo)
                        v = _mm512_add_ps(_mm512_maskz_expandloadu_ps(mval, xp + (size_t)ih * W + lo + off), z);
                _mm512_mask_storeu_ps(row + (size_t)oh * OW, mrow, v);
        }
}

/* Both strides 1, AVX-512: each 16-column segment of a dx row is summed in a register over the
 * (i, j) that read it, in the order (i, j) the scatter form below adds them, and stored once.
 * The scatter form's masked read-add-write of a row that the previous j wrote at a shifted
 * position cannot take its value from the store buffer and stalls; it also needs dx zeroed first.
 * The cols row of (i, j) is moved into the segment's lanes by an expand load, which reads only
 * the [lo, hi) part of that row that exists. */
static void col2im_gather_avx512(const dt_im2col_geo *g, const float *restrict cols, int nb, float *restrict dx)
{
        const size_t N = (size_t)nb * g->P, HW = (size_t)g->H * g->W;
        const int W = g->W, OW = g->OW, KW = g->kw;
        int lo[COL2IM_MAX_KW], hi[COL2IM_MAX_KW], off[COL2IM_MAX_KW];
        for (int j = 0; j < KW; j++) {
                off[j] = j * g->dw - g->pl;
                valid_range(off[j], 1, W, OW, &lo[j], &hi[j]);
        }
        for (int b = 0; b < nb; b++)
                for (int ch = 0; ch < g->C; ch++) {
                        float *xp = dx + ((size_t)b * g->C + ch) * HW;
                        const float *cb = cols + (size_t)ch * g->kh * KW * N + (size_t)b * g->P;
                        for (int ih = 0; ih < g->H; ih++)
                                for (int s0 = 0; s0 < W; s0 += 16) {
                                        int n = W - s0 < 16 ? W - s0 : 16;
                                        __m512 acc = _mm512_setzero_ps();
                                        for (int i = 0; i < g->kh; i++) {
                                                int oh = ih + g->pt - i * g->dh;
                                                if (oh < 0 || oh >= g->OH) continue;
                                                const float *ri = cb + (size_t)i * KW * N + (size_t)oh * OW;
                                                for (int j = 0; j < KW; j++) {
                                                        /* input columns [lo+off, hi+off) of this segment */
                                                        int a = lo[j] + off[j], e = hi[j] + off[j];
                                                        if (a < s0) a = s0;
                                                        if (e > s0 + n) e = s0 + n;
                                                        if (a >= e) continue;
                                                        __mmask16 m = (__mmask16)(((1u << (e - s0)) - 1) & ~((1u << (a - s0)) - 1));
                                                        acc = _mm512_add_ps(acc, _mm512_maskz_expandloadu_ps(m, ri + (size_t)j * N + (a - off[j])));
                                                }
                                        }
                                        _mm512_mask_storeu_ps(xp + (size_t)ih * W + s0,
                                                              (__mmask16)(n == 16 ? 0xffffu : (1u << n) - 1), acc);
                                }
                }
}

#define V(f) f##_avx512
#include "layers/im2col_body.h"
#undef V
static const dt_conv_kern k_avx512 = { .im2col = im2col_avx512, .col2im = col2im_avx512, .row_sum = row_sum_avx512 };
DT_ISA_END
#endif

const dt_kfam dt_conv_kfam = {
        .name = "im2col",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &k_avx2, [DT_ISA_AVX512] = &k_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &k_generic },
#endif
};
