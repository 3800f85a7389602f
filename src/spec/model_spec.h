/* spec/model_spec.h - the model YAML as plain C structs (nothing allocated for tensors here).
 * dt_model_spec_load validates everything and reports every error as file:line:col. The spec sits
 * above what it configures: each module owns its settings type (a layer's cfg, data's
 * dt_source_spec, optim's dt_sched_spec) and never includes this header; the spec fills them. */
#ifndef DT_MODEL_SPEC_H
#define DT_MODEL_SPEC_H

#include <stdint.h>
#include "layers/layer.h"
#include "data/data.h"
#include "optim/optim.h"
#include "util/yaml_util.h"
#include "spec/cluster_spec.h"

typedef struct dt_layer_spec {
        const dt_layer_ops *ops;
        void *cfg;                      /* ops->cfg_size bytes, filled by ops->parse */
        char name[DT_NAME_MAX];         /* given, or "<type><k>" (fc1, fc2, dropout1, ...) */
        dt_pos pos;                     /* of the list item */
        /* What it reads ('input:' / 'inputs:'), as tensor ids: 0 the model's input, j + 1 layer j's
         * output; only earlier layers, so the spec's order is a topological order. Without the keys
         * (named = 0) the previous layer's output, as in a chain. */
        int nin, named;
        int src[DT_MAX_INPUTS];
        dt_pos in_pos[DT_MAX_INPUTS];
} dt_layer_spec;

typedef enum { DT_LOSS_SOFTMAX_XENT = 0, DT_LOSS_MSE, DT_LOSS_COUNT } dt_loss_kind;
extern const char *const dt_loss_names[];

typedef struct dt_train_spec {
        int epochs;
        int batch;                      /* global batch */
        uint64_t seed;
        double lr;
        dt_optim_hp opt;
        dt_sched_spec sched;
        double clip_norm;               /* 0 = off */
        long checkpoint_every;          /* steps; 0 = end of each epoch only */
        long max_steps;                 /* 0 = no limit */
        int eval_batch;
        dt_pos batch_pos;
        int keep_checkpoints;           /* newest checkpoints kept besides the best (default 1) */
        int best_metric;                /* DT_BEST_*: what makes a checkpoint the best */
        long log_every;                 /* steps between metrics.jsonl step lines; 0 = none */
        char init_from[DT_PATH_MAX];    /* fine-tuning: weights to start from; "" = initialise */
        dt_pos init_from_pos;
        int init_strict;                /* every tensor must match (default 1) */
        char **freeze;                  /* layer name patterns (fnmatch) kept fixed */
        int nfreeze;
        dt_pos freeze_pos;
} dt_train_spec;

/* train.best_metric */
enum { DT_BEST_TEST_LOSS = 0, DT_BEST_TEST_ACCURACY, DT_BEST_TRAIN_LOSS, DT_BEST_NONE };
extern const char *const dt_best_names[];

typedef struct dt_model_spec {
        char file[DT_PATH_MAX];         /* as given */
        char dir[DT_PATH_MAX];          /* its directory, for relative data paths */
        char name[DT_NAME_MAX];
        dt_shape input;
        dt_pos input_pos;
        dt_layer_spec *layers;
        int nlayers;
        dt_loss_kind loss;
        dt_data_spec data;
        dt_train_spec train;
        char device[16];                /* "cpu", "cuda", "auto" */
        dt_pos device_pos;              /* of its key; 0:0 when left out */
        int deterministic;              /* only reproducible library algorithms (cuDNN); default 0 */
        dt_cluster_spec parallel;       /* the 'parallel:' section (set = 0 when absent) */
        uint64_t hash;                  /* of the spec's meaning (checkpoint compatibility) */
} dt_model_spec;

/* Parses and validates path. Data paths are resolved (relative to the YAML's directory, then
 * each directory in $DTRAIN_DATA_PATH, then /usr/share/datasets); a missing file is NOT a spec
 * error (it is a data error, exit 3, reported when the data is loaded). Returns 0, or -1 with
 * every error in d. */
int dt_model_spec_load(dt_model_spec *s, const char *path, dt_diag *d);
/* Same, with the --set overrides in sets (spec/overrides.h) applied to the document first: those
 * of the model spec's keys, and the cluster spec's too (into 'parallel:') unless cluster_file
 * says a cluster file takes them. sets may be NULL. */
struct dt_sets;
int dt_model_spec_load_sets(dt_model_spec *s, const char *path, const struct dt_sets *sets, int cluster_file,
                            dt_diag *d);
void dt_model_spec_free(dt_model_spec *s);
/* The model spec's top-level keys, NULL-terminated. */
extern const char *const dt_model_top_keys[];

/* Prints every key the model spec parser accepts, one "section.key  type  default" (detail) or
 * "section.key" per line, only those starting with or containing filter when not NULL (`dtrain
 * keys`). Returns the lines printed. */
int dt_model_spec_list_keys(FILE *f, const char *filter, int detail);

#endif
