/* data/csv.c - numeric CSV, plain or gzip'd: one sample per row, one column the label (or the
 * regression target), the others features; an optional header line; blank lines skipped. Every
 * field must be a plain decimal number, finite (features: as a 32-bit float); any other row is an
 * error naming FILE:LINE and the field. */
#include "data/data_int.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Lines of a data file, however long, with their true length: a NUL byte must not end (and so
 * hide) the rest of a line, as it did with gzgets. */
typedef struct lines {
        dt_dfile *f;
        char *buf;
        size_t cap, start, end, scanned;        /* buf[start, end) unused; no '\n' in [start, scanned) */
        int eof;
} lines;

/* The next line without its ending (NUL-terminated, *len bytes, which may include NULs); NULL at
 * the end of the file, or on error with *err set and msg filled. */
static char *next_line(lines *L, size_t *len, int *err, char *msg, size_t msglen)
{
        for (;;) {
                char *nl = memchr(L->buf + L->scanned, '\n', L->end - L->scanned);
                if (nl || (L->eof && L->start < L->end)) {
                        char *line = L->buf + L->start;
                        size_t n = nl ? (size_t)(nl - line) : L->end - L->start;
                        L->start = L->scanned = nl ? (size_t)(nl - L->buf) + 1 : L->end;
                        line[n] = 0;    /* over the '\n', or the byte kept free after the data */
                        while (n && line[n - 1] == '\r')
                                line[--n] = 0;
                        *len = n;
                        return line;
                }
                if (L->eof) return NULL;
                memmove(L->buf, L->buf + L->start, L->end - L->start);
                L->end -= L->start;
                L->scanned = L->end;
                L->start = 0;
                if (L->cap - L->end < 65536) {
                        L->cap *= 2;
                        L->buf = dt_realloc(L->buf, L->cap);
                }
                long k = dt_dfile_read(L->f, L->buf + L->end, L->cap - L->end - 1, msg, msglen);
                if (k < 0) {
                        *err = 1;
                        return NULL;
                }
                L->end += (size_t)k;
                L->eof = k == 0;
        }
}

/* The end of a plain decimal number at s ([+-] digits [. digits] [(e|E) [+-] digits], with a digit
 * before the exponent), or s itself when there is none. strtod alone would also take hex floats
 * (0x1p3), inf, infinity and nan. */
static const char *decimal_end(const char *s)
{
        const char *p = s;
        int digits = 0;
        if (*p == '+' || *p == '-') p++;
        for (; isdigit((unsigned char)*p); p++) digits++;
        if (*p == '.')
                for (p++; isdigit((unsigned char)*p); p++) digits++;
        if (!digits) return s;
        if (*p == 'e' || *p == 'E') {
                const char *q = p + 1;
                if (*q == '+' || *q == '-') q++;
                if (isdigit((unsigned char)*q)) {
                        while (isdigit((unsigned char)*q)) q++;
                        p = q;
                }
        }
        return p;
}

/* A field for a message: at most 40 bytes, control characters replaced. */
static const char *shown(const char *p, size_t n, char *buf, size_t len)
{
        size_t k = 0;
        for (size_t i = 0; i < n && i < 40 && k + 4 < len; i++)
                buf[k++] = ((unsigned char)p[i] < 32 || p[i] == 127) ? '?' : p[i];
        if (n > 40 && k + 4 < len) {
                memcpy(buf + k, "...", 3);
                k += 3;
        }
        buf[k] = 0;
        return buf;
}

static int blank(const char *s)
{
        while (*s && isspace((unsigned char)*s))
                s++;
        return *s == 0;
}

static int count_fields(const char *s)
{
        int n = 1;
        for (; *s; s++)
                n += *s == ',';
        return n;
}

/* Appends to a growing array of elements of size es, doubling with overflow checks. */
static void push(void **arr, size_t *cap, size_t n, size_t es, const void *v)
{
        if (n == *cap) {
                size_t bytes;
                *cap = *cap ? 2 * *cap : 1024;
                DT_ASSERT(dt_mul_ok(*cap, es, &bytes));
                *arr = dt_realloc(*arr, bytes);
        }
        memcpy((char *)*arr + n * es, v, es);
}

