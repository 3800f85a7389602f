/* spec/model_int.h - internal to the model spec's readers (model_spec.c, model_data.c,
 * model_train.c): the parsing state and the message helpers they share. */
#ifndef DT_MODEL_INT_H
#define DT_MODEL_INT_H

#include "spec/model_spec.h"

/* Parsing state: the document, the diagnostics, and the spec being filled. */
typedef struct dt_ms_ctx {
        dt_ydoc *y;
        dt_diag *d;
        dt_model_spec *s;
        int rc;
        yaml_node_t *layers_node;       /* the 'layers' sequence (names of later layers) */
} dt_ms_ctx;

#define DT_MS_CHECK(p, call) do { if ((call) < 0) (p)->rc = -1; } while (0)

dt_pos dt_ms_pos(const yaml_node_t *n);
/* A user string fit for a message: at most 40 characters, control characters replaced. */
const char *dt_ms_clip(const char *v, char *buf, size_t len);
/* The key node (not the value) of key in m, so "does not apply" points at the key itself. */
/* "key 'K' does not apply to WHAT 'VAL'" at K, when m has it */
void dt_ms_not_for(dt_ms_ctx *p, dt_ymap *m, const char *key, const char *what, const char *val);
void dt_ms_missing(dt_ms_ctx *p, const yaml_node_t *at, const char *key, const char *ctx);
/* "a mapping", "a sequence", "nothing" or "a scalar" */
const char *dt_ms_kind_of(const yaml_node_t *n);
/* Looks a scalar name up in names; reports "unknown <what> 'x'" with a suggestion or the list. */
int dt_ms_lookup(dt_ms_ctx *p, const yaml_node_t *n, const char *const *names, const char *what);
/* `dtrain keys`: the next key is one of names (NULL-terminated) or, when more is not NULL, that
 * too: "sgd|momentum|...|mapping". */
void dt_ms_describe_names(const char *const *names, const char *more, const char *def);

/* The sections (model_data.c, model_train.c); root is the document's, for cross-references. */
void dt_ms_parse_data(dt_ms_ctx *p, yaml_node_t *root, yaml_node_t *v);
void dt_ms_parse_train(dt_ms_ctx *p, yaml_node_t *v);

#endif
