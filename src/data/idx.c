/* data/idx.c - IDX files (MNIST's format), plain or gzip'd: a big-endian header (0, 0, dtype,
 * ndim, then ndim u32 dims) and the array, nothing after it. Every header field is checked, and
 * the size it claims is refused or read chunk by chunk before anything of that size is allocated. */
#include "data/data_int.h"

#include <stdlib.h>
#include <string.h>

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
        dt_swap_bytes(data, count, esize);
}

/* n header bytes: 0, or -1 with msg set (a short file leaves msg empty: the caller says what
 * was cut short) */
static int read_header(dt_dfile *f, unsigned char *buf, size_t n, char *msg, size_t msglen)
{
        msg[0] = 0;
        long k = dt_dfile_read(f, buf, n, msg, msglen);
        return k == (long)n ? 0 : -1;
}

int dt_idx_header(dt_dfile *f, const char *path, dt_array *a, int *swap, size_t *nbytes, char *msg, size_t msglen)
{
        memset(a, 0, sizeof *a);
        int rc = -1;
        unsigned char h[4];
        if (read_header(f, h, 4, msg, msglen)) {
                if (!msg[0]) snprintf(msg, msglen, "%s: not an IDX file: shorter than its 4-byte magic", path);
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
        if (read_header(f, d, 4 * (size_t)a->ndim, msg, msglen)) {
                if (!msg[0])
                        snprintf(msg, msglen, "%s: truncated: IDX header ends before its %d dimensions", path,
                                 a->ndim);
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
        *nbytes = bytes;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        *swap = dt_dtype_size[a->dtype] > 1;    /* IDX is big-endian */
#else
        *swap = 0;
#endif
        rc = 0;
out:
        return rc;
}

int dt_idx_read(const char *path, dt_array *a, char *msg, size_t msglen)
{
        memset(a, 0, sizeof *a);
        dt_dfile *f = dt_dfile_open(path, msg, msglen);
        if (!f) return -1;
        int rc = -1, swap;
        size_t bytes;
        if (dt_idx_header(f, path, a, &swap, &bytes, msg, msglen)) goto out;
        if (dt_dfile_read_exact(f, bytes, &a->data, msg, msglen)) goto out;
        if (dt_dfile_end(f, "IDX array its header describes", msg, msglen)) goto out;
        if (swap) swap_be(a->data, a->count, dt_dtype_size[a->dtype]);
        rc = 0;
out:
        dt_dfile_close(f);
        if (rc) dt_array_free(a);
        return rc;
}
