/* plan/planner.h - the planner's state, shared by plan/predict.c and plan/search.c. */
#ifndef DT_PLANNER_H
#define DT_PLANNER_H

#include "plan/plan.h"
#include "plan/profile.h"

struct dt_planner {
        const dt_graph *g;      /* the whole model */
        dt_cluster_spec cs;     /* bucket size, network; splits cleared (the planner picks them) */
        int batch, maxb, nmo;   /* global batch, the largest batch allocated, optimizer moments */
        double mem_fixed;       /* plan/mem.h's fixed part per rank (measured by the caller, else modelled) */
        double mem_data;        /* the data's bytes per rank (0: not known) */
        double mem_data_ps;     /* ... and per sample of a replica's slice */
        int mem_onednn;         /* convolutions take oneDNN */
        signed char *rc[2];     /* (g->n) the layers recomputed on the whole model: [0] by the cluster
                                 * spec's rules, [1] by partition.recompute all */
        int shard_set, rc_set;  /* the cluster spec names shard, recompute: the search keeps them */
        int data_pin;           /* the search's data degree: 0 any, -1 the rank count (data alone), else it */
        dt_prof pf;
};

/* Stage s of L unsplit into sg and, when the tensor degree is above 1, shard 0's graph into lg
 * (returns 1; both to dt_graph_free). */
int dt_plan_stage_graphs(const dt_planner *p, const dt_layout *L, int s, dt_graph *sg, dt_graph *lg);

/* Adds a sample to the costs of every layer of L's stages at their micro-batch size. */
void dt_plan_remeasure(dt_planner *p, const dt_layout *L);
/* Drops the samples of those layers (their costs stay until the next sample). */
void dt_plan_forget(dt_planner *p, const dt_layout *L);

/* plan/shard_cost.c. Shard 3 walking layer by layer: the floats its backward gathers again (every
 * bucket but the forward's last two) and, into *forward, those a micro-batch's forward after the
 * first gathers again (every bucket but the previous backward's last two); 0 where the step gathers
 * every bucket once (pipelines, reproducible chunks, recomputation). */
double dt_plan_regathered(const dt_planner *p, const dt_layout *L, const dt_graph *g, double *forward);
/* The optimizer step on a stage's n parameters under L's shard stage, seconds. */
double dt_plan_stage_update(dt_planner *p, const dt_layout *L, double n);

#endif
