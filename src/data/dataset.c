/* data/dataset.c - loads a data source whole into memory as normalised floats: finds the files,
 * dispatches on the format, checks samples against the model input, labels against the classes
 * and every value for NaN and Inf, applies 'limit'. Errors are "FILE: what" in msg (a sample named
 * by its 0-based index); nothing here exits. */
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const dt_format_names[] = { "idx", "csv", "npy", "synthetic", "text", NULL };
const char *const dt_sequence_names[] = { "none", "rows", NULL };
const char *const dt_text_part_names[] = { "train", "holdout", NULL };

const size_t dt_dtype_size[DT_DTYPE_COUNT] = {
        [DT_DTYPE_U8] = 1, [DT_DTYPE_I8] = 1, [DT_DTYPE_I16] = 2, [DT_DTYPE_I32] = 4,
        [DT_DTYPE_I64] = 8, [DT_DTYPE_F32] = 4, [DT_DTYPE_F64] = 8,
};

#define SYSTEM_DATA_DIR "/usr/share/datasets"

double dt_array_get(const dt_array *a, size_t i)
{
        switch (a->dtype) {
        case DT_DTYPE_U8: return ((const uint8_t *)a->data)[i];
        case DT_DTYPE_I8: return ((const int8_t *)a->data)[i];
        case DT_DTYPE_I16: return ((const int16_t *)a->data)[i];
        case DT_DTYPE_I32: return ((const int32_t *)a->data)[i];
        case DT_DTYPE_I64: return (double)((const int64_t *)a->data)[i];
        case DT_DTYPE_F32: return ((const float *)a->data)[i];
        case DT_DTYPE_F64: return ((const double *)a->data)[i];
        default: DT_ASSERT(0 && "bad dtype");
        }
        return 0;
}

void dt_array_free(dt_array *a)
{
        free(a->data);
        memset(a, 0, sizeof *a);
}

/* ---- finding files ---- */

/* a readable regular file, or with dirs a readable directory too */
static int readable(const char *path, int dirs)
{
        struct stat st;
        return stat(path, &st) == 0 && (S_ISREG(st.st_mode) || (dirs && S_ISDIR(st.st_mode))) &&
               access(path, R_OK) == 0;
}

static int try_in(const char *dir, size_t dirlen, const char *rel, char *out, size_t outlen, int dirs)
{
        if (!dirlen) return -1;
        int k = snprintf(out, outlen, "%.*s/%s", (int)dirlen, dir, rel);
        if (k < 0 || (size_t)k >= outlen) return -1;
        return readable(out, dirs) ? 0 : -1;
}

static int resolve(const char *dir, const char *rel, char *out, size_t outlen, int dirs)
{
        if (!rel || !*rel || !outlen) return -1;
        if (rel[0] == '/') {
                if (strlen(rel) >= outlen || !readable(rel, dirs)) return -1;
                strcpy(out, rel);
                return 0;
        }
        if (!dir || !*dir) dir = ".";
        if (!try_in(dir, strlen(dir), rel, out, outlen, dirs)) return 0;
        const char *env = getenv("DTRAIN_DATA_PATH");
        for (const char *p = env; p && *p;) {
                size_t n = strcspn(p, ":");
                if (!try_in(p, n, rel, out, outlen, dirs)) return 0;  /* empty entries are skipped */
                p += n;
                if (*p == ':') p++;
        }
        if (!try_in(SYSTEM_DATA_DIR, strlen(SYSTEM_DATA_DIR), rel, out, outlen, dirs)) return 0;
        if (outlen) out[0] = 0;
        return -1;
}

int dt_data_resolve(const char *dir, const char *rel, char *out, size_t outlen)
{
        return resolve(dir, rel, out, outlen, 0);
}

int dt_data_resolve_any(const char *dir, const char *rel, char *out, size_t outlen)
{
        return resolve(dir, rel, out, outlen, 1);
}

/* The spec already resolved paths it could find; a relative path left as written gets one more
 * search from the working directory, so hand-made specs (tests) work too. */
static int locate(const char *path, char *out, size_t outlen, int dirs, char *msg, size_t msglen)
{
        if (!resolve(".", path, out, outlen, dirs)) return 0;
        if (path[0] == '/') {
                snprintf(msg, msglen, "cannot find data file '%s' (%s)", path,
                         access(path, F_OK) ? strerror(errno) : dirs ? "not a readable file or directory"
                                                                 : "not a readable file");
        } else {
                const char *env = getenv("DTRAIN_DATA_PATH");
                snprintf(msg, msglen, "cannot find data file '%s' (looked in: the model file's directory, "
                         "$DTRAIN_DATA_PATH%s%s, %s)", path, env && *env ? "=" : " (unset)",
                         env && *env ? env : "", SYSTEM_DATA_DIR);
        }
        return -1;
}

