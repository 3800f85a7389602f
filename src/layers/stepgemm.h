/* layers/stepgemm.h - C (M x N) += A (M x K) B (K x N), row-major, for the recurrent layers'
 * per-step products: few rows (one step's batch rows), the same weight matrix B every step of a
 * pass. A BLAS call packs B again on every call (a quarter of the LSTM's GEMM time at batch 64);
 * here B is packed once per pass (dt_stepgemm_pack) into the layout the path's kernel reads, and
 * every step reads it from there. Each C element is C + sum_k A[m][k] B[k][n] accumulated in k
 * order in one fused multiply-add chain, on every path that has the kernel, so a row's result
 * depends neither on M, on how the rows are split between threads, nor on the path (AVX2 and
 * AVX-512 give the same bits). Host memory only. */
#ifndef DT_STEPGEMM_H
#define DT_STEPGEMM_H

#include "util/cpu.h"

#include <stddef.h>

/* AVX2 and AVX-512 (util/cpu.h): elsewhere the backend's gemm runs the steps */
extern const dt_kfam dt_stepgemm_kfam;

/* Whether dt_stepgemm runs for N columns on the CPU path in force (a table for the path and N a
 * multiple of 16); when it does not, callers use the backend's gemm. Asked at a layer's setup. */
int dt_stepgemm_ok(int N);
/* P (K N floats) = B in the layout of the path in force: B[k][n] = W[k ldw + n] (trans 0) or
 * W[n ldw + k] (trans 1, B = W^T). The path must not change between the pack and the products. */
void dt_stepgemm_pack(int N, int K, const float *W, int ldw, int trans, float *P);
/* C += A B, B as dt_stepgemm_pack left it in P */
void dt_stepgemm(int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc);

#endif
