/* graph/graph.c - builds the layer list from the spec (shapes, parameter layout, FLOPs), plans
 * memory before allocating, allocates flat buffers, initialises parameters, runs forward and
 * backward in order. */
#include "graph/graph.h"
#include "graph/recompute.h"
#include "util/trace.h"
#include "util/pages.h"

#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

/* A parameter count beyond this is refused before anything is allocated (64 GiB of floats). */
#define DT_MAX_FLOATS ((size_t)1 << 34)

int dt_graph_ntensors(const dt_graph *g)
{
        return g->n + 1 + g->nx;
}

const dt_shape *dt_graph_tensor_shape(const dt_graph *g, int t)
{
        DT_ASSERT(t >= 0 && t < dt_graph_ntensors(g));
        if (t == 0) return &g->input;
        if (t <= g->n) return &g->layers[t - 1].out;
        return &g->x_shape[t - g->n - 1];
}

int dt_graph_branches(const dt_graph *g)
{
        for (int i = 0; i < g->n; i++)
                if (g->spec && g->spec->layers[g->layers[i].index].named) return 1;
        return 0;
}

void dt_graph_link(dt_graph *g)
{
        int nt = dt_graph_ntensors(g);
        char *written = dt_calloc((size_t)nt, 1);
        for (int k = 0; k < g->nout; k++) written[g->out_t[k]] = 1;
        g->gsum_per = 0;
        for (int i = g->n - 1; i >= 0; i--) {
                dt_layer *l = &g->layers[i];
                for (int k = 0; k < l->nin; k++) {
                        int t = l->src[k];
                        l->acc[k] = written[t];
                        written[t] = 1;
                        size_t sz = dt_shape_size(dt_graph_tensor_shape(g, t));
                        if (l->acc[k] && !l->ops->backward_n && sz > g->gsum_per) g->gsum_per = sz;
                }
        }
        free(written);
}

static const char *tensor_name(const dt_graph *g, int t)
{
        return t == 0 ? "input" : t <= g->n ? g->layers[t - 1].name : "an earlier stage";
}

int dt_graph_infer(const dt_graph *g, dt_layer *l, char *why, size_t n)
{
        const char *from[DT_MAX_INPUTS];
        for (int k = 0; k < l->nin; k++) {
                l->ins[k] = *dt_graph_tensor_shape(g, l->src[k]);
                from[k] = tensor_name(g, l->src[k]);
        }
        l->in = l->ins[0];
        if (l->ops->infer_n) return l->ops->infer_n(l->cfg, l->ins, from, l->nin, &l->out, why, n);
        DT_ASSERT(l->nin == 1);
        return l->ops->infer(l->cfg, &l->in, &l->out, why, n);
}

int dt_graph_build(dt_graph *g, const dt_model_spec *s, dt_diag *d)
{
        memset(g, 0, sizeof *g);
        g->spec = s;
        g->n = s->nlayers;
        g->input = s->input;
        g->layers = dt_calloc((size_t)s->nlayers, sizeof *g->layers);
        int rc = 0;
        for (int i = 0; i < s->nlayers; i++) {
                const dt_layer_spec *ls = &s->layers[i];
                dt_layer *l = &g->layers[i];
                l->ops = ls->ops;
                l->cfg = ls->cfg;
                l->name = ls->name;
                l->index = i;
                l->nin = ls->nin;
                memcpy(l->src, ls->src, sizeof l->src);
                char why[320] = "";
                if (dt_graph_infer(g, l, why, sizeof why) < 0) {
                        dt_diag_add(d, s->file, ls->pos.line, ls->pos.col, "layer '%s' (%s) %s",
                                    ls->name, ls->ops->name, why);
                        rc = -1;
                        g->n = i;       /* the layers after would only repeat the error */
                        break;
                }
                if (dt_shape_size(&l->out) == 0 || dt_shape_size(&l->out) > ((size_t)1 << 31)) {
                        char b[64];
                        dt_diag_add(d, s->file, ls->pos.line, ls->pos.col,
                                    "layer '%s' (%s) output shape %s is empty or larger than 2^31 elements per sample",
                                    ls->name, ls->ops->name, dt_shape_str(&l->out, b, sizeof b));
                        rc = -1;
                        g->n = i;
                        break;
                }
                l->np = ls->ops->params ? ls->ops->params(ls->cfg, &l->in, &l->out, l->ps) : 0;
                DT_ASSERT(l->np <= DT_MAX_PARAMS);
                for (int k = 0; k < l->np; k++) {
                        size_t len = dt_shape_size(&l->ps[k].shape);
                        size_t *total = l->ps[k].trainable ? &g->nparams : &g->nbuffers;
                        if (len == 0 || !dt_add_ok(*total, len, total) || *total > DT_MAX_FLOATS) {
                                dt_diag_add(d, s->file, ls->pos.line, ls->pos.col,
                                            "layer '%s' (%s) has too many parameters (more than 2^34)",
                                            ls->name, ls->ops->name);
                                g->n = s->nlayers;
                                return -1;
                        }
                        l->len[k] = len;
                        l->off[k] = *total - len;
                }
                g->flops += ls->ops->flops ? ls->ops->flops(ls->cfg, &l->in, &l->out) : 0;
        }
        if (rc == 0) {
                g->nout = 1;
                g->out_t = dt_malloc(sizeof *g->out_t);
                g->out_t[0] = g->n;
                dt_graph_link(g);
        }
        g->n = s->nlayers;
        return rc;
}

