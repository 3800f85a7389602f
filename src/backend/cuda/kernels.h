/* backend/cuda/kernels.h - extern "C" launchers of the kernels in kernels.cu, for the backend's
 * C files. Every launcher runs on the default stream (ordered with cuBLAS/cuDNN, which use it
 * too) and returns cudaGetLastError(); the caller wraps it in DT_CUDA_CHECK. */
#ifndef DT_CUDA_KERNELS_H
#define DT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = f(x), dx = f'(x) dy: the math of backend/cpu.c */
cudaError_t dt_k_act_fwd(int act, float alpha, const float *x, float *y, size_t n);
cudaError_t dt_k_act_bwd(int act, float alpha, const float *x, const float *y, const float *dy, float *dx, size_t n);
/* y[r][c] += b[c];  db[c] += sum_r dy[r][c] (rows summed in order per column) */
cudaError_t dt_k_bias_add(float *y, const float *b, int rows, int cols);
cudaError_t dt_k_bias_grad(float *db, const float *dy, int rows, int cols);
cudaError_t dt_k_axpy(size_t n, float a, const float *x, float *y);
cudaError_t dt_k_scale(size_t n, float a, float *x);
cudaError_t dt_k_mul(size_t n, const float *x, const float *m, float *y);
cudaError_t dt_k_fill(float *x, float v, size_t n);
/* y = a + b;  dst[r][c] (+)= src[r][c] for rows x w, rows ldd and lds apart (add and concat) */
cudaError_t dt_k_add(size_t n, const float *a, const float *b, float *y);
cudaError_t dt_k_copy_cols(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t w, int acc);
/* mask[b][j] = dt_dropout_keep(key, pos0 + b, j, p) ? 1/(1-p) : 0 */
cudaError_t dt_k_dropout_mask(float *mask, int B, size_t per, uint64_t key, long pos0, float p);
/* partial[i] = sum of squares of block i's share, in double; nblocks partials */
int dt_k_sumsq_blocks(size_t n);
cudaError_t dt_k_sumsq(const float *x, size_t n, double *partial);
/* optimizer step as optim/optim.c; bc1 = 1 - b1^t, bc2s = sqrt(1 - b2^t) computed by the caller */
cudaError_t dt_k_optim(dt_optim_hp hp, float lr, long t, float bc1, float bc2s, float *p, const float *g,
                       float *m, float *v, size_t n);
/* per-row loss (double) and correct flag, as layers/loss.c; dz NULL: no gradient */
cudaError_t dt_k_xent(const float *z, const int32_t *lab, int R, int C, float scale, float *dz,
                      double *rowloss, int *rowok);
cudaError_t dt_k_mse(const float *y, const float *t, const int32_t *lab, int R, int C, float scale, float *dy,
                     double *rowloss, int *rowok);
/* batch norm backward with constant (running) statistics, per channel c over (B, S):
 * dx = gamma invstd dy;  dgamma += sum dy xhat;  dbeta += sum dy  (gamma NULL = 1; dgamma NULL: none) */
cudaError_t dt_k_bn_eval_bwd(const float *x, const float *dy, float *dx, const float *gamma, float *dgamma,
                             float *dbeta, const float *rmean, const float *rvar, float eps, int B, int C, int S);

/* layer norm over R rows of F (layers/layernorm.c's math): y, mean and rstd (R); dx from dy (w NULL: 1);
 * dw += sum_r dy xhat, db += sum_r dy (per feature, over the rows) */
cudaError_t dt_k_ln_fwd(const float *x, float *y, const float *w, const float *b, float *mean, float *rstd, size_t R,
                        int F, float eps);
cudaError_t dt_k_ln_bwd(const float *x, const float *dy, float *dx, const float *w, const float *mean,
                        const float *rstd, size_t R, int F);
cudaError_t dt_k_ln_params(const float *x, const float *dy, float *dw, float *db, const float *mean, const float *rstd,
                           size_t R, int F);
/* attention (kernels_attn.cu) over P (B, H, T, T): each row's softmax in place, the causal mask's
 * columns (s > t) set to 0; Pd = P with dropout (dt_attn_drop's mask); the softmax's backward in
 * place: G = dPd becomes dS = P (m dPd - sum_s P m dPd), m the dropout factor */
cudaError_t dt_k_attn_softmax(float *P, int B, int H, int T, int causal);
cudaError_t dt_k_attn_dropout(const float *P, float *Pd, int B, int H, int T, int h0, uint64_t key, long pos0, float p);
cudaError_t dt_k_attn_softmax_bwd(const float *P, float *G, int B, int H, int T, int causal, int h0, uint64_t key,
                                  long pos0, float p);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* dt_dropout_keep() of backend.h on the device: the same counter hash, so masks match the CPU's bits */
__device__ static inline int dt_keep_dev(uint64_t key, uint64_t pos, uint64_t j, float p)
{
        uint64_t z = key ^ (pos * 0x9E3779B97F4A7C15ull) ^ (j * 0xD1B54A32D192ED03ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
}
#endif
#endif
