/* spec/model_spec.h - the model YAML as plain C structs (nothing allocated for tensors here).
 * dt_model_spec_load validates everything and reports every error as file:line:col. */
#ifndef DT_MODEL_SPEC_H
#define DT_MODEL_SPEC_H

#include <stdint.h>
#include "layers/layer.h"
#include "spec/yaml_util.h"
#include "spec/cluster_spec.h"


typedef struct dt_layer_spec {
        const dt_layer_ops *ops;
        void *cfg;                      /* ops->cfg_size bytes, filled by ops->parse */
        char name[DT_NAME_MAX];         /* given, or "<type><k>" (fc1, fc2, dropout1, ...) */
        dt_pos pos;                     /* of the list item */
} dt_layer_spec;

typedef enum { DT_LOSS_SOFTMAX_XENT = 0, DT_LOSS_MSE, DT_LOSS_COUNT } dt_loss_kind;
extern const char *const dt_loss_names[];

typedef enum { DT_FMT_IDX = 0, DT_FMT_CSV, DT_FMT_NPY, DT_FMT_SYNTHETIC, DT_FMT_TEXT, DT_FMT_COUNT } dt_data_format;
extern const char *const dt_format_names[];

/* idx 'sequence': how an image becomes a sample (rows: (H,W) = H steps of W features) */
typedef enum { DT_SEQ_NONE = 0, DT_SEQ_ROWS, DT_SEQ_COUNT } dt_sequence_kind;
extern const char *const dt_sequence_names[];

/* text 'part': which side of the holdout split a source reads */
typedef enum { DT_TEXT_TRAIN = 0, DT_TEXT_HOLDOUT, DT_TEXT_PART_COUNT } dt_text_part;
extern const char *const dt_text_part_names[];

typedef struct dt_source_spec {
        int present;
        dt_data_format format;
        /* idx: images + labels; npy: x + y (y optional for mse targets in x? no: y required);
         * csv: path, one sample per row, label column */
        /* Paths as resolved by dt_data_resolve when the file exists, else as written (the data
         * loader then fails with exit 3 at images_pos/labels_pos). */
        char images[DT_PATH_MAX];       /* idx images / npy x / csv file / text path */
        char labels[DT_PATH_MAX];       /* idx labels / npy y; empty for csv */
        dt_pos images_pos, labels_pos;
        int label_column;               /* csv: 0-based; -1 = last */
        int header;                     /* csv: first line is a header */
        long limit;                     /* use only the first N samples (0 = all) */
        dt_sequence_kind sequence;      /* idx: DT_SEQ_ROWS reads (H,W) images as H steps */
        /* text: 'images' holds the path (a file, or a directory read whole); samples are windows
         * of seq_len byte ids, labels the next byte of each step; the last 'holdout' fraction of
         * the text is the holdout part; windows start every 'stride' bytes (1..seq_len, default
         * seq_len = non-overlapping; 0 in a hand-built spec also means seq_len) */
        int seq_len;
        int stride;
        double holdout;
        dt_text_part part;
        /* synthetic: n samples of the model's input shape, 'classes' gaussian blobs */
        long n;
        uint64_t seed;
        double noise;
        dt_pos pos;
} dt_source_spec;

typedef struct dt_data_spec {
        dt_source_spec train, test;
        int classes;                    /* number of classes (softmax_cross_entropy); 0 = infer */
        double scale, mean, std;        /* x' = (x * scale - mean) / std; scale defaults 1/255 for idx */
        int scale_given;
} dt_data_spec;

typedef enum { DT_SCHED_CONSTANT = 0, DT_SCHED_STEP, DT_SCHED_COSINE, DT_SCHED_LINEAR, DT_SCHED_COUNT } dt_sched_kind;
extern const char *const dt_sched_names[];

typedef struct dt_sched_spec {
        dt_sched_kind kind;
        long warmup_steps;              /* linear warm-up from 0 before any schedule */
        long step_size;                 /* step: decay every step_size steps (or epochs, see unit) */
        int step_unit_epochs;           /* step_size counted in epochs (default) or steps */
        double gamma;                   /* step: factor */
        double min_lr;                  /* cosine/linear: floor */
} dt_sched_spec;

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
} dt_train_spec;

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
        int deterministic;              /* only reproducible library algorithms (cuDNN); default 0 */
        dt_cluster_spec parallel;       /* the 'parallel:' section (set = 0 when absent) */
        uint64_t hash;                  /* of the spec's meaning (checkpoint compatibility) */
} dt_model_spec;

/* Parses and validates path. Data paths are resolved (relative to the YAML's directory, then
 * each directory in $DTRAIN_DATA_PATH, then /usr/share/datasets); a missing file is NOT a spec
 * error (it is a data error, exit 3, reported when the data is loaded). Returns 0, or -1 with
 * every error in d. */
int dt_model_spec_load(dt_model_spec *s, const char *path, dt_diag *d);
void dt_model_spec_free(dt_model_spec *s);

/* Prints every key the model spec parser accepts, one "section.key" per line (`dtrain keys`). */
void dt_model_spec_list_keys(FILE *f);

#endif
