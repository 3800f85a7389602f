/* spec/model_spec.c - dtrain-model(5): the model YAML into a dt_model_spec. Every key goes through
 * a dt_ymap, so bad values, missing keys and unknown keys are all reported in one pass at
 * file:line:col; each layer kind reads its own keys. Returns -1 with everything in the dt_diag. */
#include "spec/model_spec.h"
#include "spec/overrides.h"
#include "spec/data_keys.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const dt_loss_names[] = { "softmax_cross_entropy", "mse", NULL };
static const char *const device_names[] = { "cpu", "cuda", "auto", NULL };
static const char *const unit_names[] = { "epochs", "steps", NULL };

#define BATCH_MAX 1048576L
#define MAX_LAYERS 10000
#define MAX_INPUT_ELEMS (1UL << 31)

/* Parsing state: the document, the diagnostics, and the spec being filled. */
typedef struct pctx {
        dt_ydoc *y;
        dt_diag *d;
        dt_model_spec *s;
        int rc;
        yaml_node_t *layers_node;       /* the 'layers' sequence (names of later layers) */
} pctx;

#define CHECK(p, call) do { if ((call) < 0) (p)->rc = -1; } while (0)

static dt_pos pos_of(const yaml_node_t *n)
{
        dt_pos p = { 0, 0 };
        if (n) {
                p.line = (int)n->start_mark.line + 1;
                p.col = (int)n->start_mark.column + 1;
        }
        return p;
}

/* A user string fit for a message: at most 40 characters, control characters replaced. */
static const char *clip(const char *v, char *buf, size_t len)
{
        size_t k = 0, n = strlen(v);
        for (size_t i = 0; i < n && k < 40 && k + 4 < len; i++)
                buf[k++] = ((unsigned char)v[i] < 32 || v[i] == 127) ? '?' : v[i];
        if (n > 40 && k + 4 < len) {
                memcpy(buf + k, "...", 3);
                k += 3;
        }
        buf[k] = 0;
        return buf;
}

/* The key node (not the value) of key in m, so "does not apply" points at the key itself. */
static yaml_node_t *key_node(dt_ymap *m, const char *key)
{
        if (!m->node) return NULL;
        yaml_node_pair_t *b = m->node->data.mapping.pairs.start, *e = m->node->data.mapping.pairs.top;
        for (yaml_node_pair_t *p = b; p < e; p++) {
                yaml_node_t *k = yaml_document_get_node(&m->y->doc, p->key);
                if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
                        return k;
        }
        return NULL;
}

static void not_for(pctx *p, dt_ymap *m, const char *key, const char *what, const char *val)
{
        yaml_node_t *k = key_node(m, key);
        if (!k) return;
        dt_yerr(p->d, p->y, k, "key '%s' does not apply to %s '%s'", key, what, val);
        p->rc = -1;
}

static void missing(pctx *p, const yaml_node_t *at, const char *key, const char *ctx)
{
        dt_yerr(p->d, p->y, at, "missing required key '%s' in '%s'", key, ctx);
        p->rc = -1;
}

static const char *kind_of(const yaml_node_t *n)
{
        if (n->type == YAML_MAPPING_NODE) return "a mapping";
        if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
        if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            !n->data.scalar.length)
                return "nothing";
        return "a scalar";
}

/* Looks a scalar name up in names; reports "unknown <what> 'x'" with a suggestion or the list. */
static int lookup(pctx *p, const yaml_node_t *n, const char *const *names, const char *what)
{
        const char *s = dt_ynode_str(n);
        int cnt = 0;
        while (names[cnt]) cnt++;
        if (!s || !*s) {
                dt_yerr(p->d, p->y, n, "expected a%s %s name, got %s",
                        strchr("aeiou", what[0]) ? "n" : "", what, kind_of(n));
                p->rc = -1;
                return -1;
        }
        for (int i = 0; i < cnt; i++)
                if (!strcmp(s, names[i])) return i;
        char b[64], list[512], note[128];
        const char *sug = dt_suggest(s, names, cnt, note, sizeof note);
        if (sug) {
                dt_yerr(p->d, p->y, n, "unknown %s '%s'; did you mean '%s'%s?", what, clip(s, b, sizeof b), sug, note);
        } else {
                size_t k = 0;
                list[0] = 0;
                for (int i = 0; i < cnt && k < sizeof list; i++)
                        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
                dt_yerr(p->d, p->y, n, "unknown %s '%s'; expected one of %s", what, clip(s, b, sizeof b), list);
        }
        p->rc = -1;
        return -1;
}

/* `dtrain keys`: the next key is one of names (NULL-terminated) or, when more is not NULL, that
 * too: "sgd|momentum|...|mapping". */
static void describe_names(const char *const *names, const char *more, const char *def)
{
        if (!dt_ymap_key_hook) return;
        char list[512];
        size_t k = 0;
        list[0] = 0;
        for (int i = 0; names[i] && k < sizeof list; i++)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? "|" : "", names[i]);
        if (more && k < sizeof list) snprintf(list + k, sizeof list - k, "|%s", more);
        dt_ykey_describe(list, def);
}

/* ---- names and input ---- */

static int valid_name(const char *s, int model)
{
        size_t n = strlen(s);
        if (n < 1 || n > 63) return 0;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                         (c >= '0' && c <= '9' && (model || i > 0)) || (model && (c == '.' || c == '-'));
                if (!ok) return 0;
        }
        return 1;
}

static void parse_name(pctx *p, dt_ymap *m)
{
        const char *v;
        int r = dt_ymap_str(m, "name", &v, NULL, 1);
        if (r < 0) p->rc = -1;
        if (r != 1) return;
        if (!valid_name(v, 1)) {
                char b[64];
                dt_yerr(p->d, p->y, dt_ymap_get(m, "name"),
                        "invalid model name '%s'; use 1 to 63 letters, digits, '_', '.' or '-'",
                        clip(v, b, sizeof b));
                p->rc = -1;
                return;
        }
        strcpy(p->s->name, v);
}

