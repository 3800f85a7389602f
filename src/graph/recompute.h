/* graph/recompute.h - internal to graph/: the recomputation plan a graph with recomputed layers
 * allocates (recompute.c), and the calls graph.c's allocation and walks make into it. */
#ifndef DT_RECOMPUTE_H
#define DT_RECOMPUTE_H

#include "graph/graph.h"

/* What backward remakes, and where the tensors live that are kept only while needed: one region,
 * shared by the slots and by the forward and backward walks (a walk runs to its end before the next
 * begins), in which each such tensor has an offset per walk. Times are layer indices: a tensor's
 * interval [lo, hi] is the layers whose forward (or backward) run while it must hold its value. */
struct dt_rc {
        int nt;
        char *drop;             /* [nt] act[t]: its producer is recomputed, it lives in the region only */
        char *gin;              /* [nt] dact[t] lives in the region (an internal tensor that some layer reads) */
        size_t *fwd, *bwd, *grad;       /* [nt] floats into the region: act[t] in forward, in backward; dact[t] */
        int *rep;               /* [nt] the tensor whose gradient place dact[t] shares (an in-place backward) */
        size_t floats;          /* the region, for the batch planned */
        int nseg;               /* segments: runs of recomputed layers [first, last], remade together */
        int *first, *last, *when;       /* ... just before layer when's backward */
        size_t save;            /* floats of the largest segment's buffers (running statistics) */
        float *region, *saved;  /* allocated (dt_rc_alloc) */
        double *secs;           /* [n] seconds spent recomputing each layer */
};

/* The plan for g at this batch into p; 0 when g recomputes nothing (p left empty), 1 otherwise.
 * Allocates host arrays only. */
int dt_rc_plan(const dt_graph *g, int batch, struct dt_rc *p);
void dt_rc_free_plan(struct dt_rc *p);
/* Activation-side floats of g with its recompute set (what dt_graph_memory_slots counts beside the
 * parameters and moments); SIZE_MAX on overflow. */
size_t dt_rc_floats(const dt_graph *g, int batch, int nslots);
/* At allocation: g->rc planned and its region allocated on g->be, or left NULL (nothing to
 * recompute). -1 when an allocation fails. */
int dt_rc_alloc(dt_graph *g, int max_batch);
void dt_rc_free(dt_graph *g);
/* A region pointer for act[t] (forward's) or dact[t], or NULL: t keeps its own buffer. */
float *dt_rc_act(const dt_graph *g, int t);
float *dt_rc_dact(const dt_graph *g, int t);

#endif
