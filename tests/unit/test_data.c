/* tests/unit/test_data.c - data loading: IDX (plain and gzip, every header check), CSV, .npy,
 * damaged files (gzip trailers, trailing data, NUL bytes, NaN and Inf), synthetic blobs, the epoch
 * shuffle, normalisation, path resolution, and Fashion-MNIST's test set when it is installed. Files are generated in a temporary directory per test. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data.h"

static char tmp[256];
static char msg[4096];

static void setup(void)
{
        strcpy(tmp, "/tmp/dt_test_data.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp));
        char cache[300];
        snprintf(cache, sizeof cache, "%s/cache", tmp);        /* gzip'd files' caches go with the test */
        setenv("DTRAIN_CACHE_DIR", cache, 1);
}

static void teardown(void)
{
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        ck_assert_int_eq(system(cmd), 0);
}

static const char *tpath(const char *name)
{
        static char buf[4][512];
        static int k;
        k = (k + 1) % 4;
        snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
        return buf[k];
}

/* writes bytes to path, gzip'd when the name ends in .gz */
static void write_file(const char *path, const void *data, size_t n)
{
        size_t L = strlen(path);
        if (L > 3 && !strcmp(path + L - 3, ".gz")) {
                gzFile gz = gzopen(path, "wb");
                ck_assert_ptr_nonnull(gz);
                if (n) ck_assert_int_eq(gzwrite(gz, data, (unsigned)n), (int)n);
                ck_assert_int_eq(gzclose(gz), Z_OK);
        } else {
                FILE *f = fopen(path, "wb");
                ck_assert_ptr_nonnull(f);
                if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
                ck_assert_int_eq(fclose(f), 0);
        }
}

