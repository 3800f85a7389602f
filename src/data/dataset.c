/* data/dataset.c - opens a data source: in memory as normalised floats, or on disk read by batch; finds the files (datafind.c, filelist.c),
 * dispatches on the format, checks samples against the model input, labels against the classes
 * and every value for NaN and Inf, applies 'limit'. Errors are "FILE: what" in msg (a sample named
 * by its 0-based index); nothing here exits. */
#include "data/bytes.h"
#include "data/data_int.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <glob.h>
#include <unistd.h>

const char *const dt_format_names[] = { "idx", "csv", "npy", "synthetic", "text", NULL };
const char *const dt_sequence_names[] = { "none", "rows", NULL };
const char *const dt_text_part_names[] = { "train", "holdout", NULL };

const size_t dt_dtype_size[DT_DTYPE_COUNT] = {
        [DT_DTYPE_U8] = 1, [DT_DTYPE_I8] = 1, [DT_DTYPE_I16] = 2, [DT_DTYPE_I32] = 4,
        [DT_DTYPE_I64] = 8, [DT_DTYPE_F32] = 4, [DT_DTYPE_F64] = 8,
};


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

/* The normalisation x' = (x * scale - mean_c) / std_c of the dataset's channels: a zeroed spec
 * means the identity, and IDX bytes default to scale 1/255 (the spec's documented default) when no
 * scale was given. Channel c holds values [c * chan_size, (c + 1) * chan_size) of a sample. */
static void set_norm(dt_dataset *ds, const dt_data_spec *data, int idx_bytes, size_t dim)
{
        double scale = data->scale;
        if (!data->scale_given) scale = idx_bytes ? 1.0 / 255.0 : (scale != 0 ? scale : 1.0);
        ds->scale = scale;
        int nc = DT_MAX(1, DT_MAX(data->nmean, data->nstd));
        ds->nchan = nc;
        ds->chan_size = dim / (size_t)nc ? dim / (size_t)nc : 1;
        for (int c = 0; c < nc; c++) {
                ds->mean_c[c] = data->nmean ? data->mean_c[data->nmean == 1 ? 0 : c] : data->mean;
                double sd = data->nstd ? data->std_c[data->nstd == 1 ? 0 : c] : data->std;
                ds->std_c[c] = sd == 0 ? 1.0 : sd;
        }
}

/* dst[j] = (raw[j] * scale - mean) / std for one channel's run of values, in double as the
 * reference formula (so a batch holds the bits a whole-dataset conversion would), one loop per
 * type so the compiler can vectorise it */
#define CONVERT_RUN(T)                                                                          \
        do {                                                                                    \
                const T *r = (const T *)raw;                                                    \
                for (size_t j = 0; j < n; j++) dst[j] = (float)(((double)r[j] * scale - mean) / std); \
        } while (0)

static void convert_run(const void *raw, dt_dtype t, size_t n, double scale, double mean, double std, float *dst)
{
        switch (t) {
        case DT_DTYPE_U8: CONVERT_RUN(uint8_t); break;
        case DT_DTYPE_I8: CONVERT_RUN(int8_t); break;
        case DT_DTYPE_I16: CONVERT_RUN(int16_t); break;
        case DT_DTYPE_I32: CONVERT_RUN(int32_t); break;
        case DT_DTYPE_I64: CONVERT_RUN(int64_t); break;
        case DT_DTYPE_F32: CONVERT_RUN(float); break;
        case DT_DTYPE_F64: CONVERT_RUN(double); break;
        default: DT_ASSERT(0 && "bad dtype");
        }
}

/* values [j0, j0 + count) of one sample (raw of type t) into dst, normalised channel by channel */
static void convert(const dt_dataset *ds, const void *raw, dt_dtype t, size_t j0, size_t count, float *dst)
{
        size_t es = dt_dtype_size[t];
        for (size_t j = 0; j < count;) {
                size_t c = ((j0 + j) / ds->chan_size) % (size_t)ds->nchan;
                size_t run = DT_MIN(count - j, ds->chan_size - (j0 + j) % ds->chan_size);
                convert_run((const char *)raw + j * es, t, run, ds->scale, ds->mean_c[c], ds->std_c[c], dst + j);
                j += run;
        }
}

