/* layers/pool_kern.c - pooling's host kernels per CPU path (pool_kern.h): 2x2 stride-2 max
 * pooling in one pass each way (AVX-512: whole rows in masked vectors; AVX2: eight outputs of a row
 * at a time; generic: the same decisions one window at a time, so all give the same outputs and
 * codes bit for bit), and global average pooling's sixteen-plane sums (AVX-512 and AVX2; the
 * caller's serial loop gives the same bits). */
#include "layers/pool_kern.h"
#include "util/prefetch.h"

#include <stdint.h>
#include <string.h>
#if DT_ISA_X86
#include <immintrin.h>
#endif

/* ---- 2x2 stride 2, one pass each way ----
 * The planes of a call are one sequence of output rows: global row gr = plane * OH + oh reads
 * input rows 2 oh and 2 oh + 1 of its plane and writes y (and the codes) at gr * OW, so rows of
 * consecutive planes sit next to each other in y. Forward: max(max(a, b), max(c, d)) with
 * strict '>' keeps the earlier cell on a tie, so the code (0..3, the window's cells in row-major
 * order) is the first cell holding the maximum; a NaN read makes the caller redo its plane with
 * the general loop, so that the first NaN wins. Backward: every dx element under a window is
 * written once, dy or 0 by the code. */

/* The first input row under global output row gr */
static inline const float *top_row(const float *x, int H, int W, int OH, size_t gr)
{
        size_t pl = gr / (size_t)OH, oh = gr % (size_t)OH;
        return x + pl * (size_t)H * W + 2 * oh * (size_t)W;
}

#if DT_ISA_X86
DT_ISA_BEGIN_AVX512

/* Rows of OW <= 8 outputs are packed R = 16 / OW to a vector: row r's 2 OW inputs sit at lanes
 * [2 OW r, 2 OW (r + 1)) of a 32-lane pair (lo: lanes 0..15, hi: 16..31), so output j of the
 * group reads lanes 2j and 2j + 1 whatever its row, and the outputs of the R rows are contiguous
 * in y. Longer rows go 16 outputs at a time. */
struct pack {
        int R;                          /* rows per vector */
        int s[16];                      /* row r's first lane */
        __mmask16 lo[16], hi[16];       /* row r's lanes in the lo and hi halves */
};

static void pack_of(int OW, struct pack *p)
{
        p->R = OW <= 8 ? 16 / OW : 1;
        for (int r = 0; r < p->R; r++) {
                int s = 2 * OW * r, e = s + 2 * OW;     /* lanes [s, e) of 0..31 */
                unsigned m = 0;
                for (int q = s; q < e && q < 32; q++) m |= 1u << q;
                p->s[r] = s;
                p->lo[r] = (__mmask16)(m & 0xffffu);
                p->hi[r] = (__mmask16)(m >> 16);
        }
}

static const int32_t ev_idx[16] = { 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30 };
static const int32_t od_idx[16] = { 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31 };
static const int32_t il_idx[16] = { 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23 };
static const int32_t ih_idx[16] = { 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };

/* n <= 16 outputs from the pairs in lanes (2j, 2j + 1) of (t0|t1) (top) and (u0|u1) (bottom);
 * returns the NaN lanes */
static inline __mmask16 max4(__m512 t0, __m512 t1, __m512 u0, __m512 u1, int n, float *y, uint8_t *code)
{
        const __m512i ev = _mm512_loadu_si512(ev_idx), od = _mm512_loadu_si512(od_idx);
        __mmask16 mo = (__mmask16)((1u << n) - 1);
        __m512 a = _mm512_permutex2var_ps(t0, ev, t1), b = _mm512_permutex2var_ps(t0, od, t1);
        __m512 c = _mm512_permutex2var_ps(u0, ev, u1), d = _mm512_permutex2var_ps(u0, od, u1);
        __mmask16 nan = _mm512_mask_cmp_ps_mask(mo, a, b, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(mo, c, d, _CMP_UNORD_Q);
        __mmask16 ab = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ), cd = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ);
        __m512 top = _mm512_mask_blend_ps(ab, a, b), bot = _mm512_mask_blend_ps(cd, c, d);
        __mmask16 lo = _mm512_cmp_ps_mask(bot, top, _CMP_GT_OQ);
        _mm512_mask_storeu_ps(y, mo, _mm512_mask_blend_ps(lo, top, bot));
        __mmask16 bit0 = (__mmask16)((lo & cd) | (~lo & ab));
        __m128i k = _mm_add_epi8(_mm_maskz_mov_epi8(bit0, _mm_set1_epi8(1)), _mm_maskz_mov_epi8(lo, _mm_set1_epi8(2)));
        _mm_mask_storeu_epi8(code, mo, k);
        return nan;
}

