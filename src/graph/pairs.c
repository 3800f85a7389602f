/* graph/pairs.c - which neighbouring layers run as one op (dt_graph.pair): a layer with a
 * forward_pair op and the next one, where that layer's output only passes between the two. The
 * walks (graph.c) then call the pair's ops, so the output need not go through memory. */
#include "graph/graph.h"

#include <stdlib.h>

int dt_graph_pairs_off = 0;

/* Layer i's output, tensor i + 1, is read by layer i + 1 alone, as its only input; no chunk ends
 * between them, nothing sends the tensor on, and neither layer splits its backward (the weight
 * pass would run apart from the pair). */
static int pairable(const dt_graph *g, int i)
{
        const dt_layer *l = &g->layers[i], *next = &g->layers[i + 1];
        if (!l->ops->forward_pair || !l->ops->backward_pair || !next->ops->forward || next->nin != 1 ||
            next->src[0] != i + 1)
                return 0;
        if (l->ops->backward_weight || next->ops->backward_weight || l->recompute || next->recompute) return 0;
        for (int k = 0; k < g->n; k++)
                for (int s = 0; s < g->layers[k].nin; s++)
                        if (k != i + 1 && g->layers[k].src[s] == i + 1) return 0;
        for (int k = 0; k < g->nout; k++)
                if (g->out_t[k] == i + 1) return 0;
        return 1;
}

void dt_graph_pair_plan(dt_graph *g)
{
        free(g->pair);
        g->pair = NULL;
        /* recomputation remakes single layers; chunks send tensors between their walks */
        if (dt_graph_pairs_off || g->rc || g->nchunks > 0 || g->n < 2) return;
        for (int i = 0; i + 1 < g->n; i++) {
                if (!pairable(g, i)) continue;
                if (!g->pair) g->pair = dt_calloc((size_t)g->n, 1);
                g->pair[i] = 1;
                i++;    /* a layer is in one pair at most */
        }
}
