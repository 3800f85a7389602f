/* fuzz/fuzz_model_spec.c - libFuzzer harness: the input is a model spec (YAML). It goes the way
 * `dtrain check` takes it before any data is read: the spec loader, the layer graph (shape
 * inference, parameter layout), the memory plan, the model's 'parallel:' section checked as the
 * cluster spec, and the error list printed. A spec that passes and is small enough then runs as
 * `dtrain run` would: buffers allocated, parameters initialised, a training forward and backward
 * and an inference forward of a batch of two on the CPU backend, so every shape the spec accepts
 * is one the layers compute within their buffers. Any outcome but a clean return is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "graph/graph.h"
#include "spec/model_spec.h"
#include "spec/cluster_spec.h"

const char fuzz_name[] = "model_spec";

/* A run of a batch of two is tried when the plan needs at most this much memory and FLOPs per
 * sample: far above a spec made to test a shape, far below one that would slow the fuzzer to a
 * crawl. */
#define RUN_MAX_BYTES ((size_t)16 << 20)
#define RUN_MAX_FLOPS 2e6
#define RUN_BATCH 2

static FILE *devnull;
static dt_backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc; (void)argv;
        devnull = fopen("/dev/null", "w");
        if (!devnull) abort();
        be = dt_backend_cpu_new(1);
        return 0;
}

/* One training step's forward and backward, then an inference forward, without data: inputs in
 * [-1, 1) (or all 0 where the first layer wants ids, e.g. embedding), a gradient of ones. */
static void run_batch(dt_graph *g, const dt_model_spec *s)
{
        if (dt_graph_alloc(g, be, RUN_BATCH)) return;
        dt_graph_init_params(g, s->train.seed);
        size_t in = dt_shape_size(&g->input), out = dt_shape_size(&g->layers[g->n - 1].out);
        for (size_t i = 0; i < RUN_BATCH * in; i++)
                g->act[0][i] = (float)(i % 7) / 3.5f - 1.0f;
        const dt_layer *l0 = &g->layers[0];
        char why[256];
        if (l0->ops->check_input && l0->ops->check_input(l0->cfg, &l0->in, g->act[0], RUN_BATCH, why, sizeof why))
                memset(g->act[0], 0, RUN_BATCH * in * sizeof(float));
        for (size_t i = 0; i < RUN_BATCH * out; i++)
                g->dact[g->n][i] = 1.0f;
        dt_fwd_ctx c = { .training = 1, .seed = s->train.seed, .step = 0, .pos0 = 0 };
        dt_graph_forward(g, &c, RUN_BATCH);
        dt_graph_backward(g, &c, RUN_BATCH);
        c.training = 0;
        dt_graph_forward(g, &c, RUN_BATCH);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *path = fuzz_write("model.yaml", data, size);
        dt_diag d = { 0 };
        dt_model_spec s;
        if (dt_model_spec_load(&s, path, &d) == 0 && !d.n) {
                dt_graph g;
                memset(&g, 0, sizeof g);
                if (dt_graph_build(&g, &s, &d) == 0 && !d.n) {
                        /* what `dtrain check` prints and plans; nothing large is allocated */
                        dt_graph_print_table(&g, devnull);
                        int maxb = DT_MAX(s.train.batch, s.train.eval_batch);
                        (void)dt_graph_memory(&g, maxb, dt_optim_nmoments(&s.train.opt));
                        if (g.n > 0 && dt_graph_memory(&g, RUN_BATCH, 0) <= RUN_MAX_BYTES &&
                            g.flops <= RUN_MAX_FLOPS)
                                run_batch(&g, &s);
                }
                dt_graph_free(&g);
                dt_cluster_spec cs, none;
                dt_cluster_spec_init(&none);
                dt_cluster_spec_merge(&cs, &s.parallel, &none);
                dt_cluster_spec_validate(&cs, &s, 1, &d);
                dt_cluster_spec_validate(&cs, &s, 3, &d);
                dt_model_spec_free(&s);
        }
        dt_diag_print(&d, devnull);
        dt_diag_free(&d);
        return 0;
}
