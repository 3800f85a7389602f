/* util/prefetch.h - software prefetch ahead of a streaming loop. Measured on an AMD EPYC (Zen 4):
 * the AVX-512 pooling and batchnorm loops, whose masked loads waited on the previous row's masked
 * stores, kept about one row's cache lines in flight and ran at 6-9 GB/s (30-63% of the triad);
 * touching the lines 2 KB ahead gave 25-40 GB/s (the machine's triad: 31 GB/s). A prefetch never
 * faults, so running past the end of a buffer is harmless. */
#ifndef DT_PREFETCH_H
#define DT_PREFETCH_H

#include <stddef.h>

#define DT_AHEAD_BYTES 2048

/* The cache lines of [p + DT_AHEAD_BYTES, + bytes): for reading (rw 0) or about to be written. */
static inline void dt_prefetch_ahead(const void *p, size_t bytes, int rw)
{
        const char *a = (const char *)p + DT_AHEAD_BYTES;
        for (size_t q = 0; q < bytes; q += 64) {
                if (rw) __builtin_prefetch(a + q, 1, 3);
                else __builtin_prefetch(a + q, 0, 3);
        }
}

#endif
