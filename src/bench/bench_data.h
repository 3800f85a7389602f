/* bench/bench_data.h - the model's own training data for `dtrain bench` (bench/bench_data.c):
 * batches of this rank's slice through the run's loader, synchronously or by its thread, and the
 * comparison of whole steps both ways. */
#ifndef DT_BENCH_DATA_H
#define DT_BENCH_DATA_H

#include <stdio.h>
#include <jansson.h>
#include "data/data.h"
#include "train/setup.h"

typedef struct dt_bench_data {
        int have;               /* the data opened; else bench feeds random samples */
        dt_dataset ds;
        long *perm, n, pos, epoch;      /* n: whole batches' samples; pos: the next batch's start */
        int B, lo, b;           /* global batch; this rank's slice [lo, lo + b) */
        uint64_t seed;
        int prefetch;           /* the thread's slots (the spec's, or 2 when the spec turns it off) */
        dt_loader *L[2];        /* 0: synchronous, 1: the thread */
        int mode, run_mode;     /* the mode in use; the one `run` would use (the spec's prefetch) */
        double step_ms[2], wait_ms, prep_ms;    /* dt_bench_data_compare's medians */
        long fed;               /* batches fed so far */
} dt_bench_data;

/* Opens the model's training source for batches of B (this rank's [lo, lo + b)); -1 with why
 * when it cannot (missing files, too few samples). */
int dt_bench_data_open(dt_bench_data *d, const dt_setup *su, int B, int lo, int b, char *why, size_t len);
void dt_bench_data_close(dt_bench_data *d);
/* 0: batches prepared when asked for; 1: by the loader thread. Open starts in the run's mode. */
void dt_bench_data_mode(dt_bench_data *d, int threaded);
/* The next batch: inputs to x (backend memory), labels to lab, targets to tgt (host; may be NULL). */
void dt_bench_data_feed(dt_bench_data *d, dt_backend *be, float *x, int32_t *lab, float *tgt);
/* Whole steps (step(ud) returns seconds) in alternating blocks of each mode, about 'iters' of each:
 * fills step_ms, prep_ms (a batch prepared synchronously) and wait_ms (what a step waited for the
 * thread's); leaves the run's mode on. */
void dt_bench_data_compare(dt_bench_data *d, int iters, double (*step)(void *), void *ud);
/* Bytes the data holds (the memory plan). */
size_t dt_bench_data_bytes(const dt_bench_data *d);
/* The JSON object of the figures, and the two report lines on f when f is not NULL. data_ms: the
 * (data) row, what a step spends on its batch in the run's mode; step_ms: the step. */
json_t *dt_bench_data_report(const dt_bench_data *d, double data_ms, double step_ms, FILE *f);

#endif
