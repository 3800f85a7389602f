/* fuzz/fuzz_model_spec.c - libFuzzer harness: the input is a model spec (YAML). It goes the way
 * `dtrain check` takes it before any data is read: the spec loader, the layer graph (shape
 * inference, parameter layout), the memory plan, the model's 'parallel:' section checked as the
 * cluster spec, and the error list printed. Any outcome but a clean return is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "graph/graph.h"
#include "spec/model_spec.h"
#include "spec/cluster_spec.h"

const char fuzz_name[] = "model_spec";

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc; (void)argv;
        devnull = fopen("/dev/null", "w");
        if (!devnull) abort();
        return 0;
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