/* The model tensors live at cut c (before layer c): those made before it (ids <= c) that layer c
 * or a later one reads, ascending; their count. */
static int live_at(const dt_graph *full, int c, int *ids)
{
        int n = 0;
        for (int t = 0; t <= c; t++) {
                int read = 0;
                for (int i = c; i < full->n && !read; i++)
                        for (int k = 0; k < full->layers[i].nin && !read; k++) read = full->layers[i].src[k] == t;
                if (read) ids[n++] = t;
        }
        return n;
}

/* A model tensor id as the range's local id (it is made in the range, is its act[0], or crosses
 * into it as an extra input). */
static int range_local(const dt_graph *r, int t)
{
        if (t > r->first) {
                DT_ASSERT(t <= r->first + r->n);
                return t - r->first;
        }
        if (t == r->first) return 0;
        for (int k = 0; k < r->nx; k++)
                if (r->x_id[k] == t) return r->n + 1 + k;
        DT_ASSERT(0);
        return -1;
}

void dt_graph_range(const dt_graph *full, int first, int last, dt_graph *out)
{
        DT_ASSERT(first >= 0 && first < last && last <= full->n);
        memset(out, 0, sizeof *out);
        out->spec = full->spec;
        out->first = first;
        out->n = last - first;
        DT_ASSERT(full->first == 0 && full->nx == 0);
        out->input = *dt_graph_tensor_shape(full, first);
        out->layers = dt_calloc((size_t)out->n, sizeof *out->layers);
        /* what crosses the cut at first besides act[0] (tensor 'first'): the extra inputs */
        int *live = dt_malloc(((size_t)full->n + 1) * sizeof *live);
        int nl = live_at(full, first, live);
        out->x_id = dt_malloc(((size_t)nl + 1) * sizeof *out->x_id);
        out->x_shape = dt_malloc(((size_t)nl + 1) * sizeof *out->x_shape);
        for (int k = 0; k < nl; k++)
                if (live[k] != first) {
                        out->x_id[out->nx] = live[k];
                        out->x_shape[out->nx++] = *dt_graph_tensor_shape(full, live[k]);
                }
        /* the model's parameters are laid out layer by layer: a stage's are one slice of each buffer */
        size_t pb = SIZE_MAX, bb = SIZE_MAX;
        for (int i = first; i < last; i++)
                for (int k = 0; k < full->layers[i].np; k++) {
                        const dt_layer *l = &full->layers[i];
                        size_t *b = l->ps[k].trainable ? &pb : &bb;
                        if (*b == SIZE_MAX) *b = l->off[k];
                }
        out->param_base = pb == SIZE_MAX ? 0 : pb;
        out->buffer_base = bb == SIZE_MAX ? 0 : bb;
        for (int i = 0; i < out->n; i++) {
                dt_layer *l = &out->layers[i];
                *l = full->layers[first + i];
                l->be = NULL;
                l->priv = NULL;
                for (int k = 0; k < l->np; k++) {
                        l->off[k] -= l->ps[k].trainable ? out->param_base : out->buffer_base;
                        *(l->ps[k].trainable ? &out->nparams : &out->nbuffers) += l->len[k];
                        l->p[k] = l->g[k] = NULL;
                }
                out->flops += l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0;
                for (int k = 0; k < l->nin; k++) l->src[k] = range_local(out, l->src[k]);
        }
        /* the outputs: the loss's, or what crosses the next cut */
        int no = last == full->n ? 1 : live_at(full, last, live);
        if (last == full->n) live[0] = full->n;
        out->nout = no;
        out->out_t = dt_malloc((size_t)no * sizeof *out->out_t);
        for (int k = 0; k < no; k++) out->out_t[k] = range_local(out, live[k]);
        free(live);
        dt_graph_link(out);
}

