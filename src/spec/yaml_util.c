/* spec/yaml_util.c - YAML documents composed from libyaml's events within size and depth limits,
 * and the checked mapping reader: every error is reported at the offending node as file:line:col
 * into a dt_diag and never aborts; no input can crash it, and the limits bound what any costs. */
#include "spec/yaml_util.h"

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

/* ---- documents ---- */

static void syntax_error(dt_diag *d, const char *file, const yaml_parser_t *p)
{
        const char *prob = p->problem ? p->problem : "unknown error";
        const char *ctx = p->context ? p->context : "";
        const char *sp = p->context ? " " : "";
        if (p->error == YAML_MEMORY_ERROR) {
                dt_diag_add(d, file, 0, 0, "YAML syntax: out of memory while parsing");
        } else if (p->error == YAML_READER_ERROR) {
                /* the reader has no line marks, only a byte offset */
                dt_diag_add(d, file, 0, 0, "YAML syntax: %s at byte %zu", prob, p->problem_offset);
        } else if (p->context && p->context_mark.line != p->problem_mark.line) {
                /* where the unfinished construct began is usually where the mistake is */
                dt_diag_add(d, file, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
                            "YAML syntax: %s %s started at line %d", prob, ctx,
                            (int)p->context_mark.line + 1);
        } else {
                dt_diag_add(d, file, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
                            "YAML syntax: %s%s%s", prob, sp, ctx);
        }
}

static void mark_error(dt_diag *d, const char *file, yaml_mark_t m, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void mark_error(dt_diag *d, const char *file, yaml_mark_t m, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *text = dt_vstrfmt(fmt, ap);
        va_end(ap);
        dt_diag_add(d, file, (int)m.line + 1, (int)m.column + 1, "%s", text);
        free(text);
}

/* The document is composed from libyaml's events here rather than by yaml_parser_load, because
 * libyaml's scanner spends time proportional to the nesting depth on every token (100k nested
 * brackets took minutes) and its loader cannot be stopped part way: composing event by event
 * stops at DT_YAML_MAX_DEPTH after a few hundred bytes. The nodes, their order, marks and styles
 * are the loader's, so every position in a message is the same; in addition it remembers which
 * scalars had an explicit tag, refuses aliases to a node that contains them (a cycle), and finds
 * anchors by hash where the loader scanned them all for every alias, so no input costs more than
 * linear time. */

typedef struct anchor { char *name; int id; size_t line; } anchor;

typedef struct composer {
        dt_ydoc *y;
        dt_diag *d;
        int open[DT_YAML_MAX_DEPTH];    /* ids of the collections being filled, outermost first */
        int key[DT_YAML_MAX_DEPTH];     /* a mapping's key still waiting for its value, or 0 */
        int depth;
        anchor *tab;                    /* open addressing, at most half full */
        int bits;                       /* the table has 1 << bits slots (0: no table yet) */
        size_t n;
        uint64_t seed;
} composer;

/* FNV-1a from a random start, indexed by its top bits: a file cannot be made of names that all
 * land in one slot, which would make every alias a scan. */
static size_t anchor_index(const composer *c, const char *s)
{
        uint64_t h = c->seed;
        for (; *s; s++) {
                h ^= (unsigned char)*s;
                h *= 0x100000001b3ull;
        }
        return (size_t)(h >> (64 - c->bits));
}

/* The slot of name: its entry, or the empty slot where it would go. */
static anchor *anchor_slot(composer *c, const char *name)
{
        size_t mask = ((size_t)1 << c->bits) - 1, i = anchor_index(c, name);
        while (c->tab[i].name && strcmp(c->tab[i].name, name))
                i = (i + 1) & mask;
        return &c->tab[i];
}

static void anchors_free(composer *c)
{
        for (size_t i = 0; c->bits && i < (size_t)1 << c->bits; i++) free(c->tab[i].name);
        free(c->tab);
        c->tab = NULL;
        c->bits = 0;
        c->n = 0;
}

/* A name for a message: at most 40 characters, control characters replaced. */
static const char *clipped(const char *v, char *buf, size_t len)
{
        size_t k = 0, n = strlen(v);
        for (size_t i = 0; i < n && k < 40 && k + 1 < len; i++)
                buf[k++] = ((unsigned char)v[i] < 32 || v[i] == 127) ? '?' : v[i];
        buf[k] = 0;
        if (n > 40 && k + 4 <= len) strcat(buf, "...");
        return buf;
}

static int anchor_add(composer *c, const yaml_char_t *name, int id, yaml_mark_t m)
{
        if (!name) return 0;
        if (!c->bits || 2 * (c->n + 1) > (size_t)1 << c->bits) {
                anchor *old = c->tab;
                size_t oldcap = c->bits ? (size_t)1 << c->bits : 0;
                if (!c->bits) {
                        if (getrandom(&c->seed, sizeof c->seed, GRND_NONBLOCK) != sizeof c->seed)
                                c->seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)c;
                        c->seed ^= 0xcbf29ce484222325ull;
                }
                c->bits = c->bits ? c->bits + 1 : 6;
                c->tab = dt_calloc((size_t)1 << c->bits, sizeof *c->tab);
                for (size_t i = 0; i < oldcap; i++)
                        if (old[i].name) *anchor_slot(c, old[i].name) = old[i];
                free(old);
        }
        anchor *a = anchor_slot(c, (const char *)name);
        if (a->name) {
                char b[48];
                mark_error(c->d, c->y->file, m, "YAML syntax: duplicate anchor '&%s' (first at line %zu)",
                           clipped(a->name, b, sizeof b), a->line + 1);
                return -1;
        }
        a->name = dt_strdup((const char *)name);
        a->id = id;
        a->line = m.line;
        c->n++;
        return 0;
}

