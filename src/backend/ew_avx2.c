/* backend/ew_avx2.c - the elementwise kernels (ewkern.h) built for the avx2 path: the whole
 * translation unit has the path's target; the dropout mask is its own, in vectors. */
#include "util/cpu.h"

#if DT_ISA_X86
#include <immintrin.h>
#include <stdint.h>
#include "backend/backend.h"

DT_ISA_BEGIN_AVX2

/* ---- the dropout mask: dt_dropout_keep four 64-bit lanes at a time ----
 * The generic loop stays scalar on AVX2 (SplitMix64's 64-bit products have no AVX2 instruction;
 * AVX-512's vpmullq vectorises it): 2.1 ns an element, the dropout rows at 54-57% of the triad
 * (Xeon, forced avx2, b256). Here a product is three 32 x 32 -> 64 multiplies, j C2 a running sum
 * (mod 2^64, as j * C2 wraps), and the 24 bits kept convert exactly: every bit the scalar's. */

/* a b mod 2^64 per lane; blo, bhi: b's low and high 32 bits */
static inline __m256i mul64(__m256i a, __m256i blo, __m256i bhi)
{
        __m256i lo = _mm256_mul_epu32(a, blo);
        __m256i mid = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), blo), _mm256_mul_epu32(a, bhi));
        return _mm256_add_epi64(lo, _mm256_slli_epi64(mid, 32));
}

#define C64(c) _mm256_set1_epi64x((long long)(c))

/* SplitMix64's finaliser of dt_dropout_keep, then z >> 40 */
static inline __m256i mix24(__m256i z)
{
        z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), C64(0x1CE4E5B9u), C64(0xBF58476Du));
        z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), C64(0x133111EBu), C64(0x94D049BBu));
        z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
        return _mm256_srli_epi64(z, 40);
}

static void dropout_mask_vec(float *mask, int b0, int b1, size_t per, uint64_t key, long pos0, float p)
{
        const float keep = 1.0f / (1.0f - p);
        const uint64_t C2 = 0xD1B54A32D192ED03ull;
        const __m256 vkeep = _mm256_set1_ps(keep), vp = _mm256_set1_ps(p), unit = _mm256_set1_ps(1.0f / 16777216.0f);
        const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7), step = C64(8 * C2);
        for (int b = b0; b < b1; b++) {
                float *mb = mask + (size_t)b * per;
                const uint64_t z0 = key ^ ((uint64_t)(pos0 + b) * 0x9E3779B97F4A7C15ull);
                const __m256i vz = C64(z0);
                __m256i j0 = _mm256_setr_epi64x(0, (long long)C2, (long long)(2 * C2), (long long)(3 * C2));
                __m256i j1 = _mm256_add_epi64(j0, C64(4 * C2));
                size_t j = 0;
                for (; j + 8 <= per; j += 8) {
                        __m256i h0 = _mm256_permutevar8x32_epi32(mix24(_mm256_xor_si256(vz, j0)), even);
                        __m256i h1 = _mm256_permutevar8x32_epi32(mix24(_mm256_xor_si256(vz, j1)), even);
                        __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_permute2x128_si256(h0, h1, 0x20)), unit);
                        _mm256_storeu_ps(mb + j, _mm256_and_ps(_mm256_cmp_ps(u, vp, _CMP_GE_OQ), vkeep));
                        j0 = _mm256_add_epi64(j0, step);
                        j1 = _mm256_add_epi64(j1, step);
                }
                for (; j < per; j++) mb[j] = dt_dropout_keep(key, (uint64_t)(pos0 + b), j, p) ? keep : 0.0f;
        }
}
#undef C64

#define EW_DROPOUT_MASK dropout_mask_vec
#define V(f) f##_avx2
#define EW_TABLE dt_ew_kern_avx2
#include "backend/ewkern.h"
DT_ISA_END
#endif
