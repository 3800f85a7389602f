/* data/csv.c - numeric CSV, plain or gzip'd: one sample per row, one column the label (or the
 * regression target), the others features; an optional header line; blank lines skipped. Every
 * field goes through strtod with full checks; errors name FILE:LINE and the field. */
#include "data/data.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* One line, however long, without its line ending; NULL at the end of the file or on error. */
static char *get_line(gzFile gz, char **buf, size_t *cap)
{
        size_t len = 0;
        for (;;) {
                if (*cap - len < 2) {
                        *cap *= 2;
                        *buf = dt_realloc(*buf, *cap);
                }
                size_t room = DT_MIN(*cap - len, (size_t)INT_MAX);  /* gzgets takes an int */
                if (!gzgets(gz, *buf + len, (int)room)) {
                        if (!len) return NULL;
                        break;
                }
                len += strlen(*buf + len);
                if (len && (*buf)[len - 1] == '\n') break;
                if (gzeof(gz)) break;
        }
        while (len && ((*buf)[len - 1] == '\n' || (*buf)[len - 1] == '\r'))
                (*buf)[--len] = 0;
        return *buf;
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

int dt_csv_read(const char *path, int label_column, int header, long limit, dt_array *x,
                dt_array *y, char *msg, size_t msglen)
{
        memset(x, 0, sizeof *x);
        memset(y, 0, sizeof *y);
        gzFile gz = gzopen(path, "rb");
        if (!gz) {
                snprintf(msg, msglen, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
                return -1;
        }
        gzbuffer(gz, 1 << 20);
        size_t cap = 4096, xcap = 0, ycap = 0, xn = 0, rows = 0;
        char *line = dt_malloc(cap);
        float *xs = NULL;
        double *ys = NULL;
        int ncols = 0, lc = 0, rc = -1;
        long first_line = 0;
        for (long lineno = 1; limit <= 0 || (long)rows < limit; lineno++) {
                if (!get_line(gz, &line, &cap)) break;
                if ((header && lineno == 1) || blank(line)) continue;
                int nf = count_fields(line);
                if (!ncols) {
                        ncols = nf;
                        first_line = lineno;
                        lc = label_column < 0 ? ncols + label_column : label_column;
                        if (ncols < 2) {
                                snprintf(msg, msglen, "%s:%ld: a row needs a label and at least one feature, "
                                         "got %d field", path, lineno, ncols);
                                goto out;
                        }
                        if (lc < 0 || lc >= ncols) {
                                snprintf(msg, msglen, "%s:%ld: label column %d is outside the %d columns",
                                         path, lineno, label_column, ncols);
                                goto out;
                        }
                } else if (nf != ncols) {
                        snprintf(msg, msglen, "%s:%ld: expected %d fields like line %ld, got %d",
                                 path, lineno, ncols, first_line, nf);
                        goto out;
                }
                char *p = line;
                for (int f = 0; f < ncols; f++) {
                        char *end;
                        errno = 0;
                        double v = strtod(p, &end);
                        char *q = end;
                        while (*q == ' ' || *q == '\t')
                                q++;
                        if (end == p || (*q != ',' && *q != 0)) {
                                size_t k = strcspn(p, ",");
                                snprintf(msg, msglen, "%s:%ld: field %d: expected a number, got '%.*s'",
                                         path, lineno, f + 1, (int)DT_MIN(k, (size_t)40), p);
                                goto out;
                        }
                        if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) {
                                snprintf(msg, msglen, "%s:%ld: field %d: '%.*s' is not a finite number",
                                         path, lineno, f + 1, (int)(end - p), p);
                                goto out;
                        }
                        if (f == lc) {
                                push((void **)&ys, &ycap, rows, sizeof *ys, &v);
                        } else {
                                float fv = (float)v;
                                push((void **)&xs, &xcap, xn++, sizeof *xs, &fv);
                        }
                        p = *q ? q + 1 : q;
                }
                rows++;
        }
        int errnum;
        const char *why = gzerror(gz, &errnum);
        if (errnum != Z_OK && errnum != Z_STREAM_END) {
                snprintf(msg, msglen, "%s: read error: %s", path, errnum == Z_ERRNO ? strerror(errno) : why);
                goto out;
        }
        if (!rows) {
                snprintf(msg, msglen, "%s: no data rows", path);
                goto out;
        }
        x->ndim = 2;
        x->dims[0] = rows;
        x->dims[1] = (size_t)ncols - 1;
        x->count = xn;
        x->dtype = DT_DTYPE_F32;
        x->data = xs;
        y->ndim = 1;
        y->dims[0] = rows;
        y->count = rows;
        y->dtype = DT_DTYPE_F64;
        y->data = ys;
        xs = NULL;
        ys = NULL;
        rc = 0;
out:
        free(line);
        free(xs);
        free(ys);
        gzclose(gz);
        return rc;
}
