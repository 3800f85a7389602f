/* backend/ewkern.h - the elementwise loops of ew.h, included once per CPU path by ew.c,
 * ew_avx2.c and ew_avx512.c after that path's target pragma, so that each loop is vectorised for
 * the path. V(name) names the path's copy, EW_TABLE its table. No include guard. */
#include <math.h>
#include <string.h>
#include "backend/ew.h"
#include "util/common.h"

/* gelu(x) = x * Phi(x), the exact (erf) form PyTorch uses by default */
static inline float V(gelu)(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float V(gelu_grad)(float x)
{
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        return cdf + x * pdf;
}

/* e^x for the vector loops: Cephes' expf (x = n ln2 + r, e^r by a degree-6 polynomial, 2^n through
 * the exponent bits), x clamped to [-87, 88]; branch-free, so the loops below vectorise (libm's expf
 * does not) */
static inline float V(vexpf)(float x)
{
        x = x > 88.0f ? 88.0f : x;
        x = x < -87.0f ? -87.0f : x;
        float t = x * 1.44269504088896341f + 12582912.0f;       /* round(x log2 e) in the low bits */
        int32_t ti, bits;
        memcpy(&ti, &t, sizeof ti);
        float n = t - 12582912.0f;
        float r = x - n * 0.693359375f;
        r = r - n * -2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        bits = (ti - 0x4B400000 + 127) << 23;
        float s;
        memcpy(&s, &bits, sizeof s);
        return p * s;
}

/* gelu_tanh(x) = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); tanh u = 1 - 2 / (e^2u + 1) */
static inline float V(tanh_u)(float x)
{
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return 1.0f - 2.0f / (V(vexpf)(u + u) + 1.0f);
}
static inline float V(gelu_tanh)(float x) { return 0.5f * x * (1.0f + V(tanh_u)(x)); }
/* d/dx = (1 + th) / 2 + x/2 (1 - th^2) sqrt(2/pi) (1 + 3 0.044715 x^2) */
static inline float V(gelu_tanh_grad)(float x)
{
        float th = V(tanh_u)(x);
        return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
}

static void V(act_fwd)(dt_act a, float alpha, const float *x, float *y, size_t n)
{
        switch (a) {
        case DT_ACT_NONE: if (x != y) memmove(y, x, n * sizeof *y); break;
        case DT_ACT_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
        case DT_ACT_LEAKY_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : alpha * x[i]; break;
        case DT_ACT_TANH: for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
        case DT_ACT_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
        case DT_ACT_GELU: for (size_t i = 0; i < n; i++) y[i] = V(gelu)(x[i]); break;
        case DT_ACT_GELU_TANH: for (size_t i = 0; i < n; i++) y[i] = V(gelu_tanh)(x[i]); break;
        default: DT_ASSERT(0);
        }
}

static void V(act_bwd)(dt_act a, float alpha, const float *x, const float *y, const float *dy, float *dx, size_t n)
{
        switch (a) {
        case DT_ACT_NONE: if (dx != dy) memmove(dx, dy, n * sizeof *dx); break;
        case DT_ACT_RELU: /* branch-free so it vectorises */
                for (size_t i = 0; i < n; i++) { float d = dy[i]; dx[i] = x[i] > 0 ? d : 0.0f; }
                break;
        case DT_ACT_LEAKY_RELU: for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : alpha * dy[i]; break;
        case DT_ACT_TANH: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]); break;
        case DT_ACT_SIGMOID: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]); break;
        case DT_ACT_GELU: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * V(gelu_grad)(x[i]); break;
        case DT_ACT_GELU_TANH: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * V(gelu_tanh_grad)(x[i]); break;
        default: DT_ASSERT(0);
        }
}

static void V(bias_add)(float *y, const float *b, int rows, int cols)
{
        for (int r = 0; r < rows; r++) {
                float *yr = y + (size_t)r * cols;
                for (int c = 0; c < cols; c++) yr[c] += b[c];
        }
}

static void V(bias_grad)(float *db, const float *dy, int rows, int cols, int c0, int c1)
{
        for (int r = 0; r < rows; r++) {
                const float *d = dy + (size_t)r * cols;
                for (int c = c0; c < c1; c++) db[c] += d[c];
        }
}

