/* layers/pool_kern.c - pooling's host kernels per CPU path (pool_kern.h): 2x2 stride-2 max
 * pooling in one pass each way (AVX-512: whole rows in masked vectors; AVX2: eight outputs of a row
 * at a time, or two short rows; generic: the same decisions one window at a time, so all give the same outputs and
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
 * the general loop, so that the first NaN wins. Backward: every dx element of the planes is
 * written once, dy or 0 by the code under a window, 0 in an odd last column or row. */

/* The first input row under global output row gr */
static inline const float *top_row(const float *x, int H, int W, int OH, size_t gr)
{
        size_t pl = gr / (size_t)OH, oh = gr % (size_t)OH;
        return x + pl * (size_t)H * W + 2 * oh * (size_t)W;
}

/* The same walked row by row: plane pl, its output row oh (a 64-bit division per row cost about
 * as much as the whole work of a 3-output row) */
struct rowpos { size_t pl, oh; };
static inline struct rowpos rowpos_at(int OH, size_t gr) { return (struct rowpos){ gr / (size_t)OH, gr % (size_t)OH }; }
static inline size_t rowpos_off(struct rowpos r, int H, int W) { return r.pl * (size_t)H * W + 2 * r.oh * (size_t)W; }
static inline void rowpos_next(struct rowpos *r, int OH)
{
        if (++r->oh == (size_t)OH) {
                r->oh = 0;
                r->pl++;
        }
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
 * an odd last column and row cleared on the way */
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
                if ((H & 1) && gr % (size_t)OH == (size_t)OH - 1) memset(d0 + 2 * W, 0, (size_t)W * sizeof(float));
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

/* Rows shorter than a vector (and a row's last few outputs) are where the time went: masked loads
 * and stores and a byte copy of unknown length for every row (a 3-output row cost ~10 cycles an
 * output). So rows of eight or more outputs end with their last eight again (the same values
 * written twice), rows of up to four go two to a vector forward, and a shorter row reads and
 * writes whole vectors: a load may run on into later rows of the call's planes (x, dy and the
 * codes are only read), a store on into outputs or dx cells that this call writes next, in
 * order. Only where a whole vector would leave the call's rows are the lanes masked. */

/* 16 floats from p as (even lanes, odd lanes), reading only [0, m) (m <= 16) */
static inline void load_eo(const float *p, int m, __m256 *e, __m256 *o)
{
        __m256 v0, v1;
        if (m >= 16) {
                v0 = _mm256_loadu_ps(p);
                v1 = _mm256_loadu_ps(p + 8);
        } else {
                v0 = _mm256_maskload_ps(p, lanes8(m));
                v1 = m > 8 ? _mm256_maskload_ps(p + 8, lanes8(m - 8)) : _mm256_setzero_ps();
        }
        /* (0 2 8 10 | 4 6 12 14), then the 64-bit quarters reordered to 0 2 4 6 8 10 12 14 */
        __m256 ev = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)), od = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
        *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
        *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* The windows' cells (a b / c d) of n outputs from the row pairs at r0 and r1 = r0 + W; whole:
 * whole vectors may be read (one per row for n <= 4, else two) */
static inline void cells(const float *r0, const float *r1, int n, int whole, __m256 *a, __m256 *b, __m256 *c, __m256 *d)
{
        if (n <= 4 && whole) {
                const __m256i ev = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), od = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
                __m256 t = _mm256_loadu_ps(r0), u = _mm256_loadu_ps(r1);
                *a = _mm256_permutevar8x32_ps(t, ev);
                *b = _mm256_permutevar8x32_ps(t, od);
                *c = _mm256_permutevar8x32_ps(u, ev);
                *d = _mm256_permutevar8x32_ps(u, od);
                return;
        }
        int m = whole ? 16 : 2 * n;
        load_eo(r0, m, a, b);
        load_eo(r1, m, c, d);
}

/* The generic loop's decisions for eight windows' cells as lane masks: the maxima, the NaN lanes
 * and the code bytes (spread8 of the masks, lane j in byte j) */
struct max8 { __m256 v; unsigned nan, ab, cd, lo; };
static inline struct max8 max8(__m256 a, __m256 b, __m256 c, __m256 d)
{
        struct max8 r;
        r.nan = (unsigned)_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
        __m256 ab = _mm256_cmp_ps(b, a, _CMP_GT_OQ), cd = _mm256_cmp_ps(d, c, _CMP_GT_OQ);
        __m256 top = _mm256_blendv_ps(a, b, ab), bot = _mm256_blendv_ps(c, d, cd);
        __m256 lo = _mm256_cmp_ps(bot, top, _CMP_GT_OQ);
        r.v = _mm256_blendv_ps(top, bot, lo);
        r.ab = (unsigned)_mm256_movemask_ps(ab);
        r.cd = (unsigned)_mm256_movemask_ps(cd);
        r.lo = (unsigned)_mm256_movemask_ps(lo);
        return r;
}

