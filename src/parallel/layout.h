/* parallel/layout.h - how a job's ranks hold the model, in one place: dt_layout is the plain
 * description (grid data x pipeline x tensor, the stage cut, micro-batches, schedule, each layer's
 * tensor split) that the planner searches and a cluster spec names; dt_grid is one layout placed on
 * the world, built once: this rank's place, the axes' communicators, the whole model's graph and
 * this rank's stage and shards, and the grid operations the trainer calls whatever the layout, each
 * trivial on a 1 x 1 x 1 grid. The one rank formula: world rank = (replica x stages + stage) x
 * tensor + shard (tensor fastest, so a tensor group is consecutive ranks, on one node). */
#ifndef DT_LAYOUT_H
#define DT_LAYOUT_H

#include "graph/graph.h"
#include "parallel/comm.h"
#include "parallel/pipeline.h"
#include "parallel/schedule.h"
#include "parallel/tensor.h"
#include "spec/cluster_spec.h"

/* ---- the plain layout ---- */

#define DT_LAYOUT_MAX_LAYERS 1024       /* layers a layout with tensor > 1 can give splits to */

enum { DT_AXIS_DATA, DT_AXIS_PIPE, DT_AXIS_TENSOR };

typedef struct dt_layout {
        int grid[3];            /* data, pipeline, tensor (DT_AXIS_*) */
        int first[DT_MAX_STAGES + 1];   /* virtual stage vs: layers [first[vs], first[vs + 1]); without
                                         * chunks virtual stage s is stage s */
        int chunks;             /* virtual stages per pipeline stage (partition.virtual_stages); 0 or 1:
                                 * one; stage s holds dt_schedule_vstage(sched, pipeline, chunks, s, c) */
        int micro;              /* pipeline micro-batches per replica slice, before the slice's own
                                 * limit (dt_layout_micro); 1 without stages */
        dt_schedule_kind sched;
        int shard;              /* ZeRO stage over the data axis (partition.shard): 0 with data 1 */
        int recompute;          /* 1: partition.recompute all; 0: as the cluster spec says */
        int nsplit;             /* split units (the planner's count; 0 from a cluster spec) */
        signed char split[DT_LAYOUT_MAX_LAYERS];        /* dt_split per layer (tensor > 1) */
        signed char gather[DT_LAYOUT_MAX_LAYERS];
} dt_layout;

/* A rank's place in the grid. */
typedef struct dt_grid_pos {
        int replica, stage, shard;
} dt_grid_pos;

/* The rank formula, both ways. */
int dt_layout_rank(const int grid[3], dt_grid_pos p);
dt_grid_pos dt_layout_pos(const int grid[3], int rank);
/* World ranks between neighbours on an axis (DT_AXIS_*): how far apart a group's members sit. */
int dt_layout_stride(const int grid[3], int axis);

/* The layout the cluster spec asks for on 'size' ranks of the model g (built, unallocated): the grid
 * (dt_cluster_grid), the cut (named, or balanced), the micro-batches and schedule, every stage's
 * tensor splits (named, or the default rule). Errors at the keys into d; returns 0 or -1. */
int dt_layout_from_spec(const dt_cluster_spec *cs, const dt_graph *g, int size, dt_layout *L, dt_diag *d);
/* Only the cut, then only the splits, of L's grid (the planner builds candidates from these). */
int dt_layout_cut(dt_layout *L, const dt_cluster_spec *cs, const dt_graph *g, dt_diag *d);
int dt_layout_splits(dt_layout *L, const dt_cluster_spec *cs, const dt_graph *g, dt_diag *d);
/* Micro-batches per step of L's pipeline for a global batch: L's count, at most the smallest replica
 * slice (1 without stages). */
int dt_layout_micro(const dt_layout *L, int batch);
/* The samples one forward of a replica's slice of `slice` samples runs at once, and so what one
 * activation slot holds: a pipeline's largest micro-batch (pipeline.c's cut of the slice into
 * dt_layout_micro(L, batch)), the whole slice without stages. */
int dt_layout_act_batch(const dt_layout *L, int batch, int slice);
/* Chunks per pipeline stage (1 without virtual stages), and the pieces of the cut: pipeline x that. */
int dt_layout_chunks(const dt_layout *L);
int dt_layout_pieces(const dt_layout *L);

/* ---- rank graphs, built here only ---- */

/* Stage s of the model full, unsplit, told what its place in L's pipeline asks (input gradient,
 * zb-h1's kept output gradients); with chunks its virtual stages in one graph (dt_graph_chunks).
 * Free with dt_graph_free. */
void dt_layout_stage_graph(const dt_layout *L, const dt_graph *full, int s, dt_graph *sg);
/* L's tensor plan for a stage graph sg. Free with dt_tp_plan_free. */
void dt_layout_tp_plan(const dt_layout *L, const dt_graph *sg, dt_tp_plan *pl);
/* Member tp->rank's shards of the stage graph sg (tp = { .size, .rank } alone for shapes; the
 * placements point at tp). Free with dt_graph_free. */
void dt_layout_shard_graph(const dt_layout *L, const dt_graph *sg, const dt_tp *tp, dt_graph *lg);

/* ---- the layout placed on the world ---- */

