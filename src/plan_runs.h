/* plan_runs.h - the runs `dtrain plan --validate` makes of the layouts it shows. */
#ifndef DT_PLAN_RUNS_H
#define DT_PLAN_RUNS_H

#include "plan_cmd.h"
#include "plan/planner.h"

/* Runs layout L on N ranks for 'steps' steps, its files in DIR/runK and DIR/planK.yaml; the median
 * step its metrics give, ms, or < 0 when it failed (DIR/runK.failed marks it); *compute: its busiest
 * rank's layers' time a step from its trace, ms, or < 0 when untraced. */
double dt_plan_run_layout(const dt_plan_opts *o, dt_planner *p, const dt_layout *L, int N, int threads,
                          int steps, const char *dir, int k, double *compute);
/* The steps a validation run of a layout predicted at step_s seconds trains: --steps, or by default
 * enough for DT_PLAN_VALIDATE_SECONDS of training (30 to 2000). */
#define DT_PLAN_VALIDATE_SECONDS 2.0
int dt_plan_validate_steps(const dt_plan_opts *o, double step_s);

/* Whether a run in dir failed (left a non-empty NAME.failed). */
int dt_plan_any_failed(const char *dir);

#endif
