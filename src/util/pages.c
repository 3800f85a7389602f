/* util/pages.c - page-backed float buffers and their release (see pages.h). */
#include "util/pages.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "util/common.h"

static size_t page_size(void)
{
        static size_t ps;
        if (!ps) {
                long v = sysconf(_SC_PAGESIZE);
                ps = v > 0 ? (size_t)v : 4096;
        }
        return ps;
}

float *dt_pages_alloc(size_t n)
{
        size_t bytes;
        if (!dt_mul_ok(n ? n : 1, sizeof(float), &bytes)) dt_die(DT_EXIT_RUNTIME, "allocation of %zu floats overflows", n);
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) dt_die(DT_EXIT_RUNTIME, "out of memory mapping %zu bytes", bytes);
        return p;
}

void dt_pages_free(float *p, size_t n)
{
        if (p) munmap(p, (n ? n : 1) * sizeof *p);
}

void dt_pages_zero(float *p, size_t n)
{
        if (!n) return;
        size_t ps = page_size();
        uintptr_t a = (uintptr_t)p, e = (uintptr_t)(p + n);
        uintptr_t pa = (a + ps - 1) & ~(uintptr_t)(ps - 1), pe = e & ~(uintptr_t)(ps - 1);
        if (pa >= pe) {         /* no whole page inside */
                memset(p, 0, n * sizeof *p);
                return;
        }
        memset(p, 0, pa - a);
        memset((void *)pe, 0, e - pe);
        /* private anonymous pages read back as zeros once handed back */
        if (madvise((void *)pa, pe - pa, MADV_DONTNEED)) memset((void *)pa, 0, pe - pa);
}

void dt_pages_populate(float *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
        size_t ps = page_size();
        uintptr_t pa = ((uintptr_t)p + ps - 1) & ~(uintptr_t)(ps - 1), pe = (uintptr_t)(p + n) & ~(uintptr_t)(ps - 1);
        if (pa < pe) (void)madvise((void *)pa, pe - pa, MADV_POPULATE_WRITE);  /* failure: faulted when written */
#else
        (void)p;
        (void)n;
#endif
}
