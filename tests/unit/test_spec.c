/* tests/unit/test_spec.c - Check tests of the YAML reader (getters, positions, did-you-mean,
 * unknown and duplicate keys) and of the model spec (models/mlp.yaml, defaults, hash, key list). */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/overrides.h"
#include "util/yaml_util.h"

/* ---- helpers ---- */

/* A document from text with its root mapping opened as ctx "t". */
typedef struct fixture {
        dt_ydoc y;
        dt_diag d;
        dt_ymap m;
} fixture;

static void fx_open(fixture *f, const char *text)
{
        memset(f, 0, sizeof *f);
        ck_assert_int_eq(dt_ydoc_load_string(&f->y, "t.yaml", text, &f->d), 0);
        ck_assert_int_eq(dt_ymap_open(&f->m, &f->y, dt_ydoc_root(&f->y), "t", &f->d), 0);
}

static void fx_free(fixture *f)
{
        dt_ydoc_free(&f->y);
        dt_diag_free(&f->d);
}

/* The i-th message as "line:col: text". */
static const char *msg(const dt_diag *d, int i, char *buf, size_t len)
{
        ck_assert_int_lt(i, d->n);
        snprintf(buf, len, "%d:%d: %s", d->msgs[i].line, d->msgs[i].col, d->msgs[i].text);
        return buf;
}

static char tmpdir[256];

static void make_tmpdir(void)
{
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/dtrain-test-spec.XXXXXX", t && *t ? t : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        ck_assert_int_eq(system(cmd), 0);
}

/* Writes text to tmpdir/name and returns the path (static buffer). */
static const char *write_spec(const char *name, const char *text)
{
        static char path[512];
        snprintf(path, sizeof path, "%s/%s", tmpdir, name);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
        return path;
}

static const char *srcdir(void)
{
        const char *s = getenv("top_srcdir");
        return s && *s ? s : ".";
}

#define BASE "name: t\ninput: [4]\nlayers:\n  - {type: fc, units: 3}\n" \
             "data:\n  train: {format: synthetic, n: 10}\n"

/* ---- did you mean ---- */

START_TEST(test_did_you_mean)
{
        static const char *const c[] = { "epochs", "batch", "seed", "optimizer", "eval_batch" };
        ck_assert_str_eq(dt_did_you_mean("epocs", c, 5), "epochs");
        ck_assert_str_eq(dt_did_you_mean("ephocs", c, 5), "epochs");   /* transposition */
        ck_assert_str_eq(dt_did_you_mean("optimiser", c, 5), "optimizer");
        ck_assert_str_eq(dt_did_you_mean("bacth", c, 5), "batch");
        ck_assert_str_eq(dt_did_you_mean("sed", c, 5), "seed");
        ck_assert_ptr_null(dt_did_you_mean("learning_rate", c, 5));
        ck_assert_ptr_null(dt_did_you_mean("xyz", c, 5));
        ck_assert_ptr_null(dt_did_you_mean("abc", c, 0));
        /* "ab" vs "batch": 3 edits, far over max(1, 2/3) */
        ck_assert_ptr_null(dt_did_you_mean("ab", c, 5));
}
END_TEST

/* Other frameworks' words find ours, only where ours is a candidate; else the case, else typos. */
START_TEST(test_suggest_synonyms)
{
        static const char *const conv[] = { "type", "name", "filters", "kernel", "stride", "padding" };
        static const char *const train[] = { "epochs", "batch", "seed", "optimizer" };
        char note[128];
        ck_assert_str_eq(dt_suggest("out_channels", conv, 6, note, sizeof note), "filters");
        ck_assert_str_eq(note, " (PyTorch's out_channels)");
        ck_assert_str_eq(dt_suggest("Kernel_Size", conv, 6, note, sizeof note), "kernel");
        ck_assert_str_eq(dt_suggest("pad", conv, 6, note, sizeof note), "padding");
        ck_assert_str_eq(dt_suggest("batch_size", train, 4, note, sizeof note), "batch");
        ck_assert_ptr_null(dt_suggest("out_channels", train, 4, note, sizeof note));   /* not a key here */
        ck_assert_str_eq(note, "");
        ck_assert_str_eq(dt_suggest("SEED", train, 4, note, sizeof note), "seed");
        ck_assert_str_eq(note, "");
        ck_assert_str_eq(dt_suggest("epocs", train, 4, note, sizeof note), "epochs");
        ck_assert(dt_is_synonym("kernel_size", "kernel"));
        ck_assert(!dt_is_synonym("kernel", "kernel"));
        ck_assert_ptr_nonnull(dt_advice("train.optimizer", "nesterov"));
        ck_assert_ptr_nonnull(dt_advice("layers.conv", "in_channels"));
        ck_assert_ptr_null(dt_advice("train", "nesterov"));
}
END_TEST

/* ---- getters ---- */

START_TEST(test_int_getter)
{
        fixture f;
        char b[256];
        fx_open(&f, "a: 12\nb: -5\nc: 12abc\nd: 0x40\ne: \"64\"\nf: 2.0\ng: 99999999999999999999\nh:\n");
        long v;
        ck_assert_int_eq(dt_ymap_int(&f.m, "a", &v, 0, 1, 100, 0), 1);
        ck_assert_int_eq(v, 12);
        ck_assert_int_eq(dt_ymap_int(&f.m, "b", &v, 7, 1, 100, 0), -1);
        ck_assert_int_eq(v, 7);         /* the default on error */
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b), "2:4: 'b' must be an integer in [1, 100], got '-5'");
        ck_assert_int_eq(dt_ymap_int(&f.m, "b", &v, 0, -10, 100, 0), 1);
        ck_assert_int_eq(v, -5);
        ck_assert_int_eq(dt_ymap_int(&f.m, "c", &v, 0, 0, 100, 0), -1);
        ck_assert_int_eq(dt_ymap_int(&f.m, "d", &v, 0, 0, 100, 0), -1);
        ck_assert_int_eq(dt_ymap_int(&f.m, "e", &v, 0, 0, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 3, b, sizeof b),
                         "5:4: 'e' must be an integer in [0, 100], got the quoted string '64'");
        ck_assert_int_eq(dt_ymap_int(&f.m, "f", &v, 0, 0, 100, 0), -1);
        ck_assert_int_eq(dt_ymap_int(&f.m, "g", &v, 0, 0, LONG_MAX, 0), -1);
        ck_assert_str_eq(msg(&f.d, 5, b, sizeof b),
                         "7:4: 'g' must be an integer >= 0, got '99999999999999999999'");
        ck_assert_int_eq(dt_ymap_int(&f.m, "h", &v, 0, 0, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 6, b, sizeof b), "8:3: 'h' must be an integer in [0, 100], got nothing");
        ck_assert_int_eq(dt_ymap_int(&f.m, "absent", &v, 42, 0, 100, 0), 0);
        ck_assert_int_eq(v, 42);
        ck_assert_int_eq(dt_ymap_int(&f.m, "absent2", &v, 42, 0, 100, 1), -1);
        ck_assert_str_eq(msg(&f.d, 7, b, sizeof b), "1:1: missing required key 'absent2' in 't'");
        ck_assert_int_eq(f.d.n, 8);
        ck_assert_str_eq(f.d.msgs[0].file, "t.yaml");
        dt_ymap_close(&f.m);
        ck_assert_int_eq(f.d.n, 8);     /* every key was asked for */
        fx_free(&f);
}
END_TEST

