/* plan_cmd.h - `dtrain plan`: its flags and the planner's report (plan/plan.h). */
#ifndef DT_PLAN_CMD_H
#define DT_PLAN_CMD_H

#include <stdio.h>
#include "cli.h"
#include "spec/overrides.h"

#define DT_PLAN_MAX_COUNTS 32

typedef struct dt_plan_opts {
        const char *model, *cluster, *plot;
        int ranks[DT_PLAN_MAX_COUNTS], nranks;  /* rank counts to plan for; 0: the spec's ranks, or 1,2,4 */
        int top;                /* candidates shown per count */
        int data;               /* --data: only that data degree (-1: the rank count); 0 any */
        int json, validate, no_scaling;
        int threads;            /* per rank; 0: the cluster spec's, else 1 */
        int steps;              /* --validate: steps each candidate runs */
        int repeat;             /* --validate: runs of each candidate, alternating; the median is kept */
        dt_sets sets;           /* --set: the model spec's go to each validation run too */
} dt_plan_opts;

extern const dt_cli_cmd dt_plan_cmd;

/* Parses argv (after "plan"): 0, 1 for --help (printed), or DT_EXIT_USAGE after printing. */
int dt_plan_parse(int argc, char **argv, dt_plan_opts *o);
int dt_cmd_plan(const dt_plan_opts *o);

/* The scaling table as an SVG image into f: speed[i] (over one rank) against n[i] ranks, both axes
 * log2 with a tick at every power of two, the linear ideal, a point per count (filled where
 * anchored[i], NULL: none, is set: the count repeats a per-count table), a legend, and a note
 * under it (e.g. that the network figures are assumed). */
void dt_plan_svg(FILE *f, const int *n, const double *speed, const int *anchored, int count, const char *title,
                 const char *note);

#endif
