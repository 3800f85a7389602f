/* tests/unit/test_keys.c - `dtrain keys` tells the truth: for every key it lists with a value as its
 * default, a spec that writes that value parses to the same model spec as one that leaves the key
 * out; the rule defaults (in parentheses) are checked case by case; every key has a type. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec/model_spec.h"

static char tmpdir[256];

static void make_tmpdir(void)
{
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/dtrain-test-keys.XXXXXX", t && *t ? t : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        ck_assert_int_eq(system(cmd), 0);
}

/* Loads text as a spec; 0, or -1 with the first message in why. */
static int load(dt_model_spec *s, const char *text, char *why, size_t len)
{
        char path[512];
        snprintf(path, sizeof path, "%s/k.yaml", tmpdir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(s, path, &d);
        if (rc < 0 && why)
                snprintf(why, len, "%d:%d: %s", d.n ? d.msgs[0].line : 0, d.n ? d.msgs[0].col : 0,
                         d.n ? d.msgs[0].text : "?");
        dt_diag_free(&d);
        return rc;
}

/* ---- what a parsed spec means: everything but where things were written ---- */

static void strip_source(dt_source_spec *s)
{
        memset(&s->images_pos, 0, sizeof s->images_pos);
        memset(&s->labels_pos, 0, sizeof s->labels_pos);
        memset(&s->pos, 0, sizeof s->pos);
        s->xfiles = s->yfiles = NULL;   /* lists of paths: no default to compare */
}

/* NULL when a and b mean the same, else the part that differs. */
static const char *differs(const dt_model_spec *a, const dt_model_spec *b)
{
        if (strcmp(a->name, b->name) || memcmp(&a->input, &b->input, sizeof a->input)) return "name or input";
        if (a->loss != b->loss || strcmp(a->device, b->device) || a->deterministic != b->deterministic)
                return "loss, device or deterministic";
        if (a->hash != b->hash) return "the spec's hash";
        if (a->nlayers != b->nlayers) return "the layer count";
        for (int i = 0; i < a->nlayers; i++) {
                const dt_layer_spec *x = &a->layers[i], *y = &b->layers[i];
                if (x->ops != y->ops || strcmp(x->name, y->name) || x->nin != y->nin || x->named != y->named ||
                    memcmp(x->src, y->src, sizeof x->src))
                        return "a layer's kind, name or inputs";
                if (x->ops->cfg_size && memcmp(x->cfg, y->cfg, x->ops->cfg_size)) return "a layer's settings";
        }
        dt_data_spec da = a->data, db = b->data;
        strip_source(&da.train);
        strip_source(&da.test);
        strip_source(&db.train);
        strip_source(&db.test);
        da.scale_given = db.scale_given = 0;    /* whether it was written, not what it is */
        if (memcmp(&da, &db, sizeof da)) return "data";
        dt_train_spec ta = a->train, tb = b->train;
        dt_pos z = { 0, 0 };
        ta.batch_pos = tb.batch_pos = ta.init_from_pos = tb.init_from_pos = ta.freeze_pos = tb.freeze_pos = z;
        ta.freeze = tb.freeze = NULL;
        if (memcmp(&ta, &tb, sizeof ta)) return "train";
        dt_cluster_spec ca = a->parallel, cb = b->parallel;
        dt_cluster_spec *c[2] = { &ca, &cb };
        for (int i = 0; i < 2; i++) {
                /* which keys were written (and where) lets a cluster file override them one by one */
                c[i]->set = c[i]->bad = c[i]->alt_set = 0;
                memset(c[i]->key_pos, 0, sizeof c[i]->key_pos);
                c[i]->ranks_pos = c[i]->strategy_pos = z;
                memset(c[i]->cuts.pos, 0, sizeof c[i]->cuts.pos);
                memset(c[i]->splits.pos, 0, sizeof c[i]->splits.pos);
        }
        if (memcmp(&ca, &cb, sizeof ca)) return "parallel";
        return NULL;
}

/* ---- the listing ---- */

typedef struct entry {
        char key[96], type[512], def[256];
} entry;

static entry *listing(int *n)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        dt_model_spec_list_keys(f, NULL, 1);
        fclose(f);
        entry *e = calloc(1000, sizeof *e);
        int k = 0;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
                ck_assert_int_lt(k, 1000);
                int used = 0;
                ck_assert_int_eq(sscanf(line, "%95s %511s %n", e[k].key, e[k].type, &used), 2);
                snprintf(e[k].def, sizeof e[k].def, "%s", line + used);
                k++;
        }
        free(buf);
        *n = k;
        return e;
}

