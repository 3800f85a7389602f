/* train/trainer.h - what the files of `dtrain run` and `dtrain check` share: the trainer (the run's
 * state beside the model) and the functions one file offers another. Not for other modules:
 * they use train.h. load.c loads spec, graph and data; prepare.c readies a run (output directory,
 * resume, weights, writers) and prints its banner; step.c feeds the step (stepper.c, which bench
 * shares) and evaluates; save.c holds checkpoints, resume and the final weights; train.c the epoch
 * loop, the stop and dtrain run; check_cmd.c dtrain check. */
#ifndef DT_TRAINER_H
#define DT_TRAINER_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mpi.h>
#include "util/common.h"
#include "util/cpu_fix.h"
#include "util/fault.h"
#include "spec/model_spec.h"
#include "graph/graph.h"
#include "data/data.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "train/ckpt.h"
#include "train/ckpt_writer.h"
#include "train/restart.h"
#include "train/metrics.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "spec/cluster_spec.h"
#include "train/device.h"
#include "train/setup.h"
#include "train/rundir.h"
#include "train/whole.h"
#include "train/progress.h"
#include "train/runlog.h"
#include "train/tbevents.h"
#include "train/finetune.h"
#include "train/stop.h"
#include "train/stepper.h"
#include "util/trace.h"
#include "parallel/agree.h"
#include "util/stats.h"
#include "util/fault.h"
#include "train/train.h"
#include "plan/mem.h"

typedef struct trainer {
        dt_setup su;                    /* spec, effective cluster spec, graph, world, backend, threads */
        dt_dataset train, test;
        int have_test;
        dt_moments mo;
        dt_train_state st;
        int classes;
        long *perm;
        int32_t *lab;
        float *tgt;
        /* device backends (train/device.h): host staging of the input batch, host copies for checkpoints */
        float *hin;
        dt_host_mirror mirror;
        char out[DT_PATH_MAX];
        dt_metrics metrics;
        dt_ckpt_writer *ckw;            /* rank 0: commits checkpoints on its own thread */
        int quiet;
        long nsteps_epoch;              /* steps the last epoch (or its part) took */
        double t0;                      /* the run's start, for metrics */
        /* data parallel */
        dt_dp dp;
        dt_ssp *ssp;
        const long *cur_idx;            /* the global batch being computed */
        double ep[2];                   /* this rank's loss sum and correct count this epoch */
        double *step_s;                 /* this epoch's step times (seconds), for the median */
        long nstep_s, capstep_s;
        int lock_fd;                    /* rank 0's lock on the run directory, -1 when not held */
        /* pipeline stages (strategy model | hybrid): this rank's stage walker and its hooks' data */
        dt_pipe pipe;
        const dt_dataset *cur_ds;       /* what the hooks read: the training or the test set */
        /* ---- what the run reports (runlog.c, progress.c, tbevents.c): rank 0 writes ---- */
        dt_progress prog;
        dt_tb tb;
        double win[2];                  /* this rank's loss sum and correct count since the last step line */
        long win_n;                     /* samples since the last step line (global) */
        double win_t;                   /* when the window began */
        double gnorm;                   /* the last step's gradient norm (before clipping) */
        double comm0;                   /* dp.t_comm_wait at the epoch's start */
        int keep;                       /* checkpoints kept besides the best */
        dt_freeze freeze;               /* train.freeze: layers kept fixed (finetune.c) */
        int trace;                      /* --trace is recording */
        /* data/loader.c: this rank's part of the coming global batches, prepared ahead */
        dt_loader *loader;
        const dt_batch *cur_batch;      /* the batch of the step being computed, or NULL */
        int check_all;                  /* `dtrain check`: every on-disk sample checked at load */
        const dt_run_opts *opts;        /* the command line, for the command that continues a stopped run */
        char resumed[DT_PATH_MAX];      /* the checkpoint directory this run continues, "" fresh */
        dt_restart restart;             /* a launcher's relaunch: its metrics line after the first step */
        int nothing;                    /* resumed with no step left: nothing is written */
        dt_stepper stp;                 /* one training step (stepper.h), set up by dt_tr_stepper_init */
        dt_mem_plan mem;                /* this rank's memory plan (memory.c) */
        double *mem_ranks;              /* rank 0: every rank's planned and measured peak bytes, in pairs */
} trainer;

/* A run checks on-disk samples for NaN/Inf at load up to this size; larger data is checked as its
 * batches are read, so a run over a dataset of many GiB starts at once. */
#define DT_SCAN_MAX ((unsigned long long)1 << 30)

/* ---- load.c ---- */

dt_setup_opts dt_tr_setup_opts(const dt_run_opts *o);

/* The overrides of this run into out: with --resume, those the run recorded first (so the command
 * that continues a stopped run needs no --set), then the command line's, which win. */
int dt_tr_run_sets(const dt_run_opts *o, dt_sets *out);

/* The spec, graph and cluster spec, and the device the specs ask for. */
int dt_tr_load_model(trainer *t, const dt_run_opts *o);