static void normalise_inplace(dt_dataset *ds, const dt_data_spec *data)
{
        set_norm(ds, data, 0, ds->dim);
        if (ds->nchan == 1 && ds->scale == 1.0 && ds->mean_c[0] == 0.0 && ds->std_c[0] == 1.0) return;
        for (size_t i = 0; i < (size_t)ds->n * ds->dim; i += ds->dim)
                convert(ds, ds->x + i, DT_DTYPE_F32, 0, ds->dim, ds->x + i);
}

static int load_synthetic(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                          const dt_shape *input, int classes_needed)
{
        int classes = data->classes > 0 ? data->classes : classes_needed > 0 ? classes_needed : 2;
        /* the test source draws other samples from the same blobs as the training source */
        dt_dataset_synthetic_stream(ds, src, input, classes, src == &data->test ? 1 : 0);
        if (src->limit > 0 && src->limit < ds->n) ds->n = src->limit;
        normalise_inplace(ds, data);
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

static int load_memory(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                       const dt_shape *input, int classes_needed, char *msg, size_t msglen);
static int finish_disk(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                       int classes_needed, const dt_load_opts *lo, const char *xname, const char *yname, long n,
                       const size_t *dims, int nd, const dt_array *yp, char *msg, size_t msglen);

/* ---- the load-time scan of on-disk samples ---- */

/* Whether values of type t can turn non-finite through the normalisation: float data can hold
 * NaN/Inf; an integer type only if one of its extremes overflows (the map is monotonic). */
static int may_overflow(const dt_dataset *ds, dt_dtype t)
{
        static const double lo[DT_DTYPE_COUNT] = { 0, -128, -32768, -2147483648.0, -9223372036854775808.0, 0, 0 };
        static const double hi[DT_DTYPE_COUNT] = { 255, 127, 32767, 2147483647.0, 9223372036854775807.0, 0, 0 };
        if (t == DT_DTYPE_F32 || t == DT_DTYPE_F64) return 1;
        for (int c = 0; c < ds->nchan; c++)
                if (!isfinite((float)((lo[t] * ds->scale - ds->mean_c[c]) / ds->std_c[c])) ||
                    !isfinite((float)((hi[t] * ds->scale - ds->mean_c[c]) / ds->std_c[c])))
                        return 1;
        return 0;
}

/* Reads samples [i, i + k) of the disk as normalised floats into x (k * dim); raw is scratch of
 * k * per elements. */
static int read_samples(const dt_dataset *ds, long i, long k, void *raw, float *x, char *msg, size_t msglen)
{
        if (dt_disk_read(ds->disk, i, k, raw, msg, msglen)) return -1;
        dt_dtype t = dt_disk_dtype(ds->disk);
        if (ds->lut) {  /* bytes: a table lookup, the same values the formula gives */
                const unsigned char *r = raw;
                unsigned char flip = t == DT_DTYPE_I8 ? 0x80 : 0;   /* an i8's bits ^ 0x80 = its value + 128 */
                for (size_t j = 0; j < (size_t)k * ds->dim;) {
                        size_t in = j % ds->dim, c = (in / ds->chan_size) % (size_t)ds->nchan;
                        size_t run = DT_MIN(ds->dim - in, ds->chan_size - in % ds->chan_size);
                        dt_bytes_kern_get()->lut(r + j, run, flip, ds->lut + c * 256, x + j);
                        j += run;
                }
                return 0;
        }
        for (long s = 0; s < k; s++)
                convert(ds, (const char *)raw + (size_t)s * ds->dim * dt_dtype_size[t], t, 0, ds->dim,
                        x + (size_t)s * ds->dim);
        return 0;
}

static int bad_value(const dt_dataset *ds, long i, const float *x, char *msg, size_t msglen)
{
        size_t bad = first_nonfinite(x, ds->dim);
        if (bad == ds->dim) return 0;
        /* the raw value, for the message */
        dt_dtype t = dt_disk_dtype(ds->disk);
        unsigned char *raw = dt_malloc(ds->dim * dt_dtype_size[t]);
        char m2[64];
        double v = NAN;
        if (!dt_disk_read(ds->disk, i, 1, raw, m2, sizeof m2)) {
                dt_array a = { .ndim = 1, .count = ds->dim, .dtype = t, .data = raw };
                v = dt_array_get(&a, bad);
        }
        free(raw);
        nonfinite_msg(msg, msglen, dt_disk_path(ds->disk, i), "value",
                      (size_t)dt_disk_local(ds->disk, i) * ds->dim + bad, ds->dim, v,
                      "normalisation (x * scale - mean) / std");
        return -1;
}

/* This rank's part of the samples, chunk by chunk through a small buffer: every value finite, and
 * the caller's check (an embedding's ids). */
static int scan(dt_dataset *ds, const dt_load_opts *lo, char *msg, size_t msglen)
{
        dt_dtype t = dt_disk_dtype(ds->disk);
        int parts = lo && lo->parts > 0 ? lo->parts : 1, part = lo ? lo->part : 0;
        int check = lo && lo->check;
        ds->check = check ? lo->check : NULL;
        ds->check_ud = check ? lo->ud : NULL;
        if (!may_overflow(ds, t) && !check) {
                ds->scanned = 1;
                return 0;
        }
        if (lo && lo->scan_max && (unsigned long long)ds->n * ds->dim * dt_dtype_size[t] > lo->scan_max) return 0;
        ds->scanned = 1;
        long a = (long)((double)ds->n * part / parts), b = (long)((double)ds->n * (part + 1) / parts);
        long chunk = (long)DT_MAX((size_t)1, ((size_t)4 << 20) / (ds->dim * sizeof(float)));
        void *raw = dt_malloc((size_t)chunk * ds->dim * dt_dtype_size[t]);
        float *x = dt_falloc((size_t)chunk * ds->dim);
        int rc = 0;
        for (long i = a; i < b && !rc;) {
                long k = DT_MIN(DT_MIN(chunk, b - i), dt_disk_run(ds->disk, i));
                if ((rc = read_samples(ds, i, k, raw, x, msg, msglen))) break;
                size_t bad = first_nonfinite(x, (size_t)k * ds->dim);
                if (bad < (size_t)k * ds->dim) {
                        rc = bad_value(ds, i + (long)(bad / ds->dim), x + bad / ds->dim * ds->dim, msg, msglen);
                        break;
                }
                char why[256];
                if (check && lo->check(lo->ud, x, k, why, sizeof why) < 0) {
                        for (long s = 0; s < k; s++)    /* which sample: checked alone, it is sample 0 */
                                if (lo->check(lo->ud, x + (size_t)s * ds->dim, 1, why, sizeof why) < 0) {
                                        const char *w = !strncmp(why, "sample 0, ", 10) ? why + 10 : why;
                                        snprintf(msg, msglen, "%s: sample %ld: %s", dt_disk_path(ds->disk, i + s),
                                                 dt_disk_local(ds->disk, i + s), w);
                                        break;
                                }
                        rc = -1;
                }
                i += k;
        }
        free(raw);
        free(x);
        return rc;
}

/* idx and npy: x stays on disk, labels (or targets) come into memory */
static int open_disk(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                     int classes_needed, const dt_load_opts *lo, char *msg, size_t msglen)
{
        dt_flist xl = { 0 }, yl = { 0 };
        dt_array y = { 0 };
        long *counts = NULL;
        int rc = -1;
        const char *dir = lo ? lo->dir : NULL;
        if (dt_data_file_list(src->images, src->xfiles, src->nxfiles, dir, &xl, msg, msglen) ||
            dt_data_file_list(src->labels, src->yfiles, src->nyfiles, dir, &yl, msg, msglen))
                goto out;
        if (xl.n != yl.n) {
                snprintf(msg, msglen, "%s: %d sample files but %d label files; each shard needs its own",
                         xl.v[0], xl.n, yl.n);
                goto out;
        }
        size_t dims[DT_ARRAY_MAXDIMS];
        int nd = 0;
        long n = 0;
        if (dt_disk_open(&ds->disk, (const char *const *)xl.v, xl.n, src->format, data->cache_dir, &n, dims, &nd,
                         msg, msglen))
                goto out;
        counts = dt_malloc(((size_t)xl.n + 1) * sizeof *counts);
        for (int i = 0; i < xl.n; i++) {
                long first = i ? counts[i - 1] : 0;   /* running sum, turned into counts below */
                counts[i] = first + dt_disk_run(ds->disk, first);
        }
        for (int i = xl.n - 1; i > 0; i--) counts[i] -= counts[i - 1];
        if (dt_data_read_ys(&xl, &yl, src->format, counts, &y, msg, msglen)) goto out;
        rc = finish_disk(ds, src, data, input, classes_needed, lo, xl.v[0], yl.v[0], n, dims, nd, &y, msg, msglen);
out:
        free(counts);
        dt_array_free(&y);
        dt_flist_free(&xl);
        dt_flist_free(&yl);
        return rc;
}

/* csv: parsed once into a cache (features, then labels, as .npy arrays), the features read from it
 * per batch like an npy source */
static int open_csv(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                    int classes_needed, const dt_load_opts *lo, char *msg, size_t msglen)
{
        char xpath[DT_PATH_MAX], cpath[DT_PATH_MAX];
        long long off, end;
        size_t dims[DT_ARRAY_MAXDIMS];
        int nd = 0, rc = -1;
        long n = 0;
        dt_array y = { 0 };
        if (dt_data_locate(src->images, lo ? lo->dir : NULL, xpath, sizeof xpath, 0, msg, msglen) ||
            dt_csv_cache(xpath, src->label_column, src->header, src->limit, data->cache_dir, cpath, sizeof cpath, &off,
                         msg, msglen) ||
            dt_disk_open_at(&ds->disk, xpath, cpath, off, &n, dims, &nd, &end, msg, msglen))
                return -1;
        dt_dfile *f = dt_dfile_open_at(cpath, end, msg, msglen);
        int swap;
        size_t bytes;
        if (!f) return -1;
        if (!dt_npy_header(f, xpath, &y, &swap, &bytes, msg, msglen) &&
            !dt_dfile_read_exact(f, bytes, &y.data, msg, msglen) &&
            !dt_dfile_end(f, "labels of its cache", msg, msglen))
                rc = 0;
        dt_dfile_close(f);
        if (!rc && (y.ndim < 1 || (long)y.dims[0] != n)) {
                snprintf(msg, msglen, "%s has %ld samples but %s has %zu labels", xpath, n, xpath,
                         y.ndim ? y.dims[0] : (size_t)0);
                rc = -1;
        }
        if (!rc) rc = finish_disk(ds, src, data, input, classes_needed, lo, xpath, xpath, n, dims, nd, &y, msg, msglen);
        dt_array_free(&y);
        return rc;
}

/* An opened disk (ds->disk, n samples of dims[0..nd)) and its labels y: the shapes checked against
 * the model, the normalisation set, this rank's part scanned, the labels or targets taken. */
static int finish_disk(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                       int classes_needed, const dt_load_opts *lo, const char *xname, const char *yname, long n,
                       const size_t *dims, int nd, const dt_array *yp, char *msg, size_t msglen)
{
        char sb[128];
        size_t dim = dt_shape_size(input);
        const dt_array y = *yp;
        size_t per = dt_disk_per(ds->disk);
        if (per != dim) {
                char xb[128];
                snprintf(msg, msglen, "%s: samples have shape %s (%zu values) but the model input %s needs %zu",
                         xname, dims_str(dims, nd, xb, sizeof xb), per, dt_shape_str(input, sb, sizeof sb), dim);
                return -1;
        }
        ds->n = n;
        if (src->limit > 0 && src->limit < ds->n) ds->n = src->limit;
        ds->dim = dim;
        ds->label_rows = 1;
        dt_array shp = { .ndim = nd + 1 };
        shp.dims[0] = (size_t)n;
        for (int k = 0; k < nd; k++) shp.dims[k + 1] = dims[k];
        if (src->sequence == DT_SEQ_ROWS) {
                if (sequence_rows(ds, &shp, xname, input, msg, msglen)) return -1;
        } else if (nd >= 1 && nd <= DT_MAX_DIMS) {
                ds->shape.n = nd;
                for (int k = 0; k < nd; k++) {
                        if (dims[k] > INT32_MAX) { ds->shape = *input; break; }
                        ds->shape.d[k] = (int)dims[k];
                }
        } else {
                ds->shape = *input;
        }
        set_norm(ds, data, src->format == DT_FMT_IDX && dt_disk_dtype(ds->disk) == DT_DTYPE_U8, dim);
        dt_dtype t = dt_disk_dtype(ds->disk);
        if (t == DT_DTYPE_U8 || t == DT_DTYPE_I8) {     /* 256 values per channel: convert each once */
                ds->lut = dt_falloc((size_t)ds->nchan * 256);
                for (int c = 0; c < ds->nchan; c++)
                        for (int v = 0; v < 256; v++) {
                                unsigned char b = (unsigned char)v;
                                signed char sb8 = (signed char)(v - 128);
                                convert_run(t == DT_DTYPE_U8 ? (const void *)&b : (const void *)&sb8, t, 1, ds->scale,
                                            ds->mean_c[c], ds->std_c[c], ds->lut + (size_t)c * 256 + v);
                        }
        }
        if (scan(ds, lo, msg, msglen)) return -1;
        if (classes_needed > 0) return take_labels(ds, &y, yname, data, classes_needed, msg, msglen);
        return take_targets(ds, &y, yname, msg, msglen);
}

/* classes_needed: the model's class count for a classification loss (labels must fit), or 0 for
 * a regression loss (the label file holds float targets). */
int dt_dataset_load(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                    const dt_shape *input, int classes_needed, char *msg, size_t msglen)
{
        dt_load_opts lo = { .part = 0, .parts = 1 };
        return dt_dataset_open(ds, src, data, input, classes_needed, &lo, msg, msglen);
}

static int check_memory_x(dt_dataset *ds, const dt_source_spec *src, const dt_load_opts *lo, char *msg,
                          size_t msglen)
{
        char why[256];
        const char *name = src->images[0] ? src->images : dt_format_names[src->format];
        if (!lo || !lo->check) return 0;
        if (ds->x && lo->check(lo->ud, ds->x, ds->n, why, sizeof why) < 0) {
                snprintf(msg, msglen, "%s: %s", name, why);
                return -1;
        }
        if (ds->ids) {  /* text windows: checked a chunk of windows at a time, as they will be made */
                long chunk = 256;
                float *x = dt_falloc((size_t)chunk * ds->dim);
                long *idx = dt_malloc((size_t)chunk * sizeof *idx);
                int rc = 0;
                for (long a = 0; a < ds->n && !rc; a += chunk) {
                        long k = DT_MIN(chunk, ds->n - a);
                        for (long j = 0; j < k; j++) idx[j] = a + j;
                        dt_dataset_gather(ds, idx, (int)k, x, NULL, NULL);
                        if (lo->check(lo->ud, x, k, why, sizeof why) < 0) {
                                long s;         /* the window, counted over the whole source */
                                char *e;
                                if (!strncmp(why, "sample ", 7) && (s = strtol(why + 7, &e, 10)) >= 0 && *e == ',')
                                        snprintf(msg, msglen, "%s: sample %ld%s", name, a + s, e);
                                else
                                        snprintf(msg, msglen, "%s: %s", name, why);
                                rc = -1;
                        }
                }
                free(x);
                free(idx);
                return rc;
        }
        return 0;
}

int dt_dataset_open(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                    int classes_needed, const dt_load_opts *lo, char *msg, size_t msglen)
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
        int rc;
        if (src->format == DT_FMT_SYNTHETIC) {
                rc = load_synthetic(ds, src, data, input, classes_needed);
                ds->label_rows = 1;
        } else if (src->format == DT_FMT_IDX || src->format == DT_FMT_NPY) {
                rc = open_disk(ds, src, data, input, classes_needed, lo, msg, msglen);
        } else if (src->format == DT_FMT_CSV) {
                rc = open_csv(ds, src, data, input, classes_needed, lo, msg, msglen);
        } else {
                rc = load_memory(ds, src, data, input, classes_needed, msg, msglen);
        }
        if (!rc) rc = check_memory_x(ds, src, lo, msg, msglen);
        if (rc) {
                dt_dataset_free(ds);
                return -1;
        }
        ds->input = *input;
        ds->aug = data->augment;
        if (ds->nchan == 0) set_norm(ds, data, 0, dim);
        return 0;
}