static const entry *find(const entry *e, int n, const char *key)
{
        for (int i = 0; i < n; i++)
                if (!strcmp(e[i].key, key)) return &e[i];
        ck_abort_msg("dtrain keys does not list %s", key);
        return NULL;
}

/* A value for a required key of a layer kind, from its type. */
static void required_value(const entry *e, char *out, size_t len)
{
        if (strchr(e->type, '|') && strncmp(e->type, "integer", 7)) {
                const char *t = e->type;
                if (!strncmp(t, "none|", 5)) t += 5;    /* a function, not none */
                snprintf(out, len, "%.*s", (int)strcspn(t, "|"), t);
        } else {
                snprintf(out, len, "2");
        }
}

/* ---- specs to try a key in: '@' is where "key: value" goes ---- */

#define HEAD "name: t\ninput: [1, 6, 6]\nlayers:\n"
#define TAIL_LAYERS "  - {type: flatten}\n  - {type: fc, units: 2}\n"
#define SYN "data:\n  train: {format: synthetic, n: 8}\n"
#define PLAIN HEAD TAIL_LAYERS SYN

static int contexts(const entry *all, int n, const char *ctx, char out[][2048], int max)
{
        int k = 0;
#define ADD(...) do { ck_assert_int_lt(k, max); snprintf(out[k++], 2048, __VA_ARGS__); } while (0)
        if (!strcmp(ctx, "model")) {
                ADD(PLAIN "@\n");
        } else if (!strcmp(ctx, "train")) {
                ADD(PLAIN "train: {@}\n");
        } else if (!strcmp(ctx, "train.optimizer")) {
                for (int i = 0; dt_opt_names[i]; i++) ADD(PLAIN "train: {optimizer: {type: %s@}}\n", dt_opt_names[i]);
        } else if (!strcmp(ctx, "train.schedule")) {
                for (int i = 0; dt_sched_names[i]; i++) ADD(PLAIN "train: {schedule: {type: %s@}}\n", dt_sched_names[i]);
        } else if (!strcmp(ctx, "data")) {
                ADD(PLAIN "  @\n");
        } else if (!strcmp(ctx, "data.augment")) {
                ADD(PLAIN "  augment: {@}\n");
        } else if (!strcmp(ctx, "data.source")) {
                ADD(HEAD TAIL_LAYERS "data:\n  train: {format: synthetic, n: 8@}\n");
                ADD(HEAD TAIL_LAYERS "data:\n  train: {format: idx, images: i, labels: l@}\n");
                ADD(HEAD TAIL_LAYERS "data:\n  train: {format: npy, x: x, y: y@}\n");
                ADD(HEAD TAIL_LAYERS "data:\n  train: {format: csv, path: c@}\n");
                ADD("name: t\ninput: [64]\nlayers:\n  - {type: fc, units: 2}\ndata:\n  train: {format: text, path: t@}\n");
        } else if (!strcmp(ctx, "parallel")) {
                ADD(PLAIN "parallel: {@}\n");
        } else if (!strcmp(ctx, "parallel.network")) {
                ADD(PLAIN "parallel: {network: {@}}\n");
        } else if (!strcmp(ctx, "parallel.partition")) {
                static const char *const modes[] = { "", "sync: average", "sync: ssp", "compression: topk",
                                                     "reproducible: true", "strategy: model", "strategy: hybrid" };
                for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
                        ADD(PLAIN "parallel: {partition: {%s@}}\n", modes[i]);
        } else if (!strncmp(ctx, "layers.", 7)) {
                const char *kind = ctx + 7;
                const dt_layer_ops *ops = dt_layer_find(kind);
                ck_assert_ptr_nonnull(ops);
                char req[512] = "";
                size_t rl = 0;
                for (int i = 0; i < n; i++) {
                        size_t cl = strlen(ctx);
                        if (strncmp(all[i].key, ctx, cl) || all[i].key[cl] != '.' || strcmp(all[i].def, "(required)"))
                                continue;
                        char v[64];
                        required_value(&all[i], v, sizeof v);
                        rl += (size_t)snprintf(req + rl, sizeof req - rl, ", %s: %s", all[i].key + cl + 1, v);
                }
                if (ops->min_inputs > 0)
                        ADD(HEAD "  - {type: fc, name: a, units: 2}\n  - {type: fc, name: b, units: 2, input: input}\n"
                            "  - {type: %s, inputs: [a, b]%s@}\n" TAIL_LAYERS SYN, kind, req);
                else
                        ADD(HEAD "  - {type: %s%s@}\n" TAIL_LAYERS SYN, kind, req);
        }
#undef ADD
        return k;
}