static void parse_input(pctx *p, dt_ymap *m)
{
        long v[DT_MAX_DIMS];
        int n = 0;
        int r = dt_ymap_ints(m, "input", v, &n, DT_MAX_DIMS, 0, 1, INT_MAX, 1);
        if (r < 0) p->rc = -1;
        if (r != 1) return;
        yaml_node_t *node = dt_ymap_get(m, "input");
        size_t total = 1;
        int ok = 1;
        for (int i = 0; i < n; i++)
                if (!dt_mul_ok(total, (size_t)v[i], &total)) ok = 0;
        if (!ok || total > MAX_INPUT_ELEMS) {
                dt_yerr(p->d, p->y, node, "'input' has too many elements per sample (at most %lu)",
                        MAX_INPUT_ELEMS);
                p->rc = -1;
                return;
        }
        p->s->input.n = n;
        for (int i = 0; i < n; i++) p->s->input.d[i] = (int)v[i];
        p->s->input_pos = pos_of(node);
}

/* ---- layers ---- */

/* 'input: name' or 'inputs: [a, b]': earlier layers by name, or 'input' for the model's input
 * (when no earlier layer has that name). A name that comes later would make a cycle possible and
 * the order no longer topological, so it is refused with where that layer is. */
static void resolve_input(pctx *p, dt_layer_spec *L, int i, const yaml_node_t *n)
{
        dt_model_spec *s = p->s;
        const char *v = dt_ynode_str(n);
        char b[64];
        if (!v || !*v) {
                dt_yerr(p->d, p->y, n, "expected a layer name in '%s' of layer %d, got %s",
                        L->nin ? "inputs" : "input", i + 1, v ? "an empty string" : kind_of(n));
                p->rc = -1;
                return;
        }
        if (L->nin == DT_MAX_INPUTS) {
                dt_yerr(p->d, p->y, n, "a layer reads at most %d inputs", DT_MAX_INPUTS);
                p->rc = -1;
                return;
        }
        int at = -1;
        for (int j = i - 1; j >= 0 && at < 0; j--)
                if (!strcmp(s->layers[j].name, v)) at = j + 1;
        if (at < 0 && !strcmp(v, "input")) at = 0;
        if (at < 0) {
                /* a later layer, the layer itself, or nothing at all */
                int later = -1;
                for (int j = i; j < s->nlayers && later < 0; j++) {
                        yaml_node_t *it = yaml_document_get_node(&p->y->doc,
                                                                 p->layers_node->data.sequence.items.start[j]);
                        const char *nm = NULL;
                        if (it && it->type == YAML_MAPPING_NODE) {
                                yaml_node_pair_t *pb = it->data.mapping.pairs.start, *pe = it->data.mapping.pairs.top;
                                for (yaml_node_pair_t *q = pb; q < pe; q++) {
                                        yaml_node_t *k = yaml_document_get_node(&p->y->doc, q->key);
                                        const char *ks = dt_ynode_str(k);
                                        if (ks && !strcmp(ks, "name")) nm = dt_ynode_str(yaml_document_get_node(&p->y->doc, q->value));
                                }
                        }
                        if (nm && !strcmp(nm, v)) later = j;
                }
                if (later == i) {
                        dt_yerr(p->d, p->y, n, "layer '%s' reads itself; a layer reads earlier layers only "
                                "(the graph has no cycles)", dt_yclip(v, b, sizeof b));
                } else if (later > i) {
                        dt_yerr(p->d, p->y, n, "'%s' is defined later (layer %d); a layer reads only layers "
                                "listed before it, so the graph has no cycles: move '%s' up",
                                dt_yclip(v, b, sizeof b), later + 1, dt_yclip(v, b, sizeof b));
                } else {
                        const char **names = dt_calloc((size_t)i + 2, sizeof *names);
                        for (int j = 0; j < i; j++) names[j] = s->layers[j].name;
                        names[i] = "input";
                        const char *sug = dt_did_you_mean(v, names, i + 1);
                        char sb[80] = "";
                        if (sug) snprintf(sb, sizeof sb, "; did you mean '%s'?", sug);
                        dt_yerr(p->d, p->y, n, "no layer named '%s' before this one%s", dt_yclip(v, b, sizeof b),
                                sug ? sb : " (name one of the layers above, or 'input' for the model's input)");
                        free(names);
                }
                p->rc = -1;
                return;
        }
        L->in_pos[L->nin] = pos_of(n);
        L->src[L->nin++] = at;
}

static void parse_inputs(pctx *p, dt_ymap *m, dt_layer_spec *L, int i)
{
        dt_ykey_describe("name", "(the previous layer)");
        yaml_node_t *one = dt_ymap_get(m, "input");
        dt_ykey_describe("list", "(the previous layer)");
        yaml_node_t *many = dt_ymap_get(m, "inputs");
        L->nin = 0;
        if (one && many) {
                dt_yerr(p->d, p->y, many, "give 'input' (one layer) or 'inputs' (a list), not both");
                p->rc = -1;
        } else if (one) {
                if (one->type == YAML_SEQUENCE_NODE) {
                        dt_yerr(p->d, p->y, one, "'input' names one layer; for a list use 'inputs: [a, b]'");
                        p->rc = -1;
                } else {
                        resolve_input(p, L, i, one);
                }
        } else if (many) {
                if (many->type == YAML_SEQUENCE_NODE) {
                        yaml_node_item_t *b = many->data.sequence.items.start, *e = many->data.sequence.items.top;
                        if (b == e) {
                                dt_yerr(p->d, p->y, many, "'inputs' lists no layer");
                                p->rc = -1;
                        }
                        for (yaml_node_item_t *q = b; q < e; q++)
                                resolve_input(p, L, i, yaml_document_get_node(&p->y->doc, *q));
                } else {
                        resolve_input(p, L, i, many);
                }
        }
        L->named = one || many;
        if (!L->named) {
                L->nin = 1;
                L->src[0] = i;  /* the previous layer's output, or the model's input */
                L->in_pos[0] = L->pos;
        }
}