/* The rows read so far: their shape (set by the first), the label column, and the growing feature
 * and label arrays. */
typedef struct csv_rows {
        const char *path;
        int label_column, header;
        int ncols, lc;                  /* fields per row; the label's column, counted from 0 */
        long first_line;                /* the line that set ncols */
        float *xs;                      /* (rows, ncols - 1) */
        double *ys;                     /* (rows) */
        size_t xcap, ycap, xn, rows;
} csv_rows;

/* Checks a row's field count: the first row sets the shape and places the label column, every
 * other must match it. -1 with msg set when not. */
static int row_shape(csv_rows *c, const char *line, long lineno, char *msg, size_t msglen)
{
        int nf = count_fields(line);
        if (c->ncols) {
                if (nf == c->ncols) return 0;
                snprintf(msg, msglen, "%s:%ld: expected %d fields like line %ld, got %d",
                         c->path, lineno, c->ncols, c->first_line, nf);
                return -1;
        }
        c->ncols = nf;
        c->first_line = lineno;
        c->lc = c->label_column < 0 ? c->ncols + c->label_column : c->label_column;
        if (c->ncols < 2) {
                snprintf(msg, msglen, "%s:%ld: a row needs a label and at least one feature, "
                         "got %d field", c->path, lineno, c->ncols);
                return -1;
        }
        if (c->lc < 0 || c->lc >= c->ncols) {
                snprintf(msg, msglen, "%s:%ld: label column %d is outside the %d columns",
                         c->path, lineno, c->label_column, c->ncols);
                return -1;
        }
        return 0;
}

/* Parses a row's fields into the arrays: each a plain decimal number, finite (features: as a
 * 32-bit float). -1 with msg naming the field when not. */
static int parse_row(csv_rows *c, char *line, long lineno, char *msg, size_t msglen)
{
        char b[64];
        char *p = line;
        for (int f = 0; f < c->ncols; f++) {
                while (*p == ' ' || *p == '\t')
                        p++;
                const char *dend = decimal_end(p);
                char *end = p;
                errno = 0;
                double v = dend > p ? strtod(p, &end) : 0;
                char *q = end;
                while (*q == ' ' || *q == '\t')
                        q++;
                if (end == p || end != dend || (*q != ',' && *q != 0)) {
                        snprintf(msg, msglen, "%s:%ld: field %d: expected a decimal number, got '%s'%s",
                                 c->path, lineno, f + 1, shown(p, strcspn(p, ","), b, sizeof b),
                                 c->rows == 0 && !c->header ? "; if the first line names the columns, set "
                                                              "header: true in the source" : "");
                        return -1;
                }
                if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0) ||
                    (f != c->lc && fabs(v) > FLT_MAX)) {
                        snprintf(msg, msglen, "%s:%ld: field %d: '%s' is not a finite %s", c->path, lineno,
                                 f + 1, shown(p, (size_t)(end - p), b, sizeof b),
                                 f != c->lc ? "32-bit float" : "number");
                        return -1;
                }
                if (f == c->lc) {
                        push((void **)&c->ys, &c->ycap, c->rows, sizeof *c->ys, &v);
                } else {
                        float fv = (float)v;
                        push((void **)&c->xs, &c->xcap, c->xn++, sizeof *c->xs, &fv);
                }
                p = *q ? q + 1 : q;
        }
        return 0;
}

