/* spec/model_data.c - the model spec's 'data:' section (dtrain-model(5), DATA): each source's
 * format and the keys that apply to it, paths found now (file:line:col when not), text sources
 * checked against the model's input. Errors go to the parse's dt_diag (model_int.h). */
#include "spec/model_spec.h"
#include "spec/model_int.h"
#include "spec/data_keys.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* dirs: a directory is a valid target too (text sources read a directory whole) */
static void store_path(dt_ms_ctx *p, dt_ymap *m, const char *key, const char *v, char *out, dt_pos *pos, int dirs)
{
        yaml_node_t *n = dt_ymap_get(m, key);
        *pos = dt_ms_pos(n);
        if (!*v) {
                dt_yerr(p->d, p->y, n, "'%s' must be a path, got an empty string", key);
                p->rc = -1;
                return;
        }
        if (strlen(v) >= DT_PATH_MAX) {
                dt_yerr(p->d, p->y, n, "'%s' is longer than %d bytes", key, DT_PATH_MAX - 1);
                p->rc = -1;
                return;
        }
        /* a missing file is the data loader's error (exit 3), not the spec's */
        if ((dirs ? dt_data_resolve_any(p->s->dir, v, out, DT_PATH_MAX)
                  : dt_data_resolve(p->s->dir, v, out, DT_PATH_MAX)) != 0)
                strcpy(out, v);
}

/* What the data loader would only find out later, the spec of a text source already shows: its
 * windows must be the model's input (seq_len byte ids), and its labels are classes. Reported at
 * seq_len (at the source when seq_len is left at its default) and at the format. seq_len 0: not
 * valid, already reported. */
static void text_fits_model(dt_ms_ctx *p, dt_ymap *m, yaml_node_t *src, long seq_len)
{
        size_t want = dt_shape_size(&p->s->input);
        if (seq_len > 0 && want && want != (size_t)seq_len) {
                yaml_node_t *at = dt_ymap_get(m, "seq_len");
                char sb[64];
                dt_yerr(p->d, p->y, at ? at : src, "windows of %ld byte ids ('seq_len'%s) do not fit 'input' %s, "
                        "which takes %zu; set seq_len: %zu or input: [%ld]", seq_len, at ? "" : ", the default",
                        dt_shape_str(&p->s->input, sb, sizeof sb), want, want, seq_len);
                p->rc = -1;
        }
        if (p->s->loss != DT_LOSS_SOFTMAX_XENT) {
                dt_yerr(p->d, p->y, dt_ymap_get(m, "format"), "format 'text' gives next-byte class labels, "
                        "which loss '%s' cannot take; use loss: softmax_cross_entropy", dt_loss_names[p->s->loss]);
                p->rc = -1;
        }
}

/* A source's keys, every format's: which of them apply to each format (bit i) and which it needs. */
static const char *const src_keys[] = { "images", "labels", "x", "y", "path", "label_column", "header", "n",
                                        "seed", "noise", "sequence", "seq_len", "holdout", "part", "stride" };
static const unsigned src_apply[DT_FMT_COUNT] = { 0x403, 0x070, 0x00c, 0x380, 0x7810 };
static const unsigned src_need[DT_FMT_COUNT] = { 0x003, 0x010, 0x00c, 0x080, 0x010 };

/* `dtrain keys`: a source key's type, and "(required for FORMAT, ...)" from src_need when a format
 * needs it (else the getter's default). */
static void describe_src(const char *key, const char *type)
{
        if (!dt_ymap_key_hook) return;
        int i = 0;
        while (strcmp(src_keys[i], key)) i++;
        char def[128] = "(required for ";
        size_t k = strlen(def), start = k;
        for (int f = 0; f < DT_FMT_COUNT; f++)
                if (src_need[f] & (1u << i))
                        k += (size_t)snprintf(def + k, sizeof def - k, "%s%s", k > start ? ", " : "", dt_format_names[f]);
        snprintf(def + k, sizeof def - k, ")");
        dt_ykey_describe(type, k > start ? def : NULL);
}

/* What a source's keys gave beyond the spec's own fields, for the checks that need the format:
 * the path keys' values (images, labels, x, y, path), and seq_len and stride with their results. */
typedef struct src_read {
        const char *images, *labels, *x, *y, *path;
        long seq_len, stride;
        int qr, sr;             /* dt_ymap_int's results for seq_len and stride */
} src_read;

/* The shard-list keys: images/labels (idx) and x/y (npy) may list shards, or be globs; the format's
 * pair becomes the source's file lists, the other pair is dropped. */
