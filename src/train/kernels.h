/* train/kernels.h - one line naming the CPU kernel path in force and each family's variant, for the
 * run banner and `dtrain bench`. */
#ifndef DT_TRAIN_KERNELS_H
#define DT_TRAIN_KERNELS_H

#include <stddef.h>

/* "avx512 (the CPU's best): cells avx512, stepgemm avx512, ..." into buf; returns buf */
const char *dt_kernels_desc(char *buf, size_t len);

#endif
