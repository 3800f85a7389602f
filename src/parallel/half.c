/* parallel/half.c - the fp16 casts and sum (parallel/half.h): a portable _Float16 loop and F16C
 * ones. GCC for baseline x86-64 casts _Float16 through libgcc's soft-float calls (__truncsfhf2,
 * __extendhfsf2); fp16 on mlp-4096 (20M parameters, 2 ranks) spent far more time there than it
 * saved on the wire. vcvtps2ph with an explicit round-to-nearest-even immediate and vcvtph2ps give
 * the same bits as those calls for every input (NaNs quieted with their sign and top payload bits,
 * overflow to infinity, subnormals exact); tests/unit/test_half.c checks every path against them. */
#include "parallel/half.h"

#include <string.h>

static void to_half_generic(const float *x, uint16_t *h, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                _Float16 v = (_Float16)x[i];
                memcpy(&h[i], &v, sizeof v);
        }
}

static inline float h2f(uint16_t u)
{
        _Float16 v;
        memcpy(&v, &u, sizeof v);
        return (float)v;
}

static void to_float_generic(const uint16_t *h, float *x, size_t n)
{
        for (size_t i = 0; i < n; i++) x[i] = h2f(h[i]);
}

/* The expression dp.c's MPI op always had: GCC computes float(b) + float(a), so when both are NaN
 * the result is b's, quieted (x86 returns the first operand's NaN). */
static void sum_generic(const uint16_t *a16, uint16_t *b16, size_t n)
{
        const _Float16 *a = (const _Float16 *)(const void *)a16;
        _Float16 *b = (_Float16 *)(void *)b16;
        for (size_t i = 0; i < n; i++) b[i] = (_Float16)((float)a[i] + (float)b[i]);
}

static const dt_half_kern half_generic = { to_half_generic, to_float_generic, sum_generic };

#if DT_ISA_X86
#include <immintrin.h>

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

DT_ISA_BEGIN_AVX2
/* The vector sums cannot fix the add's operand order (GCC may swap a commutative intrinsic's), so
 * where b is NaN they add b to itself: b's NaN, quieted, as the scalar loop gives.
 * Tails go through one zero-padded vector, so no element takes another rounding route. */
static void to_half_avx2(const float *x, uint16_t *h, size_t n)
{
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), RNE));
        if (i < n) {
                float t[8] = { 0 };
                uint16_t o[8];
                memcpy(t, x + i, (n - i) * sizeof *t);
                _mm_storeu_si128((__m128i *)(void *)o, _mm256_cvtps_ph(_mm256_loadu_ps(t), RNE));
                memcpy(h + i, o, (n - i) * sizeof *o);
        }
}

static void to_float_avx2(const uint16_t *h, float *x, size_t n)
{
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
        if (i < n) {
                uint16_t t[8] = { 0 };
                float o[8];
                memcpy(t, h + i, (n - i) * sizeof *t);
                _mm256_storeu_ps(o, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)t)));
                memcpy(x + i, o, (n - i) * sizeof *o);
        }
}

static inline __m128i sum8(const uint16_t *a, const uint16_t *b)
{
        __m256 fa = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)a));
        __m256 fb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)b));
        fa = _mm256_blendv_ps(fa, fb, _mm256_cmp_ps(fb, fb, _CMP_UNORD_Q));
        return _mm256_cvtps_ph(_mm256_add_ps(fa, fb), RNE);
}

static void sum_avx2(const uint16_t *a, uint16_t *b, size_t n)
{
        size_t i = 0;
        for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(void *)(b + i), sum8(a + i, b + i));
        if (i < n) {
                uint16_t ta[8] = { 0 }, tb[8] = { 0 }, o[8];
                memcpy(ta, a + i, (n - i) * sizeof *ta);
                memcpy(tb, b + i, (n - i) * sizeof *tb);
                _mm_storeu_si128((__m128i *)(void *)o, sum8(ta, tb));
                memcpy(b + i, o, (n - i) * sizeof *o);
        }
}
DT_ISA_END

static const dt_half_kern half_avx2 = { to_half_avx2, to_float_avx2, sum_avx2 };

DT_ISA_BEGIN_AVX512
/* 16 at a time; the avx2 loops finish the last 15. */
static void to_half_avx512(const float *x, uint16_t *h, size_t n)
{
        size_t i = 0;
        for (; i + 16 <= n; i += 16)
                _mm256_storeu_si256((__m256i *)(void *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), RNE));
        to_half_avx2(x + i, h + i, n - i);
}

static void to_float_avx512(const uint16_t *h, float *x, size_t n)
{
        size_t i = 0;
        for (; i + 16 <= n; i += 16)
                _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + i))));
        to_float_avx2(h + i, x + i, n - i);
}

static void sum_avx512(const uint16_t *a, uint16_t *b, size_t n)
{
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
                __m512 fa = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(a + i)));
                __m512 fb = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(b + i)));
                fa = _mm512_mask_mov_ps(fa, _mm512_cmp_ps_mask(fb, fb, _CMP_UNORD_Q), fb);
                _mm256_storeu_si256((__m256i *)(void *)(b + i), _mm512_cvtps_ph(_mm512_add_ps(fa, fb), RNE));
        }
        sum_avx2(a + i, b + i, n - i);
}
DT_ISA_END

static const dt_half_kern half_avx512 = { to_half_avx512, to_float_avx512, sum_avx512 };
#endif

const dt_kfam dt_half_kfam = {
        .name = "fp16",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &half_generic, [DT_ISA_AVX2] = &half_avx2, [DT_ISA_AVX512] = &half_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &half_generic },
#endif
};
