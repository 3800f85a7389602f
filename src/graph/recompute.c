/* graph/recompute.c - activation recomputation (partition.recompute): which layers drop their outputs,
 * the plan of the one region where dropped outputs and activation gradients live only while needed,
 * the memory that plan takes, and the walks' part: the region's places per walk, and a segment
 * remade (forward again, running statistics put back) just before the backward that reads it. */
#include "graph/recompute.h"

#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/trace.h"

/* Region places are 64-byte aligned, as every buffer of its own is (dt_falloc), so a kernel sees the
 * same alignment either way. */
#define ALIGN_FLOATS 16

/* ---- which layers ---- */

static size_t out_size(const dt_graph *g, int i)
{
        return dt_shape_size(&g->layers[i].out);
}

/* all (Chen et al. 2016, on a graph): in each window of k = ceil(sqrt(n)) layers the checkpoint is the
 * smallest output among the window's articulation points, the layers whose output is the only tensor
 * crossing to the next layer (a chain's every layer, a residual network's block outputs); the rest
 * are recomputed. A segment then starts from its one checkpoint and no shortcut reaches into it
 * from an earlier segment, which would keep that segment remade too (resnet at batch 256: 206 MiB
 * of activations and their gradients this way, 378 MiB with any layer as a checkpoint, 681 kept). A
 * window without an articulation point keeps nothing. */
static void mark_all(dt_graph *g)
{
        int n = g->n, k = (int)ceil(sqrt((double)n)), reach = 0;
        char *art = dt_calloc((size_t)n + 1, 1);
        /* reach: the last layer reading tensor i (layer i's input, or the graph's) or an earlier one */
        for (int i = 0; i < n; i++) {
                for (int j = i; j < n; j++)
                        for (int q = 0; q < g->layers[j].nin; q++)
                                if (g->layers[j].src[q] == i && j > reach) reach = j;
                art[i] = reach <= i;
        }
        for (int w = 0; w < n; w += k) {
                int keep = -1, end = w + k < n ? w + k : n;
                for (int i = w; i < end; i++) {
                        g->layers[i].recompute = 1;
                        if (art[i] && (keep < 0 || out_size(g, i) <= out_size(g, keep))) keep = i;
                }
                if (keep >= 0) g->layers[keep].recompute = 0;
        }
        free(art);
}

void dt_graph_set_recompute(dt_graph *g, const dt_recompute_rules *r)
{
        for (int i = 0; i < g->n; i++) {
                dt_layer *l = &g->layers[i];
                l->recompute = 0;
                if (r->mode == DT_RECOMPUTE_AUTO) l->recompute = l->ops->traffic != NULL;
                for (int k = 0; r->mode == DT_RECOMPUTE_LIST && k < r->n; k++)
                        if (!fnmatch(r->pattern[k], l->name, 0)) l->recompute = 1;
        }
        if (r->mode == DT_RECOMPUTE_ALL) mark_all(g);
}

static int is_out(const dt_graph *g, int t)
{
        for (int k = 0; k < g->nout; k++)
                if (g->out_t[k] == t) return 1;
        return 0;
}

int dt_graph_recomputed(const dt_graph *g, int i)
{
        return g->layers[i].recompute && !is_out(g, i + 1);
}

/* ---- the plan ---- */

typedef struct item {
        int lo, hi;             /* layers during which it holds its value */
        size_t size, off;       /* floats */
        size_t *out;            /* where its offset goes */
} item;

static int by_size(const void *a, const void *b)
{
        const item *x = *(item *const *)a, *y = *(item *const *)b;
        if (x->size != y->size) return x->size < y->size ? 1 : -1;
        return x->lo != y->lo ? x->lo - y->lo : x->hi - y->hi;
}

/* Largest first, each at the lowest offset clear of every placed item live at the same time (first
 * fit over an interval graph); returns the region's floats. */
