/* data/bytes.h - bytes to floats through a 256-entry table, one kernel per CPU path (util/cpu.h):
 * x[q] = lut[r[q] ^ flip] for q in [0, n). Every path gives the same floats (a lookup). */
#ifndef DT_BYTES_H
#define DT_BYTES_H

#include "util/cpu.h"

#include <stddef.h>

typedef struct dt_bytes_kern {
        void (*lut)(const unsigned char *r, size_t n, unsigned char flip, const float *lut, float *x);
} dt_bytes_kern;

extern const dt_kfam dt_bytes_kfam;

static inline const dt_bytes_kern *dt_bytes_kern_get(void) { return (const dt_bytes_kern *)dt_kfam_pick(&dt_bytes_kfam); }

#endif
