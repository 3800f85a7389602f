/* backend/cuda/cudnn_ops.c - convolution, pooling and batch normalisation through cuDNN's C API.
 * Tensor descriptors depend on the batch B, so each plan re-describes them when B changes and
 * remembers the convolution algorithms per B (a few entries: training and evaluation batches),
 * chosen once through cudnnGet*Algorithm_v7 heuristics: the first that succeeds, fits
 * DT_CUDA_CONV_WS_MAX of workspace, runs in plain fp32 (no TF32) and, with 'deterministic: true',
 * is deterministic. */
#include "backend/cuda/cuda_priv.h"

#include <stdlib.h>
#include <string.h>
#include "backend/cuda/kernels.h"

static const float one = 1.0f, zero = 0.0f;

/* ---- convolution ---- */

#define ALGO_CACHE 4

struct conv_algos {
        int B;
        cudnnConvolutionFwdAlgo_t fwd;
        cudnnConvolutionBwdDataAlgo_t bwd_data;
        cudnnConvolutionBwdFilterAlgo_t bwd_filter;
        size_t ws;
};

struct conv_st {
        int kind;
        dt_conv_desc g;
        cudnnTensorDescriptor_t x, y, bias;
        cudnnFilterDescriptor_t w;
        cudnnConvolutionDescriptor_t conv;
        int B;                          /* batch x and y describe now */
        struct conv_algos cache[ALGO_CACHE];
        int ncache, next;
        const struct conv_algos *cur;
};

/* 1 when perf entry i is usable: fits, plain fp32, deterministic when asked */
#define PICK(perf, n, det, out) do { \
        for (int pass = 0; pass < 2 && (out) < 0; pass++) \
                for (int i_ = 0; i_ < (n) && (out) < 0; i_++) { \
                        if ((perf)[i_].status != CUDNN_STATUS_SUCCESS || (perf)[i_].memory > DT_CUDA_CONV_WS_MAX) continue; \
                        if ((det) && (perf)[i_].determinism != CUDNN_DETERMINISTIC) continue; \
                        if (pass == 0 && (perf)[i_].mathType != CUDNN_FMA_MATH) continue; \
                        if ((perf)[i_].mathType == CUDNN_TENSOR_OP_MATH || \
                            (perf)[i_].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue; \
                        (out) = i_; \
                } \
} while (0)

static void conv_describe(dt_backend *be, struct conv_st *s, int B)
{
        dt_cuda *c = dt_cuda_of(be);
        const dt_conv_desc *g = &s->g;
        if (s->B == B) return;
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, g->C, g->H, g->W));
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, g->F, g->OH, g->OW));
        s->B = B;
        for (int i = 0; i < s->ncache; i++)
                if (s->cache[i].B == B) {
                        s->cur = &s->cache[i];
                        return;
                }
        int n, k;
        struct conv_algos a = { .B = B };
        cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, s->x, s->w, s->conv, s->y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, pf));
        k = -1;
        PICK(pf, n, be->deterministic, k);
        if (k < 0) a.fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
        else a.fwd = pf[k].algo;
        cudnnConvolutionBwdDataAlgoPerf_t pd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, s->w, s->y, s->conv, s->x,
                                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, pd));
        k = -1;
        PICK(pd, n, be->deterministic, k);
        a.bwd_data = k < 0 ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 : pd[k].algo;
        cudnnConvolutionBwdFilterAlgoPerf_t pw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, s->x, s->y, s->conv, s->w,
                                                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, pw));
        k = -1;
        PICK(pw, n, be->deterministic, k);
        a.bwd_filter = k < 0 ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 : pw[k].algo;
        /* the sizes of the algorithms actually chosen */
        size_t w1 = 0, w2 = 0, w3 = 0;
        DT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c->dnn, s->x, s->w, s->conv, s->y, a.fwd, &w1));
        DT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, s->w, s->y, s->conv, s->x, a.bwd_data, &w2));
        DT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, s->x, s->y, s->conv, s->w, a.bwd_filter, &w3));
        a.ws = w1 > w2 ? w1 : w2;
        if (w3 > a.ws) a.ws = w3;
        int slot = s->ncache < ALGO_CACHE ? s->ncache++ : (s->next++ % ALGO_CACHE);
        s->cache[slot] = a;
        s->cur = &s->cache[slot];
}

