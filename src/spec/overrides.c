/* spec/overrides.c - `--set KEY=VALUE` applied to a loaded spec document (see overrides.h), and
 * their record in a run directory. The value is parsed as a YAML document of its own and its
 * nodes are copied into the spec's with marks on the argument's line (util/common.h's
 * DT_ARG_LINE), so every message about them, now or after validation, names the argument. */
#include "spec/overrides.h"
#include "spec/model_spec.h"
#include "spec/cluster_spec.h"
#include "layers/layer.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_COMPS 16            /* a spec nests 4 or 5 levels */
#define MAX_COPY 10000          /* nodes one value may make: aliases cannot blow it up */

static char *strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strfmt(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *s = dt_vstrfmt(fmt, ap);
        va_end(ap);
        return s;
}

void dt_sets_add(dt_sets *s, const char *kv, const char *recorded)
{
        s->kv = dt_realloc(s->kv, (size_t)(s->n + 1) * sizeof *s->kv);
        s->origin = dt_realloc(s->origin, (size_t)(s->n + 1) * sizeof *s->origin);
        s->line = dt_realloc(s->line, (size_t)(s->n + 1) * sizeof *s->line);
        s->kv[s->n] = dt_strdup(kv);
        /* control characters would garble the terminal; the value is shown as given otherwise */
        char shown[200];
        size_t k = 0;
        for (const char *c = kv; *c && k + 4 < sizeof shown; c++)
                shown[k++] = (unsigned char)*c < 32 || *c == 127 ? '?' : *c;
        if (kv[k] && k + 4 >= sizeof shown) memcpy(shown + k, "...", 3), k += 3;
        shown[k] = 0;
        s->origin[s->n] = recorded ? strfmt("--set %s (recorded in %s)", shown, recorded)
                                   : strfmt("--set %s", shown);
        s->line[s->n] = dt_argpos_add(s->origin[s->n]);
        s->n++;
}

static size_t key_len(const char *kv)
{
        const char *eq = strchr(kv, '=');
        return eq ? (size_t)(eq - kv) : strlen(kv);
}

void dt_sets_merge(dt_sets *s, const dt_sets *b)
{
        for (int i = 0; i < b->n; i++) {
                size_t kl = key_len(b->kv[i]);
                for (int j = 0; j < s->n; j++) {
                        if (key_len(s->kv[j]) != kl || strncmp(s->kv[j], b->kv[i], kl)) continue;
                        free(s->kv[j]);
                        free(s->origin[j]);
                        memmove(s->kv + j, s->kv + j + 1, (size_t)(s->n - j - 1) * sizeof *s->kv);
                        memmove(s->origin + j, s->origin + j + 1, (size_t)(s->n - j - 1) * sizeof *s->origin);
                        memmove(s->line + j, s->line + j + 1, (size_t)(s->n - j - 1) * sizeof *s->line);
                        s->n--;
                        break;
                }
                /* kept as given: its messages name where it came from */
                s->kv = dt_realloc(s->kv, (size_t)(s->n + 1) * sizeof *s->kv);
                s->origin = dt_realloc(s->origin, (size_t)(s->n + 1) * sizeof *s->origin);
                s->line = dt_realloc(s->line, (size_t)(s->n + 1) * sizeof *s->line);
                s->kv[s->n] = dt_strdup(b->kv[i]);
                s->origin[s->n] = dt_strdup(b->origin[i]);
                s->line[s->n] = b->line[i];
                s->n++;
        }
}

void dt_sets_free(dt_sets *s)
{
        for (int i = 0; i < s->n; i++) {
                free(s->kv[i]);
                free(s->origin[i]);
        }
        free(s->kv);
        free(s->origin);
        free(s->line);
        memset(s, 0, sizeof *s);
}

const char *dt_sets_str(const dt_sets *s, char *buf, size_t len)
{
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < s->n && k < len; i++)
                k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ", " : "", s->kv[i]);
        if (k >= len && len > 4) strcpy(buf + len - 4, "...");
        return buf;
}

/* ---- the document ---- */

typedef struct setctx {
        dt_ydoc *y;
        dt_diag *d;
        const char *origin;
        yaml_mark_t mark;       /* on the argument's line */
        int budget;
} setctx;

static yaml_node_t *node(dt_ydoc *y, int id)
{
        return yaml_document_get_node(&y->doc, id);
}

