/* tests/unit/test_text.c - sequence data: text sources (windows, next-byte labels, directory
 * order, holdout split, shared vocabulary, limit, gather of per-step labels, overlapping windows
 * with stride < seq_len), their spec keys and
 * "does not apply" errors, and idx images read as rows (sequence: rows). Files live in a
 * temporary directory per test. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_int.h"

/* value i of all samples laid end to end (windows are made per batch: gather the one holding it) */
static float X(const dt_dataset *ds, size_t i)
{
        long k = (long)(i / ds->dim);
        float *w = dt_falloc(ds->dim);
        dt_dataset_gather(ds, &k, 1, w, NULL, NULL);
        float v = w[i % ds->dim];
        free(w);
        return v;
}

/* label i of all samples laid end to end */
static int32_t LB(const dt_dataset *ds, size_t i)
{
        size_t lr = (size_t)ds->label_rows;
        long k = (long)(i / lr);
        int32_t *y = dt_malloc(lr * sizeof *y);
        dt_dataset_gather(ds, &k, 1, NULL, y, NULL);
        int32_t v = y[i % lr];
        free(y);
        return v;
}
#include "spec/model_spec.h"

static char tmp[256];
static char msg[4096];

static void setup(void)
{
        strcpy(tmp, "/tmp/dt_test_text.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp));
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

static void write_file(const char *path, const void *data, size_t n)
{
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
        ck_assert_int_eq(fclose(f), 0);
}

static void write_str(const char *path, const char *s)
{
        write_file(path, s, strlen(s));
}

/* a text source over path with seq_len T */
static dt_source_spec text_src(const char *path, int T, double holdout, dt_text_part part)
{
        dt_source_spec s;
        memset(&s, 0, sizeof s);
        s.present = 1;
        s.format = DT_FMT_TEXT;
        snprintf(s.images, sizeof s.images, "%s", path);
        s.seq_len = T;
        s.holdout = holdout;
        s.part = part;
        return s;
}

static dt_shape shape1(int a)
{
        dt_shape s = { 1, { a } };
        return s;
}

/* the id of byte c in ds's vocabulary */
static int id_of(const dt_dataset *ds, unsigned char c)
{
        for (int i = 0; i < ds->nvocab; i++)
                if (ds->vocab[i] == c) return i;
        return -1;
}

START_TEST(test_windows_and_labels)
{
        const char *p = tpath("t.txt");
        write_str(p, "hello world!");
        dt_data_spec data = { 0 };
        dt_source_spec src = text_src(p, 3, 0.0, DT_TEXT_TRAIN);
        dt_shape in = shape1(3);
        dt_dataset ds;
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        /* 12 bytes, windows need T + 1: (12 - 1) / 3 = 3 */
        ck_assert_int_eq(ds.n, 3);
        ck_assert_uint_eq(ds.dim, 3);
        ck_assert_int_eq(ds.label_rows, 3);
        ck_assert_int_eq(ds.shape.n, 1);
        ck_assert_int_eq(ds.shape.d[0], 3);
        ck_assert_ptr_null(ds.target);
        /* sorted distinct bytes: ' ' '!' d e h l o r w */
        ck_assert_int_eq(ds.nvocab, 9);
        ck_assert_int_eq(ds.classes, 9);
        ck_assert(!memcmp(ds.vocab, " !dehlorw", 9));
        const char *txt = "hello world!";
        for (int k = 0; k < 3; k++)
                for (int t = 0; t < 3; t++) {
                        ck_assert_float_eq(X(&ds, k * 3 + t), (float)id_of(&ds, (unsigned char)txt[3 * k + t]));
                        ck_assert_int_eq(LB(&ds, k * 3 + t), id_of(&ds, (unsigned char)txt[3 * k + t + 1]));
                }
        /* gather copies every step's label */
        long idx[2] = { 2, 0 };
        float x[6];
        int32_t y[6];
        dt_dataset_gather(&ds, idx, 2, x, y, NULL);
        ck_assert_float_eq(x[0], (float)id_of(&ds, 'w'));
        ck_assert_int_eq(y[0], id_of(&ds, 'o'));
        ck_assert_int_eq(y[2], id_of(&ds, 'l'));
        ck_assert_int_eq(y[3], id_of(&ds, 'e'));
        ck_assert_int_eq(y[5], id_of(&ds, 'l'));
        dt_dataset_free(&ds);

        /* no normalisation of ids, whatever data says */
        data.scale = 0.5;
        data.scale_given = 1;
        data.mean = 3;
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_float_eq(X(&ds, 0), (float)id_of(&ds, 'h'));
        dt_dataset_free(&ds);

        /* limit */
        src.limit = 2;
        memset(&data, 0, sizeof data);
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.n, 2);
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(test_text_errors)
{
        const char *p = tpath("t.txt");
        write_str(p, "abcabcabca");
        dt_data_spec data = { 0 };
        dt_dataset ds;
        /* the model input must be (seq_len) */
        dt_source_spec src = text_src(p, 4, 0.0, DT_TEXT_TRAIN);
        dt_shape in = shape1(5);
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "seq_len"));
        /* too short for one window */
        src = text_src(p, 10, 0.0, DT_TEXT_TRAIN);
        in = shape1(10);
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "fewer than seq_len + 1"));
        /* more distinct bytes than the model outputs */
        src = text_src(p, 3, 0.0, DT_TEXT_TRAIN);
        in = shape1(3);
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 2, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "3 distinct bytes"));
        /* regression losses make no sense on next-byte labels */
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 0, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "softmax_cross_entropy"));
        /* a missing path names itself */
        src = text_src(tpath("nope"), 3, 0.0, DT_TEXT_TRAIN);
        ck_assert_int_eq(dt_dataset_missing(&src), 1);
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "cannot find data file"));
        /* an empty directory */
        ck_assert_int_eq(mkdir(tpath("empty"), 0755), 0);
        src = text_src(tpath("empty"), 3, 0.0, DT_TEXT_TRAIN);
        ck_assert_int_eq(dt_dataset_missing(&src), 0);
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "no regular files"));
}
END_TEST

