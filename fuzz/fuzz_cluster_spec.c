/* fuzz/fuzz_cluster_spec.c - libFuzzer harness: the input is a cluster spec (dtrain-cluster(5)).
 * It is loaded, merged over the 'parallel:' section of a small fixed model (as --cluster is) and
 * validated against that model for one and for several ranks, and without a model. Any outcome
 * but a clean return is a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spec/model_spec.h"
#include "spec/cluster_spec.h"

const char fuzz_name[] = "cluster_spec";

/* a model with a 'parallel:' section of its own, so the merge has keys on both sides */
static const char model_yaml[] =
        "name: fuzz\n"
        "input: [8]\n"
        "layers:\n"
        "  - {type: fc, units: 16, activation: relu}\n"
        "  - {type: fc, units: 4}\n"
        "loss: softmax_cross_entropy\n"
        "data:\n"
        "  train: {format: synthetic, n: 64}\n"
        "train: {epochs: 1, batch: 24, optimizer: {type: sgd, lr: 0.1}}\n"
        "parallel:\n"
        "  threads_per_rank: 1\n"
        "  partition: {sync: allreduce, bucket_mb: 2}\n";

static dt_model_spec model;
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc; (void)argv;
        dt_diag d = { 0 };
        devnull = fopen("/dev/null", "w");
        if (!devnull || dt_model_spec_load(&model, fuzz_write("model.yaml", model_yaml, strlen(model_yaml)), &d)) {
                dt_diag_print(&d, stderr);
                abort();
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *path = fuzz_write("cluster.yaml", data, size);
        dt_diag d = { 0 };
        dt_cluster_spec file, cs;
        if (dt_cluster_spec_load(&file, path, &d) == 0) {
                dt_cluster_spec_merge(&cs, &model.parallel, &file);
                static const int worlds[] = { 1, 2, 4, 7 };
                for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
                        dt_cluster_spec_validate(&cs, &model, worlds[i], &d);
                dt_cluster_spec_validate(&file, NULL, 1, &d);
        }
        dt_diag_print(&d, devnull);
        dt_diag_free(&d);
        return 0;
}
