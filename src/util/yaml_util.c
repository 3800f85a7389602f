/* util/yaml_util.c - the checked mapping and scalar readers over a loaded document (yaml_doc.c
 * loads it): every error is reported at the offending node as file:line:col into a dt_diag and
 * never aborts. */
#include "util/yaml_util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

void (*dt_ymap_key_hook)(const char *ctx, const char *key) = NULL;

#define DT_YMAP_MAXPAIRS 1000

/* ---- messages ---- */

void dt_yerr(dt_diag *d, const dt_ydoc *y, const yaml_node_t *n, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *text = dt_vstrfmt(fmt, ap);
        va_end(ap);
        int line = n ? (int)n->start_mark.line + 1 : 0;
        int col = n ? (int)n->start_mark.column + 1 : 0;
        dt_diag_add(d, y ? y->file : NULL, line, col, "%s", text);
        free(text);
}

static yaml_node_t *node_at(dt_ydoc *y, int i)
{
        return yaml_document_get_node(&y->doc, i);
}

static int is_null(const yaml_node_t *n)
{
        if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return 0;
        const char *s = (const char *)n->data.scalar.value;
        return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* A scalar quoted for a message, shortened and made printable so a hostile value cannot flood
 * or garble the terminal. */
static const char *shown(const yaml_node_t *n, char *buf, size_t len)
{
        const char *v = (const char *)n->data.scalar.value;
        char t[48];
        size_t k = 0, vl = n->data.scalar.length;
        for (size_t i = 0; i < vl && k < 40; i++)
                t[k++] = ((unsigned char)v[i] < 32 || v[i] == 127) ? '?' : v[i];
        t[k] = 0;
        snprintf(buf, len, "'%s%s'", t, vl > 40 ? "..." : "");
        return buf;
}

static int tagged(const dt_ydoc *y, const yaml_node_t *n)
{
        if (!y || !y->ntagged) return 0;
        size_t id = (size_t)(n - y->doc.nodes.start) + 1;
        return id < y->ntagged && y->tagged[id];
}

/* A tag as written: the standard ones shortened back to !!x. */
static const char *tag_shown(const yaml_node_t *n, char *buf, size_t len)
{
        static const char std[] = "tag:yaml.org,2002:";
        const char *t = (const char *)n->tag;
        if (!t) t = "!";
        if (!strncmp(t, std, sizeof std - 1)) {
                char c[48];
                snprintf(buf, len, "!!%s", dt_yclip(t + sizeof std - 1, c, sizeof c));
                return buf;
        }
        return dt_yclip(t, buf, len);
}

/* What a node is, for "got ..." in messages. A quoted or tagged scalar says so: '64' in quotes
 * or after !!str is a string, and the message must explain why it is not a number. */
static const char *describe(const dt_ydoc *y, const yaml_node_t *n, char *buf, size_t len)
{
        if (!n || n->type != YAML_SCALAR_NODE) {
                if (n && n->type == YAML_MAPPING_NODE) return "a mapping";
                if (n && n->type == YAML_SEQUENCE_NODE) return "a sequence";
                return "nothing";
        }
        char t[64], g[64];
        if (tagged(y, n)) {
                snprintf(buf, len, "%s with the explicit tag %s", shown(n, t, sizeof t), tag_shown(n, g, sizeof g));
                return buf;
        }
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                if (!n->data.scalar.length) return "nothing";
                return shown(n, buf, len);
        }
        snprintf(buf, len, "the quoted string %s", shown(n, t, sizeof t));
        return buf;
}

static const char *kind_name(const yaml_node_t *n)
{
        if (!n) return "nothing";
        switch (n->type) {
        case YAML_MAPPING_NODE: return "a mapping";
        case YAML_SEQUENCE_NODE: return "a sequence";
        case YAML_SCALAR_NODE: return is_null(n) ? "nothing" : "a scalar";
        default: return "nothing";
        }
}

/* ---- scalars ---- */

const char *dt_ynode_str(const yaml_node_t *n)
{
        if (!n || n->type != YAML_SCALAR_NODE) return NULL;
        return (const char *)n->data.scalar.value;
}

