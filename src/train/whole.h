/* train/whole.h - the whole model as one host copy, for a run whose ranks each hold one pipeline
 * stage: checkpoints and model.safetensors are written from it (every tensor whole, with its
 * PyTorch name) and a resume reads into it and keeps its stage's slice, so any layout resumes any
 * other. */
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
