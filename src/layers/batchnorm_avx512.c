/* layers/batchnorm_avx512.c - batch normalisation's AVX-512 host kernels for (C,H,W) inputs with f
 * none or relu (batchnorm_int.h's bn_kern): the plain loops' arithmetic in memory order, every bit
 * the same as theirs. Built for the avx512 path (util/cpu.h) by GCC on x86-64 only. */
#include "layers/batchnorm_int.h"
#include "util/prefetch.h"

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX512

/* ---- AVX-512 (f none or relu): the same arithmetic, in memory order, 16 folds at once ----
 * The plain loops walk a channel's B rows, C S floats apart: rows of 49 or 196 values (cnn-bn's
 * bn3, bn2) then came from memory one miss after another, and each row's 16 lane sums fold in a
 * chain of 16 dependent additions. Here the rows go in memory order, sample by sample and within
 * a sample channel by channel, so the tensor streams; a channel still sees its rows in sample
 * order. The lane vectors of 16 rows (or, backward, 16 chunks of CHUNK values) wait in a queue
 * and fold together: vector k of the transposed block holds lane k of each, so 16 vector additions
 * make the 16 folds, each in lane order as fold() adds; the results go into their channels' doubles
 * in queue order, which is each channel's row order. The lanes are the plain loops' (a masked
 * addition for the tail lanes, no FMA contraction), so every bit matches them. dt_bn_plain (tests)
 * keeps the plain loops. */

/* s[r] = ((0 + v[r][0]) + v[r][1]) + ... + v[r][15] for the rows r of the 16 x 16 block v */
static inline __m512 fold16(const float *v)
{
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(LANES));
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < LANES; k++) s = _mm512_add_ps(s, _mm512_i32gather_ps(idx, v + k, 4));
        return s;
}

/* one cache line (a vector) of a streaming loop, DT_AHEAD_BYTES ahead */
#define AHEAD(p) dt_prefetch_ahead((p), 1, 0)

static inline __mmask16 tail_mask(size_t n) { return (__mmask16)(n >= LANES ? 0xffffu : (1u << n) - 1); }

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
        _mm512_storeu_ps(fa, fold16(q->va));
        _mm512_storeu_ps(fb, fold16(q->vb));
        for (int i = 0; i < q->n; i++) {
                q->s1[q->ch[i]] += fa[i];
                q->s2[q->ch[i]] += fb[i];
        }
        q->n = 0;
}

static inline void fq_push(struct foldq *q, int c, __m512 a, __m512 b)
{
        _mm512_storeu_ps(q->va + q->n * LANES, a);
        _mm512_storeu_ps(q->vb + q->n * LANES, b);
        q->ch[q->n++] = c;
        if (q->n == LANES) fq_flush(q);
}

/* dz = f'(z) dy for f none or relu: z = a x + b > 0 ? dy : 0 */
static inline __m512 dz_vec(__m512 x, __m512 g, __m512 va, __m512 vb, int relu)
{
        if (!relu) return g;
        __m512 z = _mm512_add_ps(_mm512_mul_ps(va, x), vb);
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ), g);
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
                        for (int c = 0; c < nc; c++) {
                                const float *x = j->x + (size_t)b * st + (size_t)(c0 + c) * S;
                                const __m512 kk = _mm512_set1_ps(k[c]);
                                __m512 a = _mm512_setzero_ps(), q2 = _mm512_setzero_ps();
                                size_t i = 0;
                                for (; i + LANES <= S; i += LANES) {
                                        AHEAD(x + i);
                                        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), kk);
                                        a = _mm512_add_ps(a, d);
                                        q2 = _mm512_add_ps(q2, _mm512_mul_ps(d, d));
                                }
                                if (i < S) {
                                        __mmask16 m = tail_mask(S - i);
                                        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), kk);
                                        a = _mm512_mask_add_ps(a, m, a, d);
                                        q2 = _mm512_mask_add_ps(q2, m, q2, _mm512_mul_ps(d, d));
                                }
                                fq_push(&q, c, a, q2);
                        }
                fq_flush(&q);
        }
        for (int c = 0; c < nc; c++) dt_bn_fwd_coef(j, c0 + c, k[c], s[c], s[nc + c], &ca[c], &cb[c]);
        const __m512 zero = _mm512_setzero_ps();
        for (int b = 0; b < B; b++)
                for (int c = 0; c < nc; c++) {
                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                        const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]);
                        size_t i = 0;
                        for (; i + LANES <= S; i += LANES) {
                                AHEAD(j->x + o + i);
                                /* z > 0 ? z : 0, as max(z, 0) gives it: NaN and -0 become +0 */
                                __m512 z = _mm512_add_ps(_mm512_mul_ps(va, _mm512_loadu_ps(j->x + o + i)), vb);
                                if (relu) z = _mm512_max_ps(z, zero);
                                _mm512_storeu_ps(j->out + o + i, z);
                        }
                        if (i < S) {
                                __mmask16 m = tail_mask(S - i);
                                __m512 z = _mm512_add_ps(_mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, j->x + o + i)), vb);
                                if (relu) z = _mm512_max_ps(z, zero);
                                _mm512_mask_storeu_ps(j->out + o + i, m, z);
                        }
                }
        free(s);
        free(k);
}

