/* layers/layernorm_kern.h - layer normalisation's row loops (layernorm.c), one table per CPU path
 * (util/cpu.h): the same C on every path, row sums in 16 fixed lanes, so every path gives the same
 * bits. Rows [r0, r1) of F floats each; mean and rstd (per row) from forward for backward. */
#ifndef DT_LAYERNORM_KERN_H
#define DT_LAYERNORM_KERN_H

#include <stddef.h>
#include "util/cpu.h"

typedef struct dt_ln_kern {
        /* mean = sum x / F;  rstd = 1 / sqrt(sum (x - mean)^2 / F + eps);  y = (x - mean) rstd w + b
         * (w, b NULL: not affine) */
        void (*fwd)(const float *x, float *y, float *mean, float *rstd, const float *w, const float *b, float eps,
                    size_t F, size_t r0, size_t r1);
        /* g = dy w, xhat = (x - mean) rstd:  dx = rstd (g - mean(g) - xhat mean(g xhat)); ws: 2F floats */
        void (*bwd)(const float *x, const float *dy, float *dx, const float *mean, const float *rstd, const float *w,
                    size_t F, size_t r0, size_t r1, float *ws);
        /* features [lo, lo + n) over rows [0, R) in order: aw += sum dy xhat, ab += sum dy (n floats each) */
        void (*params)(const float *x, const float *dy, const float *mean, const float *rstd, size_t F, size_t R,
                       size_t lo, size_t n, float *aw, float *ab);
} dt_ln_kern;

extern const dt_kfam dt_ln_kfam;

static inline const dt_ln_kern *dt_ln_get(void) { return (const dt_ln_kern *)dt_kfam_pick(&dt_ln_kfam); }

#endif