START_TEST(test_num_getter)
{
        fixture f;
        char b[256];
        fx_open(&f, "a: 0.5\nb: .nan\nc: .inf\nd: 1e-3\ne: 0\nf: 10\ng: nan\nh: 0x1p3\ni: -2.5e1\n");
        double v;
        ck_assert_int_eq(dt_ymap_num(&f.m, "a", &v, 0, 0, 1, 0), 1);
        ck_assert(v == 0.5);
        ck_assert_int_eq(dt_ymap_num_excl(&f.m, "b", &v, 0.01, 0, 10, DT_YEXCL_MIN, 0), -1);
        ck_assert(v == 0.01);
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b), "2:4: 'b' must be a number in (0, 10], got '.nan'");
        ck_assert_int_eq(dt_ymap_num(&f.m, "c", &v, 0, 0, HUGE_VAL, 0), -1);
        ck_assert_str_eq(msg(&f.d, 1, b, sizeof b), "3:4: 'c' must be a number >= 0, got '.inf'");
        ck_assert_int_eq(dt_ymap_num(&f.m, "d", &v, 0, 0, 1, 0), 1);
        ck_assert(fabs(v - 1e-3) < 1e-15);
        ck_assert_int_eq(dt_ymap_num_excl(&f.m, "e", &v, 1, 0, 10, DT_YEXCL_MIN, 0), -1);
        ck_assert_int_eq(dt_ymap_num_excl(&f.m, "f", &v, 1, 0, 10, DT_YEXCL_MIN, 0), 1);
        ck_assert_int_eq(dt_ymap_num_excl(&f.m, "f", &v, 1, 0, 10, DT_YEXCL_MAX, 0), -1);
        ck_assert_str_eq(msg(&f.d, 3, b, sizeof b), "6:4: 'f' must be a number in [0, 10), got '10'");
        ck_assert_int_eq(dt_ymap_num(&f.m, "g", &v, 0, -HUGE_VAL, HUGE_VAL, 0), -1);
        ck_assert_str_eq(msg(&f.d, 4, b, sizeof b), "7:4: 'g' must be a number, got 'nan'");
        ck_assert_int_eq(dt_ymap_num(&f.m, "h", &v, 0, -HUGE_VAL, HUGE_VAL, 0), -1);
        ck_assert_int_eq(dt_ymap_num(&f.m, "i", &v, 0, -HUGE_VAL, HUGE_VAL, 0), 1);
        ck_assert(v == -25.0);
        dt_ymap_close(&f.m);
        ck_assert_int_eq(f.d.n, 6);
        fx_free(&f);
}
END_TEST

START_TEST(test_bool_str_enum)
{
        static const char *const names[] = { "sgd", "adam", "adamw", NULL };
        fixture f;
        char b[256];
        fx_open(&f, "a: yes\nb: Off\nc: \"true\"\nd: maybe\ns: hello\nt: {x: 1}\nu: 'quoted'\n"
                    "e: adam\ng: adamm\nh: lbfgs\n");
        int v;
        const char *s;
        ck_assert_int_eq(dt_ymap_bool(&f.m, "a", &v, 0, 0), 1);
        ck_assert_int_eq(v, 1);
        ck_assert_int_eq(dt_ymap_bool(&f.m, "b", &v, 1, 0), 1);
        ck_assert_int_eq(v, 0);
        ck_assert_int_eq(dt_ymap_bool(&f.m, "c", &v, 0, 0), -1);     /* quoted: a string */
        ck_assert_int_eq(dt_ymap_bool(&f.m, "d", &v, 0, 0), -1);
        ck_assert_str_eq(msg(&f.d, 1, b, sizeof b), "4:4: 'd' must be true or false, got 'maybe'");
        ck_assert_int_eq(dt_ymap_str(&f.m, "s", &s, NULL, 0), 1);
        ck_assert_str_eq(s, "hello");
        ck_assert_int_eq(dt_ymap_str(&f.m, "t", &s, "def", 0), -1);
        ck_assert_str_eq(s, "def");
        ck_assert_str_eq(msg(&f.d, 2, b, sizeof b), "6:4: 't' must be a string, got a mapping");
        ck_assert_int_eq(dt_ymap_str(&f.m, "u", &s, NULL, 0), 1);
        ck_assert_str_eq(s, "quoted");
        ck_assert_int_eq(dt_ymap_enum(&f.m, "e", names, &v, 0, 0), 1);
        ck_assert_int_eq(v, 1);
        ck_assert_int_eq(dt_ymap_enum(&f.m, "g", names, &v, 0, 0), -1);
        ck_assert_str_eq(f.d.msgs[3].text, "unknown value 'adamm' for 'g'; did you mean 'adam'?");
        ck_assert_int_eq(dt_ymap_enum(&f.m, "h", names, &v, 2, 0), -1);
        ck_assert_int_eq(v, 2);
        ck_assert_str_eq(f.d.msgs[4].text, "'h' must be one of sgd, adam, adamw; got 'lbfgs'");
        dt_ymap_close(&f.m);
        ck_assert_int_eq(f.d.n, 5);
        fx_free(&f);
}
END_TEST

START_TEST(test_ints_getter)
{
        fixture f;
        char b[256];
        fx_open(&f, "a: 3\nb: [3, 5]\nc: [1, 2, 3]\nd: []\ne: [1, x]\nf: {k: 1}\n");
        long v[4];
        int n;
        ck_assert_int_eq(dt_ymap_ints(&f.m, "a", v, &n, 2, 2, 1, 9, 0), 1);
        ck_assert_int_eq(n, 2);
        ck_assert_int_eq(v[0], 3);
        ck_assert_int_eq(v[1], 3);
        ck_assert_int_eq(dt_ymap_ints(&f.m, "a", v, &n, 2, 0, 1, 9, 0), 1);
        ck_assert_int_eq(n, 1);
        ck_assert_int_eq(dt_ymap_ints(&f.m, "b", v, &n, 2, 2, 1, 9, 0), 1);
        ck_assert_int_eq(n, 2);
        ck_assert_int_eq(v[1], 5);
        ck_assert_int_eq(dt_ymap_ints(&f.m, "c", v, &n, 2, 2, 1, 9, 0), -1);
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b), "3:4: 'c' must be a list of 1 to 2 integers, got 3");
        ck_assert_int_eq(dt_ymap_ints(&f.m, "d", v, &n, 2, 2, 1, 9, 0), -1);
        ck_assert_int_eq(dt_ymap_ints(&f.m, "e", v, &n, 2, 2, 1, 9, 0), -1);
        ck_assert_str_eq(msg(&f.d, 2, b, sizeof b), "5:8: 'e' must be an integer in [1, 9], got 'x'");
        ck_assert_int_eq(dt_ymap_ints(&f.m, "f", v, &n, 2, 2, 1, 9, 0), -1);
        ck_assert_int_eq(dt_ymap_ints(&f.m, "g", v, &n, 2, 2, 1, 9, 0), 0);
        ck_assert_int_eq(n, 0);
        dt_ymap_close(&f.m);
        fx_free(&f);
}
END_TEST

