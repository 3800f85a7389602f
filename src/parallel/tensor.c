/* parallel/tensor.c - tensor parallelism: the split plan, each rank's graph of shards, the
 * collectives the split layers call, and moving tensors between shards and whole (tensor.h). */
#include "parallel/tensor.h"

#include <fnmatch.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/pages.h"

/* ---- the plan, from what each layer kind declares (layer.h's dt_split_way) ---- */

/* l's way of splitting 'how'; NULL when its kind declares none */
static const dt_split_way *way_of(const dt_layer *l, dt_split how)
{
        for (int k = 0; k < l->ops->nsplits; k++)
                if (l->ops->splits[k].split == how) return &l->ops->splits[k];
        return NULL;
}

/* l's first way that plays role; NULL when none */
static const dt_split_way *role_of(const dt_layer *l, dt_split_role role)
{
        for (int k = 0; k < l->ops->nsplits; k++)
                if (l->ops->splits[k].role == role) return &l->ops->splits[k];
        return NULL;
}

/* What the automatic plan splits l by: its kind's first ALONE or OPENS way; NULL when it has none. */
static const dt_split_way *auto_way(const dt_layer *l)
{
        for (int k = 0; k < l->ops->nsplits; k++)
                if (l->ops->splits[k].role == DT_ROLE_ALONE || l->ops->splits[k].role == DT_ROLE_OPENS)
                        return &l->ops->splits[k];
        return NULL;
}

/* Layers a slice passes through unchanged on its way to the closing layer: elementwise. */
static int passes(const dt_layer *l) { return role_of(l, DT_ROLE_PASSES) != NULL; }

/* kind o's ways but PASSES, "column, row"; "" when none */
static void ways_str(const dt_layer_ops *o, char *buf, size_t len)
{
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < o->nsplits && k < len; i++)
                if (o->splits[i].role != DT_ROLE_PASSES)
                        k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? ", " : "", dt_split_names[o->splits[i].split]);
}

/* The registry's kinds that split, neighbours with the same ways grouped: "fc (column, row), conv
 * (channel) and rnn, lstm, gru (hidden)". */
static void splittable_str(char *buf, size_t len)
{
        enum { MAXK = 64 };
        const char *name[MAXK];
        char ways[MAXK][64];
        int n = 0, groups = 0;
        for (const dt_layer_ops *const *o = dt_layer_kinds; *o && n < MAXK; o++) {
                ways_str(*o, ways[n], sizeof ways[n]);
                if (ways[n][0]) name[n++] = (*o)->name;
        }
        for (int i = 0; i < n; i++) groups += i == n - 1 || strcmp(ways[i], ways[i + 1]);
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0, g = 0; i < n && k < len; i++) {
                int last = i == n - 1 || strcmp(ways[i], ways[i + 1]);
                k += (size_t)snprintf(buf + k, len - k, "%s", name[i]);
                if (!last) k += (size_t)snprintf(buf + k, len - k, ", ");
                else if (++g < groups) k += (size_t)snprintf(buf + k, len - k, " (%s)%s", ways[i], g == groups - 1 ? " and " : ", ");
                else k += (size_t)snprintf(buf + k, len - k, " (%s)", ways[i]);
        }
}

/* The registry's kinds with a way of role (and split how, unless DT_SPLIT_NONE): "activation or dropout". */
static void kinds_str(char *buf, size_t len, dt_split_role role, dt_split how)
{
        size_t k = 0;
        buf[0] = 0;
        for (const dt_layer_ops *const *o = dt_layer_kinds; *o && k < len; o++)
                for (int i = 0; i < (*o)->nsplits; i++)
                        if ((*o)->splits[i].role == role && (how == DT_SPLIT_NONE || (*o)->splits[i].split == how)) {
                                k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? " or " : "", (*o)->name);
                                break;
                        }
}

