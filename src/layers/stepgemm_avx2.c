/* layers/stepgemm_avx2.c - the recurrent step product C += A B (stepgemm.h) for the avx2 path, in
 * sixteen 256-bit registers: B packed into panels of 16 columns (K x 16 floats, contiguous, so a
 * panel of K = 128 is 8 KiB of L1 whatever N is; read as it lies, W_hh^T's rows 2 KiB apart fell
 * into two L1 sets), register tiles of 6 rows x 16 columns (12 accumulators, 2 panel vectors and
 * a broadcast). K in blocks of KC with the running sums through C between them, so every element
 * is one FMA chain in k order from C: the AVX-512 kernel's sums, bit for bit. */
#include "layers/stepgemm.h"
#include "layers/stepgemm_int.h"

#include <stddef.h>
#include <string.h>

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX2

#define MR 6    /* rows per register tile */
#define KC 256  /* k per block: a 16 KiB panel block stays in L1 beside A's rows */

/* panel q of 16 columns: P + q K 16, row k at + 16 k */
static void pack_avx2(int N, int K, const float *W, int ldw, int trans, float *P)
{
        for (int n0 = 0; n0 < N; n0 += 16) {
                float *q = P + (size_t)n0 * K;
                if (!trans) {
                        for (int k = 0; k < K; k++) memcpy(q + (size_t)16 * k, W + (size_t)k * ldw + n0, 16 * sizeof *q);
                        continue;
                }
                for (int j = 0; j < 16; j++) {
                        const float *w = W + (size_t)(n0 + j) * ldw;
                        for (int k = 0; k < K; k++) q[(size_t)16 * k + j] = w[k];
                }
        }
}

/* C[0..mr)[0..16) += A[0..mr)[0..kc) Q[0..kc)[0..16); mr a constant after inlining. The next tile's
 * C rows (nx, MR of them) are fetched meanwhile: a step's gate rows were last written by the input
 * GEMM over all steps, so they come from L3 or memory, 2 KiB apart, which no prefetcher follows
 * (without this, a quarter of the kernel's time at batch 256 went to these loads). */
static inline __attribute__((always_inline)) void tile(int mr, int kc, const float *A, int lda, const float *Q,
                                                        float *C, int ldc, const float *nx)
{
        __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
        for (int m = 0; m < MR; m++) {
                _mm_prefetch((const char *)(nx + (size_t)m * ldc), _MM_HINT_T0);
                _mm_prefetch((const char *)(nx + (size_t)m * ldc + 15), _MM_HINT_T0);
        }
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
                c0[m] = _mm256_loadu_ps(C + (size_t)m * ldc);
                c1[m] = _mm256_loadu_ps(C + (size_t)m * ldc + 8);
        }
        for (int k = 0; k < kc; k++) {
                const __m256 b0 = _mm256_loadu_ps(Q + (size_t)16 * k), b1 = _mm256_loadu_ps(Q + (size_t)16 * k + 8);
#pragma GCC unroll 6
                for (int m = 0; m < mr; m++) {
                        const __m256 a = _mm256_broadcast_ss(A + (size_t)m * lda + k);
                        c0[m] = _mm256_fmadd_ps(a, b0, c0[m]);
                        c1[m] = _mm256_fmadd_ps(a, b1, c1[m]);
                }
        }
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
                _mm256_storeu_ps(C + (size_t)m * ldc, c0[m]);
                _mm256_storeu_ps(C + (size_t)m * ldc + 8, c1[m]);
        }
}

static void gemm_avx2(int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc)
{
        for (int n0 = 0; n0 < N; n0 += 16) {
                const float *q = P + (size_t)n0 * K;
                for (int k0 = 0; k0 < K; k0 += KC) {
                        const int kc = K - k0 < KC ? K - k0 : KC;
                        const float *a = A + k0, *b = q + (size_t)16 * k0;
                        float *c = C + n0;
                        /* after the last row tile, the next panel's first (a prefetch never faults) */
                        const float *last = C + (n0 + 16 < N ? n0 + 16 : n0);
                        int m = 0;
                        for (; m + MR <= M; m += MR) {
                                const float *nx = m + MR < M ? c + (size_t)(m + MR) * ldc : last;
                                tile(MR, kc, a + (size_t)m * lda, lda, b, c + (size_t)m * ldc, ldc, nx);
                        }
                        a += (size_t)m * lda;
                        c += (size_t)m * ldc;
                        switch (M - m) {
                        case 5: tile(5, kc, a, lda, b, c, ldc, last); break;
                        case 4: tile(4, kc, a, lda, b, c, ldc, last); break;
                        case 3: tile(3, kc, a, lda, b, c, ldc, last); break;
                        case 2: tile(2, kc, a, lda, b, c, ldc, last); break;
                        case 1: tile(1, kc, a, lda, b, c, ldc, last); break;
                        default: break;
                        }
                }
        }
}

const dt_stepgemm_kern dt_stepgemm_kern_avx2 = { pack_avx2, gemm_avx2 };

DT_ISA_END
#endif