/* t with '@' replaced by "key: value" (after ", " inside a flow mapping with entries), or by nothing. */
static void place(const char *t, const char *key, const char *value, char *out, size_t len)
{
        const char *at = strchr(t, '@');
        ck_assert_ptr_nonnull(at);
        char ins[512] = "";
        if (key) {
                int bare = at == t || at[-1] == '{' || at[-1] == ' ' || at[-1] == '\n';
                snprintf(ins, sizeof ins, "%s%s: %s", bare ? "" : ", ", key, value);
        }
        snprintf(out, len, "%.*s%s%s", (int)(at - t), t, ins, at + 1);
}

/* Compares t without the key and with key: value; 1 same, 0 different (why says how), -1 the key
 * does not fit this context (the spec without it, or with it, is refused; why says why). */
static int compare(const char *t, const char *key, const char *value, char *why, size_t len)
{
        char a[2048], b[2048];
        place(t, NULL, NULL, a, sizeof a);
        place(t, key, value, b, sizeof b);
        dt_model_spec sa, sb;
        if (load(&sa, a, why, len) < 0) return -1;
        if (load(&sb, b, why, len) < 0) {
                dt_model_spec_free(&sa);
                return -1;
        }
        const char *d = differs(&sa, &sb);
        if (d) snprintf(why, len, "%s differs", d);
        dt_model_spec_free(&sa);
        dt_model_spec_free(&sb);
        return d ? 0 : 1;
}

START_TEST(test_value_defaults_change_nothing)
{
        make_tmpdir();
        int n;
        entry *e = listing(&n);
        int tested = 0;
        for (int i = 0; i < n; i++) {
                ck_assert_msg(strcmp(e[i].type, "-"), "%s is listed without a type", e[i].key);
                const char *def = e[i].def;
                if (!strcmp(def, "-") || def[0] == '(') continue;       /* none, or a rule */
                char ctx[96];
                const char *dot = strrchr(e[i].key, '.');
                snprintf(ctx, sizeof ctx, "%.*s", (int)(dot - e[i].key), e[i].key);
                const char *key = dot + 1;
                char t[8][2048], why[512] = "no context for this section in test_keys.c", first[512] = "";
                int nt = contexts(e, n, ctx, t, 8), verdict = -1;
                for (int k = 0; k < nt && verdict < 0; k++) {
                        verdict = compare(t[k], key, def, why, sizeof why);
                        if (verdict < 0 && !first[0]) snprintf(first, sizeof first, "%s", why);
                }
                ck_assert_msg(verdict >= 0, "%s: writing the listed default '%s' is refused wherever tried (%s)",
                              e[i].key, def, first[0] ? first : why);
                ck_assert_msg(verdict == 1, "%s: writing the listed default '%s' changes the spec: %s", e[i].key,
                              def, why);
                tested++;
        }
        /* the listing has about 110 such keys; far fewer means the parsing above broke */
        ck_assert_int_ge(tested, 90);
        free(e);
        remove_tmpdir();
}
END_TEST

/* A rule default: the listing says rule_word, and each pair of specs (without, with) is the same. */
static void rule(const entry *e, int n, const char *key, const char *rule_word, const char *const *pairs, int npairs)
{
        const entry *x = find(e, n, key);
        ck_assert_msg(x->def[0] == '(' && strstr(x->def, rule_word), "%s: default '%s' does not say '%s'", key,
                      x->def, rule_word);
        for (int i = 0; i < npairs; i += 2) {
                dt_model_spec a, b;
                char why[512] = "";
                ck_assert_msg(load(&a, pairs[i], why, sizeof why) == 0, "%s: %s", key, why);
                ck_assert_msg(load(&b, pairs[i + 1], why, sizeof why) == 0, "%s: %s", key, why);
                const char *d = differs(&a, &b);
                ck_assert_msg(!d, "%s: %s differs between\n%s---\n%s", key, d, pairs[i], pairs[i + 1]);
                dt_model_spec_free(&a);
                dt_model_spec_free(&b);
        }
}

#define TEXT(input, src) "name: t\ninput: [" input "]\nlayers:\n  - {type: fc, units: 2}\ndata:\n" src

