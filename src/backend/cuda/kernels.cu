/* backend/cuda/kernels.cu - the CUDA backend's own kernels: elementwise activations, bias, axpy,
 * dropout mask (the CPU's counter hash), sum of squares, optimizer updates, losses. Only __global__
 * code and extern "C" launchers live here; cuBLAS/cuDNN calls stay in the C files. Built with
 * -fmad=false so that a*b+c rounds like the CPU build (-std=c11 contracts nothing). */
#include "backend/cuda/kernels.h"

#include <math.h>

#define THREADS 256

static unsigned blocks_for(size_t n)
{
        size_t b = (n + THREADS - 1) / THREADS;
        if (b > 65535u * 16u) b = 65535u * 16u;      /* grid-stride loops cover the rest */
        return b ? (unsigned)b : 1u;
}

#define GRID_LOOP(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                             i += (size_t)blockDim.x * gridDim.x)

/* ---- activations ---- */

__device__ static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ static inline float gelu_grad(float x)
{
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        return cdf + x * pdf;
}

/* PyTorch's gelu(approximate='tanh'): x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
__device__ static inline float gelu_tanh_th(float x) { return tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)); }
__device__ static inline float gelu_tanh_grad(float x)
{
        float th = gelu_tanh_th(x);
        return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
}

__global__ static void act_fwd_k(int a, float alpha, const float *x, float *y, size_t n)
{
        GRID_LOOP(i, n) {
                float v = x[i], r;
                switch (a) {
                case DT_ACT_RELU: r = v > 0 ? v : 0; break;
                case DT_ACT_LEAKY_RELU: r = v > 0 ? v : alpha * v; break;
                case DT_ACT_TANH: r = tanhf(v); break;
                case DT_ACT_SIGMOID: r = 1.0f / (1.0f + expf(-v)); break;
                case DT_ACT_GELU: r = gelu(v); break;
                case DT_ACT_GELU_TANH: r = 0.5f * v * (1.0f + gelu_tanh_th(v)); break;
                default: r = v; break;
                }
                y[i] = r;
        }
}

__global__ static void act_bwd_k(int a, float alpha, const float *x, const float *y, const float *dy, float *dx,
                                 size_t n)
{
        GRID_LOOP(i, n) {
                float d = dy[i], r;
                switch (a) {
                case DT_ACT_RELU: r = x[i] > 0 ? d : 0.0f; break;
                case DT_ACT_LEAKY_RELU: r = x[i] > 0 ? d : alpha * d; break;
                case DT_ACT_TANH: r = d * (1.0f - y[i] * y[i]); break;
                case DT_ACT_SIGMOID: r = d * y[i] * (1.0f - y[i]); break;
                case DT_ACT_GELU: r = d * gelu_grad(x[i]); break;
                case DT_ACT_GELU_TANH: r = d * gelu_tanh_grad(x[i]); break;
                default: r = d; break;
                }
                dx[i] = r;
        }
}

extern "C" cudaError_t dt_k_act_fwd(int act, float alpha, const float *x, float *y, size_t n)
{
        if (n) act_fwd_k<<<blocks_for(n), THREADS>>>(act, alpha, x, y, n);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_act_bwd(int act, float alpha, const float *x, const float *y, const float *dy,
                                    float *dx, size_t n)
{
        if (n) act_bwd_k<<<blocks_for(n), THREADS>>>(act, alpha, x, y, dy, dx, n);
        return cudaGetLastError();
}

/* ---- bias, axpy, scale, mul, fill ---- */

__global__ static void bias_add_k(float *y, const float *b, int rows, int cols)
{
        size_t n = (size_t)rows * cols;
        GRID_LOOP(i, n) y[i] += b[i % (size_t)cols];
}

/* one thread per column, rows in order: the CPU's summation order */
__global__ static void bias_grad_k(float *db, const float *dy, int rows, int cols)
{
        int c = blockIdx.x * blockDim.x + threadIdx.x;
        if (c >= cols) return;
        float s = db[c];
        for (int r = 0; r < rows; r++) s += dy[(size_t)r * cols + c];
        db[c] = s;
}

__global__ static void axpy_k(size_t n, float a, const float *x, float *y) { GRID_LOOP(i, n) y[i] += a * x[i]; }
__global__ static void scale_k(size_t n, float a, float *x) { GRID_LOOP(i, n) x[i] *= a; }
__global__ static void mul_k(size_t n, const float *x, const float *m, float *y) { GRID_LOOP(i, n) y[i] = x[i] * m[i]; }
__global__ static void fill_k(float *x, float v, size_t n) { GRID_LOOP(i, n) x[i] = v; }