/* After every layer is read: the input counts each kind takes, and every layer's output read by
 * some later layer (only the last layer's output leaves the model; an unread one is a mistake
 * that would also leave its parameters without gradients). */
static void check_links(pctx *p)
{
        dt_model_spec *s = p->s;
        for (int i = 0; i < s->nlayers; i++) {
                dt_layer_spec *L = &s->layers[i];
                if (!L->ops || L->nin == 0) continue;
                int want = L->ops->min_inputs;
                if (want == 0 && L->nin > 1) {
                        dt_diag_add(p->d, s->file, L->in_pos[1].line, L->in_pos[1].col, "layer '%s' (%s) reads one "
                                    "input, got %d; to combine tensors use an 'add' or 'concat' layer", L->name,
                                    L->ops->name, L->nin);
                        p->rc = -1;
                } else if (want > 0 && L->nin < want) {
                        dt_diag_add(p->d, s->file, L->pos.line, L->pos.col, "layer '%s' (%s) needs at least %d "
                                    "inputs, got %d; name them with 'inputs: [a, b]'", L->name, L->ops->name,
                                    want, L->nin);
                        p->rc = -1;
                }
        }
        if (p->rc < 0) return;
        for (int j = 0; j + 1 < s->nlayers; j++) {
                int read = 0;
                for (int i = j + 1; i < s->nlayers && !read; i++)
                        for (int k = 0; k < s->layers[i].nin && !read; k++) read = s->layers[i].src[k] == j + 1;
                if (!read) {
                        const dt_layer_spec *L = &s->layers[j], *N = &s->layers[j + 1];
                        dt_diag_add(p->d, s->file, L->pos.line, L->pos.col, "the output of layer '%s' is never read "
                                    "('%s' after it names its own inputs); only the last layer's output leaves the "
                                    "model: read '%s' somewhere or remove it", L->name, N->name, L->name);
                        p->rc = -1;
                }
        }
}

static void parse_layer(pctx *p, yaml_node_t *it, int i)
{
        dt_model_spec *s = p->s;
        dt_layer_spec *L = &s->layers[i];
        L->pos = pos_of(it);
        if (it->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, it, "expected a mapping for a layer (e.g. {type: fc, units: 10}), got %s",
                        kind_of(it));
                p->rc = -1;
                return;
        }
        /* 'type' and 'name' are every layer's keys (listed as layers.type, layers.name); the rest
         * belong to the kind, so the context becomes layers.<type> before its parse runs */
        dt_ymap m;
        CHECK(p, dt_ymap_open(&m, p->y, it, "layers", p->d));
        const char *type = NULL, *name = NULL;
        if (dt_ymap_key_hook) {
                int cnt = dt_layer_kind_count();
                const char **names = dt_calloc((size_t)cnt + 1, sizeof *names);
                for (int k = 0; k < cnt; k++) names[k] = dt_layer_kinds[k]->name;
                describe_names(names, NULL, "(required)");
                free(names);
        }
        CHECK(p, dt_ymap_str(&m, "type", &type, NULL, 1));
        dt_ykey_describe(NULL, "(<type><k>: fc1, fc2, ...)");
        int nr = dt_ymap_str(&m, "name", &name, NULL, 0);
        if (nr < 0) p->rc = -1;
        const dt_layer_ops *ops = type ? dt_layer_find(type) : NULL;
        if (type && !ops) {
                int cnt = dt_layer_kind_count();
                const char **names = dt_calloc((size_t)cnt + 1, sizeof *names);
                for (int k = 0; k < cnt; k++) names[k] = dt_layer_kinds[k]->name;
                lookup(p, dt_ymap_get(&m, "type"), names, "layer type");
                free(names);
        }
        yaml_node_t *name_node = dt_ymap_get(&m, "name");
        char b[64];
        if (nr == 1 && !valid_name(name, 0)) {
                dt_yerr(p->d, p->y, name_node,
                        "invalid layer name '%s'; use 1 to 63 letters, digits or '_', not starting with a digit",
                        clip(name, b, sizeof b));
                p->rc = -1;
        } else if (nr == 1) {
                strcpy(L->name, name);
        } else if (ops) {
                int k = 1;
                for (int j = 0; j < i; j++) k += s->layers[j].ops == ops;
                snprintf(L->name, sizeof L->name, "%s%d", ops->name, k);
        }
        if (L->name[0])
                for (int j = 0; j < i; j++)
                        if (!strcmp(s->layers[j].name, L->name)) {
                                char at[160];
                                dt_yerr(p->d, p->y, name_node ? name_node : it,
                                        "duplicate layer name '%s' (first at %s)", L->name,
                                        dt_line_str(at, sizeof at, s->layers[j].pos.line));
                                p->rc = -1;
                                break;
                        }
        parse_inputs(p, &m, L, i);
        if (!ops) return;       /* its other keys are neither known nor unknown */
        L->ops = ops;
        L->cfg = dt_calloc(1, ops->cfg_size ? ops->cfg_size : 1);
        char ctx[96];
        snprintf(ctx, sizeof ctx, "layers.%s", ops->name);
        m.ctx = ctx;
        if (ops->parse) CHECK(p, ops->parse(&m, L->cfg, p->d));
        dt_ymap_close(&m);
}