/* Whether layer l can take split 'how' on t ranks; the reason in why when not. */
static int can_split(const dt_layer *l, dt_split how, int t, char *why, size_t n)
{
        const dt_split_way *w = how == DT_SPLIT_PASS ? NULL : way_of(l, how);
        if (!w && !role_of(l, DT_ROLE_ALONE) && !role_of(l, DT_ROLE_OPENS) && !role_of(l, DT_ROLE_CLOSES)) {
                char kinds[256];
                splittable_str(kinds, sizeof kinds);
                snprintf(why, n, "cannot be split across ranks; %.200s can", kinds);
                return 0;
        }
        if (!w) {
                size_t k = (size_t)snprintf(why, n, "%s splits by ", l->ops->name);
                for (int i = 0, m = 0; i < l->ops->nsplits && k < n; i++)
                        if (l->ops->splits[i].role != DT_ROLE_PASSES)
                                k += (size_t)snprintf(why + k, n - k, "%s%s (%s)", m++ ? " or by " : "",
                                                      dt_split_names[l->ops->splits[i].split], l->ops->splits[i].what);
                if (k < n) snprintf(why + k, n - k, ", not by %s", dt_split_names[how]);
                return 0;
        }
        dt_placement pl = { .split = how, .nshards = t, .gather = 1 };
        char *tmp = dt_calloc(1, l->ops->cfg_size);
        int ok = l->ops->shard(l->cfg, &l->in, &pl, tmp, why, n) != NULL;
        free(tmp);
        return ok;
}

/* Whether layer i of g sits on a plain chain: it reads only the previous layer's output, and only
 * the next layer reads its output (nothing else in the stage, nothing across the cut but as the
 * stage's last layer). A split layer needs that: its shard's neighbours are the layers just before
 * and after it, and an add or concat beside a shard would mix a slice with whole tensors. */
static int on_chain(const dt_graph *g, int i)
{
        const dt_layer *l = &g->layers[i];
        if (l->nin != 1 || l->src[0] != i) return 0;
        for (int j = 0; j < g->n; j++)
                for (int k = 0; k < g->layers[j].nin; k++)
                        if (g->layers[j].src[k] == i + 1 && j != i + 1) return 0;
        for (int k = 0; k < g->nout; k++)
                if (g->out_t[k] == i + 1 && i != g->n - 1) return 0;
        return 1;
}

/* The layer before i that a closing split would take its input from, skipping pass-through
 * layers; -1 when there is none in g. */
static int feeder(const dt_graph *g, int i)
{
        int j = i - 1;
        while (j >= 0 && passes(&g->layers[j])) j--;
        return j;
}

/* col opens, row closes (split how), the layers between pass the slice */
static void pair(dt_tp_plan *p, int col, int row, dt_split how)
{
        p->pl[col].gather = 0;
        p->pl[row].split = how;
        for (int k = col + 1; k < row; k++) p->pl[k].split = DT_SPLIT_PASS;
}

/* A layer left alone moves its output (all-gather) and input gradient (all-reduce) to save a share
 * of its multiply-adds: worth it only when they are at least the way's min_work per float moved
 * (fc: I O / (I + O) >= 64, both sides past ~128; a 10-class head stays whole on every rank). */
static int worth_gathering(const dt_layer *l, const dt_split_way *w)
{
        if (w->min_work <= 0) return 1;
        double macs = (l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0) / 2;
        return macs / ((double)dt_shape_size(&l->in) + (double)dt_shape_size(&l->out)) >= w->min_work;
}

static int plan_auto(const dt_cluster_spec *cs, const dt_graph *g, int t, dt_tp_plan *p, dt_diag *d)
{
        char why[256];
        int rc = 0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                const dt_split_way *w = auto_way(l);
                if (!w || !on_chain(g, i)) continue;    /* beside a branch: stays whole */
                if (!can_split(l, w->split, t, why, sizeof why)) {
                        if (w->required && cs) {
                                dt_pos at = dt_cluster_spec_pos_of(cs, DT_CS_GTENSOR);
                                dt_diag_add(d, dt_cluster_spec_file_of(cs, DT_CS_GTENSOR), at.line, at.col,
                                            "tensor %d splits layer '%s' (%s) by %s, but %s; use a tensor size "
                                            "that divides them, or name the splits (splits:, with %s: none to "
                                            "keep it whole on every rank)", t, l->name, l->ops->name, dt_split_names[w->split], why, l->name);
                                rc = -1;
                        }
                        continue;
                }
                if (w->role == DT_ROLE_OPENS) {
                        int j = i + 1;
                        while (j < g->n && passes(&g->layers[j]) && on_chain(g, j)) j++;
                        const dt_split_way *cw = j < g->n && on_chain(g, j) ? role_of(&g->layers[j], DT_ROLE_CLOSES) : NULL;
                        if (cw && cw->takes == w->split && can_split(&g->layers[j], cw->split, t, why, sizeof why)) {
                                p->pl[i] = (dt_placement){ .split = w->split };
                                pair(p, i, j, cw->split);
                                i = j;
                                continue;
                        }
                }
                if (worth_gathering(l, w)) p->pl[i] = (dt_placement){ .split = w->split, .gather = 1 };
        }
        return rc;
}

