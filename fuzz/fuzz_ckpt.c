/* fuzz/fuzz_ckpt.c - libFuzzer harness for what dtrain reads back of its own output: safetensors
 * files, checkpoint directories (state.json, model.safetensors, optim.safetensors) and the
 * 'latest' pointer. The first byte of an input picks what the rest is; the other files of the
 * checkpoint are the valid ones a real save of a small fixed model wrote at start-up, so the
 * fuzzed file meets the same checks it would meet on resume:
 *   0  a weights file: dt_st_read, every tensor and the metadata looked up, dt_model_load
 *   1  state.json of the checkpoint
 *   2  model.safetensors of the checkpoint (state.json re-recording its crc32, so the file
 *      reaches the tensor checks instead of stopping at the checksum)
 *   3  optim.safetensors likewise
 *   4  the 'latest' file of a run directory
 * With DTRAIN_FUZZ_SEEDS=DIR set, start-up also writes one seed input per mode into DIR (make fuzz
 * does, so the seeds follow the checkpoint format). Any outcome but a clean return is a finding. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz.h"
#include "graph/graph.h"
#include "spec/model_spec.h"
#include "train/ckpt.h"
#include "train/safetensors.h"

const char fuzz_name[] = "ckpt";

/* params (fc weights and biases), buffers (batchnorm running statistics) and two moments */
static const char model_yaml[] =
        "name: fuzz\n"
        "input: [3]\n"
        "layers:\n"
        "  - {type: fc, name: fc1, units: 4}\n"
        "  - {type: batchnorm, name: bn1}\n"
        "  - {type: activation, name: act1, function: tanh}\n"
        "  - {type: fc, name: fc2, units: 2}\n"
        "loss: softmax_cross_entropy\n"
        "data:\n"
        "  train: {format: synthetic, n: 8}\n"
        "train: {epochs: 1, batch: 4, optimizer: {type: adam, lr: 0.01}}\n";

enum { F_STATE, F_MODEL, F_OPTIM, NFILES };
static const char *const file_names[NFILES] = { "state.json", "model.safetensors", "optim.safetensors" };

static dt_model_spec spec;
static dt_graph graph;
static dt_moments moments;
static struct { unsigned char *p; size_t n; } valid[NFILES];

static void die(const char *what, const char *detail)
{
        fprintf(stderr, "fuzz ckpt: %s: %s\n", what, detail);
        abort();
}

static void slurp(const char *path, unsigned char **p, size_t *n)
{
        FILE *f = fopen(path, "rb");
        if (!f) die("cannot open", path);
        size_t cap = 4096;
        *p = malloc(cap);
        *n = 0;
        size_t k;
        while (*p && (k = fread(*p + *n, 1, cap - *n, f)) > 0)
                if ((*n += k) == cap) *p = realloc(*p, cap *= 2);
        if (!*p || ferror(f)) die("cannot read", path);
        fclose(f);
}

/* one seed: the mode byte, then the file */
static void seed(const char *dir, const char *name, int mode, const void *p, size_t n)
{
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fputc(mode, f) == EOF || fwrite(p, 1, n, f) != n || fclose(f)) die("cannot write seed", path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc; (void)argv;
        dt_diag d = { 0 };
        char err[1024];
        if (dt_model_spec_load(&spec, fuzz_write("model.yaml", model_yaml, strlen(model_yaml)), &d) ||
            dt_graph_build(&graph, &spec, &d)) {
                dt_diag_print(&d, stderr);
                abort();
        }
        dt_backend *be = dt_backend_cpu_new(1);
        if (dt_graph_alloc(&graph, be, 1)) die("dt_graph_alloc", "failed");
        dt_graph_init_params(&graph, 7);
        moments.n = dt_optim_nmoments(&spec.train.opt);
        moments.m = calloc(graph.nparams, sizeof(float));
        moments.v = calloc(graph.nparams, sizeof(float));
        for (size_t i = 0; i < graph.nparams; i++) {
                moments.m[i] = 0.01f * (float)i;
                moments.v[i] = 0.001f * (float)i;
        }
        dt_train_state st = { .step = 6, .epoch = 1, .step_in_epoch = 1, .seed = 42,
                              .config_hash = spec.hash, .lr = 0.01, .best_test_loss = 1.5, .nranks = 2 };
        char ck[4096];
        if (dt_ckpt_save(fuzz_path("run"), &graph, &moments, &st, err, sizeof err) ||
            dt_ckpt_latest(fuzz_path("run"), ck, sizeof ck, err, sizeof err) != 1)
                die("cannot write the valid checkpoint", err);
        for (int i = 0; i < NFILES; i++) {
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", ck, file_names[i]);
                slurp(p, &valid[i].p, &valid[i].n);
        }
        const char *sd = getenv("DTRAIN_FUZZ_SEEDS");
        if (sd && *sd) {
                static const char latest[] = "step-00000006\n";
                seed(sd, "seed-weights", 0, valid[F_MODEL].p, valid[F_MODEL].n);
                seed(sd, "seed-weights-optim", 0, valid[F_OPTIM].p, valid[F_OPTIM].n);
                seed(sd, "seed-state", 1, valid[F_STATE].p, valid[F_STATE].n);
                seed(sd, "seed-ckpt-model", 2, valid[F_MODEL].p, valid[F_MODEL].n);
                seed(sd, "seed-ckpt-optim", 3, valid[F_OPTIM].p, valid[F_OPTIM].n);
                seed(sd, "seed-latest", 4, latest, sizeof latest - 1);
        }
        return 0;
}

