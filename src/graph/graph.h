/* graph/graph.h - the layer graph: shapes inferred from the spec, parameters placed in one flat
 * buffer each (params, grads, buffers), activations planned for a maximum batch. Forward and
 * backward walk the layers in order; the loss sits outside the graph.
 *
 * The layers form a directed acyclic graph listed in topological order (the spec's): a layer reads
 * one or more tensors, by tensor id: 0 the graph's input act[0], i + 1 layer i's output act[i + 1],
 * and n + 1 + k a pipeline stage's k-th extra input (a tensor of an earlier stage that this stage
 * or a later one reads: what crosses the cut besides act[0]). Every activation is kept until
 * backward (its last reader in forward, the first in backward, is behind it). A tensor's gradient
 * is the sum over its readers: the first reader in backward writes it, the others add to it
 * (layer->acc), through one scratch buffer for the layers that only overwrite. */
#ifndef DT_GRAPH_H
#define DT_GRAPH_H

#include "spec/model_spec.h"
#include "spec/cluster_spec.h"
#include "layers/layer.h"

struct dt_rc;

/* One chunk of a rank's graph of several (virtual pipeline stages, graph/chunks.c): its layers
 * [lo, hi) of the graph, the tensors it receives (its extra inputs in ascending model id, then its
 * own first input: act[0] for chunk 0, an extra input for the others) and sends (its outputs, in
 * ascending model id), as graph tensor ids; and where its parameters sit in the model's flat
 * buffers (base) and in the graph's (at). */
typedef struct dt_graph_chunk {
        int lo, hi;
        int nin, *in_t, nout, *out_t;
        size_t param_base, buffer_base, nparams, nbuffers;
        size_t param_at, buffer_at;
        int nslots;             /* the slots this chunk uses (its busiest count in flight), set before
                                 * alloc and the memory plan; 0: all; its layers and inputs have no
                                 * copy in the slots beyond */
} dt_graph_chunk;

typedef struct dt_graph {
        const dt_model_spec *spec;
        int n;
        dt_layer *layers;
        dt_shape input;
        dt_backend *be;
        /* flat buffers (floats); layers hold views */
        size_t nparams;         /* trainable */
        size_t nbuffers;        /* non-trainable (running statistics) */
        float *params, *grads, *buffers;
        /* activations: act[0] is the input batch, act[i+1] the output of layer i; dact likewise.
         * act points into the current slot's set (dt_graph_use_slot); dact is one set shared by
         * the slots, since one backward runs at a time, except under keep_dact below. */
        int max_batch;
        float **act, **dact;
        double flops;           /* forward FLOPs per sample */
        /* micro-batch slots: what forward leaves for backward, one copy per micro-batch in flight
         * (a pipeline holds several): each slot has its activations and every layer's private
         * state (dropout masks, batch-norm statistics, recurrent gates, a device's reserve space) */
        int nslots, slot;
        float ***slot_act;      /* [nslots][n + 1] */
        void **slot_priv;       /* [nslots * n]: layer i's priv in slot s at s * n + i */
        /* a pipeline stage: layers [first, first + n) of the model (spec->layers[first + i]);
         * its parameters are the model's flat-buffer slice from param_base (buffer_base) */
        int first;
        size_t param_base, buffer_base;
        int input_grad;         /* backward also computes dact[0] (a stage that has a predecessor) */
        void *owned;            /* the layers' configurations when the graph made them (tensor shards) */
        /* set before alloc (zb-h1): a weight pass may run after other micro-batches' input passes,
         * so each slot keeps its own dact[i + 1] for every layer i with a split backward (what its
         * weight half reads); the rest, dact[0] included, stay shared. dact then points into the
         * current slot's set, slot_dact[s]. */
        int keep_dact;
        /* set before alloc (eval, predict): no gradients, no activation gradients; backward
         * must not run */
        int forward_only;
        float ***slot_dact;     /* [nslots][ntensors] under keep_dact, else NULL */
        /* the graph's extra inputs (a stage's): model tensor ids ascending, and shapes */
        int nx;
        int *x_id;
        dt_shape *x_shape;
        /* the tensors whose gradient comes from outside backward (the loss's act[n]; a stage's
         * tensors that a later stage reads), local ids in ascending model id: what a stage sends
         * forward and receives the gradients of */
        int nout;
        int *out_t;
        size_t gsum_per;        /* floats per sample of the gradient-summing scratch */
        float *gsum;
        /* recomputation (recompute.c), set at alloc when a layer is marked (dt_graph_set_recompute)
         * and not one whose output leaves the graph; NULL: every layer keeps its output per slot */
        struct dt_rc *rc;
        /* several chunks of the model (dt_graph_chunks; 0: a plain graph or one stage): each walk
         * runs only layers [lo, hi) when hi > 0 (a pipeline sets it to the chunk it runs); x_grad:
         * backward makes the extra inputs' gradients even where input_grad leaves act[0]'s out (the
         * first chunk of the first stage, whose later chunks take their inputs from other stages) */
        int nchunks;
        dt_graph_chunk *chunk;
        int lo, hi;
        int x_grad;
        /* set before alloc (partition.shard 3): params and grads are util/pages.h buffers, of which
         * the rank keeps only its parts resident and the rest only while a layer needs them */
        int paged;
        /* called before each layer's forward and backward, every walk's (partition.shard 3: the
         * layer's parameters gathered, the next layer's prefetched); NULL: nothing to do */
        void (*need)(void *ud, int layer, int backward);
        void *need_ud;
        /* set at alloc (graph/pairs.c): pair[i], layer i runs with layer i + 1 as one op each way
         * (dt_layer_ops.forward_pair); NULL: none paired */
        unsigned char *pair;
} dt_graph;

