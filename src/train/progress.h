/* train/progress.h - what `dtrain run` says while an epoch runs: on a terminal one bar redrawn in
 * place that fits the terminal's width; anywhere else (a pipe, a Slurm log, a file under mpirun)
 * a plain line every S seconds or N steps, never a carriage return. Rank 0 only. */
#ifndef DT_PROGRESS_H
#define DT_PROGRESS_H

#include <stdio.h>

typedef enum { DT_PROGRESS_OFF = 0, DT_PROGRESS_BAR, DT_PROGRESS_LINES } dt_progress_mode;

typedef struct dt_progress {
        dt_progress_mode mode;
        FILE *f;
        double every_s;         /* lines: at most this long between two lines */
        long every_steps;       /* lines: also every this many steps (0: by time only) */
        double t0;              /* this process's first step: the run's rate for the ETA */
        long step0;
        double last_t;          /* when the last line or bar was printed */
        long last_step;
        int drawn;              /* a bar is on the screen (to clear) */
        int width;              /* columns; 0 = ask the terminal each time */
} dt_progress;

/* Where the run stands after a step. */
typedef struct dt_progress_info {
        long epoch, epochs;     /* 1-based epoch of the run's total */
        long k, spe;            /* steps of this epoch done, of spe */
        long step, total;       /* optimizer steps done, of the run's total (max_steps or epochs x spe) */
        double loss;            /* running mean of the epoch; NaN when this rank does not see it */
        double sps;             /* samples per second this epoch */
        double elapsed;         /* seconds since the run began (over resumes) */
        double epoch_elapsed;   /* seconds since this epoch (or its resumed part) began */
} dt_progress_info;

/* mode from where stdout goes; every_s <= 0 means 10 s. */
void dt_progress_init(dt_progress *p, dt_progress_mode mode, FILE *f, double every_s, long every_steps,
                      double now, long step);
/* The bar mode for a terminal, lines otherwise (off when quiet). */
dt_progress_mode dt_progress_mode_for(FILE *f, int quiet);
/* After a step: redraws the bar (at most 10 times a second) or prints a line when one is due. */
void dt_progress_step(dt_progress *p, const dt_progress_info *in, double now);
/* The test set is being evaluated (the bar says so; a line says so when evaluation is long). */
void dt_progress_eval(dt_progress *p, long epoch, long epochs, long samples);
/* Removes the bar before another line is printed. */
void dt_progress_clear(dt_progress *p);
/* Seconds left in this epoch (*ep) and in the run (*run), and the step of this epoch the run
 * reaches (*end: spe, or fewer when total ends the run inside the epoch): this epoch's remaining
 * steps at its own rate (epoch_elapsed / k), else at per; the steps after it at per (seconds per
 * step over the run so far; NaN when unknown). Pure: no clock, no output. */
void dt_progress_etas(const dt_progress_info *in, double per, double *ep, double *run, long *end);
/* "1h02m", "3m05s", "12.3s" into buf. */
const char *dt_progress_dur(double s, char *buf, size_t n);

#endif