int dt_cuda_conv_plan(dt_backend *be, dt_conv_desc *d, int max_batch)
{
        if (d->pt != d->pb || d->pl != d->pr) {
                dt_error("the CUDA backend cannot run a convolution with asymmetric padding (top %d, bottom %d, "
                         "left %d, right %d: 'same' with an even kernel); cuDNN pads both sides alike. Use an odd "
                         "kernel, explicit padding, or --device cpu", d->pt, d->pb, d->pl, d->pr);
                return -1;
        }
        struct conv_st *s = dt_calloc(1, sizeof *s);
        s->kind = DT_CUDA_ST_CONV;
        s->g = *d;
        s->g.state = NULL;
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->x));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->y));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->bias));
        DT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&s->w));
        DT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&s->conv));
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->F, 1, 1));
        DT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(s->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->F, d->C / d->G, d->KH, d->KW));
        DT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(s->conv, d->pt, d->pl, d->SH, d->SW, d->DH, d->DW,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        DT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(s->conv, d->G));
        DT_CUDNN_CHECK(cudnnSetConvolutionMathType(s->conv, CUDNN_FMA_MATH));
        d->state = s;
        /* the output size cuDNN computes must be the layer's */
        conv_describe(be, s, max_batch);
        int n, c, h, w;
        DT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(s->conv, s->x, s->w, &n, &c, &h, &w));
        if (c != d->F || h != d->OH || w != d->OW) {
                dt_error("cuDNN computes a convolution output of (%d,%d,%d), the layer expects (%d,%d,%d)", c, h, w,
                         d->F, d->OH, d->OW);
                return -1;
        }
        dt_cuda_workspace(be, s->cur->ws);
        return 0;
}

void dt_cuda_conv_fwd(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *b, float *y, int B)
{
        dt_cuda *c = dt_cuda_of(be);
        struct conv_st *s = d->state;
        conv_describe(be, s, B);
        void *ws = dt_cuda_workspace(be, s->cur->ws);
        DT_CUDNN_CHECK(cudnnConvolutionForward(c->dnn, &one, s->x, x, s->w, w, s->conv, s->cur->fwd, ws, s->cur->ws,
                                               &zero, s->y, y));
        if (b) DT_CUDNN_CHECK(cudnnAddTensor(c->dnn, &one, s->bias, b, &one, s->y, y));
}

void dt_cuda_conv_bwd(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, int B)
{
        dt_cuda *c = dt_cuda_of(be);
        struct conv_st *s = d->state;
        conv_describe(be, s, B);
        void *ws = dt_cuda_workspace(be, s->cur->ws);
        /* parameter gradients accumulate (beta = 1), dx is overwritten (beta = 0) */
        if (db) DT_CUDNN_CHECK(cudnnConvolutionBackwardBias(c->dnn, &one, s->y, dy, &one, s->bias, db));
        DT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->dnn, &one, s->x, x, s->y, dy, s->conv, s->cur->bwd_filter, ws,
                                                      s->cur->ws, &one, s->w, dw));
        if (dx)
                DT_CUDNN_CHECK(cudnnConvolutionBackwardData(c->dnn, &one, s->w, w, s->y, dy, s->conv, s->cur->bwd_data, ws,
                                                            s->cur->ws, &zero, s->x, dx));
}

static void conv_release(struct conv_st *s)
{
        cudnnDestroyTensorDescriptor(s->x);
        cudnnDestroyTensorDescriptor(s->y);
        cudnnDestroyTensorDescriptor(s->bias);
        cudnnDestroyFilterDescriptor(s->w);
        cudnnDestroyConvolutionDescriptor(s->conv);
        free(s);
}