static int plan_rules(const dt_cluster_spec *cs, const dt_graph *g, int t, dt_tp_plan *p, dt_diag *d)
{
        const dt_split_rules *r = &cs->splits;
        const char *file = dt_cluster_spec_file_of(cs, DT_CS_SPLITS);
        const dt_model_spec *m = g->spec;
        int before = d->n;
        for (int k = 0; k < r->n && g->first == 0; k++) {      /* every pattern names some layer of the
                                                                 * model (said once, with the first stage) */
                int hit = 0;
                for (int i = 0; i < m->nlayers && !hit; i++) hit = !fnmatch(r->pattern[k], m->layers[i].name, 0);
                if (!hit)
                        dt_diag_add(d, file, r->pos[k].line, r->pos[k].col, "splits: no layer of the model is "
                                    "called or matches '%s'", r->pattern[k]);
        }
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                int k = 0;
                while (k < r->n && fnmatch(r->pattern[k], l->name, 0)) k++;
                if (k == r->n || r->how[k] == DT_SPLIT_NONE) continue;
                dt_split how = (dt_split)r->how[k];
                char why[256];
                if (!can_split(l, how, t, why, sizeof why)) {
                        dt_diag_add(d, file, r->pos[k].line, r->pos[k].col, "splits: layer '%s' (%s) %s", l->name,
                                    l->ops->name, why);
                        continue;
                }
                const dt_split_way *w = way_of(l, how);
                int closes = w->role == DT_ROLE_CLOSES, branch = !on_chain(g, i);
                if (closes)
                        for (int j = feeder(g, i); j >= 0 && j < i && !branch; j++) branch = !on_chain(g, j);
                if (branch) {
                        char pairs[64] = "";
                        if (closes) snprintf(pairs, sizeof pairs, " (and its %s pair)", dt_split_names[w->takes]);
                        dt_diag_add(d, file, r->pos[k].line, r->pos[k].col, "splits: layer '%s' (%s) reads or feeds "
                                    "a branch of the graph (inputs:, add, concat); a split layer%s must read the layer "
                                    "just before it and be read only by the layer just after it: leave it whole",
                                    l->name, l->ops->name, pairs);
                        continue;
                }
                if (closes) {
                        int j = feeder(g, i);
                        if (j < 0 || p->pl[j].split != w->takes || !p->pl[j].gather) {
                                char openers[128], between[128];
                                kinds_str(openers, sizeof openers, DT_ROLE_OPENS, w->takes);
                                kinds_str(between, sizeof between, DT_ROLE_PASSES, DT_SPLIT_NONE);
                                dt_diag_add(d, file, r->pos[k].line, r->pos[k].col, "splits: layer '%s' is split "
                                            "by %s, so its input must be the shard of a %s-split %s just "
                                            "before it (only %s layers between, in the same "
                                            "pipeline stage)%s%s%s", l->name, dt_split_names[how],
                                            dt_split_names[w->takes], openers, between, j >= 0 ? "; found '" : "",
                                            j >= 0 ? g->layers[j].name : "", j >= 0 ? "'" : "");
                                continue;
                        }
                        pair(p, j, i, how);
                        continue;
                }
                p->pl[i] = (dt_placement){ .split = how, .gather = 1 };
        }
        return d->n > before ? -1 : 0;
}