/* IDX: header (0, 0, type, ndim, dims big-endian) then 'payload' bytes of data as given */
static void write_idx(const char *path, int type, int ndim, const unsigned *dims, const void *payload,
                      size_t plen)
{
        unsigned char *b = malloc(4 + 4 * (size_t)ndim + plen);
        b[0] = 0; b[1] = 0; b[2] = (unsigned char)type; b[3] = (unsigned char)ndim;
        for (int i = 0; i < ndim; i++) {
                b[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
                b[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
                b[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
                b[7 + 4 * i] = (unsigned char)dims[i];
        }
        memcpy(b + 4 + 4 * ndim, payload, plen);
        write_file(path, b, 4 + 4 * (size_t)ndim + plen);
        free(b);
}

/* 5 images of 2x3 bytes (value 10*i + k) and labels i % 3 */
static void write_small_idx(const char *img, const char *lab)
{
        unsigned char px[30], lb[5];
        for (int i = 0; i < 5; i++) {
                for (int k = 0; k < 6; k++)
                        px[6 * i + k] = (unsigned char)(10 * i + k);
                lb[i] = (unsigned char)(i % 3);
        }
        write_idx(img, 0x08, 3, (unsigned[]){5, 2, 3}, px, sizeof px);
        write_idx(lab, 0x08, 1, (unsigned[]){5}, lb, sizeof lb);
}

static dt_source_spec idx_src(const char *img, const char *lab)
{
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_IDX;
        snprintf(s.images, sizeof s.images, "%s", img);
        snprintf(s.labels, sizeof s.labels, "%s", lab);
        return s;
}

static dt_data_spec identity(void)
{
        dt_data_spec d;
        memset(&d, 0, sizeof d);
        d.scale = 1;
        d.scale_given = 1;
        d.std = 1;
        return d;
}

static const dt_shape in6 = { .n = 1, .d = {6} };

/* All samples as floats: in memory, or gathered from disk into one buffer (kept until the next
 * call, freed at exit by the last test's call with NULL). */
static float *xbuf;
static const float *xs_all(const dt_dataset *ds)
{
        free(xbuf);
        xbuf = NULL;
        if (!ds) return NULL;
        if (ds->x) return ds->x;
        long *idx = malloc((size_t)ds->n * sizeof *idx);
        for (long i = 0; i < ds->n; i++) idx[i] = i;
        xbuf = dt_falloc((size_t)ds->n * ds->dim);
        dt_dataset_gather(ds, idx, (int)ds->n, xbuf, NULL, NULL);
        free(idx);
        return xbuf;
}

/* ---- IDX ---- */

static void check_small(const char *img, const char *lab)
{
        write_small_idx(img, lab);
        dt_source_spec s = idx_src(img, lab);
        dt_data_spec d = identity();
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 5);
        ck_assert_uint_eq(ds.dim, 6);
        ck_assert_int_eq(ds.shape.n, 2);
        ck_assert_int_eq(ds.shape.d[0], 2);
        ck_assert_int_eq(ds.shape.d[1], 3);
        ck_assert_int_eq(ds.classes, 3);
        const float *x = xs_all(&ds);
        for (int i = 0; i < 5; i++) {
                ck_assert_int_eq(ds.label[i], i % 3);
                for (int k = 0; k < 6; k++)
                        ck_assert_float_eq(x[6 * i + k], (float)(10 * i + k));
        }
        xs_all(NULL);
        dt_dataset_free(&ds);
}

START_TEST(idx_plain)
{
        check_small(tpath("img"), tpath("lab"));
}
END_TEST

START_TEST(idx_gzip)
{
        check_small(tpath("img.gz"), tpath("lab.gz"));
}
END_TEST

/* What a read of the mapped cache makes resident, measured (dt_dataset_probe_map): at least a page
 * per probe far apart, and the plan's share of the cache growing with the reads to all of it. */
START_TEST(mapped_probe)
{
        enum { N = 4096, D = 1024 };
        unsigned char *px = malloc((size_t)N * D), *lb = malloc(N);
        for (size_t i = 0; i < (size_t)N * D; i++) px[i] = (unsigned char)(i * 2654435761u >> 24);
        for (int i = 0; i < N; i++) lb[i] = (unsigned char)(i % 3);
        write_idx(tpath("big.gz"), 0x08, 2, (unsigned[]){N, D}, px, (size_t)N * D);
        write_idx(tpath("bigl.gz"), 0x08, 1, (unsigned[]){N}, lb, N);
        free(px), free(lb);
        dt_source_spec s = idx_src(tpath("big.gz"), tpath("bigl.gz"));
        dt_data_spec d = identity();
        const dt_shape in = { .n = 1, .d = {D} };
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in, 3, msg, sizeof msg), "%s", msg);
        size_t whole = dt_dataset_mapped(&ds);
        ck_assert_uint_ge(whole, (size_t)N * D);
        ck_assert_uint_eq(dt_dataset_mapped_reads(&ds, 10), whole);     /* unprobed: all of it */
        dt_dataset_probe_map(&ds);
        ck_assert_int_eq(ds.map_probed, 1);
        ck_assert_int_eq(ds.map_probes, 32);
        double sum = 0;
        for (int j = 0; j < 32; j++) sum += ds.map_grain[j];
        ck_assert_msg(sum >= 32 * 4096.0 && sum <= (double)whole, "probes mapped %.0f", sum);
        size_t r0 = dt_dataset_mapped_reads(&ds, 0), r1 = dt_dataset_mapped_reads(&ds, 100);
        ck_assert_uint_ge(r0, (size_t)(32 * 4096));     /* the probes' own */
        ck_assert_uint_le(r0, r1);
        ck_assert_uint_le(r1, whole);
        ck_assert_uint_eq(dt_dataset_mapped_reads(&ds, 1e9), whole);
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(idx_float32_and_default_scale)
{
        /* float32 big-endian: 1.5 = 0x3fc00000 */
        unsigned char f[8] = {0x3f, 0xc0, 0, 0, 0xc0, 0x20, 0, 0};      /* 1.5, -2.5 */
        dt_array a;
        write_idx(tpath("f.idx"), 0x0D, 2, (unsigned[]){1, 2}, f, 8);
        ck_assert_msg(!dt_idx_read(tpath("f.idx"), &a, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(a.dtype, DT_DTYPE_F32);
        ck_assert_float_eq(dt_array_get(&a, 0), 1.5);
        ck_assert_float_eq(dt_array_get(&a, 1), -2.5);
        dt_array_free(&a);

        /* bytes with no scale given: x/255, then (x - mean)/std */
        write_small_idx(tpath("i"), tpath("l"));
        dt_source_spec s = idx_src(tpath("i"), tpath("l"));
        dt_data_spec d;
        memset(&d, 0, sizeof d);
        d.mean = 0.5;
        d.std = 0.25;
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), "%s", msg);
        ck_assert_float_eq_tol(xs_all(&ds)[6 * 4 + 5], (float)((45 / 255.0 - 0.5) / 0.25), 1e-6);
        xs_all(NULL);
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(idx_truncated)
{
        unsigned char px[20] = {0};
        write_idx(tpath("t"), 0x08, 3, (unsigned[]){5, 2, 3}, px, sizeof px);
        dt_array a;
        ck_assert_int_eq(dt_idx_read(tpath("t"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "truncated: expected 30 bytes of data, got 20"), "%s", msg);

        /* a gzip stream cut in the middle */
        unsigned char big[4096];
        for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(i * 7919 >> 3);
        write_idx(tpath("t.gz"), 0x08, 2, (unsigned[]){64, 64}, big, sizeof big);
        FILE *f = fopen(tpath("t.gz"), "rb");
        unsigned char buf[8192];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        write_file(tpath("cut"), buf, n / 2);
        ck_assert_int_eq(dt_idx_read(tpath("cut"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "truncated"), "%s", msg);

        /* the header itself cut short */
        write_file(tpath("h"), (unsigned char[]){0, 0, 8, 3, 0, 0}, 6);
        ck_assert_int_eq(dt_idx_read(tpath("h"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "truncated"), "%s", msg);
}
END_TEST

START_TEST(idx_bad_magic)
{
        dt_array a;
        write_file(tpath("m"), "\x12\x34\x08\x03\0\0\0\1", 8);
        ck_assert_int_eq(dt_idx_read(tpath("m"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "bad magic 0x12340803"), "%s", msg);
        write_file(tpath("m2"), "\0\0\x07\x01\0\0\0\1x", 9);        /* type 0x07 is not in the spec */
        ck_assert_int_eq(dt_idx_read(tpath("m2"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "bad magic"), "%s", msg);
        write_file(tpath("m3"), "\0\0\x08\x01\0\0\0\0", 8);         /* a zero dimension */
        ck_assert_int_eq(dt_idx_read(tpath("m3"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "dimension 0 is 0"), "%s", msg);
        ck_assert_int_eq(dt_idx_read(tpath("nonexistent"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "cannot open"), "%s", msg);
}
END_TEST

START_TEST(idx_absurd_dims)
{
        dt_array a;
        /* 2^16 x 2^16 x 2^16 x 4 bytes = 2^50: refused from the header alone */
        write_idx(tpath("a"), 0x0D, 3, (unsigned[]){65536, 65536, 65536}, "", 0);
        ck_assert_int_eq(dt_idx_read(tpath("a"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "65536x65536x65536") && strstr(msg, "corrupt"), "%s", msg);
        /* product overflowing 64 bits */
        write_idx(tpath("o"), 0x08, 5, (unsigned[]){0xffffffffu, 0xffffffffu, 0xffffffffu, 2, 2}, "", 0);
        ck_assert_int_eq(dt_idx_read(tpath("o"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "corrupt"), "%s", msg);
        /* 8 GiB claimed (under the limit) by a tiny file: truncated, without allocating 8 GiB */
        write_idx(tpath("b"), 0x08, 2, (unsigned[]){1u << 20, 1u << 13}, "abc", 3);
        ck_assert_int_eq(dt_idx_read(tpath("b"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "truncated: expected 8589934592 bytes of data, got 3"), "%s", msg);
}
END_TEST

START_TEST(idx_count_mismatch)
{
        unsigned char px[30] = {0}, lb[4] = {0};
        write_idx(tpath("i"), 0x08, 3, (unsigned[]){5, 2, 3}, px, 30);
        write_idx(tpath("l"), 0x08, 1, (unsigned[]){4}, lb, 4);
        dt_source_spec s = idx_src(tpath("i"), tpath("l"));
        dt_data_spec d = identity();
        dt_dataset ds;
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "has 5 samples") && strstr(msg, "has 4 labels"), "%s", msg);
}
END_TEST

START_TEST(shape_and_classes)
{
        write_small_idx(tpath("i"), tpath("l"));
        dt_source_spec s = idx_src(tpath("i"), tpath("l"));
        dt_data_spec d = identity();
        dt_dataset ds;
        dt_shape in10 = { .n = 1, .d = {10} }, in123 = { .n = 3, .d = {1, 2, 3} };
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in10, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "(2,3)") && strstr(msg, "(10)") && strstr(msg, "6 values"), "%s", msg);
        /* same element count, other shape: accepted */
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in123, 3, msg, sizeof msg), "%s", msg);
        dt_dataset_free(&ds);
        /* labels 0..2 against 2 classes */
        d.classes = 2;
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "label 2 is out of range for 2 classes"), "%s", msg);
        /* the model outputs fewer classes than the data has */
        d.classes = 0;
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in6, 2, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "3 classes") && strstr(msg, "outputs 2"), "%s", msg);
        /* limit */
        s.limit = 2;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 2);
        ck_assert_int_eq(ds.classes, 2);       /* 1 + max of the labels used */
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(missing_file)
{
        write_small_idx(tpath("i"), tpath("l"));
        dt_source_spec s = idx_src("no/such/file.gz", tpath("l"));
        dt_data_spec d = identity();
        dt_dataset ds;
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "cannot find data file 'no/such/file.gz' (looked in:"), "%s", msg);
        ck_assert_msg(strstr(msg, "/usr/share/datasets"), "%s", msg);
        ck_assert_int_eq(dt_dataset_missing(&s), 1);
        s = idx_src(tpath("i"), "missing-labels");
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg), -1);
        ck_assert_int_eq(dt_dataset_missing(&s), 2);
        s = idx_src(tpath("i"), tpath("l"));
        ck_assert_int_eq(dt_dataset_missing(&s), 0);
}
END_TEST

