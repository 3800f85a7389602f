/* parallel/hier.h - two-level all-reduce of the gradient buckets: the data axis's ranks on one node
 * reduce to their node leader (shared memory), the leaders all-reduce across the network, each
 * leader broadcasts the sum to its node. Nonblocking, bucket by bucket, overlapped with backward
 * like the flat path; the sum's order differs from the flat ring (equal within rounding, not bits). */
#ifndef DT_HIER_H
#define DT_HIER_H

#include "parallel/comm.h"

typedef struct dt_hier {
        int on;                 /* 0: the caller uses the flat all-reduce */
        int nodes, most;        /* nodes the data axis spans, most of its ranks on one node */
        dt_comm node_red;       /* this node's ranks of the axis, for the reduce ... */
        dt_comm node_bc;        /* ... and the same for the broadcast: their orders differ */
        dt_comm leaders;        /* the nodes' leaders (node rank 0); others: same-local-rank peers, unused */
        int nb;
        unsigned char *phase;   /* per bucket: 0 idle, 1 reduce, 2 leaders, 3 broadcast, 4 done */
        MPI_Request *req;
        float **buf;
        int *len;
} dt_hier;

/* Which ranks share a node: MPI_COMM_TYPE_SHARED on data's communicator, or, when the environment
 * sets DTRAIN_HIER_RANKS_PER_NODE=K (tests on one machine), consecutive groups of K ranks of the
 * axis; h->nodes and h->most say what was found, on or off.
 * mode: 0 auto (on when the axis spans several nodes and one holds several ranks), 1 off, 2 on
 * (as dtrain-cluster(5)'s partition.hierarchical). Collective over data; every rank decides the
 * same. nb buckets at most are in flight. */
void dt_hier_init(dt_hier *h, dt_comm *data, int mode, int nb);
void dt_hier_free(dt_hier *h);
/* Starts bucket j's sum of x (n floats, host memory). Buckets start in index order on every rank. */
void dt_hier_start(dt_hier *h, int j, float *x, int n);
/* Lets the buckets in flight move to their next phase (no waiting). */
void dt_hier_progress(dt_hier *h);
/* Waits until every started bucket holds the sum; they are idle again on return. */
void dt_hier_finish(dt_hier *h);

#endif