int dt_tp_plan_make(const dt_cluster_spec *cs, const dt_graph *g, int t, dt_tp_plan *p, dt_diag *d)
{
        p->n = g->n;
        p->t = t;
        p->pl = dt_calloc((size_t)(g->n ? g->n : 1), sizeof *p->pl);
        if (t <= 1) return 0;
        if (cs && cs->splits.n) return plan_rules(cs, g, t, p, d);
        return plan_auto(cs, g, t, p, d);
}

void dt_tp_plan_free(dt_tp_plan *p)
{
        free(p->pl);
        memset(p, 0, sizeof *p);
}

void dt_tp_plan_str(const dt_tp_plan *p, const dt_graph *g, char *buf, size_t len)
{
        size_t k = 0;
        buf[0] = 0;
        for (int i = 0; i < p->n && k < len; i++) {
                const dt_placement *pl = &p->pl[i];
                if (pl->split == DT_SPLIT_NONE || pl->split == DT_SPLIT_PASS) continue;
                k += (size_t)snprintf(buf + k, len - k, "%s%s %s%s", k ? ", " : "", g->layers[i].name,
                                      dt_split_names[pl->split],
                                      pl->split == DT_SPLIT_COLUMN && pl->gather ? " (gathered)" : "");
        }
        if (!buf[0]) snprintf(buf, len, "no layer splits");
}

/* ---- the collectives ---- */

typedef struct tp_state {
        dt_comm *axis;
        float *tmp;             /* all-gather landing area */
        size_t cap;
} tp_state;

static void tp_allreduce(const dt_tp *t, float *buf, size_t n)
{
        tp_state *s = t->ud;
        dt_comm_allreduce(s->axis, buf, (long)n, MPI_FLOAT, "tensor-parallel all-reduce");
}

static void tp_allgather_cols(const dt_tp *t, const float *in, float *out, size_t rows, size_t w)
{
        tp_state *s = t->ud;
        size_t n = rows * w, T = (size_t)t->size;
        DT_ASSERT(n <= INT32_MAX);
        if (n * T > s->cap) {
                free(s->tmp);
                s->cap = n * T;
                s->tmp = dt_falloc(s->cap);
        }
        MPI_Request r;
        MPI_Iallgather(in, (int)n, MPI_FLOAT, s->tmp, (int)n, MPI_FLOAT, s->axis->comm, &r);
        dt_comm_wait(s->axis, 1, &r, "tensor-parallel all-gather");
        for (size_t k = 0; k < T; k++) dt_cols_put(out, s->tmp + k * n, rows, w * T, k * w, w);
}

void dt_tp_init(dt_tp *tp, dt_comm *axis)
{
        tp_state *s = dt_calloc(1, sizeof *s);
        s->axis = axis;
        *tp = (dt_tp){ .size = axis->size, .rank = axis->rank, .allreduce = tp_allreduce,
                       .allgather_cols = tp_allgather_cols, .ud = s };
}

void dt_tp_free(dt_tp *tp)
{
        tp_state *s = tp->ud;
        if (s) free(s->tmp);
        free(s);
        memset(tp, 0, sizeof *tp);
}

/* ---- this rank's graph ---- */

