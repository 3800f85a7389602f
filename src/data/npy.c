/* data/npy.c - NumPy .npy files (versions 1, 2, 3), plain or gzip'd: magic, header length, a
 * Python dict literal {'descr', 'fortran_order', 'shape'} parsed strictly, then C-order data and
 * nothing after it. Sizes are checked before anything of that size is allocated. */
#include "data/data_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* A header is a few dozen bytes; anything near this is not a .npy header. */
#define MAX_HEADER ((size_t)1 << 20)

typedef struct hdr {
        const char *s;          /* the dict text */
        size_t i, len;
        const char *path;
        char *msg;
        size_t msglen;
} hdr;

static int bad(hdr *h, const char *what)
{
        snprintf(h->msg, h->msglen, "%s: bad .npy header at offset %zu: %s", h->path, h->i, what);
        return -1;
}

static void skip_ws(hdr *h)
{
        while (h->i < h->len && isspace((unsigned char)h->s[h->i]))
                h->i++;
}

static int accept(hdr *h, char c)
{
        skip_ws(h);
        if (h->i < h->len && h->s[h->i] == c) {
                h->i++;
                return 1;
        }
        return 0;
}

/* a Python string literal without escapes (numpy never writes any in these fields) */
static int parse_str(hdr *h, char *out, size_t outlen)
{
        skip_ws(h);
        if (h->i >= h->len || (h->s[h->i] != '\'' && h->s[h->i] != '"'))
                return bad(h, "expected a quoted string");
        char q = h->s[h->i++];
        size_t k = 0;
        while (h->i < h->len && h->s[h->i] != q) {
                if (h->s[h->i] == '\\') return bad(h, "escapes in strings are not supported");
                if (k + 1 >= outlen) return bad(h, "string too long");
                out[k++] = h->s[h->i++];
        }
        if (h->i >= h->len) return bad(h, "unterminated string");
        h->i++;
        out[k] = 0;
        return 0;
}

static int parse_bool(hdr *h, int *out)
{
        skip_ws(h);
        if (h->len - h->i >= 4 && !strncmp(h->s + h->i, "True", 4)) {
                *out = 1;
                h->i += 4;
        } else if (h->len - h->i >= 5 && !strncmp(h->s + h->i, "False", 5)) {
                *out = 0;
                h->i += 5;
        } else {
                return bad(h, "expected True or False");
        }
        return 0;
}

/* '(' [int (',' int)* [',']] ')' */
static int parse_shape(hdr *h, dt_array *a)
{
        if (!accept(h, '(')) return bad(h, "shape: expected '('");
        a->ndim = 0;
        for (;;) {
                if (accept(h, ')')) return 0;
                skip_ws(h);
                if (h->i >= h->len || !isdigit((unsigned char)h->s[h->i]))
                        return bad(h, "shape: expected a non-negative integer");
                if (a->ndim == DT_ARRAY_MAXDIMS) {
                        snprintf(h->msg, h->msglen, "%s: .npy shape has more than %d dimensions",
                                 h->path, DT_ARRAY_MAXDIMS);
                        return -1;
                }
                size_t v = 0;
                while (h->i < h->len && isdigit((unsigned char)h->s[h->i])) {
                        if (!dt_mul_ok(v, 10, &v) || !dt_add_ok(v, (size_t)(h->s[h->i] - '0'), &v))
                                return bad(h, "shape: dimension too large");
                        h->i++;
                }
                if (h->i < h->len && h->s[h->i] == 'L') h->i++;        /* Python 2 long */
                a->dims[a->ndim++] = v;
                if (accept(h, ',')) continue;
                if (accept(h, ')')) return 0;
                return bad(h, "shape: expected ',' or ')'");
        }
}

/* "<f4" and friends; sets *swap when the data is big-endian */
static int parse_descr(hdr *h, const char *d, dt_array *a, int *swap)
{
        static const struct { const char *kind; dt_dtype t; } kinds[] = {
                {"f4", DT_DTYPE_F32}, {"f8", DT_DTYPE_F64}, {"u1", DT_DTYPE_U8}, {"b1", DT_DTYPE_U8},
                {"i1", DT_DTYPE_I8}, {"i2", DT_DTYPE_I16}, {"i4", DT_DTYPE_I32}, {"i8", DT_DTYPE_I64},
        };
        char order = d[0];
        if (strlen(d) == 3 && strchr("<>|=", order)) {
                for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                        if (strcmp(d + 1, kinds[k].kind)) continue;
                        a->dtype = kinds[k].t;
                        size_t es = dt_dtype_size[a->dtype];
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                        *swap = order == '>' && es > 1;
#else
                        *swap = order == '<' && es > 1;
#endif
                        if (order == '|' && es > 1) break;      /* byte order must be given */
                        return 0;
                }
        }
        snprintf(h->msg, h->msglen, "%s: unsupported .npy dtype '%s' (supported: <f4, <f8, |u1, |i1, <i2, "
                 "<i4, <i8)", h->path, d);
        return -1;
}

