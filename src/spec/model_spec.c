/* spec/model_spec.c - dtrain-model(5): the model YAML into a dt_model_spec. Every key goes through
 * a dt_ymap, so bad values, missing keys and unknown keys are all reported in one pass at
 * file:line:col; each layer kind reads its own keys. Returns -1 with everything in the dt_diag.
 * Here: the document, name, input and layers, and the message helpers (model_int.h) that
 * model_data.c ('data:') and model_train.c ('train:') share. */
#include "spec/model_spec.h"
#include "spec/model_int.h"
#include "spec/overrides.h"
#include "spec/data_keys.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const dt_loss_names[] = { "softmax_cross_entropy", "mse", NULL };
static const char *const device_names[] = { "cpu", "cuda", "auto", NULL };

#define MAX_LAYERS 10000
#define MAX_INPUT_ELEMS (1UL << 31)


dt_pos dt_ms_pos(const yaml_node_t *n)
{
        dt_pos p = { 0, 0 };
        if (n) {
                p.line = (int)n->start_mark.line + 1;
                p.col = (int)n->start_mark.column + 1;
        }
        return p;
}

/* A user string fit for a message: at most 40 characters, control characters replaced. */
const char *dt_ms_clip(const char *v, char *buf, size_t len)
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

void dt_ms_not_for(dt_ms_ctx *p, dt_ymap *m, const char *key, const char *what, const char *val)
{
        yaml_node_t *k = dt_ymap_key_node(m, key);
        if (!k) return;
        dt_yerr(p->d, p->y, k, "key '%s' does not apply to %s '%s'", key, what, val);
        p->rc = -1;
}

void dt_ms_missing(dt_ms_ctx *p, const yaml_node_t *at, const char *key, const char *ctx)
{
        dt_yerr(p->d, p->y, at, "missing required key '%s' in '%s'", key, ctx);
        p->rc = -1;
}

const char *dt_ms_kind_of(const yaml_node_t *n)
{
        if (n->type == YAML_MAPPING_NODE) return "a mapping";
        if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
        if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
            !n->data.scalar.length)
                return "nothing";
        return "a scalar";
}

/* Looks a scalar name up in names; reports "unknown <what> 'x'" with a suggestion or the list. */
int dt_ms_lookup(dt_ms_ctx *p, const yaml_node_t *n, const char *const *names, const char *what)
{
        const char *s = dt_ynode_str(n);
        int cnt = 0;
        while (names[cnt]) cnt++;
        if (!s || !*s) {
                dt_yerr(p->d, p->y, n, "expected a%s %s name, got %s",
                        strchr("aeiou", what[0]) ? "n" : "", what, dt_ms_kind_of(n));
                p->rc = -1;
                return -1;
        }
        for (int i = 0; i < cnt; i++)
                if (!strcmp(s, names[i])) return i;
        char b[64], list[512], note[128];
        const char *sug = dt_suggest(s, names, cnt, note, sizeof note);
        if (sug) {
                dt_yerr(p->d, p->y, n, "unknown %s '%s'; did you mean '%s'%s?", what, dt_ms_clip(s, b, sizeof b), sug, note);
        } else {
                size_t k = 0;
                list[0] = 0;
                for (int i = 0; i < cnt && k < sizeof list; i++)
                        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
                dt_yerr(p->d, p->y, n, "unknown %s '%s'; expected one of %s", what, dt_ms_clip(s, b, sizeof b), list);
        }
        p->rc = -1;
        return -1;
}

/* `dtrain keys`: the next key is one of names (NULL-terminated) or, when more is not NULL, that
 * too: "sgd|momentum|...|mapping". */
void dt_ms_describe_names(const char *const *names, const char *more, const char *def)
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

static void parse_name(dt_ms_ctx *p, dt_ymap *m)
{
        const char *v;
        int r = dt_ymap_str(m, "name", &v, NULL, 1);
        if (r < 0) p->rc = -1;
        if (r != 1) return;
        if (!valid_name(v, 1)) {
                char b[64];
                dt_yerr(p->d, p->y, dt_ymap_get(m, "name"),
                        "invalid model name '%s'; use 1 to 63 letters, digits, '_', '.' or '-'",
                        dt_ms_clip(v, b, sizeof b));
                p->rc = -1;
                return;
        }
        strcpy(p->s->name, v);
}

static void parse_input(dt_ms_ctx *p, dt_ymap *m)
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
        p->s->input_pos = dt_ms_pos(node);
}

/* ---- layers ---- */

/* 'input: name' or 'inputs: [a, b]': earlier layers by name, or 'input' for the model's input
 * (when no earlier layer has that name). A name that comes later would make a cycle possible and
 * the order no longer topological, so it is refused with where that layer is. */