void dt_tp_graph(const dt_graph *g, const dt_tp_plan *p, const dt_tp *tp, dt_graph *out)
{
        DT_ASSERT(p->n == g->n);
        memset(out, 0, sizeof *out);
        out->spec = g->spec;
        out->first = g->first;
        out->n = g->n;
        out->input = g->input;
        out->input_grad = g->input_grad;
        out->keep_dact = g->keep_dact;
        out->layers = dt_calloc((size_t)g->n, sizeof *out->layers);
        /* the same tensors: a stage's extra inputs and outputs cross whole */
        out->nx = g->nx;
        out->x_id = dt_malloc(((size_t)g->nx + 1) * sizeof *out->x_id);
        out->x_shape = dt_malloc(((size_t)g->nx + 1) * sizeof *out->x_shape);
        for (int k = 0; k < g->nx; k++) {
                out->x_id[k] = g->x_id[k];
                out->x_shape[k] = g->x_shape[k];
        }
        out->nout = g->nout;
        out->out_t = dt_malloc(((size_t)g->nout + 1) * sizeof *out->out_t);
        for (int k = 0; k < g->nout; k++) out->out_t[k] = g->out_t[k];
        size_t total = 0;
        for (int i = 0; i < g->n; i++) total += (g->layers[i].ops->cfg_size + 15) / 16 * 16;
        char *cfgs = out->owned = dt_calloc(1, total ? total : 1);
        for (int i = 0; i < g->n; i++) {
                dt_layer *l = &out->layers[i];
                *l = g->layers[i];
                l->be = NULL;
                l->priv = NULL;
                l->place = p->pl[i];
                l->place.nshards = tp->size;
                l->place.shard = tp->rank;
                l->place.tp = l->place.split == DT_SPLIT_NONE ? NULL : tp;
                if (l->place.split != DT_SPLIT_NONE && l->ops->shard) {   /* its split's variant */
                        char why[256];
                        const dt_layer_ops *ops = l->ops->shard(g->layers[i].cfg, &g->layers[i].in, &l->place, cfgs,
                                                                why, sizeof why);
                        DT_ASSERT(ops);         /* the plan asked the layer already */
                        l->ops = ops;
                        l->cfg = cfgs;
                        cfgs += (l->ops->cfg_size + 15) / 16 * 16;
                }
                char why[320];
                int rc = dt_graph_infer(out, l, why, sizeof why);     /* the local shapes of its inputs */
                DT_ASSERT(rc == 0);
                l->np = l->ops->params ? l->ops->params(l->cfg, &l->in, &l->out, l->ps) : 0;
                for (int k = 0; k < l->np; k++) {
                        size_t *t = l->ps[k].trainable ? &out->nparams : &out->nbuffers;
                        l->len[k] = dt_shape_size(&l->ps[k].shape);
                        l->off[k] = *t;
                        *t += l->len[k];
                        l->p[k] = l->g[k] = NULL;
                }
                out->flops += l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0;
        }
        /* what leaves the graph (the loss, the next stage) leaves it whole */
        for (int k = 0; k < g->nout; k++)
                DT_ASSERT(dt_shape_eq(dt_graph_tensor_shape(out, g->out_t[k]), dt_graph_tensor_shape(g, g->out_t[k])));
        dt_graph_copy_chunks(g, out);   /* a stage of several chunks: the same ranges and tensors */
        dt_graph_link(out);
}

/* ---- shards and whole tensors ----
 * A split tensor differs from the whole in one dimension d, divided by the group size t. Seen as
 * [A][G][t][C] whole (A the product of the dimensions before d, G the gate blocks stacked in d),
 * a shard is [A][G][C]: member r's blocks sit at ((a G + g) t + r) C. */
typedef struct blocks { size_t A, G, C; } blocks;

static int split_of(const dt_param_spec *whole, const dt_param_spec *mine, size_t t, blocks *b)
{
        int d = 0;
        while (d < whole->shape.n && whole->shape.d[d] == mine->shape.d[d]) d++;
        if (d == whole->shape.n) return 0;
        DT_ASSERT((size_t)whole->shape.d[d] == (size_t)mine->shape.d[d] * t);
        b->A = 1;
        for (int k = 0; k < d; k++) b->A *= (size_t)whole->shape.d[k];
        b->G = d == 0 && whole->groups > 1 ? (size_t)whole->groups : 1;
        b->C = (size_t)mine->shape.d[d] / b->G;
        for (int k = d + 1; k < whole->shape.n; k++) b->C *= (size_t)whole->shape.d[k];
        return 1;
}

/* mine <-> whole for one tensor of member r (to_whole: mine -> whole) */
static void move(const dt_param_spec *ws, const dt_param_spec *ms, size_t t, size_t r, float *whole, float *mine,
                 size_t n, int to_whole)
{
        blocks b;
        if (!split_of(ws, ms, t, &b)) {
                if (to_whole) memcpy(whole, mine, n * sizeof *whole);
                else memcpy(mine, whole, n * sizeof *whole);
                return;
        }
        for (size_t a = 0; a < b.A * b.G; a++) {
                float *w = whole + (a * t + r) * b.C, *m = mine + a * b.C;
                if (to_whole) memcpy(w, m, b.C * sizeof *w);
                else memcpy(m, w, b.C * sizeof *w);
        }
}