START_TEST(test_directory_order)
{
        ck_assert_int_eq(mkdir(tpath("d"), 0755), 0);
        ck_assert_int_eq(mkdir(tpath("d/sub"), 0755), 0);
        ck_assert_int_eq(mkdir(tpath("d/a"), 0755), 0);
        write_str(tpath("d/b.txt"), "BB");
        write_str(tpath("d/sub/c.txt"), "CC");
        write_str(tpath("d/a.txt"), "AA");
        write_str(tpath("d/a/z"), "ZZ");
        write_str(tpath("d/0"), "00");
        ck_assert_int_eq(symlink("b.txt", tpath("d/link")), 0);   /* links are skipped */
        unsigned char *buf;
        size_t len;
        ck_assert_msg(dt_text_read(tpath("d"), &buf, &len, msg, sizeof msg) == 0, "%s", msg);
        /* strcmp order of the paths: d/0 < d/a.txt < d/a/z < d/b.txt < d/sub/c.txt */
        ck_assert_uint_eq(len, 10);
        ck_assert(!memcmp(buf, "00AAZZBBCC", 10));
        free(buf);

        /* a single file reads as itself; the directory resolves through the data path */
        ck_assert(dt_text_read(tpath("d/b.txt"), &buf, &len, msg, sizeof msg) == 0);
        ck_assert_uint_eq(len, 2);
        free(buf);
        char out[DT_PATH_MAX];
        ck_assert_int_eq(dt_data_resolve(tmp, "d", out, sizeof out), -1);
        ck_assert_int_eq(dt_data_resolve_any(tmp, "d", out, sizeof out), 0);
        ck_assert_str_eq(out, tpath("d"));

        /* loading the directory: windows run across file boundaries */
        dt_data_spec data = { 0 };
        dt_source_spec src = text_src(tpath("d"), 3, 0.0, DT_TEXT_TRAIN);
        dt_shape in = shape1(3);
        dt_dataset ds;
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_int_eq(ds.n, 3);
        ck_assert_int_eq(ds.nvocab, 5);
        ck_assert_float_eq(X(&ds, 3), (float)id_of(&ds, 'A'));  /* window 1 = "AZZ", labels "ZZB" */
        ck_assert_float_eq(X(&ds, 5), (float)id_of(&ds, 'Z'));
        ck_assert_int_eq(LB(&ds, 5), id_of(&ds, 'B'));
        dt_dataset_free(&ds);
}
END_TEST