static void set_marks(composer *c, int id, yaml_mark_t start, yaml_mark_t end)
{
        yaml_node_t *n = yaml_document_get_node(&c->y->doc, id);
        n->start_mark = start;
        n->end_mark = end;
}

/* Puts node id where the events say: the root, a sequence item, a mapping key or its value. */
static int attach(composer *c, int id)
{
        if (!c->depth) return 0;        /* the root: node 1, which yaml_document_get_root_node returns */
        int k = c->depth - 1, parent = c->open[k], ok;
        if (yaml_document_get_node(&c->y->doc, parent)->type == YAML_SEQUENCE_NODE) {
                ok = yaml_document_append_sequence_item(&c->y->doc, parent, id);
        } else if (!c->key[k]) {
                c->key[k] = id;
                return 0;
        } else {
                ok = yaml_document_append_mapping_pair(&c->y->doc, parent, c->key[k], id);
                c->key[k] = 0;
        }
        return ok ? 0 : -1;
}

static void set_tagged(dt_ydoc *y, int id)
{
        if ((size_t)id >= y->ntagged) {
                size_t n = DT_MAX((size_t)id + 1, 2 * y->ntagged);
                y->tagged = dt_realloc(y->tagged, n);
                memset(y->tagged + y->ntagged, 0, n - y->ntagged);
                y->ntagged = n;
        }
        y->tagged[id] = 1;
}

/* One event of a document's body: 0; -1 with the error reported; -2 when libyaml could not store
 * a node (out of memory), for the caller to report. */