static int parse_dict(hdr *h, dt_array *a, int *swap)
{
        int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
        char descr[64];
        if (!accept(h, '{')) return bad(h, "expected '{'");
        for (;;) {
                if (accept(h, '}')) break;
                char key[32];
                if (parse_str(h, key, sizeof key)) return -1;
                if (!accept(h, ':')) return bad(h, "expected ':'");
                if (!strcmp(key, "descr")) {
                        skip_ws(h);
                        if (h->i < h->len && h->s[h->i] == '[') {
                                snprintf(h->msg, h->msglen, "%s: structured .npy dtypes are not supported", h->path);
                                return -1;
                        }
                        if (parse_str(h, descr, sizeof descr)) return -1;
                        have_descr = 1;
                } else if (!strcmp(key, "fortran_order")) {
                        if (parse_bool(h, &fortran)) return -1;
                        have_fortran = 1;
                } else if (!strcmp(key, "shape")) {
                        if (parse_shape(h, a)) return -1;
                        have_shape = 1;
                } else {
                        snprintf(h->msg, h->msglen, "%s: unexpected key '%s' in the .npy header", h->path, key);
                        return -1;
                }
                if (accept(h, ',')) continue;
                if (accept(h, '}')) break;
                return bad(h, "expected ',' or '}'");
        }
        skip_ws(h);
        while (h->i < h->len && h->s[h->i] == 0) h->i++;       /* some writers pad with NULs */
        if (h->i != h->len) return bad(h, "text after the closing '}'");
        if (!have_descr || !have_fortran || !have_shape) {
                snprintf(h->msg, h->msglen, "%s: .npy header lacks '%s'", h->path,
                         !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
                return -1;
        }
        if (fortran) {
                snprintf(h->msg, h->msglen, "%s: fortran_order arrays are not supported; save a C-order "
                         "array (numpy.ascontiguousarray)", h->path);
                return -1;
        }
        return parse_descr(h, descr, a, swap);
}

/* n bytes: 0, or -1 with msg set (a short file leaves msg empty: the caller says what was cut
 * short) */
static int read_all(dt_dfile *f, void *buf, size_t n, char *msg, size_t msglen)
{
        msg[0] = 0;
        return dt_dfile_read(f, buf, n, msg, msglen) == (long)n ? 0 : -1;
}

int dt_npy_header(dt_dfile *f, const char *path, dt_array *a, int *swapp, size_t *nbytes, char *msg, size_t msglen)
{
        memset(a, 0, sizeof *a);
        int rc = -1;
        char *text = NULL;
        unsigned char pre[12];
        if (read_all(f, pre, 10, msg, msglen) || memcmp(pre, "\x93NUMPY", 6)) {
                if (!msg[0]) snprintf(msg, msglen, "%s: not a .npy file: bad magic", path);
                goto out;
        }
        int major = pre[6];
        size_t hlen;
        if (major == 1) {
                hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        } else if (major == 2 || major == 3) {
                if (read_all(f, pre + 10, 2, msg, msglen)) {
                        if (!msg[0]) snprintf(msg, msglen, "%s: truncated: .npy preamble cut short", path);
                        goto out;
                }
                hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        } else {
                snprintf(msg, msglen, "%s: unsupported .npy version %d.%d", path, major, pre[7]);
                goto out;
        }
        if (hlen > MAX_HEADER) {
                snprintf(msg, msglen, "%s: .npy header length %zu is absurd: the file is corrupt", path, hlen);
                goto out;
        }
        text = dt_malloc(hlen + 1);
        if (read_all(f, text, hlen, msg, msglen)) {
                if (!msg[0])
                        snprintf(msg, msglen, "%s: truncated: .npy header cut short (expected %zu bytes)", path,
                                 hlen);
                goto out;
        }
        text[hlen] = 0;
        hdr h = { .s = text, .i = 0, .len = hlen, .path = path, .msg = msg, .msglen = msglen };
        int swap = 0;
        if (parse_dict(&h, a, &swap)) goto out;

        size_t count = 1, bytes;
        for (int i = 0; i < a->ndim; i++)
                if (!dt_mul_ok(count, a->dims[i], &count)) count = SIZE_MAX;
        if (!dt_mul_ok(count, dt_dtype_size[a->dtype], &bytes) || bytes > DT_DATA_MAX_BYTES) {
                snprintf(msg, msglen, "%s: .npy shape claims more than the %zu GiB limit: the header is corrupt",
                         path, DT_DATA_MAX_BYTES >> 30);
                goto out;
        }
        a->count = count;
        *nbytes = bytes;
        *swapp = swap;
        rc = 0;
out:
        free(text);
        return rc;
}

int dt_npy_read(const char *path, dt_array *a, char *msg, size_t msglen)
{
        memset(a, 0, sizeof *a);
        dt_dfile *f = dt_dfile_open(path, msg, msglen);
        if (!f) return -1;
        int rc = -1, swap;
        size_t bytes;
        if (dt_npy_header(f, path, a, &swap, &bytes, msg, msglen)) goto out;
        if (dt_dfile_read_exact(f, bytes, &a->data, msg, msglen)) goto out;
        if (dt_dfile_end(f, "array its .npy header describes", msg, msglen)) goto out;
        if (swap) dt_swap_bytes(a->data, a->count, dt_dtype_size[a->dtype]);
        rc = 0;
out:
        dt_dfile_close(f);
        if (rc) dt_array_free(a);
        return rc;
}
