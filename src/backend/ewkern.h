/* backend/ewkern.h - the elementwise loops of ew.h, included once per CPU path by ew.c,
 * ew_avx2.c and ew_avx512.c after that path's target pragma, so that each loop is vectorised for
 * the path. V(name) names the path's copy, EW_TABLE its table. No include guard. */
#include <math.h>
#include <string.h>
#include "backend/ew.h"
#include "util/common.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* 64-byte vectors between static inline helpers of one file */
#endif

/* gelu(x) = x * Phi(x), the exact (erf) form PyTorch uses by default */
static inline float V(gelu)(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float V(gelu_grad)(float x)
{
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        return cdf + x * pdf;
}

/* ---- gelu_tanh(x) = x/2 (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), PyTorch's
 * gelu(approximate='tanh'), as x s with s = 1 / (1 + e^m), m = -2u (x/2 (1 + tanh u) = x sigm 2u):
 *   forward  x / (1 + e^m)
 *   backward s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 0.044715 x^2)
 * in explicit 16-float vectors, the tail through one padded vector, so every element is the same
 * expression on every path and at any offset (no FMA contraction under -std=c11). Written as the
 * scalar loops before, GCC split each loop three ways at the exponent's clamps (three divides a
 * vector) and the forward and backward took 0.78 and 0.91 ms on 2048 x 512 (Xeon, AVX-512); as
 * vectors with one divide and a shorter exp, 0.55 and 0.67 ms, where a pass that only reads and
 * writes as much takes 0.42. Within 6e-8 absolute of the double-precision formula (relative 6e-6
 * only where gelu is below 1e-30 of x). ---- */
typedef float V(vf) __attribute__((vector_size(64)));
/* inlined on every path: GCC left gexp a call on the avx512 one (the vector through memory) */
#define GINL __attribute__((always_inline))
typedef int32_t V(vi) __attribute__((vector_size(64)));
#define GL 16

static inline GINL V(vf) V(splat)(float a)
{
        V(vf) v;
        for (int i = 0; i < GL; i++) v[i] = a;
        return v;
}

/* e^m for the gelu: m clamped to [-87, 88], m = n ln2 + r (one rounding of n ln2: the relative error
 * grows to 5e-6 only at |n| ~ 126, where e^m swamps or vanishes beside 1), e^r by Cephes' polynomial
 * less its last term (2e-7 relative on |r| <= ln2/2), 2^n through the exponent bits */
static inline GINL V(vf) V(gexp)(const V(vf) *pm)
{
        const V(vf) hi = V(splat)(88.0f), lo = V(splat)(-87.0f), magic = V(splat)(12582912.0f);
        V(vf) x = *pm;
        V(vi) k = x > hi;
        x = (V(vf))((k & (V(vi))hi) | (~k & (V(vi))x));
        k = x < lo;
        x = (V(vf))((k & (V(vi))lo) | (~k & (V(vi))x));
        V(vf) t = x * V(splat)(1.44269504088896341f) + magic;     /* round(x log2 e) in the low bits */
        V(vi) ni = (V(vi))t - 0x4B400000;
        V(vf) n = t - magic;
        V(vf) r = x - n * V(splat)(0.693147182f);
        V(vf) p = V(splat)(1.3981999507e-3f);
        p = p * r + V(splat)(8.3334519073e-3f);
        p = p * r + V(splat)(4.1665795894e-2f);
        p = p * r + V(splat)(1.6666665459e-1f);
        p = p * r + V(splat)(5.0000001201e-1f);
        p = p * r * r + r + V(splat)(1.0f);
        return p * (V(vf))((ni + 127) << 23);
}

/* m = -2u = x (-2 sqrt(2/pi) - 2 sqrt(2/pi) 0.044715 x^2) */
static inline GINL V(vf) V(gelu_m)(const V(vf) *x, const V(vf) *x2)
{
        return *x * (V(splat)(-1.5957691216057308f) + V(splat)(-0.071354816f) * *x2);
}

static inline GINL V(vf) V(gelu_tanh_v)(const V(vf) *x)
{
        V(vf) x2 = *x * *x, m = V(gelu_m)(x, &x2);
        return *x / (V(splat)(1.0f) + V(gexp)(&m));
}

static inline GINL V(vf) V(gelu_tanh_grad_v)(const V(vf) *x)
{
        V(vf) x2 = *x * *x, m = V(gelu_m)(x, &x2);
        V(vf) s = V(splat)(1.0f) / (V(splat)(1.0f) + V(gexp)(&m));
        return s + *x * (s * (V(splat)(1.0f) - s)) * (V(splat)(1.5957691216057308f) + V(splat)(0.21406445f) * x2);
}

static void V(gelu_tanh_fwd)(const float *x, float *y, size_t n)
{
        size_t i = 0;
        for (; i + GL <= n; i += GL) {
                V(vf) a, r;
                memcpy(&a, x + i, sizeof a);
                r = V(gelu_tanh_v)(&a);
                memcpy(y + i, &r, sizeof r);
        }
        if (i < n) {
                V(vf) a = V(splat)(0.0f), r;
                memcpy(&a, x + i, (n - i) * sizeof *x);
                r = V(gelu_tanh_v)(&a);
                memcpy(y + i, &r, (n - i) * sizeof *y);
        }
}

static void V(gelu_tanh_bwd)(const float *x, const float *dy, float *dx, size_t n)
{
        size_t i = 0;
        for (; i + GL <= n; i += GL) {
                V(vf) a, d, r;
                memcpy(&a, x + i, sizeof a);
                memcpy(&d, dy + i, sizeof d);
                r = d * V(gelu_tanh_grad_v)(&a);
                memcpy(dx + i, &r, sizeof r);
        }
        if (i < n) {
                V(vf) a = V(splat)(0.0f), d = V(splat)(0.0f), r;
                memcpy(&a, x + i, (n - i) * sizeof *x);
                memcpy(&d, dy + i, (n - i) * sizeof *dy);
                r = d * V(gelu_tanh_grad_v)(&a);
                memcpy(dx + i, &r, (n - i) * sizeof *dx);
        }
}
#undef GL
#undef GINL

static void V(act_fwd)(dt_act a, float alpha, const float *x, float *y, size_t n)
{
        switch (a) {
        case DT_ACT_NONE: if (x != y) memmove(y, x, n * sizeof *y); break;
        case DT_ACT_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
        case DT_ACT_LEAKY_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : alpha * x[i]; break;
        case DT_ACT_TANH: for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
        case DT_ACT_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
        case DT_ACT_GELU: for (size_t i = 0; i < n; i++) y[i] = V(gelu)(x[i]); break;
        case DT_ACT_GELU_TANH: V(gelu_tanh_fwd)(x, y, n); break;
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
        case DT_ACT_GELU_TANH: V(gelu_tanh_bwd)(x, dy, dx, n); break;
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