START_TEST(resolve)
{
        char out[DT_PATH_MAX], a[300], b[300];
        snprintf(a, sizeof a, "%s/a", tmp);
        snprintf(b, sizeof b, "%s/b", tmp);
        ck_assert_int_eq(mkdir(a, 0755), 0);
        ck_assert_int_eq(mkdir(b, 0755), 0);
        write_file(tpath("b/f.csv"), "x", 1);
        write_file(tpath("a/g.csv"), "x", 1);
        char env[700];
        snprintf(env, sizeof env, "::%s:%s", a, b);     /* empty entries are skipped */
        setenv("DTRAIN_DATA_PATH", env, 1);
        ck_assert_int_eq(dt_data_resolve("/nonexistent", "f.csv", out, sizeof out), 0);
        ck_assert_str_eq(out, tpath("b/f.csv"));
        ck_assert_int_eq(dt_data_resolve(tmp, "a/g.csv", out, sizeof out), 0);   /* dir first */
        ck_assert_str_eq(out, tpath("a/g.csv"));
        ck_assert_int_eq(dt_data_resolve("/nonexistent", "g.csv", out, sizeof out), 0);
        ck_assert_int_eq(dt_data_resolve(tmp, "nothere", out, sizeof out), -1);
        ck_assert_int_eq(dt_data_resolve(tmp, tpath("a/g.csv"), out, sizeof out), 0);     /* absolute */
        ck_assert_int_eq(dt_data_resolve(tmp, "a", out, sizeof out), -1);        /* a directory */
        unsetenv("DTRAIN_DATA_PATH");
        ck_assert_int_eq(dt_data_resolve("/nonexistent", "f.csv", out, sizeof out), -1);
}
END_TEST

/* ---- CSV ---- */