static inline uint64_t codes8(unsigned ab, unsigned cd, unsigned lo)
{
        return spread8[(lo & cd) | (~lo & ab & 0xffu)] + 2 * spread8[lo & 0xffu];
}

/* n outputs' values and codes to y + q and code + q: whole vectors where they stay below qend */
static inline void put8(float *y, uint8_t *code, size_t q, size_t qend, int n, __m256 v, uint64_t k)
{
        if (q + 8 <= qend) {
                _mm256_storeu_ps(y + q, v);
                memcpy(code + q, &k, 8);
        } else {
                _mm256_maskstore_ps(y + q, lanes8(n), v);
                for (int j = 0; j < n; j++) code[q + j] = (uint8_t)(k >> 8 * j);
        }
}

static inline void nan_plane(size_t pl, size_t *nan_lo, size_t *nan_hi)
{
        if (pl < *nan_lo) *nan_lo = pl;
        if (*nan_hi == (size_t)-1 || pl > *nan_hi) *nan_hi = pl;
}

/* lanes 0..n-1 and 4..4+n-1 brought together (two rows of n <= 4 outputs) */
static const int32_t pair_idx[5][8] = { { 0 }, { 0, 4, 2, 3, 4, 5, 6, 7 }, { 0, 1, 4, 5, 4, 5, 6, 7 },
                                        { 0, 1, 2, 4, 5, 6, 6, 7 }, { 0, 1, 2, 3, 4, 5, 6, 7 } };

/* Two rows of n <= 4 outputs at once, at r0 and s0 (whole vectors readable): each row's pairs as
 * two 128-bit halves, row r0 in the low lanes, s0 in the high; returns the NaN rows (bit 0: r0's,
 * bit 1: s0's) */
static inline int fwd_pair(const float *r0, const float *s0, int W, int n, float *y, uint8_t *code, size_t q, size_t qend)
{
#define HALVES(p, q_) _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), _mm_loadu_ps(q_), 1)
        __m256 t = HALVES(r0, s0), t2 = HALVES(r0 + 4, s0 + 4), u = HALVES(r0 + W, s0 + W), u2 = HALVES(r0 + W + 4, s0 + W + 4);
#undef HALVES
        struct max8 m = max8(_mm256_shuffle_ps(t, t2, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(t, t2, _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm256_shuffle_ps(u, u2, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(u, u2, _MM_SHUFFLE(3, 1, 3, 1)));
        const unsigned low = (1u << n) - 1;
#define PACK(b) (((b) & low) | (((b) >> 4) & low) << n)
        __m256 v = _mm256_permutevar8x32_ps(m.v, _mm256_loadu_si256((const __m256i *)pair_idx[n]));
        put8(y, code, q, qend, 2 * n, v, codes8(PACK(m.ab), PACK(m.cd), PACK(m.lo)));
#undef PACK
        return (m.nan & low ? 1 : 0) | (m.nan >> 4 & low ? 2 : 0);
}

/* Forward over global rows [g0, g1): eight outputs of a row at a time, or two rows of up to four
 * (the generic loop's decisions as lane masks) */
static void fwd_avx2(const float *x, float *y, uint8_t *code, int H, int W, int OH, int OW, size_t g0,
                     size_t g1, size_t *nan_lo, size_t *nan_hi)
{
        if (g0 >= g1) return;
        spread8_init();
        const float *xend = x + ((g1 - 1) / (size_t)OH + 1) * (size_t)H * W;     /* the call's planes */
        const size_t qend = g1 * (size_t)OW;
        struct rowpos rp = rowpos_at(OH, g0);
        for (size_t gr = g0; gr < g1; gr++, rowpos_next(&rp, OH)) {
                const float *r0 = x + rowpos_off(rp, H, W), *r1 = r0 + W;
                dt_prefetch_ahead(r0, 2 * (size_t)W * sizeof(float), 0);
                if (OW <= 4 && gr + 1 < g1) {
                        struct rowpos rq = rp;
                        rowpos_next(&rq, OH);
                        const float *s0 = x + rowpos_off(rq, H, W);
                        if (s0 + W + 8 <= xend) {
                                int nan = fwd_pair(r0, s0, W, OW, y, code, gr * OW, qend);
                                if (nan & 1) nan_plane(rp.pl, nan_lo, nan_hi);
                                if (nan & 2) nan_plane(rq.pl, nan_lo, nan_hi);
                                gr++;
                                rp = rq;
                                continue;
                        }
                }
                unsigned nan = 0;
                for (int ow = 0; ow < OW; ow += 8) {
                        if (ow + 8 > OW && OW >= 8) ow = OW - 8;        /* the last eight again */
                        int n = OW - ow < 8 ? OW - ow : 8;
                        __m256 a, b, c, d;
                        cells(r0 + 2 * ow, r1 + 2 * ow, n, n == 8 || r1 + 2 * ow + (n <= 4 ? 8 : 16) <= xend, &a, &b, &c, &d);
                        struct max8 m = max8(a, b, c, d);
                        nan |= m.nan & ((1u << n) - 1);
                        put8(y, code, gr * OW + ow, qend, n, m.v, codes8(m.ab, m.cd, m.lo));
                }
                if (nan) nan_plane(rp.pl, nan_lo, nan_hi);
        }
}

/* n outputs' values v and codes k to the dx rows at p0 and p1: each value twice in a row, kept
 * where its code names the cell; whole: whole vectors may be written (one per row for n <= 4).
 * The top row goes first, so what runs on past it is rewritten by the bottom row's stores. */
static inline void unmax_store(float *p0, float *p1, __m256 v, __m256i k, int n, int whole)
{
        const __m256i ct = _mm256_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1), cb = _mm256_setr_epi32(2, 3, 2, 3, 2, 3, 2, 3);
        __m256 t[2], b[2];
        int halves = n > 4 ? 2 : 1;
        for (int h = 0; h < halves; h++) {
                __m256i ix = h ? _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7) : _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
                __m256 vv = _mm256_permutevar8x32_ps(v, ix);
                __m256i kk = _mm256_permutevar8x32_epi32(k, ix);
                /* lanes past the n outputs: code -1, so they hold +0 (an odd last column's value) */
                if (n < 8) kk = _mm256_or_si256(kk, _mm256_andnot_si256(lanes8(2 * n - 8 * h), _mm256_set1_epi32(-1)));
                t[h] = _mm256_and_ps(vv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(kk, ct)));
                b[h] = _mm256_and_ps(vv, _mm256_castsi256_ps(_mm256_cmpeq_epi32(kk, cb)));
        }
        for (int r = 0; r < 2; r++) {
                float *p = r ? p1 : p0;
                const __m256 *w = r ? b : t;
                for (int h = 0; h < halves; h++) {
                        int m = 2 * n - 8 * h;
                        if (whole || m >= 8) _mm256_storeu_ps(p + 8 * h, w[h]);
                        else _mm256_maskstore_ps(p + 8 * h, lanes8(m), w[h]);
                }
        }
}