static void parse_layers(pctx *p, yaml_node_t *root, yaml_node_t *v)
{
        if (!v) {
                missing(p, root, "layers", "model");
                return;
        }
        if (v->type != YAML_SEQUENCE_NODE) {
                dt_yerr(p->d, p->y, v, "expected a sequence for 'layers', got %s", kind_of(v));
                p->rc = -1;
                return;
        }
        yaml_node_item_t *b = v->data.sequence.items.start, *e = v->data.sequence.items.top;
        int n = (int)(e - b);
        if (n < 1) {
                dt_yerr(p->d, p->y, v, "'layers' must list at least one layer");
                p->rc = -1;
                return;
        }
        if (n > MAX_LAYERS) {
                /* name checks are quadratic in the layer count */
                dt_yerr(p->d, p->y, v, "'layers' lists %d layers; at most %d are allowed", n, MAX_LAYERS);
                p->rc = -1;
                return;
        }
        p->s->layers = dt_calloc((size_t)n, sizeof *p->s->layers);
        p->s->nlayers = n;
        p->layers_node = v;
        for (int i = 0; i < n; i++) {
                yaml_node_t *it = yaml_document_get_node(&p->y->doc, b[i]);
                if (it) parse_layer(p, it, i);
        }
        check_links(p);
}

/* ---- data ---- */

/* dirs: a directory is a valid target too (text sources read a directory whole) */
static void store_path(pctx *p, dt_ymap *m, const char *key, const char *v, char *out, dt_pos *pos, int dirs)
{
        yaml_node_t *n = dt_ymap_get(m, key);
        *pos = pos_of(n);
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
static void text_fits_model(pctx *p, dt_ymap *m, yaml_node_t *src, long seq_len)
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

static void parse_source(pctx *p, dt_ymap *dm, dt_source_spec *src, const char *key, int required)
{
        dt_ykey_describe("mapping", required ? "(required)" : "-");
        yaml_node_t *v = dt_ymap_get(dm, key);
        if (!v) {
                if (required && dm->node) missing(p, dm->node, key, "data");
                return;
        }
        const char *ctx = !strcmp(key, "train") ? "data.train" : "data.test";
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, v, ctx, p->d) < 0) {
                p->rc = -1;
                if (!m.node) return;     /* not a mapping; duplicates can go on */
        }
        src->present = 1;
        src->pos = pos_of(v);
        int fmt = 0;
        int fr = dt_ymap_enum(&m, "format", dt_format_names, &fmt, 0, 1);
        if (fr < 0) p->rc = -1;
        src->format = (dt_data_format)fmt;
        /* every key is read whatever the format, so a misplaced one is "does not apply", not
         * "unknown" */
        const char *images = NULL, *labels = NULL, *x = NULL, *yv = NULL, *path = NULL;
        long col = -1, n = 0, seed = 1, limit = 0, seq_len = 64, stride = 0;
        double noise = 0.5, holdout = 0.1;
        int sequence = DT_SEQ_NONE, part = !strcmp(key, "train") ? DT_TEXT_TRAIN : DT_TEXT_HOLDOUT;
        /* images/labels (idx) and x/y (npy) may list shards, or be globs */
        char **lists[4] = { 0 };
        int nl[4] = { 0 };
        static const char *const pk[] = { "images", "labels", "x", "y" };
        const char **pv[] = { &images, &labels, &x, &yv };
        for (int i = 0; i < 4; i++) {
                describe_src(pk[i], "path|glob|list");
                CHECK(p, dt_ykey_paths(&m, pk[i], p->s->dir, pv[i], &lists[i], &nl[i]));
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
        describe_src("path", NULL);
        CHECK(p, dt_ymap_str(&m, "path", &path, NULL, 0));
        CHECK(p, dt_ymap_int(&m, "label_column", &col, -1, -1, INT_MAX, 0));
        CHECK(p, dt_ymap_bool(&m, "header", &src->header, 0, 0));
        describe_src("n", NULL);
        CHECK(p, dt_ymap_int(&m, "n", &n, 0, 1, 100000000L, 0));
        CHECK(p, dt_ymap_int(&m, "seed", &seed, 1, 0, LONG_MAX, 0));
        CHECK(p, dt_ymap_num(&m, "noise", &noise, 0.5, 0.0, HUGE_VAL, 0));
        CHECK(p, dt_ymap_int(&m, "limit", &limit, 0, 0, LONG_MAX, 0));
        CHECK(p, dt_ymap_enum(&m, "sequence", dt_sequence_names, &sequence, DT_SEQ_NONE, 0));
        int qr = dt_ymap_int(&m, "seq_len", &seq_len, 64, 1, 65536, 0);
        if (qr < 0) p->rc = -1;
        CHECK(p, dt_ymap_num(&m, "holdout", &holdout, 0.1, 0.0, 0.5, 0));
        dt_ykey_describe(NULL, "(train in data.train, holdout in data.test)");
        CHECK(p, dt_ymap_enum(&m, "part", dt_text_part_names, &part, part, 0));
        /* stride defaults to seq_len (non-overlapping windows); 0 here means "not given" */
        dt_ykey_describe(NULL, "(seq_len)");
        int sr = dt_ymap_int(&m, "stride", &stride, 0, 1, 65536, 0);
        if (sr < 0) p->rc = -1;
        src->label_column = (int)col;
        src->sequence = (dt_sequence_kind)sequence;
        src->seq_len = (int)seq_len;
        src->holdout = holdout;
        src->part = (dt_text_part)part;
        src->stride = sr == 1 ? (int)stride : (int)seq_len;
        src->n = n;
        src->seed = (uint64_t)seed;
        src->noise = noise;
        src->limit = limit;
        if (fr == 1) {
                const char *fname = dt_format_names[fmt];
                for (int i = 0; i < (int)(sizeof src_keys / sizeof src_keys[0]); i++) {
                        if (!(src_apply[fmt] & (1u << i)))
                                not_for(p, &m, src_keys[i], "format", fname);
                        else if ((src_need[fmt] & (1u << i)) && !dt_ymap_get(&m, src_keys[i])) {
                                dt_yerr(p->d, p->y, v, "missing required key '%s' for format '%s'",
                                        src_keys[i], fname);
                                p->rc = -1;
                        }
                }
                const char *a = NULL, *b = NULL, *ka = NULL, *kb = NULL;
                switch (src->format) {
                case DT_FMT_IDX: a = images; b = labels; ka = "images"; kb = "labels"; break;
                case DT_FMT_NPY: a = x; b = yv; ka = "x"; kb = "y"; break;
                case DT_FMT_CSV: a = path; ka = "path"; break;
                case DT_FMT_TEXT: a = path; ka = "path"; break;
                default: break;
                }
                if (a) store_path(p, &m, ka, a, src->images, &src->images_pos, src->format == DT_FMT_TEXT);
                if (b) store_path(p, &m, kb, b, src->labels, &src->labels_pos, 0);
                if (src->format == DT_FMT_TEXT && sr == 1 && stride > seq_len) {
                        dt_yerr(p->d, p->y, dt_ymap_get(&m, "stride"),
                                "'stride' (%ld) is larger than 'seq_len' (%ld): windows would skip bytes",
                                stride, seq_len);
                        p->rc = -1;
                }
                if (src->format == DT_FMT_TEXT) text_fits_model(p, &m, v, qr < 0 ? 0 : seq_len);
        }
        dt_ymap_close(&m);
}