/* state.json recording crc32(p, n) for the file 'key' names ("model_crc32", "optim_crc32") */
static char *state_with_crc(const char *key, const uint8_t *p, size_t n)
{
        json_t *o = json_loadb((const char *)valid[F_STATE].p, valid[F_STATE].n, 0, NULL);
        if (!o) die("the valid state.json", "does not parse");
        char hex[16];
        snprintf(hex, sizeof hex, "%08lx", crc32(crc32(0L, Z_NULL, 0), p, (uInt)n));
        json_object_set_new(o, key, json_string(hex));
        /* state.json covers itself too (train/ckpt.c): the crc32 of the compact, order-preserving
         * dump of every other field, recomputed so the fuzzed tensor file reaches its own checks */
        json_object_del(o, "state_crc32");
        char *c = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!c) die("json_dumps", "failed");
        snprintf(hex, sizeof hex, "%08lx", crc32(crc32(0L, Z_NULL, 0), (const Bytef *)c, (uInt)strlen(c)));
        free(c);
        json_object_set_new(o, "state_crc32", json_string(hex));
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(o);
        if (!s) die("json_dumps", "failed");
        return s;
}

static void weights_file(const uint8_t *p, size_t n)
{
        char err[1024];
        const char *path = fuzz_write("weights.safetensors", p, n);
        dt_st_file f;
        if (dt_st_read(path, &f, err, sizeof err) == 0) {
                for (int i = 0; i < f.nt; i++)
                        if (dt_st_find(&f, f.t[i].name) != &f.t[i]) die("dt_st_find", f.t[i].name);
                for (int i = 0; i < f.nmeta; i++)
                        (void)dt_st_meta_get(&f, f.meta_key[i]);
                dt_st_free(&f);
        }
        if (dt_model_load(fuzz_path("weights.safetensors"), &graph, &f, err, sizeof err) == 0) {
                (void)dt_st_meta_get(&f, "format");
                dt_st_free(&f);
        }
}

static void checkpoint(int which, const uint8_t *p, size_t n)
{
        char *state = NULL;
        if (which == F_MODEL || which == F_OPTIM)
                state = state_with_crc(which == F_MODEL ? "model_crc32" : "optim_crc32", p, n);
        for (int i = 0; i < NFILES; i++) {
                char rel[64];
                snprintf(rel, sizeof rel, "ck/%s", file_names[i]);
                if (i == which) fuzz_write(rel, p, n);
                else if (i == F_STATE && state) fuzz_write(rel, state, strlen(state));
                else fuzz_write(rel, valid[i].p, valid[i].n);
        }
        free(state);
        char err[1024];
        dt_train_state st;
        (void)dt_ckpt_load(fuzz_path("ck"), &graph, &moments, &st, spec.hash, err, sizeof err);
}

static void latest_file(const uint8_t *p, size_t n)
{
        char path[4096], err[1024];
        fuzz_write("run/checkpoints/latest", p, n);
        (void)dt_ckpt_latest(fuzz_path("run"), path, sizeof path, err, sizeof err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1) return 0;
        const uint8_t *p = data + 1;
        size_t n = size - 1;
        switch (data[0] % 5) {
        case 0: weights_file(p, n); break;
        case 1: checkpoint(F_STATE, p, n); break;
        case 2: checkpoint(F_MODEL, p, n); break;
        case 3: checkpoint(F_OPTIM, p, n); break;
        case 4: latest_file(p, n); break;
        }
        return 0;
}
