/* train/restart.h - the restart record of metrics.jsonl: a launcher that relaunched the job after a
 * lost rank or node (examples/slurm/train-elastic.sbatch, examples/mpirun-elastic.sh) says so in
 * the environment, and the resumed run writes one line once its first step is done:
 *   {"restart":N,"failed_at":UNIX_S,"lost_ranks":[...],"lost_nodes":"...","from_step":STEP,
 *    "first_step":STEP+1,"steps_redone":K,"recovery_s":S}
 * recovery_s: seconds from the failure (as the launcher saw it) to the end of that first step. Where
 * the cluster spec's fixed layout no longer fit (train/elastic.h), the line ends with
 *   "layout_from":"strategy hybrid data 2 x pipeline 2","layout":"data 1 x pipeline 2 x tensor 1",
 *   "layout_how":"fewer replicas" (or "re-planned"). */
#ifndef DT_RESTART_H
#define DT_RESTART_H

#include <stdio.h>

typedef struct dt_restart {
        int pending;            /* a record waits for the first step */
        long count;             /* DTRAIN_RESTART: the relaunch's number, from 1 */
        double failed_at;       /* DTRAIN_RESTART_FAILED_AT: unix seconds */
        long logged_step;       /* DTRAIN_RESTART_LOGGED_STEP: the last step the failed launch logged; -1 unknown */
        char ranks[512];        /* DTRAIN_RESTART_LOST_RANKS: "1,2" (checked: integers and commas) */
        char nodes[512];        /* DTRAIN_RESTART_LOST_NODES: names, as the launcher knows them */
        long resumed_from;
        char layout_how[32];    /* "" or how the relaunch replaced a layout that no longer fit: */
        char layout_from[128];  /* the cluster spec's, as written, */
        char layout_to[128];    /* and the grid that runs */
} dt_restart;

/* Reads the environment. 0: no restart (DTRAIN_RESTART unset or empty) or one recorded in r (pending);
 * -1: a value that does not parse, described in msg. */
int dt_restart_from_env(dt_restart *r, long resumed_from, char *msg, size_t len);
/* Writes the line (when pending) after step 'step' finished at unix time 'now'; flushed. */
void dt_restart_write(dt_restart *r, FILE *f, long step, double now);
/* Records the replaced layout for the line (how: "fewer replicas" or "re-planned"). */
void dt_restart_layout(dt_restart *r, const char *how, const char *from, const char *to);
/* The wall clock as unix seconds, what the launcher's `date +%s.%N` gives. */
double dt_restart_clock(void);

#endif
