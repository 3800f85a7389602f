/* train/whole.h - host buffers for the whole model (parameters, buffers, moments, laid out as the
 * full graph's), for a run whose ranks each hold a stage or a shard: train/save.c gathers every
 * rank's part into them (parallel/layout.h's dt_grid_gather) to write checkpoints and
 * model.safetensors (every tensor whole, with its PyTorch name), and a resume reads into them and
 * each rank cuts its own part (dt_grid_take), so any layout resumes any other. This file only
 * allocates them. */
#ifndef DT_WHOLE_H
#define DT_WHOLE_H

#include "graph/graph.h"
#include "train/ckpt.h"

typedef struct dt_whole {
        dt_graph g;             /* the model's layers (shared with full, never dt_graph_free'd),
                                 * params and buffers pointing at the host copies */
        dt_moments mo;
        float *buf[4];          /* parameters, buffers, the moments: as parallel/pipeline.h's gather wants */
} dt_whole;

/* Host buffers laid out as full's flat buffers, with nmo optimizer moments. */
void dt_whole_alloc(dt_whole *w, const dt_graph *full, int nmo);
void dt_whole_free(dt_whole *w);

#endif