static void parse_data(pctx *p, yaml_node_t *root, yaml_node_t *v)
{
        dt_data_spec *ds = &p->s->data;
        if (!v) {
                missing(p, root, "data", "model");
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
        CHECK(p, dt_ymap_int(&m, "classes", &classes, 0, 0, 1000000, 0));
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
                for (int i = 0; i < 3; i++) not_for(p, &m, norm[i], "format", "text");
        }
        dt_ymap_close(&m);
}

/* ---- train ---- */

static void optim_defaults(dt_train_spec *t, dt_opt_kind k)
{
        memset(&t->opt, 0, sizeof t->opt);
        t->opt.kind = k;
        t->lr = k >= DT_OPT_RMSPROP ? 0.001 : 0.01;
        t->opt.momentum = (k == DT_OPT_MOMENTUM || k == DT_OPT_NESTEROV) ? 0.9f : 0.0f;
        t->opt.beta1 = 0.9f;
        t->opt.beta2 = 0.999f;
        t->opt.eps = 1e-8f;
        t->opt.alpha = 0.99f;
}

static void parse_optimizer(pctx *p, dt_ymap *tm)
{
        dt_train_spec *t = &p->s->train;
        optim_defaults(t, DT_OPT_SGD);
        describe_names(dt_opt_names, "mapping", dt_opt_names[DT_OPT_SGD]);
        yaml_node_t *v = dt_ymap_get(tm, "optimizer");
        if (!v) return;
        if (v->type == YAML_SCALAR_NODE) {
                int k = lookup(p, v, dt_opt_names, "optimizer");
                if (k >= 0) optim_defaults(t, (dt_opt_kind)k);
                return;
        }
        if (v->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, v, "expected an optimizer name or mapping for 'optimizer', got %s",
                        kind_of(v));
                p->rc = -1;
                return;
        }
        dt_ymap m;
        CHECK(p, dt_ymap_open(&m, p->y, v, "train.optimizer", p->d));
        int k = -1;
        describe_names(dt_opt_names, NULL, "(required)");
        yaml_node_t *tn = dt_ymap_get(&m, "type");
        if (!tn) missing(p, v, "type", "train.optimizer");
        else k = lookup(p, tn, dt_opt_names, "optimizer");
        optim_defaults(t, k >= 0 ? (dt_opt_kind)k : DT_OPT_SGD);
        dt_optim_hp *o = &t->opt;
        double lr, mom, damp, b1, b2, eps, alpha;
        /* optim_defaults' rules, in words */
        dt_ykey_describe(NULL, "(0.01 for sgd, momentum, nesterov; 0.001 for rmsprop, adam, adamw)");
        CHECK(p, dt_ymap_num_excl(&m, "lr", &lr, t->lr, 0.0, 10.0, DT_YEXCL_MIN, 0));
        dt_ykey_describe(NULL, "(0.9 for momentum, nesterov; 0 for rmsprop)");
        CHECK(p, dt_ymap_num_excl(&m, "momentum", &mom, o->momentum, 0.0, 1.0, DT_YEXCL_MAX, 0));
        CHECK(p, dt_ymap_num(&m, "dampening", &damp, 0.0, 0.0, 1.0, 0));
        CHECK(p, dt_ymap_num_excl(&m, "beta1", &b1, 0.9, 0.0, 1.0, DT_YEXCL_MAX, 0));
        CHECK(p, dt_ymap_num_excl(&m, "beta2", &b2, 0.999, 0.0, 1.0, DT_YEXCL_MAX, 0));
        CHECK(p, dt_ymap_num_excl(&m, "eps", &eps, 1e-8, 0.0, 1.0, DT_YEXCL_MIN, 0));
        CHECK(p, dt_ymap_num(&m, "alpha", &alpha, 0.99, 0.0, 1.0, 0));
        t->lr = lr;
        o->momentum = (float)mom;
        o->dampening = (float)damp;
        o->beta1 = (float)b1;
        o->beta2 = (float)b2;
        o->eps = (float)eps;
        o->alpha = (float)alpha;
        if (k >= 0) {
                const char *on = dt_opt_names[k];
                int sgdlike = k <= DT_OPT_NESTEROV, adam = k >= DT_OPT_ADAM;
                yaml_node_t *mk = key_node(&m, "momentum");
                if (k == DT_OPT_SGD && mk) {
                        /* torch.optim.SGD(momentum=0.9) is our momentum (nesterov=True: nesterov) */
                        dt_yerr(p->d, p->y, mk, "key 'momentum' does not apply to optimizer 'sgd'; for SGD with "
                                "momentum (PyTorch's SGD(momentum=%g)) write type: momentum", mom);
                        p->rc = -1;
                } else if (adam) {
                        not_for(p, &m, "momentum", "optimizer", on);
                }
                if (k == DT_OPT_SGD || !sgdlike) not_for(p, &m, "dampening", "optimizer", on);
                if (!adam) {
                        not_for(p, &m, "beta1", "optimizer", on);
                        not_for(p, &m, "beta2", "optimizer", on);
                }
                if (sgdlike) not_for(p, &m, "eps", "optimizer", on);
                if (k != DT_OPT_RMSPROP) not_for(p, &m, "alpha", "optimizer", on);
                if (k == DT_OPT_NESTEROV && damp != 0.0) {
                        /* as torch.optim.SGD: Nesterov is defined for zero dampening only */
                        dt_yerr(p->d, p->y, dt_ymap_get(&m, "dampening"),
                                "optimizer 'nesterov' needs 'dampening' 0, got %g", damp);
                        p->rc = -1;
                }
        }
        dt_ymap_close(&m);
}

