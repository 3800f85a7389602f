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

/* --network (bench/netbench.c): point-to-point and all-reduce times across sizes, alpha-beta fitted. */
int dt_bench_network(const dt_bench_opts *o);
/* Runs the benchmark (MPI initialised); returns an exit status. */
int dt_cmd_bench(const dt_bench_opts *o);

#endif
