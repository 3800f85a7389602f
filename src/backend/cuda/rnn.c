/* backend/cuda/rnn.c - Elman RNN, LSTM and GRU through cuDNN's RNN v8 API (cudnnRNNForward,
 * cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), batch-major unpacked sequences, so the
 * layer's (B,T,F) tensors go in as they are. The weights stay in the layer's PyTorch-layout
 * tensors (the checkpoint, the optimizer and the allreduce see only those); each forward packs
 * them into cuDNN's flat weight space and each backward unpacks cuDNN's weight gradient and adds
 * it to the layer's gradients, through the copy list of rnn_layout.c built from
 * cudnnGetRNNWeightParams' offsets.
 *
 * Without return_sequences the layer's output is the top layer's last hidden state: that is hy's
 * top slice, and its gradient goes in as dhy (dy of the sequence being zero), which is the same
 * math as feeding it to y's last step. h0 = c0 = 0 (hx, cx NULL). */
#include "backend/cuda/cuda_priv.h"

#include <stdlib.h>
#include <string.h>
#include "backend/cuda/kernels.h"
#include "backend/cuda/rnn_layout.h"

struct rnn_st {
        int kind;
        dt_rnn_desc g;
        int Bm;
        cudnnRNNDescriptor_t rnn;
        cudnnDropoutDescriptor_t drop;
        void *drop_states;
        cudnnRNNDataDescriptor_t xd, yd;
        cudnnTensorDescriptor_t hd;     /* (L, B, H) */
        int B;                          /* batch the descriptors describe */
        int *hseq;                      /* (Bm) T, host */
        int32_t *dseq;                  /* (Bm) T, device */
        size_t wbytes;
        float *w, *dw;                  /* cuDNN's flat weight space and its gradient */
        dt_rnn_seg *segs;
        int nsegs;
        float *yseq;                    /* (Bm, T, H) the top layer's sequence when return_seq is off */
        float *dyseq;                   /* (Bm, T, H) zeros: its gradient then */
        float *hy, *cy;                 /* (L, Bm, H) final states */
        float *dhy;                     /* (L, Bm, H) zeros but the top slice */
        float *dxs;                     /* (Bm, T, I) dx sink when the caller wants none */
        void *reserve;
        size_t reserve_size;
};

static int gates_of(dt_rnn_mode m)
{
        return m == DT_RNN_LSTM ? 4 : m == DT_RNN_GRU ? 3 : 1;
}

static void rnn_describe(struct rnn_st *s, int B)
{
        if (s->B == B) return;
        const dt_rnn_desc *g = &s->g;
        float pad = 0.0f;
        DT_CUDNN_CHECK(cudnnSetRNNDataDescriptor(s->xd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 g->T, B, g->I, s->hseq, &pad));
        DT_CUDNN_CHECK(cudnnSetRNNDataDescriptor(s->yd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 g->T, B, g->H, s->hseq, &pad));
        int dims[3] = { g->L, B, g->H }, strides[3] = { B * g->H, g->H, 1 };
        DT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(s->hd, CUDNN_DATA_FLOAT, 3, dims, strides));
        s->B = B;
}

/* The flat offsets of every matrix and bias, asked of cuDNN, then checked and turned into the
 * copy list. */
static int rnn_layout(dt_backend *be, struct rnn_st *s)
{
        dt_cuda *c = dt_cuda_of(be);
        const dt_rnn_desc *g = &s->g;
        dt_rnn_shape sh = { .gates = gates_of(g->mode), .I = g->I, .H = g->H, .L = g->L, .bias = g->bias };
        dt_rnn_offsets off;
        memset(&off, 0, sizeof off);
        cudnnTensorDescriptor_t md, bd;
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&md));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bd));
        int rc = 0;
        for (int k = 0; k < g->L && !rc; k++)
                for (int id = 0; id < 2 * sh.gates && !rc; id++) {
                        void *ma = NULL, *ba = NULL;
                        DT_CUDNN_CHECK(cudnnGetRNNWeightParams(c->dnn, s->rnn, k, s->wbytes, s->w, id, md, &ma, bd, &ba));
                        /* the matrix must hold H x (input or hidden) floats */
                        cudnnDataType_t dt;
                        int nd = 0, dims[8], strides[8];
                        DT_CUDNN_CHECK(cudnnGetTensorNdDescriptor(md, 8, &dt, &nd, dims, strides));
                        long cnt = 1;
                        for (int i = 0; i < nd; i++) cnt *= dims[i];
                        long want = (long)g->H * (id >= sh.gates ? g->H : (k ? g->H : g->I));
                        if (!ma || cnt != want) {
                                dt_error("cuDNN RNN weight %d of layer %d holds %ld floats, expected %ld", id, k, cnt, want);
                                rc = -1;
                                break;
                        }
                        off.w[k][id] = (size_t)((char *)ma - (char *)s->w) / sizeof(float);
                        if (g->bias) {
                                if (!ba) {
                                        dt_error("cuDNN RNN bias %d of layer %d is missing", id, k);
                                        rc = -1;
                                        break;
                                }
                                off.b[k][id] = (size_t)((char *)ba - (char *)s->w) / sizeof(float);
                        }
                }
        cudnnDestroyTensorDescriptor(md);
        cudnnDestroyTensorDescriptor(bd);
        if (rc) return rc;
        char why[256];
        s->segs = dt_malloc((size_t)dt_rnn_layout_nsegs(&sh) * sizeof *s->segs);
        s->nsegs = dt_rnn_layout_plan(&sh, &off, s->wbytes / sizeof(float), s->segs, why, sizeof why);
        if (s->nsegs < 0) {
                dt_error("%s", why);
                return -1;
        }
        return 0;
}