/* Every rank loads the data; a failure is printed once (parallel/agree.h). */
int dt_tr_load_data_once(trainer *t);

void dt_tr_free_trainer(trainer *t);

/* ---- memory.c ---- */

/* The most samples one forward of a training step runs on this rank (its slice, a reproducible
 * chunk, a micro-batch): what the activations are allocated for, and the evaluation's piece. */
int dt_tr_act_batch(const trainer *t);
/* This rank's plan (plan/mem.h) once the data is loaded. */
void dt_tr_mem_plan(const trainer *t, dt_mem_plan *p);
/* Bytes this rank may use: memory_per_rank, else the machine's available memory over its ranks. */
double dt_tr_mem_limit(const trainer *t);
/* Every rank's plan against the limit, before any buffer: a plan over it is refused at the key
 * (memory_per_rank, else the batch) naming what takes the memory. 0 or DT_EXIT_USAGE (agreed). */
int dt_tr_check_memory(trainer *t);
/* "parameters: ...; planned memory per rank: ... (the terms)". */
void dt_tr_print_mem(const trainer *t, FILE *f);
/* Every rank's planned and measured peak to rank 0 (for metrics.jsonl's epoch lines); collective. */
void dt_tr_mem_gather(trainer *t);
/* The same, then rank 0 prints one line per rank to f (NULL: none). Collective. */
void dt_tr_mem_report(trainer *t, FILE *f);

/* ---- step.c ---- */

/* The positions of a global batch of B this rank reads: its slice, or in reproducible mode the
 * chunks dt_repro_grads hands it (chunks*rank/size .. chunks*(rank+1)/size, B/chunks each). */
void dt_tr_data_range(void *ud, int B, int *lo, int *hi);

int dt_tr_max_local(const trainer *t);

/* Replicas agree again: SSP applies every pushed step, averaging averages. Called before
 * evaluation, checkpoints and the end. */
void dt_tr_sync_replicas(trainer *t);
/* The last step's gradient norm into t->gnorm, completing the pipeline stages' sum if it is still
 * in flight (dt_step_settle); sync_replicas does it first. */
void dt_tr_settle(trainer *t);

/* The stepper over the trainer's graph, sync, moments, frozen layers and data: at the end of
 * prepare, when they all exist. */
void dt_tr_stepper_init(trainer *t);

/* One global batch idx[0..B): this rank's share of forward/backward, the synchronisation the
 * cluster spec asks for, and the update. */
void dt_tr_train_step(trainer *t, const long *idx, int B);

/* Loss and accuracy over ds. Cut short (NaN, the signal returned) once 'cut' stop signals came, so
 * a stop never waits for a whole test set: 1 when nothing is committed yet (the checkpoint comes
 * first), 2 after a stop's checkpoint (a second signal skips the rest); 0 never. */
int dt_tr_evaluate(trainer *t, const dt_dataset *ds, double *loss, double *acc, int cut);

/* ---- save.c ---- */

int dt_tr_save_ckpt(trainer *t);

/* Loads the checkpoint --resume names (auto: the run directory's latest, or its newest intact
 * step directory when latest is missing) into the model, moments and state. Nothing is written
 * here: a refusal (exit 4) leaves the run directory as it was. */
int dt_tr_resume(trainer *t, const char *how);
/* ckpt_cx.c: every rank; the compressor's state of every rank gathered into x on rank 0 (x->n 0
 * elsewhere, or when the run keeps none); dt_ckpt_extra_free releases it. */
void dt_tr_cx_gather(trainer *t, dt_ckpt_extra *x);
/* Every rank, after a checkpoint's load: its compressor state from x (the checkpoint dir's extras)
 * as ckpt_cx.c's header says; a note on rank 0 when it is summed onto other ranks or dropped. */
void dt_tr_cx_restore(trainer *t, const dt_ckpt_extra *x, const char *dir);

/* Fine-tuning: --weights or train.init_from into the model before the first step, by tensor name
 * (finetune.c). Every rank reads the file; rank 0 reports. With splits the whole model is read and
 * each rank keeps its part, so every tensor must be there (strict). */
int dt_tr_init_weights(trainer *t, const dt_run_opts *o);

/* model.safetensors: the final weights, with a text model's vocabulary for `dtrain sample`. */
int dt_tr_save_final(trainer *t);

/* Every rank, at the end of a run that got this far: rank 0 waits for its writer to commit every
 * checkpoint asked for; its verdict (or rc, save_final's) is everyone's exit status. */
int dt_tr_finish_checkpoints(trainer *t, int rc, int final);

/* ---- prepare.c ---- */

/* Everything a run holds besides the model: the backend, data, buffers, the synchronisation the
 * cluster spec asks for, the output directory (locked), the checkpoint to resume, the metrics. */
int dt_tr_prepare(trainer *t, const dt_run_opts *o);

long dt_tr_steps_per_epoch(const trainer *t);

void dt_tr_banner(const trainer *t);

#endif
