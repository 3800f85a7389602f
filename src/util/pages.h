/* util/pages.h - float buffers whose untouched pages take no memory, and ranges of them handed back
 * to the kernel: partition.shard 3's parameters and gradients, of which a rank keeps only its parts
 * resident and the rest only while a layer needs them. */
#ifndef DT_PAGES_H
#define DT_PAGES_H

#include <stddef.h>

/* n floats, page-aligned, reading as zeros; no page is resident until written. Never NULL (out of
 * memory dies, as dt_falloc). */
float *dt_pages_alloc(size_t n);
void dt_pages_free(float *p, size_t n);
/* Sets p[0..n) to zero: the whole pages inside the range are handed back (resident again only when
 * written), the partial pages at its ends are cleared. p may be any private anonymous memory. */
void dt_pages_zero(float *p, size_t n);
/* Makes the whole pages inside p[0..n) resident and writable now, in one call: what the first
 * writes would fault in one page at a time (and twice where a read comes first: the shared zero
 * page, then a copy). Contents are unchanged. A hint only: a kernel without MADV_POPULATE_WRITE
 * (before Linux 5.14) leaves them to the first writes. */
void dt_pages_populate(float *p, size_t n);

#endif