/* A plain untagged scalar with no embedded NUL: the only kind that can be a number or a bool. */
static const char *plain(const dt_ydoc *y, const yaml_node_t *n)
{
        if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
            tagged(y, n))
                return NULL;
        const char *s = (const char *)n->data.scalar.value;
        if (strlen(s) != n->data.scalar.length) return NULL;
        return s;
}

static int parse_long(const char *s, long *out)
{
        if (!s || !*s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9'))) return -1;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || *end) return -1;
        *out = v;
        return 0;
}

/* strtod would also take "nan", "inf" and hex floats; only decimal notation is a number here. */
static int parse_double(const char *s, double *out)
{
        if (!s || !*s) return -1;
        for (const char *c = s; *c; c++)
                if (!strchr("0123456789+-.eE", *c)) return -1;
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (*end || end == s || !isfinite(v)) return -1;
        if (errno == ERANGE && fabs(v) >= 1.0) return -1;
        *out = v;
        return 0;
}

static void int_range(char *buf, size_t len, long min, long max)
{
        if (min == LONG_MIN && max == LONG_MAX) snprintf(buf, len, "an integer");
        else if (max == LONG_MAX) snprintf(buf, len, "an integer >= %ld", min);
        else if (min == LONG_MIN) snprintf(buf, len, "an integer <= %ld", max);
        else snprintf(buf, len, "an integer in [%ld, %ld]", min, max);
}

static void num_range(char *buf, size_t len, double min, double max, int excl)
{
        int lo = min > -HUGE_VAL && min > -1e300, hi = max < HUGE_VAL && max < 1e300;
        const char *gt = (excl & DT_YEXCL_MIN) ? ">" : ">=";
        const char *lt = (excl & DT_YEXCL_MAX) ? "<" : "<=";
        if (lo && hi)
                snprintf(buf, len, "a number in %c%g, %g%c", (excl & DT_YEXCL_MIN) ? '(' : '[', min, max,
                         (excl & DT_YEXCL_MAX) ? ')' : ']');
        else if (lo) snprintf(buf, len, "a number %s %g", gt, min);
        else if (hi) snprintf(buf, len, "a number %s %g", lt, max);
        else snprintf(buf, len, "a number");
}

int dt_ynode_int(dt_diag *d, const dt_ydoc *y, const yaml_node_t *n, const char *what, long *out,
                 long min, long max)
{
        long v;
        if (parse_long(plain(y, n), &v) < 0 || v < min || v > max) {
                char r[96], g[96];
                int_range(r, sizeof r, min, max);
                dt_yerr(d, y, n, "'%s' must be %s, got %s", what, r, describe(y, n, g, sizeof g));
                return -1;
        }
        *out = v;
        return 0;
}

/* ---- edit distance ---- */

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions), capped so a
 * hostile long word costs O(64^2) at most. */
static int osa(const char *a, const char *b)
{
        enum { M = 64 };
        size_t n = strlen(a), m = strlen(b);
        if (n >= M || m >= M) return INT_MAX / 2;
        int dp[M][M];
        for (size_t i = 0; i <= n; i++) dp[i][0] = (int)i;
        for (size_t j = 0; j <= m; j++) dp[0][j] = (int)j;
        for (size_t i = 1; i <= n; i++)
                for (size_t j = 1; j <= m; j++) {
                        int c = a[i - 1] != b[j - 1];
                        int v = DT_MIN(dp[i - 1][j] + 1, dp[i][j - 1] + 1);
                        v = DT_MIN(v, dp[i - 1][j - 1] + c);
                        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                                v = DT_MIN(v, dp[i - 2][j - 2] + 1);
                        dp[i][j] = v;
                }
        return dp[n][m];
}

const char *dt_did_you_mean(const char *word, const char *const *cands, int n)
{
        if (!word) return NULL;
        int limit = DT_MAX(1, (int)strlen(word) / 3);
        const char *best = NULL;
        int bd = INT_MAX;
        for (int i = 0; i < n; i++) {
                if (!cands[i]) continue;
                int dd = osa(word, cands[i]);
                if (dd < bd) {
                        bd = dd;
                        best = cands[i];
                }
        }
        return bd <= limit ? best : NULL;
}

