/* plan/profile_int.h - internal to the profiler (profile.c) and its cache (profile_cache.c). */
#ifndef DT_PROFILE_INT_H
#define DT_PROFILE_INT_H

#include "plan/profile.h"
#include "layers/layer.h"

/* A graph ready to run: a copy of lg0's layers allocated at micro-batch b, tensor-split layers
 * given the stand-in collectives, inputs filled like data (dt_prof_prepare; dt_graph_free frees the
 * copy, not lg0's layers). */
typedef struct dt_prof_prepared {
        dt_graph lg;
        dt_tp tps[8];
} dt_prof_prepared;
void dt_prof_prepare(dt_prof *pf, const dt_graph *lg0, int b, dt_prof_prepared *pg, int plain);
/* The clock dt_prof_time_graph reads: the wall's, or while the neighbours' factor is measured on one
 * thread, that thread's CPU time (profile_share.c sets it; forked copies inherit it). */
extern double (*dt_prof_layer_clock)(void);
/* Times every layer of lg0 (unallocated; a copy is allocated) at micro-batch b into out[]. */
void dt_prof_time_graph(dt_prof *pf, const dt_graph *lg0, int b, dt_layer_cost *out, int plain);
/* g's layers at b timed as dt_prof_time_graph times them, twice, the lesser sum, seconds. */
double dt_prof_graph_time(dt_prof *pf, const dt_graph *g, int b);
/* A key of the model's own layers (pf->ref at pf->ref_b) and seed, for the file cache's lines that
 * describe the machine as those layers see it (the drift's timings, the neighbours' factor). */
uint64_t dt_prof_ref_key(const dt_prof *pf, uint64_t seed);

/* What a layer's cost depends on: its kind and configuration (the shard's, when split), its input
 * and output shapes, the micro-batch and whether backward makes an input gradient. */
uint64_t dt_prof_key(const dt_layer *l, int b, int dx);
/* Layer i of g's key: dt_prof_key, and where g recomputes any layer, whether i is one of them. A
 * recomputing graph is timed in its own region (its memory-bound layers ran 1.5-2.2x faster there
 * than in the plain graph: cnn-bn's bn1 backward 1.83 ms against 4.07), so its layers are shapes of
 * their own, and the plain graphs' costs stay as they were. */
uint64_t dt_prof_gkey(const dt_graph *g, int i, int b);
/* key's cost in memory, or NULL */
dt_layer_cost *dt_prof_find(dt_prof *pf, uint64_t key);
/* Entry i's cost from its samples (their median). */
void dt_prof_settle(dt_prof *pf, int i);
/* Adds a sample of key (a new key, or the newest of its samples, the oldest dropped past
 * DT_PROF_SAMPLES). */
void dt_prof_put(dt_prof *pf, uint64_t key, dt_layer_cost c, int timed);
/* Seconds of a 256^3 SGEMM on the profile's backend now, the speed reference costs are scaled by. */
double dt_prof_reference(dt_prof *pf);
/* This machine's key in the file cache: host, OpenBLAS core, threads, dtrain's version and build. */
uint64_t dt_prof_machine_key(int threads);
/* Reads this machine's lines of the file cache into pf, scaled to pf->ref_now. */
void dt_prof_cache_load(dt_prof *pf);
/* Appends c, as measured now, when the reference took ref seconds (0: a ratio). */
void dt_prof_cache_save(const dt_prof *pf, uint64_t key, dt_layer_cost c, double ref);

#endif
