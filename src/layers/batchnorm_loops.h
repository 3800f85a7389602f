/* layers/batchnorm_loops.h - batch normalisation's host loops (the plain C every path shares),
 * included once per CPU path: by batchnorm.c for generic, by batchnorm_body.h (in batchnorm_avx2.c
 * and batchnorm_avx512.c) under their path's target, so the compiler vectorises the same C for each
 * (no FMA contraction under -std=c11 and no reassociation: the same bits on every path). V(name)
 * names the path's copies; BN_VEC 1 sends (C,H,W) inputs with f none or relu to BN_VEC_FN(fwd|bwd),
 * the path's vector kernels. No include guard. */

/* ---- host loops (cpu backend) ----
 * Channel c's n = B*S values are B rows of S contiguous floats, a stride of C*S apart. Each row is
 * summed in LANES float accumulators (independent, so the compiler vectorises them without
 * reassociating anything), folded in lane order and added into doubles across rows: one fixed order
 * per channel. Channels are split over the backend's threads, each channel on one thread, so the
 * results do not depend on the thread count. A fused activation is applied on the way out and its
 * derivative recomputed from x in backward (z = a x + b is the same expression, no FMA contraction
 * under -std=c11, so bit for bit the z of forward): no pass over a separate pre-activation, no
 * stored z, and the activation layer's own passes are gone. */

static inline double V(fold)(const float *acc)
{
        float s = 0;
        for (int k = 0; k < LANES; k++) s += acc[k];
        return s;
}

/* s1 += sum (r - k), s2 += sum (r - k)^2 over one row */
static void V(row_moments)(const float *restrict r, size_t S, float k, double *s1, double *s2)
{
        float a[LANES] = { 0 }, q2[LANES] = { 0 };
        size_t q = 0;
        for (; q + LANES <= S; q += LANES)
                for (int j = 0; j < LANES; j++) {
                        float d = r[q + j] - k;
                        a[j] += d;
                        q2[j] += d * d;
                }
        for (int j = 0; q < S; q++, j++) {
                float d = r[q] - k;
                a[j] += d;
                q2[j] += d * d;
        }
        *s1 += V(fold)(a);
        *s2 += V(fold)(q2);
}

/* One row of y = f(a x + b); z may be y. */
static void V(row_out)(const dt_layer *l, const float *restrict x, float *restrict y, size_t S, float a, float b)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_RELU) {
                for (size_t q = 0; q < S; q++) {
                        float z = a * x[q] + b;
                        y[q] = z > 0 ? z : 0.0f;
                }
                return;
        }
        for (size_t q = 0; q < S; q++) y[q] = a * x[q] + b;
        if (cf->act != DT_ACT_NONE) l->be->ops->act_fwd(l->be, cf->act, cf->alpha, y, y, S);
}

/* dz = f'(z) dy for one row's values [q0, q0 + m), m <= CHUNK, z = a x + b recomputed. */
static const float *V(row_dz)(const dt_layer *l, const float *x, const float *y, const float *dy, size_t m,
                           float a, float b, float *zbuf, float *dzbuf)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_NONE) return dy;
        if (cf->act == DT_ACT_RELU) {
                for (size_t q = 0; q < m; q++) {
                        float z = a * x[q] + b, g = dy[q];
                        dzbuf[q] = z > 0 ? g : 0.0f;
                }
                return dzbuf;
        }
        for (size_t q = 0; q < m; q++) zbuf[q] = a * x[q] + b;
        l->be->ops->act_bwd(l->be, cf->act, cf->alpha, zbuf, y, dy, dzbuf, m);
        return dzbuf;
}

/* ---- flat inputs (F features, S = 1: BatchNorm1d) ----
 * A channel's values are a column, C apart: the per-channel row loops above would handle one value
 * per call. Here a block of FB channels is walked row by row, vectorised across the channels, with
 * the same arithmetic per value as the row loops (float d and d*d, summed into doubles in sample
 * order), so the statistics are those the general path would compute. */
#define FB 256