int dt_dataset_missing(const dt_source_spec *src)
{
        char buf[DT_PATH_MAX];
        if (src->format == DT_FMT_SYNTHETIC) return 0;
        if (resolve(".", src->images, buf, sizeof buf, src->format == DT_FMT_TEXT)) return 1;
        if (src->format != DT_FMT_CSV && src->format != DT_FMT_TEXT &&
            dt_data_resolve(".", src->labels, buf, sizeof buf))
                return 2;
        return 0;
}

/* ---- loading ---- */

static const char *dims_str(const size_t *d, int n, char *buf, size_t len)
{
        size_t k = (size_t)snprintf(buf, len, "(");
        for (int i = 0; i < n && k < len; i++)
                k += (size_t)snprintf(buf + k, len - k, i ? ",%zu" : "%zu", d[i]);
        if (k < len) snprintf(buf + k, len - k, ")");
        return buf;
}

/* Labels: integers in [0, classes). classes comes from the spec, else from the data; it must not
 * exceed what the model outputs (classes_needed). */
static int take_labels(dt_dataset *ds, const dt_array *y, const char *file, const dt_data_spec *data,
                       int classes_needed, char *msg, size_t msglen)
{
        long n = ds->n;
        size_t per = y->count / y->dims[0];
        if (per != 1) {
                char b[128];
                snprintf(msg, msglen, "%s: labels must be one integer per sample, got shape %s", file,
                         dims_str(y->dims, y->ndim, b, sizeof b));
                return -1;
        }
        ds->label = dt_malloc((size_t)(n ? n : 1) * sizeof *ds->label);
        long max = -1;
        for (long i = 0; i < n; i++) {
                double v = dt_array_get(y, (size_t)i);
                if (!(v >= 0) || v != floor(v) || v > INT32_MAX - 1) {
                        snprintf(msg, msglen, "%s: sample %ld: label %g is not a class index (an integer >= 0)",
                                 file, i, v);
                        return -1;
                }
                if (data->classes > 0 && v >= data->classes) {
                        snprintf(msg, msglen, "%s: sample %ld: label %ld is out of range for %d classes "
                                 "(labels must be in [0, %d))", file, i, (long)v, data->classes, data->classes);
                        return -1;
                }
                ds->label[i] = (int32_t)v;
                if (ds->label[i] > max) max = ds->label[i];
        }
        ds->classes = data->classes > 0 ? data->classes : (int)(max + 1);
        if (classes_needed > 0 && ds->classes > classes_needed) {
                snprintf(msg, msglen, "%s: the data has %d classes but the model outputs %d", file,
                         ds->classes, classes_needed);
                return -1;
        }
        return 0;
}

/* The index of the first value of x[0, n) that is not finite, or n. One NaN in the data would
 * otherwise surface only as "non-finite loss at step N", far from its cause. */
static size_t first_nonfinite(const float *x, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!isfinite(x[i])) return i;
        return n;
}

/* Names value i of a dataset with per values per sample: non-finite in the file itself (raw), or
 * finite there and overflowing a float only after 'after'. */
static void nonfinite_msg(char *msg, size_t msglen, const char *file, const char *what, size_t i, size_t per,
                          double raw, const char *after)
{
        if (!isfinite(raw))
                snprintf(msg, msglen, "%s: sample %zu: %s %zu of %zu is %s; data must be finite numbers", file,
                         i / per, what, i % per, per, isnan(raw) ? "nan" : raw > 0 ? "inf" : "-inf");
        else
                snprintf(msg, msglen, "%s: sample %zu: %s %zu of %zu (%g) is not finite as a 32-bit float%s%s",
                         file, i / per, what, i % per, per, raw, after ? " after " : "", after ? after : "");
}

static int take_targets(dt_dataset *ds, const dt_array *y, const char *file, char *msg, size_t msglen)
{
        size_t per = y->count / y->dims[0], total;
        if (per > INT32_MAX || !dt_mul_ok(per, (size_t)ds->n, &total)) {
                snprintf(msg, msglen, "%s: targets too large", file);
                return -1;
        }
        ds->tdim = (int)per;
        ds->target = dt_falloc(total);
        for (size_t i = 0; i < total; i++)
                ds->target[i] = (float)dt_array_get(y, i);
        size_t bad = first_nonfinite(ds->target, total);
        if (bad < total) {
                nonfinite_msg(msg, msglen, file, "target", bad, per, dt_array_get(y, bad), NULL);
                return -1;
        }
        return 0;
}