static size_t place(item *it, int n)
{
        item **o = dt_malloc(((size_t)n + 1) * sizeof *o);
        for (int i = 0; i < n; i++) o[i] = &it[i];
        qsort(o, (size_t)n, sizeof *o, by_size);
        size_t top = 0;
        for (int i = 0; i < n; i++) {
                item *x = o[i];
                x->off = 0;
                for (int moved = 1; moved;) {
                        moved = 0;
                        for (int j = 0; j < i; j++) {
                                const item *y = o[j];
                                if (y->hi < x->lo || x->hi < y->lo) continue;
                                if (y->off + y->size <= x->off || x->off + x->size <= y->off) continue;
                                x->off = y->off + y->size;
                                moved = 1;
                        }
                }
                *x->out = x->off;
                if (x->off + x->size > top) top = x->off + x->size;
        }
        free(o);
        return top;
}

static size_t floats_of(const dt_graph *g, int t, int batch)
{
        size_t n = (size_t)batch * dt_shape_size(dt_graph_tensor_shape(g, t));
        return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

/* Segments and when each is remade: before the first backward that reads one of its tensors (its
 * last layer's, or a later reader's), and no later than a later segment that reads it while being
 * remade (so the later segment's inputs exist then). */
static void segments(const dt_graph *g, struct dt_rc *p, const int *maxr, int *seg_of)
{
        int n = g->n;
        p->first = dt_malloc(((size_t)n + 1) * sizeof *p->first);
        p->last = dt_malloc(((size_t)n + 1) * sizeof *p->last);
        p->when = dt_malloc(((size_t)n + 1) * sizeof *p->when);
        for (int i = 0; i < n; i++) {
                seg_of[i] = -1;
                if (!p->drop[i + 1]) continue;
                if (i == 0 || !p->drop[i]) p->first[p->nseg++] = i;
                seg_of[i] = p->nseg - 1;
                p->last[p->nseg - 1] = i;
        }
        for (int s = p->nseg - 1; s >= 0; s--) {
                int w = p->last[s];
                for (int i = p->first[s]; i <= p->last[s]; i++)
                        if (maxr[i + 1] > w) w = maxr[i + 1];
                for (int j = p->last[s] + 1; j < n; j++)
                        for (int k = 0; seg_of[j] >= 0 && k < g->layers[j].nin; k++) {
                                int t = g->layers[j].src[k];
                                if (t > p->first[s] && t <= p->last[s] + 1 && p->when[seg_of[j]] > w) w = p->when[seg_of[j]];
                        }
                p->when[s] = w;
        }
}

/* the largest segment's buffer floats (what forward may update and recomputing must put back) */
static size_t save_floats(const dt_graph *g, const struct dt_rc *p)
{
        size_t most = 0;
        for (int s = 0; s < p->nseg; s++) {
                size_t n = 0;
                for (int i = p->first[s]; i <= p->last[s]; i++)
                        for (int k = 0; k < g->layers[i].np; k++) n += g->layers[i].ps[k].trainable ? 0 : g->layers[i].len[k];
                if (n > most) most = n;
        }
        return most;
}

static unsigned reads_of(const dt_graph *g, int i)
{
        const dt_layer *l = &g->layers[i];
        return l->ops->bwd_reads ? l->ops->bwd_reads(l, g->be) : DT_BWD_X | DT_BWD_Y;
}

/* Backward's times: 2i + 1 is the remaking just before layer i's backward, 2i that backward, so a
 * tensor that only the remaking writes and no backward reads (a batch norm's output before a max
 * pool, on the host) is dead again before the gradients that backward writes.
 *
 * Remade act[t] lives from its segment's remaking to the last time something reads it: its
 * producer's backward when that reads y, a reader's when that reads x, a later segment's remaking
 * that reads it. */
static int act_low(const dt_graph *g, const struct dt_rc *p, const int *seg_of, int t)
{
        int prod = t - 1, lo = 2 * p->when[seg_of[prod]] + 1;
        if (reads_of(g, prod) & DT_BWD_Y) lo = 2 * prod;
        for (int j = t; j < g->n; j++)
                for (int k = 0; k < g->layers[j].nin; k++) {
                        if (g->layers[j].src[k] != t) continue;
                        if ((reads_of(g, j) & DT_BWD_X) && 2 * j < lo) lo = 2 * j;
                        if (seg_of[j] >= 0 && seg_of[j] != seg_of[prod] && 2 * p->when[seg_of[j]] + 1 < lo)
                                lo = 2 * p->when[seg_of[j]] + 1;
                }
        return lo;
}

/* rep[t]: the tensor whose gradient place dact[t] shares. A layer that takes dx == dy and is its
 * input's only reader writes its input's gradient over its output's, whose last reader it is:
 * one place from the output gradient's first writer to the input's producer (batch norm, dropout,
 * flatten). Walked from the last layer, so a chain of them shares one place. */
static void inplace_reps(const dt_graph *g, const struct dt_rc *p, int batch, int *rep)
{
        int nt = p->nt, n = g->n;
        int *nread = dt_calloc((size_t)nt, sizeof *nread);
        for (int t = 0; t < nt; t++) rep[t] = t;
        for (int i = 0; i < n; i++)
                for (int k = 0; k < g->layers[i].nin; k++) nread[g->layers[i].src[k]]++;
        for (int i = n - 1; i >= 0; i--) {
                const dt_layer *l = &g->layers[i];
                int t = l->src[0];
                if (l->nin != 1 || !(reads_of(g, i) & DT_BWD_INPLACE) || t < 1 || t > n || nread[t] != 1 ||
                    !p->gin[t] || !p->gin[i + 1] || floats_of(g, t, batch) != floats_of(g, i + 1, batch))
                        continue;
                rep[t] = rep[i + 1];
        }
        free(nread);
}

/* Backward's items into bi: the remade tensors and the activation gradients; returns their count. */
static int bwd_items(const dt_graph *g, struct dt_rc *p, int batch, const int *maxr, const int *seg_of, item *bi)
{
        int n = g->n, nt = p->nt, nb = 0;
        int *rep = dt_malloc((size_t)nt * sizeof *rep), *lo = dt_malloc((size_t)nt * 2 * sizeof *lo), *hi = lo + nt;
        for (int t = 1; t <= n; t++) {
                if (p->drop[t])
                        bi[nb++] = (item){ act_low(g, p, seg_of, t), 2 * p->when[seg_of[t - 1]] + 1,
                                           floats_of(g, t, batch), 0, &p->bwd[t] };
                /* the graph's outputs get their gradients from outside backward and keep their own */
                p->gin[t] = !is_out(g, t) && maxr[t] >= 0;
        }
        /* a gradient: from its first writer (the last reader) to its producer's backward */
        inplace_reps(g, p, batch, rep);
        for (int t = 1; t <= n; t++) lo[t] = INT_MAX, hi[t] = -1;
        for (int t = 1; t <= n; t++) {
                if (!p->gin[t]) continue;
                int r = rep[t];
                if (2 * (t - 1) < lo[r]) lo[r] = 2 * (t - 1);
                if (2 * maxr[t] > hi[r]) hi[r] = 2 * maxr[t];
        }
        for (int t = 1; t <= n; t++)
                if (p->gin[t] && rep[t] == t) bi[nb++] = (item){ lo[t], hi[t], floats_of(g, t, batch), 0, &p->grad[t] };
        p->rep = rep;
        free(lo);
        return nb;
}

int dt_rc_plan(const dt_graph *g, int batch, struct dt_rc *p)
{
        memset(p, 0, sizeof *p);
        int n = g->n, nt = dt_graph_ntensors(g), any = 0;
        p->nt = nt;
        p->drop = dt_calloc((size_t)nt, 1);
        for (int i = 0; i < n; i++) any |= p->drop[i + 1] = (char)dt_graph_recomputed(g, i);
        if (!any) {
                dt_rc_free_plan(p);
                return 0;
        }
        DT_ASSERT(!g->keep_dact);       /* zb-h1 is refused at the key */
        int *maxr = dt_malloc((size_t)nt * sizeof *maxr), *seg_of = dt_malloc(((size_t)n + 1) * sizeof *seg_of);
        for (int t = 0; t < nt; t++) maxr[t] = -1;
        for (int i = 0; i < n; i++)
                for (int k = 0; k < g->layers[i].nin; k++) maxr[g->layers[i].src[k]] = i;
        segments(g, p, maxr, seg_of);
        p->gin = dt_calloc((size_t)nt, 1);
        p->fwd = dt_calloc((size_t)nt, sizeof *p->fwd);
        p->bwd = dt_calloc((size_t)nt, sizeof *p->bwd);
        p->grad = dt_calloc((size_t)nt, sizeof *p->grad);
        item *fi = dt_malloc(((size_t)nt + 1) * sizeof *fi), *bi = dt_malloc((2 * (size_t)nt + 1) * sizeof *bi);
        int nf = 0, nb = bwd_items(g, p, batch, maxr, seg_of, bi);
        /* forward, in layer times: from its producer to its last reader */
        for (int t = 1; t <= n; t++)
                if (p->drop[t])
                        fi[nf++] = (item){ t - 1, maxr[t] > t - 1 ? maxr[t] : t - 1, floats_of(g, t, batch), 0, &p->fwd[t] };
        size_t f = place(fi, nf), b = place(bi, nb);
        for (int t = 1; t <= n; t++)
                if (p->gin[t]) p->grad[t] = p->grad[p->rep[t]];
        p->floats = f > b ? f : b;
        p->save = save_floats(g, p);
        free(fi);
        free(bi);
        free(maxr);
        free(seg_of);
        return 1;
}

void dt_rc_free_plan(struct dt_rc *p)
{
        free(p->drop);
        free(p->gin);
        free(p->fwd);
        free(p->bwd);
        free(p->grad);
        free(p->first);
        free(p->last);
        free(p->when);
        free(p->rep);
        free(p->secs);
        memset(p, 0, sizeof *p);
}

/* ---- memory ---- */

size_t dt_graph_layer_kept_bytes(const dt_graph *g, int i, int batch, int recompute)
{
        const dt_layer *l = &g->layers[i];
        size_t per = dt_shape_size(&l->out) + (l->ops->scratch ? l->ops->scratch(l->cfg, &l->in, &l->out) : 0), n;
        if (recompute) return 0;
        return dt_mul_ok(per, (size_t)batch, &n) && dt_mul_ok(n, sizeof(float), &n) ? n : SIZE_MAX;
}

/* *acc += a * b * c, with overflow into *bad */
static void add3(size_t *acc, size_t a, size_t b, size_t c, int *bad)
{
        size_t x;
        if (!dt_mul_ok(a, b, &x) || !dt_mul_ok(x, c, &x) || !dt_add_ok(*acc, x, acc)) *bad = 1;
}

size_t dt_rc_floats(const dt_graph *g, int batch, int nslots)
{
        struct dt_rc p;
        if (!dt_rc_plan(g, batch, &p)) return SIZE_MAX;
        int S = nslots > 0 ? nslots : 1;
        size_t B = (size_t)batch, in = dt_shape_size(&g->input), sum = 0;
        int bad = 0;
        /* the inputs per slot (with chunks, per slot of the chunk reading them), their gradients
         * once; the gradient-summing scratch */
        add3(&sum, in, B, (size_t)dt_graph_tensor_slots(g, 0, S), &bad);
        for (int k = 0; k < g->nx; k++) {
                in += dt_shape_size(&g->x_shape[k]);
                add3(&sum, dt_shape_size(&g->x_shape[k]), B, (size_t)dt_graph_tensor_slots(g, g->n + 1 + k, S), &bad);
        }
        add3(&sum, in, B, g->input_grad ? 1 : 0, &bad);
        add3(&sum, g->gsum_per, B, 1, &bad);
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                size_t sc = l->ops->scratch ? l->ops->scratch(l->cfg, &l->in, &l->out) : 0;
                /* a recomputed layer's saved state is one copy that every slot's backward remakes */
                if (p.drop[i + 1]) add3(&sum, sc, B, 1, &bad);
                else add3(&sum, dt_shape_size(&l->out) + sc, B, (size_t)dt_graph_tensor_slots(g, i + 1, S), &bad);
                if (!p.gin[i + 1]) add3(&sum, dt_shape_size(&l->out), B, 1, &bad);
        }
        add3(&sum, p.floats + p.save, 1, 1, &bad);
        dt_rc_free_plan(&p);
        return bad ? SIZE_MAX : sum;
}