int dt_cuda_rnn_plan(dt_backend *be, dt_rnn_desc *d, int max_batch)
{
        dt_cuda *c = dt_cuda_of(be);
        if (d->L > DT_RNN_LAYOUT_MAX_LAYERS) {
                dt_error("the CUDA backend runs at most %d stacked recurrent layers", DT_RNN_LAYOUT_MAX_LAYERS);
                return -1;
        }
        struct rnn_st *s = dt_calloc(1, sizeof *s);
        s->kind = DT_CUDA_ST_RNN;
        s->g = *d;
        s->g.state = NULL;
        s->Bm = max_batch;
        d->state = s;
        size_t Bm = (size_t)max_batch, T = (size_t)d->T, H = (size_t)d->H, L = (size_t)d->L;
        s->hseq = dt_malloc(Bm * sizeof *s->hseq);
        for (size_t b = 0; b < Bm; b++) s->hseq[b] = d->T;
        s->dseq = dt_cuda_malloc_bytes(Bm * sizeof *s->dseq, "RNN sequence lengths");
        DT_CUDA_CHECK(cudaMemcpy(s->dseq, s->hseq, Bm * sizeof *s->dseq, cudaMemcpyHostToDevice));

        size_t dsz = 0;
        DT_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&s->drop));
        DT_CUDNN_CHECK(cudnnDropoutGetStatesSize(c->dnn, &dsz));
        s->drop_states = dt_cuda_malloc_bytes(dsz, "RNN dropout states");
        DT_CUDNN_CHECK(cudnnSetDropoutDescriptor(s->drop, c->dnn, 0.0f, s->drop_states, dsz, 0));
        DT_CUDNN_CHECK(cudnnCreateRNNDescriptor(&s->rnn));
        static const cudnnRNNMode_t cell[] = { CUDNN_RNN_TANH, CUDNN_RNN_RELU, CUDNN_LSTM, CUDNN_GRU };
        /* plain fp32 (no TF32) first; DEFAULT_MATH where a cuDNN refuses FMA_MATH for RNNs */
        cudnnStatus_t st = cudnnSetRNNDescriptor_v8(s->rnn, CUDNN_RNN_ALGO_STANDARD, cell[d->mode],
                                                    d->bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                                    CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                    CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, d->I, d->H, d->H, d->L, s->drop,
                                                    CUDNN_RNN_PADDED_IO_DISABLED);
        if (st != CUDNN_STATUS_SUCCESS)
                DT_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(s->rnn, CUDNN_RNN_ALGO_STANDARD, cell[d->mode],
                                                        d->bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                                        CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                        CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, d->I, d->H, d->H, d->L,
                                                        s->drop, CUDNN_RNN_PADDED_IO_DISABLED));
        DT_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&s->xd));
        DT_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&s->yd));
        DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->hd));
        rnn_describe(s, max_batch);
        DT_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(c->dnn, s->rnn, &s->wbytes));
        s->w = dt_cuda_malloc_bytes(s->wbytes, "RNN weights");
        s->dw = dt_cuda_malloc_bytes(s->wbytes, "RNN weight gradients");
        DT_CUDA_CHECK(cudaMemset(s->w, 0, s->wbytes));
        if (rnn_layout(be, s) < 0) return -1;
        if (!d->return_seq) {
                s->yseq = dt_cuda_malloc_bytes(Bm * T * H * sizeof(float), "RNN sequence");
                s->dyseq = dt_cuda_malloc_bytes(Bm * T * H * sizeof(float), "RNN sequence gradient");
                DT_CUDA_CHECK(cudaMemset(s->dyseq, 0, Bm * T * H * sizeof(float)));
        }
        s->hy = dt_cuda_malloc_bytes(L * Bm * H * sizeof(float), "RNN state");
        if (d->mode == DT_RNN_LSTM) s->cy = dt_cuda_malloc_bytes(L * Bm * H * sizeof(float), "RNN state");
        s->dhy = dt_cuda_malloc_bytes(L * Bm * H * sizeof(float), "RNN state gradient");
        s->dxs = dt_cuda_malloc_bytes(Bm * T * (size_t)d->I * sizeof(float), "RNN input gradient");
        return 0;
}

/* layer tensors -> flat space */
static void pack(struct rnn_st *s, float *const *w)
{
        for (int i = 0; i < s->nsegs; i++) {
                const dt_rnn_seg *q = &s->segs[i];
                DT_CUDA_CHECK(cudaMemcpyAsync(s->w + q->foff, w[q->tensor] + q->toff, q->len * sizeof(float),
                                              cudaMemcpyDeviceToDevice, 0));
        }
}

