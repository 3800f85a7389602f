/* util/cpu_fix.h - makes OpenBLAS use the kernels this CPU can run fastest. Debian 12's OpenBLAS
 * 0.3.21 does not know some AVX-512 Xeons and falls back to Prescott kernels (3-7x slower SGEMM);
 * dt_blas_fix re-executes the program with OPENBLAS_CORETYPE set before any math runs. */
#ifndef DT_CPU_FIX_H
#define DT_CPU_FIX_H

/* Call first in main, before MPI_Init. Returns only when no re-exec was needed (or it failed). */
void dt_blas_fix(char **argv);
/* "SkylakeX (OPENBLAS_CORETYPE set by dtrain; OpenBLAS detected Prescott)" and the like. */
const char *dt_blas_core_desc(void);
/* The kernel family the CPU's features call for: "SkylakeX", "Haswell", "Sandybridge" or NULL. */
const char *dt_blas_best_core(void);

#endif
