/* layers/batchnorm_avx512.c - batch normalisation's vector kernels (batchnorm_body.h) built for the
 * avx512 path (util/cpu.h) by GCC on x86-64 only: a 16-lane vector is one zmm register, a lane mask
 * one k register. */
#include "layers/batchnorm_int.h"
#include "util/prefetch.h"

#if DT_ISA_X86
#include <immintrin.h>

DT_ISA_BEGIN_AVX512

typedef __m512 v16;
typedef __mmask16 m16;

static inline m16 tail_mask(size_t n) { return (__mmask16)((1u << n) - 1); }
static inline v16 load16(const float *p) { return _mm512_loadu_ps(p); }
static inline v16 loadm16(const float *p, m16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void store16(float *p, v16 v) { _mm512_storeu_ps(p, v); }
static inline void storem16(float *p, m16 m, v16 v) { _mm512_mask_storeu_ps(p, m, v); }
static inline v16 set16(float x) { return _mm512_set1_ps(x); }
static inline v16 add16(v16 a, v16 b) { return _mm512_add_ps(a, b); }
static inline v16 sub16(v16 a, v16 b) { return _mm512_sub_ps(a, b); }
static inline v16 mul16(v16 a, v16 b) { return _mm512_mul_ps(a, b); }
static inline v16 addm16(v16 a, m16 m, v16 b) { return _mm512_mask_add_ps(a, m, a, b); }
/* z > 0 ? z : 0, as max(z, 0) gives it: NaN and -0 become +0 */
static inline v16 relu16(v16 z) { return _mm512_max_ps(z, _mm512_setzero_ps()); }
static inline v16 gt0_keep16(v16 z, v16 g)
{
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ), g);
}

/* the 16 rows in one pass: gathered lane k of every row is one vector addition */
static inline void fold_rows(const float *v, int n, float *out)
{
        (void)n;
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(LANES));
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < LANES; k++) s = _mm512_add_ps(s, _mm512_i32gather_ps(idx, v + k, 4));
        _mm512_storeu_ps(out, s);
}

#define V(f) f##_avx512
#include "layers/batchnorm_body.h"
#undef V

const struct bn_kern dt_bn_kern_avx512 = { fwd_part_avx512, bwd_part_avx512, 1 };
DT_ISA_END
#endif
