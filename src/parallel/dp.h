/* parallel/dp.h - data-parallel gradient synchronisation for the modes of dtrain-cluster(5):
 * bucketed allreduce overlapped with backward (optionally fp16- or top-k-compressed), parameter
 * averaging every k steps, stale-synchronous parallel, and the reproducible chunk-tree sum. The
 * trainer computes this rank's gradient; these functions turn it into what the optimizer uses. */
#ifndef DT_DP_H
#define DT_DP_H

#include <stdint.h>
#include "graph/graph.h"
#include "parallel/comm.h"
#include "spec/cluster_spec.h"
#include "parallel/shard.h"
#include "parallel/hier.h"

typedef struct dt_bucket {
        size_t off, len;        /* slice of the flat gradient buffer */
        int first_layer;        /* the bucket is complete when this layer's backward is done */
        MPI_Request req;        /* its all-reduce; a bucket over DT_COMM_PIECE_BYTES goes in pieces,
                                 * whose requests are dp->piece[p0 .. p0 + npiece) instead */
        int p0, npiece;
        int h0;                 /* the two-level path's index of its first piece (or of it) */
        int started;
        void *x;                /* what its all-reduce sums in place: x[len] of esz bytes, type t, op */
        size_t esz;
        MPI_Datatype t;
        MPI_Op op;
} dt_bucket;

/* The most bytes of gradient all-reduces in flight at once on a rank (at least one goes whatever
 * its size); the rest wait their turn in order. Open MPI's libnbc gives each nonblocking all-reduce
 * a temporary buffer of its size for as long as it is in flight, and a rank whose peer is late (its
 * checkpoint's copy at an epoch's end) had every piece of its gradient in flight: the 10-layer
 * 2048-wide MLP's rank 1 held 78 MiB of them beyond its plan of 284. The memory plan counts this
 * (dt_dp_inflight_bytes). One of DT_COMM_PIECE_BYTES's pieces: what a rank holds then is what the
 * plan says whether its peers keep pace or not. At 32 MiB six 4 MiB buckets whose ranks kept pace
 * peaked 20 MiB under that plan (+15-19%); the step times of 2 ranks, Xeon (dtrain bench, medians
 * of 10-15): mlp-4096 110.6 and 110.1 ms at 8 MiB, 109.6 and 111.0 at 32, 110.8 and 110.1 without
 * a limit; the 10-layer MLP 206.7 and 217.0, 206.2 and 211.6, 203.1 and 209.4. */
#define DT_DP_INFLIGHT_BYTES (8L << 20)

/* topk: one parameter tensor of a bucket, which sends k of its len entries a step (k == len: all,
 * dense; 0: none, a buffer). */
typedef struct dt_topk_seg { size_t off, len, k; } dt_topk_seg;

typedef struct dt_dp {
        dt_comm *comm;
        const dt_cluster_spec *cs;
        dt_graph *g;
        int nb;
        dt_bucket *b;
        MPI_Request *piece;     /* the pieces of the buckets that need several all-reduces */
        struct dt_dp_q { int b, piece; } *q;    /* this step's all-reduces in the order they were
                                 * asked for (bucket b's piece, -1 its whole) */
        int nq, qpost, qdone;   /* how many are queued, posted (every rank posts them in that order)
                                 * and known complete from the start */
        /* compression */
        uint16_t *half;         /* fp16: nparams halves */
        float *residual;        /* topk: error feedback, nparams */
        int32_t *tk_idx;        /* topk: send/recv index buffers */
        float *tk_val;
        struct dt_topk_seg *tk_seg;     /* topk: the tensors of each bucket, what each sends */
        int *tk_first;          /* per bucket: its tensors are tk_seg[tk_first[j] .. tk_first[j + 1]) */
        /* measurements (dtrain bench) */
        double t_comm_wait;     /* seconds the step waited for communication after backward */
        double t_backward;      /* seconds of backward */
        long bytes;             /* bytes reduced per step */
        long step;              /* the optimizer step in progress (the trainer sets it) */
        struct dt_devcomm *dev; /* device backend: its allreduce path (parallel/devcomm.h); NULL on cpu */
        struct dt_cx *cx;       /* bf16, powersgd, threshold (parallel/compress.h); NULL otherwise */
        dt_shard sh;            /* partition.shard: who owns which part of each bucket (parallel/shard.h) */
        dt_hier hier;           /* partition.hierarchical: the two-level path (parallel/hier.h) */
        float *repro;           /* reproducible: the chunk tree's node sums and partial sums */
        size_t repro_cap;       /* floats in repro */
} dt_dp;

/* The bytes the flat gradient sum's all-reduces hold in flight at most on a rank of a data axis of
 * a graph cut into bucket_mb buckets, esz bytes an entry (4; 2 under fp16 compression): their
 * temporaries, min(DT_DP_INFLIGHT_BYTES, the gradient) but at least its largest single all-reduce. */
double dt_dp_inflight_bytes(const dt_graph *g, double bucket_mb, size_t esz);
/* The bytes an entry of the gradient's flat all-reduces takes under cs (4, 2 under fp16), or 0 where
 * the step's gradient sum is not theirs (average, ssp, shard 2 and 3's reduce-scatter, a
 * compressor's own exchange without dense warm-up steps) at ZeRO stage shard. On a host-memory backend. */
int dt_dp_sum_esz(const dt_cluster_spec *cs, int shard);

/* The buckets are set here; a setting this run cannot honour (dt_cluster_spec_validate_run) is an
 * internal error, never an exit. */