/* text: the windows in memory */
static int load_memory(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                       const dt_shape *input, int classes_needed, char *msg, size_t msglen)
{
        char xpath[DT_PATH_MAX];
        if (src->format != DT_FMT_TEXT) {
                snprintf(msg, msglen, "unknown data format %d", (int)src->format);
                return -1;
        }
        if (dt_data_locate(src->images, NULL, xpath, sizeof xpath, 1, msg, msglen)) return -1;
        return dt_text_load(ds, xpath, src, data, input, classes_needed, msg, msglen);
}

int dt_dataset_labelled(const dt_dataset *ds)
{
        return ds->label || ds->ids;
}

void dt_dataset_free(dt_dataset *ds)
{
        free(ds->lut);
        free(ds->ids);
        free(ds->x);
        free(ds->label);
        free(ds->target);
        dt_disk_close(ds->disk);
        memset(ds, 0, sizeof *ds);
}

size_t dt_dataset_bytes(const dt_dataset *ds)
{
        size_t b = 0;
        if (ds->x) b += (size_t)ds->n * ds->dim * sizeof(float);
        if (ds->label) b += (size_t)ds->n * (size_t)DT_MAX(1, ds->label_rows) * sizeof(int32_t);
        if (ds->target) b += (size_t)ds->n * (size_t)ds->tdim * sizeof(float);
        return b + ds->nids;
}

