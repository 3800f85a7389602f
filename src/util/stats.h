/* util/stats.h - small statistics over timings: the median that bench, plan and run report. */
#ifndef DT_STATS_H
#define DT_STATS_H

/* Median of n values (v is reordered). 0 when n <= 0. */
double dt_median(double *v, int n);

#endif
