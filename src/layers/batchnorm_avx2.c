/* layers/batchnorm_avx2.c - batch normalisation's AVX2 host kernels for (C,H,W) inputs with f none
 * or relu (batchnorm_int.h's bn_kern), the twin of batchnorm_avx512.c: the plain loops' arithmetic
 * in memory order, every bit the same as theirs. Built for the avx2 path (util/cpu.h) by GCC on
 * x86-64 only. */
#include "layers/batchnorm_int.h"
#include "util/prefetch.h"

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX2

/* ---- AVX2 (f none or relu): batchnorm_avx512.c's walk with 8-float vectors ----
 * The plain loops walk a channel's B rows, C S floats apart; on the avx2 path cnn-bn's bn3 (rows of
 * 49) then ran at 35% of the triad and bn2 (196) at 52% (Xeon, AVX2 forced, b256). As in the
 * AVX-512 kernels the rows go in memory order, a channel still seeing its rows in sample order, and
 * the 16 lane sums of 16 rows fold together from a queue. The 16 lanes of the plain loops are a
 * pair of vectors here (lanes 0-7, 8-15); a tail's lanes past the row keep their value (a blend,
 * as the AVX-512 masked addition), no FMA contraction, so every bit matches the plain loops. */

typedef struct { __m256 lo, hi; } v16;

/* lanes 0 .. n-1 of a 16-lane pair (n < 16) */
typedef struct { __m256i lo, hi; } m16;

static inline m16 tail_mask(size_t n)
{
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i vn = _mm256_set1_epi32((int)n);
        return (m16){ _mm256_cmpgt_epi32(vn, iota), _mm256_cmpgt_epi32(vn, _mm256_add_epi32(iota, _mm256_set1_epi32(8))) };
}

static inline v16 load16(const float *p) { return (v16){ _mm256_loadu_ps(p), _mm256_loadu_ps(p + 8) }; }
static inline v16 loadm16(const float *p, m16 m) { return (v16){ _mm256_maskload_ps(p, m.lo), _mm256_maskload_ps(p + 8, m.hi) }; }
static inline void store16(float *p, v16 v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
static inline void storem16(float *p, m16 m, v16 v) { _mm256_maskstore_ps(p, m.lo, v.lo); _mm256_maskstore_ps(p + 8, m.hi, v.hi); }
static inline v16 set16(float x) { __m256 v = _mm256_set1_ps(x); return (v16){ v, v }; }
static inline v16 add16(v16 a, v16 b) { return (v16){ _mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi) }; }
static inline v16 sub16(v16 a, v16 b) { return (v16){ _mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi) }; }
static inline v16 mul16(v16 a, v16 b) { return (v16){ _mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi) }; }
/* a + b in the lanes of m, a elsewhere */
static inline v16 addm16(v16 a, m16 m, v16 b)
{
        return (v16){ _mm256_blendv_ps(a.lo, _mm256_add_ps(a.lo, b.lo), _mm256_castsi256_ps(m.lo)),
                      _mm256_blendv_ps(a.hi, _mm256_add_ps(a.hi, b.hi), _mm256_castsi256_ps(m.hi)) };
}
/* z > 0 ? z : 0, as max(z, 0) gives it: NaN and -0 become +0 */
static inline v16 relu16(v16 z)
{
        const __m256 zero = _mm256_setzero_ps();
        return (v16){ _mm256_max_ps(z.lo, zero), _mm256_max_ps(z.hi, zero) };
}

/* s[r] = ((0 + v[r][0]) + v[r][1]) + ... + v[r][15] for rows r = 0..7 of the 8 x 16 block v */
static inline __m256 fold8(const float *v)
{
        const __m256i idx = _mm256_setr_epi32(0, LANES, 2 * LANES, 3 * LANES, 4 * LANES, 5 * LANES, 6 * LANES, 7 * LANES);
        __m256 s = _mm256_setzero_ps();
        for (int k = 0; k < LANES; k++) s = _mm256_add_ps(s, _mm256_i32gather_ps(v + k, idx, 4));
        return s;
}

/* one cache line (16 floats) of a streaming loop, DT_AHEAD_BYTES ahead */
#define AHEAD(p) dt_prefetch_ahead((p), 1, 0)

