/* tests/unit/test_ckpt.c - safetensors and checkpoints: bitwise save/load round trip, 'latest'
 * and cleanup of old and stale directories, and every corruption refused with its check named.
 * The graph is built by hand (three layers with params and buffers), no spec needed. */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/ckpt.h"
#include "train/ckpt_writer.h"
#include "util/fault.h"
#include "train/runlog.h"
#include "train/safetensors.h"

static char tmp[256];
static char err[4096];

static void setup(void)
{
        strcpy(tmp, "/tmp/dt_test_ckpt.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        ck_assert_int_eq(system(cmd), 0);
}

static const char *tpath(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *tpath(const char *fmt, ...)
{
        static char buf[4][1024];
        static int k;
        k = (k + 1) % 4;
        char rel[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rel, sizeof rel, fmt, ap);
        va_end(ap);
        snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, rel);
        return buf[k];
}

/* ---- a hand-made graph: fc1 (4x3 + 4), bn1 (weight 4; running_mean, running_var buffers),
 * fc2 (2x4 + 2) ---- */

typedef struct hg {
        dt_graph g;
        dt_layer l[3];
        dt_moments mo;
} hg;

static void add_param(dt_layer *l, const char *suffix, int n, const int *d, int trainable, size_t *off)
{
        dt_param_spec *ps = &l->ps[l->np];
        memset(ps, 0, sizeof *ps);
        snprintf(ps->suffix, sizeof ps->suffix, "%s", suffix);
        ps->shape.n = n;
        size_t len = 1;
        for (int i = 0; i < n; i++) {
                ps->shape.d[i] = d[i];
                len *= (size_t)d[i];
        }
        ps->trainable = trainable;
        l->off[l->np] = *off;
        l->len[l->np] = len;
        *off += len;
        l->np++;
}

/* transpose_fc1: fc1.weight declared (3,4) instead of (4,3); nlayers: 2 drops fc2 */
static void make_graph(hg *h, int transpose_fc1, int nlayers)
{
        memset(h, 0, sizeof *h);
        size_t po = 0, bo = 0;
        static const char *names[3] = {"fc1", "bn1", "fc2"};
        for (int i = 0; i < 3; i++) {
                h->l[i].name = names[i];
                h->l[i].index = i;
        }
        add_param(&h->l[0], "weight", 2, transpose_fc1 ? (int[]){3, 4} : (int[]){4, 3}, 1, &po);
        add_param(&h->l[0], "bias", 1, (int[]){4}, 1, &po);
        add_param(&h->l[1], "weight", 1, (int[]){4}, 1, &po);
        add_param(&h->l[1], "running_mean", 1, (int[]){4}, 0, &bo);
        add_param(&h->l[1], "running_var", 1, (int[]){4}, 0, &bo);
        add_param(&h->l[2], "weight", 2, (int[]){2, 4}, 1, &po);
        add_param(&h->l[2], "bias", 1, (int[]){2}, 1, &po);
        h->g.n = nlayers;
        h->g.layers = h->l;
        h->g.nparams = po;
        h->g.nbuffers = bo;
        h->g.params = calloc(po, sizeof(float));
        h->g.buffers = calloc(bo, sizeof(float));
        for (int i = 0; i < 3; i++)
                for (int k = 0; k < h->l[i].np; k++)
                        h->l[i].p[k] = (h->l[i].ps[k].trainable ? h->g.params : h->g.buffers) + h->l[i].off[k];
        h->mo.n = 2;
        h->mo.m = calloc(po, sizeof(float));
        h->mo.v = calloc(po, sizeof(float));
}

static void free_graph(hg *h)
{
        free(h->g.params);
        free(h->g.buffers);
        free(h->mo.m);
        free(h->mo.v);
}

static void fill(hg *h, unsigned seed)
{
        srand(seed);
        for (size_t i = 0; i < h->g.nparams; i++) {
                h->g.params[i] = (float)rand() / RAND_MAX - 0.5f;
                h->mo.m[i] = (float)rand() / RAND_MAX;
                h->mo.v[i] = (float)rand() / RAND_MAX * 1e-30f;
        }
        for (size_t i = 0; i < h->g.nbuffers; i++)
                h->g.buffers[i] = (float)rand() / RAND_MAX + 1;
        h->g.params[0] = -0.0f;
        h->g.params[1] = 1e-45f;        /* a denormal */
}

static dt_train_state state(long step)
{
        dt_train_state st = {
                .step = step, .epoch = 3, .step_in_epoch = 17, .seed = 0xfedcba9876543210ULL,
                .config_hash = 0x0123456789abcdefULL, .lr = 0.1 / 3, .best_test_loss = INFINITY,
                .nranks = 4, .batch = 32, .train_samples = 1000, .samples_in_epoch = 17 * 32,
        };
        return st;
}

static void *slurp(const char *path, size_t *n)
{
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        *n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        void *b = malloc(*n + 1);
        ck_assert_uint_eq(fread(b, 1, *n, f), *n);
        fclose(f);
        return b;
}

static void spit(const char *path, const void *b, size_t n)
{
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(b, 1, n, f), n);
        fclose(f);
}

static int count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)))
                n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        return n;
}

/* ---- round trip ---- */