void dt_dp_init(dt_dp *dp, dt_comm *comm, const dt_cluster_spec *cs, dt_graph *g);
/* The bucket cut, a pure function of g's layout (built; nothing allocated): slices of about
 * bucket_mb MiB (at least 1024 floats) cut at layer boundaries from the last layer, the last
 * bucket ending at the first layer with gradients. b has room for g->n entries; returns how many
 * it filled, last layer's first. */
int dt_dp_buckets(const dt_graph *g, double bucket_mb, dt_bucket *b);
void dt_dp_free(dt_dp *dp);

/* allreduce: called by backward after each layer (in reverse order); starts the buckets that are
 * complete and lets in-flight ones progress. */
void dt_dp_layer_done(void *dp, int layer);
/* The graph hooks that call dt_dp_layer_done after each layer's backward. */
dt_graph_hooks dt_dp_hooks(dt_dp *dp);
/* allreduce: starts whatever was not started (all of it when backward ran without the hook) and
 * waits; on return g->grads holds the sum over ranks (shard 2: this rank's parts of it, in
 * dp->sh's compact gradient, each bucket reduce-scattered instead). */
void dt_dp_finish(dt_dp *dp);
/* The compressor's state a checkpoint keeps (parallel/compress.h): topk's residual, or bf16's,
 * powersgd's or threshold's; all empty when the method keeps none or the data axis is one rank. */
struct dt_cx_state;
void dt_dp_cx_state(dt_dp *dp, struct dt_cx_state *out);
/* x (n floats, the backend's memory: host or device) = its sum over the ranks. */
void dt_dp_allreduce(dt_dp *dp, float *x, size_t n, const char *what);
/* average: parameters (and optimizer moments) replaced by their mean over ranks. */
void dt_dp_average(dt_dp *dp, float *m, float *v);

/* ---- gradient of a slice of the global batch, supplied by the trainer ---- */
/* Runs forward and backward on global-batch positions [lo, hi) and ACCUMULATES into g->grads;
 * adds the summed loss and the correct count into stats. */
typedef void (*dt_grad_fn)(void *ud, int lo, int hi, double stats[2]);

/* reproducible: g->grads = sum of the gradients of 'chunks' equal chunks of a global batch of B,
 * added in one fixed binary-tree order whatever the rank count, so every rank count gives the same
 * bits. Each rank computes the tree nodes that cover its chunks; the nodes are all-gathered and
 * the rest of the tree is added the same way on every rank. stats are summed over ranks. */
void dt_repro_grads(dt_dp *dp, int B, int chunks, dt_grad_fn fn, void *ud, double stats[2]);

/* The tree, apart from MPI. A node sums chunks [lo, hi); its children split at lo + (hi - lo) / 2. */
typedef struct dt_repro_node { int lo, hi; } dt_repro_node;
/* A rank covers at most two nodes per tree level: 66 is enough for any int chunk count. */
#define DT_REPRO_MAX_NODES 66
/* The nodes rank computes: the largest ones inside its chunks [chunks rank / size, chunks
 * (rank + 1) / size), left to right. Returns their count (<= DT_REPRO_MAX_NODES). */
int dt_repro_cover(int chunks, int size, int rank, dt_repro_node *out);
/* The nodes of all ranks together: nparams floats each are gathered every step. */
long dt_repro_nodes(int chunks, int size);
/* The buffers of the rank's whole gradient dt_repro_grads holds at once beside g->grads on rank
 * 'rank' of 'size' (-1: the most of any rank): every rank's node sums, gathered, and one partial
 * sum per depth of its recursions (its own nodes', and the finish above them). */
int dt_repro_buffers(int chunks, int size, int rank);

/* ---- stale-synchronous parallel ---- */
typedef struct dt_ssp dt_ssp;
/* Called with each step's summed gradient, in step order, exactly once per step. */
typedef void (*dt_ssp_apply_fn)(void *ud, long step, float *sum);
dt_ssp *dt_ssp_new(dt_comm *comm, dt_graph *g, int staleness);
void dt_ssp_free(dt_ssp *s);
/* Sends this rank's gradient of step t (g->grads) to every rank. */
void dt_ssp_push(dt_ssp *s, long t);
/* Applies, in order, every step up to 'upto' (waiting for the ones not complete) and any later
 * step whose contributions have all arrived. upto < 0: only what is complete. */
void dt_ssp_apply(dt_ssp *s, long upto, dt_ssp_apply_fn fn, void *ud);

/* The bookkeeping of the receive ring, apart from MPI. Step t lives in slot t % W until it is
 * applied. The trainer applies up to t - s - 1 before it computes (and pushes) step t, so at most
 * s + 1 steps are outstanding at a push and W = staleness + 2 slots always have room. */
typedef struct dt_ssp_ring {
        int W;                  /* slots */
        long next_apply;        /* first step not yet applied */
        long pushed;            /* steps pushed so far */
} dt_ssp_ring;
void dt_ssp_ring_init(dt_ssp_ring *r, int staleness);
int dt_ssp_ring_slot(const dt_ssp_ring *r, long t);
/* 1 when step t may be pushed: the next one, and its slot no longer holds a step not applied. */
int dt_ssp_ring_can_push(const dt_ssp_ring *r, long t);
/* dt_ssp_apply's order: the pushed steps from next_apply on, each once; a step up to upto is
 * waited for (arrived(ud, t, 1) waits and returns 1), a later one only taken when it has arrived
 * (arrived(ud, t, 0)); apply(ud, t) then runs and next_apply moves past it. */
void dt_ssp_ring_apply(dt_ssp_ring *r, long upto, int (*arrived)(void *ud, long t, int wait),
                       void (*apply)(void *ud, long t), void *ud);

#endif
