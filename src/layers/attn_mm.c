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
/* 8 x 8 floats transposed in registers: the packing of B^T was a scalar loop, a fifth of the
 * attention's per-head products (q k^T and do v^T) on the Xeon */
static inline void packt_avx2(const float *src, size_t lds, float *dst, size_t ldd)
{
        __m256 r[8], t[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (size_t)i * lds);
        for (int i = 0; i < 4; i++) {
                t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        /* r[4 i + k], lane l: column 4 l + k of rows 4 i .. 4 i + 3 */
        for (int i = 0; i < 2; i++) {
                r[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
                r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
                r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
                r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
        }
        for (int k = 0; k < 4; k++) {
                _mm256_storeu_ps(dst + (size_t)k * ldd, _mm256_permute2f128_ps(r[k], r[4 + k], 0x20));
                _mm256_storeu_ps(dst + (size_t)(k + 4) * ldd, _mm256_permute2f128_ps(r[k], r[4 + k], 0x31));
        }
}

#define MM_VB 32
#define MM_MR 4
#define MM_PACKT packt_avx2
#define MM_SPLAT(x) ((v_avx2)_mm256_set1_ps(x))
#define MM_FMA(a, b, c) ((v_avx2)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define MM_NAME(x) x##_avx2
#include "layers/attn_mm_body.h"
DT_ISA_END

DT_ISA_BEGIN_AVX512
/* 16 x 16 floats transposed in registers (as packt_avx2) */
static inline void packt_avx512(const float *src, size_t lds, float *dst, size_t ldd)
{
        __m512 r[16], t[16];
        for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)i * lds);
        for (int i = 0; i < 8; i++) {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        /* r[4 i + k], 128-bit lane l: column 4 l + k of rows 4 i .. 4 i + 3 */
        for (int i = 0; i < 4; i++) {
                r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
                r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
                r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
                r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
        }
        /* t[8 i + k]: columns k, 8 + k (lanes 0, 2 of r) of rows 8 i ..; t[8 i + 4 + k]: 4 + k, 12 + k */
        for (int i = 0; i < 2; i++)
                for (int k = 0; k < 4; k++) {
                        t[8 * i + k] = _mm512_shuffle_f32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
                        t[8 * i + 4 + k] = _mm512_shuffle_f32x4(r[8 * i + k], r[8 * i + 4 + k], 0xDD);
                }
        for (int k = 0; k < 8; k++) {
                _mm512_storeu_ps(dst + (size_t)k * ldd, _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88));
                _mm512_storeu_ps(dst + (size_t)(k + 8) * ldd, _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD));
        }
}

#define MM_VB 64
#define MM_MR 8     /* 16 accumulators of the 32 registers */
#define MM_PACKT packt_avx512
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
