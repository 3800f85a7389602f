/* train/stepper.h - one training step, the same for `dtrain run` and `dtrain bench` (so what bench
 * times is what a run does): gradients zeroed; this rank's share computed (its slice of the global
 * batch in micro-batches, its pipeline stage's walk, or its reproducible chunks); synchronised as
 * the cluster spec asks (all-reduce overlapped with backward, averaging, stale-synchronous); the
 * whole model's gradient norm over the right axes (tensor shards once, replicated tensors once per
 * tensor group, every pipeline stage); clipping; the optimizer. The caller owns the data: it fills
 * inputs and labels for positions of the global batch through a hook. */
#ifndef DT_STEPPER_H
#define DT_STEPPER_H

#include <stdint.h>
#include <mpi.h>
#include "train/setup.h"
#include "train/finetune.h"
#include "parallel/dp.h"
#include "parallel/pipeline.h"

/* Positions [pos0, pos0 + b) of the step's global batch: inputs into the model's input (act[0])
 * when 'inputs', labels (and mse targets) into the stepper's lab and tgt when 'labels'. */
typedef void (*dt_step_fill)(void *ud, long pos0, int b, int inputs, int labels);

typedef struct dt_stepper {
        dt_setup *su;                   /* graph, axes, cluster spec, backend */
        dt_dp *dp;                      /* the data axis's gradient sync */
        dt_pipe *pipe;                  /* when there is a pipeline to walk (dt_grid_pipelined) */
        dt_ssp *ssp;                    /* sync ssp over more than one rank */
        float *m, *v;                   /* optimizer moments (NULL where the optimizer has none) */
        const dt_freeze *freeze;        /* frozen layers, NULL for none */
        int32_t *lab;                   /* (b, rows): what fill puts labels into */
        float *tgt;                     /* (b, rows, C) mse targets, else NULL */
        dt_step_fill fill;
        void *ud;
        long spe, total;                /* steps per epoch and in all: the learning-rate schedule's */
        /* the last update's (and the state a resume restores into lr); gnorm is the last settled
         * one while a pipeline's norm is in flight (dt_step_settle) */
        double lr, gnorm;
        /* a pipeline's: the stages' norm sum of step norm_step, started after its update and
         * completed by dt_step_settle, so that no stage waits for the others between steps
         * (norm_ss is MPI's buffer until then) */
        MPI_Request norm_req;
        double norm_ss;
        long norm_step;
        int norm_pending;
        /* with clipping (post-validation, plan/mem.h's dt_mem_speculates): step norm_step was taken
         * unclipped (speculated), its state from before it kept in spec to take it again clipped.
         * A step speculates until the first clip, then after hold steps in a row that did not clip
         * (calm), hold doubling at each rollback (from 1 to 256): a rollback walks a step again,
         * so where clipping comes often the steps wait for their norm instead */
        int speculated, clip_seen, hold;
        long calm;
        struct { float *params, *grads, *m, *v, *buffers; double lr; } spec;
        /* seconds summed over steps, for bench: the data axis's wait, the norm, the update; in a
         * pipeline's hooks (inside its walk) the feed and the loss with its labels */
        double t_sync, t_norm, t_update, t_feed, t_loss;
        /* the step in progress (the hooks read them) */
        long step;
        int B;
        float loss_scale;               /* 1 / (global batch x rows) in training */
} dt_stepper;

/* One step of index 'step' over a global batch of B positions; stats[0..1] += this rank's loss
 * sum and correct count (in reproducible mode every rank's, summed: the caller keeps one share). */
void dt_step_run(dt_stepper *s, long step, int B, double stats[2]);
/* Clip and apply one optimizer step of index 'step' with gradient grads; sets lr and gnorm. A
 * non-finite norm ends the job (exit 5) naming the first non-finite tensor. A pipeline's stage
 * checks its own part, updates without the other stages' norm (unclipped: without clipping, or
 * speculatively while clipping is rare) and leaves the stages' sum in flight (dt_step_settle);
 * soon after a clip it waits for the sum. */
void dt_step_update(dt_stepper *s, long step, float *grads);
/* Completes the stages' norm sum still in flight, if any: gnorm is then the last step's. Before
 * anything reads gnorm or the parameters, or needs the stages to agree (a log line, evaluation, a
 * checkpoint, the end); the next step calls it itself. A non-finite sum ends the job (exit 5). When
 * the step was taken unclipped and its norm calls for clipping, every stage puts its state back
 * and takes it clipped: returns 1 then (a walk since saw the unclipped step: dt_step_run walks
 * again), else 0. */
int dt_step_settle(dt_stepper *s);
/* Frees the post-validation copies (the backend's memory). */
void dt_step_free(dt_stepper *s);
/* Replicas agree again after step 'step' (the last taken): SSP applies every pushed step,
 * averaging averages, batch norm's running statistics are averaged over the data axis. */
void dt_step_sync_replicas(dt_stepper *s, long step);
/* The pipeline hooks of this stepper (stage 0 fills inputs, the last stage labels and scores),
 * for an evaluation walk as well (dt_pipe_eval: its loss scale is 0, no gradient). */
dt_pipe_hooks dt_step_pipe_hooks(dt_stepper *s);
/* The loss of b samples' outputs against lab (tgt for mse), dout = its gradient times scale
 * (NULL: none); *correct the right predictions. The one loss dispatch: host or device. */
double dt_step_loss(const dt_setup *su, const float *out, const int32_t *lab, const float *tgt, int b, float scale,
                    float *dout, long *correct);
/* Exit 5 on a non-finite loss or gradient: the message, then what usually cures it. */
_Noreturn void dt_step_nonfinite(const dt_setup *su, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
