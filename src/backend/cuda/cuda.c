/* backend/cuda/cuda.c - the CUDA backend: device selection, memory, cuBLAS GEMM (row-major through
 * the usual operand swap), the elementwise/optimizer/loss kernels of kernels.cu, and the table
 * that also carries the cuDNN ops of cudnn_ops.c and rnn.c and the transformer ops of attn.c.
 * Everything runs on the default stream, so ops are ordered among themselves; to_host synchronises. */
#include "backend/cuda/cuda_priv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cuda/kernels.h"

static char why_buf[256];

int dt_cuda_device_count(const char **why)
{
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        /* without a GPU the runtime says "driver version is insufficient" or "no CUDA-capable
         * device": when the kernel has no NVIDIA device either, say that instead of blaming a driver */
        if (e != cudaSuccess && access("/dev/nvidia0", F_OK) && access("/proc/driver/nvidia/version", F_OK)) {
                snprintf(why_buf, sizeof why_buf, "no GPU on this machine (no NVIDIA device: /dev/nvidia0 and "
                         "/proc/driver/nvidia are absent)");
                if (why) *why = why_buf;
                return -1;
        }
        if (e != cudaSuccess) {
                snprintf(why_buf, sizeof why_buf, "no CUDA device: %s (cudaGetDeviceCount)", cudaGetErrorString(e));
                if (why) *why = why_buf;
                return -1;
        }
        if (n == 0) {
                snprintf(why_buf, sizeof why_buf, "no CUDA device: cudaGetDeviceCount found none");
                if (why) *why = why_buf;
        }
        return n;
}

void *dt_cuda_malloc_bytes(size_t n, const char *what)
{
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, n ? n : 4);
        if (e != cudaSuccess)
                dt_die(DT_EXIT_RUNTIME, "CUDA: cannot allocate %.1f MiB for %s: %s", n / 1048576.0, what,
                       cudaGetErrorString(e));
        return p;
}

void *dt_cuda_workspace(dt_backend *be, size_t n)
{
        dt_cuda *c = dt_cuda_of(be);
        if (n <= c->ws_size && c->ws) return c->ws;
        if (c->ws) {
                DT_CUDA_CHECK(cudaDeviceSynchronize());    /* an earlier op may still use it */
                DT_CUDA_CHECK(cudaFree(c->ws));
        }
        c->ws = dt_cuda_malloc_bytes(n, "a library workspace");
        c->ws_size = n;
        return c->ws;
}

/* ---- memory ---- */

static float *cu_alloc(dt_backend *be, size_t n)
{
        (void)be;
        if (n > SIZE_MAX / sizeof(float)) dt_die(DT_EXIT_RUNTIME, "CUDA: allocation of %zu floats overflows", n);
        float *p = dt_cuda_malloc_bytes(n * sizeof(float), "a tensor");
        DT_CUDA_CHECK(cudaMemset(p, 0, n ? n * sizeof(float) : 4));
        return p;
}

static void cu_free(dt_backend *be, float *p)
{
        (void)be;
        if (p) DT_CUDA_CHECK(cudaFree(p));
}

static void cu_to_device(dt_backend *be, float *dst, const float *src, size_t n)
{
        (void)be;
        if (n) DT_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof *dst, cudaMemcpyHostToDevice));
}

static void cu_to_host(dt_backend *be, float *dst, const float *src, size_t n)
{
        (void)be;
        if (n) DT_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof *dst, cudaMemcpyDeviceToHost));
}

static void cu_copy(dt_backend *be, float *dst, const float *src, size_t n)
{
        (void)be;
        if (n && dst != src) DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, 0));
}

static void cu_zero(dt_backend *be, float *x, size_t n)
{
        (void)be;
        if (n) DT_CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof *x, 0));
}

/* ---- GEMM: row-major C (M,N) is column-major C^T (N,M) = op(B)^T op(A)^T, so swap the operands ---- */

