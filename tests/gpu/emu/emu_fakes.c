/* tests/gpu/emu/emu_fakes.c - what attn.c calls outside itself, on the host: cublasSgemmStridedBatched
 * by the cuBLAS documentation's column-major formula (C_p = alpha op(A_p) op(B_p) + beta C_p, element
 * (i, j) of a matrix at [i + j ld], each operand 'stride' elements after the previous batch's), and
 * cuda.c's shared workspace as host memory (filled with garbage when it grows, as a device's is). */
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_priv.h"

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t hd, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
        int k, const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
        const float *beta, float *C, int ldc, long long sc, int batch)
{
        (void)hd;
        for (int p = 0; p < batch; p++) {
                const float *a = A + p * sa, *b = B + p * sb;
                float *c = C + p * sc;
                for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) {
                                double s = 0;
                                for (int l = 0; l < k; l++) {
                                        float x = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
                                        float y = tb == CUBLAS_OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
                                        s += (double)x * y;
                                }
                                c[i + (size_t)j * ldc] = (float)(*alpha * s + (*beta == 0 ? 0 : *beta * c[i + (size_t)j * ldc]));
                        }
        }
        return 0;
}

static void *wsp;
static size_t wsn;

void *dt_cuda_workspace(dt_backend *be, size_t n)
{
        (void)be;
        if (n > wsn) { free(wsp); wsp = malloc(n); wsn = n; memset(wsp, 0x7f, n); }
        return wsp;
}