START_TEST(csv_ok)
{
        const char *t = "a,b,c,label\n1,2,3,0\n\n 4.5 , -6,7e1,2\r\n8,9,10,1\n";
        write_file(tpath("d.csv"), t, strlen(t));
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_CSV;
        s.header = 1;
        s.label_column = -1;
        snprintf(s.images, sizeof s.images, "%s", tpath("d.csv"));
        dt_data_spec d = identity();
        dt_shape in3 = { .n = 1, .d = {3} };
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in3, 3, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 3);
        ck_assert_int_eq(ds.classes, 3);
        ck_assert_ptr_null(ds.x);      /* read from its cache per batch */
        ck_assert_float_eq(xs_all(&ds)[3], 4.5f);
        ck_assert_float_eq(xs_all(&ds)[4], -6.0f);
        ck_assert_float_eq(xs_all(&ds)[5], 70.0f);
        xs_all(NULL);
        ck_assert_int_eq(ds.label[1], 2);
        dt_dataset_free(&ds);

        /* label in the first column, regression targets, gzip'd */
        const char *u = "0.5,1,2\n-1.25,3,4\n";
        write_file(tpath("r.csv.gz"), u, strlen(u));
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_CSV;
        snprintf(s.images, sizeof s.images, "%s", tpath("r.csv.gz"));
        dt_shape in2 = { .n = 1, .d = {2} };
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in2, 0, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.tdim, 1);
        ck_assert_ptr_null(ds.label);
        ck_assert_float_eq(ds.target[1], -1.25f);
        ck_assert_float_eq(xs_all(&ds)[3], 4.0f);
        xs_all(NULL);
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(csv_errors)
{
        dt_array x, y;
        const char *t = "1,2,0\n3,x4,1\n";
        write_file(tpath("e.csv"), t, strlen(t));
        ck_assert_int_eq(dt_csv_read(tpath("e.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "e.csv:2: field 2: expected a decimal number, got 'x4'"), "%s", msg);
        t = "h\n1,2,0\n\n3,1\n";
        write_file(tpath("f.csv"), t, strlen(t));
        ck_assert_int_eq(dt_csv_read(tpath("f.csv"), -1, 1, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "f.csv:4: expected 3 fields like line 2, got 2"), "%s", msg);
        t = "1,nan,0\n";
        write_file(tpath("g.csv"), t, strlen(t));
        ck_assert_int_eq(dt_csv_read(tpath("g.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "g.csv:1: field 2: expected a decimal number, got 'nan'"), "%s", msg);
        t = "1,2\n";
        write_file(tpath("h.csv"), t, strlen(t));
        ck_assert_int_eq(dt_csv_read(tpath("h.csv"), 5, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "h.csv:1: label column 5"), "%s", msg);
        write_file(tpath("empty.csv"), "", 0);
        ck_assert_int_eq(dt_csv_read(tpath("empty.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "no data rows"), "%s", msg);
        /* a fractional label for a classification loss */
        t = "1,2,0.5\n";
        write_file(tpath("i.csv"), t, strlen(t));
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_CSV;
        s.label_column = -1;
        snprintf(s.images, sizeof s.images, "%s", tpath("i.csv"));
        dt_data_spec d = identity();
        dt_shape in2 = { .n = 1, .d = {2} };
        dt_dataset ds;
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "label 0.5 is not a class index"), "%s", msg);
}
END_TEST

/* ---- .npy ---- */

/* version 1 or 2 header padded to 64 bytes, then data */
static void write_npy(const char *path, int version, const char *dict, const void *data, size_t n)
{
        size_t pre = version == 1 ? 10 : 12, dl = strlen(dict);
        size_t hl = ((pre + dl + 1 + 63) / 64) * 64 - pre;
        unsigned char *b = calloc(1, pre + hl + n);
        memcpy(b, "\x93NUMPY", 6);
        b[6] = (unsigned char)version;
        b[7] = 0;
        b[8] = (unsigned char)(hl & 0xff);
        b[9] = (unsigned char)(hl >> 8);
        memcpy(b + pre, dict, dl);
        memset(b + pre + dl, ' ', hl - dl - 1);
        b[pre + hl - 1] = '\n';
        memcpy(b + pre + hl, data, n);
        write_file(path, b, pre + hl + n);
        free(b);
}

START_TEST(npy_ok)
{
        float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        int64_t ys[4] = {3, 0, 1, 2};
        write_npy(tpath("x.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", xs, sizeof xs);
        write_npy(tpath("y.npy"), 2, "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (4,)}", ys, sizeof ys);
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_NPY;
        snprintf(s.images, sizeof s.images, "%s", tpath("x.npy"));
        snprintf(s.labels, sizeof s.labels, "%s", tpath("y.npy"));
        dt_data_spec d = identity();
        d.scale = 2;
        d.mean = 1;
        d.std = 4;
        dt_shape in2 = { .n = 1, .d = {2} };
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in2, 4, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 4);
        ck_assert_int_eq(ds.classes, 4);
        ck_assert_int_eq(ds.label[0], 3);
        ck_assert_float_eq(xs_all(&ds)[7], (8 * 2 - 1) / 4.0f);      /* normalisation */
        xs_all(NULL);
        dt_dataset_free(&ds);

        /* big-endian data and |u1 */
        unsigned char be[8] = {0x3f, 0xf8, 0, 0, 0, 0, 0, 0};  /* 1.5 as >f8 */
        dt_array a;
        write_npy(tpath("b.npy"), 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (1,)}", be, 8);
        ck_assert_msg(!dt_npy_read(tpath("b.npy"), &a, msg, sizeof msg), "%s", msg);
        ck_assert_float_eq(dt_array_get(&a, 0), 1.5);
        dt_array_free(&a);
        write_npy(tpath("u.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 1)}", "\x07\xff", 2);
        ck_assert_msg(!dt_npy_read(tpath("u.npy"), &a, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(a.ndim, 3);
        ck_assert_float_eq(dt_array_get(&a, 1), 255);
        dt_array_free(&a);
}
END_TEST

START_TEST(npy_errors)
{
        dt_array a;
        float xs[4] = {0};
        write_npy(tpath("f.npy"), 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("f.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "fortran_order"), "%s", msg);
        write_npy(tpath("c.npy"), 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("c.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "unsupported .npy dtype '<c8'"), "%s", msg);
        write_npy(tpath("h.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("h.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "unexpected key 'x'"), "%s", msg);
        write_npy(tpath("s.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 2), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("s.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "bad .npy header"), "%s", msg);
        write_npy(tpath("m.npy"), 1, "{'descr': '<f4', 'shape': (2, 2), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("m.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "lacks 'fortran_order'"), "%s", msg);
        write_npy(tpath("a.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000, 100000), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("a.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "corrupt"), "%s", msg);
        write_npy(tpath("t.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", xs, 16);
        ck_assert_int_eq(dt_npy_read(tpath("t.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "truncated: expected 24 bytes of data, got 16"), "%s", msg);
        write_file(tpath("z.npy"), "\x93NUMPX\1\0", 8);
        ck_assert_int_eq(dt_npy_read(tpath("z.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "bad magic"), "%s", msg);
}
END_TEST

/* ---- damaged and hostile files ---- */

/* A row that starts with a NUL byte was dropped (gzgets saw an empty string and read on), so the
 * file trained on 2 samples of 3 without a word. */
START_TEST(csv_nul_row)
{
        static const char t[] = "1,2,3,4,0\n\0005,6,7,8,1\n9,9,9,9,2\n";
        dt_array x, y;
        write_file(tpath("n.csv"), t, sizeof t - 1);
        ck_assert_int_eq(dt_csv_read(tpath("n.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "n.csv:2: a NUL byte at column 1"), "%s", msg);
        static const char u[] = "1,2,0\n3,4\0005,1\n";
        write_file(tpath("m.csv.gz"), u, sizeof u - 1);
        ck_assert_int_eq(dt_csv_read(tpath("m.csv.gz"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "m.csv.gz:2: a NUL byte at column 4"), "%s", msg);
        /* a last line without its newline, CRLF endings and a blank line still read as before */
        static const char v[] = "1,2,0\r\n\r\n3,4,1";
        write_file(tpath("v.csv"), v, sizeof v - 1);
        ck_assert_msg(!dt_csv_read(tpath("v.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), "%s", msg);
        ck_assert_uint_eq(x.dims[0], 2);
        ck_assert_float_eq(((float *)x.data)[3], 4.0f);
        dt_array_free(&x);
        dt_array_free(&y);
}
END_TEST

/* Fields are plain decimal numbers: strtod's hex floats, inf and nan words are refused. */
START_TEST(csv_strict_numbers)
{
        static const char *const bad[] = { "0x1p3", "0x10", "inf", "-Infinity", "nan", "NAN(12)", "1e", "e5",
                                           ".", "+", "1.5.2", "--1", "1e+", "1,5" };
        dt_array x, y;
        char line[64];
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                snprintf(line, sizeof line, "1,2,0\n%s,2,0\n", bad[i]);
                write_file(tpath("s.csv"), line, strlen(line));
                int rc = dt_csv_read(tpath("s.csv"), -1, 0, 0, &x, &y, msg, sizeof msg);
                ck_assert_msg(rc == -1, "'%s' was accepted", bad[i]);
                ck_assert_msg(strstr(msg, "s.csv:2: "), "%s", msg);
        }
        snprintf(line, sizeof line, "0x1p3,2,0\n");
        write_file(tpath("h.csv"), line, strlen(line));
        ck_assert_int_eq(dt_csv_read(tpath("h.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "h.csv:1: field 1: expected a decimal number, got '0x1p3'"), "%s", msg);
        /* finite as a double, not as a float: a feature would become inf */
        snprintf(line, sizeof line, "1e39,2,0\n");
        write_file(tpath("f.csv"), line, strlen(line));
        ck_assert_int_eq(dt_csv_read(tpath("f.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "f.csv:1: field 1: '1e39' is not a finite 32-bit float"), "%s", msg);
        static const char ok[] = "1.,.5,-0.5e-3,+3, 4 ,\t5e2\t,1E1,0\n";
        write_file(tpath("ok.csv"), ok, sizeof ok - 1);
        ck_assert_msg(!dt_csv_read(tpath("ok.csv"), -1, 0, 0, &x, &y, msg, sizeof msg), "%s", msg);
        const float want[] = { 1, 0.5f, -0.5e-3f, 3, 4, 500, 10 };
        for (int i = 0; i < 7; i++) ck_assert_float_eq(((float *)x.data)[i], want[i]);
        dt_array_free(&x);
        dt_array_free(&y);
}
END_TEST

/* NaN and Inf in the data are refused when it is loaded, naming the file and the sample, instead
 * of surfacing as a non-finite loss. */
START_TEST(nonfinite_values)
{
        dt_data_spec d = identity();
        dt_shape in2 = { .n = 1, .d = {2} };
        dt_dataset ds;
        unsigned char lb[3] = {0, 1, 0};
        write_idx(tpath("l"), 0x08, 1, (unsigned[]){3}, lb, 3);
        /* IDX float32: sample 1 = (NaN, 1.0), big-endian */
        unsigned char f[24] = {0x3f, 0x80, 0, 0, 0x3f, 0x80, 0, 0, 0x7f, 0xc0, 0, 0, 0x3f, 0x80, 0, 0,
                               0x3f, 0x80, 0, 0, 0xff, 0x80, 0, 0};
        write_idx(tpath("f"), 0x0D, 2, (unsigned[]){3, 2}, f, sizeof f);
        dt_source_spec s = idx_src(tpath("f"), tpath("l"));
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 2, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/f: sample 1: value 0 of 2 is nan; data must be finite numbers"), "%s", msg);
        s.limit = 1;    /* samples past the limit are not used, nor checked */
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in2, 2, msg, sizeof msg), "%s", msg);
        dt_dataset_free(&ds);
        /* IDX float64 finite in the file, beyond a float once scaled */
        double big[6] = {1, 2, 3, 4, 5, 1e300};
        unsigned char be[48];
        for (int i = 0; i < 6; i++)
                for (int k = 0; k < 8; k++) be[8 * i + k] = ((unsigned char *)&big[i])[7 - k];
        write_idx(tpath("g"), 0x0E, 2, (unsigned[]){3, 2}, be, sizeof be);
        s = idx_src(tpath("g"), tpath("l"));
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 2, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/g: sample 2: value 1 of 2 (1e+300) is not finite as a 32-bit float after "
                              "normalisation"), "%s", msg);
        /* .npy: inf in x; NaN in y as regression targets */
        float xs[6] = {1, 2, 3, 4, 5, 6}, ys[3] = {0, 1, 2};
        xs[3] = INFINITY;
        write_npy(tpath("x.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", xs, sizeof xs);
        write_npy(tpath("y.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1), }", ys, sizeof ys);
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_NPY;
        snprintf(s.images, sizeof s.images, "%s", tpath("x.npy"));
        snprintf(s.labels, sizeof s.labels, "%s", tpath("y.npy"));
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 0, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "x.npy: sample 1: value 1 of 2 is inf"), "%s", msg);
        xs[3] = 4;
        ys[2] = NAN;
        write_npy(tpath("x.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", xs, sizeof xs);
        write_npy(tpath("y.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1), }", ys, sizeof ys);
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 0, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "y.npy: sample 2: target 0 of 1 is nan"), "%s", msg);
        /* NaN as a class label */
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 3, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "y.npy: sample 2: label nan is not a class index"), "%s", msg);
        /* a CSV regression target beyond a float */
        static const char t[] = "1,2,0.5\n3,4,1e300\n";
        write_file(tpath("t.csv"), t, sizeof t - 1);
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_CSV;
        s.label_column = -1;
        snprintf(s.images, sizeof s.images, "%s", tpath("t.csv"));
        ck_assert_int_eq(dt_dataset_load(&ds, &s, &d, &in2, 0, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "t.csv: sample 1: target 0 of 1 (1e+300) is not finite as a 32-bit float"),
                      "%s", msg);
}
END_TEST

/* ---- gzip integrity ---- */

static size_t read_back(const char *path, unsigned char *buf, size_t cap)
{
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(buf, 1, cap, f);
        fclose(f);
        ck_assert_uint_lt(n, cap);
        return n;
}

/* zlib's gzread stops checking once it has the bytes asked for and ignores what follows the last
 * member: a bad CRC or length, a missing trailer and trailing garbage were all accepted, and a
 * damaged stream was reported as "shorter than its 4-byte magic". */
START_TEST(gzip_integrity)
{
        unsigned char gz[8192], g2[16384];
        dt_array a;
        write_small_idx(tpath("i.gz"), tpath("l.gz"));
        size_t n = read_back(tpath("i.gz"), gz, sizeof gz);
        /* the CRC, then the length, in the 8-byte trailer */
        memcpy(g2, gz, n);
        g2[n - 8] ^= 1;
        write_file(tpath("crc"), g2, n);
        ck_assert_int_eq(dt_idx_read(tpath("crc"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/crc: corrupt gzip stream: incorrect data check"), "%s", msg);
        memcpy(g2, gz, n);
        g2[n - 4] ^= 1;
        write_file(tpath("len"), g2, n);
        ck_assert_int_eq(dt_idx_read(tpath("len"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/len: corrupt gzip stream: incorrect length check"), "%s", msg);
        /* no trailer at all */
        write_file(tpath("cut"), gz, n - 8);
        ck_assert_int_eq(dt_idx_read(tpath("cut"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/cut: truncated gzip stream: the file ends inside it"), "%s", msg);
        /* garbage after the stream, even one byte, even zeros */
        memcpy(g2, gz, n);
        memcpy(g2 + n, "junk", 4);
        write_file(tpath("junk"), g2, n + 4);
        ck_assert_int_eq(dt_idx_read(tpath("junk"), &a, msg, sizeof msg), -1);
        char want[128];
        snprintf(want, sizeof want, "/junk: trailing data after the gzip stream (at byte %zu of the file)", n);
        ck_assert_msg(strstr(msg, want), "%s", msg);
        g2[n] = 0;
        write_file(tpath("zero"), g2, n + 1);
        ck_assert_int_eq(dt_idx_read(tpath("zero"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "trailing data after the gzip stream"), "%s", msg);
        /* a damaged block: reserved block type 3 in the first deflate block after the 10-byte header */
        memcpy(g2, gz, n);
        g2[10] |= 0x06;
        write_file(tpath("bad"), g2, n);
        ck_assert_int_eq(dt_idx_read(tpath("bad"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/bad: corrupt gzip stream: invalid block type"), "%s", msg);
        /* two members one after the other are one stream, as gzip -d reads them: the header in
         * the first, the pixels in the second */
        unsigned char px[30];
        for (int i = 0; i < 30; i++) px[i] = (unsigned char)(10 * (i / 6) + i % 6);
        write_idx(tpath("h.gz"), 0x08, 3, (unsigned[]){5, 2, 3}, "", 0);
        write_file(tpath("p.gz"), px, sizeof px);
        size_t h = read_back(tpath("h.gz"), g2, sizeof g2);
        size_t p = read_back(tpath("p.gz"), g2 + h, sizeof g2 - h);
        write_file(tpath("two"), g2, h + p);
        ck_assert_msg(!dt_idx_read(tpath("two"), &a, msg, sizeof msg), "%s", msg);
        ck_assert_uint_eq(a.count, 30);
        ck_assert(!memcmp(a.data, px, 30));
        dt_array_free(&a);
        check_small(tpath("i2.gz"), tpath("l2.gz"));    /* and a plain member is fine */
}
END_TEST

/* The array must be the whole file: more data than the header describes is refused. */
START_TEST(trailing_data)
{
        unsigned char px[31] = {0};
        dt_array a;
        write_idx(tpath("t"), 0x08, 3, (unsigned[]){5, 2, 3}, px, sizeof px);
        ck_assert_int_eq(dt_idx_read(tpath("t"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "/t: trailing data: the file goes on after the IDX array its header describes"),
                      "%s", msg);
        write_idx(tpath("t.gz"), 0x08, 3, (unsigned[]){5, 2, 3}, px, sizeof px);
        ck_assert_int_eq(dt_idx_read(tpath("t.gz"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "t.gz: trailing data: the file goes on after the IDX array"), "%s", msg);
        float xs[5] = {0};
        write_npy(tpath("x.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", xs, sizeof xs);
        ck_assert_int_eq(dt_npy_read(tpath("x.npy"), &a, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "x.npy: trailing data: the file goes on after the array its .npy header "
                              "describes"), "%s", msg);
        /* a corrupt gzip'd CSV is refused too */
        static const char t[] = "1,2,0\n3,4,1\n";
        write_file(tpath("c.csv.gz"), t, sizeof t - 1);
        unsigned char gz[512];
        size_t n = read_back(tpath("c.csv.gz"), gz, sizeof gz);
        gz[n - 8] ^= 0x80;
        write_file(tpath("c2.csv"), gz, n);
        dt_array y;
        ck_assert_int_eq(dt_csv_read(tpath("c2.csv"), -1, 0, 0, &a, &y, msg, sizeof msg), -1);
        ck_assert_msg(strstr(msg, "c2.csv: corrupt gzip stream: incorrect data check"), "%s", msg);
}
END_TEST

/* ---- synthetic and shuffle ---- */

static dt_source_spec synth(uint64_t seed, long n)
{
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_SYNTHETIC;
        s.n = n;
        s.seed = seed;
        s.noise = 1.0;
        return s;
}

START_TEST(synthetic_deterministic_learnable)
{
        dt_data_spec d = identity();
        d.train = synth(7, 2000);
        d.test = synth(7, 500);
        dt_shape in16 = { .n = 1, .d = {16} };
        dt_dataset a, b, t;
        ck_assert(!dt_dataset_load(&a, &d.train, &d, &in16, 10, msg, sizeof msg));
        ck_assert(!dt_dataset_load(&b, &d.train, &d, &in16, 10, msg, sizeof msg));
        ck_assert(!dt_dataset_load(&t, &d.test, &d, &in16, 10, msg, sizeof msg));
        ck_assert_int_eq(a.n, 2000);
        ck_assert_int_eq(a.classes, 10);
        ck_assert(!memcmp(a.x, b.x, a.n * a.dim * sizeof(float)));
        ck_assert(!memcmp(a.label, b.label, a.n * sizeof(int32_t)));
        ck_assert(memcmp(a.x, t.x, t.n * t.dim * sizeof(float)));        /* other samples */
        /* balanced labels */
        int cnt[10] = {0};
        for (long i = 0; i < a.n; i++) cnt[a.label[i]]++;
        for (int c = 0; c < 10; c++) ck_assert_int_eq(cnt[c], 200);
        /* nearest class mean from the training set classifies the test set: learnable */
        double mu[10][16] = {{0}};
        for (long i = 0; i < a.n; i++)
                for (int k = 0; k < 16; k++) mu[a.label[i]][k] += a.x[i * 16 + k] / 200.0;
        int ok = 0;
        for (long i = 0; i < t.n; i++) {
                int best = 0;
                double bd = INFINITY;
                for (int c = 0; c < 10; c++) {
                        double dd = 0;
                        for (int k = 0; k < 16; k++) dd += pow(t.x[i * 16 + k] - mu[c][k], 2);
                        if (dd < bd) { bd = dd; best = c; }
                }
                ok += best == t.label[i];
        }
        ck_assert_msg(ok > 0.9 * t.n, "nearest-mean accuracy %d/%ld", ok, t.n);
        dt_dataset_free(&b);
        d.train.seed = 8;
        ck_assert(!dt_dataset_load(&b, &d.train, &d, &in16, 10, msg, sizeof msg));
        ck_assert(memcmp(a.x, b.x, a.n * a.dim * sizeof(float)));
        dt_dataset_free(&a);
        dt_dataset_free(&b);
        dt_dataset_free(&t);
}
END_TEST

START_TEST(shuffle_perm)
{
        enum { N = 1000 };
        long p[N], q[N], r[N];
        char seen[N] = {0};
        dt_shuffle(p, N, 42, 3);
        dt_shuffle(q, N, 42, 3);
        dt_shuffle(r, N, 42, 4);
        ck_assert(!memcmp(p, q, sizeof p));
        ck_assert(memcmp(p, r, sizeof p));
        int fixed = 0;
        for (int i = 0; i < N; i++) {
                ck_assert(p[i] >= 0 && p[i] < N && !seen[p[i]]);
                seen[p[i]] = 1;
                fixed += p[i] == i;
        }
        ck_assert_int_lt(fixed, 10);    /* about 1 expected */
        dt_shuffle(q, N, 43, 3);
        ck_assert(memcmp(p, q, sizeof p));
        dt_shuffle(p, 1, 1, 1);
        ck_assert_int_eq(p[0], 0);
        dt_shuffle(p, 0, 1, 1);
}
END_TEST

START_TEST(gather)
{
        write_small_idx(tpath("i"), tpath("l"));
        dt_source_spec s = idx_src(tpath("i"), tpath("l"));
        dt_data_spec d = identity();
        dt_dataset ds;
        ck_assert(!dt_dataset_load(&ds, &s, &d, &in6, 3, msg, sizeof msg));
        long idx[2] = {4, 1};
        float x[12];
        int32_t y[2];
        dt_dataset_gather(&ds, idx, 2, x, y, NULL);
        ck_assert_float_eq(x[0], 40);
        ck_assert_float_eq(x[11], 15);
        ck_assert_int_eq(y[0], 1);
        ck_assert_int_eq(y[1], 1);
        dt_dataset_free(&ds);
}
END_TEST


/* ---- augmentation and the loader ---- */

/* crop 1 + flip on a (1, 3, 4) image: every draw is a shifted, maybe mirrored copy with the fill
 * outside; the same (seed, epoch, index) draws the same, and over many indices every shift and
 * both mirrorings occur */
START_TEST(augment_geometry)
{
        dt_augment a = { .crop = 1, .flip = 1 };
        dt_shape in = { .n = 3, .d = {1, 3, 4} };
        float src[12], x[12], y[12], tmp[12], fill[1] = { -9 };
        for (int i = 0; i < 12; i++) src[i] = (float)i;
        int seen[3][3][2] = {{{0}}};
        for (long idx = 0; idx < 400; idx++) {
                memcpy(x, src, sizeof x);
                dt_augment_sample(&a, &in, fill, 5, 2, idx, x, tmp);
                memcpy(y, src, sizeof y);
                dt_augment_sample(&a, &in, fill, 5, 2, idx, y, tmp);
                ck_assert(!memcmp(x, y, sizeof x));    /* a pure function of (seed, epoch, index) */
                int found = 0;
                for (int dy = 0; dy < 3 && !found; dy++)
                        for (int dx = 0; dx < 3 && !found; dx++)
                                for (int f = 0; f < 2 && !found; f++) {
                                        int ok = 1;
                                        for (int r = 0; r < 3 && ok; r++)
                                                for (int c = 0; c < 4 && ok; c++) {
                                                        int sy = r + dy - 1, sx = (f ? 3 - c : c) + dx - 1;
                                                        float want = sy >= 0 && sy < 3 && sx >= 0 && sx < 4 ? src[sy * 4 + sx] : -9;
                                                        ok = x[r * 4 + c] == want;
                                                }
                                        if (ok) { seen[dy][dx][f]++; found = 1; }
                                }
                ck_assert_msg(found, "sample %ld is not a crop of the padded image", idx);
        }
        for (int dy = 0; dy < 3; dy++)
                for (int dx = 0; dx < 3; dx++)
                        for (int f = 0; f < 2; f++) ck_assert_int_gt(seen[dy][dx][f], 5);
        /* another epoch draws otherwise */
        int differ = 0;
        for (long idx = 0; idx < 50; idx++) {
                memcpy(x, src, sizeof x);
                memcpy(y, src, sizeof y);
                dt_augment_sample(&a, &in, fill, 5, 2, idx, x, tmp);
                dt_augment_sample(&a, &in, fill, 5, 3, idx, y, tmp);
                differ += memcmp(x, y, sizeof x) != 0;
        }
        ck_assert_int_gt(differ, 25);
        char why[256];
        dt_shape flat = { .n = 1, .d = {12} };
        ck_assert_int_eq(dt_augment_check(&a, &flat, why, sizeof why), -1);
        ck_assert_ptr_nonnull(strstr(why, "needs an image input"));
}
END_TEST

static void whole_range(void *ud, int B, int *lo, int *hi)
{
        (void)ud;
        *lo = B / 4;            /* a rank's slice: the second quarter to the end */
        *hi = B;
}

/* the loader thread hands out, batch by batch, exactly what the synchronous loader prepares */
START_TEST(loader_thread_equals_sync)
{
        float f[200 * 6];
        for (int i = 0; i < 200 * 6; i++) f[i] = (float)(i % 97) - 40.0f;
        write_idx(tpath("x.idx"), 0x0D, 2, (unsigned[]){200, 6}, f, sizeof f);
        unsigned char lab[200];
        for (int i = 0; i < 200; i++) lab[i] = (unsigned char)(i % 3);
        write_idx(tpath("y.idx"), 0x08, 1, (unsigned[]){200}, lab, sizeof lab);
        dt_source_spec s = idx_src(tpath("x.idx"), tpath("y.idx"));
        dt_data_spec d = identity();
        dt_shape in = { .n = 2, .d = {2, 3} };
        d.augment.crop = 1;
        d.augment.flip = 1;
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in, 3, msg, sizeof msg), "%s", msg);
        long perm[200];
        dt_shuffle(perm, 200, 11, 4);
        dt_loader *L0 = dt_loader_new(&ds, 0, 8, whole_range, NULL), *L1 = dt_loader_new(&ds, 3, 8, whole_range, NULL);
        dt_loader_start(L0, perm, 200, 30, 32, 11, 4, 1);       /* from a mid-epoch cursor, last batch short */
        dt_loader_start(L1, perm, 200, 30, 32, 11, 4, 1);
        for (long pos = 30; pos < 200; pos += 32) {
                const dt_batch *a = dt_loader_next(L0), *b = dt_loader_next(L1);
                ck_assert_int_eq(a->start, pos);
                ck_assert_int_eq(b->start, pos);
                ck_assert_int_eq(a->B, (int)DT_MIN(32, 200 - pos));
                ck_assert_int_eq(a->lo, a->B / 4);
                ck_assert_int_eq(b->hi, b->B);
                int k = a->hi - a->lo;
                ck_assert(!memcmp(a->x, b->x, (size_t)k * 6 * sizeof(float)));
                ck_assert(!memcmp(a->y, b->y, (size_t)k * sizeof(int32_t)));
                /* the same bytes as a training gather of those positions */
                float x[32 * 6];
                int32_t y[32];
                ck_assert(!dt_dataset_gather_train(&ds, perm + pos + a->lo, k, 11, 4, x, y, NULL, msg, sizeof msg));
                ck_assert(!memcmp(a->x, x, (size_t)k * 6 * sizeof(float)));
                dt_loader_release(L0);
                dt_loader_release(L1);
        }
        dt_loader_stop(L1);     /* then a new epoch on the same loaders */
        dt_shuffle(perm, 200, 11, 5);
        dt_loader_start(L1, perm, 200, 0, 50, 11, 5, 0);
        const dt_batch *b = dt_loader_next(L1);
        float x[50 * 6];
        dt_dataset_gather(&ds, perm + b->lo, b->hi - b->lo, x, NULL, NULL);
        ck_assert(!memcmp(b->x, x, (size_t)(b->hi - b->lo) * 6 * sizeof(float)));
        dt_loader_release(L1);
        dt_loader_free(L0);
        dt_loader_free(L1);
        dt_dataset_free(&ds);
}
END_TEST

/* a loader reading one part (a pipeline's first stage: inputs; its last: labels) holds that part
 * with the bytes a loader of both holds, and nothing of the other */
START_TEST(loader_parts)
{
        float f[100 * 6];
        for (int i = 0; i < 100 * 6; i++) f[i] = (float)(i % 89) - 30.0f;
        write_idx(tpath("xp.idx"), 0x0D, 2, (unsigned[]){100, 6}, f, sizeof f);
        unsigned char lab[100];
        for (int i = 0; i < 100; i++) lab[i] = (unsigned char)(i % 3);
        write_idx(tpath("yp.idx"), 0x08, 1, (unsigned[]){100}, lab, sizeof lab);
        dt_source_spec s = idx_src(tpath("xp.idx"), tpath("yp.idx"));
        dt_data_spec d = identity();
        dt_shape in = { .n = 2, .d = {2, 3} };
        d.augment.flip = 1;
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in, 3, msg, sizeof msg), "%s", msg);
        long perm[100];
        dt_shuffle(perm, 100, 7, 2);
        dt_loader *L[4] = { dt_loader_new(&ds, 2, 8, whole_range, NULL),
                            dt_loader_new_parts(&ds, 2, 8, DT_LOAD_INPUTS, whole_range, NULL),
                            dt_loader_new_parts(&ds, 0, 8, DT_LOAD_LABELS, whole_range, NULL),
                            dt_loader_new_parts(&ds, 2, 8, 0, whole_range, NULL) };
        for (int i = 0; i < 4; i++) dt_loader_start(L[i], perm, 100, 0, 32, 7, 2, 1);
        for (long pos = 0; pos < 100; pos += 32) {
                const dt_batch *b[4];
                for (int i = 0; i < 4; i++) b[i] = dt_loader_next(L[i]);
                int k = b[0]->hi - b[0]->lo;
                ck_assert(b[1]->x && !b[1]->y && !memcmp(b[0]->x, b[1]->x, (size_t)k * 6 * sizeof(float)));
                ck_assert(!b[2]->x && b[2]->y && !memcmp(b[0]->y, b[2]->y, (size_t)k * sizeof(int32_t)));
                ck_assert(!b[3]->x && !b[3]->y);
                for (int i = 0; i < 4; i++) dt_loader_release(L[i]);
        }
        for (int i = 0; i < 4; i++) dt_loader_free(L[i]);
        dt_dataset_free(&ds);
}
END_TEST

/* a CSV is parsed once: the second load reads the cache, and a changed file is parsed again */
START_TEST(csv_cache)
{
        const char *t = "1,2,0\n3,4,1\n";
        write_file(tpath("c.csv"), t, strlen(t));
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_CSV;
        s.label_column = -1;
        snprintf(s.images, sizeof s.images, "%s", tpath("c.csv"));
        dt_data_spec d = identity();
        dt_shape in2 = { .n = 1, .d = {2} };
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in2, 2, msg, sizeof msg), "%s", msg);
        ck_assert_float_eq(xs_all(&ds)[2], 3.0f);
        dt_dataset_free(&ds);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls %s/cache/c.csv-*.dtcache >/dev/null 2>&1", tmp);
        ck_assert_int_eq(system(cmd), 0);
        sleep(1);       /* another mtime */
        t = "1,2,0\n7,4,1\n5,5,1\n";
        write_file(tpath("c.csv"), t, strlen(t));
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in2, 2, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 3);
        ck_assert_float_eq(xs_all(&ds)[2], 7.0f);
        xs_all(NULL);
        dt_dataset_free(&ds);
}
END_TEST

/* ---- Fashion-MNIST, when installed ---- */

START_TEST(fashion_mnist)
{
        const char *dir = "/usr/share/datasets/fashion-mnist";
        if (access(dir, R_OK)) return;
        dt_source_spec s = idx_src("fashion-mnist/t10k-images-idx3-ubyte.gz",
                                   "fashion-mnist/t10k-labels-idx1-ubyte.gz");
        dt_data_spec d;
        memset(&d, 0, sizeof d);
        d.classes = 10;
        d.std = 1;
        dt_shape in784 = { .n = 1, .d = {784} };
        dt_dataset ds;
        ck_assert_msg(!dt_dataset_load(&ds, &s, &d, &in784, 10, msg, sizeof msg), "%s", msg);
        ck_assert_int_eq(ds.n, 10000);
        ck_assert_int_eq(ds.shape.n, 2);
        ck_assert_int_eq(ds.shape.d[0], 28);
        int cnt[10] = {0};
        float lo = 1, hi = 0;
        for (long i = 0; i < ds.n; i++) cnt[ds.label[i]]++;
        const float *x = xs_all(&ds);
        for (size_t i = 0; i < ds.n * ds.dim; i++) {
                lo = fminf(lo, x[i]);
                hi = fmaxf(hi, x[i]);
        }
        xs_all(NULL);
        for (int c = 0; c < 10; c++) ck_assert_int_eq(cnt[c], 1000);
        ck_assert_float_eq(lo, 0.0f);
        ck_assert_float_eq(hi, 1.0f);
        dt_dataset_free(&ds);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("data");
        TCase *tc = tcase_create("data");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, idx_plain);
        tcase_add_test(tc, idx_gzip);
        tcase_add_test(tc, mapped_probe);
        tcase_add_test(tc, idx_float32_and_default_scale);
        tcase_add_test(tc, idx_truncated);
        tcase_add_test(tc, idx_bad_magic);
        tcase_add_test(tc, idx_absurd_dims);
        tcase_add_test(tc, idx_count_mismatch);
        tcase_add_test(tc, shape_and_classes);
        tcase_add_test(tc, missing_file);
        tcase_add_test(tc, resolve);
        tcase_add_test(tc, csv_ok);
        tcase_add_test(tc, csv_errors);
        tcase_add_test(tc, npy_ok);
        tcase_add_test(tc, npy_errors);
        tcase_add_test(tc, csv_nul_row);
        tcase_add_test(tc, csv_strict_numbers);
        tcase_add_test(tc, nonfinite_values);
        tcase_add_test(tc, gzip_integrity);
        tcase_add_test(tc, trailing_data);
        tcase_add_test(tc, synthetic_deterministic_learnable);
        tcase_add_test(tc, shuffle_perm);
        tcase_add_test(tc, gather);
        tcase_add_test(tc, augment_geometry);
        tcase_add_test(tc, loader_thread_equals_sync);
        tcase_add_test(tc, loader_parts);
        tcase_add_test(tc, csv_cache);
        tcase_add_test(tc, fashion_mnist);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