size_t dt_dataset_mapped(const dt_dataset *ds)
{
        return ds->disk ? dt_disk_mapped(ds->disk) : 0;
}

void dt_dataset_probe_map(dt_dataset *ds)
{
        if (!dt_dataset_mapped(ds) || ds->map_probed) return;
        ds->map_probes = (int)DT_MIN((long)DT_MAP_PROBES, ds->n);
        ds->map_probed = dt_disk_map_grain(ds->disk, ds->map_probes, &ds->map_before, ds->map_grain) ? -1 : 1;
}

size_t dt_dataset_mapped_reads(const dt_dataset *ds, double reads)
{
        size_t m = dt_dataset_mapped(ds);
        if (!m || ds->n <= 0 || ds->map_probed != 1) return m;
        double now = (double)ds->map_before, cover = 0, per = (double)m / (double)ds->n;
        int k = 0;
        for (int j = 0; j < ds->map_probes; j++) now += ds->map_grain[j];
        for (int j = 0; j < ds->map_probes; j++) {
                if (ds->map_grain[j] <= 0) continue;    /* found its folio mapped: no size seen */
                /* a read maps at least its own sample */
                cover += 1.0 - exp(-reads * DT_MAX(ds->map_grain[j], per) / (double)m);
                k++;
        }
        now = DT_MIN(now, (double)m);
        double got = now + ((double)m - now) * (k ? cover / k : 1.0);
        return (size_t)DT_MIN((double)m, got);
}

