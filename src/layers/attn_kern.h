/* layers/attn_kern.h - scaled dot-product attention of one head of one sample (host memory), in two
 * kernels that compute the same function: plain (the T x T probabilities kept for backward, the
 * reference) and blocked (FlashAttention's online softmax over tiles of queries x keys: only the
 * T row log-sum-exps kept; backward recomputes each tile's probabilities from them). */
#ifndef DT_ATTN_KERN_H
#define DT_ATTN_KERN_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "util/cpu.h"

/* One head of one sample: q, k, v are T rows of D floats, ld floats apart (columns of the layer's
 * (T, 3F) projections); o and do_ likewise, ldo apart. dq, dk, dv (ld apart, as q, k, v) are
 * ACCUMULATED into. Dropout on the probabilities: element (t, s) is kept with
 * dt_dropout_keep(key, pos, (head T + t) T + s, p) and scaled by 1 / (1 - p); p = 0: none. */
typedef struct dt_attn_head {
        int T, D, causal, block;        /* block: the tile's rows and columns (blocked kernel) */
        float scale, p;                 /* scale: 1 / sqrt(D) */
        uint64_t key, pos;
        int head;
        const float *q, *k, *v;
        size_t ld, ldo;
        dt_backend *be;                 /* its gemm (single-threaded inside a dt_par_run region) */
} dt_attn_head;

/* Per-thread workspace, in floats. */
size_t dt_attn_plain_ws(int T, int D, int block);
size_t dt_attn_blocked_ws(int T, int D, int block);

/* o = softmax(mask(scale q k^T)) v;  P (T x T) keeps the probabilities (before dropout) */
void dt_attn_plain_fwd(const dt_attn_head *h, float *o, float *P, float *ws);
void dt_attn_plain_bwd(const dt_attn_head *h, const float *o, const float *do_, const float *P, float *dq,
                       float *dk, float *dv, float *ws);
/* the same; lse (T) keeps each row's log-sum-exp of its scores */
void dt_attn_blocked_fwd(const dt_attn_head *h, float *o, float *lse, float *ws);
void dt_attn_blocked_bwd(const dt_attn_head *h, const float *o, const float *do_, const float *lse, float *dq,
                         float *dk, float *dv, float *ws);

/* The kernels above, one table per CPU path (util/cpu.h); the functions above call the one in force.
 * Every path gives the same bits (attn_kern_body.h). */
typedef struct dt_attn_kern {
        void (*plain_fwd)(const dt_attn_head *h, float *o, float *P, float *ws);
        void (*plain_bwd)(const dt_attn_head *h, const float *o, const float *do_, const float *P, float *dq,
                          float *dk, float *dv, float *ws);
        void (*blocked_fwd)(const dt_attn_head *h, float *o, float *lse, float *ws);
        void (*blocked_bwd)(const dt_attn_head *h, const float *o, const float *do_, const float *lse, float *dq,
                            float *dk, float *dv, float *ws);
} dt_attn_kern;

extern const dt_kfam dt_attn_kern_kfam;
extern const dt_attn_kern dt_attn_kern_generic, dt_attn_kern_avx2, dt_attn_kern_avx512;

#endif