size_t dt_graph_recompute_region_bytes(const dt_graph *g, int batch)
{
        struct dt_rc p;
        if (!dt_rc_plan(g, batch, &p)) return 0;
        size_t n = p.floats + p.save;
        dt_rc_free_plan(&p);
        return dt_mul_ok(n, sizeof(float), &n) ? n : SIZE_MAX;
}

/* ---- allocation ---- */

int dt_rc_alloc(dt_graph *g, int max_batch)
{
        struct dt_rc *p = dt_calloc(1, sizeof *p);
        if (!dt_rc_plan(g, max_batch, p)) {
                free(p);
                return 0;
        }
        const dt_backend_ops *o = g->be->ops;
        g->rc = p;
        p->secs = dt_calloc((size_t)g->n, sizeof *p->secs);
        p->region = o->alloc(g->be, p->floats);
        p->saved = p->save ? o->alloc(g->be, p->save) : NULL;
        return p->region && (p->saved || !p->save) ? 0 : -1;
}

void dt_rc_free(dt_graph *g)
{
        struct dt_rc *p = g->rc;
        if (!p) return;
        if (p->region) g->be->ops->free(g->be, p->region);
        if (p->saved) g->be->ops->free(g->be, p->saved);
        dt_rc_free_plan(p);
        free(p);
        g->rc = NULL;
}

