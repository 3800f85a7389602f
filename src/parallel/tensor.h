/* parallel/tensor.h - intra-layer model parallelism (tensor parallelism): the layers of a graph
 * split across the ranks of a tensor group, each rank holding a shard of their parameters,
 * gradients, moments and activations. fc pairs as in Megatron-LM (a column split, then a row split
 * that takes the column's shard as its input: one all-reduce forward and one backward for the
 * pair); conv splits its output channels; rnn, lstm and gru split the hidden units of every gate.
 * The plan says which layer splits how; the layers do the collectives through a dt_tp (layer.h)
 * that this file implements over one axis of the process grid, with the run's deadline.
 *
 * Every rank of a group sees the same samples, so what is not split (a replicated tensor, the
 * loss) is computed identically on each, and the whole model is the shards put back together:
 * checkpoints hold full tensors under their PyTorch names (dt_tp_runs says which runs of each a
 * shard holds) and a resume under any plan takes its own shard from the full tensors. */
#ifndef DT_TENSOR_PARALLEL_H
#define DT_TENSOR_PARALLEL_H

#include "graph/graph.h"
#include "parallel/comm.h"
#include "spec/cluster_spec.h"

/* Which layer of a graph splits how. pl[i].split and pl[i].gather are the plan; dt_tp_graph fills
 * the rest of each placement. */
typedef struct dt_tp_plan {
        int n, t;
        dt_placement *pl;       /* [n] */
} dt_tp_plan;

/* The plan for an unsplit graph g (the model, or one pipeline stage of it) on a tensor group of t:
 * the cluster spec's splits (the first pattern that matches a layer's name wins; unmatched layers
 * stay whole), or with none given every layer that can split, by its kind's first ALONE or OPENS
 * way (layer.h's dt_split_way) when the sizes divide by t: an OPENS layer followed (through PASSES
 * layers only) by a layer that CLOSES its split pairs with it (fc column then row, through
 * activation and dropout), else it is gathered when worth its min_work (fc: I O / (I + O) >= 64);
 * an ALONE layer splits (conv by channel; rnn, lstm and gru by hidden unit). Errors at the splits
 * key's entries: a pattern that names no layer of the model, a layer that cannot split that way,
 * sizes that do not divide, a closing split (row) with no opening one (column) before it in the
 * same stage; without splits, at the tensor key, a required way (attention's heads) whose sizes do
 * not divide. */
int dt_tp_plan_make(const dt_cluster_spec *cs, const dt_graph *g, int t, dt_tp_plan *p, dt_diag *d);
void dt_tp_plan_free(dt_tp_plan *p);
/* "fc1 column, fc2 row, fc3 column (gathered)": the layers that split, for messages. */
void dt_tp_plan_str(const dt_tp_plan *p, const dt_graph *g, char *buf, size_t len);

/* The collectives of the tensor axis for the layers. axis must outlive tp. */
void dt_tp_init(dt_tp *tp, dt_comm *axis);
void dt_tp_free(dt_tp *tp);

/* This rank's graph: g's layers with the split ones replaced by their shards (local shapes,
 * parameters and offsets in local flat buffers), placements set. The layer count, names and global
 * indices are g's. Allocates nothing large; free with dt_graph_free. */
void dt_tp_graph(const dt_graph *g, const dt_tp_plan *p, const dt_tp *tp, dt_graph *out);

/* Flat buffers between g's layout (whole tensors) and local's (this shard's), for the trainable
 * parameters (trainable 1: parameters, gradients, moments) or the buffers (0). */
void dt_tp_take(const dt_graph *g, const dt_graph *local, int trainable, const float *whole, float *mine);
/* The runs of whole elements [p, q) of one tensor (whole's spec; mine: member r's of a group of t)
 * that member r holds, in order: fn(ud, lo, hi, at), at where lo lies in its shard (a tensor that
 * is not split: one run, at = lo). What a checkpoint streams or reads of a part without the whole. */
void dt_tp_runs(const dt_param_spec *whole, const dt_param_spec *mine, size_t t, size_t r, size_t p, size_t q,
                void (*fn)(void *ud, size_t lo, size_t hi, size_t at), void *ud);
/* Collective over axis: member 0 receives every member's shard into whole (g's layout), one tensor
 * at a time (member 0 holds one tensor's shards besides whole). */
void dt_tp_gather(dt_comm *axis, const dt_graph *g, const dt_graph *local, int trainable, const float *mine,
                  float *whole);

/* local's parameters and buffers as one rank initialises g's from seed (every tensor drawn whole,
 * then cut), so a split run starts where an unsplit one does. local is allocated. */
void dt_tp_init_params(const dt_graph *g, dt_graph *local, uint64_t seed);
/* Layer i alone, as dt_tp_init_params draws it (shard 3 draws layer by layer, handing the data
 * axis's other parts back after each). */
void dt_tp_init_layer(const dt_graph *g, dt_graph *local, int i, uint64_t seed);
/* The floats dt_tp_init_params holds at its peak for the unsplit g: its largest layer's tensors,
 * and on a device backend (not 'host') the draw of its largest tensor, which a host one draws in
 * place (dt_graph_init_layer) (the memory plan counts them). */
size_t dt_tp_init_floats(const dt_graph *g, int host);

/* The collectives a split layer runs for b samples (what dtrain check reports and the planner
 * prices), as its kind declares them: each is an all-reduce or all-gather of 'floats' (the
 * all-gather's whole result), in forward or backward, 'repeat' times (the time steps of a recurrent
 * layer; of its first stacked layer only, as the planner has always counted them). dx: backward makes an
 * input gradient. Returns the count (at most 3). */
typedef struct dt_tp_coll {
        int gather;             /* 0 all-reduce, 1 all-gather */
        int backward;
        double floats;
        int repeat;
} dt_tp_coll;
int dt_tp_layer_colls(const dt_layer *l, long b, int dx, dt_tp_coll out[3]);

/* 1 when tensor k of local's layer i counts in the whole model's gradient norm on this rank:
 * split (a shard of its own), or replicated and this rank is its group's member 0. */
int dt_tp_counted(const dt_graph *g, const dt_graph *local, int i, int k);
/* The part of the whole model's squared gradient norm this rank adds: its shards' squares, plus the
 * replicated tensors' on member 0 only, so the sum over the group counts each element once. local is
 * allocated (the backend's vectorised sum of squares runs per tensor). */
double dt_tp_sumsq(const dt_graph *g, const dt_graph *local, const float *grads);

#endif