int dt_dataset_gather_msg(const dt_dataset *ds, const long *idx, int B, float *x, int32_t *y, float *t,
                          char *msg, size_t msglen)
{
        size_t lr = ds->label_rows > 0 ? (size_t)ds->label_rows : 1;
        void *raw = NULL;
        int rc = 0;
        if (x && ds->disk) raw = dt_malloc(ds->dim * dt_dtype_size[dt_disk_dtype(ds->disk)]);
        for (int b = 0; b < B && !rc; b++) {
                long i = idx[b];
                DT_ASSERT(i >= 0 && i < ds->n);
                if (x && ds->disk) {
                        float *xb = x + (size_t)b * ds->dim;
                        char why[256];
                        rc = read_samples(ds, i, 1, raw, xb, msg, msglen);
                        if (!rc && !ds->scanned) rc = bad_value(ds, i, xb, msg, msglen);
                        if (!rc && !ds->scanned && ds->check && ds->check(ds->check_ud, xb, 1, why, sizeof why) < 0) {
                                snprintf(msg, msglen, "%s: sample %ld: %s", dt_disk_path(ds->disk, i),
                                         dt_disk_local(ds->disk, i), !strncmp(why, "sample 0, ", 10) ? why + 10 : why);
                                rc = -1;
                        }
                } else if (x && ds->ids) {      /* a text window: its ids as numbers */
                        const unsigned char *w = ds->ids + (size_t)i * ds->stride;
                        for (size_t k = 0; k < ds->dim; k++) x[(size_t)b * ds->dim + k] = (float)w[k];
                } else if (x) {
                        memcpy(x + (size_t)b * ds->dim, ds->x + (size_t)i * ds->dim, ds->dim * sizeof *x);
                }
                if (y && ds->ids) {             /* the next id at every step */
                        const unsigned char *w = ds->ids + (size_t)i * ds->stride + 1;
                        for (size_t k = 0; k < lr; k++) y[(size_t)b * lr + k] = w[k];
                } else if (y && ds->label) {
                        memcpy(y + (size_t)b * lr, ds->label + (size_t)i * lr, lr * sizeof *y);
                }
                if (t && ds->target)
                        memcpy(t + (size_t)b * (size_t)ds->tdim, ds->target + (size_t)i * (size_t)ds->tdim,
                               (size_t)ds->tdim * sizeof *t);
        }
        free(raw);
        return rc;
}