/* ---- pooling: max (deterministic, NaN propagates, padding never wins) and average counting
 * the padding (PyTorch's count_include_pad=True; windows never pass the padded edge because
 * ceil_mode is false, so the divisor is always KH*KW) ---- */

struct pool_st {
        int kind;
        dt_pool_desc g;
        cudnnTensorDescriptor_t x, y;
        cudnnPoolingDescriptor_t p;
        int B;
};

static void pool_describe(struct pool_st *s, int B)
{
        if (s->B == B) return;
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, s->g.C, s->g.H, s->g.W));
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, s->g.C, s->g.OH, s->g.OW));
        s->B = B;
}

int dt_cuda_pool_plan(dt_backend *be, dt_pool_desc *d, int max_batch)
{
        (void)be;
        struct pool_st *s = dt_calloc(1, sizeof *s);
        s->kind = DT_CUDA_ST_POOL;
        s->g = *d;
        s->g.state = NULL;
        d->state = s;
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->x));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->y));
        DT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&s->p));
        DT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(s->p, d->mode == DT_POOL_MAX ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                                                 : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                   CUDNN_PROPAGATE_NAN, d->KH, d->KW, d->PH, d->PW, d->SH, d->SW));
        pool_describe(s, max_batch);
        int n, c, h, w;
        DT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(s->p, s->x, &n, &c, &h, &w));
        if (c != d->C || h != d->OH || w != d->OW) {
                dt_error("cuDNN computes a pooling output of (%d,%d,%d), the layer expects (%d,%d,%d)", c, h, w, d->C,
                         d->OH, d->OW);
                return -1;
        }
        return 0;
}

void dt_cuda_pool_fwd(dt_backend *be, dt_pool_desc *d, const float *x, float *y, int B)
{
        struct pool_st *s = d->state;
        pool_describe(s, B);
        DT_CUDNN_CHECK(cudnnPoolingForward(dt_cuda_of(be)->dnn, s->p, &one, s->x, x, &zero, s->y, y));
}

void dt_cuda_pool_bwd(dt_backend *be, dt_pool_desc *d, const float *x, const float *y, const float *dy, float *dx, int B)
{
        struct pool_st *s = d->state;
        if (!dx) return;
        pool_describe(s, B);
        DT_CUDNN_CHECK(cudnnPoolingBackward(dt_cuda_of(be)->dnn, s->p, &one, s->y, y, s->y, dy, s->x, x, &zero, s->x, dx));
}

static void pool_release(struct pool_st *s)
{
        cudnnDestroyTensorDescriptor(s->x);
        cudnnDestroyTensorDescriptor(s->y);
        cudnnDestroyPoolingDescriptor(s->p);
        free(s);
}

/* ---- batch normalisation, spatial mode: per channel over (B, S). (F) inputs are (B, F, 1, 1).
 * cuDNN's exponentialAverageFactor is PyTorch's momentum, and its running variance is the
 * unbiased one, as PyTorch's; resultSaveInvVariance is 1/sqrt(var + eps), the CPU's invstd. ---- */

struct bn_st {
        int kind;
        dt_bn_desc g;
        cudnnTensorDescriptor_t x, p;
        int B;
        float *ones, *zeros;            /* (C) gamma and beta when the layer has none */
        float *dscratch;                /* (2C) dgamma, dbeta sink when the layer has none */
        float *dx;                      /* (Bmax, C, S) dx sink when the caller wants none */
        double eps;
};

static void bn_describe(struct bn_st *s, int B)
{
        if (s->B == B) return;
        DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, s->g.C, s->g.S, 1));
        s->B = B;
}

