/* train/kernels.c - the CPU kernels line (kernels.h): the path, why, and each family's variant. */
#include "train/kernels.h"
#include "backend/ew.h"
#include "data/bytes.h"
#include "layers/kernels.h"
#include "parallel/half.h"

#include <stdio.h>
#include <stdlib.h>

const char *dt_kernels_desc(char *buf, size_t len)
{
        static const dt_kfam *const fams[] = { &dt_cell_kfam, &dt_stepgemm_kfam, &dt_conv_kfam, &dt_convd_kfam,
                                               &dt_pool_kfam,
                                               &dt_bn_kfam, &dt_bytes_kfam, &dt_ew_kfam, &dt_attn_mm_kfam,
                                               &dt_attn_kern_kfam, &dt_ln_kfam, &dt_half_kfam };
        const char *env = getenv("DTRAIN_CPU");
        dt_isa isa = dt_cpu_isa(), best = dt_cpu_best();
        int n = env && *env ? snprintf(buf, len, "%s (DTRAIN_CPU=%s; the CPU's best: %s)", dt_isa_name(isa), env,
                                       dt_isa_name(best))
                            : snprintf(buf, len, "%s (the CPU's best%s)", dt_isa_name(isa),
                                       DT_ISA_X86 ? "" : "; this build has no other");
        for (size_t i = 0; i < sizeof fams / sizeof *fams && n >= 0 && (size_t)n < len; i++) {
                int v = dt_kfam_isa(fams[i]);
                n += snprintf(buf + n, len - (size_t)n, "%s %s %s", i ? "," : ":", fams[i]->name,
                              v < 0 ? "none (BLAS)" : dt_isa_name((dt_isa)v));
        }
        return buf;
}