static void V(fwd_flat)(const struct bn_job *j, int c0, int c1)
{
        dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        double s1[FB], s2[FB];
        float k[FB], a[FB], bb[FB];
        for (int cb = c0; cb < c1; cb += FB) {
                const int m = c1 - cb < FB ? c1 - cb : FB;
                if (j->training) {
                        for (int c = 0; c < m; c++) {
                                k[c] = j->x[cb + c];
                                s1[c] = s2[c] = 0;
                        }
                        for (int b = 0; b < B; b++) {
                                const float *r = j->x + (size_t)b * C + cb;
                                for (int c = 0; c < m; c++) {
                                        float d = r[c] - k[c];
                                        s1[c] += d;
                                        s2[c] += d * d;
                                }
                        }
                }
                for (int c = 0; c < m; c++) {
                        float mean, invstd;
                        if (j->training) {
                                double m1 = s1[c] / (double)B, var = s2[c] / (double)B - m1 * m1;
                                if (var < 0) var = 0;
                                double uvar = B > 1 ? var * (double)B / (double)(B - 1) : var;
                                mean = (float)(k[c] + m1);
                                invstd = (float)(1.0 / sqrt(var + cf->eps));
                                p->mean[cb + c] = mean;
                                p->invstd[cb + c] = invstd;
                                v.rmean[cb + c] = (1.0f - cf->momentum) * v.rmean[cb + c] + cf->momentum * mean;
                                v.rvar[cb + c] = (1.0f - cf->momentum) * v.rvar[cb + c] + cf->momentum * (float)uvar;
                        } else {
                                mean = v.rmean[cb + c];
                                invstd = (float)(1.0 / sqrt((double)v.rvar[cb + c] + cf->eps));
                        }
                        a[c] = (v.gamma ? v.gamma[cb + c] : 1.0f) * invstd;
                        bb[c] = (v.beta ? v.beta[cb + c] : 0.0f) - a[c] * mean;
                }
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + (size_t)b * C + cb;
                        float *o = j->out + (size_t)b * C + cb;
                        if (cf->act == DT_ACT_RELU) {
                                for (int c = 0; c < m; c++) {
                                        float z = a[c] * r[c] + bb[c];
                                        o[c] = z > 0 ? z : 0.0f;
                                }
                                continue;
                        }
                        for (int c = 0; c < m; c++) o[c] = a[c] * r[c] + bb[c];
                        if (cf->act != DT_ACT_NONE) l->be->ops->act_fwd(l->be, cf->act, cf->alpha, o, o, (size_t)m);
                }
        }
}

/* dz = f'(z) dy for m channels of one sample, z = a x + b recomputed */
static const float *V(flat_dz)(const dt_layer *l, const float *x, const float *y, const float *dy, int m,
                            const float *a, const float *b, float *zbuf, float *dzbuf)
{
        const struct bn_cfg *cf = l->cfg;
        if (cf->act == DT_ACT_NONE) return dy;
        if (cf->act == DT_ACT_RELU) {
                for (int c = 0; c < m; c++) {
                        float z = a[c] * x[c] + b[c], g = dy[c];
                        dzbuf[c] = z > 0 ? g : 0.0f;
                }
                return dzbuf;
        }
        for (int c = 0; c < m; c++) zbuf[c] = a[c] * x[c] + b[c];
        l->be->ops->act_bwd(l->be, cf->act, cf->alpha, zbuf, y, dy, dzbuf, (size_t)m);
        return dzbuf;
}

static void V(bwd_flat)(const struct bn_job *j, int c0, int c1)
{
        dt_layer *l = j->l;
        const struct bn_cfg *cf = l->cfg;
        struct bn_priv *p = l->priv;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        double sdy[FB], sdyx[FB];
        float mean[FB], invstd[FB], a[FB], bb[FB], kk[FB], bx[FB], zbuf[FB], dzbuf[FB];
        for (int cb = c0; cb < c1; cb += FB) {
                const int m = c1 - cb < FB ? c1 - cb : FB;
                for (int c = 0; c < m; c++) {
                        if (j->training) {
                                mean[c] = p->mean[cb + c];
                                invstd[c] = p->invstd[cb + c];
                        } else {
                                mean[c] = v.rmean[cb + c];
                                invstd[c] = (float)(1.0 / sqrt((double)v.rvar[cb + c] + cf->eps));
                        }
                        a[c] = (v.gamma ? v.gamma[cb + c] : 1.0f) * invstd[c];
                        bb[c] = (v.beta ? v.beta[cb + c] : 0.0f) - a[c] * mean[c];
                        sdy[c] = sdyx[c] = 0;
                }
                for (int b = 0; b < B; b++) {
                        size_t o = (size_t)b * C + cb;
                        const float *r = j->x + o;
                        const float *dz = V(flat_dz)(l, r, j->y + o, j->dy + o, m, a, bb, zbuf, dzbuf);
                        for (int c = 0; c < m; c++) {
                                sdy[c] += dz[c];
                                sdyx[c] += dz[c] * (r[c] - mean[c]);
                        }
                }
                for (int c = 0; c < m; c++) {
                        sdyx[c] *= invstd[c];   /* sum dz xhat */
                        if (v.dbeta) {
                                v.dbeta[cb + c] += (float)sdy[c];
                                v.dgamma[cb + c] += (float)sdyx[c];
                        }
                        bx[c] = j->training ? (float)(a[c] * sdy[c] / (double)B) : 0.0f;
                        kk[c] = j->training ? (float)(a[c] * sdyx[c] * invstd[c] / (double)B) : 0.0f;
                }
                if (!j->out) continue;
                for (int b = 0; b < B; b++) {
                        size_t o = (size_t)b * C + cb;
                        const float *r = j->x + o;
                        const float *dz = V(flat_dz)(l, r, j->y + o, j->dy + o, m, a, bb, zbuf, dzbuf);
                        float *dx = j->out + o;
                        for (int c = 0; c < m; c++) dx[c] = a[c] * dz[c] - kk[c] * (r[c] - mean[c]) - bx[c];
                }
        }
}

