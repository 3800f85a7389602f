/* backend/cpu.c - the CPU backend: OpenBLAS SGEMM and plain C loops the compiler vectorises.
 * Activation math lives here once; every layer that needs f(x) or f'(x) calls these. */
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "util/common.h"

const char *const dt_act_names[] = { "none", "relu", "leaky_relu", "tanh", "sigmoid", "gelu", NULL };

static float *cpu_alloc(dt_backend *be, size_t n) { (void)be; return dt_falloc(n); }
static void cpu_free(dt_backend *be, float *p) { (void)be; free(p); }
static void cpu_copy(dt_backend *be, float *dst, const float *src, size_t n)
{
        (void)be;
        if (dst != src) memmove(dst, src, n * sizeof *dst);
}
static void cpu_zero(dt_backend *be, float *x, size_t n) { (void)be; memset(x, 0, n * sizeof *x); }

static void cpu_gemm(dt_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
        (void)be;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_bias_add(dt_backend *be, float *y, const float *b, int rows, int cols)
{
        (void)be;
        for (int r = 0; r < rows; r++) {
                float *yr = y + (size_t)r * cols;
                for (int c = 0; c < cols; c++) yr[c] += b[c];
        }
}

static void cpu_bias_grad(dt_backend *be, float *db, const float *dy, int rows, int cols)
{
        (void)be;
        for (int r = 0; r < rows; r++) {
                const float *d = dy + (size_t)r * cols;
                for (int c = 0; c < cols; c++) db[c] += d[c];
        }
}

/* gelu(x) = x * Phi(x), the exact (erf) form PyTorch uses by default */
static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
static inline float gelu_grad(float x)
{
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        return cdf + x * pdf;
}

static void cpu_act_fwd(dt_backend *be, dt_act a, float alpha, const float *x, float *y, size_t n)
{
        (void)be;
        switch (a) {
        case DT_ACT_NONE: if (x != y) memmove(y, x, n * sizeof *y); break;
        case DT_ACT_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; break;
        case DT_ACT_LEAKY_RELU: for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : alpha * x[i]; break;
        case DT_ACT_TANH: for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
        case DT_ACT_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
        case DT_ACT_GELU: for (size_t i = 0; i < n; i++) y[i] = gelu(x[i]); break;
        default: DT_ASSERT(0);
        }
}

static void cpu_act_bwd(dt_backend *be, dt_act a, float alpha, const float *x, const float *y,
                        const float *dy, float *dx, size_t n)
{
        (void)be;
        switch (a) {
        case DT_ACT_NONE: if (dx != dy) memmove(dx, dy, n * sizeof *dx); break;
        case DT_ACT_RELU: /* branch-free so it vectorises */
                for (size_t i = 0; i < n; i++) { float d = dy[i]; dx[i] = x[i] > 0 ? d : 0.0f; }
                break;
        case DT_ACT_LEAKY_RELU: for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : alpha * dy[i]; break;
        case DT_ACT_TANH: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]); break;
        case DT_ACT_SIGMOID: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]); break;
        case DT_ACT_GELU: for (size_t i = 0; i < n; i++) dx[i] = dy[i] * gelu_grad(x[i]); break;
        default: DT_ASSERT(0);
        }
}

static void cpu_axpy(dt_backend *be, size_t n, float a, const float *x, float *y)
{
        (void)be;
        for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void cpu_scale(dt_backend *be, size_t n, float a, float *x)
{
        (void)be;
        for (size_t i = 0; i < n; i++) x[i] *= a;
}

static void cpu_mul(dt_backend *be, size_t n, const float *x, const float *mask, float *y)
{
        (void)be;
        for (size_t i = 0; i < n; i++) y[i] = x[i] * mask[i];
}

static double cpu_sumsq(dt_backend *be, const float *x, size_t n)
{
        (void)be;
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
        return s;
}

static void cpu_dropout_mask(dt_backend *be, float *mask, int B, size_t per, uint64_t key, long pos0, float p)
{
        (void)be;
        const float keep = 1.0f / (1.0f - p);
        for (int b = 0; b < B; b++) {
                float *mb = mask + (size_t)b * per;
                for (size_t j = 0; j < per; j++)
                        mb[j] = dt_dropout_keep(key, (uint64_t)(pos0 + b), j, p) ? keep : 0.0f;
        }
}

void dt_optim_update_cpu(const dt_optim_hp *hp, float lr, long t, float *p, const float *g,
                         float *m, float *v, size_t n);

static void cpu_optim_step(dt_backend *be, const dt_optim_hp *hp, float lr, long t, float *p,
                           const float *g, float *m, float *v, size_t n)
{
        (void)be;
        dt_optim_update_cpu(hp, lr, t, p, g, m, v, n);
}

static const dt_backend_ops cpu_ops = {
        .name = "cpu",
        .alloc = cpu_alloc, .free = cpu_free,
        .to_device = cpu_copy, .to_host = cpu_copy, .copy = cpu_copy, .zero = cpu_zero,
        .gemm = cpu_gemm, .bias_add = cpu_bias_add, .bias_grad = cpu_bias_grad,
        .act_fwd = cpu_act_fwd, .act_bwd = cpu_act_bwd,
        .axpy = cpu_axpy, .scale = cpu_scale, .mul = cpu_mul, .dropout_mask = cpu_dropout_mask, .sumsq = cpu_sumsq,
        .optim_step = cpu_optim_step,
};

dt_backend *dt_backend_cpu_new(int threads)
{
        dt_backend *be = dt_calloc(1, sizeof *be);
        be->ops = &cpu_ops;
        be->threads = threads;
        if (threads > 0) openblas_set_num_threads(threads);
        return be;
}

void dt_backend_free(dt_backend *be)
{
        if (be && be->ops->destroy) be->ops->destroy(be);   /* device backends release their context */
        else free(be);
}