/* ---- mappings ---- */

static const char *key_of(dt_ydoc *y, const yaml_node_pair_t *p, yaml_node_t **kn)
{
        yaml_node_t *k = node_at(y, p->key);
        if (kn) *kn = k;
        if (!k || k->type != YAML_SCALAR_NODE) return NULL;
        return (const char *)k->data.scalar.value;
}

yaml_node_t *dt_ymap_key_node(const dt_ymap *m, const char *key)
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

int dt_ymap_open(dt_ymap *m, dt_ydoc *y, yaml_node_t *node, const char *ctx, dt_diag *d)
{
        memset(m, 0, sizeof *m);
        m->y = y;
        m->d = d;
        m->ctx = ctx;
        if (!node) return 0;
        if (node->type != YAML_MAPPING_NODE) {
                dt_yerr(d, y, node, "expected a mapping for '%s', got %s", ctx, kind_name(node));
                return -1;
        }
        yaml_node_pair_t *b = node->data.mapping.pairs.start, *e = node->data.mapping.pairs.top;
        if (e - b > DT_YMAP_MAXPAIRS) {
                /* the duplicate and unknown-key scans are quadratic; no spec mapping is this big */
                dt_yerr(d, y, node, "'%s' has %ld keys; at most %d are allowed", ctx, (long)(e - b),
                        DT_YMAP_MAXPAIRS);
                return -1;
        }
        m->node = node;
        int rc = 0;
        for (yaml_node_pair_t *p = b; p < e; p++) {
                yaml_node_t *kn;
                const char *k = key_of(y, p, &kn);
                if (!k) {
                        dt_yerr(d, y, kn, "mapping keys must be plain scalars");
                        rc = -1;
                        continue;
                }
                for (yaml_node_pair_t *q = b; q < p; q++) {
                        yaml_node_t *fn;
                        const char *f = key_of(y, q, &fn);
                        if (f && !strcmp(f, k)) {
                                char at[160];
                                dt_yerr(d, y, kn, "duplicate key '%s' (first at %s)", k,
                                        dt_line_str(at, sizeof at, (int)fn->start_mark.line + 1));
                                rc = -1;
                                break;
                        }
                }
        }
        return rc;
}

static void mark_known(dt_ymap *m, const char *key)
{
        if (dt_ymap_key_hook) dt_ymap_key_hook(m->ctx, key);
        for (int i = 0; i < m->nknown; i++)
                if (!strcmp(m->known[i], key)) return;
        DT_ASSERT(m->nknown < DT_YMAP_MAXKEYS);
        m->known[m->nknown++] = key;
}

yaml_node_t *dt_ymap_get(dt_ymap *m, const char *key)
{
        mark_known(m, key);
        if (!m->node) return NULL;
        yaml_node_pair_t *b = m->node->data.mapping.pairs.start, *e = m->node->data.mapping.pairs.top;
        for (yaml_node_pair_t *p = b; p < e; p++) {
                const char *k = key_of(m->y, p, NULL);
                if (k && !strcmp(k, key)) return node_at(m->y, p->value);
        }
        return NULL;
}