/* Lanes [s, s + 2n) of the 32-lane pair, from row pointer r (n <= 8 outputs per row in a group,
 * or a row's chunk of up to 16 outputs at lane 0). Masked lanes are never read. */
#define LOAD_PAIR(v0, v1, lo, hi, r, s) do { \
        (v0) = _mm512_mask_loadu_ps((v0), (lo), (r) - (s)); \
        (v1) = _mm512_mask_loadu_ps((v1), (hi), (r) - (s) + 16); } while (0)

/* Forward over global rows [g0, g1); *nan_lo..*nan_hi: the planes to redo (none: lo > hi) */
static void fwd_avx512(const float *x, float *y, uint8_t *code, int H, int W, int OH, int OW, size_t g0,
                       size_t g1, size_t *nan_lo, size_t *nan_hi)
{
        struct pack p;
        pack_of(OW, &p);
        for (size_t gr = g0; gr < g1;) {
                __mmask16 nan = 0;
                size_t first = gr;
                if (p.R > 1) {
                        int rr = g1 - gr < (size_t)p.R ? (int)(g1 - gr) : p.R;
                        dt_prefetch_ahead(top_row(x, H, W, OH, gr), (size_t)rr * 2 * W * sizeof(float), 0);
                        __m512 t0 = _mm512_setzero_ps(), t1 = t0, u0 = t0, u1 = t0;
                        for (int r = 0; r < rr; r++) {
                                const float *r0 = top_row(x, H, W, OH, gr + (size_t)r);
                                LOAD_PAIR(t0, t1, p.lo[r], p.hi[r], r0, p.s[r]);
                                LOAD_PAIR(u0, u1, p.lo[r], p.hi[r], r0 + W, p.s[r]);
                        }
                        nan = max4(t0, t1, u0, u1, rr * OW, y + gr * OW, code + gr * OW);
                        gr += (size_t)rr;
                } else {
                        const float *r0 = top_row(x, H, W, OH, gr);
                        dt_prefetch_ahead(r0, 2 * (size_t)W * sizeof(float), 0);
                        for (int ow = 0; ow < OW; ow += 16) {
                                int n = OW - ow < 16 ? OW - ow : 16;
                                __mmask16 mlo = (__mmask16)(n >= 8 ? 0xffffu : (1u << 2 * n) - 1);
                                __mmask16 mhi = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
                                __m512 t0 = _mm512_setzero_ps(), t1 = t0, u0 = t0, u1 = t0;
                                LOAD_PAIR(t0, t1, mlo, mhi, r0 + 2 * ow, 0);
                                LOAD_PAIR(u0, u1, mlo, mhi, r0 + W + 2 * ow, 0);
                                nan |= max4(t0, t1, u0, u1, n, y + gr * OW + ow, code + gr * OW + ow);
                        }
                        gr++;
                }
                if (nan) {
                        size_t a = first / (size_t)OH, b = (gr - 1) / (size_t)OH;
                        if (a < *nan_lo) *nan_lo = a;
                        if (*nan_hi == (size_t)-1 || b > *nan_hi) *nan_hi = b;
                }
        }
}

/* dx's top and bottom rows of the group's pairs (lo|hi) at the lanes [s, s + 2n) */
#define STORE_PAIR(d, lo, hi, s, v0, v1) do { \
        _mm512_mask_storeu_ps((d) - (s), (lo), (v0)); \
        _mm512_mask_storeu_ps((d) - (s) + 16, (hi), (v1)); } while (0)

