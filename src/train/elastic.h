/* train/elastic.h - an elastic relaunch (DTRAIN_RESTART set by the launcher, train/restart.h) on a
 * rank count the cluster spec's fixed layout no longer fits: with elastic: replan (the default) the
 * layout is replaced by the nearest one that fits, pipeline and tensor kept and the data degree
 * shrunk where they divide the ranks, else re-planned as strategy auto; elastic: strict, or a first
 * launch (no DTRAIN_RESTART), keeps the spec's errors at its keys. */
#ifndef DT_ELASTIC_H
#define DT_ELASTIC_H

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

typedef enum { DT_ELASTIC_KEPT = 0, DT_ELASTIC_SHRUNK, DT_ELASTIC_REPLAN } dt_elastic_how;

typedef struct dt_elastic {
        dt_elastic_how how;
        char from[128];         /* the spec's layout, "data 2 x pipeline 2 x tensor 1 (4 ranks)" */
        char to[128];           /* what runs (dt_elastic_done fills it) */
} dt_elastic;

/* Whether this process is a launcher's relaunch: DTRAIN_RESTART set and not empty. */
int dt_elastic_relaunch(void);
/* On a relaunch of 'size' ranks, cs (merged, not yet validated) is changed in place when its fixed
 * layout or 'ranks' does not fit and elastic is replan: SHRUNK, the grid's data degree (and 'ranks')
 * set for size; REPLAN, its strategy set to auto and the keys that fixed the layout dropped, for the
 * caller to plan. KEPT: nothing changed (it fits, or strict, or no relaunch: the spec's own checks
 * report it). */
dt_elastic_how dt_elastic_fit(dt_cluster_spec *cs, const dt_model_spec *m, int nlayers, int size, dt_elastic *e);
/* Fills e->to with the grid that runs, "data 1 x pipeline 2 x tensor 1". */
void dt_elastic_done(dt_elastic *e, const int grid[3]);

#endif
