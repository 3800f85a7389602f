/* graph/graph.h - the layer graph: shapes inferred from the spec, parameters placed in one flat
 * buffer each (params, grads, buffers), activations planned for a maximum batch. Forward and
 * backward walk the layers in order; the loss sits outside the graph. */
#ifndef DT_GRAPH_H
#define DT_GRAPH_H

#include "spec/model_spec.h"
#include "layers/layer.h"

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
        /* activations: act[0] is the input batch, act[i+1] the output of layer i; dact likewise */
        int max_batch;
        float **act, **dact;
        double flops;           /* forward FLOPs per sample */
} dt_graph;

/* Builds layers, infers shapes and lays out parameters. Shape errors are reported at the
 * layer's file:line:col. Allocates nothing large. */
int dt_graph_build(dt_graph *g, const dt_model_spec *s, dt_diag *d);
/* Bytes a run with this batch and optimizer needs (params, grads, moments, activations,
 * their gradients, scratch), with overflow checks; SIZE_MAX when it overflows. */
size_t dt_graph_memory(const dt_graph *g, int batch, int nmoments);
/* Allocates buffers on be and calls each layer's setup. */
int dt_graph_alloc(dt_graph *g, dt_backend *be, int max_batch);
/* Initialises parameters from seed (each tensor from its own stream, so adding a layer does not
 * change the others' values) and buffers to their defaults. */
void dt_graph_init_params(dt_graph *g, uint64_t seed);
/* Forward of B samples from act[0]; output in act[n]. */
void dt_graph_forward(dt_graph *g, const dt_fwd_ctx *c, int B);
/* Backward from dact[n] (set by the loss); accumulates into grads. */
void dt_graph_backward(dt_graph *g, const dt_fwd_ctx *c, int B);
/* The same, calling done(ud, i) after layer i's backward (data-parallel overlap). */
void dt_graph_backward_cb(dt_graph *g, const dt_fwd_ctx *c, int B, void (*done)(void *, int), void *ud);
void dt_graph_free(dt_graph *g);

/* Prints the layer table: name, type, output shape, parameters, FLOPs per sample. */
void dt_graph_print_table(const dt_graph *g, FILE *f);
/* Finds the tensor called "layer.suffix"; returns its layer and param index. */
int dt_graph_find_tensor(const dt_graph *g, const char *name, int *layer, int *param);

#endif
