/* data/idx.c - IDX files (MNIST's format), plain or gzip'd: a big-endian header (0, 0, dtype,
 * ndim, then ndim u32 dims) and the array. Every header field is checked, and the size it claims
 * is refused or read chunk by chunk before anything of that size is allocated. */
#include "data/data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* First allocation for a read; the buffer then doubles as data keeps arriving. */
#define FIRST_CHUNK ((size_t)64 << 20)
/* gzread takes an unsigned length and returns an int */
#define MAX_READ ((size_t)1 << 30)

static const char *gz_errstr(gzFile gz, int *errnum)
{
        const char *s = gzerror(gz, errnum);
        return *errnum == Z_ERRNO ? strerror(errno) : s;
}

int dt_gz_read_exact(void *gzv, size_t bytes, void **out, const char *path, char *msg, size_t msglen)
{
        gzFile gz = gzv;
        size_t cap = bytes < FIRST_CHUNK ? bytes : FIRST_CHUNK;
        unsigned char *buf = dt_malloc(cap);
        size_t got = 0;
        while (got < bytes) {
                if (got == cap) {
                        cap = cap > bytes / 2 ? bytes : 2 * cap;
                        buf = dt_realloc(buf, cap);
                }
                size_t want = DT_MIN(cap - got, MAX_READ);
                int k = gzread(gz, buf + got, (unsigned)want);
                if (k < 0) {
                        int errnum;
                        const char *why = gz_errstr(gz, &errnum);
                        if (errnum == Z_BUF_ERROR)      /* gzip stream cut short */
                                snprintf(msg, msglen, "%s: truncated: expected %zu bytes of data, got %zu (%s)",
                                         path, bytes, got, why);
                        else
                                snprintf(msg, msglen, "%s: read error: %s", path, why);
                        free(buf);
                        return -1;
                }
                if (k == 0) break;
                got += (size_t)k;
        }
        if (got < bytes) {
                snprintf(msg, msglen, "%s: truncated: expected %zu bytes of data, got %zu", path, bytes, got);
                free(buf);
                return -1;
        }
        *out = buf;
        return 0;
}

/* IDX type byte -> our dtype; -1 when the spec has no such type */
static int idx_dtype(unsigned t)
{
        switch (t) {
        case 0x08: return DT_DTYPE_U8;
        case 0x09: return DT_DTYPE_I8;
        case 0x0B: return DT_DTYPE_I16;
        case 0x0C: return DT_DTYPE_I32;
        case 0x0D: return DT_DTYPE_F32;
        case 0x0E: return DT_DTYPE_F64;
        default: return -1;
        }
}

static void swap_be(void *data, size_t count, size_t esize)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        unsigned char *p = data;
        for (size_t i = 0; i < count; i++, p += esize)
                for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
                        unsigned char t = p[a];
                        p[a] = p[b];
                        p[b] = t;
                }
#else
        (void)data; (void)count; (void)esize;
#endif
}

static int read_header(gzFile gz, unsigned char *buf, size_t n)
{
        size_t got = 0;
        while (got < n) {
                int k = gzread(gz, buf + got, (unsigned)(n - got));
                if (k <= 0) return -1;
                got += (size_t)k;
        }
        return 0;
}

int dt_idx_read(const char *path, dt_array *a, char *msg, size_t msglen)
{
        memset(a, 0, sizeof *a);
        gzFile gz = gzopen(path, "rb");
        if (!gz) {
                snprintf(msg, msglen, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
                return -1;
        }
        gzbuffer(gz, 1 << 20);
        int rc = -1;
        unsigned char h[4];
        if (read_header(gz, h, 4)) {
                snprintf(msg, msglen, "%s: not an IDX file: shorter than its 4-byte magic", path);
                goto out;
        }
        unsigned magic = (unsigned)h[0] << 24 | (unsigned)h[1] << 16 | (unsigned)h[2] << 8 | h[3];
        int dtype = idx_dtype(h[2]);
        if (h[0] || h[1] || dtype < 0 || h[3] == 0) {
                snprintf(msg, msglen, "%s: bad magic 0x%08x: not an IDX file (expected 0x00000801 for labels, "
                         "0x00000803 for images)", path, magic);
                goto out;
        }
        if (h[3] > DT_ARRAY_MAXDIMS) {
                snprintf(msg, msglen, "%s: IDX header has %u dimensions, at most %d are supported",
                         path, h[3], DT_ARRAY_MAXDIMS);
                goto out;
        }
        a->ndim = h[3];
        a->dtype = (dt_dtype)dtype;
        unsigned char d[4 * DT_ARRAY_MAXDIMS];
        if (read_header(gz, d, 4 * (size_t)a->ndim)) {
                snprintf(msg, msglen, "%s: truncated: IDX header ends before its %d dimensions", path, a->ndim);
                goto out;
        }
        size_t count = 1, bytes;
        for (int i = 0; i < a->ndim; i++) {
                const unsigned char *p = d + 4 * i;
                a->dims[i] = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
                if (a->dims[i] == 0) {
                        snprintf(msg, msglen, "%s: IDX dimension %d is 0", path, i);
                        goto out;
                }
                if (!dt_mul_ok(count, a->dims[i], &count)) count = SIZE_MAX;
        }
        if (!dt_mul_ok(count, dt_dtype_size[a->dtype], &bytes) || bytes > DT_DATA_MAX_BYTES) {
                char dims[256];
                size_t k = 0;
                for (int i = 0; i < a->ndim && k < sizeof dims; i++)
                        k += (size_t)snprintf(dims + k, sizeof dims - k, i ? "x%zu" : "%zu", a->dims[i]);
                snprintf(msg, msglen, "%s: IDX header claims a %s array, more than the %zu GiB limit: "
                         "the header is corrupt", path, dims, DT_DATA_MAX_BYTES >> 30);
                goto out;
        }
        a->count = count;
        if (dt_gz_read_exact(gz, bytes, &a->data, path, msg, msglen)) goto out;
        swap_be(a->data, count, dt_dtype_size[a->dtype]);
        rc = 0;
out:
        gzclose(gz);
        if (rc) dt_array_free(a);
        return rc;
}