/* x' = (x * scale - mean) / std; a zeroed spec means the identity, and IDX bytes default to
 * scale 1/255 (the spec's documented default) when no scale was given. */
static void normalise(float *dst, const dt_array *x, size_t count, const dt_data_spec *data, int idx_bytes)
{
        double scale = data->scale, mean = data->mean, std = data->std;
        if (!data->scale_given) scale = idx_bytes ? 1.0 / 255.0 : (scale != 0 ? scale : 1.0);
        if (std == 0) std = 1.0;
        for (size_t i = 0; i < count; i++)
                dst[i] = (float)((dt_array_get(x, i) * scale - mean) / std);
}

static void normalise_inplace(float *x, size_t count, const dt_data_spec *data)
{
        double scale = data->scale_given || data->scale != 0 ? data->scale : 1.0;
        double std = data->std != 0 ? data->std : 1.0;
        if (scale == 1.0 && data->mean == 0.0 && std == 1.0) return;
        for (size_t i = 0; i < count; i++)
                x[i] = (float)((x[i] * scale - data->mean) / std);
}

static int load_synthetic(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                          const dt_shape *input, int classes_needed)
{
        int classes = data->classes > 0 ? data->classes : classes_needed > 0 ? classes_needed : 2;
        /* the test source draws other samples from the same blobs as the training source */
        dt_dataset_synthetic_stream(ds, src, input, classes, src == &data->test ? 1 : 0);
        if (src->limit > 0 && src->limit < ds->n) ds->n = src->limit;
        normalise_inplace(ds->x, (size_t)ds->n * ds->dim, data);
        if (classes_needed == 0) {      /* regression on blobs: one-hot targets */
                ds->tdim = classes;
                ds->target = dt_falloc((size_t)(ds->n ? ds->n : 1) * (size_t)classes);
                for (long i = 0; i < ds->n; i++)
                        ds->target[(size_t)i * (size_t)classes + (size_t)ds->label[i]] = 1.0f;
        }
        return 0;
}

/* sequence: rows - an image (H,W), or (1,H,W), is H steps of W features: sample shape (H,W),
 * which the model's input must be (a recurrent layer reads (T,F)). */
static int sequence_rows(dt_dataset *ds, const dt_array *x, const char *file, const dt_shape *input,
                         char *msg, size_t msglen)
{
        char xb[128], ib[64];
        int nd = x->ndim - 1;
        const size_t *d = x->dims + 1;
        if (nd == 3 && d[0] == 1) {
                nd = 2;
                d++;
        }
        if (nd != 2 || d[0] > INT32_MAX || d[1] > INT32_MAX) {
                snprintf(msg, msglen, "%s: 'sequence: rows' needs images of shape (H,W) or (1,H,W), got %s",
                         file, dims_str(x->dims + 1, x->ndim - 1, xb, sizeof xb));
                return -1;
        }
        ds->shape.n = 2;
        ds->shape.d[0] = (int)d[0];
        ds->shape.d[1] = (int)d[1];
        if (!dt_shape_eq(&ds->shape, input)) {
                snprintf(msg, msglen, "%s: 'sequence: rows' makes samples of shape %s (%d steps of %d features) "
                         "but the model input is %s; use input: [%d, %d]", file,
                         dt_shape_str(&ds->shape, xb, sizeof xb), ds->shape.d[0], ds->shape.d[1],
                         dt_shape_str(input, ib, sizeof ib), ds->shape.d[0], ds->shape.d[1]);
                return -1;
        }
        return 0;
}

/* classes_needed: the model's class count for a classification loss (labels must fit), or 0 for
 * a regression loss (the label file holds float targets). */