static void source_lists(dt_ms_ctx *p, dt_ymap *m, dt_source_spec *src, src_read *r)
{
        char **lists[4] = { 0 };
        int nl[4] = { 0 };
        static const char *const pk[] = { "images", "labels", "x", "y" };
        const char **pv[] = { &r->images, &r->labels, &r->x, &r->y };
        for (int i = 0; i < 4; i++) {
                describe_src(pk[i], "path|glob|list");
                DT_MS_CHECK(p, dt_ykey_paths(m, pk[i], p->s->dir, pv[i], &lists[i], &nl[i]));
        }
        int lx = src->format == DT_FMT_NPY ? 2 : 0;     /* the lists this format reads */
        src->xfiles = lists[lx];
        src->nxfiles = nl[lx];
        src->yfiles = lists[lx + 1];
        src->nyfiles = nl[lx + 1];
        for (int i = 0; i < 4; i++)
                if (i != lx && i != lx + 1) {
                        for (int k = 0; k < nl[i]; k++) free(lists[i][k]);
                        free(lists[i]);
                }
}

/* The source's other keys, every one read whatever the format, into src (key: "train" or "test"). */
static void source_scalars(dt_ms_ctx *p, dt_ymap *m, dt_source_spec *src, const char *key, src_read *r)
{
        long col = -1, n = 0, seed = 1, limit = 0;
        double noise = 0.5, holdout = 0.1;
        int sequence = DT_SEQ_NONE, part = !strcmp(key, "train") ? DT_TEXT_TRAIN : DT_TEXT_HOLDOUT;
        r->seq_len = 64;
        r->stride = 0;
        describe_src("path", NULL);
        DT_MS_CHECK(p, dt_ymap_str(m, "path", &r->path, NULL, 0));
        DT_MS_CHECK(p, dt_ymap_int(m, "label_column", &col, -1, -1, INT_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_bool(m, "header", &src->header, 0, 0));
        describe_src("n", NULL);
        DT_MS_CHECK(p, dt_ymap_int(m, "n", &n, 0, 1, 100000000L, 0));
        DT_MS_CHECK(p, dt_ymap_int(m, "seed", &seed, 1, 0, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_num(m, "noise", &noise, 0.5, 0.0, HUGE_VAL, 0));
        DT_MS_CHECK(p, dt_ymap_int(m, "limit", &limit, 0, 0, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_enum(m, "sequence", dt_sequence_names, &sequence, DT_SEQ_NONE, 0));
        r->qr = dt_ymap_int(m, "seq_len", &r->seq_len, 64, 1, 65536, 0);
        if (r->qr < 0) p->rc = -1;
        DT_MS_CHECK(p, dt_ymap_num(m, "holdout", &holdout, 0.1, 0.0, 0.5, 0));
        dt_ykey_describe(NULL, "(train in data.train, holdout in data.test)");
        DT_MS_CHECK(p, dt_ymap_enum(m, "part", dt_text_part_names, &part, part, 0));
        /* stride defaults to seq_len (non-overlapping windows); 0 here means "not given" */
        dt_ykey_describe(NULL, "(seq_len)");
        r->sr = dt_ymap_int(m, "stride", &r->stride, 0, 1, 65536, 0);
        if (r->sr < 0) p->rc = -1;
        src->label_column = (int)col;
        src->sequence = (dt_sequence_kind)sequence;
        src->seq_len = (int)r->seq_len;
        src->holdout = holdout;
        src->part = (dt_text_part)part;
        src->stride = r->sr == 1 ? (int)r->stride : (int)r->seq_len;
        src->n = n;
        src->seed = (uint64_t)seed;
        src->noise = noise;
        src->limit = limit;
}

/* With a valid format: the keys that do not apply to it and the ones it needs but lacks, its
 * paths stored, a text source's stride and window against the model. v: the source's node. */
static void source_for_format(dt_ms_ctx *p, dt_ymap *m, yaml_node_t *v, dt_source_spec *src, int fmt,
                              const src_read *r)
{
        const char *fname = dt_format_names[fmt];
        for (int i = 0; i < (int)(sizeof src_keys / sizeof src_keys[0]); i++) {
                if (!(src_apply[fmt] & (1u << i)))
                        dt_ms_not_for(p, m, src_keys[i], "format", fname);
                else if ((src_need[fmt] & (1u << i)) && !dt_ymap_get(m, src_keys[i])) {
                        dt_yerr(p->d, p->y, v, "missing required key '%s' for format '%s'", src_keys[i], fname);
                        p->rc = -1;
                }
        }
        const char *a = NULL, *b = NULL, *ka = NULL, *kb = NULL;
        switch (src->format) {
        case DT_FMT_IDX: a = r->images; b = r->labels; ka = "images"; kb = "labels"; break;
        case DT_FMT_NPY: a = r->x; b = r->y; ka = "x"; kb = "y"; break;
        case DT_FMT_CSV: a = r->path; ka = "path"; break;
        case DT_FMT_TEXT: a = r->path; ka = "path"; break;
        default: break;
        }
        if (a) store_path(p, m, ka, a, src->images, &src->images_pos, src->format == DT_FMT_TEXT);
        if (b) store_path(p, m, kb, b, src->labels, &src->labels_pos, 0);
        if (src->format == DT_FMT_TEXT && r->sr == 1 && r->stride > r->seq_len) {
                dt_yerr(p->d, p->y, dt_ymap_get(m, "stride"),
                        "'stride' (%ld) is larger than 'seq_len' (%ld): windows would skip bytes",
                        r->stride, r->seq_len);
                p->rc = -1;
        }
        if (src->format == DT_FMT_TEXT) text_fits_model(p, m, v, r->qr < 0 ? 0 : r->seq_len);
}

/* data.train or data.test (key): the format, then every key (so a misplaced one is "does not
 * apply", not "unknown"), then the checks the format makes. */
static void parse_source(dt_ms_ctx *p, dt_ymap *dm, dt_source_spec *src, const char *key, int required)
{
        dt_ykey_describe("mapping", required ? "(required)" : "-");
        yaml_node_t *v = dt_ymap_get(dm, key);
        if (!v) {
                if (required && dm->node) dt_ms_missing(p, dm->node, key, "data");
                return;
        }
        const char *ctx = !strcmp(key, "train") ? "data.train" : "data.test";
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, v, ctx, p->d) < 0) {
                p->rc = -1;
                if (!m.node) return;     /* not a mapping; duplicates can go on */
        }
        src->present = 1;
        src->pos = dt_ms_pos(v);
        int fmt = 0;
        int fr = dt_ymap_enum(&m, "format", dt_format_names, &fmt, 0, 1);
        if (fr < 0) p->rc = -1;
        src->format = (dt_data_format)fmt;
        src_read r = { 0 };
        source_lists(p, &m, src, &r);
        source_scalars(p, &m, src, key, &r);
        if (fr == 1) source_for_format(p, &m, v, src, fmt, &r);
        dt_ymap_close(&m);
}

void dt_ms_parse_data(dt_ms_ctx *p, yaml_node_t *root, yaml_node_t *v)
{
        dt_data_spec *ds = &p->s->data;
        if (!v) {
                dt_ms_missing(p, root, "data", "model");
                return;
        }
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, v, "data", p->d) < 0) {
                p->rc = -1;
                if (!m.node) return;     /* not a mapping; duplicates can go on */
        }
        parse_source(p, &m, &ds->train, "train", 1);
        parse_source(p, &m, &ds->test, "test", 0);
        long classes = 0;
        DT_MS_CHECK(p, dt_ymap_int(&m, "classes", &classes, 0, 0, 1000000, 0));
        ds->classes = (int)classes;
        /* idx files hold bytes, so the natural default maps them to [0, 1] */
        double def = ds->train.present && ds->train.format == DT_FMT_IDX ? 1.0 / 255.0 : 1.0;
        dt_ykey_describe(NULL, "(1/255 for format idx, else 1)");
        int r = dt_ymap_num_excl(&m, "scale", &ds->scale, def, 0.0, HUGE_VAL, DT_YEXCL_MIN, 0);
        if (r < 0) p->rc = -1;
        ds->scale_given = r == 1;
        /* a number, or one per channel */
        if (dt_ykey_normalisation(&m, ds, &p->s->input) < 0) p->rc = -1;
        int text = (ds->train.present && ds->train.format == DT_FMT_TEXT) ||
                   (ds->test.present && ds->test.format == DT_FMT_TEXT);
        if (dt_ykey_loader(&m, ds, &p->s->input, text) < 0) p->rc = -1;
        /* token ids are never normalised: asking for it is a mistake, not a no-op */
        if ((ds->train.present && ds->train.format == DT_FMT_TEXT) ||
            (ds->test.present && ds->test.format == DT_FMT_TEXT)) {
                static const char *const norm[] = { "scale", "mean", "std" };
                for (int i = 0; i < 3; i++) dt_ms_not_for(p, &m, norm[i], "format", "text");
        }
        dt_ymap_close(&m);
}