static int compose_event(composer *c, yaml_event_t *e)
{
        yaml_document_t *doc = &c->y->doc;
        const char *file = c->y->file;
        int id = 0;
        switch (e->type) {
        case YAML_ALIAS_EVENT: {
                const char *name = (const char *)e->data.alias.anchor;
                anchor *a = c->bits ? anchor_slot(c, name) : NULL;
                if (!a || !a->name) {
                        mark_error(c->d, file, e->start_mark, "YAML syntax: found undefined alias");
                        return -1;
                }
                for (int i = 0; i < c->depth; i++)
                        if (c->open[i] == a->id) {
                                char b[48];
                                mark_error(c->d, file, e->start_mark, "YAML syntax: alias '*%s' refers to a "
                                           "collection that contains it", clipped(name, b, sizeof b));
                                return -1;
                        }
                return attach(c, a->id) ? -2 : 0;
        }
        case YAML_SCALAR_EVENT: {
                /* kept as written ("!" too, which the loader replaced by the default) for messages */
                const yaml_char_t *tag = e->data.scalar.tag;
                id = yaml_document_add_scalar(doc, tag, e->data.scalar.value, (int)e->data.scalar.length,
                                              e->data.scalar.style);
                if (!id) return -2;
                set_marks(c, id, e->start_mark, e->end_mark);
                if (tag) set_tagged(c->y, id);
                if (anchor_add(c, e->data.scalar.anchor, id, e->start_mark)) return -1;
                return attach(c, id) ? -2 : 0;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
                if (c->depth == DT_YAML_MAX_DEPTH) {
                        mark_error(c->d, file, e->start_mark, "YAML: mappings and sequences nested more than "
                                   "%d levels deep", DT_YAML_MAX_DEPTH);
                        return -1;
                }
                int seq = e->type == YAML_SEQUENCE_START_EVENT;
                const yaml_char_t *tag = seq ? e->data.sequence_start.tag : e->data.mapping_start.tag;
                const yaml_char_t *anc = seq ? e->data.sequence_start.anchor : e->data.mapping_start.anchor;
                id = seq ? yaml_document_add_sequence(doc, tag, e->data.sequence_start.style)
                         : yaml_document_add_mapping(doc, tag, e->data.mapping_start.style);
                if (!id) return -2;
                set_marks(c, id, e->start_mark, e->end_mark);
                if (anchor_add(c, anc, id, e->start_mark)) return -1;
                if (attach(c, id)) return -2;
                c->open[c->depth] = id;
                c->key[c->depth++] = 0;
                return 0;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
                DT_ASSERT(c->depth > 0);
                yaml_document_get_node(doc, c->open[--c->depth])->end_mark = e->end_mark;
                return 0;
        default:
                DT_ASSERT(0 && "unexpected YAML event inside a document");
                return -1;
        }
}

/* Composes the next document of the stream into y (y->loaded set; no root node when the stream
 * has ended, *ended then set). 0, or -1 with the error in d and nothing loaded. */
static int compose(dt_ydoc *y, yaml_parser_t *p, int *ended, dt_diag *d)
{
        if (!yaml_document_initialize(&y->doc, NULL, NULL, NULL, 1, 1)) {
                dt_diag_add(d, y->file, 0, 0, "YAML syntax: out of memory while parsing");
                return -1;
        }
        y->loaded = 1;
        yaml_event_t e;
        composer c = { .y = y, .d = d };
        int rc = 0;
        if (!yaml_parser_parse(p, &e)) {
                syntax_error(d, y->file, p);
                rc = -1;
        } else if (e.type == YAML_STREAM_END_EVENT) {
                *ended = 1;
                yaml_event_delete(&e);
        } else {
                DT_ASSERT(e.type == YAML_DOCUMENT_START_EVENT);
                yaml_event_delete(&e);
                for (;;) {
                        if (!yaml_parser_parse(p, &e)) {
                                syntax_error(d, y->file, p);
                                rc = -1;
                                break;
                        }
                        if (e.type == YAML_DOCUMENT_END_EVENT) {
                                yaml_event_delete(&e);
                                break;
                        }
                        rc = compose_event(&c, &e);
                        yaml_event_delete(&e);
                        if (rc == -2) dt_diag_add(d, y->file, 0, 0, "YAML syntax: out of memory while parsing");
                        if (rc) break;
                }
        }
        anchors_free(&c);
        if (rc) {
                yaml_document_delete(&y->doc);
                y->loaded = 0;
                return -1;
        }
        return 0;
}

/* Loads the first document from a prepared parser; a second document is an error because a
 * spec is one mapping and silently ignoring the rest would hide edits. */
static int load_parser(dt_ydoc *y, yaml_parser_t *p, dt_diag *d)
{
        yaml_event_t e;
        if (!yaml_parser_parse(p, &e)) {
                syntax_error(d, y->file, p);
                return -1;
        }
        DT_ASSERT(e.type == YAML_STREAM_START_EVENT);
        yaml_event_delete(&e);
        int ended = 0;
        if (compose(y, p, &ended, d)) return -1;
        if (ended) return 0;
        dt_ydoc extra = { .file = y->file };
        if (compose(&extra, p, &ended, d)) return -1;
        yaml_node_t *r = yaml_document_get_root_node(&extra.doc);
        int rc = 0;
        if (r) {
                dt_diag_add(d, y->file, (int)r->start_mark.line + 1, (int)r->start_mark.column + 1,
                            "a second YAML document; a spec holds exactly one");
                rc = -1;
        }
        yaml_document_delete(&extra.doc);
        free(extra.tagged);
        return rc;
}

/* size < 0: unknown (a pipe that went on past the limit) */
static void too_big(dt_diag *d, const char *file, intmax_t size)
{
        if (size >= 0)
                dt_diag_add(d, file, 0, 0, "%jd bytes, more than the %d MiB a spec file may have", size,
                            (int)(DT_YAML_MAX_BYTES >> 20));
        else
                dt_diag_add(d, file, 0, 0, "more than the %d MiB a spec file may have",
                            (int)(DT_YAML_MAX_BYTES >> 20));
}

/* Every spec, from a file or a string, is parsed from memory after this size check. */
static int load_bytes(dt_ydoc *y, const unsigned char *text, size_t len, dt_diag *d)
{
        if (len > DT_YAML_MAX_BYTES) {
                too_big(d, y->file, (intmax_t)len);
                return -1;
        }
        yaml_parser_t p;
        if (!yaml_parser_initialize(&p)) {
                dt_diag_add(d, y->file, 0, 0, "YAML syntax: out of memory while parsing");
                return -1;
        }
        yaml_parser_set_input_string(&p, text, len);
        int rc = load_parser(y, &p, d);
        yaml_parser_delete(&p);
        return rc;
}

int dt_ydoc_load(dt_ydoc *y, const char *path, dt_diag *d)
{
        memset(y, 0, sizeof *y);
        y->file = dt_strdup(path);
        FILE *f = fopen(path, "rb");
        if (!f) {
                dt_diag_add(d, path, 0, 0, "cannot open: %s", strerror(errno));
                return -1;
        }
        struct stat st;
        int have_st = fstat(fileno(f), &st) == 0;
        if (have_st && S_ISDIR(st.st_mode)) {
                dt_diag_add(d, path, 0, 0, "cannot open: %s", strerror(EISDIR));
                fclose(f);
                return -1;
        }
        /* refused before reading: the size of a regular file, else what a pipe gives past the limit */
        if (have_st && S_ISREG(st.st_mode) && (uintmax_t)st.st_size > DT_YAML_MAX_BYTES) {
                too_big(d, path, (intmax_t)st.st_size);
                fclose(f);
                return -1;
        }
        size_t cap = have_st && S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 65536, len = 0;
        unsigned char *buf = dt_malloc(cap);
        for (;;) {
                if (len == cap) {
                        cap = DT_MIN(2 * cap, DT_YAML_MAX_BYTES + 1);
                        buf = dt_realloc(buf, cap);
                }
                size_t k = fread(buf + len, 1, cap - len, f);
                len += k;
                if (k == 0 || len > DT_YAML_MAX_BYTES) break;
        }
        int bad = ferror(f), rc;
        fclose(f);
        if (bad) {
                dt_diag_add(d, path, 0, 0, "cannot read: %s", strerror(errno));
                rc = -1;
        } else if (len > DT_YAML_MAX_BYTES) {
                too_big(d, path, -1);
                rc = -1;
        } else {
                rc = load_bytes(y, buf, len, d);
        }
        free(buf);
        return rc;
}

int dt_ydoc_load_string(dt_ydoc *y, const char *name, const char *text, dt_diag *d)
{
        memset(y, 0, sizeof *y);
        y->file = dt_strdup(name);
        return load_bytes(y, (const unsigned char *)text, strlen(text), d);
}

void dt_ydoc_free(dt_ydoc *y)
{
        if (y->loaded) yaml_document_delete(&y->doc);
        free(y->tagged);
        free(y->file);
        memset(y, 0, sizeof *y);
}

yaml_node_t *dt_ydoc_root(dt_ydoc *y)
{
        return y->loaded ? yaml_document_get_root_node(&y->doc) : NULL;
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
                snprintf(buf, len, "!!%s", clipped(t + sizeof std - 1, c, sizeof c));
                return buf;
        }
        return clipped(t, buf, len);
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
                                dt_yerr(d, y, kn, "duplicate key '%s' (first at line %d)", k,
                                        (int)fn->start_mark.line + 1);
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
                char g[96];
                shown(kn, g, sizeof g);
                const char *s = dt_did_you_mean(k, m->known, m->nknown);
                if (s)
                        dt_yerr(m->d, m->y, kn, "unknown key %s in '%s'; did you mean '%s'?", g, m->ctx, s);
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
                dt_yerr(m->d, m->y, m->node, "missing required key '%s' in '%s'", key, m->ctx);
                *rc = -1;
        }
        return v;
}

