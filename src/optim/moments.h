/* optim/moments.h - the optimizer's moment buffers (m, v) on the host, one allocation laid out so
 * that the optimizer's four streams do not alias. */
#ifndef DT_MOMENTS_H
#define DT_MOMENTS_H

#include <stddef.h>

/* Optimizer moment buffers (host copies when the backend is a device). */
typedef struct dt_moments {
        int n;                  /* 0, 1 or 2 */
        float *m, *v;           /* each g->nparams floats */
        float *blk;             /* host: the one allocation m and v lie in (dt_moments_alloc), else NULL */
} dt_moments;

/* Host moments for n parameters in one block, m and v 1 KiB and 2 KiB (mod 4 KiB) past the page
 * offset at which the parameters and gradients start (allocations of their own, which glibc maps
 * at one page offset when they are large). The optimizer streams all four arrays in step; at
 * equal offsets modulo 4 KiB every load waited on the store to another array (4K aliasing): Adam
 * over 2^24 + 1024 parameters took 9.6-12 ns per parameter on a Zen 3 against 3.7-3.8 staggered
 * like this. Free with free(mo->blk). */
void dt_moments_alloc(dt_moments *mo, size_t n);

#endif
