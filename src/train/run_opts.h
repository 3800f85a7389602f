/* train/run_opts.h - what `dtrain run` and `dtrain check` were asked (run_cmd.c fills it from the
 * command line; train/ reads it). */
#ifndef DT_RUN_OPTS_H
#define DT_RUN_OPTS_H

#include "spec/overrides.h"

typedef struct dt_run_opts {
        const char *model;
        const char *cluster;
        const char *out;            /* NULL: runs/<model name> */
        long epochs, max_steps, batch;  /* -1: from the spec */
        long long seed;             /* -1: from the spec */
        const char *resume;         /* NULL: fresh; "auto"; or a checkpoint directory */
        int threads;                /* 0: all cores */
        const char *device;         /* NULL: from the spec */
        const char *conv;           /* cpu convolutions (auto | im2col | onednn); NULL: the cluster spec's */
        int quiet;
        double collective_timeout;  /* seconds; 0: from the cluster spec (default 300) */
        int force;                  /* a fresh run may replace a previous run's outputs in out */
        double progress_s;          /* plain progress line every S seconds (not a terminal); 0: default 10 */
        long progress_steps;        /* ... and every N steps; 0: by time only */
        const char *trace;          /* Chrome trace-event JSON, one per rank; NULL: none */
        const char *weights;        /* fine-tuning: overrides train.init_from */
        int non_strict;             /* load matching tensors, list the rest (train.init_strict: false) */
        dt_sets sets;               /* --set KEY=VALUE, in order */
} dt_run_opts;

#endif
