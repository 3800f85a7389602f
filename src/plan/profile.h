/* plan/profile.h - measured per-layer costs for the planner (plan.h), cached per shape. */
#ifndef DT_PROFILE_H
#define DT_PROFILE_H

#include "plan/plan.h"

/* Timings kept per shape: one measurement can fall into a burst of the machine's own slowness
 * (on a virtual machine, seconds at 1.4x), and the median of a few taken at different times
 * does not. */
#define DT_PROF_SAMPLES 5

/* The optimizer step's sizes timed (dt_prof_init) */
#define DT_PROF_UPDATE_SIZES 4

typedef struct dt_prof {
        int measure;            /* 0: FLOP estimates only */
        int threads;
        dt_backend *be;         /* cpu, 'threads' threads */
        double sgemm;           /* FLOP/s of SGEMM with those threads */
        double update_per_param[DT_PROF_UPDATE_SIZES];  /* seconds per parameter of an Adam step, the
                                         * norm's pass and zeroing, for 2^16, 2^20, 2^22 and 2^23
                                         * parameters (the last past the caches: dt_prof_init) */
        double zero_per_param[DT_PROF_UPDATE_SIZES];    /* of that, the zeroing's */
        double page_per_byte;   /* seconds per byte of handed-back pages made resident again
                                 * (util/pages.h: what shard 3 pays each step for the parts it
                                 * hands back) */
        uint64_t machine;       /* this machine's key in the file cache */
        double ref_now;         /* the speed reference's seconds at start (reported, not scaled by) */
        double neigh;           /* a core's slowdown with every core busy (0: not measured yet) */
        double neigh_mem;       /* the optimizer step's, every core stepping (0: not measured yet) */
        const dt_graph *ref;    /* the model, whose layers measure that slowdown, at ref_b samples */
        int ref_b;
        int neigh_busy;
        double drift;           /* the model's layers now over the cache's (dt_prof_calibrate), 1 when fresh */
        double ref_t;           /* seconds of the model's layers as usual: the median of the kept
                                 * starts' timings (0: not timed) */
        int n, cap;
        uint64_t *key;
        dt_layer_cost *cost;    /* per key: the median of its samples */
        dt_layer_cost (*samp)[DT_PROF_SAMPLES];  /* the newest samples of each key */
        unsigned char *ns;      /* how many */
        unsigned char *timed;   /* 1: seconds; 0: a ratio */
        int nscale;             /* dt_prof_anchor's per-layer ratios of measured to modelled cost */
        uint64_t *scale_key;    /* the layer's name hashed */
        double *scale;
        double scale_all;       /* for layers without one (0: none, costs as modelled) */
        double feed_a, feed_c;  /* a step's data for b samples: feed_a + feed_c b seconds (0: no data known) */
        double loss_a, loss_c;  /* its loss over b samples' outputs: loss_a + loss_c b */
} dt_prof;

void dt_prof_init(dt_prof *pf, int threads, int measure);
void dt_prof_free(dt_prof *pf);
/* Times the model's own layers (pf->ref at pf->ref_b samples) now, as they were profiled, keeps
 * the timing with the last starts' (their median pf->ref_t, what dt_prof_speed compares against)
 * and sets pf->drift to this timing over the cache's costs, for the report only: costs are the
 * cache's as timed. 1 when the model has no cached costs yet or when not measuring. */
void dt_prof_calibrate(dt_prof *pf);
/* The model's layers timed now (as dt_prof_calibrate times them) against their usual time (ref_t):
 * > 1 when this machine computes slower now than the predictions assumed; 0 when not measuring. */
double dt_prof_speed(dt_prof *pf);
/* The file cache's key for the neighbours' factor of busy cores on this model's layers: a line a
 * start, the factor used the median of the last few (dt_prof_neighbours). */
uint64_t dt_prof_neigh_key(const dt_prof *pf, int busy);
/* How much slower a core computes while 'busy' cores of the node compute (>= 1); measured on
 * first use with every core busy, interpolated for fewer. */
double dt_prof_neighbours(dt_prof *pf, double busy);
/* The same for the optimizer step, memory-bound, while every busy core steps its own. */
uint64_t dt_prof_neigh_mem_key(const dt_prof *pf, int busy);
double dt_prof_neighbours_mem(dt_prof *pf, double busy);
/* Seconds to make handed-back pages of 'bytes' resident again (dt_pages_populate). */
double dt_prof_pages(const dt_prof *pf, double bytes);
/* Seconds of the optimizer step, gradient norm and zeroing for n parameters. */
double dt_prof_update(const dt_prof *pf, double n);
/* Seconds to zero n gradients (the part of dt_prof_update that is the step's zeroing). */
double dt_prof_zero(const dt_prof *pf, double n);
/* The costs of lg's layers (a rank's graph: shards placed, unallocated) for micro-batch b: from the
 * cache, else timed now (measure) or modelled from FLOPs. */
void dt_prof_graph(dt_prof *pf, const dt_graph *lg, int b, dt_layer_cost *out);
/* Times lg's layers at micro-batch b once more and adds the timings to their shapes' samples
 * (and the file cache): what the planner does for the layouts it shows, so that their costs are
 * medians of several measurements. Nothing when not measuring. */
void dt_prof_refine(dt_prof *pf, const dt_graph *lg, int b);
/* Drops the samples of lg's shapes at micro-batch b (their costs stay as they are until the next
 * sample replaces them): before timing layouts side by side, so that no sample from another moment
 * is in their medians. */
void dt_prof_forget(dt_prof *pf, const dt_graph *lg, int b);
/* Seeds pf (not measuring: the scaling table's FLOP model) from src's measurements: every cost
 * src holds (its turn-taking and neighbours' factors and its optimizer update too), and each layer of g that src timed at
 * b samples gives the ratio of its timing to its FLOP model, by which pf's modelled costs of that
 * layer's other shapes are scaled (layers never timed: the ratio of all of them together), so that
 * the modelled costs continue the measured ones instead of jumping from them. */
void dt_prof_anchor(dt_prof *pf, const dt_prof *src, const dt_graph *g, int b);
/* How much slower the P stage graphs g[] compute, m micro-batches of b each, when they take turns
 * on one core as a pipeline's ranks pinned there do, than one after another alone (>= 1; 1 where it
 * cannot be measured): measured once with the stages as processes on one core, then cached. */
double dt_prof_turns(dt_prof *pf, const dt_graph *const *g, int P, int m, int b);

/* The step's data (plan/dataprof.c): the loader thread preparing a slice of ds (NULL: no data
 * known, priced 0), read, converted and augmented as the run's first steps read it, and its copy
 * into the model's input; timed at two slice sizes up to batch, in this thread's CPU time. */
void dt_prof_time_data(dt_prof *pf, const struct dt_dataset *ds, int batch, uint64_t seed);
/* g's loss over the outputs of slices up to batch samples, timed. */
void dt_prof_time_loss(dt_prof *pf, const dt_graph *g, int batch);
/* Seconds of a step's data, and of its loss, for a slice of b samples. */
double dt_prof_feed(const dt_prof *pf, double b);
double dt_prof_loss(const dt_prof *pf, double b);

#endif
