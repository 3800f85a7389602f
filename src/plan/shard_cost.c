/* plan/shard_cost.c - what partition.shard changes in a layout's step, apart from its collectives
 * (predict.c's shard_gather): the parameters shard 3's walks gather again, and the optimizer step
 * on a replica's part. */
#include "plan/planner.h"

#include <stdlib.h>
#include "util/common.h"
#include "parallel/dp.h"
#include "plan/profile.h"

/* Shard 3 walking layer by layer (parallel/shard.c: no pipeline, no reproducible chunks, nothing
 * recomputed) keeps at most two buckets' parameters, so its backward gathers again every bucket but
 * the forward's last two: the floats of those; 0 where the step gathers every bucket once. */
double dt_plan_regathered(const dt_planner *p, const dt_layout *L, const dt_graph *g, double *forward)
{
        *forward = 0;
        if (L->grid[1] > 1 || p->cs.reproducible) return 0;
        for (int i = 0; i < g->n; i++)
                if (dt_graph_recomputed(g, i)) return 0;
        dt_bucket *b = dt_calloc((size_t)g->n + 1, sizeof *b);
        int nb = dt_dp_buckets(g, p->cs.bucket_mb, b);
        double f = 0;
        for (int j = 2; j < nb; j++) f += (double)b[j].len;   /* dp's order: the last layer's first */
        /* and a next micro-batch's forward every bucket but the backward's last two (the first layers') */
        for (int j = 0; j < nb - 2; j++) *forward += (double)b[j].len;
        free(b);
        return f;
}

/* The optimizer step on a stage's n parameters (sharded, each replica updates its 1/D:
 * parallel/shard.h), at the profile's measured rate for that many (dt_prof_update: its largest size
 * lies past the caches, so the regime is the measurement's, not the copies' ratio laid over it).
 * Below stage 3 the step zeroes the whole gradient (train/stepper.c), the update's pass only its
 * part: the rest at the rate of one pass over all n (a memset that long streams from memory, and
 * glibc's turns to non-temporal stores: 20M zeroed in 1.9-2.3 ms on a Zen 3 where 4M took 1.0). */
double dt_plan_stage_update(dt_planner *p, const dt_layout *L, double n)
{
        int D = L->grid[0], zs = D > 1 ? L->shard : 0;
        double mine = zs ? n / D : n, t = dt_prof_update(&p->pf, mine);
        if ((zs == 1 || zs == 2) && n > 0) t += dt_prof_zero(&p->pf, n) * (n - mine) / n;
        return t;
}
