/* train/metrics.h - metrics.jsonl: one JSON object per line, flushed per line so a killed run
 * keeps what was written, and fsync'd with each checkpoint commit (ckpt_writer.c) so that after a
 * power failure the file reaches at least the committed checkpoint; lines after it may be lost.
 * Epoch lines have "split" "train" or "test" (and "partial": true when a stop cut the epoch
 * short); step lines, every train.log_every steps, have "split" "step". A launcher's relaunch adds
 * its restart line (train/restart.h), which has neither. */
#ifndef DT_METRICS_H
#define DT_METRICS_H

#include <stdio.h>

typedef struct dt_metrics {
        FILE *f;
        int nranks;             /* > 0: epoch lines carry every rank's memory (dt_metrics_memory) */
        const double *mem;      /* planned and measured peak bytes per rank, in pairs */
} dt_metrics;

/* From now on epoch lines carry "mem_planned_mib" and "mem_peak_mib", arrays by rank, from
 * mem[2 r] and mem[2 r + 1] (bytes; the caller keeps mem alive and current). */
void dt_metrics_memory(dt_metrics *m, int nranks, const double *mem);
/* Opens DIR/metrics.jsonl, truncating unless append. Returns 0 or -1 (errno set). */
int dt_metrics_open(dt_metrics *m, const char *dir, int append);
/* step_ms > 0: the median training step of the epoch in ms, the slowest rank's (written as
 * "step_ms"; the planner's validation reads it). */
void dt_metrics_write(dt_metrics *m, long epoch, long step, const char *split, double loss,
                      double accuracy, double samples_per_sec, double time, double lr, double step_ms,
                      int partial);
/* A step line: loss and accuracy over the steps since the last one, the learning rate and gradient
 * norm of this step, samples per second since the last one; flushed. */
void dt_metrics_step(dt_metrics *m, long epoch, long step, double loss, double accuracy, double lr,
                     double grad_norm, double samples_per_sec, double time);
/* The line a resumed run writes first: {"resumed_from": STEP, "epoch": E, "time": T, "checkpoint":
 * DIR}. Lines above it with a step past STEP are a dead run's (a kill after the checkpoint it
 * resumed from): readers drop them, as TensorBoard purges orphaned steps, and the resumed run
 * writes those steps again. */
void dt_metrics_resumed(dt_metrics *m, long step, long epoch, double time, const char *checkpoint);
void dt_metrics_close(dt_metrics *m);

#endif