static void V(axpy)(size_t n, float a, const float *x, float *y)
{
        for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void V(scale)(size_t n, float a, float *x)
{
        for (size_t i = 0; i < n; i++) x[i] *= a;
}

static void V(mul)(size_t n, const float *x, const float *mask, float *y)
{
        for (size_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

static void V(add)(size_t n, const float *a, const float *b, float *y)
{
        for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* 32 independent double lanes, then summed in a fixed order: the compiler vectorises the lanes
 * (a single running sum was one dependent add per element, 0.3 ms of mlp's 2.5 ms step), and the
 * result still depends only on n, not on the machine, the path or the thread count. */
#define SUMSQ_LANES 32
static double V(sumsq)(const float *x, size_t n)
{
        double acc[SUMSQ_LANES] = { 0 };
        size_t i = 0;
        for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
                for (int j = 0; j < SUMSQ_LANES; j++) acc[j] += (double)x[i + j] * x[i + j];
        for (int j = 0; i < n; i++, j++) acc[j] += (double)x[i] * x[i];
        for (int w = SUMSQ_LANES / 2; w > 0; w /= 2)
                for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        return acc[0];
}
#undef SUMSQ_LANES

/* A path may bring its own (EW_DROPOUT_MASK, defined before the include: ew_avx2.c's) */
#ifndef EW_DROPOUT_MASK
#define EW_DROPOUT_MASK V(dropout_mask)
static void V(dropout_mask)(float *mask, int b0, int b1, size_t per, uint64_t key, long pos0, float p)
{
        const float keep = 1.0f / (1.0f - p);
        for (int b = b0; b < b1; b++) {
                float *mb = mask + (size_t)b * per;
                for (size_t j = 0; j < per; j++)
                        mb[j] = dt_dropout_keep(key, (uint64_t)(pos0 + b), j, p) ? keep : 0.0f;
        }
}
#endif

/* ---- optimizers, each as the torch.optim docs state it ---- */

/* momentum and Nesterov with the first step and Nesterov as constants after inlining: a branch on
 * them inside the loop keeps GCC from vectorizing it, and the per-element arithmetic is the same */
static inline __attribute__((always_inline)) void V(momentum)(float lr, float wd, float mu, float damp,
                                                              float *p, const float *g, float *m,
                                                              size_t n, const int first, const int nest)
{
        for (size_t i = 0; i < n; i++) {
                float gi = g[i] + wd * p[i];
                float b = first ? gi : mu * m[i] + (1.0f - damp) * gi;
                m[i] = b;
                p[i] -= lr * (nest ? gi + mu * b : b);
        }
}

/* sgd:      g' = g + wd p;  p -= lr g'
 * momentum: b = mu b + (1 - damp) g'  (b = g' at t = 1);  p -= lr b
 * nesterov: as momentum, then p -= lr (g' + mu b) */
static void V(sgd)(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, size_t n)
{
        const float wd = hp->weight_decay, mu = hp->momentum, damp = hp->dampening;
        if (hp->kind == DT_OPT_SGD) {
                for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + wd * p[i]);
                return;
        }
        const int nest = hp->kind == DT_OPT_NESTEROV;
        if (t == 1 && nest) V(momentum)(lr, wd, mu, damp, p, g, m, n, 1, 1);
        else if (t == 1) V(momentum)(lr, wd, mu, damp, p, g, m, n, 1, 0);
        else if (nest) V(momentum)(lr, wd, mu, damp, p, g, m, n, 0, 1);
        else V(momentum)(lr, wd, mu, damp, p, g, m, n, 0, 0);
}

/* rmsprop: v = a v + (1 - a) g'^2;  d = g' / (sqrt(v) + eps);
 *          with momentum: b = mu b + d, p -= lr b;  else p -= lr d */
static void V(rmsprop)(const dt_optim_hp *hp, float lr, float *p, const float *g, float *m, float *v, size_t n)
{
        const float wd = hp->weight_decay, a = hp->alpha, eps = hp->eps, mu = hp->momentum;
        if (mu > 0) {
                for (size_t i = 0; i < n; i++) {
                        float gi = g[i] + wd * p[i];
                        v[i] = a * v[i] + (1.0f - a) * gi * gi;
                        m[i] = mu * m[i] + gi / (sqrtf(v[i]) + eps);
                        p[i] -= lr * m[i];
                }
                return;
        }
        for (size_t i = 0; i < n; i++) {
                float gi = g[i] + wd * p[i];
                v[i] = a * v[i] + (1.0f - a) * gi * gi;
                p[i] -= lr * (gi / (sqrtf(v[i]) + eps));
        }
}

/* adam:  g' = g + wd p;  adamw: p *= 1 - lr wd, g' = g
 *        m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
 *        p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void V(adam)(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, float *v, size_t n)
{
        const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
        const float bc1 = 1.0f - powf(b1, (float)t);
        const float bc2s = sqrtf(1.0f - powf(b2, (float)t));
        const float step = lr / bc1;
        if (hp->kind == DT_OPT_ADAMW) {
                const float keep = 1.0f - lr * wd;
                for (size_t i = 0; i < n; i++) {
                        float gi = g[i];
                        p[i] *= keep;
                        m[i] = b1 * m[i] + (1.0f - b1) * gi;
                        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
                        p[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);
                }
                return;
        }
        for (size_t i = 0; i < n; i++) {
                float gi = g[i] + wd * p[i];
                m[i] = b1 * m[i] + (1.0f - b1) * gi;
                v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
                p[i] -= step * m[i] / (sqrtf(v[i]) / bc2s + eps);
        }
}

static void V(optim)(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, float *v, size_t n)
{
        switch (hp->kind) {
        case DT_OPT_SGD: case DT_OPT_MOMENTUM: case DT_OPT_NESTEROV: V(sgd)(hp, lr, t, p, g, m, n); break;
        case DT_OPT_RMSPROP: V(rmsprop)(hp, lr, p, g, m, v, n); break;
        case DT_OPT_ADAM: case DT_OPT_ADAMW: V(adam)(hp, lr, t, p, g, m, v, n); break;
        default: DT_ASSERT(0);
        }
}

const dt_ew_kern EW_TABLE = {
        .act_fwd = V(act_fwd), .act_bwd = V(act_bwd), .bias_add = V(bias_add), .bias_grad = V(bias_grad),
        .axpy = V(axpy), .scale = V(scale), .mul = V(mul), .add = V(add), .sumsq = V(sumsq),
        .dropout_mask = EW_DROPOUT_MASK, .optim = V(optim),
};
#undef EW_DROPOUT_MASK