/* a pair: a scalar fills both, a 1-list too, a 2-list gives both; absent or bad leaves def */
START_TEST(test_pair_getter)
{
        fixture f;
        char b[256];
        fx_open(&f, "a: 3\nb: [3, 5]\nc: [4]\nd: [1, 2, 3]\n");
        int x = 0, y = 0;
        ck_assert_int_eq(dt_ymap_pair(&f.m, "a", &x, &y, 1, 1, 9, 1), 1);
        ck_assert(x == 3 && y == 3);
        ck_assert_int_eq(dt_ymap_pair(&f.m, "b", &x, &y, 1, 1, 9, 0), 1);
        ck_assert(x == 3 && y == 5);
        ck_assert_int_eq(dt_ymap_pair(&f.m, "c", &x, &y, 1, 1, 9, 0), 1);
        ck_assert(x == 4 && y == 4);
        ck_assert_int_eq(dt_ymap_pair(&f.m, "e", &x, &y, 7, 1, 9, 0), 0);
        ck_assert(x == 7 && y == 7);
        ck_assert_int_eq(dt_ymap_pair(&f.m, "d", &x, &y, 2, 1, 9, 0), -1);
        ck_assert(x == 2 && y == 2);
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b), "4:4: 'd' must be a list of 1 to 2 integers, got 3");
        ck_assert_int_eq(dt_ymap_pair(&f.m, "e", &x, &y, 2, 1, 9, 1), -1);
        ck_assert_str_eq(msg(&f.d, 1, b, sizeof b), "1:1: missing required key 'e' in 't'");
        dt_ymap_close(&f.m);
        fx_free(&f);
}
END_TEST

START_TEST(test_unknown_and_duplicate_keys)
{
        fixture f;
        char b[256];
        memset(&f, 0, sizeof f);
        ck_assert_int_eq(dt_ydoc_load_string(&f.y, "t.yaml", "epocs: 1\nbatch: 2\nbatch: 3\nzzz: 1\n"
                                             "? [a]\n: 1\n", &f.d), 0);
        ck_assert_int_eq(dt_ymap_open(&f.m, &f.y, dt_ydoc_root(&f.y), "train", &f.d), -1);
        ck_assert_int_eq(f.d.n, 2);
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b), "3:1: duplicate key 'batch' (first at line 2)");
        ck_assert_str_eq(msg(&f.d, 1, b, sizeof b), "5:3: mapping keys must be plain scalars");
        long v;
        dt_ymap_int(&f.m, "epochs", &v, 1, 1, 10, 0);
        ck_assert_int_eq(dt_ymap_int(&f.m, "batch", &v, 1, 1, 10, 0), 1);
        ck_assert_int_eq(v, 2);         /* the first of duplicates */
        dt_ymap_close(&f.m);
        ck_assert_int_eq(f.d.n, 4);
        ck_assert_str_eq(msg(&f.d, 2, b, sizeof b), "1:1: unknown key 'epocs' in 'train'; did you mean 'epochs'?");
        ck_assert_str_eq(msg(&f.d, 3, b, sizeof b), "4:1: unknown key 'zzz' in 'train'");
        fx_free(&f);
}
END_TEST

