/* backend/ew_avx512.c - the elementwise kernels (ewkern.h) built for the avx512 path: the whole
 * translation unit has the path's target. */
#include "util/cpu.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX512
#define V(f) f##_avx512
#define EW_TABLE dt_ew_kern_avx512
#include "backend/ewkern.h"
DT_ISA_END
#endif