int dt_csv_read(const char *path, int label_column, int header, long limit, dt_array *x,
                dt_array *y, char *msg, size_t msglen)
{
        memset(x, 0, sizeof *x);
        memset(y, 0, sizeof *y);
        dt_dfile *df = dt_dfile_open(path, msg, msglen);
        if (!df) return -1;
        lines L = { .f = df, .cap = 1 << 20 };
        L.buf = dt_malloc(L.cap);
        csv_rows c = { .path = path, .label_column = label_column, .header = header };
        size_t len;
        int rc = -1, err = 0;
        /* with a limit the rest of the file is not read, so neither checked */
        for (long lineno = 1; limit <= 0 || (long)c.rows < limit; lineno++) {
                char *line = next_line(&L, &len, &err, msg, msglen);
                if (!line) break;
                if (header && lineno == 1) continue;
                if (strlen(line) != len) {
                        snprintf(msg, msglen, "%s:%ld: a NUL byte at column %zu: not a row of numbers", path,
                                 lineno, strlen(line) + 1);
                        goto out;
                }
                if (blank(line)) continue;
                if (row_shape(&c, line, lineno, msg, msglen) || parse_row(&c, line, lineno, msg, msglen)) goto out;
                c.rows++;
        }
        if (err) goto out;
        if (!c.rows) {
                snprintf(msg, msglen, "%s: no data rows", path);
                goto out;
        }
        x->ndim = 2;
        x->dims[0] = c.rows;
        x->dims[1] = (size_t)c.ncols - 1;
        x->count = c.xn;
        x->dtype = DT_DTYPE_F32;
        x->data = c.xs;
        y->ndim = 1;
        y->dims[0] = c.rows;
        y->count = c.rows;
        y->dtype = DT_DTYPE_F64;
        y->data = c.ys;
        c.xs = NULL;
        c.ys = NULL;
        rc = 0;
out:
        free(L.buf);
        free(c.xs);
        free(c.ys);
        dt_dfile_close(df);
        return rc;
}

/* ---- the binary cache of a CSV source (data/cache.c) ---- */

typedef struct csv_src {
        const char *path;
        int label_column, header;
        long limit;
} csv_src;

/* a version 1 .npy header for a C-order array of 'descr' */
static size_t npy_header(unsigned char *h, const char *descr, const size_t *dims, int nd)
{
        char d[160];
        int k = snprintf(d, sizeof d, "{'descr': '%s', 'fortran_order': False, 'shape': (%zu,", descr, dims[0]);
        if (nd == 2) k += snprintf(d + k, sizeof d - (size_t)k, " %zu", dims[1]);
        k += snprintf(d + k, sizeof d - (size_t)k, "), }");
        size_t total = (10 + (size_t)k + 1 + 63) / 64 * 64, hl = total - 10;
        memcpy(h, "\x93NUMPY\x01\x00", 8);
        h[8] = (unsigned char)(hl & 0xff);
        h[9] = (unsigned char)(hl >> 8);
        memcpy(h + 10, d, (size_t)k);
        memset(h + 10 + k, ' ', hl - (size_t)k - 1);
        h[total - 1] = '\n';
        return total;
}

static int csv_fill(void *ud, dt_cache_sink *s, char *msg, size_t msglen)
{
        const csv_src *c = ud;
        dt_array x, y;
        if (dt_csv_read(c->path, c->label_column, c->header, c->limit, &x, &y, msg, msglen)) return -1;
        unsigned char h[256];
        size_t xd[2] = { x.dims[0], x.ndim > 1 ? x.dims[1] : 1 }, yd[1] = { y.dims[0] };
        int rc = 0;
        size_t hl = npy_header(h, "<f4", xd, 2);
        if (dt_cache_put(s, h, hl) || dt_cache_put(s, x.data, x.count * sizeof(float))) rc = -1;
        hl = npy_header(h, "<f8", yd, 1);
        if (!rc && (dt_cache_put(s, h, hl) || dt_cache_put(s, y.data, y.count * sizeof(double)))) rc = -1;
        if (rc) snprintf(msg, msglen, "%s: cannot write its cache: %s", c->path, strerror(errno));
        dt_array_free(&x);
        dt_array_free(&y);
        return rc;
}

int dt_csv_cache(const char *path, int label_column, int header, long limit, const char *cache_dir, char *out,
                 size_t outlen, long long *offset, char *msg, size_t msglen)
{
        csv_src c = { path, label_column, header, limit };
        char tag[96];
        snprintf(tag, sizeof tag, "csv:%d:%d:%ld", label_column, header, limit);
        return dt_cache_get_built(path, tag, cache_dir, csv_fill, &c, out, outlen, offset, msg, msglen);
}