void dt_tp_runs(const dt_param_spec *whole, const dt_param_spec *mine, size_t t, size_t r, size_t p, size_t q,
                void (*fn)(void *ud, size_t lo, size_t hi, size_t at), void *ud)
{
        blocks b;
        if (!split_of(whole, mine, t, &b)) {
                if (p < q) fn(ud, p, q, p);
                return;
        }
        for (size_t a = p / (t * b.C); a * t * b.C < q; a++) {
                size_t at = (a * t + r) * b.C, lo = DT_MAX(p, at), hi = DT_MIN(q, at + b.C);
                if (lo < hi) fn(ud, lo, hi, a * b.C + (lo - at));
        }
}

void dt_tp_take(const dt_graph *g, const dt_graph *local, int trainable, const float *whole, float *mine)
{
        for (int i = 0; i < g->n; i++) {
                const dt_layer *wl = &g->layers[i], *ml = &local->layers[i];
                size_t t = (size_t)(ml->place.nshards > 0 ? ml->place.nshards : 1);
                for (int k = 0; k < wl->np; k++)
                        if (!wl->ps[k].trainable == !trainable)
                                move(&wl->ps[k], &ml->ps[k], t, (size_t)ml->place.shard, (float *)whole + wl->off[k],
                                     mine + ml->off[k], ml->len[k], 0);
        }
}

void dt_tp_gather(dt_comm *axis, const dt_graph *g, const dt_graph *local, int trainable, const float *mine,
                  float *whole)
{
        /* one tensor at a time: member 0 holds at most the group's shards of one tensor besides
         * the whole; a replicated tensor is member 0's own (the others hold the same) */
        size_t T = (size_t)axis->size, cap = 0;
        float *all = NULL;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *wl = &g->layers[i], *ml = &local->layers[i];
                for (int k = 0; k < wl->np; k++) {
                        if (!wl->ps[k].trainable != !trainable) continue;
                        size_t n = ml->len[k];
                        const float *src = mine + ml->off[k];
                        blocks b;
                        if (!split_of(&wl->ps[k], &ml->ps[k], T, &b)) {
                                if (axis->rank == 0) memcpy(whole + wl->off[k], src, n * sizeof *whole);
                                continue;
                        }
                        DT_ASSERT(n <= INT32_MAX);
                        if (axis->rank == 0 && n * T > cap) {
                                free(all);
                                cap = n * T;
                                all = dt_falloc(cap);
                        }
                        MPI_Request r;
                        MPI_Igather(src, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, axis->comm, &r);
                        dt_comm_wait(axis, 1, &r, "tensor-parallel state gather");
                        if (axis->rank != 0) continue;
                        for (size_t m = 0; m < T; m++)
                                move(&wl->ps[k], &ml->ps[k], T, m, whole + wl->off[k], all + m * n, n, 1);
                }
        }
        free(all);
}

int dt_tp_layer_colls(const dt_layer *l, long b, int dx, dt_tp_coll out[3])
{
        const dt_split_way *w = l->place.split == DT_SPLIT_NONE ? NULL : way_of(l, l->place.split);
        int n = 0;
        for (int k = 0; w && k < w->ncoll; k++) {
                const dt_split_coll *c = &w->coll[k];
                if ((c->when == DT_COLL_IF_GATHER && !l->place.gather) || (c->when == DT_COLL_IF_DX && !dx)) continue;
                dt_tp_coll *o = &out[n++];
                *o = (dt_tp_coll){ .gather = c->gather, .backward = c->backward, .repeat = 1 };
                switch (c->size) {
                case DT_COLL_OUTPUT: o->floats = (double)dt_shape_size(&l->out) * b; break;
                case DT_COLL_INPUT: o->floats = (double)dt_shape_size(&l->in) * b; break;
                case DT_COLL_STEP:      /* one step's (b, H), every step of the sequence */
                        o->floats = (double)l->out.d[l->out.n - 1] * b;
                        o->repeat = l->in.n == 2 ? l->in.d[0] : 1;
                        break;
                }
        }
        return n;
}

