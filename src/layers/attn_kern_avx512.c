/* layers/attn_kern_avx512.c - attn_kern.h's kernels (attn_kern_body.h) built for the avx512 path: the whole
 * translation unit, cellmath.h's vector helpers included, has the path's target. */
#include "util/cpu.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX512
#define V(f) f##_avx512
#define ATTN_TABLE dt_attn_kern_avx512
#include "layers/attn_kern_body.h"
DT_ISA_END
#endif
