/* data/bytes.c - bytes to floats through a table (bytes.h): generic, AVX2 eight and AVX-512 sixteen lookups
 * per gather (the scalar loop was a tenth of mlp's step). */
#include "data/bytes.h"

#if DT_ISA_X86
#include <immintrin.h>
#endif

static void lut_generic(const unsigned char *r, size_t n, unsigned char flip, const float *lut, float *x)
{
        for (size_t q = 0; q < n; q++) x[q] = lut[r[q] ^ flip];
}

static const dt_bytes_kern k_generic = { lut_generic };

#if DT_ISA_X86
DT_ISA_BEGIN_AVX512
static void lut_avx512(const unsigned char *r, size_t n, unsigned char flip, const float *lut, float *x)
{
        const __m512i fl = _mm512_set1_epi32(flip);
        size_t q = 0;
        for (; q + 16 <= n; q += 16) {
                __m128i b = _mm_loadu_si128((const __m128i *)(r + q));
                __m512i id = _mm512_xor_si512(_mm512_cvtepu8_epi32(b), fl);
                _mm512_storeu_ps(x + q, _mm512_i32gather_ps(id, lut, 4));
        }
        for (; q < n; q++) x[q] = lut[r[q] ^ flip];
}

static const dt_bytes_kern k_avx512 = { lut_avx512 };
DT_ISA_END

DT_ISA_BEGIN_AVX2
static void lut_avx2(const unsigned char *r, size_t n, unsigned char flip, const float *lut, float *x)
{
        const __m256i fl = _mm256_set1_epi32(flip);
        size_t q = 0;
        for (; q + 8 <= n; q += 8) {
                __m128i b = _mm_loadl_epi64((const __m128i *)(r + q));
                __m256i id = _mm256_xor_si256(_mm256_cvtepu8_epi32(b), fl);
                _mm256_storeu_ps(x + q, _mm256_i32gather_ps(lut, id, 4));
        }
        for (; q < n; q++) x[q] = lut[r[q] ^ flip];
}

static const dt_bytes_kern k_avx2 = { lut_avx2 };
DT_ISA_END
#endif

const dt_kfam dt_bytes_kfam = {
        .name = "bytes",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &k_avx2, [DT_ISA_AVX512] = &k_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &k_generic },
#endif
};