/* g, code: n <= 16 outputs; (e|o) pairs for the top row in (*t0|*t1), the bottom in (*u0|*u1) */
static inline void unmax4(const float *g, const uint8_t *code, int n, __m512 *t0, __m512 *t1, __m512 *u0, __m512 *u1)
{
        const __m512i il = _mm512_loadu_si512(il_idx), ih = _mm512_loadu_si512(ih_idx);
        __mmask16 mo = (__mmask16)((1u << n) - 1);
        __m512 v = _mm512_maskz_loadu_ps(mo, g);
        __m128i k = _mm_maskz_loadu_epi8(mo, code);
        __m512 e0 = _mm512_maskz_mov_ps(_mm_cmpeq_epi8_mask(k, _mm_set1_epi8(0)), v);
        __m512 o0 = _mm512_maskz_mov_ps(_mm_cmpeq_epi8_mask(k, _mm_set1_epi8(1)), v);
        __m512 e1 = _mm512_maskz_mov_ps(_mm_cmpeq_epi8_mask(k, _mm_set1_epi8(2)), v);
        __m512 o1 = _mm512_maskz_mov_ps(_mm_cmpeq_epi8_mask(k, _mm_set1_epi8(3)), v);
        *t0 = _mm512_permutex2var_ps(e0, il, o0);
        *t1 = _mm512_permutex2var_ps(e0, ih, o0);
        *u0 = _mm512_permutex2var_ps(e1, il, o1);
        *u1 = _mm512_permutex2var_ps(e1, ih, o1);
}

/* Backward over global rows [g0, g1): the two dx rows under each output row, 16 outputs at a
 * time (packing short rows as forward does measured slower here: the stores then straddle rows),
 * an odd last column cleared on the way */
static void bwd_avx512(const float *dy, const uint8_t *code, float *dx, int H, int W, int OH, int OW, size_t g0, size_t g1)
{
        for (size_t gr = g0; gr < g1; gr++) {
                float *d0 = (float *)top_row(dx, H, W, OH, gr);
                dt_prefetch_ahead(d0, 2 * (size_t)W * sizeof(float), 1);
                dt_prefetch_ahead(dy + gr * OW, (size_t)OW * sizeof(float), 0);
                dt_prefetch_ahead(code + gr * OW, (size_t)OW, 0);
                for (int ow = 0; ow < OW; ow += 16) {
                        int n = OW - ow < 16 ? OW - ow : 16;
                        __mmask16 mlo = (__mmask16)(n >= 8 ? 0xffffu : (1u << 2 * n) - 1);
                        __mmask16 mhi = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
                        __m512 t0, t1, u0, u1;
                        unmax4(dy + gr * OW + ow, code + gr * OW + ow, n, &t0, &t1, &u0, &u1);
                        STORE_PAIR(d0 + 2 * ow, mlo, mhi, 0, t0, t1);
                        STORE_PAIR(d0 + W + 2 * ow, mlo, mhi, 0, u0, u1);
                }
                if (W & 1) d0[W - 1] = d0[2 * W - 1] = 0.0f;
        }
}

/* y[pl] = inv * (sum of plane pl's HW values, in order) for sixteen planes at a time, one per lane,
 * so the sixteen additions are independent; returns the first plane of [pl, p1) left undone */
static size_t gap16_avx512(const float *x, float *y, size_t pl, size_t p1, size_t HW, float inv)
{
        if (HW * 16 > INT32_MAX) return pl;
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32((int)HW));
        for (; pl + 16 <= p1; pl += 16) {
                const float *xp = x + pl * HW;
                __m512 s = _mm512_setzero_ps();
                for (size_t q = 0; q < HW; q++) s = _mm512_add_ps(s, _mm512_i32gather_ps(idx, xp + q, 4));
                _mm512_storeu_ps(y + pl, _mm512_mul_ps(s, _mm512_set1_ps(inv)));
        }
        return pl;
}

static const dt_pool_kern k_avx512 = { .max2x2_fwd = fwd_avx512, .max2x2_bwd = bwd_avx512, .gap16 = gap16_avx512 };
DT_ISA_END
#endif

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2

/* byte j of spread8[m] = bit j of m: eight lanes' compare masks to eight code bytes */
static uint64_t spread8[256];
static void spread8_init(void)
{
        if (spread8[255]) return;       /* filled once; every thread writes the same values */
        for (unsigned m = 0; m < 256; m++) {
                uint64_t v = 0;
                for (int j = 0; j < 8; j++) v |= (uint64_t)((m >> j) & 1u) << (8 * j);
                spread8[m] = v;
        }
}

