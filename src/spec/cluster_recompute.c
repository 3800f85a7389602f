/* spec/cluster_recompute.c - partition.recompute (dtrain-cluster(5)): none, all, auto or a list of
 * layer names and glob patterns, read at its key and checked against the model and the grid; every
 * error at file:line:col. */
#include "spec/cluster_spec.h"
#include "spec/cluster_int.h"

#include <fnmatch.h>
#include <string.h>
#include "spec/model_spec.h"

static const char *const words[] = { "none", "all", "auto", NULL };

static dt_pos at_node(const yaml_node_t *n)
{
        return (dt_pos){ (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 };
}

static int plain(const yaml_node_t *x)
{
        return x && x->type == YAML_SCALAR_NODE && x->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

int dt_cs_read_recompute(dt_ydoc *y, const yaml_node_t *v, dt_recompute_rules *out, dt_diag *d)
{
        dt_recompute_rules r = { 0 };
        if (v->type == YAML_SCALAR_NODE) {
                const char *s = (const char *)v->data.scalar.value;
                for (int i = 0; words[i]; i++)
                        if (plain(v) && !strcmp(s, words[i])) {
                                r.mode = (dt_recompute_mode)i;
                                *out = r;
                                return 1;
                        }
                /* a bare name would read as one of the words the day a layer is called 'all' */
                dt_yerr(d, y, v, "'recompute' must be none, all, auto or a list of layer names or glob "
                        "patterns (e.g. [bn1, 'conv*']), got '%s'", s);
                return -1;
        }
        if (v->type != YAML_SEQUENCE_NODE) {
                dt_yerr(d, y, v, "'recompute' must be none, all, auto or a list of layer names or glob "
                        "patterns, got a mapping");
                return -1;
        }
        if (v->data.sequence.items.start == v->data.sequence.items.top) {
                dt_yerr(d, y, v, "'recompute' is an empty list, which names no layer; write none to "
                        "recompute nothing, or name the layers");
                return -1;
        }
        int rc = 1;
        r.mode = DT_RECOMPUTE_LIST;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *x = yaml_document_get_node(&y->doc, *it);
                if (!x || x->type != YAML_SCALAR_NODE || x->data.scalar.length == 0 ||
                    x->data.scalar.length >= sizeof r.pattern[0]) {
                        dt_yerr(d, y, x ? x : v, "'recompute': each entry must be a layer name or a glob "
                                "pattern of 1 to %zu characters", sizeof r.pattern[0] - 1);
                        rc = -1;
                        continue;
                }
                if (r.n == DT_MAX_RECOMPUTE) {
                        dt_yerr(d, y, x, "'recompute' has more than %d entries; a glob pattern names "
                                "several layers at once", DT_MAX_RECOMPUTE);
                        return -1;
                }
                snprintf(r.pattern[r.n], sizeof r.pattern[0], "%s", (const char *)x->data.scalar.value);
                r.pos[r.n++] = at_node(x);
        }
        if (rc > 0) *out = r;
        return rc;
}

void dt_cs_check_recompute(const dt_cluster_spec *c, const struct dt_model_spec *m, int pipeline, dt_diag *d)
{
        const dt_recompute_rules *r = &c->recompute;
        if (!(c->set & DT_CS_RECOMPUTE) || (c->bad & DT_CS_RECOMPUTE) || r->mode == DT_RECOMPUTE_NONE) return;
        if (pipeline > 1 && (c->schedule == DT_PIPE_ZBH1 || c->schedule == DT_PIPE_ZBV || c->schedule == DT_PIPE_VHALF))
                /* zb-h1 and the V's run a micro-batch's weight pass after other micro-batches' input
                 * passes, from what its own backward left: a recomputed segment is gone by then.
                 * interleaved runs each chunk's backward whole, and recomputes per chunk. */
                dt_cs_err_at(d, c, DT_CS_RECOMPUTE, dt_cs_kpos(c, DT_CS_RECOMPUTE), "'recompute' does not combine "
                             "with schedule %s (its deferred weight passes read activations that "
                             "recomputation has already released); use schedule 1f1b, gpipe or interleaved",
                             dt_pipe_names[c->schedule]);
        for (int k = 0; m && r->mode == DT_RECOMPUTE_LIST && k < r->n; k++) {
                int hit = 0;
                for (int i = 0; i < m->nlayers && !hit; i++) hit = !fnmatch(r->pattern[k], m->layers[i].name, 0);
                if (!hit)
                        dt_cs_err_at(d, c, DT_CS_RECOMPUTE, r->pos[k], "'recompute' entry '%s' names no layer of "
                                     "model '%s' (see dtrain check for the layer names)", r->pattern[k], m->name);
        }
}
