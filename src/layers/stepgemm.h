/* layers/stepgemm.h - C (M x N) += A (M x K) B (K x N), row-major, for the recurrent layers'
 * per-step products: few rows (one step's batch rows), the same weight matrix B every step of a
 * pass. A BLAS call packs B again on every call (a quarter of the LSTM's GEMM time at batch 64);
 * here B is read as it lies, in column panels that stay in the L1 cache while every row block of
 * A passes over them. Each C element is C + sum_k A[m][k] B[k][n] accumulated in k order in one
 * fused multiply-add chain, so a row's result does not depend on M or on how the rows are split
 * between threads. Host memory only. */
#ifndef DT_STEPGEMM_H
#define DT_STEPGEMM_H

#include "util/cpu.h"

/* AVX-512 only (util/cpu.h): elsewhere the backend's gemm runs the steps */
extern const dt_kfam dt_stepgemm_kfam;

/* Whether dt_stepgemm runs for N columns on the CPU path in force (AVX-512 and N a multiple of 16);
 * when it does not, callers use the backend's gemm. Asked at a layer's setup. */
int dt_stepgemm_ok(int N);
void dt_stepgemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc);

#endif
