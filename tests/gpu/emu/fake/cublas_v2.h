/* tests/gpu/emu/fake/cublas_v2.h - cuBLAS's names that attn.c uses; attn_emu.c defines
 * cublasSgemmStridedBatched by the cuBLAS documentation's column-major formula. */
#ifndef FAKE_CUBLAS
#define FAKE_CUBLAS
typedef void *cublasHandle_t;
typedef int cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
#define CUBLAS_STATUS_SUCCESS 0
static inline const char *cublasGetStatusString(cublasStatus_t s) { (void)s; return "fake"; }
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
        int k, const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
        const float *beta, float *C, int ldc, long long sc, int batch);
#endif