/* lanes [0, n) of a vector, n <= 8 */
static inline __m256i lanes8(int n)
{
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 16 floats from p as (even lanes, odd lanes), reading only [0, m) (m <= 16) */
static inline void load_eo(const float *p, int m, __m256 *e, __m256 *o)
{
        __m256 v0, v1;
        if (m >= 16) {
                v0 = _mm256_loadu_ps(p);
                v1 = _mm256_loadu_ps(p + 8);
        } else {
                v0 = _mm256_maskload_ps(p, lanes8(m));
                v1 = _mm256_maskload_ps(p + 8, lanes8(m - 8));
        }
        /* (0 2 8 10 | 4 6 12 14), then the 64-bit quarters reordered to 0 2 4 6 8 10 12 14 */
        __m256 ev = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)), od = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
        *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
        *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* Forward over global rows [g0, g1), eight outputs of a row at a time (the generic loop's
 * decisions as lane masks) */
static void fwd_avx2(const float *x, float *y, uint8_t *code, int H, int W, int OH, int OW, size_t g0,
                     size_t g1, size_t *nan_lo, size_t *nan_hi)
{
        spread8_init();
        for (size_t gr = g0; gr < g1; gr++) {
                const float *r0 = top_row(x, H, W, OH, gr), *r1 = r0 + W;
                dt_prefetch_ahead(r0, 2 * (size_t)W * sizeof(float), 0);
                float *yr = y + gr * OW;
                uint8_t *kr = code + gr * OW;
                int nan = 0;
                for (int ow = 0; ow < OW; ow += 8) {
                        int n = OW - ow < 8 ? OW - ow : 8;
                        __m256 a, b, c, d;
                        load_eo(r0 + 2 * ow, 2 * n, &a, &b);
                        load_eo(r1 + 2 * ow, 2 * n, &c, &d);
                        nan |= _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q),
                                                               _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
                        __m256 ab = _mm256_cmp_ps(b, a, _CMP_GT_OQ), cd = _mm256_cmp_ps(d, c, _CMP_GT_OQ);
                        __m256 top = _mm256_blendv_ps(a, b, ab), bot = _mm256_blendv_ps(c, d, cd);
                        __m256 lo = _mm256_cmp_ps(bot, top, _CMP_GT_OQ);
                        __m256 v = _mm256_blendv_ps(top, bot, lo);
                        unsigned mab = (unsigned)_mm256_movemask_ps(ab), mcd = (unsigned)_mm256_movemask_ps(cd);
                        unsigned mlo = (unsigned)_mm256_movemask_ps(lo);
                        uint64_t k = spread8[(mlo & mcd) | (~mlo & mab & 0xffu)] + 2 * spread8[mlo];
                        if (n == 8) {
                                _mm256_storeu_ps(yr + ow, v);
                                memcpy(kr + ow, &k, 8);
                        } else {
                                _mm256_maskstore_ps(yr + ow, lanes8(n), v);
                                memcpy(kr + ow, &k, (size_t)n);
                        }
                }
                if (nan) {
                        size_t pl = gr / (size_t)OH;
                        if (pl < *nan_lo) *nan_lo = pl;
                        if (*nan_hi == (size_t)-1 || pl > *nan_hi) *nan_hi = pl;
                }
        }
}

/* (e, o) interleaved as 16 floats e0 o0 e1 o1 ... at p, writing only [0, m) */
static inline void store_eo(float *p, int m, __m256 e, __m256 o)
{
        __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
        __m256 v0 = _mm256_permute2f128_ps(lo, hi, 0x20), v1 = _mm256_permute2f128_ps(lo, hi, 0x31);
        if (m >= 16) {
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p + 8, v1);
        } else {
                _mm256_maskstore_ps(p, lanes8(m), v0);
                _mm256_maskstore_ps(p + 8, lanes8(m - 8), v1);
        }
}

