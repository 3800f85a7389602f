/* layers/cells_avx512.c - the recurrent cells' kernels (cellkern.h) built for the avx512 path: the whole
 * translation unit, vector math helpers included, has the path's target. */
#include "util/cpu.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX512
#define V(f) f##_avx512
#define CELL_TABLE dt_cell_kern_avx512
#include "layers/cellkern.h"
DT_ISA_END
#endif
