/* layers/layernorm_kern.c - layernorm_kern.h's loops (layernorm_body.h) built for each CPU path. They
 * were built for the baseline only (SSE2, four floats an op) on every CPU. */
#include "layers/layernorm_kern.h"

#include <math.h>

#define LN_LANES 16

#define LN_NAME(x) x##_generic
#include "layers/layernorm_body.h"

#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
#define LN_NAME(x) x##_avx2
#include "layers/layernorm_body.h"
DT_ISA_END

DT_ISA_BEGIN_AVX512
#define LN_NAME(x) x##_avx512
#include "layers/layernorm_body.h"
DT_ISA_END
#endif

const dt_kfam dt_ln_kfam = {
        .name = "layernorm",
#if DT_ISA_X86
        .v = { [DT_ISA_GENERIC] = &k_generic, [DT_ISA_AVX2] = &k_avx2, [DT_ISA_AVX512] = &k_avx512 },
#else
        .v = { [DT_ISA_GENERIC] = &k_generic },
#endif
};
