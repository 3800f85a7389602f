/* train/setup.h - what every command that builds a model does first, written once: load the model
 * spec with the command line's overrides, build the graph, check that the last layer feeds the
 * loss, merge and validate the cluster spec against the ranks, choose the thread count, and open
 * the backend. `run`, `check`, `bench` and `sample` differ only in what they do afterwards. */
#ifndef DT_SETUP_H
#define DT_SETUP_H

#include "spec/model_spec.h"
#include "spec/cluster_spec.h"
#include "graph/graph.h"
#include "parallel/comm.h"
#include "parallel/layout.h"
#include "train/elastic.h"
#include "spec/overrides.h"
#include <stdio.h>

typedef struct dt_setup_opts {
        const char *model;
        const char *cluster;            /* NULL: only the model's parallel: keys (single: not read, but
                                         * --set's cluster keys are left for it) */
        const char *device;             /* NULL: the cluster spec's, then the model's */
        const char *conv;               /* cpu convolutions: auto | im2col | onednn; NULL: the cluster spec's */
        long epochs, batch, max_steps;  /* <= 0 (max_steps < 0): from the spec */
        long long seed;                 /* < 0: from the spec */
        int threads;                    /* 0: cluster spec, OPENBLAS_NUM_THREADS, cores / ranks on the node */
        double collective_timeout;      /* 0: the cluster spec's */
        int quiet;
        int single;                     /* one process without MPI (sample): no communicator, no cluster */
        const struct dt_sets *sets;     /* --set overrides (spec/overrides.h); NULL: none */
} dt_setup_opts;

typedef struct dt_setup {
        dt_model_spec spec;
        dt_cluster_spec cs;             /* effective: the model's parallel: keys + --cluster */
        dt_graph g;
        dt_comm world;                  /* unset (size 0) when single */
        int rank, size;
        /* the layout placed on the world (parallel/layout.h): the grid, this rank's place, the
         * axes (grid.data: the data-parallel one), the whole model when g is a part of it */
        dt_grid grid;
        dt_backend *be;                 /* NULL until dt_setup_backend */
        int threads;
        int rows, C;                    /* the loss reads the last layer as rows x C */
        char *plan_text;                /* strategy auto: the planner's report (every rank) */
        char plan_line[1200];           /* ... and its one-line summary (rank 0) */
        char cx_line[600];              /* compression: auto: what it chose and why (rank 0) */
        int machine_ranks;              /* ranks on this machine, emulated nodes together (dt_comm_machine_size) */
        int placed;                     /* ranks outnumber cores: this rank was pinned (parallel/place.c) */
        char place[64];                 /* ... to these cores ("cpu 1") */
        int loaded;
        size_t rss_base;                /* VmRSS once the spec and MPI are up, before any model buffer:
                                         * the memory plan's fixed part (plan/mem.h) */
        size_t rss_setup_peak;          /* VmHWM when the data is loaded: a peak already made (a CSV
                                         * parse's buffers, freed since), the plan's floor */
        dt_elastic elastic;             /* an elastic relaunch's replaced layout (how 0: none) */
        size_t plan_peak;               /* strategy auto, rank 0: the peak while the planner measured
                                         * layers (the high-water mark starts again after it) */
} dt_setup;

/* Spec, overrides, graph, the last layer against the loss, and (unless single) the world, the
 * cluster spec and the layout (the cluster spec's, or strategy auto's plan) placed on the world:
 * g becomes this rank's part of the model (parallel/layout.h's dt_grid_make). Errors are printed
 * (by rank 0) with file:line:col; returns 0 or DT_EXIT_USAGE. */
int dt_setup_model(dt_setup *s, const dt_setup_opts *o);
/* This rank's memory plan (plan/mem.h) for activations of 'batch' samples in nslots slots and
 * 'data' bytes of data, without checkpoint snapshots: bench's; a run's is train/memory.c's. */
struct dt_mem_plan;
/* What the data of a run will hold on a rank (datasets in memory and mapped, the permutation, a
 * batch's labels), from opening both sets without checking a sample, in *per_sample the loader's
 * bytes per sample of the rank's slice and in *mapped the caches mapped from disk: the planner's
 * data terms. */