int dt_cuda_bn_plan(dt_backend *be, dt_bn_desc *d, int max_batch)
{
        (void)be;
        struct bn_st *s = dt_calloc(1, sizeof *s);
        s->kind = DT_CUDA_ST_BN;
        s->g = *d;
        s->g.state = NULL;
        d->state = s;
        s->eps = d->eps;
        if (s->eps < CUDNN_BN_MIN_EPSILON) {
                dt_error("batch norm eps %g is below cuDNN's minimum %g", (double)d->eps, (double)CUDNN_BN_MIN_EPSILON);
                return -1;
        }
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->x));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->p));
        bn_describe(s, max_batch);
        DT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(s->p, s->x, CUDNN_BATCHNORM_SPATIAL));
        size_t C = (size_t)d->C;
        s->ones = dt_cuda_malloc_bytes(C * sizeof(float), "batch norm");
        s->zeros = dt_cuda_malloc_bytes(C * sizeof(float), "batch norm");
        s->dscratch = dt_cuda_malloc_bytes(2 * C * sizeof(float), "batch norm");
        s->dx = dt_cuda_malloc_bytes((size_t)max_batch * C * (size_t)d->S * sizeof(float), "batch norm");
        DT_CUDA_CHECK(dt_k_fill(s->ones, 1.0f, C));
        DT_CUDA_CHECK(cudaMemset(s->zeros, 0, C * sizeof(float)));
        return 0;
}

void dt_cuda_bn_fwd(dt_backend *be, dt_bn_desc *d, int training, const float *x, float *y, const float *gamma,
                    const float *beta, float *rmean, float *rvar, float *smean, float *sinvstd, int B)
{
        struct bn_st *s = d->state;
        cudnnHandle_t h = dt_cuda_of(be)->dnn;
        bn_describe(s, B);
        if (!gamma) gamma = s->ones;
        if (!beta) beta = s->zeros;
        if (training)
                DT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x, x, s->x, y,
                                                                      s->p, gamma, beta, (double)s->g.momentum, rmean, rvar,
                                                                      s->eps, smean, sinvstd));
        else
                DT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x, x, s->x, y,
                                                                       s->p, gamma, beta, rmean, rvar, s->eps));
}

void dt_cuda_bn_bwd(dt_backend *be, dt_bn_desc *d, int training, const float *x, const float *dy, float *dx,
                    const float *gamma, float *dgamma, float *dbeta, const float *rmean, const float *rvar,
                    const float *smean, const float *sinvstd, int B)
{
        struct bn_st *s = d->state;
        bn_describe(s, B);
        if (!training) {        /* constant statistics: not cuDNN's case */
                DT_CUDA_CHECK(dt_k_bn_eval_bwd(x, dy, dx, gamma, dgamma, dbeta, rmean, rvar, (float)s->eps, B, s->g.C, s->g.S));
                return;
        }
        if (!gamma) gamma = s->ones;
        if (!dgamma) {
                dgamma = s->dscratch;
                dbeta = s->dscratch + s->g.C;
        }
        /* data gradient overwritten, parameter gradients accumulated */
        DT_CUDNN_CHECK(cudnnBatchNormalizationBackward(dt_cuda_of(be)->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &one,
                                                       s->x, x, s->x, dy, s->x, dx ? dx : s->dx, s->p, gamma, dgamma, dbeta,
                                                       s->eps, smean, sinvstd));
}

static void bn_release(struct bn_st *s)
{
        cudnnDestroyTensorDescriptor(s->x);
        cudnnDestroyTensorDescriptor(s->p);
        cudaFree(s->ones);
        cudaFree(s->zeros);
        cudaFree(s->dscratch);
        cudaFree(s->dx);
        free(s);
}

void dt_cuda_op_release(dt_backend *be, void *state)
{
        (void)be;
        if (!state) return;
        switch (*(int *)state) {
        case DT_CUDA_ST_CONV: conv_release(state); break;
        case DT_CUDA_ST_POOL: pool_release(state); break;
        case DT_CUDA_ST_BN: bn_release(state); break;
        case DT_CUDA_ST_RNN: dt_cuda_rnn_release(state); break;
        default: DT_ASSERT(0);
        }
}
