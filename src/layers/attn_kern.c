/* layers/attn_kern.c - one head's attention, plain and blocked (attn_kern.h): the workspace sizes,
 * the generic path's kernels (attn_kern_body.h) and the dispatch to the path in force. The softmax
 * loops ran as four SSE ops per 16-float vector on every CPU before they had a copy per path: exp_row
 * and the kernels' own loops were 5% of char-gpt's step on the AVX-512 Xeon. */
#include "layers/attn_kern.h"

#define V(f) f##_generic
#define ATTN_TABLE dt_attn_kern_generic
#include "layers/attn_kern_body.h"
#undef V
#undef ATTN_TABLE

size_t dt_attn_plain_ws(int T, int D, int block)
{
        (void)D; (void)block;
        return 2 * (size_t)T * T + (size_t)T;
}

size_t dt_attn_blocked_ws(int T, int D, int block)
{
        size_t b = (size_t)block;
        return 3 * b * b + b * (size_t)D + 2 * b + (size_t)T;
}

const dt_kfam dt_attn_kern_kfam = {
        .name = "attention",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &dt_attn_kern_generic, [DT_ISA_AVX2] = &dt_attn_kern_avx2,
               [DT_ISA_AVX512] = &dt_attn_kern_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &dt_attn_kern_generic },
#endif
};

static const dt_attn_kern *kern(void) { return (const dt_attn_kern *)dt_kfam_pick(&dt_attn_kern_kfam); }

void dt_attn_plain_fwd(const dt_attn_head *h, float *o, float *P, float *ws) { kern()->plain_fwd(h, o, P, ws); }

void dt_attn_plain_bwd(const dt_attn_head *h, const float *o, const float *do_, const float *P, float *dq,
                       float *dk, float *dv, float *ws)
{
        kern()->plain_bwd(h, o, do_, P, dq, dk, dv, ws);
}

void dt_attn_blocked_fwd(const dt_attn_head *h, float *o, float *lse, float *ws)
{
        kern()->blocked_fwd(h, o, lse, ws);
}

void dt_attn_blocked_bwd(const dt_attn_head *h, const float *o, const float *do_, const float *lse, float *dq,
                         float *dk, float *dv, float *ws)
{
        kern()->blocked_bwd(h, o, do_, lse, dq, dk, dv, ws);
}
