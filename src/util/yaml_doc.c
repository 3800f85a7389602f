/* util/yaml_doc.c - YAML documents composed from libyaml's events within size and depth limits
 * (yaml_util.h's dt_ydoc_*): every error is reported as file:line:col into a dt_diag and never
 * aborts; no input can crash it, and the limits bound what any input costs. */
#include "util/yaml_util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include "util/common.h"

/* ---- documents ---- */

static void syntax_error(dt_diag *d, const char *file, const yaml_parser_t *p)
{
        const char *prob = p->problem ? p->problem : "unknown error";
        const char *ctx = p->context ? p->context : "";
        const char *sp = p->context ? " " : "";
        if (p->error == YAML_MEMORY_ERROR) {
                dt_diag_add(d, file, 0, 0, "YAML syntax: out of memory while parsing");
        } else if (p->error == YAML_READER_ERROR) {
                /* The reader gives a byte offset, not a mark. Every spec is parsed from memory
                 * (load_bytes), and what precedes the offset was read as valid UTF-8, so the line
                 * is the newlines before it and the column the characters since the last one
                 * (UTF-8 lead bytes), as libyaml's marks count. A UTF-16 file keeps the offset. */
                const unsigned char *t = p->input.string.start;
                size_t off = p->problem_offset, len = t ? (size_t)(p->input.string.end - t) : 0;
                char what[32] = "";
                if (p->problem_value >= 0 && p->problem_value <= 0xff)
                        snprintf(what, sizeof what, " (byte 0x%02x)", (unsigned)p->problem_value);
                if (t && off <= len && p->encoding == YAML_UTF8_ENCODING) {
                        /* a bad trailing octet is reported at itself: point at its character */
                        if (strstr(prob, "trailing"))
                                for (size_t j = off; j > 0 && off - j < 4; j--)
                                        if (t[j - 1] >= 0xc0) {
                                                off = j - 1;
                                                break;
                                        }
                        int line = 1, col = 1;
                        for (size_t i = 0; i < off; i++) {
                                if (t[i] == '\n') {
                                        line++;
                                        col = 1;
                                } else if ((t[i] & 0xc0) != 0x80 && !(i == 0 && off >= 3 && !memcmp(t, "\xef\xbb\xbf", 3))) {
                                        col++;
                                }
                        }
                        dt_diag_add(d, file, line, col, "YAML syntax: %s%s", prob, what);
                } else {
                        dt_diag_add(d, file, 0, 0, "YAML syntax: %s%s at byte %zu", prob, what, off);
                }
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
const char *dt_yclip(const char *v, char *buf, size_t len)
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
                           dt_yclip(a->name, b, sizeof b), a->line + 1);
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

void dt_ydoc_mark_tagged(dt_ydoc *y, int id)
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
                                           "collection that contains it", dt_yclip(name, b, sizeof b));
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
                if (tag) dt_ydoc_mark_tagged(c->y, id);
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