/* Backward over global rows [g0, g1): eight outputs' four dx cells at a time, dy or 0 by code */
static void bwd_avx2(const float *dy, const uint8_t *code, float *dx, int H, int W, int OH, int OW, size_t g0, size_t g1)
{
        for (size_t gr = g0; gr < g1; gr++) {
                float *d0 = (float *)top_row(dx, H, W, OH, gr);
                dt_prefetch_ahead(d0, 2 * (size_t)W * sizeof(float), 1);
                const float *g = dy + gr * OW;
                const uint8_t *kr = code + gr * OW;
                for (int ow = 0; ow < OW; ow += 8) {
                        int n = OW - ow < 8 ? OW - ow : 8;
                        uint64_t kb = 0;
                        memcpy(&kb, kr + ow, (size_t)n);
                        __m256i k = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)kb));
                        __m256 v = n == 8 ? _mm256_loadu_ps(g + ow) : _mm256_maskload_ps(g + ow, lanes8(n));
                        __m256 e0 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(0))));
                        __m256 o0 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(1))));
                        __m256 e1 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(2))));
                        __m256 o1 = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(3))));
                        store_eo(d0 + 2 * ow, 2 * n, e0, o0);
                        store_eo(d0 + W + 2 * ow, 2 * n, e1, o1);
                }
                if (W & 1) d0[W - 1] = d0[2 * W - 1] = 0.0f;
        }
}

/* gap16_avx512's sums, eight planes per vector, two vectors */
static size_t gap16_avx2(const float *x, float *y, size_t pl, size_t p1, size_t HW, float inv)
{
        if (HW * 16 > INT32_MAX) return pl;
        const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)HW));
        for (; pl + 16 <= p1; pl += 16) {
                const float *xp = x + pl * HW, *xq = xp + 8 * HW;
                __m256 s = _mm256_setzero_ps(), t = s;
                for (size_t q = 0; q < HW; q++) {
                        s = _mm256_add_ps(s, _mm256_i32gather_ps(xp + q, idx, 4));
                        t = _mm256_add_ps(t, _mm256_i32gather_ps(xq + q, idx, 4));
                }
                _mm256_storeu_ps(y + pl, _mm256_mul_ps(s, _mm256_set1_ps(inv)));
                _mm256_storeu_ps(y + pl + 8, _mm256_mul_ps(t, _mm256_set1_ps(inv)));
        }
        return pl;
}

static const dt_pool_kern k_avx2 = { .max2x2_fwd = fwd_avx2, .max2x2_bwd = bwd_avx2, .gap16 = gap16_avx2 };
DT_ISA_END
#endif

static void fwd_generic(const float *x, float *y, uint8_t *code, int H, int W, int OH, int OW, size_t g0,
                       size_t g1, size_t *nan_lo, size_t *nan_hi)
{
        for (size_t gr = g0; gr < g1; gr++) {
                const float *r0 = top_row(x, H, W, OH, gr), *r1 = r0 + W;
                float *yr = y + gr * OW;
                uint8_t *kr = code + gr * OW;
                int nan = 0;
                for (int ow = 0; ow < OW; ow++) {
                        float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                        nan |= (a != a) | (b != b) | (c != c) | (d != d);
                        int ab = b > a, cd = d > c;
                        float top = ab ? b : a, bot = cd ? d : c;
                        int lo = bot > top;
                        yr[ow] = lo ? bot : top;
                        kr[ow] = (uint8_t)(lo ? 2 + cd : ab);
                }
                if (nan) {
                        size_t pl = gr / (size_t)OH;
                        if (pl < *nan_lo) *nan_lo = pl;
                        if (*nan_hi == (size_t)-1 || pl > *nan_hi) *nan_hi = pl;
                }
        }
}

static void bwd_generic(const float *dy, const uint8_t *code, float *dx, int H, int W, int OH, int OW, size_t g0, size_t g1)
{
        for (size_t gr = g0; gr < g1; gr++) {
                float *d0 = (float *)top_row(dx, H, W, OH, gr), *d1 = d0 + W;
                const float *g = dy + gr * OW;
                const uint8_t *kr = code + gr * OW;
                for (int ow = 0; ow < OW; ow++) {
                        float v = g[ow];
                        int k = kr[ow];
                        d0[2 * ow] = k == 0 ? v : 0.0f;
                        d0[2 * ow + 1] = k == 1 ? v : 0.0f;
                        d1[2 * ow] = k == 2 ? v : 0.0f;
                        d1[2 * ow + 1] = k == 3 ? v : 0.0f;
                }
                if (W & 1) d0[W - 1] = d1[W - 1] = 0.0f;
        }
}

static const dt_pool_kern k_generic = { .max2x2_fwd = fwd_generic, .max2x2_bwd = bwd_generic, .gap16 = NULL };

const dt_kfam dt_pool_kfam = {
        .name = "pool",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &k_avx2, [DT_ISA_AVX512] = &k_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &k_generic },
#endif
};