/* Called after each layer's forward or backward: data-parallel buckets start as their layers'
 * gradients complete; model-parallel collectives run where a split layer needs them. In the split
 * backward, bwd_done follows a layer's input half in the input pass (its dx is ready) and every
 * layer in the weight pass (its parameter gradients are complete): the data-parallel hooks belong
 * on the weight pass. */
typedef struct dt_graph_hooks {
        void (*fwd_done)(void *ud, int layer);
        void (*bwd_done)(void *ud, int layer);
        void *ud;
} dt_graph_hooks;

/* Builds layers, infers shapes and lays out parameters. Shape errors are reported at the
 * layer's file:line:col. Allocates nothing large. */
int dt_graph_build(dt_graph *g, const dt_model_spec *s, dt_diag *d);
/* A stage of a built model: layers [first, last) with their global indices (dropout keys), names
 * and shapes, offsets relative to the stage's slice of the flat buffers. Allocates nothing large;
 * free with dt_graph_free. */
void dt_graph_range(const dt_graph *full, int first, int last, dt_graph *out);
/* A rank's graph of nchunks chunks of a built model, chunk c layers [first[c], last[c]) (ascending,
 * not adjacent), one after another: layer i's model index is layers[i].index, each chunk reads only
 * its own layers' outputs and its own inputs (g->chunk[c]), the parameters are the chunks' slices
 * of the model's one after another. Allocates nothing large; free with dt_graph_free. */
void dt_graph_chunks(const dt_graph *full, int nchunks, const int *first, const int *last, dt_graph *out);
/* The chunks of src (dt_graph_chunks) onto dst, a graph of the same layers and tensors with its own
 * parameter sizes (a tensor shard's): ranges and tensors copied, the parameter places recounted. */
