/* backend/ew.c - the elementwise kernels' generic loops (the build's baseline) and the family's
 * table of paths; ew_avx2.c and ew_avx512.c build the same loops for their targets. */
#define V(f) f##_generic
#define EW_TABLE dt_ew_kern_generic
#include "backend/ewkern.h"

const dt_kfam dt_ew_kfam = {
        .name = "elementwise",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &dt_ew_kern_generic, [DT_ISA_AVX2] = &dt_ew_kern_avx2,
               [DT_ISA_AVX512] = &dt_ew_kern_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &dt_ew_kern_generic },
#endif
};
