/* layers/attn_mm.c - attn_mm.h's kernel (attn_mm_body.h) built for each CPU path: 16-byte vectors
 * and separate multiply-add on the generic one, 32 and 64 with FMA on avx2 and avx512. */
#include "layers/attn_mm.h"

#include <string.h>
#if DT_ISA_X86
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* wide vectors between static functions of this file only */
#endif

#define MM_VB 16
#define MM_MR 4
#define MM_SPLAT(x) ((v_generic){ (x), (x), (x), (x) })
#define MM_FMA(a, b, c) ((a) * (b) + (c))
#define MM_NAME(x) x##_generic
#include "layers/attn_mm_body.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
#define MM_VB 32
#define MM_MR 4
#define MM_SPLAT(x) ((v_avx2)_mm256_set1_ps(x))
#define MM_FMA(a, b, c) ((v_avx2)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define MM_NAME(x) x##_avx2
#include "layers/attn_mm_body.h"
DT_ISA_END

DT_ISA_BEGIN_AVX512
#define MM_VB 64
#define MM_MR 8     /* 16 accumulators of the 32 registers */
#define MM_SPLAT(x) ((v_avx512)_mm512_set1_ps(x))
#define MM_FMA(a, b, c) ((v_avx512)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define MM_NAME(x) x##_avx512
#include "layers/attn_mm_body.h"
DT_ISA_END
#endif

const dt_kfam dt_attn_mm_kfam = {
        .name = "attn_mm",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &k_avx2, [DT_ISA_AVX512] = &k_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &k_generic },
#endif
};
