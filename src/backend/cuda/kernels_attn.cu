/* backend/cuda/kernels_attn.cu - the transformer layers' kernels: layer norm (rows, and the parameter
 * sums over rows), attention's masked softmax forward and backward and its dropout (the CPU's counter
 * hash). One block per row, rows walked grid-stride, so any R and any T run; the cuBLAS products are
 * attn.c's. Only __global__ code and extern "C" launchers (kernels.h); built with -fmad=false like
 * kernels.cu. */
#include "backend/cuda/kernels.h"

#include <math.h>

#define THREADS 256             /* a power of two: the block reductions halve it */
#define MAX_GRID (65535u * 16u) /* grid-stride loops cover the rest */

static unsigned grid_for(size_t rows) { return rows == 0 ? 1u : rows < MAX_GRID ? (unsigned)rows : MAX_GRID; }

/* every thread of a block walks the same rows, so the __syncthreads inside stay uniform */
#define ROW_LOOP(r, n) for (size_t r = blockIdx.x; r < (n); r += gridDim.x)

/* The sum (max) of v over the block's THREADS threads, returned to every thread. sh: THREADS
 * elements of shared memory, free again on return. */
template <typename T> __device__ static T block_sum(T v, T *sh)
{
        sh[threadIdx.x] = v;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
                if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
                __syncthreads();
        }
        T s = sh[0];
        __syncthreads();        /* everyone has read sh[0] before the next call writes it */
        return s;
}

__device__ static float block_max(float v, float *sh)
{
        sh[threadIdx.x] = v;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w >>= 1) {
                if ((int)threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
                __syncthreads();
        }
        float s = sh[0];
        __syncthreads();
        return s;
}

/* ---- layer norm ---- */

/* mean = sum x / F;  var = sum (x - mean)^2 / F;  y = (x - mean) / sqrt(var + eps) w + b */
__global__ static void ln_fwd_k(const float *x, float *y, const float *w, const float *b, float *mean, float *rstd,
                                size_t R, int F, float eps)
{
        __shared__ float sh[THREADS];
        ROW_LOOP(r, R) {
                const float *xr = x + r * F;
                float *yr = y + r * F, s = 0;
                for (int i = threadIdx.x; i < F; i += THREADS) s += xr[i];
                float mu = block_sum(s, sh) / (float)F;
                s = 0;
                for (int i = threadIdx.x; i < F; i += THREADS) s += (xr[i] - mu) * (xr[i] - mu);
                float rs = 1.0f / sqrtf(block_sum(s, sh) / (float)F + eps);
                if (threadIdx.x == 0) {
                        mean[r] = mu;
                        rstd[r] = rs;
                }
                for (int i = threadIdx.x; i < F; i += THREADS)
                        yr[i] = w ? (xr[i] - mu) * rs * w[i] + b[i] : (xr[i] - mu) * rs;
        }
}

/* g = dy w, xhat = (x - mean) rstd:  dx = rstd (g - mean(g) - xhat mean(g xhat)). Each thread reads
 * its own elements of dy before it writes them, so dx may be dy. */
__global__ static void ln_bwd_k(const float *x, const float *dy, float *dx, const float *w, const float *mean,
                                const float *rstd, size_t R, int F)
{
        __shared__ float sh[THREADS];
        ROW_LOOP(r, R) {
                const float *xr = x + r * F, *gr = dy + r * F;
                float *dr = dx + r * F, mu = mean[r], rs = rstd[r], sg = 0, sgh = 0;
                for (int i = threadIdx.x; i < F; i += THREADS) {
                        float g = w ? gr[i] * w[i] : gr[i];
                        sg += g;
                        sgh += g * ((xr[i] - mu) * rs);
                }
                float mg = block_sum(sg, sh) / (float)F;
                float mgh = block_sum(sgh, sh) / (float)F;
                for (int i = threadIdx.x; i < F; i += THREADS) {
                        float g = w ? gr[i] * w[i] : gr[i];
                        dr[i] = rs * (g - mg - (xr[i] - mu) * rs * mgh);
                }
        }
}

/* dw[c] += sum_r dy[r,c] xhat[r,c];  db[c] += sum_r dy[r,c]: a block of PCOLS features, its PROWS
 * thread rows taking every PROWS-th row, their partial sums added in thread-row order */
#define PCOLS 32
#define PROWS 8
__global__ static void ln_params_k(const float *x, const float *dy, float *dw, float *db, const float *mean,
                                   const float *rstd, size_t R, int F)
{
        __shared__ float sw[PROWS][PCOLS], sb[PROWS][PCOLS];
        int c = blockIdx.x * PCOLS + threadIdx.x;
        float aw = 0, ab = 0;
        if (c < F)
                for (size_t r = threadIdx.y; r < R; r += PROWS) {
                        float g = dy[r * F + c];
                        aw += g * ((x[r * F + c] - mean[r]) * rstd[r]);
                        ab += g;
                }
        sw[threadIdx.y][threadIdx.x] = aw;
        sb[threadIdx.y][threadIdx.x] = ab;
        __syncthreads();
        if (threadIdx.y == 0 && c < F) {
                for (int k = 1; k < PROWS; k++) {
                        aw += sw[k][threadIdx.x];
                        ab += sb[k][threadIdx.x];
                }
                dw[c] += aw;
                db[c] += ab;
        }
}

