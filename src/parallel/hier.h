/* parallel/hier.h - two-level all-reduce of the gradient buckets: the data axis's ranks on one node
 * reduce-scatter each bucket among themselves (shared memory), each rank that owns a segment
 * all-reduces it with the same node rank of the other nodes (the network; every owner of a node
 * crosses at once, both directions of a link at once), and the owners all-gather the sums in the
 * node. Nonblocking, bucket by bucket, overlapped with backward like the flat path; the sum's order
 * differs from the flat all-reduce's (equal within rounding, not bits). */
#ifndef DT_HIER_H
#define DT_HIER_H

#include "parallel/comm.h"
#include "spec/cluster_spec.h"

typedef struct dt_hier {
        int on;                 /* 0: the caller uses the flat all-reduce */
        int nodes, most;        /* nodes the data axis spans, most of its ranks on one node */
        int owners;             /* the fewest ranks on a node: node ranks below it own a segment */
        dt_comm node;           /* this node's ranks of the axis, in the axis's order */
        dt_comm peers;          /* the same node rank on every node: one segment's owners */
        int nbuckets;           /* the caller's buckets; bucket b goes as chunks first[b] .. first[b + 1] - 1 */
        int *first;
        int nb, nreq;           /* chunks; requests a chunk's phase may hold */
        unsigned char *phase;   /* per chunk: idle, scatter, held (for the one before), cross, gather, done */
        MPI_Request *req;       /* nb x nreq */
        float **buf;
        int *len;
        float *tmp;             /* an owner's receive slots, per bucket at tmp + off[j] */
        size_t *off;
} dt_hier;

/* Which ranks share a node: MPI_COMM_TYPE_SHARED on data's communicator, or, when the environment
 * sets DTRAIN_HIER_RANKS_PER_NODE=K (tests on one machine), consecutive groups of K ranks of the
 * axis; h->nodes and h->most say what was found, on or off.
 * mode: 0 auto (on when the axis spans several nodes and one holds several ranks), 1 off, 2 on
 * (as dtrain-cluster(5)'s partition.hierarchical; auto chooses by dt_hier_choose on the cluster
 * spec's links, cs NULL: the defaults, for the buckets' sizes bytes[nb]). Collective over data;
 * every rank decides the same. nb buckets at most are in flight, bucket j of bytes[j] bytes at most
 * (its receive slots are sized by them). */
void dt_hier_init(dt_hier *h, dt_comm *data, int mode, const dt_cluster_spec *cs, const double *bytes, int nb);
void dt_hier_free(dt_hier *h);
/* Starts bucket j's sum of x (n floats, host memory; the same n on every rank). Buckets start in
 * index order on every rank. */
void dt_hier_start(dt_hier *h, int j, float *x, int n);
/* Lets the buckets in flight move to their next phase (no waiting). */
void dt_hier_progress(dt_hier *h);
/* Waits until every started bucket holds the sum; they are idle again on return. */
void dt_hier_finish(dt_hier *h);

/* ---- the two paths' costs (the planner predicts with them too) ---- */
typedef struct dt_hier_link {
        double alpha, beta;     /* seconds per message, per byte */
        double gamma;           /* seconds per byte of a sum's work */
        double eager;           /* bytes sent at once; the rest after the receiver's answer (0: all) */
} dt_hier_link;
/* Seconds to sum n bytes over D ranks of an axis whose nodes hold 'local' consecutive ranks:
 * flat, Open MPI's nonblocking all-reduce of a buffer in place (libnbc's ring, as main.c asks, or
 * its binomial tree where OMPI_MCA_coll_libnbc_iallreduce_algorithm says 0 or 2; each round's
 * messages on the network once a pair spans nodes), and two, this file's path (node
 * reduce-scatter, the owners' all-reduce across the nodes, node all-gather; across 2 nodes in
 * dt_hier_chunks' chunks, the first chunk's scatter and the last one's gather beside the bucket's
 * crossing). A link is full duplex and its bandwidth shared by the messages that leave a node at
 * once. */
void dt_hier_cost(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n, double *flat,
                  double *two);
/* The chunks a bucket of n bytes goes in across 2 nodes whose owners hold S segments: each owner's
 * part of a chunk within the link's eager limit (64 KiB where it has none), at most 64. A chunk's
 * node steps then run beside the other chunks' crossing, and no crossing waits for its receiver's
 * answer: on 2 emulated nodes x 2 ranks at 1 Gbit, 8 chunks of a 0.94 MB bucket summed in 10.4
 * against 11.2 ms whole. More nodes (libnbc's all-reduce between the owners): 1. */
int dt_hier_chunks(const dt_hier_link *inter, int nodes, int S, double n);
/* The links the choice weighs: the cluster spec's network keys (cs NULL: their defaults) and,
 * inside a node, intra_latency_us and intra_bandwidth_gbs or nominal shared memory (4 us, 8 GB/s):
 * nothing measured, so every rank and the planner choose alike. */
void dt_hier_links(const dt_cluster_spec *cs, dt_hier_link *intra, dt_hier_link *inter);
/* Whether the two-level path runs: mode 2 (true) yes, 1 (false) no, 0 (auto) where the axis spans
 * several nodes, one holds several ranks, and the buckets (bytes[nb]) are predicted no slower
 * two-level (a tie goes to it: equal costs are the same rounds). */
int dt_hier_choose(int mode, int nodes, int local, const dt_hier_link *intra, const dt_hier_link *inter, int D,
                   const double *bytes, int nb);

#endif