int dt_ymap_int(dt_ymap *m, const char *key, long *out, long def, long min, long max, int required)
{
        int rc;
        *out = def;
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        return dt_ynode_int(m->d, m->y, v, key, out, min, max) < 0 ? -1 : 1;
}

int dt_ymap_num_excl(dt_ymap *m, const char *key, double *out, double def, double min, double max,
                     int excl, int required)
{
        int rc;
        *out = def;
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
        yaml_node_t *v = fetch(m, key, required, &rc);
        if (!v) return rc;
        const char *s = dt_ynode_str(v);
        int n = 0;
        while (names[n]) n++;
        if (s && !is_null(v))
                for (int i = 0; i < n; i++)
                        if (!strcmp(s, names[i])) { *out = i; return 1; }
        char g[96], list[512];
        size_t k = 0;
        list[0] = 0;
        for (int i = 0; i < n && k < sizeof list; i++)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
        const char *sug = (s && v->type == YAML_SCALAR_NODE) ? dt_did_you_mean(s, names, n) : NULL;
        if (sug)
                dt_yerr(m->d, m->y, v, "unknown value %s for '%s'; did you mean '%s'?", describe(m->y, v, g, sizeof g),
                        key, sug);
        else
                dt_yerr(m->d, m->y, v, "'%s' must be one of %s; got %s", key, list, describe(m->y, v, g, sizeof g));
        return -1;
}

