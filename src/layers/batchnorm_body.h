/* layers/batchnorm_body.h - batch normalisation's vector kernels for (C,H,W) inputs with f none or
 * relu (batchnorm_int.h's bn_kern), included once per CPU path by batchnorm_avx2.c and
 * batchnorm_avx512.c after that path's target pragma and its 16-lane vector helpers (v16, m16 and
 * the ops listed below); V(name) names the path's copies of the plain loops. The plain loops'
 * arithmetic in memory order, every bit the same as theirs. No include guard.
 *
 * The path defines: v16 (16 floats), m16 (a lane mask), tail_mask(n) (lanes 0 .. n-1, n < 16),
 * load16, loadm16, store16, storem16, set16, add16, sub16, mul16, addm16(a, m, b) (a + b in the
 * lanes of m, a elsewhere), relu16 (max(z, 0)), gt0_keep16(z, g) (z > 0 ? g : 0, ordered) and
 * fold_rows(v, out) (out[r] = ((0 + v[r][0]) + v[r][1]) + ... + v[r][15] for the 16 rows of a
 * 16 x 16 block).
 *
 * The plain loops walk a channel's B rows, C S floats apart: rows of 49 or 196 values (cnn-bn's bn3,
 * bn2) then came from memory one miss after another (on the avx2 path bn3 ran at 35% of the triad,
 * bn2 at 52%), and each row's 16 lane sums fold in a chain of 16 dependent additions. Here the rows
 * go in memory order, sample by sample and within a sample channel by channel, so the tensor
 * streams; a channel still sees its rows in sample order. The lane vectors of 16 rows (or,
 * backward, 16 chunks of CHUNK values) wait in a queue and fold together: the transposed block's
 * vector k holds lane k of each, so 16 vector additions make the 16 folds, each in lane order as
 * fold() adds; the results go into their channels' doubles in queue order, which is each channel's
 * row order. The lanes are the plain loops' (a tail's lanes past the row keep their value, no FMA
 * contraction), so every bit matches them. dt_bn_plain (tests) keeps the plain loops. */

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
        fold_rows(q->va, q->n, fa);
        fold_rows(q->vb, q->n, fb);
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
        return relu ? gt0_keep16(add16(mul16(va, x), vb), g) : g;
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

/* one row of y = f(a x + b) */
static inline void row_y(float *y, const float *x, size_t S, v16 va, v16 vb, int relu)
{
        size_t i = 0;
        for (; i + LANES <= S; i += LANES) {
                AHEAD(x + i);
                v16 z = add16(mul16(va, load16(x + i)), vb);
                store16(y + i, relu ? relu16(z) : z);
        }
        if (i < S) {
                m16 m = tail_mask(S - i);
                v16 z = add16(mul16(va, loadm16(x + i, m)), vb);
                storem16(y + i, m, relu ? relu16(z) : z);
        }
}

/* ---- the max pool after it (j->pool, bnpool.c) ----
 * Planes go through the pool's kernels a block at a time, the block in L1: forward writes f(a x + b)
 * into it and pools it; backward spreads dy into it as the pool's backward writes its dx. The
 * values are the unfused layers', so every bit is theirs. */

/* planes of S floats per block: 16 KiB, at least one plane */
static inline int pool_block(size_t S) { return S >= 4096 ? 1 : (int)(4096 / S); }

/* the block of n planes at tmp, planes [p0, p0 + n) of the batch: pooled into y and code. f is relu:
 * no NaN reaches the pool (max(NaN, 0) is 0), which the pool would have redone by its general loop */
static void pool_fwd(const struct bn_pool *pl, const float *tmp, size_t p0, int n)
{
        const size_t P = (size_t)pl->OH * pl->OW;
        size_t lo = (size_t)-1, hi = (size_t)-1;
        pl->k->max2x2_fwd(tmp, pl->y + p0 * P, pl->code + p0 * P, pl->H, pl->W, pl->OH, pl->OW, 0, (size_t)n * pl->OH, &lo,
                          &hi);
        DT_ASSERT(hi == (size_t)-1);
}

/* planes [p0, p0 + n)'s dy spread into the block at tmp (the kernel clears an odd last row itself) */
static void pool_bwd(const struct bn_pool *pl, float *tmp, size_t p0, int n)
{
        const size_t P = (size_t)pl->OH * pl->OW;
        pl->k->max2x2_bwd(pl->dy + p0 * P, pl->code + p0 * P, tmp, pl->H, pl->W, pl->OH, pl->OW, 0, (size_t)n * pl->OH);
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
        const struct bn_pool *pl = j->pool;
        const int blk = pl ? pool_block(S) : nc;
        float *tmp = pl ? dt_malloc((size_t)blk * S * sizeof *tmp) : NULL;
        for (int b = 0; b < B; b++)
                for (int q0 = 0; q0 < nc; q0 += blk) {
                        const int q1 = nc - q0 < blk ? nc : q0 + blk;
                        for (int c = q0; c < q1; c++) {
                                size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                row_y(pl ? tmp + (size_t)(c - q0) * S : j->out + o, j->x + o, S, set16(ca[c]), set16(cb[c]),
                                      relu);
                        }
                        if (pl) pool_fwd(pl, tmp, (size_t)b * C + (size_t)(c0 + q0), q1 - q0);
                }
        free(tmp);
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
        const struct bn_pool *pl = j->pool;
        const int blk = pl ? pool_block(S) : nc;
        float *tmp = pl ? dt_malloc((size_t)blk * S * sizeof *tmp) : NULL;
        struct foldq q = { .n = 0, .s1 = s, .s2 = s + nc };
        for (int b = 0; b < B; b++)
                for (int q0 = 0; q0 < nc; q0 += blk) {
                        const int q1 = nc - q0 < blk ? nc : q0 + blk;
                        if (pl) pool_bwd(pl, tmp, (size_t)b * C + (size_t)(c0 + q0), q1 - q0);
                        for (int c = q0; c < q1; c++) {
                                size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                const float *g = pl ? tmp + (size_t)(c - q0) * S : j->dy + o;
                                row_dsums(&q, c, j->x + o, g, S, set16(ca[c]), set16(cb[c]), set16(mean[c]), relu);
                        }
                }
        fq_flush(&q);
        for (int c = 0; c < nc; c++) dt_bn_bwd_finish(j, c0 + c, s[c], s[nc + c], ca[c], invstd[c], &kk[c], &bx[c]);
        if (j->out)
                for (int b = 0; b < B; b++)
                        for (int q0 = 0; q0 < nc; q0 += blk) {
                                const int q1 = nc - q0 < blk ? nc : q0 + blk;
                                if (pl) pool_bwd(pl, tmp, (size_t)b * C + (size_t)(c0 + q0), q1 - q0);
                                for (int c = q0; c < q1; c++) {
                                        size_t o = (size_t)b * st + (size_t)(c0 + c) * S;
                                        const float *g = pl ? tmp + (size_t)(c - q0) * S : j->dy + o;
                                        row_dx(j->out + o, j->x + o, g, S, set16(ca[c]), set16(cb[c]), set16(mean[c]),
                                               set16(kk[c]), set16(bx[c]), relu);
                                }
                        }
        free(tmp);
        free(s);
        free(co);
}

/* the plain loops for the rest, built for this path */
#define BN_VEC 1
#define BN_VEC_FN(f) f##_vec
#include "layers/batchnorm_loops.h"