static void cu_gemm(dt_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
        if (M <= 0 || N <= 0) return;
        if (K <= 0) {   /* C = beta C, as BLAS does */
                if (beta == 0.0f) for (int r = 0; r < M; r++) cu_zero(be, C + (size_t)r * ldc, (size_t)N);
                else if (beta != 1.0f) for (int r = 0; r < M; r++) DT_CUDA_CHECK(dt_k_scale((size_t)N, beta, C + (size_t)r * ldc));
                return;
        }
        DT_CUBLAS_CHECK(cublasSgemm(dt_cuda_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

/* ---- elementwise ---- */

static void cu_bias_add(dt_backend *be, float *y, const float *b, int rows, int cols)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_bias_add(y, b, rows, cols));
}

static void cu_bias_grad(dt_backend *be, float *db, const float *dy, int rows, int cols)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_bias_grad(db, dy, rows, cols));
}

static void cu_act_fwd(dt_backend *be, dt_act a, float alpha, const float *x, float *y, size_t n)
{
        (void)be;
        DT_ASSERT(a >= DT_ACT_NONE && a < DT_ACT_COUNT);
        if (a == DT_ACT_NONE) cu_copy(be, y, x, n);
        else DT_CUDA_CHECK(dt_k_act_fwd((int)a, alpha, x, y, n));
}

static void cu_act_bwd(dt_backend *be, dt_act a, float alpha, const float *x, const float *y,
                       const float *dy, float *dx, size_t n)
{
        (void)be;
        DT_ASSERT(a >= DT_ACT_NONE && a < DT_ACT_COUNT);
        if (a == DT_ACT_NONE) cu_copy(be, dx, dy, n);
        else DT_CUDA_CHECK(dt_k_act_bwd((int)a, alpha, x, y, dy, dx, n));
}

static void cu_axpy(dt_backend *be, size_t n, float a, const float *x, float *y)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_axpy(n, a, x, y));
}

static void cu_scale(dt_backend *be, size_t n, float a, float *x)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_scale(n, a, x));
}

static void cu_mul(dt_backend *be, size_t n, const float *x, const float *mask, float *y)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_mul(n, x, mask, y));
}

static void cu_add(dt_backend *be, size_t n, const float *a, const float *b, float *y)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_add(n, a, b, y));
}

static void cu_copy_cols(dt_backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                         size_t w, int accumulate)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_copy_cols(dst, ldd, src, lds, rows, w, accumulate));
}

static void cu_dropout_mask(dt_backend *be, float *mask, int B, size_t per, uint64_t key, long pos0, float p)
{
        (void)be;
        DT_CUDA_CHECK(dt_k_dropout_mask(mask, B, per, key, pos0, p));
}

/* block partials in double, added on the host in block order: the same bits every call */
static double cu_sumsq(dt_backend *be, const float *x, size_t n)
{
        dt_cuda *c = dt_cuda_of(be);
        if (!n) return 0;
        int nb = dt_k_sumsq_blocks(n);
        DT_CUDA_CHECK(dt_k_sumsq(x, n, c->d_partial));
        DT_CUDA_CHECK(cudaMemcpy(c->h_partial, c->d_partial, (size_t)nb * sizeof(double), cudaMemcpyDeviceToHost));
        double s = 0;
        for (int i = 0; i < nb; i++) s += c->h_partial[i];
        return s;
}

static void cu_optim_step(dt_backend *be, const dt_optim_hp *hp, float lr, long t, float *p,
                          const float *g, float *m, float *v, size_t n)
{
        (void)be;
        /* the bias corrections exactly as optim/optim.c computes them, on the host */
        float bc1 = 1.0f, bc2s = 1.0f;
        if (hp->kind == DT_OPT_ADAM || hp->kind == DT_OPT_ADAMW) {
                bc1 = 1.0f - powf(hp->beta1, (float)t);
                bc2s = sqrtf(1.0f - powf(hp->beta2, (float)t));
        }
        DT_CUDA_CHECK(dt_k_optim(*hp, lr, t, bc1, bc2s, p, g, m, v, n));
}

/* ---- loss: labels/targets uploaded, one thread per row, row results summed here in row order
 * (the CPU's order, so the sums agree to the last bit when the rows do) ---- */

