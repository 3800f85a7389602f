/* data/text.c - character-level text sources: a file, or a directory read whole in path order, cut
 * into windows of seq_len byte ids starting every 'stride' bytes (non-overlapping when stride =
 * seq_len, the default) with next-byte labels per step. The vocabulary is the sorted distinct
 * bytes of the whole text, so both parts of the split share ids. Only the part's ids are kept (a
 * byte each); dt_dataset_gather makes the windows and labels of a batch. */
#include "data/data_int.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* deeper trees are refused: a directory of text is rarely more than a few levels deep */
#define TEXT_MAX_DEPTH 64

typedef struct pathlist { char **p; size_t n, cap; } pathlist;

static void pathlist_add(pathlist *l, const char *path)
{
        if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 64;
                l->p = dt_realloc(l->p, l->cap * sizeof *l->p);
        }
        l->p[l->n++] = dt_strdup(path);
}

static void pathlist_free(pathlist *l)
{
        for (size_t i = 0; i < l->n; i++) free(l->p[i]);
        free(l->p);
        memset(l, 0, sizeof *l);
}

/* Every regular file under dir (lstat: links are skipped, so no cycles). */
static int walk(const char *dir, int depth, pathlist *l, char *msg, size_t msglen)
{
        if (depth > TEXT_MAX_DEPTH) {
                snprintf(msg, msglen, "%s: directories nested deeper than %d levels", dir, TEXT_MAX_DEPTH);
                return -1;
        }
        DIR *d = opendir(dir);
        if (!d) {
                snprintf(msg, msglen, "%s: cannot open directory: %s", dir, strerror(errno));
                return -1;
        }
        struct dirent *e;
        char p[DT_PATH_MAX];
        int rc = 0;
        while (!rc && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                int k = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                if (k < 0 || (size_t)k >= sizeof p) {
                        snprintf(msg, msglen, "%s: path too long under this directory", dir);
                        rc = -1;
                        break;
                }
                struct stat st;
                if (lstat(p, &st)) {
                        snprintf(msg, msglen, "%s: %s", p, strerror(errno));
                        rc = -1;
                } else if (S_ISDIR(st.st_mode)) {
                        rc = walk(p, depth + 1, l, msg, msglen);
                } else if (S_ISREG(st.st_mode)) {
                        pathlist_add(l, p);
                }
        }
        closedir(d);
        return rc;
}

static int path_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the whole of path to *buf (len used, cap allocated). */
static int append_file(const char *path, unsigned char **buf, size_t *len, size_t *cap, char *msg,
                       size_t msglen)
{
        FILE *f = fopen(path, "rb");
        if (!f) {
                snprintf(msg, msglen, "%s: cannot open: %s", path, strerror(errno));
                return -1;
        }
        for (;;) {
                if (*cap - *len < 65536) {
                        size_t nc = *cap ? 2 * *cap : 65536;
                        if (nc > DT_DATA_MAX_BYTES) nc = DT_DATA_MAX_BYTES;
                        if (nc - *len < 1) {
                                snprintf(msg, msglen, "%s: the text is larger than %zu bytes", path,
                                         (size_t)DT_DATA_MAX_BYTES);
                                fclose(f);
                                return -1;
                        }
                        *buf = dt_realloc(*buf, nc);
                        *cap = nc;
                }
                size_t k = fread(*buf + *len, 1, *cap - *len, f);
                *len += k;
                if (k == 0) break;
        }
        int bad = ferror(f);
        fclose(f);
        if (bad) {
                snprintf(msg, msglen, "%s: read error", path);
                return -1;
        }
        return 0;
}

int dt_text_read(const char *path, unsigned char **buf, size_t *len, char *msg, size_t msglen)
{
        *buf = NULL;
        *len = 0;
        struct stat st;
        if (stat(path, &st)) {
                snprintf(msg, msglen, "%s: %s", path, strerror(errno));
                return -1;
        }
        pathlist l = { 0 };
        if (S_ISDIR(st.st_mode)) {
                if (walk(path, 0, &l, msg, msglen)) goto fail;
                if (!l.n) {
                        snprintf(msg, msglen, "%s: no regular files in this directory", path);
                        goto fail;
                }
                qsort(l.p, l.n, sizeof *l.p, path_cmp);
        } else {
                pathlist_add(&l, path);
        }
        size_t cap = 0;
        for (size_t i = 0; i < l.n; i++)
                if (append_file(l.p[i], buf, len, &cap, msg, msglen)) goto fail;
        pathlist_free(&l);
        return 0;
fail:
        pathlist_free(&l);
        free(*buf);
        *buf = NULL;
        *len = 0;
        return -1;
}

