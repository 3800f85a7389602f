/* train/metrics.h - metrics.jsonl: one JSON object per line, flushed and fsync'd per epoch so a
 * crash keeps what was written. */
#ifndef DT_METRICS_H
#define DT_METRICS_H

#include <stdio.h>

typedef struct dt_metrics {
        FILE *f;
} dt_metrics;

/* Opens DIR/metrics.jsonl, truncating unless append. Returns 0 or -1 (errno set). */
int dt_metrics_open(dt_metrics *m, const char *dir, int append);
/* step_ms > 0: the median training step of the epoch in ms, the slowest rank's (written as
 * "step_ms"; the planner's validation reads it). */
void dt_metrics_write(dt_metrics *m, long epoch, long step, const char *split, double loss,
                      double accuracy, double samples_per_sec, double time, double lr, double step_ms);
void dt_metrics_close(dt_metrics *m);

#endif