/* Channels [c0, c1) backward: the sums (over rows, then CHUNK-value chunks, as bwd_part folds
 * them), the parameter gradients, then dx */
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
                        const float *x = j->x + o, *g = j->dy + o;
                        const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]), vm = _mm512_set1_ps(mean[c]);
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t e = S - q0 < CHUNK ? S : q0 + CHUNK;
                                __m512 t = _mm512_setzero_ps(), u = _mm512_setzero_ps();
                                for (size_t i = q0; i < e; i += LANES) {
                                        __mmask16 m = tail_mask(e - i);
                                        AHEAD(x + i);
                                        AHEAD(g + i);
                                        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
                                        __m512 dz = dz_vec(xv, _mm512_maskz_loadu_ps(m, g + i), va, vb, relu);
                                        t = _mm512_mask_add_ps(t, m, t, dz);
                                        u = _mm512_mask_add_ps(u, m, u, _mm512_mul_ps(dz, _mm512_sub_ps(xv, vm)));
                                }
                                fq_push(&q, c, t, u);
                        }
                }
        fq_flush(&q);
        for (int c = 0; c < nc; c++) dt_bn_bwd_finish(j, c0 + c, s[c], s[nc + c], ca[c], invstd[c], &kk[c], &bx[c]);
        if (j->out)
                for (int b = 0; b < B; b++)
                        for (int c = 0; c < nc; c++) {
                                size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                const float *x = j->x + o, *g = j->dy + o;
                                float *dx = j->out + o;
                                const __m512 va = _mm512_set1_ps(ca[c]), vb = _mm512_set1_ps(cb[c]), vm = _mm512_set1_ps(mean[c]);
                                const __m512 vk = _mm512_set1_ps(kk[c]), vx = _mm512_set1_ps(bx[c]);
                                for (size_t i = 0; i < S; i += LANES) {
                                        __mmask16 m = tail_mask(S - i);
                                        AHEAD(x + i);
                                        AHEAD(g + i);
                                        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
                                        __m512 dz = dz_vec(xv, _mm512_maskz_loadu_ps(m, g + i), va, vb, relu);
                                        /* a dz - kk (x - mean) - bx, in that order */
                                        __m512 r = _mm512_sub_ps(_mm512_mul_ps(va, dz), _mm512_mul_ps(vk, _mm512_sub_ps(xv, vm)));
                                        r = _mm512_sub_ps(r, vx);
                                        if (m == 0xffffu) _mm512_storeu_ps(dx + i, r);
                                        else _mm512_mask_storeu_ps(dx + i, m, r);
                                }
                        }
        free(s);
        free(co);
}

/* the plain loops for the rest, built for this path */
#define BN_VEC 1
#define BN_VEC_FN(f) f##_vec
#define V(f) f##_avx512
#include "layers/batchnorm_loops.h"
#undef V

const struct bn_kern dt_bn_kern_avx512 = { fwd_part_avx512, bwd_part_avx512 };
DT_ISA_END
#endif
