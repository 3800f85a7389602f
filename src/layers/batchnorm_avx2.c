/* layers/batchnorm_avx2.c - batch normalisation's vector kernels (batchnorm_body.h) built for the
 * avx2 path (util/cpu.h) by GCC on x86-64 only: a 16-lane vector is a pair of ymm registers (lanes
 * 0-7, 8-15), a lane mask a pair of integer vectors, a tail's lanes past the row kept by a blend. */
#include "layers/batchnorm_int.h"
#include "util/prefetch.h"

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX2

typedef struct { __m256 lo, hi; } v16;
typedef struct { __m256i lo, hi; } m16;

static inline m16 tail_mask(size_t n)
{
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i vn = _mm256_set1_epi32((int)n);
        return (m16){ _mm256_cmpgt_epi32(vn, iota), _mm256_cmpgt_epi32(vn, _mm256_add_epi32(iota, _mm256_set1_epi32(8))) };
}

static inline v16 load16(const float *p) { return (v16){ _mm256_loadu_ps(p), _mm256_loadu_ps(p + 8) }; }
static inline v16 loadm16(const float *p, m16 m) { return (v16){ _mm256_maskload_ps(p, m.lo), _mm256_maskload_ps(p + 8, m.hi) }; }
static inline void store16(float *p, v16 v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
static inline void storem16(float *p, m16 m, v16 v) { _mm256_maskstore_ps(p, m.lo, v.lo); _mm256_maskstore_ps(p + 8, m.hi, v.hi); }
static inline v16 set16(float x) { __m256 v = _mm256_set1_ps(x); return (v16){ v, v }; }
static inline v16 add16(v16 a, v16 b) { return (v16){ _mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi) }; }
static inline v16 sub16(v16 a, v16 b) { return (v16){ _mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi) }; }
static inline v16 mul16(v16 a, v16 b) { return (v16){ _mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi) }; }
static inline v16 addm16(v16 a, m16 m, v16 b)
{
        return (v16){ _mm256_blendv_ps(a.lo, _mm256_add_ps(a.lo, b.lo), _mm256_castsi256_ps(m.lo)),
                      _mm256_blendv_ps(a.hi, _mm256_add_ps(a.hi, b.hi), _mm256_castsi256_ps(m.hi)) };
}
/* z > 0 ? z : 0, as max(z, 0) gives it: NaN and -0 become +0 */
static inline v16 relu16(v16 z)
{
        const __m256 zero = _mm256_setzero_ps();
        return (v16){ _mm256_max_ps(z.lo, zero), _mm256_max_ps(z.hi, zero) };
}
static inline v16 gt0_keep16(v16 z, v16 g)
{
        const __m256 zero = _mm256_setzero_ps();
        return (v16){ _mm256_and_ps(_mm256_cmp_ps(z.lo, zero, _CMP_GT_OQ), g.lo),
                      _mm256_and_ps(_mm256_cmp_ps(z.hi, zero, _CMP_GT_OQ), g.hi) };
}

/* rows 0-7 of the 8 x 16 block at v, as fold_rows folds them */
static inline __m256 fold8(const float *v)
{
        const __m256i idx = _mm256_setr_epi32(0, LANES, 2 * LANES, 3 * LANES, 4 * LANES, 5 * LANES, 6 * LANES, 7 * LANES);
        __m256 s = _mm256_setzero_ps();
        for (int k = 0; k < LANES; k++) s = _mm256_add_ps(s, _mm256_i32gather_ps(v + k, idx, 4));
        return s;
}

/* the first n rows, eight at a time: only the halves that hold a queued row */
static inline void fold_rows(const float *v, int n, float *out)
{
        _mm256_storeu_ps(out, fold8(v));
        if (n > 8) _mm256_storeu_ps(out + 8, fold8(v + 8 * LANES));
}

#define V(f) f##_avx2
#include "layers/batchnorm_body.h"
#undef V

const struct bn_kern dt_bn_kern_avx2 = { fwd_part_avx2, bwd_part_avx2, 1 };
DT_ISA_END
#endif