int dt_tp_counted(const dt_graph *g, const dt_graph *local, int i, int k)
{
        const dt_layer *wl = &g->layers[i], *ml = &local->layers[i];
        if (!ml->ps[k].trainable) return 0;
        int split = !dt_shape_eq(&wl->ps[k].shape, &ml->ps[k].shape);
        return split || ml->place.shard == 0;
}

double dt_tp_sumsq(const dt_graph *g, const dt_graph *local, const float *grads)
{
        double ss = 0;
        for (int i = 0; i < local->n; i++) {
                const dt_layer *ml = &local->layers[i];
                for (int k = 0; k < ml->np; k++)
                        if (dt_tp_counted(g, local, i, k))
                                ss += local->be->ops->sumsq(local->be, grads + ml->off[k], ml->len[k]);
        }
        return ss;
}

/* Layer i of the unsplit g drawn as one rank would draw it, into 'at' (its trainable tensors, then
 * its buffers, each at its offset among them), and cut into local's shard. w is g's layers, each
 * layer's tensors pointed into 'at' here. */
static void draw_layer(const dt_graph *g, dt_graph *w, dt_graph *local, int i, uint64_t seed, float *at)
{
        dt_layer *l = &w->layers[i];
        const dt_layer *ml = &local->layers[i];
        size_t used = 0;
        for (int k = 0; k < l->np; k++) {
                l->p[k] = at + used;
                used += l->len[k];
        }
        dt_graph_init_layer(w, i, seed);
        size_t t = (size_t)(ml->place.nshards > 0 ? ml->place.nshards : 1);
        for (int k = 0; k < l->np; k++)
                move(&g->layers[i].ps[k], &ml->ps[k], t, (size_t)ml->place.shard, l->p[k],
                     (ml->ps[k].trainable ? local->params : local->buffers) + ml->off[k], ml->len[k], 0);
        for (int k = 0; k < l->np; k++) l->p[k] = NULL;
}

/* g's layers for draw_layer: each on local's backend, no state, no tensors yet */
static dt_graph draw_graph(const dt_graph *g, dt_graph *local)
{
        dt_graph w = *g;
        w.layers = dt_calloc((size_t)g->n, sizeof *w.layers);
        memcpy(w.layers, g->layers, (size_t)g->n * sizeof *w.layers);
        w.params = w.buffers = NULL;
        w.be = local->be;
        for (int i = 0; i < w.n; i++) {
                dt_layer *l = &w.layers[i];
                l->be = local->be;
                l->priv = NULL;
                for (int k = 0; k < l->np; k++) l->p[k] = l->g[k] = NULL;
        }
        return w;
}

static size_t layer_floats(const dt_layer *l)
{
        size_t n = 0;
        for (int k = 0; k < l->np; k++) n += l->len[k];
        return n;
}

void dt_tp_init_layer(const dt_graph *g, dt_graph *local, int i, uint64_t seed)
{
        dt_graph w = draw_graph(g, local);
        size_t n = DT_MAX((size_t)1, layer_floats(&g->layers[i]));
        /* mapped for the layer alone and unmapped after: a 2048x2048 layer's 16 MiB freed to glibc
         * stays resident in its heap */
        float *at = dt_pages_alloc(n);
        draw_layer(g, &w, local, i, seed, at);
        dt_pages_free(at, n);
        free(w.layers);
}

void dt_tp_init_params(const dt_graph *g, dt_graph *local, uint64_t seed)
{
        /* the unsplit stage, initialised on the host as one rank would, then cut: a layer at a time,
         * in one buffer the size of the largest layer */
        dt_graph w = draw_graph(g, local);
        size_t most = 1;
        for (int i = 0; i < g->n; i++) most = DT_MAX(most, layer_floats(&g->layers[i]));
        float *at = dt_pages_alloc(most);
        for (int i = 0; i < g->n; i++) draw_layer(g, &w, local, i, seed, at);
        dt_pages_free(at, most);
        free(w.layers);
}

size_t dt_tp_init_floats(const dt_graph *g, int host)
{
        size_t most = 0, big = 0;
        for (int i = 0; i < g->n; i++) {
                most = DT_MAX(most, layer_floats(&g->layers[i]));
                for (int k = 0; k < g->layers[i].np && !host; k++) big = DT_MAX(big, g->layers[i].len[k]);
        }
        return most + big;
}