static size_t scratch_of(const dt_layer *l)
{
        return l->ops->scratch ? l->ops->scratch(l->cfg, &l->in, &l->out) : 0;
}

size_t dt_graph_memory(const dt_graph *g, int batch, int nmoments)
{
        return dt_graph_memory_slots(g, batch, nmoments, 1);
}

int dt_graph_dact_per_slot(const dt_graph *g, int i)
{
        return g->keep_dact && g->layers[i].ops->backward_weight != NULL;
}

/* The parameters' side: params, grads, moments and buffers added to acts (floats), in bytes. */
static size_t with_params(const dt_graph *g, size_t acts, int nmoments)
{
        size_t total = acts, t;
        if (total == SIZE_MAX || !dt_mul_ok(g->nparams, (size_t)(2 + nmoments), &t) || !dt_add_ok(total, t, &total))
                return SIZE_MAX;
        if (!dt_add_ok(total, g->nbuffers, &total) || !dt_mul_ok(total, sizeof(float), &total))
                return SIZE_MAX;
        return total;
}

size_t dt_graph_memory_slots(const dt_graph *g, int batch, int nmoments, int nslots)
{
        for (int i = 0; i < g->n; i++)
                if (dt_graph_recomputed(g, i)) return with_params(g, dt_rc_floats(g, batch, nslots), nmoments);
        size_t S = (size_t)(nslots > 0 ? nslots : 1), per, total;
        /* the inputs: per slot; their gradients once, when backward makes them */
        /* with chunks each tensor per slot of its chunk's (dt_graph_tensor_slots) */
        size_t in = dt_shape_size(&g->input), xs = 0, xper, S0 = (size_t)dt_graph_tensor_slots(g, 0, (int)S);
        for (int k = 0; k < g->nx; k++)
                xs += dt_shape_size(&g->x_shape[k]) * (size_t)dt_graph_tensor_slots(g, g->n + 1 + k, (int)S);
        if (g->input_grad || g->x_grad)
                for (int k = 0; k < g->nx; k++) xs += dt_shape_size(&g->x_shape[k]);
        if (!dt_mul_ok(in, S0 + (g->input_grad ? 1 : 0), &per) || !dt_add_ok(per, g->gsum_per, &per) ||
            !dt_mul_ok(xs, 1, &xper) || !dt_add_ok(per, xper, &per))
                return SIZE_MAX;
        for (int i = 0; i < g->n; i++) {
                /* per slot: output (kept for backward, past its last reader) and the layer's scratch;
                 * once: the output's gradient, or per slot too when a deferred weight pass reads it
                 * (keep_dact) */
                size_t out = dt_shape_size(&g->layers[i].out), kept, grad;
                size_t Si = (size_t)dt_graph_tensor_slots(g, i + 1, (int)S);
                if (!dt_add_ok(out, scratch_of(&g->layers[i]), &kept) || !dt_mul_ok(kept, Si, &kept) ||
                    !dt_mul_ok(out, dt_graph_dact_per_slot(g, i) ? Si : 1, &grad) ||
                    !dt_add_ok(per, kept, &per) || !dt_add_ok(per, grad, &per))
                        return SIZE_MAX;
        }
        if (!dt_mul_ok(per, (size_t)batch, &total)) return SIZE_MAX;
        return with_params(g, total, nmoments);
}

int dt_graph_alloc(dt_graph *g, dt_backend *be, int max_batch)
{
        return dt_graph_alloc_slots(g, be, max_batch, 1);
}