static void parse_schedule(pctx *p, dt_ymap *tm)
{
        dt_sched_spec *sc = &p->s->train.sched;
        memset(sc, 0, sizeof *sc);
        sc->kind = DT_SCHED_CONSTANT;
        sc->step_size = 1;
        sc->step_unit_epochs = 1;
        sc->gamma = 0.1;
        describe_names(dt_sched_names, "mapping", dt_sched_names[DT_SCHED_CONSTANT]);
        yaml_node_t *v = dt_ymap_get(tm, "schedule");
        if (!v) return;
        if (v->type == YAML_SCALAR_NODE) {
                int k = lookup(p, v, dt_sched_names, "schedule");
                if (k >= 0) sc->kind = (dt_sched_kind)k;
                return;
        }
        if (v->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, v, "expected a schedule name or mapping for 'schedule', got %s",
                        kind_of(v));
                p->rc = -1;
                return;
        }
        dt_ymap m;
        CHECK(p, dt_ymap_open(&m, p->y, v, "train.schedule", p->d));
        int k = -1, unit = 0;
        describe_names(dt_sched_names, NULL, "(required)");
        yaml_node_t *tn = dt_ymap_get(&m, "type");
        if (!tn) missing(p, v, "type", "train.schedule");
        else k = lookup(p, tn, dt_sched_names, "schedule");
        if (k >= 0) sc->kind = (dt_sched_kind)k;
        CHECK(p, dt_ymap_int(&m, "warmup_steps", &sc->warmup_steps, 0, 0, LONG_MAX, 0));
        CHECK(p, dt_ymap_int(&m, "step_size", &sc->step_size, 1, 1, LONG_MAX, 0));
        CHECK(p, dt_ymap_enum(&m, "step_unit", unit_names, &unit, 0, 0));
        sc->step_unit_epochs = unit == 0;
        CHECK(p, dt_ymap_num_excl(&m, "gamma", &sc->gamma, 0.1, 0.0, 1.0, DT_YEXCL_MIN, 0));
        CHECK(p, dt_ymap_num(&m, "min_lr", &sc->min_lr, 0.0, 0.0, HUGE_VAL, 0));
        if (k >= 0) {
                const char *sn = dt_sched_names[k];
                if (k != DT_SCHED_STEP) {
                        not_for(p, &m, "step_size", "schedule", sn);
                        not_for(p, &m, "step_unit", "schedule", sn);
                        not_for(p, &m, "gamma", "schedule", sn);
                }
                if (k != DT_SCHED_COSINE && k != DT_SCHED_LINEAR)
                        not_for(p, &m, "min_lr", "schedule", sn);
        }
        if (sc->min_lr > p->s->train.lr) {
                dt_yerr(p->d, p->y, dt_ymap_get(&m, "min_lr"), "'min_lr' (%g) is above the learning rate (%g)",
                        sc->min_lr, p->s->train.lr);
                p->rc = -1;
        }
        dt_ymap_close(&m);
}

const char *const dt_best_names[] = { "test_loss", "test_accuracy", "train_loss", "none", NULL };

/* train.freeze: a layer name pattern or a list of them (fnmatch(3): fc1, conv*, fc[12]) */
static void parse_freeze(pctx *p, dt_ymap *m)
{
        dt_train_spec *t = &p->s->train;
        dt_ykey_describe("pattern|list", "-");
        yaml_node_t *v = dt_ymap_get(m, "freeze");
        if (!v) return;
        t->freeze_pos = pos_of(v);
        yaml_node_item_t *a = NULL, *b = NULL, one[1];
        if (v->type == YAML_SCALAR_NODE) {
                one[0] = (yaml_node_item_t)(v - p->y->doc.nodes.start) + 1;
                a = one;
                b = one + 1;
        } else if (v->type == YAML_SEQUENCE_NODE) {
                a = v->data.sequence.items.start;
                b = v->data.sequence.items.top;
        } else {
                dt_yerr(p->d, p->y, v, "'freeze' must be a layer name pattern or a list of them, got %s", kind_of(v));
                p->rc = -1;
                return;
        }
        t->freeze = dt_calloc((size_t)(b - a) + 1, sizeof *t->freeze);
        for (yaml_node_item_t *it = a; it < b; it++) {
                yaml_node_t *n = yaml_document_get_node(&p->y->doc, *it);
                if (!n || n->type != YAML_SCALAR_NODE || !n->data.scalar.length) {
                        dt_yerr(p->d, p->y, n ? n : v, "'freeze' entries must be layer names or patterns (e.g. conv*), got %s",
                                n ? kind_of(n) : "nothing");
                        p->rc = -1;
                        continue;
                }
                t->freeze[t->nfreeze++] = dt_strdup((const char *)n->data.scalar.value);
        }
}

