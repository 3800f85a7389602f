/* layers/cells.c - the recurrent cells' generic kernels (the build's baseline, no FMA) and the
 * family's table of paths; cells_avx2.c and cells_avx512.c build the same math for their targets. */
#define V(f) f##_generic
#define CELL_TABLE dt_cell_kern_generic
#include "layers/cellkern.h"

const dt_kfam dt_cell_kfam = {
        .name = "cells",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &dt_cell_kern_generic, [DT_ISA_AVX2] = &dt_cell_kern_avx2,
               [DT_ISA_AVX512] = &dt_cell_kern_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &dt_cell_kern_generic },
#endif
};