int dt_ymap_ints(dt_ymap *m, const char *key, long *out, int *n, int maxn, int fill,
                 long min, long max, int required)
{
        int rc;
        *n = 0;
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

static void rec_key(const char *ctx, const char *key)
{
        if (rec_alias) ctx = rec_alias(ctx);
        if (rec_n == rec_cap) {
                rec_cap = rec_cap ? 2 * rec_cap : 128;
                rec_keys = dt_realloc(rec_keys, (size_t)rec_cap * sizeof *rec_keys);
        }
        size_t n = strlen(ctx) + strlen(key) + 2;
        rec_keys[rec_n] = dt_malloc(n);
        snprintf(rec_keys[rec_n], n, "%s.%s", ctx, key);
        rec_n++;
}

static int rec_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

void dt_ykeys_begin(const char *(*alias)(const char *ctx))
{
        rec_alias = alias;
        dt_ymap_key_hook = rec_key;
}

void dt_ykeys_end(FILE *f)
{
        dt_ymap_key_hook = NULL;
        qsort(rec_keys, (size_t)rec_n, sizeof *rec_keys, rec_cmp);
        for (int i = 0; i < rec_n; i++)
                if (i == 0 || strcmp(rec_keys[i], rec_keys[i - 1])) fprintf(f, "%s\n", rec_keys[i]);
        for (int i = 0; i < rec_n; i++) free(rec_keys[i]);
        free(rec_keys);
        rec_keys = NULL;
        rec_n = rec_cap = 0;
        rec_alias = NULL;
}