static void resolve_input(dt_ms_ctx *p, dt_layer_spec *L, int i, const yaml_node_t *n)
{
        dt_model_spec *s = p->s;
        const char *v = dt_ynode_str(n);
        char b[64];
        if (!v || !*v) {
                dt_yerr(p->d, p->y, n, "expected a layer name in '%s' of layer %d, got %s",
                        L->nin ? "inputs" : "input", i + 1, v ? "an empty string" : dt_ms_kind_of(n));
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
        L->in_pos[L->nin] = dt_ms_pos(n);
        L->src[L->nin++] = at;
}

static void parse_inputs(dt_ms_ctx *p, dt_ymap *m, dt_layer_spec *L, int i)
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
static void check_links(dt_ms_ctx *p)
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

static void parse_layer(dt_ms_ctx *p, yaml_node_t *it, int i)
{
        dt_model_spec *s = p->s;
        dt_layer_spec *L = &s->layers[i];
        L->pos = dt_ms_pos(it);
        if (it->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, it, "expected a mapping for a layer (e.g. {type: fc, units: 10}), got %s",
                        dt_ms_kind_of(it));
                p->rc = -1;
                return;
        }
        /* 'type' and 'name' are every layer's keys (listed as layers.type, layers.name); the rest
         * belong to the kind, so the context becomes layers.<type> before its parse runs */
        dt_ymap m;
        DT_MS_CHECK(p, dt_ymap_open(&m, p->y, it, "layers", p->d));
        const char *type = NULL, *name = NULL;
        if (dt_ymap_key_hook) {
                int cnt = dt_layer_kind_count();
                const char **names = dt_calloc((size_t)cnt + 1, sizeof *names);
                for (int k = 0; k < cnt; k++) names[k] = dt_layer_kinds[k]->name;
                dt_ms_describe_names(names, NULL, "(required)");
                free(names);
        }
        DT_MS_CHECK(p, dt_ymap_str(&m, "type", &type, NULL, 1));
        dt_ykey_describe(NULL, "(<type><k>: fc1, fc2, ...)");
        int nr = dt_ymap_str(&m, "name", &name, NULL, 0);
        if (nr < 0) p->rc = -1;
        const dt_layer_ops *ops = type ? dt_layer_find(type) : NULL;
        if (type && !ops) {
                int cnt = dt_layer_kind_count();
                const char **names = dt_calloc((size_t)cnt + 1, sizeof *names);
                for (int k = 0; k < cnt; k++) names[k] = dt_layer_kinds[k]->name;
                dt_ms_lookup(p, dt_ymap_get(&m, "type"), names, "layer type");
                free(names);
        }
        yaml_node_t *name_node = dt_ymap_get(&m, "name");
        char b[64];
        if (nr == 1 && !valid_name(name, 0)) {
                dt_yerr(p->d, p->y, name_node,
                        "invalid layer name '%s'; use 1 to 63 letters, digits or '_', not starting with a digit",
                        dt_ms_clip(name, b, sizeof b));
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
        if (ops->parse) DT_MS_CHECK(p, ops->parse(&m, L->cfg, p->d));
        dt_ymap_close(&m);
}

static void parse_layers(dt_ms_ctx *p, yaml_node_t *root, yaml_node_t *v)
{
        if (!v) {
                dt_ms_missing(p, root, "layers", "model");
                return;
        }
        if (v->type != YAML_SEQUENCE_NODE) {
                dt_yerr(p->d, p->y, v, "expected a sequence for 'layers', got %s", dt_ms_kind_of(v));
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

/* ---- the document ---- */

/* The keys parse_doc reads at the top level (spec/overrides.c sends a --set key by them). */
const char *const dt_model_top_keys[] = { "name", "input", "layers", "loss", "data", "train", "device",
                                          "deterministic", "parallel", NULL };

static int parse_doc(dt_model_spec *s, dt_ydoc *y, dt_diag *d)
{
        dt_ms_ctx p = { .y = y, .d = d, .s = s, .rc = 0 };
        dt_cluster_spec_init(&s->parallel);    /* defaults even when 'parallel:' is absent */
        yaml_node_t *root = dt_ydoc_root(y);
        if (!root || (root->type == YAML_SCALAR_NODE && root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                      (!root->data.scalar.length || !strcmp((const char *)root->data.scalar.value, "~")))) {
                dt_diag_add(d, y->file, 0, 0, "empty document; expected a model spec mapping");
                return -1;
        }
        if (root->type != YAML_MAPPING_NODE) {
                dt_yerr(d, y, root, "expected a model spec mapping at the top level, got %s", dt_ms_kind_of(root));
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
        DT_MS_CHECK(&p, dt_ymap_enum(&m, "loss", dt_loss_names, &loss, DT_LOSS_SOFTMAX_XENT, 0));
        s->loss = (dt_loss_kind)loss;
        dt_ykey_describe("mapping", "(required)");
        dt_ms_parse_data(&p, root, dt_ymap_get(&m, "data"));
        dt_ykey_describe("mapping", "-");
        dt_ms_parse_train(&p, dt_ymap_get(&m, "train"));
        DT_MS_CHECK(&p, dt_ymap_enum(&m, "device", device_names, &dev, 0, 0));
        strcpy(s->device, device_names[dev]);
        s->device_pos = dt_ms_pos(dt_ymap_key_node(&m, "device"));
        DT_MS_CHECK(&p, dt_ymap_bool(&m, "deterministic", &s->deterministic, 0, 0));
        /* dtrain-cluster(5)'s keys; parsed (and so listed by `dtrain keys`) even when absent */
        dt_ykey_describe("mapping", "-");
        DT_MS_CHECK(&p, dt_cluster_spec_parse(&s->parallel, y, dt_ymap_get(&m, "parallel"), d));
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