static double cu_loss(dt_backend *be, int kind, const float *out, const int32_t *labels, const float *targets,
                      int R, int C, float scale, float *dout, long *correct)
{
        dt_cuda *c = dt_cuda_of(be);
        if (R <= 0) return 0;
        size_t rows = (size_t)R, nt = targets ? (size_t)R * C : 0;
        if (rows > c->loss_cap_rows) {
                if (c->d_lab) {
                        DT_CUDA_CHECK(cudaFree(c->d_lab));
                        DT_CUDA_CHECK(cudaFree(c->d_rowloss));
                        DT_CUDA_CHECK(cudaFree(c->d_rowok));
                }
                c->d_lab = dt_cuda_malloc_bytes(rows * sizeof *c->d_lab, "loss labels");
                c->d_rowloss = dt_cuda_malloc_bytes(rows * sizeof *c->d_rowloss, "loss rows");
                c->d_rowok = dt_cuda_malloc_bytes(rows * sizeof *c->d_rowok, "loss rows");
                c->h_rowloss = dt_realloc(c->h_rowloss, rows * sizeof *c->h_rowloss);
                c->h_rowok = dt_realloc(c->h_rowok, rows * sizeof *c->h_rowok);
                c->loss_cap_rows = rows;
        }
        if (nt > c->loss_cap_tgt) {
                if (c->d_tgt) DT_CUDA_CHECK(cudaFree(c->d_tgt));
                c->d_tgt = dt_cuda_malloc_bytes(nt * sizeof *c->d_tgt, "loss targets");
                c->loss_cap_tgt = nt;
        }
        if (labels) DT_CUDA_CHECK(cudaMemcpy(c->d_lab, labels, rows * sizeof *labels, cudaMemcpyHostToDevice));
        if (nt) DT_CUDA_CHECK(cudaMemcpy(c->d_tgt, targets, nt * sizeof *targets, cudaMemcpyHostToDevice));
        if (kind == 0) {
                DT_ASSERT(labels);
                DT_CUDA_CHECK(dt_k_xent(out, c->d_lab, R, C, scale, dout, c->d_rowloss, c->d_rowok));
        } else {
                DT_CUDA_CHECK(dt_k_mse(out, nt ? c->d_tgt : NULL, labels ? c->d_lab : NULL, R, C, scale, dout,
                                       c->d_rowloss, c->d_rowok));
        }
        DT_CUDA_CHECK(cudaMemcpy(c->h_rowloss, c->d_rowloss, rows * sizeof(double), cudaMemcpyDeviceToHost));
        DT_CUDA_CHECK(cudaMemcpy(c->h_rowok, c->d_rowok, rows * sizeof(int), cudaMemcpyDeviceToHost));
        double total = 0;
        long ok = 0;
        for (size_t r = 0; r < rows; r++) {
                total += c->h_rowloss[r];
                ok += c->h_rowok[r];
        }
        if (correct) *correct += ok;
        return total;
}

/* ---- life cycle ---- */

static void cu_destroy(dt_backend *be)
{
        dt_cuda *c = dt_cuda_of(be);
        if (c) {
                cudaDeviceSynchronize();
                if (c->ws) cudaFree(c->ws);
                if (c->d_lab) { cudaFree(c->d_lab); cudaFree(c->d_rowloss); cudaFree(c->d_rowok); }
                if (c->d_tgt) cudaFree(c->d_tgt);
                if (c->d_partial) cudaFree(c->d_partial);
                if (c->blas) cublasDestroy(c->blas);
                if (c->dnn) cudnnDestroy(c->dnn);
                free(c->h_rowloss);
                free(c->h_rowok);
                free(c->h_partial);
                free(c);
        }
        free(be);
}

