/* layers/cells_avx2.c - the recurrent cells' kernels (cellkern.h) built for the avx2 path: the whole
 * translation unit, vector math helpers included, has the path's target; vectors of 8 floats. */
#include "util/cpu.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
#define CELL_VBYTES 32
#define V(f) f##_avx2
#define CELL_TABLE dt_cell_kern_avx2
#include "layers/cellkern.h"
DT_ISA_END
#endif
