/* layers/stepgemm.c - the recurrent layers' per-step product C += A B (stepgemm.h) and its family's
 * table; the AVX-512 kernel here: B packed as K rows of N (a plain row-major copy), register tiles
 * of MR rows x NV vectors of 16 columns, B's column panel of NV vectors (K x 64 floats, 32 KiB at
 * K = 128) reused from L1 by every row tile. K is walked in blocks of KC so a panel stays cached for
 * long K (the LSTM backward's 4H); between blocks the running sums go through C unchanged, so the
 * order of every element's chain is k = 0 .. K-1 whatever KC is. stepgemm_avx2.c has the AVX2 one. */
#include "layers/stepgemm.h"
#include "layers/stepgemm_int.h"
#include "util/common.h"

#include <stddef.h>
#include <string.h>

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX512

#define MR 6    /* rows per register tile: 6 x 4 accumulators + 4 panel vectors + a broadcast */
#define NV 4    /* 16-float vectors per tile */
#define KC 256  /* k per block: a 64-column panel block is 64 KiB, within L2's reach of L1 */

/* C[0..mr)[0..16 nv) += A[0..mr)[0..kc) B[0..kc)[0..16 nv); mr, nv constants after inlining */
static inline __attribute__((always_inline)) void tile(int mr, int nv, int kc, const float *A, int lda,
                                                        const float *B, int ldb, float *C, int ldc)
{
        /* the small loops unrolled in full, so that the accumulators live in registers */
        __m512 acc[MR][NV];
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[m][v] = _mm512_loadu_ps(C + (size_t)m * ldc + 16 * v);
        for (int k = 0; k < kc; k++) {
                __m512 b[NV];
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_ps(B + (size_t)k * ldb + 16 * v);
#pragma GCC unroll 8
                for (int m = 0; m < mr; m++) {
                        __m512 a = _mm512_set1_ps(A[(size_t)m * lda + k]);
#pragma GCC unroll 4
                        for (int v = 0; v < nv; v++) acc[m][v] = _mm512_fmadd_ps(a, b[v], acc[m][v]);
                }
        }
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) _mm512_storeu_ps(C + (size_t)m * ldc + 16 * v, acc[m][v]);
}

/* One panel of nv vectors, kc deep, over all M rows: full tiles of MR rows, then the rest */
static inline __attribute__((always_inline)) void rows(int nv, int M, int kc, const float *A, int lda, const float *B,
                                                        int ldb, float *C, int ldc)
{
        int m = 0;
        for (; m + MR <= M; m += MR) tile(MR, nv, kc, A + (size_t)m * lda, lda, B, ldb, C + (size_t)m * ldc, ldc);
        A += (size_t)m * lda;
        C += (size_t)m * ldc;
        switch (M - m) {
        case 5: tile(5, nv, kc, A, lda, B, ldb, C, ldc); break;
        case 4: tile(4, nv, kc, A, lda, B, ldb, C, ldc); break;
        case 3: tile(3, nv, kc, A, lda, B, ldb, C, ldc); break;
        case 2: tile(2, nv, kc, A, lda, B, ldb, C, ldc); break;
        case 1: tile(1, nv, kc, A, lda, B, ldb, C, ldc); break;
        default: break;
        }
}

static void gemm_avx512(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc)
{
        for (int n0 = 0; n0 < N; n0 += 16 * NV) {
                const int nv = (N - n0) / 16 < NV ? (N - n0) / 16 : NV;
                for (int k0 = 0; k0 < K; k0 += KC) {
                        const int kc = K - k0 < KC ? K - k0 : KC;
                        const float *a = A + k0, *b = B + (size_t)k0 * ldb + n0;
                        float *c = C + n0;
                        switch (nv) {   /* each case its own constant-width copy of the tiles */
                        case 4: rows(4, M, kc, a, lda, b, ldb, c, ldc); break;
                        case 3: rows(3, M, kc, a, lda, b, ldb, c, ldc); break;
                        case 2: rows(2, M, kc, a, lda, b, ldb, c, ldc); break;
                        default: rows(1, M, kc, a, lda, b, ldb, c, ldc); break;
                        }
                }
        }
}

DT_ISA_END
#endif

#if DT_ISA_X86
/* B row-major, K x N: a copy, or W^T in 16 x 16 blocks (both sides of a block stay cached) */
static void pack_rows(int N, int K, const float *W, int ldw, int trans, float *P)
{
        if (!trans) {
                for (int k = 0; k < K; k++) memcpy(P + (size_t)k * N, W + (size_t)k * ldw, (size_t)N * sizeof *P);
                return;
        }
        for (int n0 = 0; n0 < N; n0 += 16)
                for (int k0 = 0; k0 < K; k0 += 16)
                        for (int n = n0; n < n0 + 16 && n < N; n++)
                                for (int k = k0; k < k0 + 16 && k < K; k++) P[(size_t)k * N + n] = W[(size_t)n * ldw + k];
}

static void gemm_rows_avx512(int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc)
{
        gemm_avx512(M, N, K, A, lda, P, N, C, ldc);
}

static const dt_stepgemm_kern k_avx512 = { pack_rows, gemm_rows_avx512 };
const dt_kfam dt_stepgemm_kfam = {
        .name = "stepgemm", .v = { [DT_ISA_AVX2] = &dt_stepgemm_kern_avx2, [DT_ISA_AVX512] = &k_avx512 } };
#else
/* No generic variant: the backend's gemm (BLAS) runs the steps there */
const dt_kfam dt_stepgemm_kfam = { .name = "stepgemm" };
#endif

int dt_stepgemm_ok(int N) { return N > 0 && N % 16 == 0 && dt_kfam_pick(&dt_stepgemm_kfam); }

void dt_stepgemm_pack(int N, int K, const float *W, int ldw, int trans, float *P)
{
        const dt_stepgemm_kern *k = dt_kfam_pick(&dt_stepgemm_kfam);
        DT_ASSERT(k && N % 16 == 0);
        k->pack(N, K, W, ldw, trans, P);
}

void dt_stepgemm(int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc)
{
        const dt_stepgemm_kern *k = dt_kfam_pick(&dt_stepgemm_kfam);
        DT_ASSERT(k && N % 16 == 0);
        k->gemm(M, N, K, A, lda, P, C, ldc);
}