extern "C" cudaError_t dt_k_bias_add(float *y, const float *b, int rows, int cols)
{
        size_t n = (size_t)rows * cols;
        if (n) bias_add_k<<<blocks_for(n), THREADS>>>(y, b, rows, cols);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_bias_grad(float *db, const float *dy, int rows, int cols)
{
        if (rows > 0 && cols > 0) bias_grad_k<<<(cols + THREADS - 1) / THREADS, THREADS>>>(db, dy, rows, cols);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_axpy(size_t n, float a, const float *x, float *y)
{
        if (n) axpy_k<<<blocks_for(n), THREADS>>>(n, a, x, y);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_scale(size_t n, float a, float *x)
{
        if (n) scale_k<<<blocks_for(n), THREADS>>>(n, a, x);
        return cudaGetLastError();
}

/* ---- graph junctions: add and concat ---- */

__global__ static void add_k(size_t n, const float *a, const float *b, float *y) { GRID_LOOP(i, n) y[i] = a[i] + b[i]; }

__global__ static void copy_cols_k(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t w, int acc)
{
        size_t n = rows * w;
        GRID_LOOP(i, n) {
                size_t r = i / w, c = i % w;
                float v = src[r * lds + c];
                if (acc) dst[r * ldd + c] += v;
                else dst[r * ldd + c] = v;
        }
}

extern "C" cudaError_t dt_k_add(size_t n, const float *a, const float *b, float *y)
{
        if (n) add_k<<<blocks_for(n), THREADS>>>(n, a, b, y);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_copy_cols(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t w,
                                      int acc)
{
        size_t n = rows * w;
        if (n) copy_cols_k<<<blocks_for(n), THREADS>>>(dst, ldd, src, lds, rows, w, acc);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_mul(size_t n, const float *x, const float *m, float *y)
{
        if (n) mul_k<<<blocks_for(n), THREADS>>>(n, x, m, y);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_fill(float *x, float v, size_t n)
{
        if (n) fill_k<<<blocks_for(n), THREADS>>>(x, v, n);
        return cudaGetLastError();
}

/* ---- dropout: the same counter hash as dt_dropout_keep() in backend.h (kernels.h's dt_keep_dev) ---- */

__global__ static void dropout_k(float *mask, int B, size_t per, uint64_t key, long pos0, float p, float keep)
{
        size_t n = (size_t)B * per;
        GRID_LOOP(i, n) {
                size_t b = i / per, j = i % per;
                mask[i] = dt_keep_dev(key, (uint64_t)(pos0 + (long)b), j, p) ? keep : 0.0f;
        }
}

extern "C" cudaError_t dt_k_dropout_mask(float *mask, int B, size_t per, uint64_t key, long pos0, float p)
{
        size_t n = (size_t)B * per;
        if (n) dropout_k<<<blocks_for(n), THREADS>>>(mask, B, per, key, pos0, p, 1.0f / (1.0f - p));
        return cudaGetLastError();
}

/* ---- sum of squares: fixed blocks, fixed tree: the same bits every call ---- */

#define SUMSQ_BLOCKS 1024

extern "C" int dt_k_sumsq_blocks(size_t n)
{
        size_t b = (n + THREADS - 1) / THREADS;
        return b < SUMSQ_BLOCKS ? (int)(b ? b : 1) : SUMSQ_BLOCKS;
}

__global__ static void sumsq_k(const float *x, size_t n, double *partial)
{
        __shared__ double sh[THREADS];
        double s = 0;
        GRID_LOOP(i, n) s += (double)x[i] * x[i];
        sh[threadIdx.x] = s;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
                if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
                __syncthreads();
        }
        if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

extern "C" cudaError_t dt_k_sumsq(const float *x, size_t n, double *partial)
{
        sumsq_k<<<dt_k_sumsq_blocks(n), THREADS>>>(x, n, partial);
        return cudaGetLastError();
}

/* ---- optimizers: optim/optim.c, element by element ---- */

__global__ static void optim_k(dt_optim_hp hp, float lr, long t, float bc1, float bc2s, float *p, const float *g,
                               float *m, float *v, size_t n)
{
        const float wd = hp.weight_decay;
        GRID_LOOP(i, n) {
                switch (hp.kind) {
                case DT_OPT_SGD:
                        p[i] -= lr * (g[i] + wd * p[i]);
                        break;
                case DT_OPT_MOMENTUM:
                case DT_OPT_NESTEROV: {
                        float gi = g[i] + wd * p[i];
                        float b = t == 1 ? gi : hp.momentum * m[i] + (1.0f - hp.dampening) * gi;
                        m[i] = b;
                        p[i] -= lr * (hp.kind == DT_OPT_NESTEROV ? gi + hp.momentum * b : b);
                        break;
                }
                case DT_OPT_RMSPROP: {
                        float gi = g[i] + wd * p[i];
                        v[i] = hp.alpha * v[i] + (1.0f - hp.alpha) * gi * gi;
                        float d = gi / (sqrtf(v[i]) + hp.eps);
                        if (hp.momentum > 0) {
                                m[i] = hp.momentum * m[i] + d;
                                d = m[i];
                        }
                        p[i] -= lr * d;
                        break;
                }
                default: {      /* adam, adamw */
                        float gi = g[i];
                        if (hp.kind == DT_OPT_ADAMW) p[i] *= 1.0f - lr * wd;
                        else gi += wd * p[i];
                        m[i] = hp.beta1 * m[i] + (1.0f - hp.beta1) * gi;
                        v[i] = hp.beta2 * v[i] + (1.0f - hp.beta2) * gi * gi;
                        p[i] -= (lr / bc1) * m[i] / (sqrtf(v[i]) / bc2s + hp.eps);
                        break;
                }
                }
        }
}

extern "C" cudaError_t dt_k_optim(dt_optim_hp hp, float lr, long t, float bc1, float bc2s, float *p, const float *g,
                                  float *m, float *v, size_t n)
{
        if (n) optim_k<<<blocks_for(n), THREADS>>>(hp, lr, t, bc1, bc2s, p, g, m, v, n);
        return cudaGetLastError();
}

/* ---- losses: one thread per row, the CPU's arithmetic (layers/loss.c) ---- */

__device__ static int argmax_row(const float *z, int C)
{
        int k = 0;
        for (int c = 1; c < C; c++)
                if (z[c] > z[k]) k = c;
        return k;
}

__global__ static void xent_k(const float *z, const int32_t *lab, int R, int C, float scale, float *dz,
                              double *rowloss, int *rowok)
{
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= R) return;
        const float *zr = z + (size_t)r * C;
        int y = lab[r];
        float mx = zr[0];
        for (int c = 1; c < C; c++) mx = zr[c] > mx ? zr[c] : mx;
        double s = 0;
        for (int c = 0; c < C; c++) s += exp((double)(zr[c] - mx));
        double lse = log(s) + mx;
        rowloss[r] = lse - zr[y];
        rowok[r] = argmax_row(zr, C) == y;
        if (dz) {
                float *d = dz + (size_t)r * C;
                for (int c = 0; c < C; c++) d[c] = scale * (float)exp((double)zr[c] - lse);
                d[y] -= scale;
        }
}

__global__ static void mse_k(const float *y, const float *t, const int32_t *lab, int R, int C, float scale, float *dy,
                             double *rowloss, int *rowok)
{
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= R) return;
        const float *yr = y + (size_t)r * C;
        double s = 0;
        for (int c = 0; c < C; c++) {
                float tc = t ? t[(size_t)r * C + c] : (lab[r] == c ? 1.0f : 0.0f);
                float e = yr[c] - tc;
                s += (double)e * e;
                if (dy) dy[(size_t)r * C + c] = scale * 2.0f * e / (float)C;
        }
        rowloss[r] = s / C;
        rowok[r] = lab ? argmax_row(yr, C) == lab[r] : 0;
}

extern "C" cudaError_t dt_k_xent(const float *z, const int32_t *lab, int R, int C, float scale, float *dz,
                                 double *rowloss, int *rowok)
{
        if (R > 0) xent_k<<<(R + 127) / 128, 128>>>(z, lab, R, C, scale, dz, rowloss, rowok);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_mse(const float *y, const float *t, const int32_t *lab, int R, int C, float scale,
                                float *dy, double *rowloss, int *rowok)
{
        if (R > 0) mse_k<<<(R + 127) / 128, 128>>>(y, t, lab, R, C, scale, dy, rowloss, rowok);
        return cudaGetLastError();
}

/* ---- batch norm backward with running statistics (evaluation mode): one block per channel ---- */

__global__ static void bn_eval_bwd_k(const float *x, const float *dy, float *dx, const float *gamma, float *dgamma,
                                     float *dbeta, const float *rmean, const float *rvar, float eps, int B, int C,
                                     int S)
{
        __shared__ double s1[THREADS], s2[THREADS];
        int c = blockIdx.x;
        float invstd = (float)(1.0 / sqrt((double)rvar[c] + eps)), mean = rmean[c];
        float a = (gamma ? gamma[c] : 1.0f) * invstd;
        double t = 0, u = 0;
        size_t n = (size_t)B * S;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
                size_t b = i / (size_t)S, q = i % (size_t)S, at = ((size_t)b * C + c) * S + q;
                float g = dy[at];
                t += g;
                u += (double)g * (x[at] - mean);
                if (dx) dx[at] = a * g;
        }
        s1[threadIdx.x] = t;
        s2[threadIdx.x] = u;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
                if ((int)threadIdx.x < w) {
                        s1[threadIdx.x] += s1[threadIdx.x + w];
                        s2[threadIdx.x] += s2[threadIdx.x + w];
                }
                __syncthreads();
        }
        if (threadIdx.x == 0 && dbeta) {
                dbeta[c] += (float)s1[0];
                dgamma[c] += (float)(s2[0] * invstd);
        }
}

extern "C" cudaError_t dt_k_bn_eval_bwd(const float *x, const float *dy, float *dx, const float *gamma, float *dgamma,
                                        float *dbeta, const float *rmean, const float *rvar, float eps, int B, int C,
                                        int S)
{
        if (C > 0) bn_eval_bwd_k<<<C, THREADS>>>(x, dy, dx, gamma, dgamma, dbeta, rmean, rvar, eps, B, C, S);
        return cudaGetLastError();
}
