/* graph/chunks.c - a rank's graph of several chunks of the model (virtual pipeline stages): each
 * chunk a stage's range (dt_graph_range), their layers one after another in one graph with one set
 * of flat buffers, every chunk reading only its own tensors, so a pipeline walks each on its own. */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>
#include "util/common.h"

/* Where chunk c's tensor t (its range graph's id) lives in the merged graph: act[0] stays chunk 0's
 * input; the other chunks' first inputs become extra inputs after their own extras (so a chunk's
 * inputs run in ascending model id, as the sender's outputs do). */
static int map_tensor(const dt_graph *rc, int c, int t, int n, int lo, int xat)
{
        if (t == 0) return c == 0 ? 0 : n + 1 + xat + rc->nx;
        if (t <= rc->n) return lo + t;
        return n + 1 + xat + (t - rc->n - 1);
}

void dt_graph_chunks(const dt_graph *full, int nchunks, const int *first, const int *last, dt_graph *out)
{
        DT_ASSERT(nchunks >= 1);
        dt_graph *r = dt_calloc((size_t)nchunks, sizeof *r);
        int n = 0, nx = 0, no = 0;
        for (int c = 0; c < nchunks; c++) {
                DT_ASSERT(c == 0 || first[c] >= last[c - 1]);
                dt_graph_range(full, first[c], last[c], &r[c]);
                n += r[c].n;
                nx += r[c].nx + (c > 0);
                no += r[c].nout;
        }
        memset(out, 0, sizeof *out);
        out->spec = full->spec;
        out->first = first[0];
        out->n = n;
        out->input = r[0].input;
        out->param_base = r[0].param_base;
        out->buffer_base = r[0].buffer_base;
        out->layers = dt_calloc((size_t)n, sizeof *out->layers);
        out->x_id = dt_malloc(((size_t)nx + 1) * sizeof *out->x_id);
        out->x_shape = dt_malloc(((size_t)nx + 1) * sizeof *out->x_shape);
        out->out_t = dt_malloc(((size_t)no + 1) * sizeof *out->out_t);
        out->nchunks = nchunks;
        out->chunk = dt_calloc((size_t)nchunks, sizeof *out->chunk);
        int lo = 0;
        for (int c = 0; c < nchunks; c++) {
                const dt_graph *rc = &r[c];
                dt_graph_chunk *ch = &out->chunk[c];
                int xat = out->nx;
                ch->lo = lo;
                ch->hi = lo + rc->n;
                ch->param_base = rc->param_base, ch->buffer_base = rc->buffer_base;
                ch->nparams = rc->nparams, ch->nbuffers = rc->nbuffers;
                ch->param_at = out->nparams, ch->buffer_at = out->nbuffers;
                for (int k = 0; k < rc->nx; k++) {
                        out->x_id[out->nx] = rc->x_id[k];
                        out->x_shape[out->nx++] = rc->x_shape[k];
                }
                if (c > 0) {
                        out->x_id[out->nx] = first[c];
                        out->x_shape[out->nx++] = rc->input;
                }
                ch->nin = rc->nx + 1;
                ch->in_t = dt_malloc((size_t)ch->nin * sizeof *ch->in_t);
                for (int k = 0; k < rc->nx; k++) ch->in_t[k] = map_tensor(rc, c, rc->n + 1 + k, n, lo, xat);
                ch->in_t[rc->nx] = map_tensor(rc, c, 0, n, lo, xat);
                ch->nout = rc->nout;
                ch->out_t = dt_malloc((size_t)(rc->nout ? rc->nout : 1) * sizeof *ch->out_t);
                for (int k = 0; k < rc->nout; k++) {
                        ch->out_t[k] = map_tensor(rc, c, rc->out_t[k], n, lo, xat);
                        out->out_t[out->nout++] = ch->out_t[k];
                }
                for (int i = 0; i < rc->n; i++) {
                        dt_layer *l = &out->layers[lo + i];
                        *l = rc->layers[i];
                        for (int k = 0; k < l->nin; k++) l->src[k] = map_tensor(rc, c, l->src[k], n, lo, xat);
                        for (int k = 0; k < l->np; k++) l->off[k] += l->ps[k].trainable ? ch->param_at : ch->buffer_at;
                }
                out->nparams += rc->nparams;
                out->nbuffers += rc->nbuffers;
                out->flops += rc->flops;
                lo += rc->n;
        }
        for (int c = 0; c < nchunks; c++) dt_graph_free(&r[c]);
        free(r);
        dt_graph_link(out);
}

void dt_graph_copy_chunks(const dt_graph *src, dt_graph *dst)
{
        dst->nchunks = src->nchunks;
        dst->x_grad = src->x_grad;
        dst->chunk = NULL;
        if (!src->nchunks) return;
        DT_ASSERT(dst->n == src->n);
        dst->chunk = dt_calloc((size_t)src->nchunks, sizeof *dst->chunk);
        for (int c = 0; c < src->nchunks; c++) {
                const dt_graph_chunk *a = &src->chunk[c];
                dt_graph_chunk *b = &dst->chunk[c];
                *b = *a;
                b->in_t = dt_malloc((size_t)a->nin * sizeof *b->in_t);
                memcpy(b->in_t, a->in_t, (size_t)a->nin * sizeof *b->in_t);
                b->out_t = dt_malloc((size_t)(a->nout ? a->nout : 1) * sizeof *b->out_t);
                memcpy(b->out_t, a->out_t, (size_t)a->nout * sizeof *b->out_t);
                /* the shard's own sizes: its layers' parameters in the chunk's range */
                b->nparams = b->nbuffers = 0;
                b->param_at = b->buffer_at = SIZE_MAX;
                for (int i = a->lo; i < a->hi; i++) {
                        const dt_layer *l = &dst->layers[i];
                        for (int k = 0; k < l->np; k++) {
                                size_t *at = l->ps[k].trainable ? &b->param_at : &b->buffer_at;
                                if (*at == SIZE_MAX) *at = l->off[k];
                                *(l->ps[k].trainable ? &b->nparams : &b->nbuffers) += l->len[k];
                        }
                }
        }
        /* a chunk without parameters sits where the next one's begin */
        size_t pa = dst->nparams, ba = dst->nbuffers;
        for (int c = src->nchunks - 1; c >= 0; c--) {
                dt_graph_chunk *b = &dst->chunk[c];
                if (b->param_at == SIZE_MAX) b->param_at = pa;
                if (b->buffer_at == SIZE_MAX) b->buffer_at = ba;
                pa = b->param_at, ba = b->buffer_at;
        }
}

int dt_graph_tensor_slots(const dt_graph *g, int t, int S)
{
        if (g->nchunks <= 1) return S;
        int c = 0;
        if (t > g->n) {         /* an extra input: the chunk that receives it */
                for (int k = 0; k < g->nchunks; k++)
                        for (int j = 0; j < g->chunk[k].nin; j++)
                                if (g->chunk[k].in_t[j] == t) c = k;
        } else if (t > 0) {     /* layer t - 1's output */
                while (c + 1 < g->nchunks && t - 1 >= g->chunk[c + 1].lo) c++;
        }
        int k = g->chunk[c].nslots;
        return k > 0 && k < S ? k : S;
}

void dt_graph_use_chunk(dt_graph *g, int c)
{
        DT_ASSERT(c < g->nchunks);
        g->lo = c < 0 ? 0 : g->chunk[c].lo;
        g->hi = c < 0 ? 0 : g->chunk[c].hi;
}
