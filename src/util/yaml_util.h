/* util/yaml_util.h - libyaml document loading and a checked mapping reader that reports
 * file:line:col errors, range-checks numbers, and flags unknown keys with a did-you-mean. */
#ifndef DT_YAML_UTIL_H
#define DT_YAML_UTIL_H

#include <yaml.h>
#include "util/common.h"

/* Limits far above any real spec (a few KiB, nested 4 or 5 levels), so hostile input costs little:
 * a larger file is refused before it is parsed, deeper nesting where it goes too deep. */
#define DT_YAML_MAX_BYTES ((size_t)4 << 20)
#define DT_YAML_MAX_DEPTH 64

typedef struct dt_ydoc {
        yaml_document_t doc;
        char *file;     /* path as the user gave it, for messages */
        int loaded;
        unsigned char *tagged;  /* [node id]: a scalar written with an explicit tag (!!str 15) */
        size_t ntagged;
} dt_ydoc;

/* Loads one YAML document. Syntax errors go to d as file:line:col; a missing or unreadable file,
 * a directory or a file over DT_YAML_MAX_BYTES as file alone; returns 0 on success. */
int dt_ydoc_load(dt_ydoc *y, const char *path, dt_diag *d);
/* Same, from a string; name is used in messages. */
int dt_ydoc_load_string(dt_ydoc *y, const char *name, const char *text, dt_diag *d);
void dt_ydoc_free(dt_ydoc *y);
/* A name or value for a message (yaml_doc.c, yaml_util.c): at most 40 characters of v with control
 * characters replaced, and "..." when cut, in buf. */
const char *dt_yclip(const char *v, char *buf, size_t len);
yaml_node_t *dt_ydoc_root(dt_ydoc *y);
/* Remembers that node id was written with an explicit tag (a node added after loading: --set). */
void dt_ydoc_mark_tagged(dt_ydoc *y, int id);

/* Error at a node's start mark (1-based line:col in the message). */
void dt_yerr(dt_diag *d, const dt_ydoc *y, const yaml_node_t *n, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

#define DT_YMAP_MAXKEYS 48

/* A mapping being read. Every key asked for is "known"; dt_ymap_close reports the others as
 * unknown, suggesting the nearest known key. */
typedef struct dt_ymap {
        dt_ydoc *y;
        yaml_node_t *node;      /* NULL when absent: getters return defaults */
        dt_diag *d;
        const char *ctx;        /* section for messages and key listing, e.g. "train.optimizer" */
        const char *known[DT_YMAP_MAXKEYS];
        int nknown;
} dt_ymap;

/* Opens node as a mapping; node may be NULL (an absent optional section). Reports an error and
 * returns -1 when node is not a mapping. */
int dt_ymap_open(dt_ymap *m, dt_ydoc *y, yaml_node_t *node, const char *ctx, dt_diag *d);
void dt_ymap_close(dt_ymap *m);

/* The key node (not the value) of key in m, or NULL: so that an error about the key itself (a
 * mode it does not apply to) points at the key. Does not mark it known. */
yaml_node_t *dt_ymap_key_node(const dt_ymap *m, const char *key);
/* Raw access: the value node for key, or NULL. Marks key known. */
yaml_node_t *dt_ymap_get(dt_ymap *m, const char *key);
/* Getters: return 1 if the key was present and valid, 0 if absent (default stored), -1 on error
 * (reported). 'required' makes absence an error. Numbers go through strtol/strtod with full-string,
 * errno and range checks; .nan/.inf are refused. A number or a bool must be a plain scalar: quoted
 * ("15") or explicitly tagged (!!str 15, !!int 15) is an error. */
int dt_ymap_int(dt_ymap *m, const char *key, long *out, long def, long min, long max, int required);
int dt_ymap_num(dt_ymap *m, const char *key, double *out, double def, double min, double max, int required);
/* Same with open ends: excl is 0 or DT_YEXCL_MIN | DT_YEXCL_MAX ("(0, 10]" for a learning rate). */
#define DT_YEXCL_MIN 1
#define DT_YEXCL_MAX 2
int dt_ymap_num_excl(dt_ymap *m, const char *key, double *out, double def, double min, double max,
                     int excl, int required);
int dt_ymap_bool(dt_ymap *m, const char *key, int *out, int def, int required);
/* The string points into the document (valid until dt_ydoc_free). */
int dt_ymap_str(dt_ymap *m, const char *key, const char **out, const char *def, int required);
/* names is NULL-terminated; stores the index; unknown value gets a did-you-mean. */
int dt_ymap_enum(dt_ymap *m, const char *key, const char *const *names, int *out, int def, int required);
/* A scalar or a flow list of 1..maxn integers in [min,max] (e.g. kernel: 3 or [3, 5]). Stores the
 * count in *n; a scalar is repeated to fill 'fill' entries when fill > 0. */
int dt_ymap_ints(dt_ymap *m, const char *key, long *out, int *n, int maxn, int fill,
                 long min, long max, int required);

/* A scalar or a flow list of 1 or 2 integers in [min,max] into a pair (kernel: 3 -> 3x3, [3, 5] ->
 * 3x5); absent (or bad) stores def in both. Returns as the getters do. */
int dt_ymap_pair(dt_ymap *m, const char *key, int *a, int *b, int def, long min, long max, int required);

/* Scalar helpers usable on any node (e.g. list items). */
int dt_ynode_int(dt_diag *d, const dt_ydoc *y, const yaml_node_t *n, const char *what, long *out, long min, long max);
const char *dt_ynode_str(const yaml_node_t *n); /* NULL if not a scalar */

/* Nearest candidate by edit distance, or NULL when none is close enough. */
const char *dt_did_you_mean(const char *word, const char *const *cands, int n);
/* The suggestion for an unknown key or value (util/yaml_synonyms.c): another framework's word for a
 * candidate (out_channels -> filters, with note " (PyTorch's out_channels)"), else the same word in
 * another case (SGD -> sgd), else dt_did_you_mean (note ""). NULL when nothing fits. */
const char *dt_suggest(const char *word, const char *const *cands, int n, char *note, size_t len);
/* Whether word is another framework's word for ours (kernel_size for kernel). None of those words
 * is a key or value of ours anywhere. */
int dt_is_synonym(const char *word, const char *ours);
/* For a key of no candidate: what to write instead, given the mapping's context (nesterov in
 * train.optimizer -> "write type: nesterov instead ..."), or NULL. */
const char *dt_advice(const char *ctx, const char *word);

/* Every key asked for through a dt_ymap calls this hook when set (for `dtrain keys`). */
extern void (*dt_ymap_key_hook)(const char *ctx, const char *key);

/* `dtrain keys`: record every key the readers ask for as "ctx.key" with its type and default
 * (alias, when given, renames a context, e.g. data.train -> data.source), then print them sorted
 * and unique, one "ctx.key  type  default" line each (detail) or "ctx.key", those starting with or
 * containing filter when it is not NULL, and forget them. Returns the number of lines printed. */
void dt_ykeys_begin(const char *(*alias)(const char *ctx));
/* While keys are recorded: the type and/or default (NULL: the getter's) of the next key a reader
 * asks for, for a key read raw (a section, a list) or one whose default depends on other keys
 * ("(the kernel)"). A default in parentheses is a rule; any other is a value that, written in the
 * spec, changes nothing. No effect when keys are not being recorded. */
void dt_ykey_describe(const char *type, const char *def);
int dt_ykeys_end(FILE *f, const char *filter, int detail);

#endif