void dt_ymap_close(dt_ymap *m)
{
        if (!m->node) return;
        yaml_node_pair_t *b = m->node->data.mapping.pairs.start, *e = m->node->data.mapping.pairs.top;
        for (yaml_node_pair_t *p = b; p < e; p++) {
                yaml_node_t *kn;
                const char *k = key_of(m->y, p, &kn);
                if (!k) continue;
                int seen = 0;   /* duplicates were reported by open */
                for (yaml_node_pair_t *q = b; q < p && !seen; q++) {
                        const char *f = key_of(m->y, q, NULL);
                        seen = f && !strcmp(f, k);
                }
                for (int i = 0; i < m->nknown && !seen; i++)
                        seen = !strcmp(m->known[i], k);
                if (seen) continue;
                char g[96], note[128];
                shown(kn, g, sizeof g);
                const char *s = dt_suggest(k, m->known, m->nknown, note, sizeof note);
                const char *adv = s ? NULL : dt_advice(m->ctx, k);
                if (s)
                        dt_yerr(m->d, m->y, kn, "unknown key %s in '%s'; did you mean '%s'%s?", g, m->ctx, s, note);
                else if (adv)
                        dt_yerr(m->d, m->y, kn, "unknown key %s in '%s'; %s", g, m->ctx, adv);
                else
                        dt_yerr(m->d, m->y, kn, "unknown key %s in '%s'", g, m->ctx);
        }
}

/* Shared start of every getter: absent -> default (error when required). Returns the value node,
 * or NULL with *rc set. */
static yaml_node_t *fetch(dt_ymap *m, const char *key, int required, int *rc)
{
        yaml_node_t *v = dt_ymap_get(m, key);
        *rc = 0;
        if (!v && required && m->node) {
                *rc = -1;
                /* out_channels given for filters: dt_ymap_close's "unknown key 'out_channels'; did
                 * you mean 'filters' (PyTorch's out_channels)?" says it all */
                yaml_node_pair_t *b = m->node->data.mapping.pairs.start, *e = m->node->data.mapping.pairs.top;
                for (yaml_node_pair_t *p = b; p < e; p++)
                        if (dt_is_synonym(key_of(m->y, p, NULL), key)) return v;
                dt_yerr(m->d, m->y, m->node, "missing required key '%s' in '%s'", key, m->ctx);
        }
        return v;
}

/* `dtrain keys`: the type and default of the key a reader is about to ask for. A typed getter
 * fills what a reader has not described already (dt_ykey_describe), so a reader whose default
 * depends on other keys says so in the call next to the code that computes it. */
static struct { char type[200], def[200]; } pend;

void dt_ykey_describe(const char *type, const char *def)
{
        if (!dt_ymap_key_hook) return;
        if (type && !pend.type[0]) snprintf(pend.type, sizeof pend.type, "%s", type);
        if (def && !pend.def[0]) snprintf(pend.def, sizeof pend.def, "%s", def);
}