float *dt_rc_act(const dt_graph *g, int t)
{
        return g->rc && t > 0 && t < g->rc->nt && g->rc->drop[t] ? g->rc->region + g->rc->fwd[t] : NULL;
}

float *dt_rc_dact(const dt_graph *g, int t)
{
        return g->rc && t > 0 && t < g->rc->nt && g->rc->gin[t] ? g->rc->region + g->rc->grad[t] : NULL;
}

/* ---- the walks ---- */

void dt_graph_walk_begin(dt_graph *g, int backward)
{
        struct dt_rc *p = g->rc;
        for (int t = 1; p && t < p->nt; t++)
                if (p->drop[t]) g->act[t] = p->region + (backward ? p->bwd[t] : p->fwd[t]);
}

/* The buffers (running statistics) of segment s's layers into or out of the saved copy. */
static void swap_buffers(dt_graph *g, int s, int back)
{
        struct dt_rc *p = g->rc;
        size_t at = 0;
        for (int i = p->first[s]; i <= p->last[s]; i++) {
                dt_layer *l = &g->layers[i];
                for (int k = 0; k < l->np; k++) {
                        if (l->ps[k].trainable) continue;
                        if (back) g->be->ops->copy(g->be, l->p[k], p->saved + at, l->len[k]);
                        else g->be->ops->copy(g->be, p->saved + at, l->p[k], l->len[k]);
                        at += l->len[k];
                }
        }
}

void dt_graph_recompute_for(dt_graph *g, int i, const dt_fwd_ctx *c, int B)
{
        struct dt_rc *p = g->rc;
        for (int s = 0; p && s < p->nseg; s++) {
                if (p->when[s] != i) continue;
                if (c->training) swap_buffers(g, s, 0);
                for (int j = p->first[s]; j <= p->last[s]; j++) {
                        double t0 = dt_now(), tt = dt_trace_t();
                        dt_graph_layer_forward(g, j, c, B);
                        dt_trace_end("recompute", g->layers[j].name, NULL, tt);
                        p->secs[j] += dt_now() - t0;
                }
                if (c->training) swap_buffers(g, s, 1);
        }
}

double dt_graph_recompute_seconds(dt_graph *g, int i, int reset)
{
        if (!g->rc) return 0;
        double s = g->rc->secs[i];
        if (reset) g->rc->secs[i] = 0;
        return s;
}