int dt_graph_alloc_slots(dt_graph *g, dt_backend *be, int max_batch, int nslots)
{
        const dt_backend_ops *o = be->ops;
        int nt = dt_graph_ntensors(g);
        g->be = be;
        g->max_batch = max_batch;
        g->nslots = nslots > 0 ? nslots : 1;
        int fo = g->forward_only;
        g->params = g->paged ? dt_pages_alloc(g->nparams) : o->alloc(be, g->nparams);
        g->grads = fo ? NULL : g->paged ? dt_pages_alloc(g->nparams) : o->alloc(be, g->nparams);
        g->buffers = o->alloc(be, g->nbuffers);
        g->gsum = g->gsum_per && !fo ? o->alloc(be, (size_t)max_batch * g->gsum_per) : NULL;
        g->dact = dt_calloc((size_t)nt, sizeof *g->dact);
        if (dt_rc_alloc(g, max_batch) < 0) return -1;
        if ((g->input_grad || g->x_grad) && !fo)
                for (int t = 0; t < nt; t++)
                        if ((t == 0 && g->input_grad) || t > g->n)
                                g->dact[t] = o->alloc(be, (size_t)max_batch * dt_shape_size(dt_graph_tensor_shape(g, t)));
        g->slot_act = dt_calloc((size_t)g->nslots, sizeof *g->slot_act);
        g->slot_priv = dt_calloc((size_t)g->nslots * (size_t)(g->n ? g->n : 1), sizeof *g->slot_priv);
        for (int i = 0; i < g->n; i++) {
                dt_layer *l = &g->layers[i];
                if (!dt_graph_dact_per_slot(g, i) && !fo && !(g->dact[i + 1] = dt_rc_dact(g, i + 1)))
                        g->dact[i + 1] = o->alloc(be, (size_t)max_batch * dt_shape_size(&l->out));
                l->be = be;
                for (int k = 0; k < l->np; k++) {
                        l->p[k] = (l->ps[k].trainable ? g->params : g->buffers) + l->off[k];
                        l->g[k] = l->ps[k].trainable && g->grads ? g->grads + l->off[k] : NULL;
                }
        }
        if (g->keep_dact) {
                /* each slot's set: the shared buffers (all in the set above, NULL at the split
                 * layers' outputs), and its own for those; dact then points at the current one */
                g->slot_dact = dt_calloc((size_t)g->nslots, sizeof *g->slot_dact);
                for (int s = 0; s < g->nslots; s++) {
                        float **d = g->slot_dact[s] = dt_malloc((size_t)nt * sizeof *d);
                        memcpy(d, g->dact, (size_t)nt * sizeof *d);
                        for (int i = 0; i < g->n; i++)
                                if (dt_graph_dact_per_slot(g, i))
                                        d[i + 1] = s < dt_graph_tensor_slots(g, i + 1, g->nslots) ?
                                                   o->alloc(be, (size_t)max_batch * dt_shape_size(&g->layers[i].out)) : NULL;
                }
                free(g->dact);
                g->dact = NULL;
        }
        for (int s = 0; s < g->nslots; s++) {
                float **act = g->slot_act[s] = dt_calloc((size_t)nt, sizeof *act);
                /* with chunks, a chunk's tensors and layer state only in the slots it uses */
                if (s < dt_graph_tensor_slots(g, 0, g->nslots))
                        act[0] = o->alloc(be, (size_t)max_batch * dt_shape_size(&g->input));
                for (int k = 0; k < g->nx; k++)
                        if (s < dt_graph_tensor_slots(g, g->n + 1 + k, g->nslots))
                                act[g->n + 1 + k] = o->alloc(be, (size_t)max_batch * dt_shape_size(&g->x_shape[k]));
                for (int i = 0; i < g->n; i++) {
                        dt_layer *l = &g->layers[i];
                        if (s >= dt_graph_tensor_slots(g, i + 1, g->nslots)) {
                                g->slot_priv[(size_t)s * g->n + i] = NULL;
                                continue;
                        }
                        if (!(act[i + 1] = dt_rc_act(g, i + 1)))
                                act[i + 1] = o->alloc(be, (size_t)max_batch * dt_shape_size(&l->out));
                        l->priv = NULL;
                        if (s > 0 && dt_rc_act(g, i + 1)) {     /* recomputed: one state for every slot */
                                g->slot_priv[(size_t)s * g->n + i] = g->slot_priv[i];
                                continue;
                        }
                        int rc = l->ops->setup ? l->ops->setup(l, max_batch) : 0;
                        g->slot_priv[(size_t)s * g->n + i] = l->priv;
                        if (rc < 0) return -1;
                }
        }
        dt_graph_use_slot(g, 0);
        dt_graph_pair_plan(g);
        return 0;
}

void dt_graph_use_slot(dt_graph *g, int s)
{
        DT_ASSERT(s >= 0 && s < g->nslots);
        g->slot = s;
        g->act = g->slot_act[s];
        if (g->slot_dact) g->dact = g->slot_dact[s];
        for (int i = 0; i < g->n; i++) g->layers[i].priv = g->slot_priv[(size_t)s * g->n + i];
}