void dt_dataset_gather(const dt_dataset *ds, const long *idx, int B, float *x, int32_t *y, float *t)
{
        char msg[DT_PATH_MAX + 256];
        if (dt_dataset_gather_msg(ds, idx, B, x, y, t, msg, sizeof msg)) dt_die(DT_EXIT_DATA, "%s", msg);
}

int dt_dataset_gather_train(const dt_dataset *ds, const long *idx, int B, uint64_t seed, long epoch, float *x,
                            int32_t *y, float *t, char *msg, size_t msglen)
{
        if (dt_dataset_gather_msg(ds, idx, B, x, y, t, msg, msglen)) return -1;
        if (!x || (!ds->aug.crop && !ds->aug.flip)) return 0;
        float fill[DT_MAX_CHANNELS];
        for (int c = 0; c < ds->nchan; c++) fill[c] = (float)((0.0 * ds->scale - ds->mean_c[c]) / ds->std_c[c]);
        int C = ds->input.n == 3 ? ds->input.d[0] : 1;
        for (int c = ds->nchan; c < C && c < DT_MAX_CHANNELS; c++) fill[c] = fill[0];
        float *tmp = dt_falloc(ds->dim);
        for (int b = 0; b < B; b++)
                dt_augment_sample(&ds->aug, &ds->input, fill, seed, epoch, idx[b], x + (size_t)b * ds->dim, tmp);
        free(tmp);
        return 0;
}

