/* layers/attn_kern_avx2.c - attn_kern.h's kernels (attn_kern_body.h) built for the avx2 path: the whole
 * translation unit, cellmath.h's vector helpers included, has the path's target. */
#include "util/cpu.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
#define V(f) f##_avx2
#define ATTN_TABLE dt_attn_kern_avx2
#include "layers/attn_kern_body.h"
DT_ISA_END
#endif