/* ---- initialisation: each tensor from its own stream keyed by its name ---- */
typedef struct { uint64_t s; } rng64;

static uint64_t next64(rng64 *r)
{
        r->s += 0x9E3779B97F4A7C15ull;
        uint64_t z = r->s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
}

static double uniform01(rng64 *r) { return ((next64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double normal(rng64 *r)  /* Box-Muller */
{
        double u = uniform01(r), v = uniform01(r);
        return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static uint64_t name_hash(const char *a, const char *b)
{
        uint64_t h = 1469598103934665603ull;
        for (; *a; a++) h = (h ^ (unsigned char)*a) * 1099511628211ull;
        h = (h ^ '.') * 1099511628211ull;
        for (; *b; b++) h = (h ^ (unsigned char)*b) * 1099511628211ull;
        return h;
}

/* Rows (or columns, when there are more rows) made orthonormal by modified Gram-Schmidt. */
static void orthogonalise(float *w, int rows, int cols)
{
        int n = rows <= cols ? rows : cols, len = rows <= cols ? cols : rows;
        size_t sr = rows <= cols ? (size_t)cols : 1, se = rows <= cols ? 1 : (size_t)cols;
        for (int i = 0; i < n; i++) {
                float *vi = w + (size_t)i * sr;
                for (int j = 0; j < i; j++) {
                        const float *vj = w + (size_t)j * sr;
                        double dot = 0;
                        for (int k = 0; k < len; k++) dot += (double)vi[k * se] * vj[k * se];
                        for (int k = 0; k < len; k++) vi[k * se] -= (float)dot * vj[k * se];
                }
                double nn = 0;
                for (int k = 0; k < len; k++) nn += (double)vi[k * se] * vi[k * se];
                float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
                for (int k = 0; k < len; k++) vi[k * se] *= inv;
        }
}

static void init_tensor(float *w, size_t n, const dt_param_spec *ps, rng64 *r)
{
        double fi = ps->fan_in > 0 ? ps->fan_in : 1, fo = ps->fan_out > 0 ? ps->fan_out : 1;
        double gain = ps->init_arg > 0 ? ps->init_arg : 1.0, a;
        switch (ps->init) {
        case DT_INIT_ZERO: for (size_t i = 0; i < n; i++) w[i] = 0; break;
        case DT_INIT_ONE: for (size_t i = 0; i < n; i++) w[i] = 1; break;
        case DT_INIT_CONST: for (size_t i = 0; i < n; i++) w[i] = ps->init_arg; break;
        case DT_INIT_XAVIER_UNIFORM: a = gain * sqrt(6.0 / (fi + fo)); goto uni;
        case DT_INIT_HE_UNIFORM: a = sqrt(6.0 / fi); goto uni;
        case DT_INIT_TORCH: a = 1.0 / sqrt(fi); goto uni;
        uni:
                for (size_t i = 0; i < n; i++) w[i] = (float)((2.0 * uniform01(r) - 1.0) * a);
                break;
        case DT_INIT_XAVIER_NORMAL: a = gain * sqrt(2.0 / (fi + fo)); goto nrm;
        case DT_INIT_HE_NORMAL: a = sqrt(2.0 / fi); goto nrm;
        nrm:
                for (size_t i = 0; i < n; i++) w[i] = (float)(normal(r) * a);
                break;
        case DT_INIT_ORTHOGONAL: {
                for (size_t i = 0; i < n; i++) w[i] = (float)normal(r);
                int rows = ps->shape.d[0], cols = (int)(n / (size_t)rows);
                orthogonalise(w, rows, cols);
                for (size_t i = 0; i < n; i++) w[i] *= (float)gain;
                break;
        }
        default: DT_ASSERT(0);
        }
}

void dt_graph_init_layer(dt_graph *g, int i, uint64_t seed)
{
        dt_layer *l = &g->layers[i];
        /* drawn in place where the parameters are host memory: a copy of a 2048x2048 tensor freed
         * stayed in glibc's heap (its mmap threshold grows with such frees), 16 MiB resident for
         * the whole run on some ranks */
        int host = dt_backend_supports(g->be, DT_CAP_HOST_MEMORY);
        for (int k = 0; k < l->np; k++) {
                rng64 r = { dt_hash64(seed, name_hash(l->name, l->ps[k].suffix)) };
                float *h = host ? l->p[k] : dt_falloc(l->len[k]);
                init_tensor(h, l->len[k], &l->ps[k], &r);
                if (host) continue;
                g->be->ops->to_device(g->be, l->p[k], h, l->len[k]);
                free(h);
        }
        if (l->ops->post_init) l->ops->post_init(l);
}

void dt_graph_init_params(dt_graph *g, uint64_t seed)
{
        for (int i = 0; i < g->n; i++) dt_graph_init_layer(g, i, seed);
}

/* ---- the walks ---- */

/* Where backward writes the gradient of tensor t: NULL for the graph's inputs when no input
 * gradient is wanted (the first stage: nothing reads it). */
static float *dx_of(dt_graph *g, int t)
{
        if (t == 0) return g->input_grad ? g->dact[0] : NULL;
        return t > g->n && !g->input_grad && !g->x_grad ? NULL : g->dact[t];
}

/* The layers a walk runs: a chunk's (dt_graph_use_chunk), or all. */
static int walk_lo(const dt_graph *g) { return g->hi > 0 ? g->lo : 0; }
static int walk_hi(const dt_graph *g) { return g->hi > 0 ? g->hi : g->n; }

/* a pair's second layer (g->pair): its forward and backward run with the first's */
static int paired_second(const dt_graph *g, int i) { return g->pair && i > 0 && g->pair[i - 1]; }

void dt_graph_layer_forward(dt_graph *g, int i, const dt_fwd_ctx *c, int B)
{
        dt_layer *l = &g->layers[i];
        if (paired_second(g, i)) return;
        if (g->need) g->need(g->need_ud, i, 0);
        if (g->pair && g->pair[i]) {
                if (g->need) g->need(g->need_ud, i + 1, 0);
                l->ops->forward_pair(l, l + 1, c, g->act[l->src[0]], g->act[i + 1], g->act[i + 2], B);
                return;
        }
        if (l->ops->forward_n) {
                const float *x[DT_MAX_INPUTS];
                for (int k = 0; k < l->nin; k++) x[k] = g->act[l->src[k]];
                l->ops->forward_n(l, c, x, g->act[i + 1], B);
        } else {
                l->ops->forward(l, c, g->act[l->src[0]], g->act[i + 1], B);
        }
}

void dt_graph_layer_backward(dt_graph *g, int i, const dt_fwd_ctx *c, int B, int half)
{
        dt_layer *l = &g->layers[i];
        const float *y = g->act[i + 1];
        float *dy = g->dact[i + 1];
        if (g->pair && g->pair[i]) return;      /* ran with layer i + 1 */
        if (g->need) g->need(g->need_ud, i, 1);
        if (paired_second(g, i)) {              /* neither splits its backward: half 2 has nothing */
                if (half == 2) return;
                dt_layer *f = l - 1;
                if (g->need) g->need(g->need_ud, i - 1, 1);
                float *dx = dx_of(g, f->src[0]);
                float *into = dx && f->acc[0] ? g->gsum : dx;
                f->ops->backward_pair(f, l, c, g->act[f->src[0]], g->act[i], y, dy, g->dact[i], into, B);
                if (into != dx) g->be->ops->axpy(g->be, (size_t)B * dt_shape_size(&f->in), 1.0f, into, dx);
                return;
        }
        if (half == 2) {
                if (l->ops->backward_weight) l->ops->backward_weight(l, c, g->act[l->src[0]], y, dy, B);
                return;
        }
        if (l->ops->backward_n) {
                const float *x[DT_MAX_INPUTS];
                float *dx[DT_MAX_INPUTS];
                for (int k = 0; k < l->nin; k++) {
                        x[k] = g->act[l->src[k]];
                        dx[k] = dx_of(g, l->src[k]);
                }
                l->ops->backward_n(l, c, x, y, dy, dx, l->acc, B);
                return;
        }
        const float *x = g->act[l->src[0]];
        float *dx = dx_of(g, l->src[0]);
        /* a later reader wrote this tensor's gradient already: this one's share is added to it */
        float *into = dx && l->acc[0] ? g->gsum : dx;
        if (half == 1 && l->ops->backward_input) l->ops->backward_input(l, c, x, y, dy, into, B);
        else l->ops->backward(l, c, x, y, dy, into, B);
        if (into != dx) g->be->ops->axpy(g->be, (size_t)B * dt_shape_size(&l->in), 1.0f, into, dx);
}

void dt_graph_forward_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h)
{
        dt_graph_walk_begin(g, 0);
        for (int i = walk_lo(g); i < walk_hi(g); i++) {
                double t0 = dt_trace_t();       /* --trace: one span per layer */
                dt_graph_layer_forward(g, i, c, B);
                dt_trace_end("forward", g->layers[i].name, NULL, t0);
                if (h && h->fwd_done) h->fwd_done(h->ud, i);
        }
}

void dt_graph_backward_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h)
{
        dt_graph_walk_begin(g, 1);
        for (int i = walk_hi(g) - 1; i >= walk_lo(g); i--) {
                dt_graph_recompute_for(g, i, c, B);
                double t0 = dt_trace_t();
                dt_graph_layer_backward(g, i, c, B, 0);
                dt_trace_end("backward", g->layers[i].name, NULL, t0);
                if (h && h->bwd_done) h->bwd_done(h->ud, i);
        }
}

void dt_graph_backward_input_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h)
{
        DT_ASSERT(!g->rc);      /* refused at the key: the weight pass would find its segments gone */
        for (int i = walk_hi(g) - 1; i >= walk_lo(g); i--) {
                double t0 = dt_trace_t();
                dt_graph_layer_backward(g, i, c, B, 1);
                dt_trace_end("backward", g->layers[i].name, "(input)", t0);
                if (h && h->bwd_done) h->bwd_done(h->ud, i);
        }
}

void dt_graph_backward_weight_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h)
{
        for (int i = walk_hi(g) - 1; i >= walk_lo(g); i--) {
                double t0 = dt_trace_t();
                dt_graph_layer_backward(g, i, c, B, 2);
                if (g->layers[i].ops->backward_weight) dt_trace_end("backward", g->layers[i].name, "(weight)", t0);
                if (h && h->bwd_done) h->bwd_done(h->ud, i);
        }
}

