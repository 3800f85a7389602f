/* layers/stepgemm_int.h - a path's step-GEMM table (stepgemm.c and stepgemm_avx2.c): its packing of
 * B and the product that reads it. */
#ifndef DT_STEPGEMM_INT_H
#define DT_STEPGEMM_INT_H

typedef struct dt_stepgemm_kern {
        void (*pack)(int N, int K, const float *W, int ldw, int trans, float *P);
        void (*gemm)(int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc);
} dt_stepgemm_kern;

extern const dt_stepgemm_kern dt_stepgemm_kern_avx2;

#endif
