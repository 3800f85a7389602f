/* parallel/shard.h - sharded data parallelism (ZeRO stages 1, 2 and 3) on the data axis, over the
 * all-reduce's buckets: which part of each bucket a rank owns, the reduce-scatter and all-gather
 * that move them, the optimizer on the owned parts, and the gradient norm's fixed block order
 * that every stage and rank count shares (so reproducible mode stays bitwise).
 *
 * Ownership: every bucket (dp.h's, cut from the graph alone) is split into D parts on a grid of
 * DT_SHARD_BLOCK floats from the bucket's start; rank r owns part r of EVERY bucket (as FSDP's flat
 * units), so each bucket's reduce-scatter starts when its layers' backward is done, exactly as the
 * all-reduce did, and every rank owns about 1/D of each. A rank's owned floats are kept compact:
 * part j of its moments lies at coff[j]; its parts of the gradient stay where they lie in g->grads.
 *
 * Stage 3 keeps the parameters and gradients where they lie too, in g's paged buffers (util/pages.h):
 * only this rank's parts are resident between steps. Before a layer's forward and backward (the
 * graph's need hook) its bucket is all-gathered in place, the next bucket the walk needs is
 * prefetched, and at most two buckets' other parts are resident at once (the least recently used is
 * handed back first); a bucket's gradient beyond this rank's part is handed back when its
 * reduce-scatter is done, every parameter bucket after the update. Every rank of the data axis must
 * issue the same gathers in the same order: a rank that walks fewer micro-batches or evaluation
 * pieces than the others walks the rest idle (dt_shard_walk_idle), and the walks that are not one
 * plain forward and backward (pipelines, reproducible chunks, recomputation) gather every bucket
 * for the step (dt_shard_gather_all). */
#ifndef DT_SHARD_H
#define DT_SHARD_H

#include <stddef.h>
#include "graph/graph.h"
#include "parallel/comm.h"

/* The norm's block: sums of squares are taken per block of this many floats of a bucket (from its
 * start) in double and added in block order, so a shard boundary never cuts a block. */
#define DT_SHARD_BLOCK 1024

struct dt_bucket;
struct dt_optim_hp;

typedef struct dt_shard {
        int stage;              /* effective: 0 (nothing sharded, also on one rank), 1, 2 or 3 */
        int D, r;               /* data-axis ranks, this rank */
        dt_comm *comm;
        dt_graph *g;
        int nb;                 /* buckets, in ascending offset order below */
        size_t *off, *len;      /* (nb) each bucket's slice of the flat buffers */
        int *cnt, *dsp;         /* (nb x D) each rank's part of each bucket: floats and offset in it */
        size_t *coff;           /* (nb) where this rank's part of bucket j lies in its compact buffers */
        size_t *blk0;           /* (nb) the bucket's first block in the norm's block order */
        size_t nblk;            /* blocks in all */
        double *part;           /* (nblk) per-block sums of squares */
        size_t n;               /* floats this rank owns (g->nparams at stage 0) */
        /* stage 2's ring (dt_shard_start_bucket): buckets queued, the step of the one in flight */
        int *queue, head, tail, step;
        MPI_Request rq[2];
        float *tmp;             /* the part being received */
        /* stage 3: the parameters gathered bucket by bucket */
        int *lb;                /* (g->n) the bucket holding layer i's parameters; -1 none */
        int *nxt;               /* (2 x g->n) the next other bucket a forward [0] or backward [1]
                                 * walk needs after layer i; -1 none */
        int *res;               /* (nb) 0 handed back, 1 all-gather in flight, 2 gathered */
        int *gres;              /* (nb) the gradient's other parts resident (made so before the
                                 * bucket's first backward, in one call: see need in shard.c) */
        long *stamp, clock;     /* (nb) last use, for handing back the least recent */
        MPI_Request *grq;       /* (nb) */
        int pinned;             /* every bucket gathered until dt_shard_release */
        int bounded;            /* backward waits for the reduce-scatters to keep one bucket's
                                 * gradient in flight (dt_shard_bound_grads) */
        int waiting;            /* in a wait on the ring's own requests: no progress from inside */
        long fetches;           /* buckets gathered since init */
        /* measurements (dtrain bench): the all-gather of the parameters after the update (stage 3:
         * before the layers, the gathers' waits) */
        double t_gather;        /* seconds waited */
        long gather_bytes;      /* bytes this rank receives per step (stage 3: one forward and
                                 * one backward walk's) */
} dt_shard;

/* Ownership over dp's buckets (b[0..nb), last layer's first, as dt_dp_buckets fills them) for
 * 'stage' (the cluster spec's) on comm. On one rank every stage is stage 0. */
void dt_shard_init(dt_shard *sh, int stage, dt_comm *comm, dt_graph *g, const struct dt_bucket *b, int nb);
void dt_shard_free(dt_shard *sh);
/* Stage 3 without pipeline stages: before a bucket's gradient is made resident, backward waits
 * until at most one other bucket's reduce-scatter is queued or in flight (what plan/mem.c counts),
 * as FSDP2 waits for the previous reduce-scatter. Left to the pokes between layers the ring moved
 * on a step per layer at best: the 10-layer 2048-wide MLP on 4 ranks held most of its gradient's
 * buckets (-32% against the plan). Every other wait of the thread moves the ring on meanwhile
 * (dt_comm_set_progress), so a peer that waits in a tensor split's all-reduce for this rank never
 * leaves this rank waiting for its ring. A pipeline stage writes every bucket in its first
 * micro-batch and sums them after its last: nothing to bound. */