static void marks(setctx *c, int id)
{
        node(c->y, id)->start_mark = c->mark;
        node(c->y, id)->end_mark = c->mark;
}

static int is_null(const yaml_node_t *n)
{
        if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
        const char *v = (const char *)n->data.scalar.value;
        return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* A copy of v's node id (a node of the value's own document) in c->y; 0 when out of budget or
 * memory (reported). */
static int copy_node(setctx *c, dt_ydoc *v, int id)
{
        if (c->budget-- <= 0) {
                dt_diag_add(c->d, c->origin, 0, 0, "the value makes more than %d YAML nodes", MAX_COPY);
                return 0;
        }
        yaml_node_t *n = node(v, id);
        int nid = 0;
        if (n->type == YAML_SCALAR_NODE) {
                nid = yaml_document_add_scalar(&c->y->doc, n->tag, n->data.scalar.value, (int)n->data.scalar.length,
                                               n->data.scalar.style);
                if (nid && (size_t)id < v->ntagged && v->tagged[id]) dt_ydoc_mark_tagged(c->y, nid);
        } else if (n->type == YAML_SEQUENCE_NODE) {
                nid = yaml_document_add_sequence(&c->y->doc, n->tag, n->data.sequence.style);
                int cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
                for (int i = 0; nid && i < cnt; i++) {
                        int it = copy_node(c, v, node(v, id)->data.sequence.items.start[i]);
                        if (!it || !yaml_document_append_sequence_item(&c->y->doc, nid, it)) nid = 0;
                }
        } else if (n->type == YAML_MAPPING_NODE) {
                nid = yaml_document_add_mapping(&c->y->doc, n->tag, n->data.mapping.style);
                int cnt = (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
                for (int i = 0; nid && i < cnt; i++) {
                        yaml_node_pair_t p = node(v, id)->data.mapping.pairs.start[i];
                        int k = copy_node(c, v, p.key), val = k ? copy_node(c, v, p.value) : 0;
                        if (!val || !yaml_document_append_mapping_pair(&c->y->doc, nid, k, val)) nid = 0;
                }
        }
        if (nid) marks(c, nid);
        else if (c->budget > 0) dt_diag_add(c->d, c->origin, 0, 0, "out of memory");
        return nid;
}

/* A shallow copy of the collection id, for the path to go through: an anchored node may be
 * aliased elsewhere in the spec, and only this place is overridden. Keeps its marks. */
static int clone(setctx *c, int id)
{
        yaml_node_t *n = node(c->y, id);
        int nid;
        if (n->type == YAML_MAPPING_NODE) {
                nid = yaml_document_add_mapping(&c->y->doc, n->tag, n->data.mapping.style);
                int cnt = (int)(node(c->y, id)->data.mapping.pairs.top - node(c->y, id)->data.mapping.pairs.start);
                for (int i = 0; nid && i < cnt; i++) {
                        yaml_node_pair_t p = node(c->y, id)->data.mapping.pairs.start[i];
                        if (!yaml_document_append_mapping_pair(&c->y->doc, nid, p.key, p.value)) nid = 0;
                }
        } else {
                nid = yaml_document_add_sequence(&c->y->doc, n->tag, n->data.sequence.style);
                int cnt = (int)(node(c->y, id)->data.sequence.items.top - node(c->y, id)->data.sequence.items.start);
                for (int i = 0; nid && i < cnt; i++)
                        if (!yaml_document_append_sequence_item(&c->y->doc, nid,
                                                                node(c->y, id)->data.sequence.items.start[i]))
                                nid = 0;
        }
        if (!nid) {
                dt_diag_add(c->d, c->origin, 0, 0, "out of memory");
                return 0;
        }
        node(c->y, nid)->start_mark = node(c->y, id)->start_mark;
        node(c->y, nid)->end_mark = node(c->y, id)->end_mark;
        return nid;
}

static const char *scalar(dt_ydoc *y, int id)
{
        yaml_node_t *n = id ? node(y, id) : NULL;
        return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int map_get(dt_ydoc *y, int map, const char *key)
{
        yaml_node_t *m = node(y, map);
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
                const char *k = scalar(y, p->key);
                if (k && !strcmp(k, key)) return p->value;
        }
        return 0;
}

/* The names of the model's layers as the spec gives them: 'name', else <type><k> (model_spec.c's
 * rule); "" for an item that is not a layer mapping. */
static void layer_names(dt_ydoc *y, int seq, char (*names)[DT_NAME_MAX], int n)
{
        for (int i = 0; i < n; i++) {
                int it = node(y, seq)->data.sequence.items.start[i];
                names[i][0] = 0;
                if (node(y, it)->type != YAML_MAPPING_NODE) continue;
                const char *name = scalar(y, map_get(y, it, "name")), *type = scalar(y, map_get(y, it, "type"));
                const dt_layer_ops *ops = type ? dt_layer_find(type) : NULL;
                if (name) {
                        snprintf(names[i], DT_NAME_MAX, "%s", name);
                } else if (ops) {
                        int k = 1;
                        for (int j = 0; j < i; j++) {
                                int jt = node(y, seq)->data.sequence.items.start[j];
                                const char *tj = node(y, jt)->type == YAML_MAPPING_NODE
                                                 ? scalar(y, map_get(y, jt, "type")) : NULL;
                                k += tj && dt_layer_find(tj) == ops;
                        }
                        snprintf(names[i], DT_NAME_MAX, "%s%d", ops->name, k);
                }
        }
}

/* The item of sequence seq that comp names: an index, or in the model's layers a layer's name.
 * -1 when none (reported). */
static int seq_index(setctx *c, int seq, const char *comp, const char *path, int layers)
{
        int n = (int)(node(c->y, seq)->data.sequence.items.top - node(c->y, seq)->data.sequence.items.start);
        if (comp[strspn(comp, "0123456789")] == 0) {
                long long i = 0;
                if (strlen(comp) < 10) i = atoll(comp);
                if (strlen(comp) < 10 && i < n) return (int)i;
                dt_diag_add(c->d, c->origin, 0, 0, "'%s' has %d item%s; index %s is out of range (0 to %d)", path, n,
                            n == 1 ? "" : "s", comp, n - 1);
                return -1;
        }
        if (!layers) {
                dt_diag_add(c->d, c->origin, 0, 0, "'%s' is a list: name an item by its index (0 to %d), not '%s'",
                            path, n - 1, comp);
                return -1;
        }
        char (*names)[DT_NAME_MAX] = dt_calloc((size_t)n + 1, sizeof *names);
        const char **cands = dt_calloc((size_t)n + 1, sizeof *cands);
        layer_names(c->y, seq, names, n);
        int found = -1;
        for (int i = 0; i < n; i++) {
                cands[i] = names[i];
                if (found < 0 && names[i][0] && !strcmp(names[i], comp)) found = i;
        }
        if (found < 0) {
                const char *s = dt_did_you_mean(comp, cands, n);
                char b[64];
                if (s)
                        dt_diag_add(c->d, c->origin, 0, 0, "no layer named '%s' in 'layers'; did you mean '%s'?",
                                    dt_yclip(comp, b, sizeof b), s);
                else
                        dt_diag_add(c->d, c->origin, 0, 0, "no layer named '%s' in 'layers' (a layer is named by "
                                    "its name, e.g. fc1, or its index, 0 to %d)", dt_yclip(comp, b, sizeof b), n - 1);
        }
        free(names);
        free(cands);
        return found;
}

/* The child the path goes on through, made ready to change: a collection cloned, nothing (null)
 * made an empty mapping; 0 when it holds a value (reported). */
static int step_into(setctx *c, int child, const char *path, const char *next)
{
        yaml_node_t *n = node(c->y, child);
        if (n->type == YAML_MAPPING_NODE || n->type == YAML_SEQUENCE_NODE) return clone(c, child);
        if (is_null(n)) {
                int m = yaml_document_add_mapping(&c->y->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
                if (m) marks(c, m);
                else dt_diag_add(c->d, c->origin, 0, 0, "out of memory");
                return m;
        }
        char b[64], e[64];
        dt_diag_add(c->d, c->origin, 0, 0, "'%s' is a value ('%s'), not a mapping: it has no key '%s'", path,
                    dt_yclip((const char *)n->data.scalar.value, b, sizeof b), dt_yclip(next, e, sizeof e));
        return 0;
}

/* Puts val at comps under the mapping cur (the document's root, or 'parallel:' inside it). */
static int put(setctx *c, int cur, char **comps, int n, int val, int model)
{
        char path[512] = "";
        size_t pl = 0;
        for (int i = 0; i < n; i++) {
                int last = i == n - 1;
                const char *comp = comps[i];
                yaml_node_t *cn = node(c->y, cur);
                char parent[512];
                memcpy(parent, path, sizeof parent);
                pl += (size_t)snprintf(path + pl, pl < sizeof path ? sizeof path - pl : 0, "%s%s", i ? "." : "", comp);
                if (cn->type == YAML_MAPPING_NODE) {
                        yaml_node_pair_t *p = cn->data.mapping.pairs.start;
                        for (; p < cn->data.mapping.pairs.top; p++) {
                                const char *k = scalar(c->y, p->key);
                                if (k && !strcmp(k, comp)) break;
                        }
                        int have = p < cn->data.mapping.pairs.top, pi = (int)(p - cn->data.mapping.pairs.start);
                        int child;
                        if (last) {
                                child = val;
                        } else if (have) {
                                if (!(child = step_into(c, p->value, path, comps[i + 1]))) return -1;
                        } else {
                                child = yaml_document_add_mapping(&c->y->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
                                if (!child) return -1;
                                marks(c, child);
                        }
                        if (have) {
                                node(c->y, cur)->data.mapping.pairs.start[pi].value = child;
                        } else {
                                int k = yaml_document_add_scalar(&c->y->doc, NULL, (yaml_char_t *)comp, -1,
                                                                 YAML_PLAIN_SCALAR_STYLE);
                                if (!k || !yaml_document_append_mapping_pair(&c->y->doc, cur, k, child)) return -1;
                                marks(c, k);
                        }
                        cur = child;
                } else if (cn->type == YAML_SEQUENCE_NODE) {
                        int j = seq_index(c, cur, comp, parent, model && i == 1 && !strcmp(comps[0], "layers"));
                        if (j < 0) return -1;
                        int child = last ? val : step_into(c, cn->data.sequence.items.start[j], path, comps[i + 1]);
                        if (!child) return -1;
                        node(c->y, cur)->data.sequence.items.start[j] = child;
                        cur = child;
                } else {
                        return -1;      /* only the root can be here: its own error is the reader's */
                }
                pl = strlen(path);
        }
        return 0;
}

static int in(const char *const *names, int n, const char *w)
{
        for (int i = 0; i < n; i++)
                if (!strcmp(names[i], w)) return 1;
        return 0;
}

enum { T_NONE, T_MODEL, T_CLUSTER };

/* Which spec KEY's first component belongs to (a model./cluster. prefix dropped from comps);
 * T_NONE after reporting when report is set. */
static int target(char **comps, int *n, const char *origin, dt_diag *d, int report)
{
        const char *cl[DT_CS_NKEYS];
        int ncl = dt_cluster_spec_top_keys(cl, DT_CS_NKEYS), nm = 0;
        while (dt_model_top_keys[nm]) nm++;
        int t = !strcmp(comps[0], "model") ? T_MODEL : !strcmp(comps[0], "cluster") ? T_CLUSTER : T_NONE;
        if (t != T_NONE) {
                if (*n == 1) {
                        if (report)
                                dt_diag_add(d, origin, 0, 0, "'%s' alone is no key: name one inside it, e.g. %s",
                                            comps[0], t == T_MODEL ? "model.train.epochs" : "cluster.partition.sync");
                        return T_NONE;
                }
                memmove(comps, comps + 1, (size_t)(*n - 1) * sizeof *comps);
                (*n)--;
                return t;
        }
        int im = in(dt_model_top_keys, nm, comps[0]), ic = in(cl, ncl, comps[0]);
        if (im && ic) {
                if (report)
                        dt_diag_add(d, origin, 0, 0, "'%s' is a key of both the model spec and the cluster spec: "
                                    "write model.%s or cluster.%s", comps[0], comps[0], comps[0]);
                return T_NONE;
        }
        if (im) return T_MODEL;
        if (ic) return T_CLUSTER;
        if (report) {
                const char *all[64];
                int na = 0;
                for (int i = 0; i < nm && na < 64; i++) all[na++] = dt_model_top_keys[i];
                for (int i = 0; i < ncl && na < 64; i++) all[na++] = cl[i];
                char note[128] = "", b[64];
                const char *s = dt_suggest(comps[0], all, na, note, sizeof note);
                if (s)
                        dt_diag_add(d, origin, 0, 0, "unknown key '%s' (neither the model spec's nor the cluster "
                                    "spec's); did you mean '%s'%s?", dt_yclip(comps[0], b, sizeof b), s, note);
                else
                        dt_diag_add(d, origin, 0, 0, "unknown key '%s' (neither the model spec's nor the cluster "
                                    "spec's; `dtrain keys` lists them)", dt_yclip(comps[0], b, sizeof b));
        }
        return T_NONE;
}

/* The value's document, its root copied into y; 0 after reporting. */
static int value_node(setctx *c, const char *value)
{
        dt_ydoc v;
        dt_diag vd = { 0 };
        int id = 0;
        if (dt_ydoc_load_string(&v, c->origin, value, &vd) < 0) {
                for (int i = 0; i < vd.n; i++) dt_diag_add(c->d, c->origin, 0, 0, "VALUE: %s", vd.msgs[i].text);
        } else if (!dt_ydoc_root(&v)) {  /* KEY= : nothing, as 'key:' with no value in a file */
                id = yaml_document_add_scalar(&c->y->doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
                if (id) marks(c, id);
        } else {
                c->budget = MAX_COPY;
                id = copy_node(c, &v, 1);
        }
        dt_ydoc_free(&v);
        dt_diag_free(&vd);
        return id;
}

static int apply_one(const dt_sets *s, int i, dt_ydoc *y, int which, dt_diag *d)
{
        const char *kv = s->kv[i], *origin = s->origin[i];
        const char *eq = strchr(kv, '=');
        int report = which & DT_SETS_MODEL;
        if (!eq || eq == kv) {
                if (report)
                        dt_diag_add(d, origin, 0, 0, "expected KEY=VALUE (e.g. --set train.optimizer.lr=0.01), %s",
                                    eq ? "got no KEY before '='" : "got no '='");
                return -1;
        }
        char *key = strfmt("%.*s", (int)(eq - kv), kv);
        char *comps[MAX_COMPS + 1];
        int n = 0, rc = -1;
        for (char *c = key, *dot; n <= MAX_COMPS; c = dot + 1) {
                comps[n++] = c;
                if (!(dot = strchr(c, '.'))) break;
                *dot = 0;
        }
        for (int j = 0; j < n; j++)
                if (!comps[j][0] || n > MAX_COMPS) {
                        if (report)
                                dt_diag_add(d, origin, 0, 0, n > MAX_COMPS ? "KEY has more than %d parts"
                                            : "KEY has an empty part: write its parts with one '.' between them "
                                            "(e.g. train.optimizer.lr)", MAX_COMPS);
                        goto out;
                }
        int t = target(comps, &n, origin, d, report);
        const char *pre = NULL;         /* the path inside the document to put comps under */
        if (t == T_MODEL && (which & DT_SETS_MODEL)) pre = "";
        else if (t == T_CLUSTER && (which & DT_SETS_CLUSTER)) pre = "";
        else if (t == T_CLUSTER && (which & DT_SETS_PARALLEL)) pre = "parallel";
        if (!pre) {
                rc = t == T_NONE ? -1 : 0;
                goto out;
        }
        if (pre[0]) {
                memmove(comps + 1, comps, (size_t)n * sizeof *comps);
                comps[0] = (char *)pre;
                n++;
        }
        setctx c = { .y = y, .d = d, .origin = origin };
        c.mark.line = (size_t)s->line[i];
        yaml_node_t *root = dt_ydoc_root(y);
        if (!root) {            /* an empty file: the overrides are all it holds */
                if (!yaml_document_add_mapping(&y->doc, NULL, YAML_BLOCK_MAPPING_STYLE)) goto out;
                marks(&c, 1);
                root = dt_ydoc_root(y);
        }
        if (root->type != YAML_MAPPING_NODE) goto out;  /* the reader says what is wrong with it */
        int val = value_node(&c, eq + 1);
        if (val) rc = put(&c, 1, comps, n, val, t == T_MODEL);
out:
        free(key);
        return rc;
}

int dt_sets_is_model(const char *kv)
{
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv) return 0;
        char *key = strfmt("%.*s", (int)(eq - kv), kv), *comps[MAX_COMPS + 1];
        int n = 0;
        for (char *c = key, *dot; n < MAX_COMPS; c = dot + 1) {
                comps[n++] = c;
                if (!(dot = strchr(c, '.'))) break;
                *dot = 0;
        }
        int t = target(comps, &n, NULL, NULL, 0);
        free(key);
        return t == T_MODEL;
}

int dt_sets_apply(const dt_sets *s, dt_ydoc *y, int which, dt_diag *d)
{
        int rc = 0;
        for (int i = 0; s && i < s->n; i++)
                if (apply_one(s, i, y, which, d) < 0) rc = -1;
        return rc;
}

/* ---- the record ---- */

int dt_sets_read(dt_sets *s, const char *dir, int print)
{
        char path[DT_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", dir, DT_SETS_FILE);
        /* no record; a path that is no directory is for the checkpoint code to refuse */
        if (access(path, F_OK) != 0 && (errno == ENOENT || errno == ENOTDIR)) return 0;
        dt_ydoc y;
        dt_diag d = { 0 };
        int rc = dt_ydoc_load(&y, path, &d);
        yaml_node_t *r = rc == 0 ? dt_ydoc_root(&y) : NULL;
        if (rc == 0 && r && r->type != YAML_SEQUENCE_NODE) {
                dt_yerr(&d, &y, r, "expected a list of KEY=VALUE strings (what dtrain run --set recorded)");
                rc = -1;
        }
        for (yaml_node_item_t *it = r && !rc ? r->data.sequence.items.start : NULL; it && it < r->data.sequence.items.top; it++) {
                const char *kv = dt_ynode_str(yaml_document_get_node(&y.doc, *it));
                if (!kv) {
                        dt_yerr(&d, &y, yaml_document_get_node(&y.doc, *it), "expected a KEY=VALUE string");
                        rc = -1;
                        break;
                }
                dt_sets_add(s, kv, path);
        }
        if (rc) {
                if (print) dt_diag_print(&d, stderr);
                rc = -1;
        } else {
                rc = 1;
        }
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        return rc;
}

/* A YAML double-quoted scalar: any byte string reads back as it was. */
static void put_quoted(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
                else if (ch < 32 || ch == 127) fprintf(f, "\\x%02x", ch);
                else fputc(ch, f);
        }
        fputc('"', f);
}

int dt_sets_write(const dt_sets *s, const char *dir)
{
        char path[DT_PATH_MAX + 32], tmp[DT_PATH_MAX + 48];
        snprintf(path, sizeof path, "%s/%s", dir, DT_SETS_FILE);
        if (!s->n) return unlink(path) && errno != ENOENT ? -1 : 0;
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f) return -1;
        fprintf(f, "# dtrain run --set overrides of this run, applied over the spec again by --resume,\n"
                   "# eval and predict (dtrain(1), FILES)\n");
        for (int i = 0; i < s->n; i++) {
                fputs("- ", f);
                put_quoted(f, s->kv[i]);
                fputc('\n', f);
        }
        int e = 0;
        if (fflush(f) || fsync(fileno(f))) e = errno;
        if (fclose(f) && !e) e = errno;
        if (!e && rename(tmp, path)) e = errno;
        if (e) {
                unlink(tmp);
                errno = e;
                return -1;
        }
        int dfd = open(dir, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
                fsync(dfd);     /* the rename itself durable, as a checkpoint's */
                close(dfd);
        }
        return 0;
}

/* the last component of p (p without trailing '/'), its length before it in *head */
static const char *base_of(const char *p, size_t n, size_t *head)
{
        size_t i = n;
        while (i > 0 && p[i - 1] != '/') i--;
        *head = i;
        return p + i;
}

void dt_sets_run_dir(const char *path, char *out, size_t len)
{
        size_t n = strlen(path), h1, h2;
        while (n > 1 && path[n - 1] == '/') n--;
        const char *b = base_of(path, n, &h1);
        size_t keep = n;
        if (n - h1 == 11 && !strncmp(b, "checkpoints", 11)) {
                keep = h1;                              /* DIR/checkpoints */
        } else if (h1 > 1) {
                const char *pb = base_of(path, h1 - 1, &h2);
                if (h1 - 1 - h2 == 11 && !strncmp(pb, "checkpoints", 11)) keep = h2;   /* DIR/checkpoints/X */
        }
        while (keep > 1 && path[keep - 1] == '/') keep--;
        if (keep == 0) snprintf(out, len, ".");
        else snprintf(out, len, "%.*s", (int)keep, path);
}