static const dt_backend_ops cuda_ops = {
        .name = "cuda",
#ifdef DT_HAVE_NCCL
        .caps = DT_CAPS_CUDA | DT_CAP_NCCL,
#else
        .caps = DT_CAPS_CUDA,
#endif
        .alloc = cu_alloc, .free = cu_free,
        .to_device = cu_to_device, .to_host = cu_to_host, .copy = cu_copy, .zero = cu_zero,
        .gemm = cu_gemm, .bias_add = cu_bias_add, .bias_grad = cu_bias_grad,
        .act_fwd = cu_act_fwd, .act_bwd = cu_act_bwd,
        .axpy = cu_axpy, .scale = cu_scale, .mul = cu_mul, .dropout_mask = cu_dropout_mask, .sumsq = cu_sumsq,
        .optim_step = cu_optim_step, .add = cu_add, .copy_cols = cu_copy_cols,
        .destroy = cu_destroy, .op_release = dt_cuda_op_release,
        .conv_plan = dt_cuda_conv_plan, .conv_fwd = dt_cuda_conv_fwd, .conv_bwd = dt_cuda_conv_bwd,
        .pool_plan = dt_cuda_pool_plan, .pool_fwd = dt_cuda_pool_fwd, .pool_bwd = dt_cuda_pool_bwd,
        .bn_plan = dt_cuda_bn_plan, .bn_fwd = dt_cuda_bn_fwd, .bn_bwd = dt_cuda_bn_bwd,
        .rnn_plan = dt_cuda_rnn_plan, .rnn_fwd = dt_cuda_rnn_fwd, .rnn_bwd = dt_cuda_rnn_bwd,
        .ln_fwd = dt_cuda_ln_fwd, .ln_bwd = dt_cuda_ln_bwd,
        .attn_plan = dt_cuda_attn_plan, .attn_fwd = dt_cuda_attn_fwd, .attn_bwd = dt_cuda_attn_bwd,
        .loss = cu_loss,
};

/* A failure while setting up is the environment's (driver, libraries): say so in one line and
 * let the caller decide; nothing here dies. */
#define SETUP_FAIL(...) do { snprintf(why_buf, sizeof why_buf, __VA_ARGS__); goto fail; } while (0)

dt_backend *dt_backend_cuda_new(int local_rank, const char **why)
{
        dt_backend *be = NULL;
        dt_cuda *c = NULL;
        if (why) *why = why_buf;
        int n = dt_cuda_device_count(why);
        if (n <= 0) return NULL;
        int dev = (local_rank < 0 ? 0 : local_rank) % n;
        cudaError_t e = cudaSetDevice(dev);
        if (e != cudaSuccess) SETUP_FAIL("CUDA device %d: %s (cudaSetDevice)", dev, cudaGetErrorString(e));
        struct cudaDeviceProp pr;
        e = cudaGetDeviceProperties(&pr, dev);
        if (e != cudaSuccess) SETUP_FAIL("CUDA device %d: %s (cudaGetDeviceProperties)", dev, cudaGetErrorString(e));
        size_t v = cudnnGetVersion();
        if (v < 90000) SETUP_FAIL("cuDNN %zu.%zu is loaded; dtrain needs cuDNN 9 or later", v / 10000, v / 100 % 100);
        be = dt_calloc(1, sizeof *be);
        c = dt_calloc(1, sizeof *c);
        be->ops = &cuda_ops;
        be->priv = c;
        be->device = dev;
        c->dev = dev;
        snprintf(be->desc, sizeof be->desc, "%.60s (device %d of %d, sm_%d%d, %d GiB), cuDNN %d.%d", pr.name, dev % 1000,
                 n % 1000, pr.major % 100, pr.minor % 100, (int)(pr.totalGlobalMem >> 30) % 100000, (int)(v / 10000 % 100),
                 (int)(v / 100 % 100));
        cublasStatus_t bs = cublasCreate(&c->blas);
        if (bs != CUBLAS_STATUS_SUCCESS) SETUP_FAIL("cuBLAS: %s (cublasCreate)", cublasGetStatusString(bs));
        /* plain fp32 (no TF32 tensor cores): results comparable with the CPU backend */
        bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
        if (bs != CUBLAS_STATUS_SUCCESS) SETUP_FAIL("cuBLAS: %s (cublasSetMathMode)", cublasGetStatusString(bs));
        cudnnStatus_t ds = cudnnCreate(&c->dnn);
        if (ds != CUDNN_STATUS_SUCCESS) SETUP_FAIL("cuDNN: %s (cudnnCreate)", cudnnGetErrorString(ds));
        c->d_partial = dt_cuda_malloc_bytes((size_t)dt_k_sumsq_blocks(SIZE_MAX / 2) * sizeof(double), "sum of squares");
        c->h_partial = dt_malloc((size_t)dt_k_sumsq_blocks(SIZE_MAX / 2) * sizeof(double));
        return be;
fail:
        if (be) {
                be->priv = c;
                cu_destroy(be);
        }
        if (why) *why = why_buf;
        return NULL;
}