void dt_graph_copy_chunks(const dt_graph *src, dt_graph *dst);
/* Sets g->pair (graph/pairs.c) after the layers' setup; dt_graph_alloc_slots calls it. */
void dt_graph_pair_plan(dt_graph *g);
/* Nonzero (tests, measurements): no layers paired from the next dt_graph_pair_plan on */
extern int dt_graph_pairs_off;
/* Makes the walks run chunk c only (-1: every layer). */
void dt_graph_use_chunk(dt_graph *g, int c);
/* The slots tensor t of g has a copy in (its chunk's nslots; nslots without chunks), given S slots. */
int dt_graph_tensor_slots(const dt_graph *g, int t, int S);
/* Bytes a run with this batch and optimizer needs (params, grads, moments, activations,
 * their gradients, scratch), with overflow checks; SIZE_MAX when it overflows. */
size_t dt_graph_memory(const dt_graph *g, int batch, int nmoments);
/* The same with nslots micro-batch slots (activations and layer state counted per slot, and under
 * keep_dact the split layers' output gradients). */
size_t dt_graph_memory_slots(const dt_graph *g, int batch, int nmoments, int nslots);
/* Allocates buffers on be and calls each layer's setup; one slot. */
int dt_graph_alloc(dt_graph *g, dt_backend *be, int max_batch);
/* The same with nslots slots: each layer's setup runs once per slot. */
int dt_graph_alloc_slots(dt_graph *g, dt_backend *be, int max_batch, int nslots);
/* Makes slot s current: act and every layer's priv point at its copies. Slot 0 after alloc. */
void dt_graph_use_slot(dt_graph *g, int s);
/* Initialises parameters from seed (each tensor from its own stream, so adding a layer does not
 * change the others' values) and buffers to their defaults. */
void dt_graph_init_params(dt_graph *g, uint64_t seed);
/* The same for layer i alone (the values dt_graph_init_params gives it). */
void dt_graph_init_layer(dt_graph *g, int i, uint64_t seed);
/* Forward of B samples from act[0]; output in act[n]. */
void dt_graph_forward(dt_graph *g, const dt_fwd_ctx *c, int B);
/* Backward from dact[n] (set by the loss); accumulates into grads. */
void dt_graph_backward(dt_graph *g, const dt_fwd_ctx *c, int B);
/* The same with hooks after each layer (h may be NULL): one walk for every caller. */
void dt_graph_forward_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h);
void dt_graph_backward_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h);
/* The backward in zb-h1's two passes, each over every layer from the last: the input pass runs
 * backward_input where a layer has it and the whole backward elsewhere (dact[0] last, as above);
 * the weight pass runs backward_weight from what the input pass left in the same slot's act and
 * dact. Input then weight on one micro-batch gives dt_graph_backward's bits. */
void dt_graph_backward_input_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h);
void dt_graph_backward_weight_h(dt_graph *g, const dt_fwd_ctx *c, int B, const dt_graph_hooks *h);
/* Tensors of g: n + 1 + nx; the shape of tensor t; the model tensor id of t. */
int dt_graph_ntensors(const dt_graph *g);
const dt_shape *dt_graph_tensor_shape(const dt_graph *g, int t);
/* One layer's forward, or backward (half 0 the whole, 1 the input half, 2 the weight half), with its
 * inputs' tensors and their gradients (summed across readers) as the walks above use them: for
 * per-layer timing (bench, planner). */
void dt_graph_layer_forward(dt_graph *g, int i, const dt_fwd_ctx *c, int B);
void dt_graph_layer_backward(dt_graph *g, int i, const dt_fwd_ctx *c, int B, int half);
/* Layer l's output shape from its inputs' (their shapes set into l->ins and l->in), through infer or
 * infer_n; -1 with the reason in why. The tensors it reads must have their shapes already. */
int dt_graph_infer(const dt_graph *g, dt_layer *l, char *why, size_t n);
/* Once a graph's sources and outputs are set: who adds into a tensor's gradient. Walking backward,
 * the first reader of a tensor writes its gradient unless it came from outside (an output), every
 * later one adds (layer->acc); the layers that only overwrite add through gsum (its size set). */