START_TEST(test_holdout_split)
{
        enum { L = 1000, T = 10 };
        unsigned char text[L];
        for (int i = 0; i < L; i++) text[i] = (unsigned char)('a' + (i * 7) % 26);
        text[L - 1] = '#';      /* only in the holdout part */
        write_file(tpath("t.txt"), text, L);
        dt_data_spec data = { 0 };
        dt_shape in = shape1(T);
        dt_dataset tr, ho;
        dt_source_spec s1 = text_src(tpath("t.txt"), T, 0.1, DT_TEXT_TRAIN);
        dt_source_spec s2 = text_src(tpath("t.txt"), T, 0.1, DT_TEXT_HOLDOUT);
        ck_assert_msg(dt_dataset_load(&tr, &s1, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_msg(dt_dataset_load(&ho, &s2, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        /* train: bytes [0, 900) -> 899 / 10 = 89 windows; holdout: [900, 1000) -> 99 / 10 = 9 */
        ck_assert_int_eq(tr.n, 89);
        ck_assert_int_eq(ho.n, 9);
        /* one vocabulary for the whole text: '#' has an id in both */
        ck_assert_int_eq(tr.nvocab, 27);
        ck_assert_int_eq(ho.nvocab, 27);
        ck_assert(!memcmp(tr.vocab, ho.vocab, 27));
        ck_assert_int_eq(id_of(&tr, '#'), 0);
        ck_assert_float_eq(X(&ho, 0), (float)id_of(&ho, text[900]));
        ck_assert_int_eq(LB(&ho, 0), id_of(&ho, text[901]));
        /* the last training label stays inside the training part */
        ck_assert_int_eq(LB(&tr, 89 * T - 1), id_of(&tr, text[890]));
        /* the last holdout window ends before the final byte: its labels reach byte 990 */
        ck_assert_int_eq(LB(&ho, 9 * T - 1), id_of(&ho, text[990]));
        dt_dataset_free(&tr);
        dt_dataset_free(&ho);

        /* holdout 0: an empty holdout part is an error, naming the part */
        s2.holdout = 0;
        ck_assert_int_eq(dt_dataset_load(&ho, &s2, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "holdout part has 0 bytes"));
        /* holdout 0.5 splits in halves */
        s1.holdout = s2.holdout = 0.5;
        ck_assert(dt_dataset_load(&tr, &s1, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert(dt_dataset_load(&ho, &s2, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(tr.n, 49);
        ck_assert_int_eq(ho.n, 49);
        dt_dataset_free(&tr);
        dt_dataset_free(&ho);
}
END_TEST

START_TEST(test_stride)
{
        const char *p = tpath("t.txt");
        const char *txt = "hello world!";
        write_str(p, txt);
        dt_data_spec data = { 0 };
        dt_shape in = shape1(3);
        dt_dataset ds;
        /* stride 1: a window at every byte whose labels fit, (12 - 1 - 3) / 1 + 1 = 9 */
        dt_source_spec src = text_src(p, 3, 0.0, DT_TEXT_TRAIN);
        src.stride = 1;
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_int_eq(ds.n, 9);
        ck_assert_uint_eq(ds.dim, 3);
        ck_assert_int_eq(ds.label_rows, 3);
        for (int k = 0; k < 9; k++)
                for (int t = 0; t < 3; t++) {
                        ck_assert_float_eq(X(&ds, k * 3 + t), (float)id_of(&ds, (unsigned char)txt[k + t]));
                        ck_assert_int_eq(LB(&ds, k * 3 + t), id_of(&ds, (unsigned char)txt[k + t + 1]));
                }
        /* the last window is "rld", labels "ld!": the final byte is a label, never an input */
        ck_assert_int_eq(LB(&ds, 8 * 3 + 2), id_of(&ds, '!'));
        dt_dataset_free(&ds);
        /* stride 2: windows at 0, 2, 4, 6, 8: (12 - 1 - 3) / 2 + 1 = 5 */
        src.stride = 2;
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_int_eq(ds.n, 5);
        for (int k = 0; k < 5; k++)
                for (int t = 0; t < 3; t++) {
                        ck_assert_float_eq(X(&ds, k * 3 + t), (float)id_of(&ds, (unsigned char)txt[2 * k + t]));
                        ck_assert_int_eq(LB(&ds, k * 3 + t), id_of(&ds, (unsigned char)txt[2 * k + t + 1]));
                }
        dt_dataset_free(&ds);
        /* stride = seq_len and stride 0 (unset) are the non-overlapping windows: (12 - 1) / 3 = 3 */
        src.stride = 3;
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.n, 3);
        ck_assert_float_eq(X(&ds, 3), (float)id_of(&ds, 'l'));
        dt_dataset_free(&ds);
        src.stride = 0;
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.n, 3);
        dt_dataset_free(&ds);
        /* limit counts windows */
        src.stride = 1;
        src.limit = 4;
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.n, 4);
        ck_assert_float_eq(X(&ds, 3 * 3), (float)id_of(&ds, 'l'));  /* window 3 = "lo " */
        dt_dataset_free(&ds);
        src.limit = 0;
        /* a stride longer than the window would skip bytes */
        src.stride = 4;
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "stride 4 is larger than seq_len 3"));
        /* exactly seq_len + 1 bytes: one window whatever the stride */
        write_str(p, "abcd");
        src.stride = 1;
        ck_assert(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.n, 1);
        dt_dataset_free(&ds);
        write_str(p, "abc");
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &in, 256, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "fewer than seq_len + 1"));
}
END_TEST

START_TEST(test_stride_holdout)
{
        enum { L = 1000, T = 10, S = 4 };
        unsigned char text[L];
        for (int i = 0; i < L; i++) text[i] = (unsigned char)('a' + (i * 7) % 26);
        text[L - 1] = '#';
        write_file(tpath("t.txt"), text, L);
        dt_data_spec data = { 0 };
        dt_shape in = shape1(T);
        dt_dataset tr, ho;
        dt_source_spec s1 = text_src(tpath("t.txt"), T, 0.1, DT_TEXT_TRAIN);
        dt_source_spec s2 = text_src(tpath("t.txt"), T, 0.1, DT_TEXT_HOLDOUT);
        s1.stride = s2.stride = S;
        ck_assert_msg(dt_dataset_load(&tr, &s1, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_msg(dt_dataset_load(&ho, &s2, &data, &in, 256, msg, sizeof msg) == 0, "%s", msg);
        /* train: [0, 900) -> (900 - 1 - 10) / 4 + 1 = 223; holdout: [900, 1000) -> 89 / 4 + 1 = 23 */
        ck_assert_int_eq(tr.n, 223);
        ck_assert_int_eq(ho.n, 23);
        for (int k = 0; k < 223; k++)
                for (int t = 0; t < T; t++) {
                        ck_assert_float_eq(X(&tr, k * T + t), (float)id_of(&tr, text[S * k + t]));
                        ck_assert_int_eq(LB(&tr, k * T + t), id_of(&tr, text[S * k + t + 1]));
                }
        for (int k = 0; k < 23; k++)
                for (int t = 0; t < T; t++) {
                        ck_assert_float_eq(X(&ho, k * T + t), (float)id_of(&ho, text[900 + S * k + t]));
                        ck_assert_int_eq(LB(&ho, k * T + t), id_of(&ho, text[900 + S * k + t + 1]));
                }
        /* the last training window starts at 888: its last label, byte 898, stays in the part */
        ck_assert_int_eq(LB(&tr, 223 * T - 1), id_of(&tr, text[898]));
        /* the last holdout window starts at 988, its labels reach byte 998 */
        ck_assert_int_eq(LB(&ho, 23 * T - 1), id_of(&ho, text[998]));
        dt_dataset_free(&tr);
        dt_dataset_free(&ho);
        /* stride 1 on the holdout part: 100 - 10 = 90 windows, the last label the final byte */
        s2.stride = 1;
        ck_assert(dt_dataset_load(&ho, &s2, &data, &in, 256, msg, sizeof msg) == 0);
        ck_assert_int_eq(ho.n, 90);
        ck_assert_int_eq(LB(&ho, 90 * T - 1), id_of(&ho, '#'));
        dt_dataset_free(&ho);
}
END_TEST

/* ---- idx images as sequences ---- */

static void write_idx(const char *path, int ndim, const unsigned *dims, size_t n)
{
        unsigned char *b = calloc(1, 4 + 4 * (size_t)ndim + n);
        b[2] = 0x08;
        b[3] = (unsigned char)ndim;
        for (int i = 0; i < ndim; i++) {
                b[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
                b[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
                b[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
                b[7 + 4 * i] = (unsigned char)dims[i];
        }
        for (size_t i = 0; i < n; i++) b[4 + 4 * ndim + i] = (unsigned char)i;
        write_file(path, b, 4 + 4 * (size_t)ndim + n);
        free(b);
}

START_TEST(test_sequence_rows)
{
        unsigned d3[3] = { 2, 4, 3 }, d4[4] = { 2, 1, 4, 3 }, d1[1] = { 2 };
        write_idx(tpath("img"), 3, d3, 24);
        write_idx(tpath("img4"), 4, d4, 24);
        write_idx(tpath("lab"), 1, d1, 2);
        dt_data_spec data = { 0 };
        dt_source_spec src;
        memset(&src, 0, sizeof src);
        src.present = 1;
        src.format = DT_FMT_IDX;
        src.sequence = DT_SEQ_ROWS;
        snprintf(src.images, sizeof src.images, "%s", tpath("img"));
        snprintf(src.labels, sizeof src.labels, "%s", tpath("lab"));
        dt_shape in = { 2, { 4, 3 } };
        dt_dataset ds;
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 2, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_int_eq(ds.shape.n, 2);
        ck_assert_int_eq(ds.shape.d[0], 4);
        ck_assert_int_eq(ds.shape.d[1], 3);
        ck_assert_int_eq(ds.label_rows, 1);
        ck_assert_int_eq(ds.nvocab, 0);
        dt_dataset_free(&ds);
        /* (1, H, W) images drop the channel */
        snprintf(src.images, sizeof src.images, "%s", tpath("img4"));
        ck_assert_msg(dt_dataset_load(&ds, &src, &data, &in, 2, msg, sizeof msg) == 0, "%s", msg);
        ck_assert_int_eq(ds.shape.n, 2);
        ck_assert_int_eq(ds.shape.d[0], 4);
        dt_dataset_free(&ds);
        /* a flat model input is refused, with the fix */
        dt_shape flat = { 1, { 12 } };
        ck_assert_int_eq(dt_dataset_load(&ds, &src, &data, &flat, 2, msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "use input: [4, 3]"));
        /* without sequence: rows, the flat input still takes the images */
        src.sequence = DT_SEQ_NONE;
        ck_assert(dt_dataset_load(&ds, &src, &data, &flat, 2, msg, sizeof msg) == 0);
        ck_assert_int_eq(ds.label_rows, 1);
        dt_dataset_free(&ds);
}
END_TEST

/* ---- spec keys ---- */

/* The model input and the test source take the train source's seq_len (64 by default): windows
 * that do not fit the input are a spec error of their own (test_spec_fits_model). */
static int load_spec(const char *source_line, const char *extra, dt_model_spec *s, dt_diag *d)
{
        char text[2048];
        const char *q = strstr(source_line, "seq_len: ");
        long T = q ? strtol(q + 9, NULL, 10) : 64;
        snprintf(text, sizeof text,
                 "name: t\ninput: [%ld]\nlayers:\n  - {type: fc, units: 4}\n"
                 "data:\n  train: %s\n  test: {format: text, path: corpus, seq_len: %ld}\n%s", T > 0 ? T : 64,
                 source_line, T, extra);
        const char *p = tpath("m.yaml");
        write_str(p, text);
        return dt_model_spec_load(s, p, d);
}

static int diag_has(const dt_diag *d, const char *needle)
{
        for (int i = 0; i < d->n; i++)
                if (strstr(d->msgs[i].text, needle)) return 1;
        return 0;
}

START_TEST(test_spec_keys)
{
        dt_model_spec s;
        dt_diag d = { 0 };
        ck_assert_int_eq(mkdir(tpath("corpus"), 0755), 0);
        write_str(tpath("corpus/a"), "abc");
        /* defaults: seq_len 64, holdout 0.1, part train / holdout by source; a directory resolves */
        ck_assert_int_eq(load_spec("{format: text, path: corpus}", "", &s, &d), 0);
        ck_assert_int_eq(s.data.train.format, DT_FMT_TEXT);
        ck_assert_int_eq(s.data.train.seq_len, 64);
        ck_assert(s.data.train.holdout == 0.1);
        ck_assert_int_eq(s.data.train.part, DT_TEXT_TRAIN);
        ck_assert_int_eq(s.data.test.part, DT_TEXT_HOLDOUT);
        ck_assert_str_eq(s.data.train.images, tpath("corpus"));
        ck_assert_int_eq(s.data.train.sequence, DT_SEQ_NONE);
        ck_assert_int_eq(s.data.train.stride, 64);      /* stride defaults to seq_len */
        dt_model_spec_free(&s);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, seq_len: 8, holdout: 0.5, part: holdout}", "",
                                   &s, &d), 0);
        ck_assert_int_eq(s.data.train.seq_len, 8);
        ck_assert_int_eq(s.data.train.stride, 8);
        ck_assert(s.data.train.holdout == 0.5);
        ck_assert_int_eq(s.data.train.part, DT_TEXT_HOLDOUT);
        dt_model_spec_free(&s);
        /* stride: 1..seq_len */
        ck_assert_int_eq(load_spec("{format: text, path: corpus, seq_len: 8, stride: 3}", "", &s, &d), 0);
        ck_assert_int_eq(s.data.train.stride, 3);
        ck_assert_int_eq(s.data.test.stride, 8);
        dt_model_spec_free(&s);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, seq_len: 8, stride: 8}", "", &s, &d), 0);
        ck_assert_int_eq(s.data.train.stride, 8);
        dt_model_spec_free(&s);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, seq_len: 8, stride: 9}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "'stride' (9) is larger than 'seq_len' (8)"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, stride: 65}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "'stride' (65) is larger than 'seq_len' (64)"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, stride: 0}", "", &s, &d), -1);
        dt_diag_free(&d);
        /* ranges */
        ck_assert_int_eq(load_spec("{format: text, path: corpus, seq_len: 0}", "", &s, &d), -1);
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, holdout: 0.6}", "", &s, &d), -1);
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: text, path: corpus, part: test}", "", &s, &d), -1);
        dt_diag_free(&d);
        /* path is required */
        ck_assert_int_eq(load_spec("{format: text}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "missing required key 'path' for format 'text'"));
        dt_diag_free(&d);
        /* keys of other formats, and normalisation, do not apply */
        ck_assert_int_eq(load_spec("{format: text, path: corpus, header: true, sequence: rows}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "key 'header' does not apply to format 'text'"));
        ck_assert(diag_has(&d, "key 'sequence' does not apply to format 'text'"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: text, path: corpus}", "  scale: 0.5\n  mean: 1\n", &s, &d), -1);
        ck_assert(diag_has(&d, "key 'scale' does not apply to format 'text'"));
        ck_assert(diag_has(&d, "key 'mean' does not apply to format 'text'"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: csv, path: x.csv, seq_len: 4, holdout: 0.2, part: train, stride: 2}",
                                   "", &s, &d), -1);
        ck_assert(diag_has(&d, "key 'seq_len' does not apply to format 'csv'"));
        ck_assert(diag_has(&d, "key 'stride' does not apply to format 'csv'"));
        ck_assert(diag_has(&d, "key 'holdout' does not apply to format 'csv'"));
        ck_assert(diag_has(&d, "key 'part' does not apply to format 'csv'"));
        dt_diag_free(&d);
        /* sequence: rows is for idx only */
        ck_assert_int_eq(load_spec("{format: npy, x: a, y: b, sequence: rows}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "key 'sequence' does not apply to format 'npy'"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: idx, images: a, labels: b, stride: 2}", "", &s, &d), -1);
        ck_assert(diag_has(&d, "key 'stride' does not apply to format 'idx'"));
        dt_diag_free(&d);
        ck_assert_int_eq(load_spec("{format: idx, images: a, labels: b, sequence: rows}", "", &s, &d), 0);
        ck_assert_int_eq(s.data.train.sequence, DT_SEQ_ROWS);
        dt_model_spec_free(&s);
        ck_assert_int_eq(load_spec("{format: idx, images: a, labels: b, sequence: columns}", "", &s, &d), -1);
        dt_diag_free(&d);
}
END_TEST

/* seq_len against the model input, and the loss, are spec errors at their keys: the spec alone
 * shows them, where they used to wait for the data (exit 3, no position). */
START_TEST(test_spec_fits_model)
{
        dt_model_spec s;
        dt_diag d = { 0 };
        const char *p = tpath("f.yaml");
        write_str(p, "name: t\ninput: [8]\nlayers:\n  - {type: fc, units: 4}\n"
                     "data:\n  train: {format: text, path: corpus, seq_len: 16}\n"
                     "  test: {format: text, path: corpus}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), -1);
        ck_assert_int_eq(d.n, 2);
        ck_assert_int_eq(d.msgs[0].line, 6);
        ck_assert_int_eq(d.msgs[0].col, 48);
        ck_assert_str_eq(d.msgs[0].text, "windows of 16 byte ids ('seq_len') do not fit 'input' (8), which takes 8; "
                                         "set seq_len: 8 or input: [16]");
        ck_assert_int_eq(d.msgs[1].line, 7);
        ck_assert_int_eq(d.msgs[1].col, 9);
        ck_assert(diag_has(&d, "windows of 64 byte ids ('seq_len', the default)"));
        dt_diag_free(&d);
        write_str(p, "name: t\ninput: [2, 4]\nlayers:\n  - {type: fc, units: 4}\nloss: mse\n"
                     "data:\n  train: {format: text, path: corpus, seq_len: 8}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 7);
        ck_assert_int_eq(d.msgs[0].col, 19);
        ck_assert_str_eq(d.msgs[0].text, "format 'text' gives next-byte class labels, which loss 'mse' cannot take; "
                                         "use loss: softmax_cross_entropy");
        dt_diag_free(&d);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("text");
        TCase *c = tcase_create("text");
        tcase_add_checked_fixture(c, setup, teardown);
        tcase_add_test(c, test_windows_and_labels);
        tcase_add_test(c, test_text_errors);
        tcase_add_test(c, test_directory_order);
        tcase_add_test(c, test_holdout_split);
        tcase_add_test(c, test_stride);
        tcase_add_test(c, test_stride_holdout);
        tcase_add_test(c, test_sequence_rows);
        tcase_add_test(c, test_spec_keys);
        tcase_add_test(c, test_spec_fits_model);
        suite_add_tcase(s, c);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? 1 : 0;
}
