/* parallel/half.h - fp16 gradient compression's casts and sum (float <-> IEEE half, round to
 * nearest even), one table per CPU path (util/cpu.h); every path gives the bits of _Float16's casts. */
#ifndef DT_HALF_H
#define DT_HALF_H

#include <stddef.h>
#include <stdint.h>
#include "util/cpu.h"

typedef struct dt_half_kern {
        void (*to_half)(const float *x, uint16_t *h, size_t n);
        void (*to_float)(const uint16_t *h, float *x, size_t n);
        /* b[i] = half(float(a[i]) + float(b[i])) */
        void (*sum)(const uint16_t *a, uint16_t *b, size_t n);
} dt_half_kern;

extern const dt_kfam dt_half_kfam;

static inline const dt_half_kern *dt_half_get(void) { return (const dt_half_kern *)dt_kfam_pick(&dt_half_kfam); }

#endif
