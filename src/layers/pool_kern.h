/* layers/pool_kern.h - pooling's host kernels, one table per CPU path (util/cpu.h). Every variant
 * gives the generic one's bits. */
#ifndef DT_POOL_KERN_H
#define DT_POOL_KERN_H

#include "util/cpu.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dt_pool_kern {
        /* 2x2 stride-2 max pooling over global output rows [g0, g1) of (H, W) planes with (OH, OW)
         * outputs: y, and code (0..3: which cell of the window, the first holding the maximum);
         * planes that read a NaN widen [*nan_lo, *nan_hi] for the caller to redo */
        void (*max2x2_fwd)(const float *x, float *y, uint8_t *code, int H, int W, int OH, int OW, size_t g0,
                           size_t g1, size_t *nan_lo, size_t *nan_hi);
        /* its backward: each dx element of the rows' planes written once, dy or 0 by the code
         * under a window, 0 in an odd last column, and in an odd last row with the plane's last
         * output row */
        void (*max2x2_bwd)(const float *dy, const uint8_t *code, float *dx, int H, int W, int OH, int OW, size_t g0,
                           size_t g1);
        /* global average pooling, planes [pl, p1) of HW values, sixteen at a time while sixteen
         * remain: y[pl] = inv * the plane's sum in order; returns the first plane left. NULL: none. */
        size_t (*gap16)(const float *x, float *y, size_t pl, size_t p1, size_t HW, float inv);
} dt_pool_kern;

extern const dt_kfam dt_pool_kfam;

static inline const dt_pool_kern *dt_pool_kern_get(void) { return (const dt_pool_kern *)dt_kfam_pick(&dt_pool_kfam); }

#endif