void dt_cuda_rnn_fwd(dt_backend *be, dt_rnn_desc *d, int training, float *const *w, const float *x, float *y, int B)
{
        dt_cuda *c = dt_cuda_of(be);
        struct rnn_st *s = d->state;
        DT_ASSERT(B <= s->Bm);
        rnn_describe(s, B);
        pack(s, w);
        cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
        size_t ws = 0, rs = 0;
        DT_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(c->dnn, s->rnn, mode, s->xd, &ws, &rs));
        void *wsp = dt_cuda_workspace(be, ws ? ws : 4);
        if (training && rs > s->reserve_size) {
                if (s->reserve) {
                        DT_CUDA_CHECK(cudaDeviceSynchronize());
                        DT_CUDA_CHECK(cudaFree(s->reserve));
                }
                s->reserve = dt_cuda_malloc_bytes(rs, "RNN reserve space");
                s->reserve_size = rs;
        }
        float *yo = s->g.return_seq ? y : s->yseq;
        DT_CUDNN_CHECK(cudnnRNNForward(c->dnn, s->rnn, mode, s->dseq, s->xd, x, s->yd, yo, s->hd, NULL, s->hy, s->hd, NULL,
                                       s->cy, s->wbytes, s->w, ws, wsp, training ? s->reserve_size : 0,
                                       training ? s->reserve : NULL));
        if (!s->g.return_seq) {
                size_t BH = (size_t)B * s->g.H;
                DT_CUDA_CHECK(cudaMemcpyAsync(y, s->hy + (size_t)(s->g.L - 1) * BH, BH * sizeof(float),
                                              cudaMemcpyDeviceToDevice, 0));
        }
}

void dt_cuda_rnn_bwd(dt_backend *be, dt_rnn_desc *d, float *const *w, float *const *dw, const float *x, const float *y,
                     const float *dy, float *dx, int B)
{
        (void)w;        /* s->w still holds the forward's packed weights */
        dt_cuda *c = dt_cuda_of(be);
        struct rnn_st *s = d->state;
        DT_ASSERT(B <= s->Bm && s->reserve);
        rnn_describe(s, B);
        size_t ws = 0, rs = 0, BH = (size_t)B * s->g.H;
        DT_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(c->dnn, s->rnn, CUDNN_FWD_MODE_TRAINING, s->xd, &ws, &rs));
        DT_ASSERT(rs <= s->reserve_size);
        void *wsp = dt_cuda_workspace(be, ws ? ws : 4);
        const float *yo = s->g.return_seq ? y : s->yseq, *dyo = s->g.return_seq ? dy : s->dyseq;
        const float *dhy = NULL;
        if (!s->g.return_seq) {
                DT_CUDA_CHECK(cudaMemsetAsync(s->dhy, 0, (size_t)s->g.L * BH * sizeof(float), 0));
                DT_CUDA_CHECK(cudaMemcpyAsync(s->dhy + (size_t)(s->g.L - 1) * BH, dy, BH * sizeof(float),
                                              cudaMemcpyDeviceToDevice, 0));
                dhy = s->dhy;
        }
        DT_CUDNN_CHECK(cudnnRNNBackwardData_v8(c->dnn, s->rnn, s->dseq, s->yd, yo, dyo, s->xd, dx ? dx : s->dxs, s->hd,
                                               NULL, dhy, NULL, s->hd, NULL, NULL, NULL, s->wbytes, s->w, ws, wsp,
                                               s->reserve_size, s->reserve));
        DT_CUDA_CHECK(cudaMemsetAsync(s->dw, 0, s->wbytes, 0));
        DT_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(c->dnn, s->rnn, CUDNN_WGRAD_MODE_ADD, s->dseq, s->xd, x, s->hd, NULL,
                                                  s->yd, yo, s->wbytes, s->dw, ws, wsp, s->reserve_size, s->reserve));
        /* flat gradient -> the layer's gradients (accumulate) */
        for (int i = 0; i < s->nsegs; i++) {
                const dt_rnn_seg *q = &s->segs[i];
                DT_CUDA_CHECK(dt_k_axpy(q->len, 1.0f, s->dw + q->foff, dw[q->tensor] + q->toff));
        }
}

void dt_cuda_rnn_release(void *state)
{
        struct rnn_st *s = state;
        cudnnDestroyRNNDescriptor(s->rnn);
        cudnnDestroyDropoutDescriptor(s->drop);
        cudnnDestroyRNNDataDescriptor(s->xd);
        cudnnDestroyRNNDataDescriptor(s->yd);
        cudnnDestroyTensorDescriptor(s->hd);
        void *bufs[] = { s->drop_states, s->dseq, s->w, s->dw, s->yseq, s->dyseq, s->hy, s->cy, s->dhy, s->dxs, s->reserve };
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
                if (bufs[i]) cudaFree(bufs[i]);
        free(s->hseq);
        free(s->segs);
        free(s);
}