int dt_dataset_load(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                    const dt_shape *input, int classes_needed, char *msg, size_t msglen)
{
        memset(ds, 0, sizeof *ds);
        char sb[128];
        size_t dim = dt_shape_size(input);
        if (!src->present) {
                snprintf(msg, msglen, "no data source given");
                return -1;
        }
        if (!dim) {
                snprintf(msg, msglen, "model input %s is not a valid shape", dt_shape_str(input, sb, sizeof sb));
                return -1;
        }
        if (src->format == DT_FMT_SYNTHETIC) {
                int r = load_synthetic(ds, src, data, input, classes_needed);
                ds->label_rows = 1;
                return r;
        }

        char xpath[DT_PATH_MAX], ypath[DT_PATH_MAX] = "";
        dt_array x = {0}, y = {0};
        int rc = -1;
        if (locate(src->images, xpath, sizeof xpath, src->format == DT_FMT_TEXT, msg, msglen)) return -1;
        if (src->format == DT_FMT_TEXT)
                return dt_text_load(ds, xpath, src, data, input, classes_needed, msg, msglen);
        if (src->format != DT_FMT_CSV && locate(src->labels, ypath, sizeof ypath, 0, msg, msglen)) return -1;
        switch (src->format) {
        case DT_FMT_IDX:
                if (dt_idx_read(xpath, &x, msg, msglen) || dt_idx_read(ypath, &y, msg, msglen)) goto out;
                break;
        case DT_FMT_NPY:
                if (dt_npy_read(xpath, &x, msg, msglen) || dt_npy_read(ypath, &y, msg, msglen)) goto out;
                break;
        case DT_FMT_CSV:
                if (dt_csv_read(xpath, src->label_column, src->header, src->limit, &x, &y, msg, msglen))
                        goto out;
                strcpy(ypath, xpath);
                break;
        default:
                snprintf(msg, msglen, "unknown data format %d", (int)src->format);
                goto out;
        }

        if (x.ndim < 1 || x.dims[0] == 0) {
                snprintf(msg, msglen, "%s: no samples", xpath);
                goto out;
        }
        if (y.ndim < 1 || y.dims[0] != x.dims[0]) {
                snprintf(msg, msglen, "%s has %zu samples but %s has %zu labels", xpath, x.dims[0], ypath,
                         y.ndim ? y.dims[0] : (size_t)0);
                goto out;
        }
        size_t per = x.count / x.dims[0];
        if (per != dim) {
                char xb[128];
                snprintf(msg, msglen, "%s: samples have shape %s (%zu values) but the model input %s needs %zu",
                         xpath, dims_str(x.dims + 1, x.ndim - 1, xb, sizeof xb), per,
                         dt_shape_str(input, sb, sizeof sb), dim);
                goto out;
        }
        ds->n = (long)x.dims[0];
        if (src->limit > 0 && src->limit < ds->n) ds->n = src->limit;
        ds->dim = dim;
        ds->label_rows = 1;
        /* keep the file's sample shape when it fits a dt_shape, else the model's (same size) */
        if (src->sequence == DT_SEQ_ROWS) {
                if (sequence_rows(ds, &x, xpath, input, msg, msglen)) goto out;
        } else if (x.ndim - 1 >= 1 && x.ndim - 1 <= DT_MAX_DIMS) {
                ds->shape.n = x.ndim - 1;
                for (int i = 1; i < x.ndim; i++) {
                        if (x.dims[i] > INT32_MAX) { ds->shape = *input; break; }
                        ds->shape.d[i - 1] = (int)x.dims[i];
                }
        } else {
                ds->shape = *input;
        }
        ds->x = dt_falloc((size_t)ds->n * dim);
        normalise(ds->x, &x, (size_t)ds->n * dim, data, src->format == DT_FMT_IDX && x.dtype == DT_DTYPE_U8);
        size_t bad = first_nonfinite(ds->x, (size_t)ds->n * dim);
        if (bad < (size_t)ds->n * dim) {
                nonfinite_msg(msg, msglen, xpath, "value", bad, dim, dt_array_get(&x, bad),
                              "normalisation (x * scale - mean) / std");
                goto out;
        }
        if (classes_needed > 0) {
                if (take_labels(ds, &y, ypath, data, classes_needed, msg, msglen)) goto out;
        } else {
                if (take_targets(ds, &y, ypath, msg, msglen)) goto out;
        }
        rc = 0;
out:
        dt_array_free(&x);
        dt_array_free(&y);
        if (rc) dt_dataset_free(ds);
        return rc;
}

void dt_dataset_free(dt_dataset *ds)
{
        free(ds->x);
        free(ds->label);
        free(ds->target);
        memset(ds, 0, sizeof *ds);
}

void dt_dataset_gather(const dt_dataset *ds, const long *idx, int B, float *x, int32_t *y, float *t)
{
        size_t lr = ds->label_rows > 0 ? (size_t)ds->label_rows : 1;
        for (int b = 0; b < B; b++) {
                long i = idx[b];
                DT_ASSERT(i >= 0 && i < ds->n);
                if (x) memcpy(x + (size_t)b * ds->dim, ds->x + (size_t)i * ds->dim, ds->dim * sizeof *x);
                if (y && ds->label) memcpy(y + (size_t)b * lr, ds->label + (size_t)i * lr, lr * sizeof *y);
                if (t && ds->target)
                        memcpy(t + (size_t)b * (size_t)ds->tdim, ds->target + (size_t)i * (size_t)ds->tdim,
                               (size_t)ds->tdim * sizeof *t);
        }
}
