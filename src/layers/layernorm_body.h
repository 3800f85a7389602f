/* layers/layernorm_body.h - layernorm_kern.h's loops, included once per CPU path by layernorm_kern.c
 * with LN_NAME(x) set (and that path's target); it undefines LN_NAME at its end. Moved from
 * layernorm.c unchanged, expression for expression: the same bits on every path (no FMA
 * contraction under -std=c11; the row sums' 16 lanes are added up in one fixed order). */

/* Row sums in 16 float lanes, added up at the end: a fixed order (the same bits on every thread and
 * path) that the compiler turns into vector adds, unlike one running sum. */
static float LN_NAME(lanes_total)(const float *a)
{
        float s = 0;
        for (int k = 0; k < LN_LANES; k++) s += a[k];
        return s;
}

/* sum_i x[i] */
static float LN_NAME(row_sum)(const float *x, size_t n)
{
        float a[LN_LANES] = { 0 };
        size_t i = 0;
        for (; i + LN_LANES <= n; i += LN_LANES)
                for (int k = 0; k < LN_LANES; k++) a[k] += x[i + k];
        for (int k = 0; i + k < n; k++) a[k] += x[i + k];
        return LN_NAME(lanes_total)(a);
}

/* sum_i (x[i] - c)^2 */
static float LN_NAME(row_sumsq)(const float *x, size_t n, float c)
{
        float a[LN_LANES] = { 0 };
        size_t i = 0;
        for (; i + LN_LANES <= n; i += LN_LANES)
                for (int k = 0; k < LN_LANES; k++) a[k] += (x[i + k] - c) * (x[i + k] - c);
        for (int k = 0; i + k < n; k++) a[k] += (x[i + k] - c) * (x[i + k] - c);
        return LN_NAME(lanes_total)(a);
}

static void LN_NAME(fwd)(const float *xs, float *ys, float *mean, float *rstd, const float *w, const float *b,
                         float eps, size_t F, size_t r0, size_t r1)
{
        for (size_t r = r0; r < r1; r++) {
                const float *x = xs + r * F;
                float *y = ys + r * F;
                float mu = LN_NAME(row_sum)(x, F) / (float)F;
                float rs = 1.0f / sqrtf(LN_NAME(row_sumsq)(x, F, mu) / (float)F + eps);
                mean[r] = mu;
                rstd[r] = rs;
                if (w)
                        for (size_t i = 0; i < F; i++) y[i] = (x[i] - mu) * rs * w[i] + b[i];
                else
                        for (size_t i = 0; i < F; i++) y[i] = (x[i] - mu) * rs;
        }
}

static void LN_NAME(bwd)(const float *xs, const float *dys, float *dxs, const float *mean, const float *rstd,
                         const float *w, size_t F, size_t r0, size_t r1, float *g)
{
        float *gh = g + F;
        for (size_t r = r0; r < r1; r++) {
                const float *x = xs + r * F, *dy = dys + r * F;
                float *dx = dxs + r * F, mu = mean[r], rs = rstd[r];
                for (size_t i = 0; i < F; i++) {
                        g[i] = w ? dy[i] * w[i] : dy[i];
                        gh[i] = g[i] * ((x[i] - mu) * rs);
                }
                float mg = LN_NAME(row_sum)(g, F) / (float)F, mgh = LN_NAME(row_sum)(gh, F) / (float)F;
                for (size_t i = 0; i < F; i++) dx[i] = rs * (g[i] - mg - (x[i] - mu) * rs * mgh);
        }
}

static void LN_NAME(params)(const float *xs, const float *dys, const float *mean, const float *rstd, size_t F,
                            size_t R, size_t lo, size_t n, float *aw, float *ab)
{
        for (size_t r = 0; r < R; r++) {
                const float *x = xs + r * F + lo, *dy = dys + r * F + lo;
                float mu = mean[r], rs = rstd[r];
                for (size_t i = 0; i < n; i++) {
                        aw[i] += dy[i] * ((x[i] - mu) * rs);
                        ab[i] += dy[i];
                }
        }
}

static const dt_ln_kern LN_NAME(k) = { .fwd = LN_NAME(fwd), .bwd = LN_NAME(bwd), .params = LN_NAME(params) };

#undef LN_NAME
