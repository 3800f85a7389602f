/* layers/attn_kern_body.h - attn_kern.h's two kernels, included once per CPU path by attn_kern.c,
 * attn_kern_avx2.c and attn_kern_avx512.c after that path's target pragma; V(name) names the path's
 * copy, ATTN_TABLE its table. The loops are the same expressions on every path (16-float vectors
 * from cellmath.h, no FMA contraction under -std=c11, the double row sums in order), so every path
 * gives the same bits for the same products (attn_mm.h's, whose own path is picked apart). The
 * products go through attn_mm.h's kernel (head dim <= 64) or the backend's gemm; the softmax, masks
 * and dropout are loops here. Both kernels give the same function up to rounding: the plain one
 * normalises each row once, the blocked one rescales its running sums as each tile raises the row's
 * maximum. No include guard. */
#include "layers/attn_kern.h"
#include "layers/attn_mm.h"
#include "layers/cellmath.h"

#include <math.h>
#include <string.h>

static int V(mini)(int a, int b) { return a < b ? a : b; }

/* r[c] = e^(r[c] - sub) for c < nv (vexp: ~2 ulp), 0 from nv to n (masked); returns their sum */
static float V(exp_row)(float *r, int nv, int n, float sub)
{
        vec acc = vset(0.0f), vs = vset(sub);
        int c = 0;
        for (; c + VL <= nv; c += VL) {
                vec x = ld(r + c) - vs;
                vec e = vexp(&x);
                st(r + c, &e);
                acc += e;
        }
        if (c < nv) {           /* the tail through one padded vector: the same formula */
                float pad[VL];
                for (int i = 0; i < VL; i++) pad[i] = c + i < nv ? r[c + i] - sub : -INFINITY;
                vec x = ld(pad), e = vexp(&x);
                st(pad, &e);
                for (int i = 0; c + i < nv; i++) acc[i] += (r[c + i] = pad[i]);
        }
        for (; nv < n; nv++) r[nv] = 0.0f;
        float sum = 0;
        for (int i = 0; i < VL; i++) sum += acc[i];
        return sum;
}

/* max of r[0 .. n): VL lanes, then across them (the maximum is exact in any order; as a running
 * scalar, one dependent compare per score, it was a fifth of the plain forward's heads) */
static float V(row_max)(const float *r, int n, float mx)
{
        vec m = vset(mx);
        int c = 0;
        for (; c + VL <= n; c += VL) {
                vec x = ld(r + c);
                veci k = x > m;
                m = (vec)((k & (veci)x) | (~k & (veci)m));
        }
        for (int i = 0; i < VL; i++) mx = m[i] > mx ? m[i] : mx;
        for (; c < n; c++) mx = r[c] > mx ? r[c] : mx;
        return mx;
}

/* sum of (double) a[s] b[s] over s < n in 8 running lanes, then the lanes in a fixed tree: the
 * same bits on every path (each product exact in double); as one running sum, a dependent add
 * per score */
