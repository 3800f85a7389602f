/* backend/cuda/attn.c - the transformer layers' ops on the CUDA backend: layer norm (kernels_attn.cu)
 * and attention's heads as the cpu backend's plain kernel: per head, cuBLAS strided-batched GEMMs over
 * the samples for the products (S = scale q k^T, o = Pd v, and backward's four), kernels_attn.cu's
 * masked softmax and dropout over all rows between them. The T x T probabilities of every (sample,
 * head) are the layer's P; the shared workspace holds one more B H T T floats (Pd under dropout,
 * then backward's dS), so T is bounded: DT_CUDA_ATTN_TMAX. */
#include "backend/cuda/cuda_priv.h"

#include "backend/cuda/kernels.h"

static const float zero = 0.0f;

/* ---- layer norm ---- */

void dt_cuda_ln_fwd(dt_backend *be, const float *x, float *y, const float *w, const float *b, float *mean, float *rstd,
                    int R, int F, float eps)
{
        (void)be;
        DT_ASSERT((w == NULL) == (b == NULL));
        if (R > 0) DT_CUDA_CHECK(dt_k_ln_fwd(x, y, w, b, mean, rstd, (size_t)R, F, eps));
}

/* the parameters first, from dy, before dx (which may be dy) is written, as the cpu backend's order */
void dt_cuda_ln_bwd(dt_backend *be, const float *x, const float *dy, float *dx, const float *w, float *dw, float *db,
                    const float *mean, const float *rstd, int R, int F)
{
        (void)be;
        DT_ASSERT((dw == NULL) == (db == NULL));
        if (R <= 0) return;
        if (dw) DT_CUDA_CHECK(dt_k_ln_params(x, dy, dw, db, mean, rstd, (size_t)R, F));
        if (dx) DT_CUDA_CHECK(dt_k_ln_bwd(x, dy, dx, w, mean, rstd, (size_t)R, F));
}

/* ---- attention ---- */

/* For each of 'batch' samples, C (M x N, ldc) = alpha op(A) op(B), row-major, each operand 'stride'
 * floats after the previous sample's: cu_gemm's operand swap (row-major C is column-major C^T =
 * op(B)^T op(A)^T), batched. */
static void gemm_batched(dt_backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                         long long sa, const float *B, int ldb, long long sb, float *C, int ldc, long long sc, int batch)
{
        DT_CUBLAS_CHECK(cublasSgemmStridedBatched(dt_cuda_of(be)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, sb, A, lda,
                                                  sa, &zero, C, ldc, sc, batch));
}

/* the operands of head h: q, k, v (T rows, 3W apart) and o (W apart) of sample 0; P's T x T */
struct heads {
        int T, D, W, ld3;
        long long sqkv, so, sp;         /* one sample's stride in qkv, o, P */
};

static struct heads heads_of(const dt_attn_desc *d)
{
        struct heads h = { .T = d->T, .D = d->D, .W = d->H * d->D };
        h.ld3 = 3 * h.W;
        h.sqkv = (long long)d->T * h.ld3;
        h.so = (long long)d->T * h.W;
        h.sp = (long long)d->H * d->T * d->T;
        return h;
}

static size_t probs(const dt_attn_desc *d, int B) { return (size_t)B * d->H * d->T * d->T; }

int dt_cuda_attn_plan(dt_backend *be, dt_attn_desc *d, int max_batch)
{
        if (d->T < 1 || d->D < 1 || d->H < 1) {
                dt_error("attention: steps %d, head width %d, heads %d", d->T, d->D, d->H);
                return -1;
        }
        if (d->T > DT_CUDA_ATTN_TMAX) {
                dt_error("attention over %d steps: the cuda backend keeps every head's T x T probabilities and takes "
                         "T <= %d; the cpu backend's blocked kernel takes any T", d->T, DT_CUDA_ATTN_TMAX);
                return -1;
        }
        /* the workspace now, for the largest batch: no allocation (nor its failure) inside a step */
        dt_cuda_workspace(be, probs(d, max_batch) * sizeof(float));
        return 0;
}