static void parse_train(pctx *p, yaml_node_t *v)
{
        dt_train_spec *t = &p->s->train;
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, v, "train", p->d) < 0) p->rc = -1;
        long epochs, batch, seed, ckpt, maxs, evb;
        double wd;
        CHECK(p, dt_ymap_int(&m, "epochs", &epochs, 10, 1, 100000, 0));
        CHECK(p, dt_ymap_int(&m, "batch", &batch, 64, 1, BATCH_MAX, 0));
        t->batch_pos = pos_of(dt_ymap_get(&m, "batch"));
        CHECK(p, dt_ymap_int(&m, "seed", &seed, 42, 0, LONG_MAX, 0));
        parse_optimizer(p, &m);
        CHECK(p, dt_ymap_num(&m, "weight_decay", &wd, 0.0, 0.0, HUGE_VAL, 0));
        parse_schedule(p, &m);
        CHECK(p, dt_ymap_num(&m, "clip_norm", &t->clip_norm, 0.0, 0.0, HUGE_VAL, 0));
        CHECK(p, dt_ymap_int(&m, "checkpoint_every", &ckpt, 0, 0, LONG_MAX, 0));
        CHECK(p, dt_ymap_int(&m, "max_steps", &maxs, 0, 0, LONG_MAX, 0));
        CHECK(p, dt_ymap_int(&m, "eval_batch", &evb, 1000, 1, BATCH_MAX, 0));
        long keep, logev;
        CHECK(p, dt_ymap_int(&m, "keep_checkpoints", &keep, 1, 1, 1000000, 0));
        CHECK(p, dt_ymap_enum(&m, "best_metric", dt_best_names, &t->best_metric, DT_BEST_TEST_LOSS, 0));
        CHECK(p, dt_ymap_int(&m, "log_every", &logev, 50, 0, LONG_MAX, 0));
        t->keep_checkpoints = (int)keep;
        t->log_every = logev;
        const char *init = NULL;
        int ir = dt_ymap_str(&m, "init_from", &init, NULL, 0);
        if (ir < 0) p->rc = -1;
        if (ir == 1) {
                t->init_from_pos = pos_of(dt_ymap_get(&m, "init_from"));
                /* relative to the spec's directory, like data paths; a missing file is reported when read */
                if (init[0] == '/' || !p->s->dir[0] || !strcmp(p->s->dir, "."))
                        snprintf(t->init_from, sizeof t->init_from, "%s", init);
                else if (snprintf(t->init_from, sizeof t->init_from, "%s/%s", p->s->dir, init) >= (int)sizeof t->init_from)
                        t->init_from[0] = 0;
        }
        CHECK(p, dt_ymap_bool(&m, "init_strict", &t->init_strict, 1, 0));
        parse_freeze(p, &m);
        t->epochs = (int)epochs;
        t->batch = (int)batch;
        t->seed = (uint64_t)seed;
        t->opt.weight_decay = (float)wd;
        t->checkpoint_every = ckpt;
        t->max_steps = maxs;
        t->eval_batch = (int)evb;
        dt_ymap_close(&m);
}

/* ---- the document ---- */

/* The keys parse_doc reads at the top level (spec/overrides.c sends a --set key by them). */
const char *const dt_model_top_keys[] = { "name", "input", "layers", "loss", "data", "train", "device",
                                          "deterministic", "parallel", NULL };

static int parse_doc(dt_model_spec *s, dt_ydoc *y, dt_diag *d)
{
        pctx p = { .y = y, .d = d, .s = s, .rc = 0 };
        dt_cluster_spec_init(&s->parallel);    /* defaults even when 'parallel:' is absent */
        yaml_node_t *root = dt_ydoc_root(y);
        if (!root || (root->type == YAML_SCALAR_NODE && root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                      (!root->data.scalar.length || !strcmp((const char *)root->data.scalar.value, "~")))) {
                dt_diag_add(d, y->file, 0, 0, "empty document; expected a model spec mapping");
                return -1;
        }
        if (root->type != YAML_MAPPING_NODE) {
                dt_yerr(d, y, root, "expected a model spec mapping at the top level, got %s", kind_of(root));
                return -1;
        }
        dt_ymap m;
        if (dt_ymap_open(&m, y, root, "model", d) < 0) {
                p.rc = -1;
                if (!m.node) return -1;
        }
        parse_name(&p, &m);
        parse_input(&p, &m);
        dt_ykey_describe("list", "(required)");
        parse_layers(&p, root, dt_ymap_get(&m, "layers"));
        int loss = 0, dev = 0;
        CHECK(&p, dt_ymap_enum(&m, "loss", dt_loss_names, &loss, DT_LOSS_SOFTMAX_XENT, 0));
        s->loss = (dt_loss_kind)loss;
        dt_ykey_describe("mapping", "(required)");
        parse_data(&p, root, dt_ymap_get(&m, "data"));
        dt_ykey_describe("mapping", "-");
        parse_train(&p, dt_ymap_get(&m, "train"));
        CHECK(&p, dt_ymap_enum(&m, "device", device_names, &dev, 0, 0));
        strcpy(s->device, device_names[dev]);
        s->device_pos = pos_of(key_node(&m, "device"));
        CHECK(&p, dt_ymap_bool(&m, "deterministic", &s->deterministic, 0, 0));
        /* dtrain-cluster(5)'s keys; parsed (and so listed by `dtrain keys`) even when absent */
        dt_ykey_describe("mapping", "-");
        CHECK(&p, dt_cluster_spec_parse(&s->parallel, y, dt_ymap_get(&m, "parallel"), d));
        if (s->file[0]) strcpy(s->parallel.file, s->file);
        dt_ymap_close(&m);
        return p.rc;
}