void dt_graph_forward(dt_graph *g, const dt_fwd_ctx *c, int B)
{
        dt_graph_forward_h(g, c, B, NULL);
}

void dt_graph_backward(dt_graph *g, const dt_fwd_ctx *c, int B)
{
        dt_graph_backward_h(g, c, B, NULL);
}

void dt_graph_free(dt_graph *g)
{
        int nt = dt_graph_ntensors(g);
        if (g->be) {
                const dt_backend_ops *o = g->be->ops;
                for (int s = 0; s < g->nslots && g->slot_act; s++) {
                        float **act = g->slot_act[s];
                        for (int i = 0; i < g->n; i++) {
                                dt_layer *l = &g->layers[i];
                                int shared = dt_rc_act(g, i + 1) != NULL;
                                l->priv = g->slot_priv[(size_t)s * g->n + i];
                                if (l->priv && l->ops->teardown && !(shared && s > 0)) l->ops->teardown(l);
                                if (act && !shared) o->free(g->be, act[i + 1]);
                        }
                        if (act) {
                                o->free(g->be, act[0]);
                                for (int k = 0; k < g->nx; k++) o->free(g->be, act[g->n + 1 + k]);
                        }
                        free(act);
                }
                if (g->slot_dact) {     /* the shared buffers through slot 0, each slot's own */
                        for (int s = 0; s < g->nslots; s++) {
                                for (int i = 0; i < nt; i++)
                                        if (s == 0 || (i > 0 && i <= g->n && dt_graph_dact_per_slot(g, i - 1)))
                                                o->free(g->be, g->slot_dact[s][i]);
                                free(g->slot_dact[s]);
                        }
                        free(g->slot_dact);
                        g->dact = NULL;
                }
                for (int i = 0; i < nt && g->dact; i++)
                        if (!dt_rc_dact(g, i)) o->free(g->be, g->dact[i]);
                dt_rc_free(g);
                if (g->paged) {
                        dt_pages_free(g->params, g->nparams);
                        dt_pages_free(g->grads, g->nparams);
                } else {
                        o->free(g->be, g->params);
                        o->free(g->be, g->grads);
                }
                o->free(g->be, g->buffers);
                o->free(g->be, g->gsum);
        }
        free(g->slot_act);
        free(g->slot_priv);
        free(g->owned);
        free(g->dact);
        free(g->layers);
        free(g->x_id);
        free(g->x_shape);
        free(g->out_t);
        free(g->pair);
        for (int c = 0; c < g->nchunks && g->chunk; c++) free(g->chunk[c].in_t), free(g->chunk[c].out_t);
        free(g->chunk);
        memset(g, 0, sizeof *g);
}