START_TEST(test_rule_defaults)
{
        make_tmpdir();
        int n;
        entry *e = listing(&n);
        for (int p = 0; p < 2; p++) {
                const char *kind = p ? "avgpool" : "maxpool";
                char a1[1024], b1[1024], a2[1024], b2[1024], key[64];
                snprintf(a1, sizeof a1, HEAD "  - {type: %s, kernel: 3}\n" TAIL_LAYERS SYN, kind);
                snprintf(b1, sizeof b1, HEAD "  - {type: %s, kernel: 3, stride: 3}\n" TAIL_LAYERS SYN, kind);
                snprintf(a2, sizeof a2, HEAD "  - {type: %s, kernel: [2, 3]}\n" TAIL_LAYERS SYN, kind);
                snprintf(b2, sizeof b2, HEAD "  - {type: %s, kernel: [2, 3], stride: [2, 3]}\n" TAIL_LAYERS SYN, kind);
                const char *const pairs[] = { a1, b1, a2, b2 };
                snprintf(key, sizeof key, "layers.%s.stride", kind);
                rule(e, n, key, "kernel", pairs, 4);
        }
        char idx_scale[1024];
        snprintf(idx_scale, sizeof idx_scale, HEAD TAIL_LAYERS "data:\n  train: {format: idx, images: i, labels: l}\n"
                 "  scale: %.17g\n", 1.0 / 255.0);
        const char *const scale[] = {
                HEAD TAIL_LAYERS "data:\n  train: {format: idx, images: i, labels: l}\n", idx_scale,
                PLAIN, PLAIN "  scale: 1\n",
        };
        rule(e, n, "data.scale", "1/255 for format idx, else 1", scale, 4);
        const char *const stride[] = {
                TEXT("64", "  train: {format: text, path: t}\n"), TEXT("64", "  train: {format: text, path: t, stride: 64}\n"),
                TEXT("32", "  train: {format: text, path: t, seq_len: 32}\n"),
                TEXT("32", "  train: {format: text, path: t, seq_len: 32, stride: 32}\n"),
        };
        rule(e, n, "data.source.stride", "seq_len", stride, 4);
        const char *const part[] = {
                TEXT("64", "  train: {format: text, path: t}\n  test: {format: text, path: t}\n"),
                TEXT("64", "  train: {format: text, path: t, part: train}\n  test: {format: text, path: t, part: holdout}\n"),
        };
        rule(e, n, "data.source.part", "train in data.train, holdout in data.test", part, 2);
        const char *const lr[] = {
                PLAIN "train: {optimizer: {type: sgd}}\n", PLAIN "train: {optimizer: {type: sgd, lr: 0.01}}\n",
                PLAIN "train: {optimizer: {type: nesterov}}\n", PLAIN "train: {optimizer: {type: nesterov, lr: 0.01}}\n",
                PLAIN "train: {optimizer: {type: adam}}\n", PLAIN "train: {optimizer: {type: adam, lr: 0.001}}\n",
                PLAIN "train: {optimizer: adamw}\n", PLAIN "train: {optimizer: {type: adamw, lr: 0.001}}\n",
                PLAIN "train: {optimizer: {type: rmsprop}}\n", PLAIN "train: {optimizer: {type: rmsprop, lr: 0.001}}\n",
        };
        rule(e, n, "train.optimizer.lr", "0.01 for sgd, momentum, nesterov; 0.001 for rmsprop, adam, adamw", lr, 10);
        const char *const mom[] = {
                PLAIN "train: {optimizer: momentum}\n", PLAIN "train: {optimizer: {type: momentum, momentum: 0.9}}\n",
                PLAIN "train: {optimizer: {type: nesterov}}\n", PLAIN "train: {optimizer: {type: nesterov, momentum: 0.9}}\n",
                PLAIN "train: {optimizer: {type: rmsprop}}\n", PLAIN "train: {optimizer: {type: rmsprop, momentum: 0}}\n",
        };
        rule(e, n, "train.optimizer.momentum", "0.9 for momentum, nesterov; 0 for rmsprop", mom, 6);
        /* required: leaving it out is an error, not a default */
        const entry *f = find(e, n, "layers.activation.function");
        ck_assert_str_eq(f->def, "(required)");
        dt_model_spec s;
        char why[512];
        ck_assert_int_eq(load(&s, HEAD "  - {type: activation}\n" TAIL_LAYERS SYN, why, sizeof why), -1);
        ck_assert_int_eq(load(&s, HEAD "  - {type: fc, units: 3}\n  - {type: activation, function: relu}\n" TAIL_LAYERS SYN,
                              why, sizeof why), 0);
        dt_model_spec_free(&s);
        /* an enum's type lists its values */
        ck_assert_str_eq(find(e, n, "train.optimizer.type")->type, "sgd|momentum|nesterov|rmsprop|adam|adamw");
        ck_assert_str_eq(find(e, n, "parallel.partition.schedule")->type, "gpipe|1f1b|zb-h1|interleaved|zb-v|v-half");
        ck_assert_ptr_nonnull(strstr(find(e, n, "layers.type")->type, "|maxpool|"));
        free(e);
        remove_tmpdir();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("keys");
        TCase *t = tcase_create("defaults");
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_value_defaults_change_nothing);
        tcase_add_test(t, test_rule_defaults);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? 1 : 0;
}