START_TEST(test_open_non_mapping)
{
        dt_ydoc y;
        dt_diag d = { 0 };
        dt_ymap m;
        ck_assert_int_eq(dt_ydoc_load_string(&y, "t.yaml", "train: fast\nlist: [1]\n", &d), 0);
        dt_ymap root;
        ck_assert_int_eq(dt_ymap_open(&root, &y, dt_ydoc_root(&y), "model", &d), 0);
        ck_assert_int_eq(dt_ymap_open(&m, &y, dt_ymap_get(&root, "train"), "train", &d), -1);
        ck_assert_str_eq(d.msgs[0].text, "expected a mapping for 'train', got a scalar");
        /* an absent section reads as all defaults */
        long v;
        ck_assert_int_eq(dt_ymap_int(&m, "epochs", &v, 10, 1, 100, 1), 0);
        ck_assert_int_eq(v, 10);
        ck_assert_int_eq(dt_ymap_open(&m, &y, NULL, "absent", &d), 0);
        ck_assert_int_eq(dt_ymap_int(&m, "epochs", &v, 7, 1, 100, 0), 0);
        ck_assert_int_eq(v, 7);
        dt_ymap_close(&m);
        dt_ymap_get(&root, "list");
        dt_ymap_close(&root);
        ck_assert_int_eq(d.n, 1);
        dt_ydoc_free(&y);
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_syntax_errors)
{
        dt_ydoc y;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_ydoc_load_string(&y, "s.yaml", "a: 1\nb: [1, 2\nc: 3\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(d.msgs[0].file, "s.yaml");
        ck_assert_int_eq(d.msgs[0].line, 3);
        ck_assert_ptr_nonnull(strstr(d.msgs[0].text, "YAML syntax: "));
        ck_assert_ptr_nonnull(strstr(d.msgs[0].text, "flow sequence started at line 2"));
        dt_ydoc_free(&y);
        dt_diag_free(&d);

        ck_assert_int_eq(dt_ydoc_load_string(&y, "s.yaml", "a: 1\n---\nb: 2\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 3);
        dt_ydoc_free(&y);
        dt_diag_free(&d);

        ck_assert_int_eq(dt_ydoc_load(&y, "/nonexistent/dir/x.yaml", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 0);
        ck_assert_str_eq(d.msgs[0].text, "cannot open: No such file or directory");
        dt_ydoc_free(&y);
        dt_diag_free(&d);
}
END_TEST

/* Aliases share nodes and may even point at themselves: nothing may loop or crash. */
START_TEST(test_hostile_documents)
{
        static const char *const docs[] = {
                "&a [*a]\n",
                "name: &a {x: *a}\ninput: *a\nlayers: *a\ndata: *a\ntrain: *a\n",
                "name: t\ninput: &i [4]\nlayers: &l\n  - {type: fc, units: 3}\n  - *l\n"
                "data: {train: &s {format: synthetic, n: 5}, test: *s}\n",
                "? {a: 1}\n: 2\n",
                "name: \"a\\0b\"\ninput: [4]\n",
                "",
                "---\n",
                "~\n",
                "train: {optimizer: [], schedule: {type: []}, epochs: [1], batch: {a: 1}}\n",
        };
        make_tmpdir();
        for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
                dt_model_spec s;
                dt_diag d = { 0 };
                ck_assert_int_eq(dt_model_spec_load(&s, write_spec("h.yaml", docs[i]), &d), -1);
                ck_assert_int_gt(d.n, 0);
                ck_assert_ptr_null(s.layers);
                dt_model_spec_free(&s);
                dt_diag_free(&d);
        }
        remove_tmpdir();
}
END_TEST

/* ---- composing documents: limits, tags, anchors ---- */

/* A number or bool written with an explicit tag is a string to YAML, as a quoted one is. */
START_TEST(test_tagged_scalars)
{
        fixture f;
        char b[256];
        fx_open(&f, "a: !!str 15\nb: !!int 15\nc: ! 15\nd: !!bool true\ne: !!float 0.5\nf: !!str name\n"
                    "g: [3, !!str 5]\nh: !<tag:example.com,1:x> 7\n");
        long v;
        double x;
        int t;
        const char *s;
        ck_assert_int_eq(dt_ymap_int(&f.m, "a", &v, 0, 1, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 0, b, sizeof b),
                         "1:4: 'a' must be an integer in [1, 100], got '15' with the explicit tag !!str");
        ck_assert_int_eq(dt_ymap_int(&f.m, "b", &v, 0, 1, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 1, b, sizeof b),
                         "2:4: 'b' must be an integer in [1, 100], got '15' with the explicit tag !!int");
        ck_assert_int_eq(dt_ymap_int(&f.m, "c", &v, 0, 1, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 2, b, sizeof b),
                         "3:4: 'c' must be an integer in [1, 100], got '15' with the explicit tag !");
        ck_assert_int_eq(dt_ymap_bool(&f.m, "d", &t, 0, 0), -1);
        ck_assert_int_eq(dt_ymap_num(&f.m, "e", &x, 0, 0, 1, 0), -1);
        ck_assert_int_eq(dt_ymap_str(&f.m, "f", &s, NULL, 0), 1);     /* a string may say so */
        ck_assert_str_eq(s, "name");
        long g[2];
        int n;
        ck_assert_int_eq(dt_ymap_ints(&f.m, "g", g, &n, 2, 0, 1, 9, 0), -1);
        ck_assert_str_eq(msg(&f.d, 5, b, sizeof b),
                         "7:8: 'g' must be an integer in [1, 9], got '5' with the explicit tag !!str");
        ck_assert_int_eq(dt_ymap_int(&f.m, "h", &v, 0, 1, 100, 0), -1);
        ck_assert_str_eq(msg(&f.d, 6, b, sizeof b), "8:4: 'h' must be an integer in [1, 100], got '7' with "
                         "the explicit tag tag:example.com,1:x");
        dt_ymap_close(&f.m);
        ck_assert_int_eq(f.d.n, 7);
        fx_free(&f);
}
END_TEST

/* Nesting stops at DT_YAML_MAX_DEPTH where it goes deeper, at once: libyaml alone took time
 * quadratic in the depth (100k levels: minutes; Check's timeout stops this test well before). */
START_TEST(test_depth_limit)
{
        enum { DEEP = 1000000 };
        char *text = dt_malloc(2 * DEEP + 2);
        dt_ydoc y;
        dt_diag d = { 0 };
        char b[256];
        /* exactly the limit: fine */
        memset(text, '[', DT_YAML_MAX_DEPTH);
        memset(text + DT_YAML_MAX_DEPTH, ']', DT_YAML_MAX_DEPTH);
        strcpy(text + 2 * DT_YAML_MAX_DEPTH, "\n");
        ck_assert_int_eq(dt_ydoc_load_string(&y, "deep.yaml", text, &d), 0);
        ck_assert_int_eq(d.n, 0);
        dt_ydoc_free(&y);
        /* a million levels of flow sequences, and of block mappings */
        memset(text, '[', DEEP);
        memset(text + DEEP, ']', DEEP);
        strcpy(text + 2 * DEEP, "\n");
        ck_assert_int_eq(dt_ydoc_load_string(&y, "deep.yaml", text, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(d.msgs[0].file, "deep.yaml");
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "1:65: YAML: mappings and sequences nested more than 64 levels deep");
        ck_assert_ptr_null(dt_ydoc_root(&y));
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        size_t k = 0;
        for (int i = 0; i < 100; i++) {
                memset(text + k, ' ', (size_t)i);
                k += (size_t)i;
                k += (size_t)sprintf(text + k, "k:\n");
        }
        text[k] = 0;
        ck_assert_int_eq(dt_ydoc_load_string(&y, "deep.yaml", text, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "65:65: YAML: mappings and sequences nested more than 64 levels deep");
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        free(text);
}
END_TEST

/* A spec over DT_YAML_MAX_BYTES is refused before it is parsed, from a file or a string. */
START_TEST(test_size_limit)
{
        size_t n = DT_YAML_MAX_BYTES + 1;
        char *text = dt_malloc(n + 1);
        memset(text, ' ', n);
        memcpy(text, "a: 1\n#", 6);
        text[n] = 0;
        dt_ydoc y;
        dt_diag d = { 0 };
        char want[128];
        snprintf(want, sizeof want, "%zu bytes, more than the 4 MiB a spec file may have", n);
        ck_assert_int_eq(dt_ydoc_load_string(&y, "big.yaml", text, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 0);
        ck_assert_str_eq(d.msgs[0].text, want);
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        make_tmpdir();
        const char *p = write_spec("big.yaml", text);
        ck_assert_int_eq(dt_ydoc_load(&y, p, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(d.msgs[0].file, p);
        ck_assert_int_eq(d.msgs[0].line, 0);
        ck_assert_str_eq(d.msgs[0].text, want);
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        text[n - 1] = 0;        /* exactly the limit: parsed */
        p = write_spec("limit.yaml", text);
        ck_assert_int_eq(dt_ydoc_load(&y, p, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_str_eq(dt_ynode_str(dt_ymap_get(&(dt_ymap){ .y = &y, .node = dt_ydoc_root(&y) }, "a")), "1");
        dt_ydoc_free(&y);
        remove_tmpdir();
        free(text);
}
END_TEST

START_TEST(test_anchors)
{
        static const struct { const char *text, *want; } bad[] = {
                { "&a [*a]\n", "1:5: YAML syntax: alias '*a' refers to a collection that contains it" },
                { "a: &m {b: [1, *m]}\n", "1:15: YAML syntax: alias '*m' refers to a collection that contains it" },
                { "a: &x 1\nb: &x 2\n", "2:4: YAML syntax: duplicate anchor '&x' (first at line 1)" },
                { "a: *nowhere\n", "1:4: YAML syntax: found undefined alias" },
        };
        char b[256];
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                dt_ydoc y;
                dt_diag d = { 0 };
                ck_assert_int_eq(dt_ydoc_load_string(&y, "a.yaml", bad[i].text, &d), -1);
                ck_assert_int_eq(d.n, 1);
                ck_assert_str_eq(msg(&d, 0, b, sizeof b), bad[i].want);
                dt_ydoc_free(&y);
                dt_diag_free(&d);
        }
        /* 100k anchors, each aliased: found by hash, not by a scan per alias */
        enum { N = 100000 };
        char *text = dt_malloc((size_t)N * 40);
        size_t k = (size_t)sprintf(text, "a: [");
        for (int i = 0; i < N; i++) k += (size_t)sprintf(text + k, "&a%d %d, *a%d, ", i, i, i);
        strcpy(text + k, "0]\n");
        dt_ydoc y;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_ydoc_load_string(&y, "a.yaml", text, &d), 0);
        dt_ymap m = { .y = &y, .node = dt_ydoc_root(&y) };
        yaml_node_t *seq = dt_ymap_get(&m, "a");
        ck_assert_int_eq(seq->data.sequence.items.top - seq->data.sequence.items.start, 2 * N + 1);
        ck_assert_int_eq(seq->data.sequence.items.start[2 * 777], seq->data.sequence.items.start[2 * 777 + 1]);
        dt_ydoc_free(&y);
        free(text);
}
END_TEST

/* The composed document is node for node the one yaml_parser_load builds: positions in messages
 * stay where they were. */
static void same_document(yaml_document_t *a, yaml_document_t *b, const char *what)
{
        long n = a->nodes.top - a->nodes.start;
        ck_assert_msg(n == b->nodes.top - b->nodes.start, "%s: node counts differ", what);
        for (long i = 0; i < n; i++) {
                yaml_node_t *x = a->nodes.start + i, *y = b->nodes.start + i;
                ck_assert_msg(x->type == y->type, "%s: node %ld: type", what, i + 1);
                ck_assert_msg(x->start_mark.index == y->start_mark.index && x->start_mark.line == y->start_mark.line &&
                              x->start_mark.column == y->start_mark.column, "%s: node %ld: start mark", what, i + 1);
                ck_assert_msg(x->end_mark.index == y->end_mark.index && x->end_mark.line == y->end_mark.line &&
                              x->end_mark.column == y->end_mark.column, "%s: node %ld: end mark", what, i + 1);
                if (strcmp((const char *)x->tag, "!"))
                        ck_assert_msg(!strcmp((const char *)x->tag, (const char *)y->tag), "%s: node %ld: tag", what, i + 1);
                if (x->type == YAML_SCALAR_NODE) {
                        ck_assert_msg(x->data.scalar.style == y->data.scalar.style &&
                                      x->data.scalar.length == y->data.scalar.length &&
                                      !memcmp(x->data.scalar.value, y->data.scalar.value, x->data.scalar.length),
                                      "%s: node %ld: scalar", what, i + 1);
                } else if (x->type == YAML_SEQUENCE_NODE) {
                        long k = x->data.sequence.items.top - x->data.sequence.items.start;
                        ck_assert_msg(x->data.sequence.style == y->data.sequence.style &&
                                      k == y->data.sequence.items.top - y->data.sequence.items.start &&
                                      !memcmp(x->data.sequence.items.start, y->data.sequence.items.start,
                                              (size_t)k * sizeof *x->data.sequence.items.start),
                                      "%s: node %ld: sequence", what, i + 1);
                } else {
                        long k = x->data.mapping.pairs.top - x->data.mapping.pairs.start;
                        ck_assert_msg(x->data.mapping.style == y->data.mapping.style &&
                                      k == y->data.mapping.pairs.top - y->data.mapping.pairs.start &&
                                      !memcmp(x->data.mapping.pairs.start, y->data.mapping.pairs.start,
                                              (size_t)k * sizeof *x->data.mapping.pairs.start),
                                      "%s: node %ld: mapping", what, i + 1);
                }
        }
}

static void compare_with_loader(const char *what, const char *text)
{
        dt_ydoc y;
        dt_diag d = { 0 };
        int rc = dt_ydoc_load_string(&y, what, text, &d);
        yaml_parser_t p;
        yaml_document_t doc, extra;
        ck_assert(yaml_parser_initialize(&p));
        yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
        int ok = yaml_parser_load(&p, &doc);
        if (!ok) {
                ck_assert_msg(rc == -1, "%s: libyaml fails, the composer does not", what);
        } else {
                int ok2 = yaml_parser_load(&p, &extra);
                int second = ok2 && yaml_document_get_root_node(&extra);
                if (ok2) yaml_document_delete(&extra);
                if (!ok2 || second) {
                        ck_assert_msg(rc == -1, "%s: a second document was not refused", what);
                } else if (rc && strstr(d.msgs[0].text, "nested more than")) {
                        /* the one difference, by design: the depth limit */
                } else {
                        ck_assert_msg(rc == 0, "%s: the composer fails: %s", what, d.n ? d.msgs[0].text : "");
                        same_document(&y.doc, &doc, what);
                }
                yaml_document_delete(&doc);
        }
        yaml_parser_delete(&p);
        dt_ydoc_free(&y);
        dt_diag_free(&d);
}

START_TEST(test_compose_matches_loader)
{
        static const char *const docs[] = {
                "", "---\n", "~\n", "# only a comment\n", "a\n", "[1, 2, {a: b}]\n", "--- !!map\na: 1\n...\n",
                "a: &x {b: 1, c: [2, 3]}\nd: *x\ne: *x\n", "? [a, b]\n: 1\n? {c: d}\n: [e]\n",
                "a: |\n  line 1\n  line 2\nb: >-\n  folded\n  text\nc: 'q''s'\nd: \"x\\ty\\0z\"\n",
                "- - - a\n    - b\n  - c\n- {d: [e, {f: g}]}\n", "a:\nb: !!str\nc: !!int 3\nd: !x [1]\ne: ! s\n",
                "%YAML 1.1\n%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n", "a: 1\n---\nb: 2\n", "a: [1, 2\n",
                "\xef\xbb\xbf" "a: b\n", "{a: 1, b: [2, {c: 3}], ? d : e}\n",
        };
        for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
                char what[32];
                snprintf(what, sizeof what, "docs[%zu]", i);
                compare_with_loader(what, docs[i]);
        }
        /* every spec in the tree */
        static const char *const dirs[] = { "models", "tests/specs", "tests/cli" };
        int files = 0;
        for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
                char cmd[600];
                snprintf(cmd, sizeof cmd, "ls '%s/%s'/*.yaml", srcdir(), dirs[i]);
                FILE *ls = popen(cmd, "r");
                ck_assert_ptr_nonnull(ls);
                char path[512];
                while (fgets(path, sizeof path, ls)) {
                        path[strcspn(path, "\n")] = 0;
                        FILE *f = fopen(path, "rb");
                        ck_assert_ptr_nonnull(f);
                        char *text = dt_malloc(1 << 16);
                        size_t n = fread(text, 1, (1 << 16) - 1, f);
                        fclose(f);
                        text[n] = 0;
                        if (strlen(text) == n) {        /* NULs: compared by the golden tests */
                                compare_with_loader(path, text);
                                files++;
                        }
                        free(text);
                }
                pclose(ls);
        }
        ck_assert_int_gt(files, 50);
}
END_TEST

/* Mistakes without a position say FILE: error: alone, the same for a model and a cluster spec. */
START_TEST(test_positionless_errors)
{
        make_tmpdir();
        char big[64];
        snprintf(big, sizeof big, "%zu bytes, more than the 4 MiB a spec file may have", DT_YAML_MAX_BYTES + 1);
        char *text = dt_malloc(DT_YAML_MAX_BYTES + 2);
        memset(text, '#', DT_YAML_MAX_BYTES + 1);
        text[DT_YAML_MAX_BYTES + 1] = 0;
        const struct { const char *name, *text, *model, *cluster; } cases[] = {
                { "empty.yaml", "", "empty document; expected a model spec mapping",
                  "empty document; expected a cluster spec mapping" },
                { "comment.yaml", "# nothing else\n", "empty document; expected a model spec mapping",
                  "empty document; expected a cluster spec mapping" },
                { "missing.yaml", NULL, "cannot open: No such file or directory",
                  "cannot open: No such file or directory" },
                { "dir", NULL, "cannot open: Is a directory", "cannot open: Is a directory" },
                { "big.yaml", "", big, big },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                char path[512];
                snprintf(path, sizeof path, "%s/%s", tmpdir, cases[i].name);
                if (!strcmp(cases[i].name, "dir")) {
                        ck_assert_int_eq(mkdir(path, 0755), 0);
                } else if (!strcmp(cases[i].name, "big.yaml")) {
                        write_spec(cases[i].name, text);
                } else if (cases[i].text) {
                        write_spec(cases[i].name, cases[i].text);
                }
                dt_model_spec s;
                dt_cluster_spec c;
                dt_diag d = { 0 };
                ck_assert_int_eq(dt_model_spec_load(&s, path, &d), -1);
                ck_assert_int_eq(dt_cluster_spec_load(&c, path, &d), -1);
                ck_assert_int_eq(d.n, 2);
                for (int k = 0; k < 2; k++) {
                        ck_assert_str_eq(d.msgs[k].file, path);
                        ck_assert_int_eq(d.msgs[k].line, 0);
                        ck_assert_int_eq(d.msgs[k].col, 0);
                }
                ck_assert_str_eq(d.msgs[0].text, cases[i].model);
                ck_assert_str_eq(d.msgs[1].text, cases[i].cluster);
                dt_diag_free(&d);
        }
        free(text);
        remove_tmpdir();
}
END_TEST

/* Bytes the YAML reader refuses (NUL, control characters, bad UTF-8) are reported at line:col like
 * every other mistake, counted in characters as libyaml's marks are; a UTF-8 BOM takes no column. */
START_TEST(test_reader_errors_have_positions)
{
        make_tmpdir();
        static const struct { const char *name, *text; size_t len; int line, col; const char *msg; } cases[] = {
                { "nul.yaml", "name: t\ninput: [4\0]\n", 19, 2, 10, "YAML syntax: control characters are not allowed (byte 0x00)" },
                { "bel.yaml", "name: t\n# ok\nx: a\ab\n", 20, 3, 5, "YAML syntax: control characters are not allowed (byte 0x07)" },
                { "lead.yaml", "name: t\n  # \xff\n", 14, 2, 5, "YAML syntax: invalid leading UTF-8 octet (byte 0xff)" },
                { "trail.yaml", "name: \xc3\x28\n", 9, 1, 7, "YAML syntax: invalid trailing UTF-8 octet (byte 0x28)" },
                { "wide.yaml", "name: \"\xc3\xa9\xe2\x82\xac\x01\"\n", 15, 1, 10,
                  "YAML syntax: control characters are not allowed (byte 0x01)" },
                { "bom.yaml", "\xef\xbb\xbfname: t\x02\n", 12, 1, 8, "YAML syntax: control characters are not allowed (byte 0x02)" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                char path[512];
                snprintf(path, sizeof path, "%s/%s", tmpdir, cases[i].name);
                FILE *f = fopen(path, "wb");
                ck_assert_ptr_nonnull(f);
                ck_assert_uint_eq(fwrite(cases[i].text, 1, cases[i].len, f), cases[i].len);
                fclose(f);
                dt_model_spec s;
                dt_cluster_spec c;
                dt_diag d = { 0 };
                ck_assert_int_eq(dt_model_spec_load(&s, path, &d), -1);
                ck_assert_int_eq(dt_cluster_spec_load(&c, path, &d), -1);
                ck_assert_int_eq(d.n, 2);
                for (int k = 0; k < 2; k++) {
                        ck_assert_msg(d.msgs[k].line == cases[i].line && d.msgs[k].col == cases[i].col,
                                      "%s: at %d:%d, expected %d:%d", cases[i].name, d.msgs[k].line, d.msgs[k].col,
                                      cases[i].line, cases[i].col);
                        ck_assert_str_eq(d.msgs[k].text, cases[i].msg);
                }
                dt_diag_free(&d);
        }
        remove_tmpdir();
}
END_TEST

/* ---- model spec ---- */

START_TEST(test_mlp_yaml)
{
        char path[1024];
        snprintf(path, sizeof path, "%s/models/mlp.yaml", srcdir());
        dt_model_spec s;
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(&s, path, &d);
        if (rc) dt_diag_print(&d, stderr);
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_str_eq(s.file, path);
        ck_assert_int_eq(strcmp(s.dir + strlen(s.dir) - 6, "models"), 0);
        ck_assert_str_eq(s.name, "mlp");
        ck_assert_int_eq(s.input.n, 1);
        ck_assert_int_eq(s.input.d[0], 784);
        ck_assert_int_eq(s.input_pos.line, 3);
        ck_assert_int_eq(s.input_pos.col, 8);
        ck_assert_int_eq(s.nlayers, 4);
        static const char *const types[] = { "fc", "dropout", "fc", "fc" };
        static const char *const names[] = { "fc1", "dropout1", "fc2", "fc3" };
        for (int i = 0; i < 4; i++) {
                ck_assert_ptr_nonnull(s.layers[i].ops);
                ck_assert_str_eq(s.layers[i].ops->name, types[i]);
                ck_assert_str_eq(s.layers[i].name, names[i]);
                ck_assert_ptr_nonnull(s.layers[i].cfg);
                ck_assert_int_eq(s.layers[i].pos.line, 5 + i);
                ck_assert_int_eq(s.layers[i].pos.col, 5);
        }
        ck_assert_int_eq(s.loss, DT_LOSS_SOFTMAX_XENT);
        const dt_data_spec *ds = &s.data;
        ck_assert_int_eq(ds->train.present, 1);
        ck_assert_int_eq(ds->train.format, DT_FMT_IDX);
        const char *img = "fashion-mnist/train-images-idx3-ubyte.gz";
        ck_assert_int_eq(strcmp(ds->train.images + strlen(ds->train.images) - strlen(img), img), 0);
        ck_assert_ptr_nonnull(strstr(ds->train.labels, "train-labels-idx1-ubyte.gz"));
        ck_assert_int_eq(ds->train.images_pos.line, 13);
        ck_assert_int_eq(ds->train.images_pos.col, 13);
        ck_assert_int_eq(ds->train.labels_pos.line, 14);
        ck_assert_int_eq(ds->train.limit, 0);
        ck_assert_int_eq(ds->test.present, 1);
        ck_assert_ptr_nonnull(strstr(ds->test.images, "t10k-images-idx3-ubyte.gz"));
        ck_assert_int_eq(ds->classes, 10);
        ck_assert(fabs(ds->scale - 1.0 / 255.0) < 1e-12);
        ck_assert_int_eq(ds->scale_given, 1);
        ck_assert(fabs(ds->mean - 0.2860) < 1e-12);
        ck_assert(fabs(ds->std - 0.3530) < 1e-12);
        const dt_train_spec *t = &s.train;
        ck_assert_int_eq(t->epochs, 15);
        ck_assert_int_eq(t->batch, 128);
        ck_assert_int_eq(t->batch_pos.line, 25);
        ck_assert_int_eq(t->batch_pos.col, 10);
        ck_assert_uint_eq(t->seed, 42);
        ck_assert_int_eq(t->opt.kind, DT_OPT_ADAMW);
        ck_assert(fabs(t->lr - 0.001) < 1e-15);
        ck_assert(fabsf(t->opt.weight_decay - 1e-4f) < 1e-10f);
        ck_assert(fabsf(t->opt.beta1 - 0.9f) < 1e-7f);
        ck_assert(fabsf(t->opt.beta2 - 0.999f) < 1e-7f);
        ck_assert(fabsf(t->opt.eps - 1e-8f) < 1e-12f);
        ck_assert(t->opt.momentum == 0.0f);
        ck_assert_int_eq(t->sched.kind, DT_SCHED_COSINE);
        ck_assert_int_eq(t->sched.warmup_steps, 200);
        ck_assert(t->sched.min_lr == 0.0);
        ck_assert(fabs(t->clip_norm - 5.0) < 1e-15);
        ck_assert_int_eq(t->checkpoint_every, 0);
        ck_assert_int_eq(t->max_steps, 0);
        ck_assert_int_eq(t->eval_batch, 1000);
        ck_assert_str_eq(s.device, "cpu");
        ck_assert(s.hash != 0);

        /* the hash is a function of the file's meaning: loading again gives the same */
        dt_model_spec s2;
        ck_assert_int_eq(dt_model_spec_load(&s2, path, &d), 0);
        ck_assert(s.hash == s2.hash);
        dt_model_spec_free(&s2);
        dt_model_spec_free(&s);
        ck_assert_ptr_null(s.layers);
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_defaults)
{
        make_tmpdir();
        dt_model_spec s;
        dt_diag d = { 0 };
        const char *p = write_spec("min.yaml", BASE "  test: {format: idx, images: i, labels: l}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), 0);
        ck_assert_str_eq(s.dir, tmpdir);
        ck_assert_str_eq(s.layers[0].name, "fc1");
        ck_assert_int_eq(s.loss, DT_LOSS_SOFTMAX_XENT);
        ck_assert_int_eq(s.data.train.format, DT_FMT_SYNTHETIC);
        ck_assert_int_eq(s.data.train.n, 10);
        ck_assert_uint_eq(s.data.train.seed, 1);
        ck_assert(s.data.train.noise == 0.5);
        ck_assert_int_eq(s.data.test.present, 1);
        ck_assert_str_eq(s.data.test.images, "i");      /* not found: kept as written */
        ck_assert_int_eq(s.data.classes, 0);
        ck_assert(s.data.scale == 1.0);                 /* train is not idx */
        ck_assert_int_eq(s.data.scale_given, 0);
        ck_assert(s.data.std == 1.0);
        ck_assert_int_eq(s.train.epochs, 10);
        ck_assert_int_eq(s.train.batch, 64);
        ck_assert_int_eq(s.train.batch_pos.line, 0);
        ck_assert_uint_eq(s.train.seed, 42);
        ck_assert_int_eq(s.train.opt.kind, DT_OPT_SGD);
        ck_assert(fabs(s.train.lr - 0.01) < 1e-15);
        ck_assert(s.train.opt.momentum == 0.0f);
        ck_assert_int_eq(s.train.sched.kind, DT_SCHED_CONSTANT);
        ck_assert_int_eq(s.train.sched.step_size, 1);
        ck_assert_int_eq(s.train.sched.step_unit_epochs, 1);
        ck_assert(fabs(s.train.sched.gamma - 0.1) < 1e-15);
        ck_assert_int_eq(s.train.eval_batch, 1000);
        ck_assert_str_eq(s.device, "cpu");
        dt_model_spec_free(&s);

        /* optimizer defaults by kind, scalar forms */
        p = write_spec("opt.yaml", BASE "train: {optimizer: momentum, schedule: cosine}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), 0);
        ck_assert_int_eq(s.train.opt.kind, DT_OPT_MOMENTUM);
        ck_assert(fabsf(s.train.opt.momentum - 0.9f) < 1e-7f);
        ck_assert(fabs(s.train.lr - 0.01) < 1e-15);
        ck_assert_int_eq(s.train.sched.kind, DT_SCHED_COSINE);
        dt_model_spec_free(&s);
        p = write_spec("opt.yaml", BASE "train: {optimizer: {type: rmsprop, momentum: 0.5}}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), 0);
        ck_assert(fabs(s.train.lr - 0.001) < 1e-15);
        ck_assert(fabsf(s.train.opt.alpha - 0.99f) < 1e-7f);
        ck_assert(fabsf(s.train.opt.momentum - 0.5f) < 1e-7f);
        dt_model_spec_free(&s);
        ck_assert_int_eq(d.n, 0);
        dt_diag_free(&d);
        remove_tmpdir();
}
END_TEST

START_TEST(test_all_errors_one_pass)
{
        make_tmpdir();
        dt_model_spec s;
        dt_diag d = { 0 };
        const char *p = write_spec("bad.yaml",
                "name: t\ninput: [4]\nlayers:\n  - {type: fcc, units: 3}\n  - {type: fc, units: 3, name: x}\n"
                "  - {type: fc, units: 3, name: x}\ndata:\n  train: {format: csv, path: a.csv, labels: b}\n"
                "train:\n  epocs: 3\n  batch: -5\n  optimizer: {type: adam, lr: .nan, momentum: 0.9}\n");
        ck_assert_int_eq(dt_model_spec_load(&s, p, &d), -1);
        ck_assert_ptr_null(s.layers);
        char b[256];
        const char *want[] = {
                "4:12: unknown layer type 'fcc'; did you mean 'fc'?",
                "6:32: duplicate layer name 'x' (first at line 5)",
                "8:37: key 'labels' does not apply to format 'csv'",
                "11:10: 'batch' must be an integer in [1, 1048576], got '-5'",
                "12:31: 'lr' must be a number in (0, 10], got '.nan'",
                "12:37: key 'momentum' does not apply to optimizer 'adam'",
                "10:3: unknown key 'epocs' in 'train'; did you mean 'epochs'?",
        };
        ck_assert_int_eq(d.n, 7);
        for (int i = 0; i < 7; i++) {
                int found = 0;
                for (int j = 0; j < d.n; j++) found |= !strcmp(msg(&d, j, b, sizeof b), want[i]);
                if (!found) ck_abort_msg("missing message: %s", want[i]);
        }
        dt_diag_free(&d);
        remove_tmpdir();
}
END_TEST

START_TEST(test_hash)
{
        make_tmpdir();
        dt_model_spec a, b;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_model_spec_load(&a, write_spec("a.yaml", BASE "train: {epochs: 1}\n"), &d), 0);
        /* training settings do not change the architecture's hash */
        ck_assert_int_eq(dt_model_spec_load(&b, write_spec("b.yaml", BASE "train: {epochs: 9, batch: 3}\n"), &d), 0);
        ck_assert(a.hash == b.hash);
        dt_model_spec_free(&b);
        ck_assert_int_eq(dt_model_spec_load(&b, write_spec("c.yaml",
                "name: t\ninput: [4]\nlayers:\n  - {type: fc, units: 4}\ndata:\n  train: {format: synthetic, n: 10}\n"), &d), 0);
        ck_assert(a.hash != b.hash);
        dt_model_spec_free(&b);
        ck_assert_int_eq(dt_model_spec_load(&b, write_spec("d.yaml", BASE "train: {optimizer: adam}\n"), &d), 0);
        ck_assert(a.hash != b.hash);
        dt_model_spec_free(&b);
        ck_assert_int_eq(dt_model_spec_load(&b, write_spec("e.yaml",
                "name: t\ninput: [2, 2]\nlayers:\n  - {type: fc, units: 3}\ndata:\n  train: {format: synthetic, n: 10}\n"), &d), 0);
        ck_assert(a.hash != b.hash);
        dt_model_spec_free(&b);
        dt_model_spec_free(&a);
        ck_assert_int_eq(d.n, 0);
        dt_diag_free(&d);
        remove_tmpdir();
}
END_TEST

START_TEST(test_list_keys)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        dt_model_spec_list_keys(f, NULL, 0);
        fclose(f);
        static const char *const want[] = {
                "model.name\n", "model.input\n", "layers.type\n", "layers.name\n", "layers.fc.units\n",
                "layers.dropout.rate\n", "data.source.format\n", "data.source.images\n",
                "data.source.label_column\n", "data.scale\n", "train.batch\n", "train.optimizer.lr\n",
                "train.optimizer.beta2\n", "train.schedule.gamma\n", "train.weight_decay\n",
        };
        for (size_t i = 0; i < sizeof want / sizeof *want; i++)
                if (!strstr(buf, want[i])) ck_abort_msg("key list lacks %s", want[i]);
        ck_assert_ptr_null(dt_ymap_key_hook);
        /* sorted and unique */
        char *prev = NULL;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                if (prev) ck_assert_int_lt(strcmp(prev, line), 0);
                prev = line;
        }
        free(buf);
}
END_TEST

/* ---- --set overrides (spec/overrides.c) ---- */

/* Every key `dtrain keys` lists starts with one of dt_model_top_keys: --set sends a key to the
 * model spec by that list. */
START_TEST(test_set_top_keys)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_model_spec_list_keys(f, NULL, 0);
        fclose(f);
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                if (!strncmp(line, "model.", 6)) line += 6;     /* the top level's keys */
                line[strcspn(line, ". ")] = 0;
                int found = 0;
                for (int i = 0; dt_model_top_keys[i] && !found; i++) found = !strcmp(dt_model_top_keys[i], line);
                ck_assert_msg(found, "dtrain keys lists '%s', which dt_model_top_keys lacks", line);
        }
        free(buf);
        const char *cl[DT_CS_NKEYS];
        int n = dt_cluster_spec_top_keys(cl, DT_CS_NKEYS);
        ck_assert_int_ge(n, 2);
        int part = 0;
        for (int i = 0; i < n; i++) part |= !strcmp(cl[i], "partition");
        ck_assert(part);
}
END_TEST

START_TEST(test_set_apply)
{
        make_tmpdir();
        char path[512];
        snprintf(path, sizeof path, "%s", write_spec("s.yaml", BASE "  test: &t {format: synthetic, n: 7}\n"
                                      "train: {epochs: 2, optimizer: {type: sgd, lr: 0.1}}\n"
                                      "parallel: {partition: {sync: average}}\n"));
        dt_sets sets = { 0 };
        dt_sets_add(&sets, "train.optimizer.lr=0.5", NULL);
        dt_sets_add(&sets, "layers.fc1.units=9", NULL);            /* the name the layer gets */
        dt_sets_add(&sets, "train.batch=4", NULL);                 /* added */
        dt_sets_add(&sets, "partition.average_every=3", NULL);     /* into parallel: */
        dt_sets_add(&sets, "model.data.test.n=5", NULL);
        dt_model_spec s;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_model_spec_load_sets(&s, path, &sets, 0, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert(s.train.lr == 0.5);
        ck_assert_int_eq(s.train.batch, 4);
        ck_assert_int_eq(s.train.epochs, 2);
        ck_assert_int_eq(s.parallel.average_every, 3);
        ck_assert_int_eq(s.data.test.n, 5);
        ck_assert_uint_ne(s.hash, 0);
        dt_model_spec_free(&s);
        /* an aliased mapping changes only where the path goes */
        char apath[512];
        snprintf(apath, sizeof apath, "%s", write_spec("a.yaml", "name: t\ninput: [4]\nlayers: [{type: fc, units: 3}]\n"
                                                        "data:\n  train: &s {format: synthetic, n: 10}\n  test: *s\n"));
        dt_sets al = { 0 };
        dt_sets_add(&al, "data.test.n=5", NULL);
        ck_assert_int_eq(dt_model_spec_load_sets(&s, apath, &al, 0, &d), 0);
        ck_assert_int_eq(s.data.test.n, 5);
        ck_assert_int_eq(s.data.train.n, 10);
        dt_model_spec_free(&s);
        dt_sets_free(&al);
        /* with a cluster file the cluster spec's keys wait for it */
        dt_sets c = { 0 };
        dt_sets_add(&c, "partition.average_every=2", NULL);
        ck_assert_int_eq(dt_model_spec_load_sets(&s, path, &c, 1, &d), 0);
        ck_assert_int_eq(s.parallel.average_every, 1);
        dt_model_spec_free(&s);
        const char *cpath = write_spec("c.yaml", "partition: {sync: average}\n");
        dt_cluster_spec cs;
        ck_assert_int_eq(dt_cluster_spec_load_sets(&cs, cpath, &c, &d), 0);
        ck_assert_int_eq(cs.average_every, 2);
        /* errors name the argument, not the file */
        dt_sets bad = { 0 };
        dt_sets_add(&bad, "train.optimizer.lr=x", NULL);
        dt_sets_add(&bad, "layers.9.units=2", NULL);
        ck_assert_int_eq(dt_model_spec_load_sets(&s, path, &bad, 0, &d), -1);
        ck_assert_int_eq(d.n, 2);
        for (int i = 0; i < d.n; i++) {
                ck_assert_int_eq(d.msgs[i].line, 0);
                ck_assert_str_eq(d.msgs[i].file, i == 0 ? "--set layers.9.units=2" : "--set train.optimizer.lr=x");
        }
        ck_assert_str_eq(d.msgs[0].text, "'layers' has 1 item; index 9 is out of range (0 to 0)");
        dt_diag_free(&d);
        /* the later of the same KEY wins in a merge */
        dt_sets m = { 0 };
        dt_sets_merge(&m, &sets);
        dt_sets_merge(&m, &bad);
        ck_assert_int_eq(m.n, 6);
        ck_assert_str_eq(m.kv[5], "layers.9.units=2");
        ck_assert_str_eq(m.kv[4], "train.optimizer.lr=x");
        /* the record reads back as written, quotes and all */
        dt_sets q = { 0 }, r = { 0 };
        dt_sets_add(&q, "name=a \"b\" \\ c", NULL);
        dt_sets_add(&q, "data.mean=[0.5, 0.5]", NULL);
        ck_assert_int_eq(dt_sets_write(&q, tmpdir), 0);
        ck_assert_int_eq(dt_sets_read(&r, tmpdir, 1), 1);
        ck_assert_int_eq(r.n, 2);
        ck_assert_str_eq(r.kv[0], q.kv[0]);
        ck_assert_str_eq(r.kv[1], q.kv[1]);
        dt_sets empty = { 0 };
        ck_assert_int_eq(dt_sets_write(&empty, tmpdir), 0);
        ck_assert_int_eq(dt_sets_read(&empty, tmpdir, 1), 0);
        dt_sets_free(&sets); dt_sets_free(&c); dt_sets_free(&bad); dt_sets_free(&m); dt_sets_free(&q); dt_sets_free(&r);
        remove_tmpdir();
}
END_TEST

START_TEST(test_set_run_dir)
{
        static const char *const cases[][2] = {
                { "runs/x", "runs/x" }, { "runs/x/", "runs/x" }, { "runs/x/checkpoints", "runs/x" },
                { "runs/x/checkpoints/best", "runs/x" }, { "runs/x/checkpoints/step-00000040/", "runs/x" },
                { "checkpoints/latest", "." }, { "/r/checkpoints", "/r" }, { "a/b/c", "a/b/c" },
        };
        char out[256];
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                dt_sets_run_dir(cases[i][0], out, sizeof out);
                ck_assert_str_eq(out, cases[i][1]);
        }
}
END_TEST

static Suite *spec_suite(void)
{
        Suite *s = suite_create("spec");
        TCase *y = tcase_create("yaml");
        tcase_add_test(y, test_did_you_mean);
        tcase_add_test(y, test_suggest_synonyms);
        tcase_add_test(y, test_int_getter);
        tcase_add_test(y, test_num_getter);
        tcase_add_test(y, test_bool_str_enum);
        tcase_add_test(y, test_ints_getter);
        tcase_add_test(y, test_pair_getter);
        tcase_add_test(y, test_unknown_and_duplicate_keys);
        tcase_add_test(y, test_open_non_mapping);
        tcase_add_test(y, test_syntax_errors);
        tcase_add_test(y, test_tagged_scalars);
        tcase_add_test(y, test_depth_limit);
        tcase_add_test(y, test_size_limit);
        tcase_add_test(y, test_anchors);
        tcase_add_test(y, test_compose_matches_loader);
        suite_add_tcase(s, y);
        TCase *m = tcase_create("model");
        tcase_add_test(m, test_hostile_documents);
        tcase_add_test(m, test_positionless_errors);
        tcase_add_test(m, test_reader_errors_have_positions);
        tcase_add_test(m, test_mlp_yaml);
        tcase_add_test(m, test_defaults);
        tcase_add_test(m, test_all_errors_one_pass);
        tcase_add_test(m, test_hash);
        tcase_add_test(m, test_list_keys);
        tcase_add_test(m, test_set_top_keys);
        tcase_add_test(m, test_set_apply);
        tcase_add_test(m, test_set_run_dir);
        suite_add_tcase(s, m);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(spec_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? 1 : 0;
}
