/* backend/cuda/cuda_priv.h - what the CUDA backend's C files share: the private state behind
 * dt_backend.priv, the check macros (file:line, the call and the library's own error string,
 * then dt_die(1)), and the fused ops of cudnn_ops.c, rnn.c and attn.c. */
#ifndef DT_CUDA_PRIV_H
#define DT_CUDA_PRIV_H

#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include "backend/backend.h"
#include "util/common.h"

#define DT_CUDA_CHECK(call) do { \
        cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) \
                dt_die(DT_EXIT_RUNTIME, "%s:%d: CUDA error: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
} while (0)

#define DT_CUBLAS_CHECK(call) do { \
        cublasStatus_t s_ = (call); \
        if (s_ != CUBLAS_STATUS_SUCCESS) \
                dt_die(DT_EXIT_RUNTIME, "%s:%d: cuBLAS error: %s: %s", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
} while (0)

#define DT_CUDNN_CHECK(call) do { \
        cudnnStatus_t s_ = (call); \
        if (s_ != CUDNN_STATUS_SUCCESS) \
                dt_die(DT_EXIT_RUNTIME, "%s:%d: cuDNN error: %s: %s", __FILE__, __LINE__, #call, cudnnGetErrorString(s_)); \
} while (0)

/* Upper bound on one convolution's workspace (bytes): algorithms needing more are passed over. */
#define DT_CUDA_CONV_WS_MAX ((size_t)256 << 20)

typedef struct dt_cuda {
        int dev;
        cublasHandle_t blas;
        cudnnHandle_t dnn;
        /* one shared workspace (convolutions, RNN temp space), grown on demand */
        void *ws;
        size_t ws_size;
        /* staging for the loss: labels, targets in; per-row loss and correct flags out */
        int32_t *d_lab;
        float *d_tgt;
        double *d_rowloss;
        int *d_rowok;
        size_t loss_cap_rows, loss_cap_tgt;
        double *h_rowloss;
        int *h_rowok;
        double *d_partial, *h_partial;  /* sumsq */
} dt_cuda;

static inline dt_cuda *dt_cuda_of(dt_backend *be) { return be->priv; }
/* The shared workspace with at least n bytes (the previous one freed after a synchronize). */
void *dt_cuda_workspace(dt_backend *be, size_t n);
void *dt_cuda_malloc_bytes(size_t n, const char *what);

/* cudnn_ops.c */
void dt_cuda_op_release(dt_backend *be, void *state);
int dt_cuda_conv_plan(dt_backend *be, dt_conv_desc *d, int max_batch);
void dt_cuda_conv_fwd(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *b, float *y, int B);
void dt_cuda_conv_bwd(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, int B);
int dt_cuda_pool_plan(dt_backend *be, dt_pool_desc *d, int max_batch);
void dt_cuda_pool_fwd(dt_backend *be, dt_pool_desc *d, const float *x, float *y, int B);
void dt_cuda_pool_bwd(dt_backend *be, dt_pool_desc *d, const float *x, const float *y, const float *dy, float *dx, int B);
int dt_cuda_bn_plan(dt_backend *be, dt_bn_desc *d, int max_batch);
void dt_cuda_bn_fwd(dt_backend *be, dt_bn_desc *d, int training, const float *x, float *y, const float *gamma,
                    const float *beta, float *rmean, float *rvar, float *smean, float *sinvstd, int B);
void dt_cuda_bn_bwd(dt_backend *be, dt_bn_desc *d, int training, const float *x, const float *dy, float *dx,
                    const float *gamma, float *dgamma, float *dbeta, const float *rmean, const float *rvar,
                    const float *smean, const float *sinvstd, int B);
/* rnn.c */
int dt_cuda_rnn_plan(dt_backend *be, dt_rnn_desc *d, int max_batch);
void dt_cuda_rnn_fwd(dt_backend *be, dt_rnn_desc *d, int training, float *const *w, const float *x, float *y, int B);
void dt_cuda_rnn_bwd(dt_backend *be, dt_rnn_desc *d, float *const *w, float *const *dw, const float *x, const float *y,
                     const float *dy, float *dx, int B);

/* attn.c: layer norm, and attention's heads. T is at most DT_CUDA_ATTN_TMAX: the layer keeps B H T T
 * probabilities and the workspace as many again (at 8192 steps, 256 MiB each per sample and head);
 * attention's supports_shape refuses longer sequences when the spec is checked. */
#define DT_CUDA_ATTN_TMAX DT_ATTN_DEVICE_TMAX
void dt_cuda_ln_fwd(dt_backend *be, const float *x, float *y, const float *w, const float *b, float *mean, float *rstd,
                    int R, int F, float eps);
void dt_cuda_ln_bwd(dt_backend *be, const float *x, const float *dy, float *dx, const float *w, float *dw, float *db,
                    const float *mean, const float *rstd, int R, int F);
int dt_cuda_attn_plan(dt_backend *be, dt_attn_desc *d, int max_batch);
void dt_cuda_attn_fwd(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, float *o,
                      float *P, int B);
void dt_cuda_attn_bwd(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, const float *P,
                      const float *dO, float *dqkv, int B);

/* Every plan's state starts with its kind, so op_release knows what it holds. */
enum { DT_CUDA_ST_CONV = 1, DT_CUDA_ST_POOL, DT_CUDA_ST_BN, DT_CUDA_ST_RNN };
void dt_cuda_rnn_release(void *state);

#endif
