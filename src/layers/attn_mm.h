/* layers/attn_mm.h - the attention's small products (one head of one sample, head dim <= 64) in a
 * register-blocked kernel, one table per CPU path (util/cpu.h), instead of a BLAS call each: at
 * 64 x 64 x 32 OpenBLAS spent more time copying and clearing than multiplying. */
#ifndef DT_ATTN_MM_H
#define DT_ATTN_MM_H

#include "util/cpu.h"

#include <stddef.h>

/* which part of a triangle the product may skip (causal attention's masked half) */
enum {
        DT_MM_FULL,
        DT_MM_JLE,      /* only C(i, j) for j <= i is wanted; the rest is left unspecified */
        DT_MM_KLE,      /* A(i, p) = 0 for p > i: the sum stops there */
        DT_MM_KGE,      /* A(i, p) = 0 for p < i: the sum starts there */
};

/* C (m x n, ldc) = alpha op(A) op(B) + beta C, beta 0 or 1 (0: C is not read). A(i, p) =
 * a[i ars + p acs]; B(p, j) = b[p ldb + j], or b[j ldb + p] when bt (then k <= DT_MM_KMAX). */
typedef struct dt_attn_mm {
        int m, n, k, bt, tri;
        float alpha, beta;
        const float *a, *b;
        size_t ars, acs, ldb, ldc;
        float *c;
} dt_attn_mm;

#define DT_MM_KMAX 64

typedef struct dt_attn_mm_kern {
        void (*mm)(const dt_attn_mm *p);
} dt_attn_mm_kern;

extern const dt_kfam dt_attn_mm_kfam;

static inline const dt_attn_mm_kern *dt_attn_mm_get(void)
{
        return (const dt_attn_mm_kern *)dt_kfam_pick(&dt_attn_mm_kfam);
}

#endif