/* Pairs of lane vectors waiting to fold, each for channel ch[i]: s1[ch] += fold(a), s2[ch] += fold(b) */
struct foldq {
        float va[LANES * LANES], vb[LANES * LANES];
        int ch[LANES], n;
        double *s1, *s2;        /* indexed by channel */
};

static void fq_flush(struct foldq *q)
{
        if (!q->n) return;
        float fa[LANES], fb[LANES];
        _mm256_storeu_ps(fa, fold8(q->va));
        _mm256_storeu_ps(fb, fold8(q->vb));
        if (q->n > 8) {
                _mm256_storeu_ps(fa + 8, fold8(q->va + 8 * LANES));
                _mm256_storeu_ps(fb + 8, fold8(q->vb + 8 * LANES));
        }
        for (int i = 0; i < q->n; i++) {
                q->s1[q->ch[i]] += fa[i];
                q->s2[q->ch[i]] += fb[i];
        }
        q->n = 0;
}

static inline void fq_push(struct foldq *q, int c, v16 a, v16 b)
{
        store16(q->va + q->n * LANES, a);
        store16(q->vb + q->n * LANES, b);
        q->ch[q->n++] = c;
        if (q->n == LANES) fq_flush(q);
}

/* dz = f'(z) dy for f none or relu: z = a x + b > 0 ? dy : 0 */
static inline v16 dz_vec(v16 x, v16 g, v16 va, v16 vb, int relu)
{
        if (!relu) return g;
        v16 z = add16(mul16(va, x), vb);
        const __m256 zero = _mm256_setzero_ps();
        return (v16){ _mm256_and_ps(_mm256_cmp_ps(z.lo, zero, _CMP_GT_OQ), g.lo),
                      _mm256_and_ps(_mm256_cmp_ps(z.hi, zero, _CMP_GT_OQ), g.hi) };
}

/* one row's s1 += (x - k) and s2 += (x - k)^2 in 16 lanes, then queued for channel c */
static inline void row_sums(struct foldq *q, int c, const float *x, size_t S, float k)
{
        const v16 kk = set16(k);
        v16 a = set16(0.0f), q2 = set16(0.0f);
        size_t i = 0;
        for (; i + LANES <= S; i += LANES) {
                AHEAD(x + i);
                v16 d = sub16(load16(x + i), kk);
                a = add16(a, d);
                q2 = add16(q2, mul16(d, d));
        }
        if (i < S) {
                m16 m = tail_mask(S - i);
                v16 d = sub16(loadm16(x + i, m), kk);
                a = addm16(a, m, d);
                q2 = addm16(q2, m, mul16(d, d));
        }
        fq_push(q, c, a, q2);
}

/* Channels [c0, c1) forward: statistics (training), then y = f(a x + b) */
static void fwd_vec(const struct bn_job *j, int c0, int c1)
{
        const dt_layer *l = j->l;
        const int relu = ((const struct bn_cfg *)l->cfg)->act == DT_ACT_RELU;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B, nc = c1 - c0;
        const size_t S = v.S, st = (size_t)C * S;
        double *s = dt_calloc(2 * (size_t)nc, sizeof *s);
        float *k = dt_malloc(3 * (size_t)nc * sizeof *k), *ca = k + nc, *cb = ca + nc;
        if (j->training) {
                struct foldq q = { .n = 0, .s1 = s, .s2 = s + nc };
                for (int c = 0; c < nc; c++) k[c] = j->x[(size_t)(c0 + c) * S];
                for (int b = 0; b < B; b++)
                        for (int c = 0; c < nc; c++) row_sums(&q, c, j->x + (size_t)b * st + (size_t)(c0 + c) * S, S, k[c]);
                fq_flush(&q);
        }
        for (int c = 0; c < nc; c++) dt_bn_fwd_coef(j, c0 + c, k[c], s[c], s[nc + c], &ca[c], &cb[c]);
        for (int b = 0; b < B; b++)
                for (int c = 0; c < nc; c++) {
                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                        const v16 va = set16(ca[c]), vb = set16(cb[c]);
                        size_t i = 0;
                        for (; i + LANES <= S; i += LANES) {
                                AHEAD(j->x + o + i);
                                v16 z = add16(mul16(va, load16(j->x + o + i)), vb);
                                store16(j->out + o + i, relu ? relu16(z) : z);
                        }
                        if (i < S) {
                                m16 m = tail_mask(S - i);
                                v16 z = add16(mul16(va, loadm16(j->x + o + i, m)), vb);
                                storem16(j->out + o + i, m, relu ? relu16(z) : z);
                        }
                }
        free(s);
        free(k);
}