static void pending(int required, const char *type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pending(int required, const char *type, const char *fmt, ...)
{
        if (!dt_ymap_key_hook) return;
        if (!pend.type[0]) snprintf(pend.type, sizeof pend.type, "%s", type);
        if (pend.def[0]) return;
        if (required) {
                snprintf(pend.def, sizeof pend.def, "(required)");
                return;
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pend.def, sizeof pend.def, fmt, ap);
        va_end(ap);
}

int dt_ymap_int(dt_ymap *m, const char *key, long *out, long def, long min, long max, int required)
{
        int rc;
        *out = def;
        pending(required, "integer", "%ld", def);
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        return dt_ynode_int(m->d, m->y, v, key, out, min, max) < 0 ? -1 : 1;
}

int dt_ymap_num_excl(dt_ymap *m, const char *key, double *out, double def, double min, double max,
                     int excl, int required)
{
        int rc;
        *out = def;
        pending(required, "number", "%g", def);
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        double x;
        if (parse_double(plain(m->y, v), &x) < 0 || x < min || x > max ||
            ((excl & DT_YEXCL_MIN) && x == min) || ((excl & DT_YEXCL_MAX) && x == max)) {
                char r[96], g[96];
                num_range(r, sizeof r, min, max, excl);
                dt_yerr(m->d, m->y, v, "'%s' must be %s, got %s", key, r, describe(m->y, v, g, sizeof g));
                return -1;
        }
        *out = x;
        return 1;
}

int dt_ymap_num(dt_ymap *m, const char *key, double *out, double def, double min, double max, int required)
{
        return dt_ymap_num_excl(m, key, out, def, min, max, 0, required);
}

int dt_ymap_bool(dt_ymap *m, const char *key, int *out, int def, int required)
{
        static const char *const yes[] = { "true", "yes", "on" }, *const no[] = { "false", "no", "off" };
        int rc;
        *out = def;
        pending(required, "boolean", "%s", def ? "true" : "false");
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        const char *s = plain(m->y, v);
        for (int i = 0; s && i < 3; i++) {
                if (!strcasecmp(s, yes[i])) { *out = 1; return 1; }
                if (!strcasecmp(s, no[i])) { *out = 0; return 1; }
        }
        char g[96];
        dt_yerr(m->d, m->y, v, "'%s' must be true or false, got %s", key, describe(m->y, v, g, sizeof g));
        return -1;
}

int dt_ymap_str(dt_ymap *m, const char *key, const char **out, const char *def, int required)
{
        int rc;
        *out = def;
        pending(required, "string", "%s", def ? def : "-");
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        if (v->type != YAML_SCALAR_NODE || is_null(v)) {
                dt_yerr(m->d, m->y, v, "'%s' must be a string, got %s", key, kind_name(v));
                return -1;
        }
        if (strlen((const char *)v->data.scalar.value) != v->data.scalar.length) {
                dt_yerr(m->d, m->y, v, "'%s' must not contain a NUL character", key);
                return -1;
        }
        *out = (const char *)v->data.scalar.value;
        return 1;
}

int dt_ymap_enum(dt_ymap *m, const char *key, const char *const *names, int *out, int def, int required)
{
        int rc;
        *out = def;
        if (dt_ymap_key_hook) {
                char list[200] = "";
                size_t k = 0;
                for (int i = 0; names[i] && k < sizeof list; i++)
                        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? "|" : "", names[i]);
                pending(required, list, "%s", names[def]);
        }
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        const char *s = dt_ynode_str(v);
        int n = 0;
        while (names[n]) n++;
        if (s && !is_null(v))
                for (int i = 0; i < n; i++)
                        if (!strcmp(s, names[i])) { *out = i; return 1; }
        char g[96], list[512], note[128];
        size_t k = 0;
        list[0] = 0;
        for (int i = 0; i < n && k < sizeof list; i++)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
        const char *sug = (s && v->type == YAML_SCALAR_NODE) ? dt_suggest(s, names, n, note, sizeof note) : NULL;
        if (sug)
                dt_yerr(m->d, m->y, v, "unknown value %s for '%s'; did you mean '%s'%s?", describe(m->y, v, g, sizeof g),
                        key, sug, note);
        else
                dt_yerr(m->d, m->y, v, "'%s' must be one of %s; got %s", key, list, describe(m->y, v, g, sizeof g));
        return -1;
}

int dt_ymap_ints(dt_ymap *m, const char *key, long *out, int *n, int maxn, int fill,
                 long min, long max, int required)
{
        int rc;
        *n = 0;
        pending(required, maxn > 1 ? "integer|list" : "integer", "-");
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        if (v->type == YAML_SEQUENCE_NODE) {
                yaml_node_item_t *b = v->data.sequence.items.start, *e = v->data.sequence.items.top;
                long cnt = e - b;
                if (cnt < 1 || cnt > maxn) {
                        if (maxn == 1)
                                dt_yerr(m->d, m->y, v, "'%s' must be a list of 1 integer, got %ld", key, cnt);
                        else
                                dt_yerr(m->d, m->y, v, "'%s' must be a list of 1 to %d integers, got %ld",
                                        key, maxn, cnt);
                        return -1;
                }
                int bad = 0;
                for (long i = 0; i < cnt; i++) {
                        yaml_node_t *it = node_at(m->y, b[i]);
                        if (dt_ynode_int(m->d, m->y, it, key, &out[i], min, max) < 0) bad = 1;
                }
                if (bad) return -1;
                *n = (int)cnt;
                return 1;
        }
        long x;
        if (dt_ynode_int(m->d, m->y, v, key, &x, min, max) < 0) return -1;
        int k = fill > 0 ? DT_MIN(fill, maxn) : 1;
        for (int i = 0; i < k; i++) out[i] = x;
        *n = k;
        return 1;
}