typedef struct dt_grid {
        dt_layout L;
        dt_grid_pos at;                 /* this rank's place */
        int rank;                       /* its world rank */
        int parts;                      /* this rank's graph is a part of the model (a stage, shards) */
        dt_comm *data;                  /* the data-parallel axis: the world, or data_axis */
        dt_comm data_axis, pipe_axis;   /* made when the model is in parts */
        dt_comm tp_axis;                /* tensor > 1: the ranks sharing this rank's layers */
        dt_stage_plan plan;             /* L's cut, as parallel/pipeline.h takes it */
        dt_graph full;                  /* parts: the whole model (shapes and offsets) */
        dt_graph sg;                    /* tensor > 1: this rank's stage unsplit */
        dt_tp tp;                       /* tensor > 1: tp_axis's collectives for the layers */
        int nslots;                     /* micro-batch slots this rank's graph is allocated with */
        int msg_bufs;                   /* the message buffers its pipeline walk holds at its peak */
} dt_grid;

/* Places L on world (world->size ranks; a NULL world: one process, L 1 x 1 x 1) and replaces g, the
 * whole model (built, unallocated), by this rank's graph: its stage, then its shards of the stage;
 * the model is kept in full. batch: the global batch (the pipeline's slots). Collective. */
void dt_grid_make(dt_grid *gr, const dt_layout *L, dt_comm *world, dt_graph *g, int batch);
void dt_grid_free(dt_grid *gr);

/* Whether this rank's graph is a part of the model (a stage, shards): then the whole model exists
 * only gathered (checkpoints, final weights) and a whole read from a file is cut into the parts. */
int dt_grid_parts(const dt_grid *gr);
/* The whole model: full, or g when this rank holds it all. */
const dt_graph *dt_grid_model(const dt_grid *gr, const dt_graph *g);
/* This rank's stage unsplit: sg under tensor parallelism, else g. */
const dt_graph *dt_grid_stage(const dt_grid *gr, const dt_graph *g);
/* This rank's parameters and buffers (g allocated) as one rank initialises the whole model's from
 * seed, cut to its part, so every layout starts where one rank does. */
void dt_grid_init_params(const dt_grid *gr, dt_graph *g, uint64_t seed);
/* Its layer i alone (the same values) */
void dt_grid_init_layer(const dt_grid *gr, dt_graph *g, int i, uint64_t seed);
/* Which of the job's replicas x tensor pipelines this rank runs a stage of (its ranks are placed
 * together, parallel/place.h). */
int dt_grid_pipeline(const dt_grid *gr);
/* Whether there is a pipeline to walk (more than one stage). */
int dt_grid_pipelined(const dt_grid *gr);
/* Data-parallel replicas: the data axis's size (1 for one process without a world). */
int dt_grid_replicas(const dt_grid *gr);
/* This rank's slice [lo, hi) of a global batch of B: its replica's share (every member of a tensor
 * group and every stage of a pipeline has the same one). */
void dt_grid_slice(const dt_grid *gr, int B, int *lo, int *hi);
/* What this rank's part of the step does with the data: feed the inputs (the first stage), score
 * the labels (the last stage), count the loss in the run's sums (one member of a tensor group). */
int dt_grid_feeds(const dt_grid *gr);
int dt_grid_scores(const dt_grid *gr);
int dt_grid_counts(const dt_grid *gr);
/* The parts of each sample this rank's loader reads (data/data.h's DT_LOAD_* flags). */
int dt_grid_load_parts(const dt_grid *gr);

/* The part of the whole model's squared gradient norm this rank knows, summed over its tensor group
 * (tensor shards once each, replicated tensors once per group): every stage's still to add. */
double dt_grid_sumsq(dt_grid *gr, const dt_graph *g, const float *grads);
/* x summed over the pipeline's stages (a no-op without stages); where finished stages wait. */
void dt_grid_sum_stages(dt_grid *gr, double *x, const char *what);
/* The same started, so that no stage waits for the others: x is left alone until _wait completes
 * *r (within the deadline: a lost stage ends the job, parallel/comm.h). Without stages *r is
 * MPI_REQUEST_NULL and the wait returns at once. Bitwise the blocking sum. */
void dt_grid_sum_stages_start(dt_grid *gr, double *x, MPI_Request *r);
void dt_grid_sum_stages_wait(dt_grid *gr, MPI_Request *r, const char *what);

/* The whole model's flat buffers from every rank's part: k 0 parameters, 1 buffers, 2.. the K - 2
 * optimizer moments; mine[k] this rank's (g's layout), all[k] the whole (the model's layout, world
 * rank 0's; NULL elsewhere). Each tensor group puts its stage together on its member 0, then the
 * stages go to stage 0; replica 0 speaks for all. Collective over replica 0's ranks (the others
 * return at once). Returns 1 on world rank 0, which then holds the whole. */
int dt_grid_gather(dt_grid *gr, const dt_graph *g, int K, float *const mine[4], float *const all[4]);
/* The reverse: this rank's part of the whole all[k] (every rank holds it) into mine[k]. */
void dt_grid_take(const dt_grid *gr, const dt_graph *g, int K, float *const all[4], float *const mine[4]);

#endif