/* P with dropout in ws, or P itself without */
static const float *dropped(const dt_attn_desc *d, const dt_attn_drop *dr, const float *P, float *ws, int B)
{
        if (dr->p == 0.0f) return P;
        DT_CUDA_CHECK(dt_k_attn_dropout(P, ws, B, d->H, d->T, d->h0, dr->key, dr->pos0, dr->p));
        return ws;
}

/* S = scale q k^T (into P);  P = softmax(S + mask);  o = Pd v */
void dt_cuda_attn_fwd(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, float *o,
                      float *P, int B)
{
        if (B <= 0) return;
        struct heads g = heads_of(d);
        float *ws = dt_cuda_workspace(be, probs(d, B) * sizeof(float));
        const size_t TT = (size_t)g.T * g.T;
        for (int h = 0; h < d->H; h++) {
                const float *q = qkv + (size_t)h * g.D, *k = q + g.W;
                gemm_batched(be, 0, 1, g.T, g.T, g.D, d->scale, q, g.ld3, g.sqkv, k, g.ld3, g.sqkv, P + h * TT, g.T,
                             g.sp, B);
        }
        DT_CUDA_CHECK(dt_k_attn_softmax(P, B, d->H, g.T, d->causal));
        const float *pd = dropped(d, dr, P, ws, B);
        for (int h = 0; h < d->H; h++) {
                const float *v = qkv + 2 * (size_t)g.W + (size_t)h * g.D;
                gemm_batched(be, 0, 0, g.T, g.D, g.T, 1.0f, pd + h * TT, g.T, g.sp, v, g.ld3, g.sqkv, o + (size_t)h * g.D,
                             g.W, g.so, B);
        }
}

/* dv = Pd^T do;  dPd = do v^T;  dS = P (m dPd - rowsum(P m dPd));  dq = scale dS k;  dk = scale dS^T q.
 * ws holds Pd, then (every head's dv read it first: one stream) dPd and dS. */
void dt_cuda_attn_bwd(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, const float *P,
                      const float *dO, float *dqkv, int B)
{
        if (B <= 0) return;
        struct heads g = heads_of(d);
        float *ws = dt_cuda_workspace(be, probs(d, B) * sizeof(float));
        const size_t TT = (size_t)g.T * g.T;
        const float *pd = dropped(d, dr, P, ws, B);
        for (int h = 0; h < d->H; h++) {
                size_t c = (size_t)h * g.D;
                gemm_batched(be, 1, 0, g.T, g.D, g.T, 1.0f, pd + h * TT, g.T, g.sp, dO + c, g.W, g.so,
                             dqkv + 2 * (size_t)g.W + c, g.ld3, g.sqkv, B);
        }
        for (int h = 0; h < d->H; h++) {
                size_t c = (size_t)h * g.D;
                gemm_batched(be, 0, 1, g.T, g.T, g.D, 1.0f, dO + c, g.W, g.so, qkv + 2 * (size_t)g.W + c, g.ld3, g.sqkv,
                             ws + h * TT, g.T, g.sp, B);
        }
        DT_CUDA_CHECK(dt_k_attn_softmax_bwd(P, ws, B, d->H, g.T, d->causal, d->h0, dr->key, dr->pos0, dr->p));
        for (int h = 0; h < d->H; h++) {
                size_t c = (size_t)h * g.D;
                const float *q = qkv + c, *k = q + g.W;
                gemm_batched(be, 0, 0, g.T, g.D, g.T, d->scale, ws + h * TT, g.T, g.sp, k, g.ld3, g.sqkv, dqkv + c, g.ld3,
                             g.sqkv, B);
                gemm_batched(be, 1, 0, g.T, g.D, g.T, d->scale, ws + h * TT, g.T, g.sp, q, g.ld3, g.sqkv,
                             dqkv + g.W + c, g.ld3, g.sqkv, B);
        }
}