int dt_ymap_pair(dt_ymap *m, const char *key, int *a, int *b, int def, long min, long max, int required)
{
        long v[2];
        int n = 0;
        pending(required, "integer|[a,b]", "%d", def);
        int rc = dt_ymap_ints(m, key, v, &n, 2, 2, min, max, required);
        if (rc <= 0) {
                *a = *b = def;
                return rc;
        }
        *a = (int)v[0];
        *b = (int)(n == 2 ? v[1] : v[0]);
        return rc;
}

/* ---- key recording for `dtrain keys` ---- */

static char **rec_keys;
static int rec_n, rec_cap;
static const char *(*rec_alias)(const char *ctx);

/* One line per key: the first description a reader gave wins; a key only looked at (a raw
 * dt_ymap_get, e.g. again for a message) adds nothing once it is listed. */
static void rec_key(const char *ctx, const char *key)
{
        int described = pend.type[0] != 0;
        char what[sizeof pend.type + sizeof pend.def + 2];
        snprintf(what, sizeof what, "%s\t%s", described ? pend.type : "-", pend.def[0] ? pend.def : "-");
        pend.type[0] = pend.def[0] = 0;
        if (rec_alias) ctx = rec_alias(ctx);
        size_t n = strlen(ctx) + strlen(key) + strlen(what) + 3;
        char *line = dt_malloc(n);
        snprintf(line, n, "%s.%s\t%s", ctx, key, what);
        for (int i = 0; i < rec_n; i++) {
                size_t kl = strcspn(rec_keys[i], "\t");
                if (kl != strcspn(line, "\t") || strncmp(rec_keys[i], line, kl)) continue;
                if (described && !strncmp(rec_keys[i] + kl, "\t-\t", 3)) {
                        free(rec_keys[i]);
                        rec_keys[i] = line;
                } else {
                        free(line);
                }
                return;
        }
        if (rec_n == rec_cap) {
                rec_cap = rec_cap ? 2 * rec_cap : 128;
                rec_keys = dt_realloc(rec_keys, (size_t)rec_cap * sizeof *rec_keys);
        }
        rec_keys[rec_n++] = line;
}

/* by key alone (the part before the first tab); a stable order among equal keys keeps the first
 * reader's type */
static int rec_cmp(const void *a, const void *b)
{
        const char *x = *(char *const *)a, *y = *(char *const *)b;
        size_t nx = strcspn(x, "\t"), ny = strcspn(y, "\t");
        int c = strncmp(x, y, nx < ny ? nx : ny);
        if (c) return c;
        if (nx != ny) return nx < ny ? -1 : 1;
        return strcmp(x, y);
}

static int same_key(const char *x, const char *y)
{
        size_t nx = strcspn(x, "\t");
        return nx == strcspn(y, "\t") && !strncmp(x, y, nx);
}

void dt_ykeys_begin(const char *(*alias)(const char *ctx))
{
        rec_alias = alias;
        dt_ymap_key_hook = rec_key;
}

int dt_ykeys_end(FILE *f, const char *filter, int detail)
{
        dt_ymap_key_hook = NULL;
        qsort(rec_keys, (size_t)rec_n, sizeof *rec_keys, rec_cmp);
        int shown = 0;
        for (int i = 0; i < rec_n; i++) {
                if (i > 0 && same_key(rec_keys[i], rec_keys[i - 1])) continue;
                char *k = rec_keys[i], *t1 = strchr(k, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
                if (!t1 || !t2) continue;
                *t1 = *t2 = 0;
                /* a filter matches keys that start with it, or contain it */
                if (filter && strncmp(k, filter, strlen(filter)) && !strstr(k, filter)) continue;
                if (detail) fprintf(f, "%-34s %-22s %s\n", k, t1 + 1, t2 + 1);
                else fprintf(f, "%s\n", k);
                shown++;
        }
        for (int i = 0; i < rec_n; i++) free(rec_keys[i]);
        free(rec_keys);
        rec_keys = NULL;
        rec_n = rec_cap = 0;
        rec_alias = NULL;
        return shown;
}