void dt_graph_link(dt_graph *g);
/* ---- activation recomputation (recompute.c) ----
 * A recomputed layer keeps nothing per slot between its forward and its backward: its output lives
 * in one region shared by the slots only while forward's later readers need it, and backward remakes
 * it (with the layer's saved state: masks, batch statistics, gates) from the kept tensors just before
 * the first backward that reads it, running forward again over its segment (the run of recomputed
 * layers it belongs to) with the same context, so dropout masks and batch statistics come out the
 * same; buffers the forward updates (running statistics) are put back afterwards, so they are updated
 * once. The activations' gradients live in the region too, each only from its first writer to its
 * producer's backward. Split backwards (zb-h1) are refused at the key. */
/* Marks the layers r picks on g (the whole model, before any cut): none; a list (every layer a
 * pattern matches); auto (the memory-bound kinds, those with a traffic figure: activation, batch
 * norm, pooling, dropout, flatten, concat, whose forward is cheap against the bytes it keeps); all
 * (Chen et al. 2016: every layer but one checkpoint per window of ceil(sqrt(n)) layers, the window's
 * smallest output among those that are the only tensor crossing to the next layer, the later on a
 * tie). The last layer's output goes to the loss and is always kept. */
void dt_graph_set_recompute(dt_graph *g, const dt_recompute_rules *r);
/* Whether layer i's output is dropped and remade in this graph (marked, and not one of its outputs). */
int dt_graph_recomputed(const dt_graph *g, int i);
/* Bytes layer i keeps in each slot between its forward and its backward at this batch: its output and
 * saved state (the scratch op), or 0 when recompute is set (then only the shared region holds them,
 * while needed; dt_graph_memory_slots counts that once). For the memory plan. */
size_t dt_graph_layer_kept_bytes(const dt_graph *g, int i, int batch, int recompute);
/* Bytes of the one region recomputation shares at this batch (the recomputed outputs while needed,
 * every internal activation gradient from its first writer to its producer's backward, and the
 * copy of a segment's running statistics); 0 when g recomputes nothing. dt_graph_memory_slots
 * counts, for activations: the inputs per slot, dt_graph_layer_kept_bytes per slot for each kept
 * layer, a recomputed layer's saved state once, the gradients outside the region, and this. */
size_t dt_graph_recompute_region_bytes(const dt_graph *g, int batch);
/* Seconds spent remaking layer i's output since alloc or the last reset (bench's recompute column). */
double dt_graph_recompute_seconds(dt_graph *g, int i, int reset);
/* For walks by hand (bench's per-layer clocks): point the recomputed tensors at the forward's or the
 * backward's places (before the first layer of either), and remake what layer i's backward reads
 * (before it). No-ops without recomputation. */
void dt_graph_walk_begin(dt_graph *g, int backward);
void dt_graph_recompute_for(dt_graph *g, int i, const dt_fwd_ctx *c, int B);
/* Whether any layer names its inputs (the graph branches). */
int dt_graph_branches(const dt_graph *g);
/* Whether layer i's output gradient dact[i + 1] is kept per slot (keep_dact and a split layer). */
int dt_graph_dact_per_slot(const dt_graph *g, int i);
void dt_graph_free(dt_graph *g);

/* Asks every layer whether the backend kind 'backend' with capabilities caps can run it; each
 * refusal is reported at the layer's file:line:col. Returns 0 or -1. */
int dt_graph_check_backend(const dt_graph *g, const char *backend, unsigned caps, dt_diag *d);

/* Prints the layer table: name, type, output shape, parameters, FLOPs per sample; under
 * train.freeze the frozen layers marked and trainable and frozen rows below the total. */
void dt_graph_print_table(const dt_graph *g, FILE *f);
/* Finds the tensor called "layer.suffix"; returns its layer and param index. */
int dt_graph_find_tensor(const dt_graph *g, const char *name, int *layer, int *param);

#endif
