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

typedef struct dt_bucket {
        size_t off, len;        /* slice of the flat gradient buffer */
        int first_layer;        /* the bucket is complete when this layer's backward is done */
        MPI_Request req;
        int started;
} dt_bucket;

typedef struct dt_dp {
        dt_comm *comm;
        const dt_cluster_spec *cs;
        dt_graph *g;
        int nb;
        dt_bucket *b;
        /* compression */
        uint16_t *half;         /* fp16: nparams halves */
        float *residual;        /* topk: error feedback, nparams */
        int32_t *tk_idx;        /* topk: send/recv index buffers */
        float *tk_val;
        /* measurements (dtrain bench) */
        double t_comm_wait;     /* seconds the step waited for communication after backward */
        double t_backward;      /* seconds of backward */
        long bytes;             /* bytes reduced per step */
        struct dt_devcomm *dev; /* device backend: its allreduce path (parallel/devcomm.h); NULL on cpu */
} dt_dp;

void dt_dp_init(dt_dp *dp, dt_comm *comm, const dt_cluster_spec *cs, dt_graph *g);
void dt_dp_free(dt_dp *dp);

/* allreduce: called by backward after each layer (in reverse order); starts the buckets that are
 * complete and lets in-flight ones progress. */
void dt_dp_layer_done(void *dp, int layer);
/* allreduce: starts whatever was not started (all of it when backward ran without the hook) and
 * waits; on return g->grads holds the sum over ranks. */
void dt_dp_finish(dt_dp *dp);
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
/* Last step pushed and not yet applied + 1 (= next step to apply). */
long dt_ssp_next(const dt_ssp *s);

#endif
