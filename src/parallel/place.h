/* parallel/place.h - pinning ranks to cores when a node's ranks outnumber its cores (see place.c
 * for the rule and why). */
#ifndef DT_PLACE_H
#define DT_PLACE_H

#include <stddef.h>
#include "parallel/comm.h"

typedef struct dt_place_member {
        int group, stage, rank;         /* pipeline (replica x tensor + shard), stage, world rank */
} dt_place_member;

/* The core unit (0 .. units-1) of world rank 'rank' among the n ranks of one node: members sorted
 * by (group, stage, rank); with at least 'units' pipelines on the node, pipeline k takes unit
 * k mod units (its stages share it), else the i-th member takes unit i mod units. -1 when rank is
 * not a member. */
int dt_place_unit(const dt_place_member *members, int n, int rank, int units);

/* Collective over world. group: this rank's pipeline (replica x tensor + shard), stage: its
 * pipeline stage, threads: its compute threads. When the ranks of this node want more threads than
 * the cores they may use, binds every thread of this process to its share of those cores (the
 * ranks of one pipeline together, pipelines round robin; the main thread and the threads it starts
 * later) and returns 1 with the cores in desc
 * ("cpu 0"); otherwise, or with DTRAIN_BIND=0, changes nothing and returns 0. */
int dt_place_rank(const dt_comm *world, int group, int stage, int threads, char *desc, size_t n);

#endif