static void V(fwd_part)(void *arg, int t, int nt)
{
        const struct bn_job *j = arg;
        dt_layer *l = j->l;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        const size_t S = v.S, st = (size_t)C * S;
        long c0, c1;
        if (S == 1) {
                dt_par_range(C, t, nt, 16, &c0, &c1);
                V(fwd_flat)(j, (int)c0, (int)c1);
                return;
        }
        dt_par_range(C, t, nt, 1, &c0, &c1);
#if BN_VEC
        const dt_act act = ((const struct bn_cfg *)l->cfg)->act;
        if (!dt_bn_plain && (act == DT_ACT_NONE || act == DT_ACT_RELU)) {
                if (c1 > c0) BN_VEC_FN(fwd)(j, (int)c0, (int)c1);
                return;
        }
#endif
        for (int c = (int)c0; c < (int)c1; c++) {
                const float *xc = j->x + (size_t)c * S;
                float k = xc[0], a, bb;
                double s1 = 0, s2 = 0;
                if (j->training)
                        for (int b = 0; b < B; b++) V(row_moments)(xc + b * st, S, k, &s1, &s2);
                dt_bn_fwd_coef(j, c, k, s1, s2, &a, &bb);
                for (int b = 0; b < B; b++) V(row_out)(l, xc + b * st, j->out + (size_t)c * S + b * st, S, a, bb);
        }
}

static void V(bwd_part)(void *arg, int t, int nt)
{
        const struct bn_job *j = arg;
        dt_layer *l = j->l;
        struct bn_view v = view_of(l);
        const int C = v.C, B = j->B;
        const size_t S = v.S, st = (size_t)C * S;
        float zbuf[CHUNK], dzbuf[CHUNK];
        long c0, c1;
        if (S == 1) {
                dt_par_range(C, t, nt, 16, &c0, &c1);
                V(bwd_flat)(j, (int)c0, (int)c1);
                return;
        }
        dt_par_range(C, t, nt, 1, &c0, &c1);
#if BN_VEC
        const dt_act act = ((const struct bn_cfg *)l->cfg)->act;
        if (!dt_bn_plain && (act == DT_ACT_NONE || act == DT_ACT_RELU)) {
                if (c1 > c0) BN_VEC_FN(bwd)(j, (int)c0, (int)c1);
                return;
        }
#endif
        for (int c = (int)c0; c < (int)c1; c++) {
                const size_t off = (size_t)c * S;
                float mean, invstd, a, bb, kk, bx;
                dt_bn_bwd_coef(j, c, &mean, &invstd, &a, &bb);
                double sdy = 0, sdyx = 0;
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + off + b * st, *yr = j->y + off + b * st, *g = j->dy + off + b * st;
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t m = S - q0 < CHUNK ? S - q0 : CHUNK;
                                const float *dz = V(row_dz)(l, r + q0, yr + q0, g + q0, m, a, bb, zbuf, dzbuf);
                                float tt[LANES] = { 0 }, u[LANES] = { 0 };
                                size_t q = 0;
                                for (; q + LANES <= m; q += LANES)
                                        for (int k = 0; k < LANES; k++) {
                                                tt[k] += dz[q + k];
                                                u[k] += dz[q + k] * (r[q0 + q + k] - mean);
                                        }
                                for (int k = 0; q < m; q++, k++) {
                                        tt[k] += dz[q];
                                        u[k] += dz[q] * (r[q0 + q] - mean);
                                }
                                sdy += V(fold)(tt);
                                sdyx += V(fold)(u);
                        }
                }
                dt_bn_bwd_finish(j, c, sdy, sdyx, a, invstd, &kk, &bx);
                if (!j->out) continue;
                for (int b = 0; b < B; b++) {
                        const float *r = j->x + off + b * st, *yr = j->y + off + b * st, *g = j->dy + off + b * st;
                        float *o = j->out + off + b * st;
                        for (size_t q0 = 0; q0 < S; q0 += CHUNK) {
                                size_t m = S - q0 < CHUNK ? S - q0 : CHUNK;
                                const float *dz = V(row_dz)(l, r + q0, yr + q0, g + q0, m, a, bb, zbuf, dzbuf);
                                for (size_t q = 0; q < m; q++) o[q0 + q] = a * dz[q] - kk * (r[q0 + q] - mean) - bx;
                        }
                }
        }
}