extern "C" cudaError_t dt_k_ln_fwd(const float *x, float *y, const float *w, const float *b, float *mean, float *rstd,
                                   size_t R, int F, float eps)
{
        if (R && F > 0) ln_fwd_k<<<grid_for(R), THREADS>>>(x, y, w, b, mean, rstd, R, F, eps);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_ln_bwd(const float *x, const float *dy, float *dx, const float *w, const float *mean,
                                   const float *rstd, size_t R, int F)
{
        if (R && F > 0) ln_bwd_k<<<grid_for(R), THREADS>>>(x, dy, dx, w, mean, rstd, R, F);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_ln_params(const float *x, const float *dy, float *dw, float *db, const float *mean,
                                      const float *rstd, size_t R, int F)
{
        if (R && F > 0) ln_params_k<<<(F + PCOLS - 1) / PCOLS, dim3(PCOLS, PROWS)>>>(x, dy, dw, db, mean, rstd, R, F);
        return cudaGetLastError();
}

/* ---- attention: P (B, H, T, T), row i = (b H + h) T + t holds step t's probabilities over the
 * steps s; under the causal mask only s <= t count (nv = t + 1) and the rest are 0, as the CPU's ---- */

/* P = softmax(S) by rows, in place (S = scale q k^T, the products' output) */
__global__ static void softmax_k(float *P, size_t rows, int T, int causal)
{
        __shared__ float sh[THREADS];
        ROW_LOOP(i, rows) {
                float *p = P + i * T;
                int nv = causal ? (int)(i % (size_t)T) + 1 : T;
                float mx = -INFINITY, sum = 0;
                for (int s = threadIdx.x; s < nv; s += THREADS) mx = fmaxf(mx, p[s]);
                mx = block_max(mx, sh);
                for (int s = threadIdx.x; s < nv; s += THREADS) {
                        float e = expf(p[s] - mx);
                        p[s] = e;
                        sum += e;
                }
                float inv = 1.0f / block_sum(sum, sh);
                for (int s = threadIdx.x; s < T; s += THREADS) p[s] = s < nv ? p[s] * inv : 0.0f;
        }
}

/* Pd[i] = P[i] 1/(1 - p) where kept: element (t, s) of head h of sample b is number
 * ((h0 + h) T + t) T + s of sample pos0 + b, as layers/attn_kern.c's keep() */
__global__ static void dropout_k(const float *P, float *Pd, int B, int H, int T, int h0, uint64_t key, long pos0,
                                 float p, float scale)
{
        size_t TT = (size_t)T * T, n = (size_t)B * H * TT;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
                size_t bh = i / TT, ts = i % TT;
                uint64_t b = bh / (size_t)H, h = bh % (size_t)H;
                uint64_t j = ((uint64_t)h0 + h) * TT + ts;
                Pd[i] = dt_keep_dev(key, (uint64_t)pos0 + b, j, p) ? P[i] * scale : 0.0f;
        }
}

/* G = dPd becomes dS = P (m dPd - dd), dd = sum_s P m dPd (in double, as the CPU's), m the dropout
 * factor (0 or 1/(1 - p); 1 when p = 0); 0 under the mask */
__global__ static void softmax_bwd_k(const float *P, float *G, int B, int H, int T, int causal, int h0, uint64_t key,
                                     long pos0, float p, float scale)
{
        __shared__ double sh[THREADS];
        size_t rows = (size_t)B * H * T;
        ROW_LOOP(i, rows) {
                const float *pr = P + i * T;
                float *g = G + i * T;
                size_t bh = i / (size_t)T;
                int t = (int)(i % (size_t)T), nv = causal ? t + 1 : T;
                uint64_t b = bh / (size_t)H, h = bh % (size_t)H;
                uint64_t j0 = (((uint64_t)h0 + h) * (uint64_t)T + (uint64_t)t) * (uint64_t)T;
                double dd = 0;
                for (int s = threadIdx.x; s < nv; s += THREADS) {
                        if (p > 0.0f) g[s] *= dt_keep_dev(key, (uint64_t)pos0 + b, j0 + (uint64_t)s, p) ? scale : 0.0f;
                        dd += (double)pr[s] * g[s];
                }
                float d = (float)block_sum(dd, sh);
                for (int s = threadIdx.x; s < T; s += THREADS) g[s] = s < nv ? pr[s] * (g[s] - d) : 0.0f;
        }
}

extern "C" cudaError_t dt_k_attn_softmax(float *P, int B, int H, int T, int causal)
{
        size_t rows = (size_t)B * H * T;
        if (rows) softmax_k<<<grid_for(rows), THREADS>>>(P, rows, T, causal);
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_attn_dropout(const float *P, float *Pd, int B, int H, int T, int h0, uint64_t key, long pos0,
                                         float p)
{
        size_t n = (size_t)B * H * T * T;
        if (n) dropout_k<<<grid_for((n + THREADS - 1) / THREADS), THREADS>>>(P, Pd, B, H, T, h0, key, pos0, p,
                                                                              1.0f / (1.0f - p));
        return cudaGetLastError();
}

extern "C" cudaError_t dt_k_attn_softmax_bwd(const float *P, float *G, int B, int H, int T, int causal, int h0,
                                             uint64_t key, long pos0, float p)
{
        size_t rows = (size_t)B * H * T;
        if (rows) softmax_bwd_k<<<grid_for(rows), THREADS>>>(P, G, B, H, T, causal, h0, key, pos0, p,
                                                             p > 0.0f ? 1.0f / (1.0f - p) : 1.0f);
        return cudaGetLastError();
}