int dt_graph_check_backend(const dt_graph *g, const char *backend, unsigned caps, dt_diag *d)
{
        int rc = 0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                char why[256];
                int bad = l->ops->supports && l->ops->supports(l->cfg, backend, caps, why, sizeof why) < 0;
                if (!bad && l->ops->supports_shape)
                        bad = l->ops->supports_shape(l->cfg, &l->in, backend, caps, why, sizeof why) < 0;
                if (!bad) continue;
                const dt_layer_spec *ls = &g->spec->layers[l->index];
                dt_diag_add(d, g->spec->file, ls->pos.line, ls->pos.col, "layer '%s' (%s): %s", l->name,
                            l->ops->name, why);
                rc = -1;
        }
        return rc;
}

static const char *human(double x, char *buf, size_t n)
{
        const char *u[] = { "", "K", "M", "G", "T" };
        int k = 0;
        while (x >= 1000 && k < 4) { x /= 1000; k++; }
        snprintf(buf, n, k ? "%.2f%s" : "%.0f%s", x, u[k]);
        return buf;
}

/* a layer train.freeze keeps fixed (train/finetune.c matches the same way) */
static int is_frozen(const dt_graph *g, const char *name)
{
        for (int i = 0; g->spec && i < g->spec->train.nfreeze; i++)
                if (!fnmatch(g->spec->train.freeze[i], name, 0)) return 1;
        return 0;
}