/* Channel c's sums over one row, CHUNK values at a time as bwd_part folds them */
static inline void row_dsums(struct foldq *q, int c, const float *x, const float *g, size_t S, v16 va, v16 vb, v16 vm,
                             int relu)
{
        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                size_t e = S - q0 < CHUNK ? S : q0 + CHUNK, i = q0;
                v16 t = set16(0.0f), u = set16(0.0f);
                for (; i + LANES <= e; i += LANES) {
                        AHEAD(x + i);
                        AHEAD(g + i);
                        v16 xv = load16(x + i), dz = dz_vec(xv, load16(g + i), va, vb, relu);
                        t = add16(t, dz);
                        u = add16(u, mul16(dz, sub16(xv, vm)));
                }
                if (i < e) {
                        m16 m = tail_mask(e - i);
                        v16 xv = loadm16(x + i, m), dz = dz_vec(xv, loadm16(g + i, m), va, vb, relu);
                        t = addm16(t, m, dz);
                        u = addm16(u, m, mul16(dz, sub16(xv, vm)));
                }
                fq_push(q, c, t, u);
        }
}

/* One row of dx = a dz - kk (x - mean) - bx, in that order */
static inline void row_dx(float *dx, const float *x, const float *g, size_t S, v16 va, v16 vb, v16 vm, v16 vk, v16 vx,
                          int relu)
{
        size_t i = 0;
        for (; i + LANES <= S; i += LANES) {
                AHEAD(x + i);
                AHEAD(g + i);
                v16 xv = load16(x + i), dz = dz_vec(xv, load16(g + i), va, vb, relu);
                store16(dx + i, sub16(sub16(mul16(va, dz), mul16(vk, sub16(xv, vm))), vx));
        }
        if (i < S) {
                m16 m = tail_mask(S - i);
                v16 xv = loadm16(x + i, m), dz = dz_vec(xv, loadm16(g + i, m), va, vb, relu);
                storem16(dx + i, m, sub16(sub16(mul16(va, dz), mul16(vk, sub16(xv, vm))), vx));
        }
}

/* Channels [c0, c1) backward: the sums, the parameter gradients, then dx */
static void bwd_vec(const struct bn_job *j, int c0, int c1)
{
        const dt_layer *l = j->l;
        const int relu = ((const struct bn_cfg *)l->cfg)->act == DT_ACT_RELU;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B, nc = c1 - c0;
        const size_t S = v.S, st = (size_t)C * S;
        double *s = dt_calloc(2 * (size_t)nc, sizeof *s);
        float *co = dt_malloc(6 * (size_t)nc * sizeof *co);
        float *mean = co, *invstd = co + nc, *ca = co + 2 * nc, *cb = co + 3 * nc, *kk = co + 4 * nc, *bx = co + 5 * nc;
        for (int c = 0; c < nc; c++) dt_bn_bwd_coef(j, c0 + c, &mean[c], &invstd[c], &ca[c], &cb[c]);
        struct foldq q = { .n = 0, .s1 = s, .s2 = s + nc };
        for (int b = 0; b < B; b++)
                for (int c = 0; c < nc; c++) {
                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                        row_dsums(&q, c, j->x + o, j->dy + o, S, set16(ca[c]), set16(cb[c]), set16(mean[c]), relu);
                }
        fq_flush(&q);
        for (int c = 0; c < nc; c++) dt_bn_bwd_finish(j, c0 + c, s[c], s[nc + c], ca[c], invstd[c], &kk[c], &bx[c]);
        if (j->out)
                for (int b = 0; b < B; b++)
                        for (int c = 0; c < nc; c++) {
                                size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                row_dx(j->out + o, j->x + o, j->dy + o, S, set16(ca[c]), set16(cb[c]), set16(mean[c]),
                                       set16(kk[c]), set16(bx[c]), relu);
                        }
        free(s);
        free(co);
}

/* the plain loops for the rest, built for this path */
#define BN_VEC 1
#define BN_VEC_FN(f) f##_vec
#define V(f) f##_avx2
#include "layers/batchnorm_loops.h"
#undef V

const struct bn_kern dt_bn_kern_avx2 = { fwd_part_avx2, bwd_part_avx2 };
DT_ISA_END
#endif
