/* data/filelist.c - a source's files: one file, a list of shards, or a glob, each found as
 * datafind.c finds one; and the label files read into one array to match. */
#include "data/data_int.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"

/* ---- file lists: one file, a list of shards, or a glob ---- */

static int has_glob(const char *p)
{
        return strpbrk(p, "*?[") != NULL;
}

static void fl_add(dt_flist *l, const char *p)
{
        if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 8;
                l->v = dt_realloc(l->v, (size_t)l->cap * sizeof *l->v);
        }
        l->v[l->n++] = dt_strdup(p);
}

void dt_flist_free(dt_flist *l)
{
        for (int i = 0; i < l->n; i++) free(l->v[i]);
        free(l->v);
        memset(l, 0, sizeof *l);
}

/* A glob relative to the spec's directory, then $DTRAIN_DATA_PATH's entries, then the system
 * directory: the first place with matches wins; matches sorted (glob's own order). */
static int expand_glob(const char *dir, const char *pat, dt_flist *out, char *msg, size_t msglen)
{
        const char *places[64];
        char buf[64][DT_PATH_MAX];
        int np = 0;
        if (pat[0] == '/') {
                places[np++] = "";
        } else {
                places[np++] = dir && *dir ? dir : ".";
                const char *env = getenv("DTRAIN_DATA_PATH");
                for (const char *p = env; p && *p && np < 62;) {
                        size_t n = strcspn(p, ":");
                        if (n && n < DT_PATH_MAX) {
                                memcpy(buf[np], p, n);
                                buf[np][n] = 0;
                                places[np] = buf[np];
                                np++;
                        }
                        p += n;
                        if (*p == ':') p++;
                }
                places[np++] = SYSTEM_DATA_DIR;
        }
        for (int k = 0; k < np; k++) {
                char full[2 * DT_PATH_MAX];
                snprintf(full, sizeof full, "%s%s%s", places[k], *places[k] ? "/" : "", pat);
                glob_t g;
                int r = glob(full, GLOB_ERR, NULL, &g);
                if (r == 0) {
                        for (size_t i = 0; i < g.gl_pathc; i++)
                                if (dt_data_readable(g.gl_pathv[i], 0)) fl_add(out, g.gl_pathv[i]);
                        globfree(&g);
                        if (out->n) return 0;
                } else if (r != GLOB_NOMATCH) {
                        globfree(&g);
                }
        }
        snprintf(msg, msglen, "cannot find data file '%s' (no file matches the pattern; looked in: the model "
                 "file's directory, $DTRAIN_DATA_PATH, %s)", pat, SYSTEM_DATA_DIR);
        return -1;
}

/* The files of one side (x or y) of a source: each entry located, or expanded when a glob. */
int dt_data_file_list(const char *one, char *const *many, int nmany, const char *dir, dt_flist *out, char *msg,
                     size_t msglen)
{
        const char *single[1] = { one };
        const char *const *v = nmany ? (const char *const *)many : single;
        int n = nmany ? nmany : 1;
        for (int i = 0; i < n; i++) {
                char path[DT_PATH_MAX];
                if (has_glob(v[i]) && !dt_data_readable(v[i], 0)) {
                        if (expand_glob(dir, v[i], out, msg, msglen)) return -1;
                        continue;
                }
                if (dt_data_locate(v[i], dir, path, sizeof path, 0, msg, msglen)) return -1;
                fl_add(out, path);
        }
        return 0;
}

/* The labels (or targets) of every y file, one after another, as one array; file i must hold
 * counts[i] samples, as x file i does. */
int dt_data_read_ys(const dt_flist *xl, const dt_flist *yl, dt_data_format fmt, const long *counts, dt_array *y,
                   char *msg, size_t msglen)
{
        memset(y, 0, sizeof *y);
        long total = 0;
        for (int k = 0; k < yl->n; k++) total += counts[k];
        size_t per0 = 0;
        for (int i = 0; i < yl->n; i++) {
                dt_array a;
                if ((fmt == DT_FMT_IDX ? dt_idx_read(yl->v[i], &a, msg, msglen) : dt_npy_read(yl->v[i], &a, msg, msglen)))
                        return -1;
                if (a.ndim < 1 || (long)a.dims[0] != counts[i]) {
                        snprintf(msg, msglen, "%s has %ld samples but %s has %zu labels", xl->v[i], counts[i],
                                 yl->v[i], a.ndim ? a.dims[0] : (size_t)0);
                        dt_array_free(&a);
                        return -1;
                }
                if (yl->n == 1) {
                        *y = a;
                        return 0;
                }
                size_t per = a.count / a.dims[0];
                if (i == 0) {           /* shards: one array of doubles (exact for any label type) */
                        per0 = per;
                        y->ndim = a.ndim;
                        memcpy(y->dims, a.dims, sizeof y->dims);
                        y->dims[0] = 0;
                        y->dtype = DT_DTYPE_F64;
                        y->data = dt_malloc((size_t)total * per * sizeof(double));
                } else if (per != per0) {
                        snprintf(msg, msglen, "%s: %zu values per sample but %s has %zu: the label files of one "
                                 "dataset must agree", yl->v[i], per, yl->v[0], per0);
                        dt_array_free(&a);
                        return -1;
                }
                double *dst = (double *)y->data + y->count;
                for (size_t k = 0; k < a.count; k++) dst[k] = dt_array_get(&a, k);
                y->count += a.count;
                y->dims[0] += a.dims[0];
                dt_array_free(&a);
        }
        return 0;
}