/* Backward over global rows [g0, g1): eight outputs' four dx cells at a time, dy or 0 by code.
 * What a whole vector writes past a row is zeros: the odd column's and odd row's own value, or
 * cells written again next; so it may go on to the end of the call's last window row (lim). */
static void bwd_avx2(const float *dy, const uint8_t *code, float *dx, int H, int W, int OH, int OW, size_t g0, size_t g1)
{
        if (g0 >= g1) return;
        const size_t qend = g1 * (size_t)OW;
        const float *lim = top_row(dx, H, W, OH, g1 - 1) + 2 * (size_t)W;
        struct rowpos rp = rowpos_at(OH, g0);
        for (size_t gr = g0; gr < g1; gr++, rowpos_next(&rp, OH)) {
                float *d0 = dx + rowpos_off(rp, H, W), *d1 = d0 + W;
                dt_prefetch_ahead(d0, 2 * (size_t)W * sizeof(float), 1);
                for (int ow = 0; ow < OW; ow += 8) {
                        if (ow + 8 > OW && OW >= 8) ow = OW - 8;        /* the last eight again */
                        int n = OW - ow < 8 ? OW - ow : 8;
                        size_t q = gr * OW + ow;
                        __m256 v;
                        __m256i k;
                        if (q + 8 <= qend) {
                                v = _mm256_loadu_ps(dy + q);
                                k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(code + q)));
                        } else {
                                uint64_t kb = 0;
                                for (int j = 0; j < n; j++) kb |= (uint64_t)code[q + j] << 8 * j;
                                v = _mm256_maskload_ps(dy + q, lanes8(n));
                                k = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)kb));
                        }
                        unmax_store(d0 + 2 * ow, d1 + 2 * ow, v, k, n, d1 + 2 * ow + (n <= 4 ? 8 : 16) <= lim);
                }
                if (W & 1) d0[W - 1] = d0[2 * W - 1] = 0.0f;
                if ((H & 1) && rp.oh == (size_t)OH - 1) {
                        if (W <= 8 && d1 + W + 8 <= lim) _mm256_storeu_ps(d1 + W, _mm256_setzero_ps());
                        else memset(d1 + W, 0, (size_t)W * sizeof(float));
                }
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
                if ((H & 1) && gr % (size_t)OH == (size_t)OH - 1) memset(d1 + W, 0, (size_t)W * sizeof(float));
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