/* FNV-1a, 64 bit */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                h ^= b[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

static uint64_t fnv_int(uint64_t h, int64_t v)
{
        return fnv(h, &v, sizeof v);
}

/* What a checkpoint must agree on: the architecture and the optimizer state layout. Training
 * settings (lr, batch, data) may change across a resume. */
static uint64_t spec_hash(const dt_model_spec *s)
{
        uint64_t h = 0xcbf29ce484222325ull;
        h = fnv_int(h, s->input.n);
        for (int i = 0; i < s->input.n; i++) h = fnv_int(h, s->input.d[i]);
        h = fnv_int(h, s->loss);
        h = fnv_int(h, s->nlayers);
        for (int i = 0; i < s->nlayers; i++) {
                const dt_layer_spec *L = &s->layers[i];
                h = fnv(h, L->ops->name, strlen(L->ops->name) + 1);
                h = fnv(h, L->name, strlen(L->name) + 1);
                h = fnv(h, L->cfg, L->ops->cfg_size);
                if (L->named)   /* chains hash as they always did: their checkpoints still resume */
                        for (int k = 0; k < L->nin; k++) h = fnv_int(h, L->src[k]);
        }
        h = fnv_int(h, s->train.opt.kind);
        return h;
}

static void set_paths(dt_model_spec *s, const char *path)
{
        strcpy(s->file, path);
        const char *sl = strrchr(path, '/');
        if (!sl) {
                strcpy(s->dir, ".");
        } else if (sl == path) {
                strcpy(s->dir, "/");
        } else {
                memcpy(s->dir, path, (size_t)(sl - path));
                s->dir[sl - path] = 0;
        }
}

static int finish(dt_model_spec *s, dt_ydoc *y, dt_diag *d, int rc)
{
        int before = d->n;
        if (rc == 0) rc = parse_doc(s, y, d);
        dt_ydoc_free(y);
        /* a layer's parse may report and still return 0; the diagnostics decide */
        if (rc < 0 || d->n > before) {
                dt_model_spec_free(s);
                return -1;
        }
        s->hash = spec_hash(s);
        return 0;
}

int dt_model_spec_load(dt_model_spec *s, const char *path, dt_diag *d)
{
        return dt_model_spec_load_sets(s, path, NULL, 0, d);
}

int dt_model_spec_load_sets(dt_model_spec *s, const char *path, const dt_sets *sets, int cluster_file, dt_diag *d)
{
        memset(s, 0, sizeof *s);
        if (strlen(path) >= DT_PATH_MAX) {
                dt_diag_add(d, NULL, 0, 0, "spec path is longer than %d bytes", DT_PATH_MAX - 1);
                return -1;
        }
        set_paths(s, path);
        dt_ydoc y;
        int rc = dt_ydoc_load(&y, path, d);
        /* a bad override is reported and the others still apply: the spec is checked with them */
        if (rc == 0 && sets) dt_sets_apply(sets, &y, cluster_file ? DT_SETS_MODEL : DT_SETS_MODEL | DT_SETS_PARALLEL, d);
        return finish(s, &y, d, rc);
}

void dt_model_spec_free(dt_model_spec *s)
{
        dt_ykey_free_paths(&s->data.train);
        dt_ykey_free_paths(&s->data.test);
        for (int i = 0; i < s->nlayers; i++) free(s->layers[i].cfg);
        free(s->layers);
        for (int i = 0; i < s->train.nfreeze; i++) free(s->train.freeze[i]);
        free(s->train.freeze);
        memset(s, 0, sizeof *s);
}

/* ---- key listing (`dtrain keys`) ---- */

/* both sources share one key set */
static const char *source_alias(const char *ctx)
{
        return !strcmp(ctx, "data.train") || !strcmp(ctx, "data.test") ? "data.source" : ctx;
}

int dt_model_spec_list_keys(FILE *f, const char *filter, int detail)
{
        /* a spec with every section in mapping form and one layer of each kind: every reader
         * asks for all of its keys whether or not they are present */
        size_t cap = 4096, len = 0;
        char *text = dt_malloc(cap);
        len += (size_t)snprintf(text, cap, "name: keys\ninput: [1]\nlayers:\n");
        for (int i = 0; dt_layer_kinds[i]; i++) {
                size_t need = len + strlen(dt_layer_kinds[i]->name) + 32;
                if (need > cap) {
                        cap = 2 * need;
                        text = dt_realloc(text, cap);
                }
                len += (size_t)snprintf(text + len, cap - len, "  - {type: %s}\n", dt_layer_kinds[i]->name);
        }
        static const char tail[] =
                "loss: mse\n"
                "data:\n  train: {format: synthetic}\n  test: {format: idx}\n  augment: {}\n"
                "train:\n  optimizer: {type: adam}\n  schedule: {type: step}\n"
                "device: cpu\n";
        if (len + sizeof tail > cap) text = dt_realloc(text, len + sizeof tail);
        memcpy(text + len, tail, sizeof tail);

        dt_ykeys_begin(source_alias);
        dt_diag d = { 0 };
        dt_model_spec s;
        memset(&s, 0, sizeof s);
        strcpy(s.dir, ".");
        dt_ydoc y;
        int rc = dt_ydoc_load_string(&y, "<keys>", text, &d);
        if (rc == 0) parse_doc(&s, &y, &d);
        dt_ydoc_free(&y);
        dt_model_spec_free(&s);
        dt_diag_free(&d);
        free(text);
        return dt_ykeys_end(f, filter, detail);
}
