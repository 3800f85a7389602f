/* bench/bench_int.h - what bench.c shares with bench_pipe.c (not part of the command's interface):
 * the random samples both feed their models, the one-rank step bench.c times, which the pipeline
 * report compares against, and the pipeline bench itself. */
#ifndef DT_BENCH_INT_H
#define DT_BENCH_INT_H

#include <stdint.h>
#include <jansson.h>
#include "bench/bench.h"
#include "train/setup.h"

/* Random samples generated once; each step draws a random selection of them, as training would
 * gather from a shuffled set (so caches see what they would see in training, not one sample). */
typedef struct dt_bench_pool {
        size_t in;              /* floats per input sample (0: no inputs kept) */
        int n, rows, C;         /* samples; label rows per sample; classes (or targets per row) */
        float *x;               /* (n, in): var-1 values, or token ids below an embedding's vocabulary */
        int32_t *lab;           /* (n, rows), NULL when no labels are kept */
        float *tgt;             /* (n, rows, C) for an mse loss, else NULL */
        uint64_t rng;
} dt_bench_pool;

/* A pool for batches of b from the model of su (the whole model's first layer and loss): inputs
 * when 'inputs', labels (and mse targets) when 'labels'; seed picks the numbers. */
void dt_bench_pool_make(dt_bench_pool *p, const dt_setup *su, int b, uint64_t seed, int inputs, int labels);
/* b random samples: inputs into x (backend memory), labels into lab, targets into tgt (host); any
 * of them may be NULL. */
void dt_bench_pool_draw(dt_bench_pool *p, dt_backend *be, int b, float *x, int32_t *lab, float *tgt);
void dt_bench_pool_free(dt_bench_pool *p);
/* Bytes the pool holds. */
size_t dt_bench_pool_bytes(const dt_bench_pool *p);

/* The whole model of path on this process alone (no cluster spec, no communicator) at the global
 * batch o asks for and 'threads' threads: o->warmup untimed steps, then the median of o->iters
 * whole steps (bench.c's full step) into *step_ms. Returns 0 or an exit status (printed). */
int dt_bench_one_rank(const char *path, const dt_bench_opts *o, int threads, double *step_ms);

/* bench_pipe.c: su is set up (dt_setup_model) with pipeline stages, its backend not yet open.
 * Times the stages' training steps and, on world rank 0, appends the model's object to all and
 * prints its table unless o->json. Collective over su's world. Returns 0 or an exit status. */
int dt_bench_pipe(dt_setup *su, const char *path, const dt_bench_opts *o, json_t *all);

#endif
