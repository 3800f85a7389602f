/* bench/bench.h - `dtrain bench` (like `caffe time`): per-layer forward/backward times, the whole
 * training step's throughput and GFLOP/s against measured machine peaks, peak memory and, under
 * mpirun, gradient-allreduce bandwidth and how much of it hides behind backward. Random in-memory
 * data, no files needed. */
#ifndef DT_BENCH_H
#define DT_BENCH_H

#include <stddef.h>
#include "spec/overrides.h"

typedef struct dt_bench_opts {
        char **models;          /* the MODEL.yaml operands (argv entries); nmodels == 0: the bundled ones */
        int nmodels;
        long batch;             /* global batch; 0 = each spec's train.batch */
        int iters, warmup;
        int threads;            /* 0: as for run (cluster spec, OPENBLAS_NUM_THREADS, cores / ranks) */
        const char *conv;       /* cpu convolutions (auto | im2col | onednn); NULL: as for run */
        int json;
        const char *cluster;
        int network;            /* --network: the interconnect's alpha and beta instead of models */
        int one_rank;           /* pipeline stages: also time the whole model on one rank, for the speed-up */
        dt_sets sets;           /* --set, applied to every model */
} dt_bench_opts;

/* Parses argv (after "bench"). Returns 0, 1 for --help (printed), or DT_EXIT_USAGE after printing
 * the problem. Needs no MPI. */
int dt_bench_parse(int argc, char **argv, dt_bench_opts *o);
/* --network (bench/netbench.c): point-to-point and all-reduce times across sizes, alpha-beta fitted. */
int dt_bench_network(const dt_bench_opts *o);
/* Runs the benchmark (MPI initialised); returns an exit status. */
int dt_cmd_bench(const dt_bench_opts *o);

/* ---- machine peaks (bench/peak.c) ---- */
/* Best-of-a-few cblas_sgemm 1024^3 GFLOP/s with the current OpenBLAS thread count. */
double dt_bench_sgemm_gflops(void);
/* GFLOP/s of one thread running independent vectorised fma chains (the core's FMA peak), timed in
 * the thread's CPU time so that a busy machine does not lower it. */
double dt_bench_fma_gflops(void);
/* STREAM-style triad a = b + s c in GB/s (3 x 4 bytes an element) over arrays far larger than the
 * per-core caches, on be's threads (dt_par_run), best of five. */
struct dt_backend;
double dt_bench_triad_gbs(struct dt_backend *be);
/* The bytes of the triad's three arrays (for the report). */
size_t dt_bench_triad_bytes(void);
/* Median of n values (v is reordered). 0 when n == 0. */
double dt_bench_median(double *v, int n);

#endif