size_t dt_setup_data_bytes(const dt_setup *s, size_t *per_sample, size_t *mapped);
struct dt_planner;
/* Times the step's data work on the training set for the planner p (dt_planner_time_data; nothing
 * there when the set cannot be opened). */
void dt_setup_plan_data(const dt_setup *s, struct dt_planner *p);
/* Whether this rank's convolutions may run through oneDNN (cpu backend, conv not im2col, built in). */
int dt_setup_onednn(const dt_setup *s);
void dt_setup_mem_plan(const dt_setup *s, int batch, int nslots, size_t data, size_t mapped, struct dt_mem_plan *p);
/* Refuses, at the spec's batch key, that plan (no data) over memory_per_rank or this machine's
 * available memory shared by its ranks. Returns 0 or DT_EXIT_USAGE after printing. */
int dt_setup_check_memory(dt_setup *s, int batch, int nslots);
/* Without opening it: can the backend the flags and specs ask for run every layer, and the cpu
 * backend the convolutions asked for (conv: onednn needs oneDNN)? Refusals are printed at the
 * layers' keys, the conv key or flag (DT_EXIT_USAGE). For `dtrain check` (and run). */
int dt_setup_check_device(dt_setup *s, const dt_setup_opts *o);
/* Opens the device backend the flags and specs ask for (all ranks agree), else the cpu backend
 * with the chosen threads and convolutions, and checks that it runs every layer. Returns 0 or an
 * exit status after printing. */
int dt_setup_backend(dt_setup *s, const dt_setup_opts *o);
/* The model graph: the layout's whole model when g is a part of it, else g. */
static inline const dt_graph *dt_setup_model_graph(const dt_setup *s)
{
        return dt_grid_model(&s->grid, &s->g);
}
/* This rank's stage unsplit: the layout's under tensor parallelism, else g. */
static inline const dt_graph *dt_setup_stage_graph(const dt_setup *s)
{
        return dt_grid_stage(&s->grid, &s->g);
}
/* Micro-batches per step of the pipeline (the cluster spec's, or twice the stages, at most the
 * replica's slice). */
int dt_setup_micro_batches(const dt_setup *s);
/* "parallel: ..." and, with pipeline stages, one line per stage: its ranks, layers, parameters,
 * planned memory per rank, and the MiB it moves per step point to point and in the all-reduce. */
void dt_setup_print_plan(const dt_setup *s, FILE *f);
/* The thread rule: flag, then the cluster spec, then OPENBLAS_NUM_THREADS, then the node's cores
 * shared among the ranks on it (local_size). */
int dt_setup_threads(int flag, int cluster, int local_size);
/* OPENBLAS_NUM_THREADS as a positive integer, 0 when unset or not one. */
int dt_env_threads(void);
void dt_setup_free(dt_setup *s);
/* The spec's name with the overrides applied (runs/<name> is the default run directory), quietly:
 * 0, or -1 when the spec does not load (its errors are for the real load to report). */
int dt_setup_spec_name(const char *model, const struct dt_sets *sets, char *name, size_t len);
/* The overrides a command working on run directory dir applies: those recorded there
 * (DIR/overrides.yaml), then the command line's, each replacing a recorded one of the same KEY,
 * into out. say: 0 silent, 1 prints why the record cannot be read, 2 also a note naming the
 * recorded ones. 0, or DT_EXIT_USAGE when the record cannot be read. */
int dt_setup_run_sets(const char *dir, const struct dt_sets *cli, dt_sets *out, const char *cmd, int say);
/* dt_setup_run_sets for a command that reads a trained model (eval, predict, sample), with a note:
 * the run directory is resume's (a checkpoint inside one, or one), else out, else the one weights
 * lies in (a file in a run or checkpoint directory), else runs/<name>. */
int dt_setup_reader_sets(const char *model, const char *weights, const char *resume, const char *out,
                         const struct dt_sets *cli, dt_sets *all, const char *cmd);

#endif