void dt_graph_print_table(const dt_graph *g, FILE *f)
{
        char sb[64], pb[32], fb[32];
        /* the columns widen to the longest name, type and shape, so long ones never push a row out
         * of line (global_avgpool, lstm outputs (T,H), names up to 63 characters) */
        int wn = 16, wt = 12, ws = 16;
        int w0 = (int)strlen(dt_shape_str(&g->input, sb, sizeof sb));
        if (w0 > ws) ws = w0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                int a = (int)strlen(l->name), b = (int)strlen(l->ops->name), c = (int)strlen(dt_shape_str(&l->out, sb, sizeof sb));
                if (a > wn) wn = a;
                if (b > wt) wt = b;
                if (c > ws) ws = c;
        }
        /* a chain prints as it always did; a branched graph adds what each layer reads */
        int br = dt_graph_branches(g);
        fprintf(f, "%-*s %-*s %-*s %12s %14s%s\n", wn, "layer", wt, "type", ws, "output", "params", "FLOPs/sample",
                br ? "  inputs" : "");
        fprintf(f, "%-*s %-*s %-*s %12s %14s\n", wn, "input", wt, "-", ws, dt_shape_str(&g->input, sb, sizeof sb), "0", "0");
        size_t frozen = 0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                size_t np = 0;
                for (int k = 0; k < l->np; k++) np += l->ps[k].trainable ? l->len[k] : 0;
                int fz = is_frozen(g, l->name);
                if (fz) frozen += np;
                double fl = l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0;
                fprintf(f, "%-*s %-*s %-*s %12zu %14s", wn, l->name, wt, l->ops->name, ws,
                        dt_shape_str(&l->out, sb, sizeof sb), np, human(fl, fb, sizeof fb));
                for (int k = 0; br && k < l->nin; k++)
                        fprintf(f, "%s%s", k ? ", " : "  ", tensor_name(g, l->src[k]));
                /* partition.recompute: which layers all and auto picked */
                fprintf(f, "%s%s\n", fz ? "  frozen" : "", dt_graph_recomputed(g, i) ? "  recomputed" : "");
        }
        fprintf(f, "%-*s %-*s %-*s %12zu %14s\n", wn, "total", wt, "", ws, "", g->nparams, human(g->flops, pb, sizeof pb));
        /* under train.freeze, what the optimizer updates and what it leaves, as Keras's summary */
        if (g->spec && g->spec->train.nfreeze) {
                fprintf(f, "%-*s %-*s %-*s %12zu\n", wn, "trainable", wt, "", ws, "", g->nparams - frozen);
                fprintf(f, "%-*s %-*s %-*s %12zu\n", wn, "frozen", wt, "", ws, "", frozen);
        }
}

int dt_graph_find_tensor(const dt_graph *g, const char *name, int *layer, int *param)
{
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                size_t nl = strlen(l->name);
                if (strncmp(name, l->name, nl) || name[nl] != '.') continue;
                for (int k = 0; k < l->np; k++)
                        if (!strcmp(name + nl + 1, l->ps[k].suffix)) {
                                *layer = i;
                                *param = k;
                                return 0;
                        }
        }
        return -1;
}