START_TEST(round_trip)
{
        hg a, b;
        make_graph(&a, 0, 3);
        make_graph(&b, 0, 3);
        fill(&a, 1);
        dt_train_state st = state(1234), got;
        ck_assert_msg(!dt_ckpt_save(tpath("out"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00001234"));
        ck_assert_msg(!dt_ckpt_load(ck, &b.g, &b.mo, &got, st.config_hash, err, sizeof err), "%s", err);
        ck_assert(!memcmp(a.g.params, b.g.params, a.g.nparams * sizeof(float)));
        ck_assert(!memcmp(a.g.buffers, b.g.buffers, a.g.nbuffers * sizeof(float)));
        ck_assert(!memcmp(a.mo.m, b.mo.m, a.g.nparams * sizeof(float)));
        ck_assert(!memcmp(a.mo.v, b.mo.v, a.g.nparams * sizeof(float)));
        ck_assert_int_eq(got.step, 1234);
        ck_assert_int_eq(got.epoch, 3);
        ck_assert_int_eq(got.step_in_epoch, 17);
        ck_assert(got.seed == st.seed);
        ck_assert(got.config_hash == st.config_hash);
        ck_assert(!memcmp(&got.lr, &st.lr, sizeof st.lr));
        ck_assert(isinf(got.best_test_loss));
        ck_assert_int_eq(got.nranks, 4);

        /* a finite best loss survives bitwise too */
        st.best_test_loss = 0.1 + 0.2;
        st.step = 1235;
        ck_assert_msg(!dt_ckpt_save(tpath("out"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 1);
        ck_assert_msg(!dt_ckpt_load(ck, &b.g, &b.mo, &got, st.config_hash, err, sizeof err), "%s", err);
        ck_assert(!memcmp(&got.best_test_loss, &st.best_test_loss, sizeof(double)));

        /* tensors carry their PyTorch names and shapes */
        dt_st_file f;
        ck_assert_msg(!dt_st_read(tpath("out/checkpoints/step-00001235/model.safetensors"), &f, err, sizeof err),
                      "%s", err);
        ck_assert_int_eq(f.nt, 7);
        const dt_st_tensor *t = dt_st_find(&f, "fc1.weight");
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->shape.n, 2);
        ck_assert_int_eq(t->shape.d[0], 4);
        ck_assert_ptr_nonnull(dt_st_find(&f, "bn1.running_var"));
        ck_assert_str_eq(dt_st_meta_get(&f, "format"), "pt");
        dt_st_free(&f);
        ck_assert_msg(!dt_st_read(tpath("out/checkpoints/step-00001235/optim.safetensors"), &f, err, sizeof err),
                      "%s", err);
        ck_assert_int_eq(f.nt, 10);     /* 5 trainable tensors x 2 moments; no buffers */
        ck_assert_ptr_nonnull(dt_st_find(&f, "fc2.bias.exp_avg_sq"));
        ck_assert_ptr_null(dt_st_find(&f, "bn1.running_mean.exp_avg"));
        dt_st_free(&f);
        free_graph(&a);
        free_graph(&b);
}
END_TEST

START_TEST(latest_and_cleanup)
{
        hg a;
        make_graph(&a, 0, 3);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 0);
        fill(&a, 1);
        dt_train_state st = state(5);
        ck_assert_msg(!dt_ckpt_save(tpath("out"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        st.step = 10;
        ck_assert_msg(!dt_ckpt_save(tpath("out"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000010"));
        ck_assert_int_ne(access(tpath("out/checkpoints/step-00000005"), F_OK), 0);
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 2);   /* latest + step-00000010 */

        /* a crashed save left a temporary directory: latest is not confused, the next save cleans it */
        ck_assert_int_eq(mkdir(tpath("out/checkpoints/.tmp-step-00000099-4242"), 0755), 0);
        spit(tpath("out/checkpoints/.tmp-step-00000099-4242/model.safetensors"), "junk", 4);
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000010"));

        /* the same step saved again (a rerun) replaces it, with the new values */
        hg b;
        make_graph(&b, 0, 3);
        fill(&a, 2);
        ck_assert_msg(!dt_ckpt_save(tpath("out"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 2);
        dt_train_state got;
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), 1);
        ck_assert_msg(!dt_ckpt_load(ck, &b.g, &b.mo, &got, st.config_hash, err, sizeof err), "%s", err);
        ck_assert(!memcmp(a.g.params, b.g.params, a.g.nparams * sizeof(float)));

        /* broken latest */
        spit(tpath("out/checkpoints/latest"), "../../etc\n", 10);
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "latest: invalid content"), "%s", err);
        spit(tpath("out/checkpoints/latest"), "step-00000077\n", 14);
        ck_assert_int_eq(dt_ckpt_latest(tpath("out"), ck, sizeof ck, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "step-00000077") && strstr(err, "not a checkpoint directory"), "%s", err);
        free_graph(&a);
        free_graph(&b);
}
END_TEST

/* ---- corruption: each case starts from a fresh checkpoint ---- */

static hg g0;
static char ckdir[4096];

static void save_fresh(void)
{
        make_graph(&g0, 0, 3);
        fill(&g0, 3);
        dt_train_state st = state(7);
        ck_assert_msg(!dt_ckpt_save(tpath("c"), &g0.g, &g0.mo, &st, err, sizeof err), "%s", err);
        ck_assert_int_eq(dt_ckpt_latest(tpath("c"), ckdir, sizeof ckdir, err, sizeof err), 1);
}

/* loads ckdir into a zeroed graph; expects failure naming file and check; the graph untouched */
static void expect_fail(const char *file, const char *check, int transpose, int nlayers, uint64_t hash)
{
        hg b;
        make_graph(&b, transpose, nlayers);
        dt_train_state got;
        ck_assert_int_eq(dt_ckpt_load(ckdir, &b.g, &b.mo, &got, hash, err, sizeof err), -1);
        ck_assert_msg(strstr(err, file) && strstr(err, check), "wanted '%s' and '%s' in: %s", file, check, err);
        for (size_t i = 0; i < b.g.nparams; i++)
                ck_assert(b.g.params[i] == 0 && b.mo.m[i] == 0);
        free_graph(&b);
        free_graph(&g0);
}

static const char *mpath(void)
{
        static char p[4200];
        snprintf(p, sizeof p, "%s/model.safetensors", ckdir);
        return p;
}

/* keep_checkpoints and the best: the K newest and the best stay, checkpoints/best names it, every
 * state.json says which is the best, and the run's epochs, schedule and time survive the trip */
START_TEST(keep_and_best)
{
        hg a;
        make_graph(&a, 0, 3);
        fill(&a, 1);
        dt_ckpt_policy pol = { .keep = 2 };
        dt_train_state st = state(10);
        st.best_step = -1;
        st.epochs = 7;
        snprintf(st.schedule, sizeof st.schedule, "cosine from lr 0.1 to 0 over 70 steps");
        double tl[] = { 0.9, 0.5, 0.7, 0.6, 0.8 };      /* test losses of steps 10 .. 50: the best is 20 */
        for (int i = 0; i < 5; i++) {
                st.step = 10 * (i + 1);
                st.elapsed = 1.5 * (i + 1);
                int best = dt_runlog_best(&st, DT_BEST_TEST_LOSS, 1, tl[i], 0.5, 1.0);
                ck_assert_int_eq(best, i == 0 || i == 1);
                ck_assert_msg(!dt_ckpt_save_keep(tpath("out"), &a.g, &a.mo, &st, &pol, err, sizeof err), "%s", err);
        }
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 5);  /* latest, best, steps 20, 40, 50 */
        ck_assert_int_eq(access(tpath("out/checkpoints/step-00000020"), F_OK), 0);
        ck_assert_int_eq(access(tpath("out/checkpoints/step-00000040"), F_OK), 0);
        ck_assert_int_ne(access(tpath("out/checkpoints/step-00000030"), F_OK), 0);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "best", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000020"));
        dt_train_state got;
        ck_assert_msg(!dt_ckpt_read_state(tpath("out/checkpoints/step-00000050"), &got, err, sizeof err), "%s", err);
        ck_assert_int_eq(got.best_step, 20);
        ck_assert_str_eq(got.best_metric, "test_loss");
        ck_assert(got.best_value == 0.5);
        ck_assert_int_eq(got.epochs, 7);
        ck_assert_str_eq(got.schedule, st.schedule);
        ck_assert(got.elapsed == 7.5);
        /* higher is better for accuracy; a partial comparison never starts from a NaN */
        ck_assert_int_eq(dt_runlog_best(&st, DT_BEST_TEST_ACCURACY, 1, 0.1, 0.8, 0.1), 1);     /* a new metric */
        ck_assert_int_eq(dt_runlog_best(&st, DT_BEST_TEST_ACCURACY, 1, 0.1, 0.7, 0.1), 0);
        ck_assert_int_eq(dt_runlog_best(&st, DT_BEST_TEST_ACCURACY, 1, 0.1, NAN, 0.1), 0);
        ck_assert_int_eq(dt_runlog_best(&st, DT_BEST_NONE, 1, 0.1, 0.9, 0.1), -1);
        /* without test data a test metric falls back to the training loss */
        ck_assert_int_eq(dt_runlog_best(&st, DT_BEST_TEST_LOSS, 0, NAN, NAN, 0.3), 1);
        ck_assert_str_eq(st.best_metric, "train_loss");
        free_graph(&a);
}
END_TEST

START_TEST(corrupt_flipped_byte)
{
        save_fresh();
        size_t n;
        unsigned char *b = slurp(mpath(), &n);
        b[n - 3] ^= 0x10;
        spit(mpath(), b, n);
        free(b);
        expect_fail("model.safetensors", "crc32", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

START_TEST(corrupt_truncated)
{
        save_fresh();
        size_t n;
        unsigned char *b = slurp(mpath(), &n);
        spit(mpath(), b, n - 4);
        free(b);
        expect_fail("model.safetensors", "truncated", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

START_TEST(corrupt_header_length)
{
        save_fresh();
        size_t n;
        unsigned char *b = slurp(mpath(), &n);
        memcpy(b, "\0\0\0\0\0\1\0\0", 8);      /* 2^40 */
        spit(mpath(), b, n);
        expect_fail("model.safetensors", "header length", 0, 3, 0x0123456789abcdefULL);
        save_fresh();
        unsigned char *c = slurp(mpath(), &n);
        uint64_t hl = (uint64_t)(n - 4);        /* under the limit, past the end */
        for (int i = 0; i < 8; i++) c[i] = (unsigned char)(hl >> (8 * i));
        spit(mpath(), c, n);
        expect_fail("model.safetensors", "header length", 0, 3, 0x0123456789abcdefULL);
        free(b);
        free(c);
}
END_TEST

START_TEST(corrupt_json)
{
        save_fresh();
        size_t n;
        unsigned char *b = slurp(mpath(), &n);
        char *q = memchr(b + 8, ':', n - 8);
        *q = ';';
        spit(mpath(), b, n);
        free(b);
        expect_fail("model.safetensors", "header JSON", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

START_TEST(corrupt_dtype)
{
        save_fresh();
        size_t n;
        char *b = slurp(mpath(), &n);
        b[n] = 0;
        char *q = memmem(b, n, "\"F32\"", 5);
        ck_assert_ptr_nonnull(q);
        memcpy(q, "\"F16\"", 5);
        spit(mpath(), b, n);
        free(b);
        expect_fail("model.safetensors", "dtype", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

/* a safetensors file from its header text and data */
static void write_st_raw(const char *path, const char *json, size_t datalen)
{
        size_t hl = strlen(json);
        unsigned char *b = calloc(1, 8 + hl + datalen);
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        memcpy(b + 8, json, hl);
        spit(path, b, 8 + hl + datalen);
        free(b);
}

START_TEST(corrupt_offsets)
{
        dt_st_file f;
        write_st_raw(tpath("o.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24);
        ck_assert_int_eq(dt_st_read(tpath("o.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "o.st: data_offsets") && strstr(err, "overlap"), "%s", err);
        write_st_raw(tpath("g.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
        ck_assert_int_eq(dt_st_read(tpath("g.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "data_offsets") && strstr(err, "unused"), "%s", err);
        write_st_raw(tpath("s.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
        ck_assert_int_eq(dt_st_read(tpath("s.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "shape") && strstr(err, "span 8 bytes"), "%s", err);
        write_st_raw(tpath("n.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
        ck_assert_int_eq(dt_st_read(tpath("n.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "shape"), "%s", err);
        write_st_raw(tpath("t.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
        ck_assert_int_eq(dt_st_read(tpath("t.st"), &f, err, sizeof err), 0);     /* no crc: fine */
        ck_assert_int_eq(f.nt, 1);
        dt_st_free(&f);
        write_st_raw(tpath("x.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
        ck_assert_int_eq(dt_st_read(tpath("x.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "cover 8 bytes but the data section has 12"), "%s", err);
        write_st_raw(tpath("m.st"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
        ck_assert_int_eq(dt_st_read(tpath("m.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "lacks 'data_offsets'"), "%s", err);
        /* an unaligned data section (7-byte header) is realigned, not misread */
        write_st_raw(tpath("u.st"), "{}     ", 0);
        ck_assert_int_eq(dt_st_read(tpath("u.st"), &f, err, sizeof err), 0);
        dt_st_free(&f);
        float v[2] = {1.5f, -2};
        char j[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} ";     /* odd length */
        size_t hl = strlen(j);
        unsigned char *b = calloc(1, 8 + hl + 8);
        b[0] = (unsigned char)hl;
        memcpy(b + 8, j, hl);
        memcpy(b + 8 + hl, v, 8);
        spit(tpath("u2.st"), b, 8 + hl + 8);
        free(b);
        ck_assert_msg(!dt_st_read(tpath("u2.st"), &f, err, sizeof err), "%s", err);
        ck_assert_float_eq(dt_st_find(&f, "a")->data[1], -2.0f);
        dt_st_free(&f);

        /* the same overlap inside a checkpoint is named with the checkpoint's file */
        save_fresh();
        write_st_raw(mpath(), "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24);
        expect_fail("model.safetensors", "overlap", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

START_TEST(st_write_read)
{
        float w[6] = {1, 2, 3, 4, 5, 6}, bias[2] = {-1, 0.5f};
        dt_st_tensor t[2] = {
                {.name = "w", .shape = {2, {2, 3}}, .data = w, .n = 6},
                {.name = "b", .shape = {1, {2}}, .data = bias, .n = 2},
        };
        dt_st_meta meta[1] = {{"format", "pt"}};
        ck_assert_msg(!dt_st_write(tpath("a.st"), t, 2, meta, 1, err, sizeof err), "%s", err);
        dt_st_file f;
        ck_assert_msg(!dt_st_read(tpath("a.st"), &f, err, sizeof err), "%s", err);
        ck_assert_int_eq(f.nt, 2);
        ck_assert(!memcmp(dt_st_find(&f, "w")->data, w, sizeof w));
        ck_assert(!memcmp(dt_st_find(&f, "b")->data, bias, sizeof bias));
        ck_assert_ptr_nonnull(dt_st_meta_get(&f, "crc32"));
        ck_assert_ptr_null(dt_st_find(&f, "nope"));
        dt_st_free(&f);
        /* the file's own crc32 metadata catches a flipped data byte */
        size_t n;
        unsigned char *b = slurp(tpath("a.st"), &n);
        b[n - 1] ^= 1;
        spit(tpath("a.st"), b, n);
        free(b);
        ck_assert_int_eq(dt_st_read(tpath("a.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "a.st: crc32: the data checksums to"), "%s", err);
        /* writer refuses a shape that does not match the element count, and duplicate names */
        t[1].n = 3;
        ck_assert_int_eq(dt_st_write(tpath("b.st"), t, 2, NULL, 0, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "tensor 'b'"), "%s", err);
        t[1].n = 2;
        strcpy(t[1].name, "w");
        ck_assert_int_eq(dt_st_write(tpath("b.st"), t, 2, NULL, 0, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "used twice"), "%s", err);
        /* files too short for a header length, or missing */
        spit(tpath("c.st"), "abc", 3);
        ck_assert_int_eq(dt_st_read(tpath("c.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "truncated"), "%s", err);
        ck_assert_int_eq(dt_st_read(tpath("none.st"), &f, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "none.st: cannot open"), "%s", err);
}
END_TEST

/* Streamed: the pieces asked for in file order, at most DT_ST_CHUNK floats each, and the file the
 * same bytes (and crc) as the one written from whole tensors. */
typedef struct feed { const dt_st_tensor *t; int nt, i, calls; size_t off; } feed;
static void feed_piece(void *ud, const dt_st_tensor *x, size_t off, size_t n, float *out)
{
        feed *f = ud;
        while (f->i < f->nt && f->off >= f->t[f->i].n) f->i++, f->off = 0;
        ck_assert_int_lt(f->i, f->nt);
        ck_assert_str_eq(x->name, f->t[f->i].name);
        ck_assert_uint_eq(off, f->off);
        ck_assert_uint_le(n, DT_ST_CHUNK);
        memcpy(out, f->t[f->i].data + off, n * sizeof *out);
        f->off += n;
        f->calls++;
}

START_TEST(st_write_stream)
{
        size_t big = DT_ST_CHUNK * 2 + 3;       /* three pieces */
        float *w = dt_falloc(big), bias[5] = {1, 2, 3, 4, 5};
        for (size_t i = 0; i < big; i++) w[i] = (float)i * 0.5f;
        dt_st_tensor t[2] = {
                {.name = "w", .shape = {1, {(int)big}}, .data = w, .n = big},
                {.name = "b", .shape = {1, {5}}, .data = bias, .n = 5},
        };
        int fd;
        uint32_t c1, c2;
        dt_st_meta meta[1] = {{"format", "pt"}};
        ck_assert_msg(!dt_st_write_start(tpath("w.st"), t, 2, meta, 1, &fd, &c1, err, sizeof err), "%s", err);
        ck_assert(!dt_st_sync_close(fd, tpath("w.st"), err, sizeof err));
        dt_st_tensor shape[2];
        memcpy(shape, t, sizeof t);
        shape[0].data = shape[1].data = NULL;   /* the stream never reads them */
        feed f = { t, 2, 0, 0, 0 };
        ck_assert_msg(!dt_st_write_stream(tpath("s.st"), shape, 2, meta, 1, feed_piece, &f, &fd, &c2, err, sizeof err),
                      "%s", err);
        ck_assert(!dt_st_sync_close(fd, tpath("s.st"), err, sizeof err));
        ck_assert_int_eq(f.calls, 4);
        ck_assert_uint_eq(c1, c2);
        size_t n1, n2;
        unsigned char *a = slurp(tpath("w.st"), &n1), *b = slurp(tpath("s.st"), &n2);
        ck_assert_uint_eq(n1, n2);
        ck_assert(!memcmp(a, b, n1));
        free(a);
        free(b);
        /* a file that cannot be created still asks for every piece (its feeders must not wait) */
        feed g = { t, 2, 0, 0, 0 };
        ck_assert_int_eq(dt_st_write_stream(tpath("none/s.st"), shape, 2, meta, 1, feed_piece, &g, &fd, NULL, err, sizeof err), -1);
        ck_assert_int_eq(g.calls, 4);
        ck_assert_msg(strstr(err, "cannot create"), "%s", err);
        free(w);
}
END_TEST

START_TEST(mismatch_graph)
{
        save_fresh();
        expect_fail("model.safetensors", "shape: tensor 'fc1.weight' is (4,3) in the checkpoint but (3,4)",
                    1, 3, 0x0123456789abcdefULL);
        save_fresh();
        expect_fail("model.safetensors", "unexpected tensor 'fc2.", 0, 2, 0x0123456789abcdefULL);
        save_fresh();
        expect_fail("state.json", "incompatible checkpoint: config hash 0123456789abcdef differs from the "
                    "model's 00000000000000ff", 0, 3, 0xff);
}
END_TEST

START_TEST(corrupt_state_and_files)
{
        char p[4300];
        save_fresh();
        snprintf(p, sizeof p, "%s/optim.safetensors", ckdir);
        unlink(p);
        expect_fail("optim.safetensors", "missing", 0, 3, 0x0123456789abcdefULL);

        save_fresh();
        snprintf(p, sizeof p, "%s/state.json", ckdir);
        size_t n;
        char *s = slurp(p, &n);
        s[n] = 0;
        char *q = strstr(s, "\"format\": 2");
        ck_assert_ptr_nonnull(q);
        q[10] = '3';
        spit(p, s, n);
        expect_fail("state.json", "format version 3", 0, 3, 0x0123456789abcdefULL);

        save_fresh();
        q = strstr(s, "\"format\": 3");
        q[10] = '2';
        q = strstr(s, "\"nmoments\": 2");
        ck_assert_ptr_nonnull(q);
        q[12] = '1';
        spit(p, s, n);
        expect_fail("state.json", "moment buffer", 0, 3, 0x0123456789abcdefULL);

        save_fresh();
        spit(p, "{\"format\": 2,", 13);
        expect_fail("state.json", "JSON", 0, 3, 0x0123456789abcdefULL);
        free(s);

        /* metadata tampered with (crc key removed) still fails on the state.json file crc */
        save_fresh();
        s = slurp(mpath(), &n);
        q = memmem(s, n, "\"crc32\"", 7);
        ck_assert_ptr_nonnull(q);
        memcpy(q, "\"crc99\"", 7);
        spit(mpath(), s, n);
        free(s);
        expect_fail("model.safetensors", "crc32: the file checksums", 0, 3, 0x0123456789abcdefULL);
}
END_TEST

/* Any edit of a field that still parses is caught by state.json's own crc (issue: edited step,
 * epoch or cursor were accepted and training continued from the wrong place). */
START_TEST(state_tampered)
{
        static const char *edits[][2] = {
                {"\"step\": 7", "\"step\": 8"},
                {"\"epoch\": 3", "\"epoch\": 9"},
                {"\"step_in_epoch\": 17", "\"step_in_epoch\": 33"},
                {"\"samples_in_epoch\": 544", "\"samples_in_epoch\": 545"},
                {"\"batch\": 32", "\"batch\": 64"},
                {"\"nranks\": 4", "\"nranks\": 5"},
        };
        char p[4300];
        for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
                save_fresh();
                snprintf(p, sizeof p, "%s/state.json", ckdir);
                size_t n;
                char *s = slurp(p, &n);
                s[n] = 0;
                char *q = strstr(s, edits[e][0]);
                ck_assert_msg(q != NULL, "no '%s' in %s", edits[e][0], s);
                size_t a = strlen(edits[e][0]), b = strlen(edits[e][1]);
                char *t = malloc(n + b + 1);
                memcpy(t, s, (size_t)(q - s));
                memcpy(t + (q - s), edits[e][1], b);
                memcpy(t + (q - s) + b, q + a, n - (size_t)(q - s) - a);
                spit(p, t, n - a + b);
                free(t);
                free(s);
                expect_fail("state.json", "crc32: the fields checksum", 0, 3, 0x0123456789abcdefULL);
        }
}
END_TEST

/* A step near 2^63 overflowed step + 1 in the loop (UBSan); counts are range-checked on load. */
START_TEST(state_huge_step)
{
        hg a;
        make_graph(&a, 0, 3);
        fill(&a, 2);
        dt_train_state st = state(0);
        st.step = LONG_MAX;
        ck_assert_msg(!dt_ckpt_save(tpath("huge"), &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_latest(tpath("huge"), ck, sizeof ck, err, sizeof err), 1);
        hg b;
        make_graph(&b, 0, 3);
        dt_train_state got;
        ck_assert_int_eq(dt_ckpt_load(ck, &b.g, &b.mo, &got, st.config_hash, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "field 'step': out of range"), "%s", err);
        free_graph(&a);
        free_graph(&b);
}
END_TEST

static int position(long step, long epoch, long sie, long samples, long batch, long n)
{
        dt_train_state st = { .step = step, .epoch = epoch, .step_in_epoch = sie, .samples_in_epoch = samples,
                              .train_samples = 1000, .batch = batch };
        return dt_ckpt_check_position(&st, n, "ck", err, sizeof err);
}

START_TEST(state_position)
{
        /* 1000 samples, batch 32: 32 steps per epoch (the last of 8) */
        ck_assert_int_eq(position(0, 0, 0, 0, 32, 1000), 0);
        ck_assert_int_eq(position(20, 0, 20, 640, 32, 1000), 0);
        ck_assert_int_eq(position(32, 1, 0, 0, 32, 1000), 0);
        ck_assert_int_eq(position(96 + 5, 3, 5, 160, 32, 1000), 0);
        ck_assert_int_eq(position(21, 0, 20, 640, 32, 1000), -1);       /* step off by one */
        ck_assert_msg(strstr(err, "inconsistent position: step"), "%s", err);
        ck_assert_int_eq(position(20, 0, 19, 640, 32, 1000), -1);       /* step_in_epoch */
        ck_assert_int_eq(position(20, 0, 20, 641, 32, 1000), -1);       /* cursor not on a batch */
        ck_assert_int_eq(position(33, 0, 33, 1000, 32, 1000), -1);      /* cursor at the end */
        ck_assert_int_eq(position(20, 1000, 20, 640, 32, 1000), -1);    /* epoch 1000 */
        ck_assert_int_eq(position(20, 0, 20, 640, 32, 999), -1);        /* another data set */
        ck_assert_msg(strstr(err, "1000 samples but the data has 999"), "%s", err);

        /* 20 steps of 32, then batch 64 from there: 6 steps finish epoch 0, then 16 per epoch */
        dt_train_state st = { .step = 26 + 16 + 2, .epoch = 2, .step_in_epoch = 2, .samples_in_epoch = 128,
                              .train_samples = 1000, .batch = 64,
                              .since = { .step = 20, .epoch = 0, .step_in_epoch = 20, .samples_in_epoch = 640 } };
        ck_assert_msg(!dt_ckpt_check_position(&st, 1000, "ck", err, sizeof err), "%s", err);
        st.step++;
        ck_assert_int_eq(dt_ckpt_check_position(&st, 1000, "ck", err, sizeof err), -1);
}
END_TEST

START_TEST(model_save)
{
        hg a;
        make_graph(&a, 0, 3);
        fill(&a, 4);
        ck_assert_msg(!dt_model_save(tpath("final.safetensors"), &a.g, err, sizeof err), "%s", err);
        ck_assert_int_eq(count_entries(tmp), 1);        /* no temporary left */
        dt_st_file f;
        ck_assert_msg(!dt_st_read(tpath("final.safetensors"), &f, err, sizeof err), "%s", err);
        ck_assert_int_eq(f.nt, 7);
        const dt_st_tensor *t = dt_st_find(&f, "bn1.running_mean");
        ck_assert(!memcmp(t->data, a.g.buffers, 4 * sizeof(float)));
        t = dt_st_find(&f, "fc2.weight");
        ck_assert(!memcmp(t->data, a.g.params + a.l[2].off[0], 8 * sizeof(float)));
        dt_st_free(&f);
        ck_assert_int_eq(dt_model_save(tpath("nodir/final.safetensors"), &a.g, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "nodir"), "%s", err);
        free_graph(&a);
}
END_TEST

/* ---- the background writer ---- */

START_TEST(writer_droppable)
{
        /* keep 1: anything but the best goes */
        ck_assert(dt_ckpt_droppable(10, 20, -1, 0, 1));
        ck_assert(dt_ckpt_droppable(10, 20, 20, 0, 1));
        ck_assert(!dt_ckpt_droppable(10, 20, 10, 0, 1));
        ck_assert(dt_ckpt_droppable(10, 30, 20, 1, 1));
        /* the same step again: the newer state wins, best or not */
        ck_assert(dt_ckpt_droppable(10, 10, 10, 0, 1));
        /* keep 2: the newest before the new one stays, an older one may go */
        ck_assert(!dt_ckpt_droppable(10, 20, -1, 0, 2));
        ck_assert(dt_ckpt_droppable(10, 30, -1, 1, 2));
        ck_assert(!dt_ckpt_droppable(10, 30, -1, 1, 3));
        ck_assert(!dt_ckpt_droppable(10, 30, 10, 1, 2));
}
END_TEST

/* the tensors of a committed checkpoint against h's buffers, bitwise */
static void same_as(const char *ckdir, const hg *h)
{
        hg r;
        make_graph(&r, 0, 3);
        dt_train_state got;
        ck_assert_msg(!dt_ckpt_load(ckdir, &r.g, &r.mo, &got, 0x0123456789abcdefULL, err, sizeof err), "%s", err);
        ck_assert_msg(!memcmp(r.g.params, h->g.params, h->g.nparams * sizeof(float)), "%s: params differ", ckdir);
        ck_assert_msg(!memcmp(r.g.buffers, h->g.buffers, h->g.nbuffers * sizeof(float)), "%s: buffers differ", ckdir);
        ck_assert_msg(!memcmp(r.mo.m, h->mo.m, h->g.nparams * sizeof(float)), "%s: m differs", ckdir);
        ck_assert_msg(!memcmp(r.mo.v, h->mo.v, h->g.nparams * sizeof(float)), "%s: v differs", ckdir);
        free_graph(&r);
}

/* Six requests against a writer that takes 50 ms per commit: the snapshot is taken at the
 * request (the live buffers change right after), requests that wait are coalesced, and neither
 * the best (step 20) nor the last is lost; latest and best hold the weights of their steps. */
static void coalesce_case(int sync)
{
        ck_assert_int_eq(dt_fault_init("ckpt_slow@secs=0.05"), 0);
        hg a, want_best, want_last;
        make_graph(&a, 0, 3);
        make_graph(&want_best, 0, 3);
        make_graph(&want_last, 0, 3);
        dt_ckpt_policy pol = { .keep = 1 };
        dt_ckpt_writer *w = dt_ckpt_writer_new(tpath("out"), &pol, sync);
        dt_train_state st = state(0);
        st.best_step = -1;
        double tl[] = { 0.9, 0.5, 0.7, 0.6, 0.8, 0.55 };
        for (int i = 0; i < 6; i++) {
                fill(&a, 10 + (unsigned)i);
                st.step = 10 * (i + 1);
                dt_runlog_best(&st, DT_BEST_TEST_LOSS, 1, tl[i], 0.5, 1.0);
                ck_assert_msg(!dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), "%s", err);
                if (i == 1) fill(&want_best, 11);
                fill(&a, 99);   /* the training thread goes on: the snapshot must not see this */
        }
        fill(&want_last, 15);
        ck_assert_msg(!dt_ckpt_writer_drain(w, err, sizeof err), "%s", err);
        long written, coalesced;
        dt_ckpt_writer_counts(w, &written, &coalesced);
        dt_ckpt_writer_free(w);
        ck_assert_int_eq(written + coalesced, 6);
        if (sync) ck_assert_int_eq(coalesced, 0);
        else ck_assert_msg(coalesced >= 1, "nothing was coalesced (%ld written)", written);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "best", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000020"));
        same_as(ck, &want_best);
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "latest", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000060"));
        same_as(ck, &want_last);
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 4);  /* latest, best, steps 20, 60 */
        free_graph(&a);
        free_graph(&want_best);
        free_graph(&want_last);
        dt_fault_init(NULL);
}

START_TEST(writer_coalesces)
{
        coalesce_case(0);
}
END_TEST

START_TEST(writer_sync)
{
        coalesce_case(1);
}
END_TEST

/* keep 3 under a slow disk: the three newest are never coalesced away */
START_TEST(writer_keeps)
{
        ck_assert_int_eq(dt_fault_init("ckpt_slow@secs=0.03"), 0);
        hg a;
        make_graph(&a, 0, 3);
        dt_ckpt_policy pol = { .keep = 3 };
        dt_ckpt_writer *w = dt_ckpt_writer_new(tpath("out"), &pol, 0);
        dt_train_state st = state(0);
        st.best_step = -1;
        for (int i = 0; i < 6; i++) {
                fill(&a, (unsigned)i);
                st.step = 10 * (i + 1);
                ck_assert_msg(!dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        }
        ck_assert_msg(!dt_ckpt_writer_drain(w, err, sizeof err), "%s", err);
        dt_ckpt_writer_free(w);
        for (int s = 40; s <= 60; s += 10)
                ck_assert_msg(!access(tpath("out/checkpoints/step-%08d/state.json", s), F_OK), "step %d is missing", s);
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 4);  /* latest, steps 40, 50, 60 */
        free_graph(&a);
        dt_fault_init(NULL);
}
END_TEST

/* The checkpoint being written always completes: 10 is being written (slowly), 20 (the best)
 * waits and must stay, so 30 waits for the disk instead of giving 10 up; 10, 20 and 30 are all
 * committed and nothing is replaced. */
START_TEST(writer_completes)
{
        ck_assert_int_eq(dt_fault_init("ckpt_slow@secs=0.3"), 0);
        hg a;
        make_graph(&a, 0, 3);
        dt_ckpt_policy pol = { .keep = 1 };
        dt_ckpt_writer *w = dt_ckpt_writer_new(tpath("out"), &pol, 0);
        dt_train_state st = state(0);
        st.best_step = -1;
        double tl[] = { 0.9, 0.5, 0.7 };
        for (int i = 0; i < 3; i++) {
                fill(&a, (unsigned)i);
                st.step = 10 * (i + 1);
                dt_runlog_best(&st, DT_BEST_TEST_LOSS, 1, tl[i], 0.5, 1.0);
                ck_assert_msg(!dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), "%s", err);
                if (i == 0) usleep(50000);      /* the writer has taken step 10 */
        }
        ck_assert_msg(!dt_ckpt_writer_drain(w, err, sizeof err), "%s", err);
        long written, coalesced;
        dt_ckpt_writer_counts(w, &written, &coalesced);
        dt_ckpt_writer_free(w);
        ck_assert_int_eq(written, 3);
        ck_assert_int_eq(coalesced, 0);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "best", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000020"));
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "latest", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000030"));
        ck_assert_int_eq(count_entries(tpath("out/checkpoints")), 4);  /* latest, best, 20, 30: no temporary */
        free_graph(&a);
        dt_fault_init(NULL);
}
END_TEST

/* A failing commit is reported once, with the path and errno's text, by the drain or the next
 * submit; nothing is written after it, so latest stays the last good checkpoint. */
START_TEST(writer_failure)
{
        hg a;
        make_graph(&a, 0, 3);
        fill(&a, 1);
        dt_train_state st = state(10);
        dt_ckpt_policy pol = { .keep = 3 };
        spit(tpath("file"), "x", 1);
        dt_ckpt_writer *w = dt_ckpt_writer_new(tpath("file/out"), &pol, 0);
        ck_assert_int_eq(dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), 0);
        ck_assert_int_eq(dt_ckpt_writer_drain(w, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "file/out") && strstr(err, "Not a directory"), "%s", err);
        ck_assert_int_eq(dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), -1);
        ck_assert_str_eq(err, "");      /* told once */
        dt_ckpt_writer_free(w);

        ck_assert_int_eq(dt_fault_init("io_error@step=30"), 0);
        w = dt_ckpt_writer_new(tpath("out"), &pol, 0);
        for (int i = 1; i <= 3; i++) {
                st.step = 10 * i;
                ck_assert_msg(!dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), "%s", err);
        }
        ck_assert_int_eq(dt_ckpt_writer_drain(w, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "step-00000030") && strstr(err, "No space left on device"), "%s", err);
        st.step = 40;
        ck_assert_int_eq(dt_ckpt_writer_submit(w, &a.g, &a.mo, &st, err, sizeof err), -1);
        ck_assert_int_eq(dt_ckpt_writer_drain(w, err, sizeof err), -1);
        dt_ckpt_writer_free(w);
        char ck[4096];
        ck_assert_int_eq(dt_ckpt_named(tpath("out"), "latest", ck, sizeof ck, err, sizeof err), 1);
        ck_assert_str_eq(ck, tpath("out/checkpoints/step-00000020"));
        ck_assert_int_ne(access(tpath("out/checkpoints/step-00000040"), F_OK), 0);
        free_graph(&a);
        dt_fault_init(NULL);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ckpt");
        TCase *tc = tcase_create("ckpt");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, round_trip);
        tcase_add_test(tc, st_write_stream);
        tcase_add_test(tc, latest_and_cleanup);
        tcase_add_test(tc, keep_and_best);
        tcase_add_test(tc, corrupt_flipped_byte);
        tcase_add_test(tc, corrupt_truncated);
        tcase_add_test(tc, corrupt_header_length);
        tcase_add_test(tc, corrupt_json);
        tcase_add_test(tc, corrupt_dtype);
        tcase_add_test(tc, corrupt_offsets);
        tcase_add_test(tc, st_write_read);
        tcase_add_test(tc, mismatch_graph);
        tcase_add_test(tc, corrupt_state_and_files);
        tcase_add_test(tc, state_tampered);
        tcase_add_test(tc, state_huge_step);
        tcase_add_test(tc, state_position);
        tcase_add_test(tc, model_save);
        tcase_add_test(tc, writer_droppable);
        tcase_add_test(tc, writer_coalesces);
        tcase_add_test(tc, writer_sync);
        tcase_add_test(tc, writer_keeps);
        tcase_add_test(tc, writer_completes);
        tcase_add_test(tc, writer_failure);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