void dt_shard_bound_grads(dt_shard *sh, int on);
/* Stage 3 on paged parameters: the graph's parameters drawn layer by layer by draw(ud, layer), the
 * other ranks' parts handed back after each, so that no rank holds more than one layer's whole
 * (drawn whole and then handed back, the 10-layer 2048-wide MLP's 4 ranks peaked at 169 MiB
 * against 145 planned, during the initialisation; beside tensor splits, which drew the unsplit
 * model, 220 MiB). 0 (nothing done) otherwise. */
int dt_shard_init_params(dt_shard *sh, void (*draw)(void *ud, int layer), void *ud);
/* The floats of this rank's moments: sh->n. */
static inline size_t dt_shard_len(const dt_shard *sh)
{
        return sh->n;
}

/* Stage 2: queues bucket b's reduce-scatter of g->grads (a ring over the data axis, one bucket at
 * a time, started at once when none is in flight); progress moves it on without waiting (between
 * layers); drain waits for every queued one. Then this rank's part of each bucket's sum is where
 * the part lies in g->grads (the rest of g->grads holds partial sums). */
void dt_shard_start_bucket(dt_shard *sh, const struct dt_bucket *b);
void dt_shard_progress(dt_shard *sh);
void dt_shard_drain(dt_shard *sh);
/* Stage 2 without the exchange above (reproducible mode sums the whole gradient itself): the parts
 * already lie where the reduce-scatter leaves them; nothing to do. */
void dt_shard_keep(dt_shard *sh);

/* Each of the following takes g->grads and works on the owned parts only (all of it at stage 0). */
/* The sum of squares of the gradient's counted tensors (count(layer, k) != 0, NULL: all), per
 * block of DT_SHARD_BLOCK floats in double, the blocks added in order: the same bits whatever the
 * stage and the rank count (stage 2 exchanges the blocks' sums over the data axis). */
double dt_shard_sumsq(dt_shard *sh, const float *grads, int (*count)(void *ud, int layer, int k), void *ud);
/* Offset (in g->grads) of the first non-finite owned gradient, or SIZE_MAX. */
size_t dt_shard_first_nonfinite(const dt_shard *sh, const float *grads);
void dt_shard_scale(dt_shard *sh, float a, float *grads);
/* Zero what this rank owns of g->grads' range [off, off + len) (frozen layers). */
void dt_shard_zero(dt_shard *sh, float *grads, size_t off, size_t len);
/* The optimizer on the owned parts: parameters g->params, moments m, v compact (n floats). */
void dt_shard_optim(dt_shard *sh, const struct dt_optim_hp *hp, float lr, long t, float *grads, float *m, float *v);
/* Stage 1 and 2: every rank's updated parts of the parameters to every rank. */
void dt_shard_gather_params(dt_shard *sh);

/* Stage 3 (no-ops at the others): every bucket gathered and kept until release, which hands
 * every bucket's other parts back (after the update, after a whole model was read into g);
 * walk_idle issues the gathers of one forward walk (and a backward one when 'backward') without
 * computing, for a rank that walks less than its peers, and with h its backward's layer hooks too
 * (h->bwd_done after each layer's gathers, as a computed backward calls them: the gradient
 * buckets a micro-batch reduce-scatters start where its peers' start). */
void dt_shard_gather_all(dt_shard *sh);
void dt_shard_release(dt_shard *sh);
void dt_shard_walk_idle(dt_shard *sh, int backward, const dt_graph_hooks *h);
/* Stage 3 walking layer by layer with backward bounded: each micro-batch's gradient can be
 * reduce-scattered into this rank's parts as its backward goes (a bucket's other parts are zero
 * after its ring, its own part holds the sum so far, which the next ring adds exactly once), so
 * accumulating micro-batches keeps the bound instead of holding the whole gradient. */
int dt_shard_sums_each(const dt_shard *sh);
/* Stage 3: the gradient set to zero, its pages handed back (else the caller zeroes it). */
int dt_shard_zero_grads(dt_shard *sh);
/* Stage 3: whether the plain walks gather per layer (else the step gathers all at once). */
int dt_shard_per_layer(const dt_shard *sh);

/* The parts of flat range [p, q) (inside the buckets), in order: fn(ud, owner, lo, hi, cpos) for each
 * run [lo, hi) inside one rank's part, cpos where lo lies in this rank's compact buffers when it is
 * the owner (SIZE_MAX otherwise). Stage 1 to 3. */
void dt_shard_parts(const dt_shard *sh, size_t p, size_t q, void (*fn)(void *ud, int owner, size_t lo, size_t hi, size_t cpos),
                    void *ud);

/* Checkpoints: the compact moments of every rank into full (g->nparams floats) on data rank 0
 * (full may be NULL elsewhere); and the reverse, this rank's parts of full into compact. */
void dt_shard_gather(dt_shard *sh, const float *compact, float *full);
void dt_shard_take(const dt_shard *sh, const float *full, float *compact);

#endif