int dt_text_load(dt_dataset *ds, const char *path, const dt_source_spec *src, const dt_data_spec *data,
                 const dt_shape *input, int classes_needed, char *msg, size_t msglen)
{
        memset(ds, 0, sizeof *ds);
        unsigned char *text;
        size_t len;
        char sb[64];
        if (dt_text_read(path, &text, &len, msg, msglen)) return -1;
        int rc = -1;
        size_t T = (size_t)src->seq_len;
        if (T == 0) {
                snprintf(msg, msglen, "%s: seq_len must be at least 1", path);
                goto out;
        }
        /* stride 0 (a spec built by hand) means seq_len: non-overlapping windows */
        size_t S = src->stride > 0 ? (size_t)src->stride : T;
        if (S > T) {
                snprintf(msg, msglen, "%s: stride %zu is larger than seq_len %zu", path, S, T);
                goto out;
        }
        if (dt_shape_size(input) != T) {
                snprintf(msg, msglen, "%s: samples are windows of seq_len %zu byte ids but the model input %s "
                         "needs %zu; set seq_len: %zu or input: [%zu]", path, T,
                         dt_shape_str(input, sb, sizeof sb), dt_shape_size(input), dt_shape_size(input), T);
                goto out;
        }

        /* the vocabulary of the whole text, so both parts (and both sources) share ids */
        int id[256], seen[256] = { 0 };
        for (size_t i = 0; i < len; i++) seen[text[i]] = 1;
        for (int c = 0; c < 256; c++) {
                id[c] = seen[c] ? ds->nvocab : -1;
                if (seen[c]) ds->vocab[ds->nvocab++] = (unsigned char)c;
        }
        if (data->classes > 0 && ds->nvocab > data->classes) {
                snprintf(msg, msglen, "%s: the text has %d distinct bytes but data.classes is %d", path,
                         ds->nvocab, data->classes);
                goto out;
        }
        ds->classes = data->classes > 0 ? data->classes : ds->nvocab;
        if (classes_needed > 0 && ds->classes > classes_needed) {
                snprintf(msg, msglen, "%s: the text has %d distinct bytes (classes) but the model outputs %d",
                         path, ds->classes, classes_needed);
                goto out;
        }
        if (classes_needed == 0) {
                snprintf(msg, msglen, "%s: text sources give next-byte class labels; use loss "
                         "softmax_cross_entropy", path);
                goto out;
        }

        /* the holdout part is the last floor(len * holdout) bytes */
        size_t hold = (size_t)((double)len * src->holdout);
        if (hold > len) hold = len;
        size_t base = src->part == DT_TEXT_HOLDOUT ? len - hold : 0;
        size_t plen = src->part == DT_TEXT_HOLDOUT ? hold : len - hold;
        /* window k: x = bytes [base + kS, base + kS + T), labels = the same shifted by one; the
         * last label byte base + kS + T must lie inside the part: kS + T + 1 <= plen */
        size_t n = plen > T ? (plen - 1 - T) / S + 1 : 0;
        if (n == 0) {
                snprintf(msg, msglen, "%s: the %s part has %zu bytes, fewer than seq_len + 1 = %zu "
                         "(text %zu bytes, holdout %g)", path, dt_text_part_names[src->part], plen, T + 1, len,
                         src->holdout);
                goto out;
        }
        if (src->limit > 0 && (size_t)src->limit < n) n = (size_t)src->limit;
        size_t total;
        if (n > (size_t)LONG_MAX || !dt_mul_ok(n, T, &total)) {
                snprintf(msg, msglen, "%s: too many windows", path);
                goto out;
        }
        ds->n = (long)n;
        ds->dim = T;
        ds->shape.n = 1;
        ds->shape.d[0] = (int)T;
        ds->label_rows = (int)T;
        /* the part's ids, one byte each (at most 256 of them): windows and their labels are made
         * per batch (dt_dataset_gather), so overlapping windows cost no memory */
        ds->stride = S;
        ds->nids = (n - 1) * S + T + 1;
        ds->ids = dt_malloc(ds->nids);
        for (size_t i = 0; i < ds->nids; i++) ds->ids[i] = (unsigned char)id[text[base + i]];
        (void)total;
        rc = 0;
out:
        free(text);
        if (rc) dt_dataset_free(ds);
        return rc;
}