static double V(dot8)(const float *a, const float *b, int n)
{
        double acc[8] = { 0 };
        int s = 0;
        for (; s + 8 <= n; s += 8)
                for (int j = 0; j < 8; j++) acc[j] += (double)a[s + j] * b[s + j];
        for (int j = 0; s < n; s++, j++) acc[j] += (double)a[s] * b[s];
        return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* the unmasked columns of row t among keys [s0, s0 + m) */
static int V(valid)(const dt_attn_head *h, int t, int s0, int m)
{
        if (!h->causal) return m;
        int v = t + 1 - s0;
        return v < 0 ? 0 : v > m ? m : v;
}

/* the dropout factor of probability (t, s): 0 or 1 / (1 - p) */
static float V(keep)(const dt_attn_head *h, int t, int s)
{
        uint64_t j = ((uint64_t)h->head * (uint64_t)h->T + (uint64_t)t) * (uint64_t)h->T + (uint64_t)s;
        return dt_dropout_keep(h->key, h->pos, j, h->p) ? 1.0f / (1.0f - h->p) : 0.0f;
}

/* S (n x m, ld m) = scale q[t0..] k[s0..]^T; the causal mask is valid()'s: exp_row zeroes the rest */
static void V(scores)(const dt_attn_head *h, int t0, int n, int s0, int m, float *S)
{
        h->be->ops->gemm(h->be, 0, 1, n, m, h->D, h->scale, h->q + (size_t)t0 * h->ld, (int)h->ld,
                         h->k + (size_t)s0 * h->ld, (int)h->ld, 0.0f, S, m);
}

/* Pd = P with dropout applied (a copy), or P itself when p = 0 */
static const float *V(dropped)(const dt_attn_head *h, int t0, int n, int s0, int m, const float *P, float *Pd)
{
        if (h->p == 0.0f) return P;
        for (int a = 0; a < n; a++)
                for (int c = 0; c < m; c++) Pd[(size_t)a * m + c] = P[(size_t)a * m + c] * V(keep)(h, t0 + a, s0 + c);
        return Pd;
}

/* ---- plain: the whole T x T at once ---- */

/* C (m x n, ldc) = alpha op(A) op(B) + beta C through attn_mm.h (A(i, p) = a[i ars + p acs]; B^T when
 * bt), or the backend's gemm past its head dim; tri: what causal masking lets it skip */
static void V(mm)(const dt_attn_head *h, int tri, int m, int n, int k, float alpha, const float *a, size_t ars,
               size_t acs, const float *b, size_t ldb, int bt, float beta, float *c, size_t ldc)
{
        if (h->D <= DT_MM_KMAX) {
                dt_attn_mm p = { .m = m, .n = n, .k = k, .bt = bt, .tri = h->causal ? tri : DT_MM_FULL, .alpha = alpha,
                                 .beta = beta, .a = a, .b = b, .ars = ars, .acs = acs, .ldb = ldb, .ldc = ldc, .c = c };
                dt_attn_mm_get()->mm(&p);
                return;
        }
        int ta = ars == 1 && acs != 1;
        h->be->ops->gemm(h->be, ta, bt, m, n, k, alpha, a, (int)(ta ? acs : ars), b, (int)ldb, beta, c, (int)ldc);
}

/* P = softmax(S) by rows; o = Pd v */
static void V(plain_fwd)(const dt_attn_head *h, float *o, float *P, float *ws)
{
        const int T = h->T;
        V(mm)(h, DT_MM_JLE, T, T, h->D, h->scale, h->q, h->ld, 1, h->k, h->ld, 1, 0.0f, P, T);
        for (int t = 0; t < T; t++) {
                float *r = P + (size_t)t * T;
                int nv = V(valid)(h, t, 0, T);
                float mx = V(row_max)(r, nv, -INFINITY);
                float inv = 1.0f / V(exp_row)(r, nv, T, mx);
                for (int s = 0; s < nv; s++) r[s] *= inv;
        }
        const float *Pd = V(dropped)(h, 0, T, 0, T, P, ws);
        V(mm)(h, DT_MM_KLE, T, h->D, T, 1.0f, Pd, T, 1, h->v, h->ld, 0, 0.0f, o, h->ldo);
}

/* dPd = do v^T;  dv += Pd^T do;  dS = P (M dPd - rowsum(Pd dPd));  dq += scale dS k;  dk += scale dS^T q.
 * Under the mask dPd is computed (and dS kept) on and below the diagonal only. */
static void V(plain_bwd)(const dt_attn_head *h, const float *o, const float *do_, const float *P, float *dq,
                       float *dk, float *dv, float *ws)
{
        (void)o;
        const int T = h->T, D = h->D;
        const size_t ld = h->ld, ldo = h->ldo;
        float *dP = ws, *Pd = ws + (size_t)T * T;
        V(mm)(h, DT_MM_JLE, T, T, D, 1.0f, do_, ldo, 1, h->v, ld, 1, 0.0f, dP, T);
        const float *pd = V(dropped)(h, 0, T, 0, T, P, Pd);
        V(mm)(h, DT_MM_KGE, T, D, T, 1.0f, pd, 1, T, do_, ldo, 0, 1.0f, dv, ld);
        for (int t = 0; t < T; t++) {
                float *g = dP + (size_t)t * T;
                const float *r = P + (size_t)t * T, *rd = pd + (size_t)t * T;
                int nv = V(valid)(h, t, 0, T);
                float dd = (float)V(dot8)(rd, g, nv);
                if (h->p == 0.0f)       /* m = 1: m g = g exactly */
                        for (int s = 0; s < nv; s++) g[s] = r[s] * (g[s] - dd);
                else
                        for (int s = 0; s < nv; s++) g[s] = r[s] * (V(keep)(h, t, s) * g[s] - dd);
                for (int s = nv; s < T; s++) g[s] = 0.0f;
        }
        V(mm)(h, DT_MM_KLE, T, D, T, h->scale, dP, T, 1, h->k, ld, 0, 1.0f, dq, ld);
        V(mm)(h, DT_MM_KGE, T, D, T, h->scale, dP, 1, T, h->q, ld, 0, 1.0f, dk, ld);
}

/* ---- blocked: tiles of block queries x block keys; a row's maximum m and sum l run over the key
 * tiles, and the output accumulates rescaled by exp(m_old - m_new) whenever m rises ---- */

/* the key tiles a query tile [t0, t0 + n) reads: all, or up to its last row under the mask */
static int V(keys_for)(const dt_attn_head *h, int t0, int n) { return h->causal ? t0 + n : h->T; }

/* one query tile: m, l, acc over the key tiles; o = acc / l, lse = m + log l */
static void V(fwd_tile)(const dt_attn_head *h, int t0, int n, float *o, float *lse, float *ws)
{
        const int D = h->D, bk = h->block, ns = V(keys_for)(h, t0, n);
        float *S = ws, *Pd = S + (size_t)bk * bk, *acc = Pd + (size_t)bk * bk, *m = acc + (size_t)bk * D,
              *l = m + bk;
        memset(acc, 0, (size_t)n * D * sizeof *acc);
        for (int a = 0; a < n; a++) m[a] = -INFINITY, l[a] = 0;
        for (int s0 = 0; s0 < ns; s0 += bk) {
                int mk = V(mini)(bk, ns - s0);
                V(scores)(h, t0, n, s0, mk, S);
                for (int a = 0; a < n; a++) {
                        float *r = S + (size_t)a * mk;
                        int nv = V(valid)(h, t0 + a, s0, mk);
                        float mx = V(row_max)(r, nv, m[a]);
                        float corr = m[a] == mx ? 1.0f : expf(m[a] - mx);  /* the first tile: exp(-inf) = 0 */
                        float sum = V(exp_row)(r, nv, mk, mx);
                        l[a] = l[a] * corr + sum;
                        m[a] = mx;
                        if (corr != 1.0f)
                                for (int d = 0; d < D; d++) acc[(size_t)a * D + d] *= corr;
                }
                const float *pd = V(dropped)(h, t0, n, s0, mk, S, Pd);
                h->be->ops->gemm(h->be, 0, 0, n, D, mk, 1.0f, pd, mk, h->v + (size_t)s0 * h->ld, (int)h->ld, 1.0f,
                                 acc, D);
        }
        for (int a = 0; a < n; a++) {
                float inv = 1.0f / l[a];
                for (int d = 0; d < D; d++) o[(size_t)(t0 + a) * h->ldo + d] = acc[(size_t)a * D + d] * inv;
                lse[t0 + a] = m[a] + logf(l[a]);
        }
}

static void V(blocked_fwd)(const dt_attn_head *h, float *o, float *lse, float *ws)
{
        for (int t0 = 0; t0 < h->T; t0 += h->block) V(fwd_tile)(h, t0, V(mini)(h->block, h->T - t0), o, lse, ws);
}

/* one query tile against one key tile: P = exp(S - lse); dPd = do v^T; dv += Pd^T do;
 * dS = P (M dPd - Dv);  dq += scale dS k;  dk += scale dS^T q */
static void V(bwd_tile)(const dt_attn_head *h, int t0, int n, int s0, int mk, const float *do_, const float *lse,
                     const float *Dv, float *dq, float *dk, float *dv, float *ws)
{
        const int D = h->D, ld = (int)h->ld, ldo = (int)h->ldo, bk = h->block;
        const dt_backend_ops *op = h->be->ops;
        float *P = ws, *dP = P + (size_t)bk * bk, *Pd = dP + (size_t)bk * bk;
        V(scores)(h, t0, n, s0, mk, P);
        for (int a = 0; a < n; a++) V(exp_row)(P + (size_t)a * mk, V(valid)(h, t0 + a, s0, mk), mk, lse[t0 + a]);
        op->gemm(h->be, 0, 1, n, mk, D, 1.0f, do_ + (size_t)t0 * ldo, ldo, h->v + (size_t)s0 * ld, ld, 0.0f, dP, mk);
        const float *pd = V(dropped)(h, t0, n, s0, mk, P, Pd);
        op->gemm(h->be, 1, 0, mk, D, n, 1.0f, pd, mk, do_ + (size_t)t0 * ldo, ldo, 1.0f, dv + (size_t)s0 * ld, ld);
        for (int a = 0; a < n; a++)
                for (int c = 0; c < mk; c++) {
                        size_t i = (size_t)a * mk + c;
                        float m = h->p == 0.0f ? 1.0f : V(keep)(h, t0 + a, s0 + c);
                        dP[i] = P[i] * (m * dP[i] - Dv[t0 + a]);
                }
        op->gemm(h->be, 0, 0, n, D, mk, h->scale, dP, mk, h->k + (size_t)s0 * ld, ld, 1.0f, dq + (size_t)t0 * ld, ld);
        op->gemm(h->be, 1, 0, mk, D, n, h->scale, dP, mk, h->q + (size_t)t0 * ld, ld, 1.0f, dk + (size_t)s0 * ld, ld);
}

/* Dv[t] = do[t] . o[t] (= sum_s Pd dPd, the softmax's row term), then every tile pair in order */
static void V(blocked_bwd)(const dt_attn_head *h, const float *o, const float *do_, const float *lse, float *dq,
                         float *dk, float *dv, float *ws)
{
        const int T = h->T, D = h->D, bk = h->block;
        float *Dv = ws + dt_attn_blocked_ws(T, D, bk) - T;
        for (int t = 0; t < T; t++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)do_[(size_t)t * h->ldo + d] * o[(size_t)t * h->ldo + d];
                Dv[t] = (float)s;
        }
        for (int t0 = 0; t0 < T; t0 += bk) {
                int n = V(mini)(bk, T - t0), ns = V(keys_for)(h, t0, n);
                for (int s0 = 0; s0 < ns; s0 += bk)
                        V(bwd_tile)(h, t0, n, s0, V(mini)(bk, ns - s0), do_, lse, Dv, dq, dk, dv, ws);
        }
}

const dt_attn_kern ATTN_TABLE = {
        .plain_fwd = V(plain_fwd), .plain_bwd = V(plain_bwd),
        .blocked_fwd = V(blocked_fwd), .blocked_bwd = V(blocked_bwd),
};
