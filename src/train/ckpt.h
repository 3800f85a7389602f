/* train/ckpt.h - checkpoints: everything needed to continue a run exactly, committed atomically.
 * Layout: DIR/checkpoints/step-NNNNNNNN/{model.safetensors, optim.safetensors, state.json} and
 * DIR/checkpoints/latest (a one-line file naming the committed step directory). */
#ifndef DT_CKPT_H
#define DT_CKPT_H

#include <stdint.h>
#include "graph/graph.h"
#include "train/safetensors.h"

#define DT_CKPT_FORMAT 2

typedef struct dt_train_state {
        long step;              /* optimizer steps done */
        long epoch;             /* current epoch (0-based) */
        long step_in_epoch;     /* steps of this epoch already taken */
        long samples_in_epoch;  /* data cursor: samples of this epoch's permutation consumed, < train_samples */
        long train_samples;     /* size of the training set the permutation was drawn over */
        long batch;             /* global batch of the steps since 'since' */
        struct {                /* where 'batch' began (all zero unless a resume changed the batch):
                                 * with it every position field can be checked by replaying the steps */
                long step, epoch, samples_in_epoch, step_in_epoch;
        } since;
        uint64_t seed;          /* RNG state: all randomness derives from (seed, step, ...) */
        uint64_t config_hash;
        double lr;              /* last learning rate (schedule state is a function of step) */
        double best_test_loss;
        int nranks;             /* ranks that wrote it (informational; any count may resume) */
} dt_train_state;

/* Optimizer moment buffers (host copies when the backend is a device). */
typedef struct dt_moments {
        int n;                  /* 0, 1 or 2 */
        float *m, *v;           /* each g->nparams floats */
} dt_moments;

/* Writes checkpoint 'st->step' under outdir atomically: temporary directory, every file fsync'd,
 * rename, directory fsync, then 'latest' replaced the same way; the previous checkpoint is removed
 * only after the new one is committed. Params must be host-readable (g->params). Returns 0 or -1
 * with a message in err. */
int dt_ckpt_save(const char *outdir, const dt_graph *g, const dt_moments *mo,
                 const dt_train_state *st, char *err, size_t errlen);

/* Finds DIR/checkpoints/latest. 1 = found (path filled), 0 = none, -1 = present but broken (err). */
int dt_ckpt_latest(const char *outdir, char *path, size_t len, char *err, size_t errlen);

/* Loads a checkpoint directory into g (params, buffers), mo and st, validating everything
 * (files, safetensors structure, crc, names, shapes, config hash, format version). Returns 0, or
 * -1 with err naming the file and the failed check (the caller exits 4). */
int dt_ckpt_load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st,
                 uint64_t expect_hash, char *err, size_t errlen);

/* Checks a loaded state's position against the run about to continue it: the training set must
 * be the one the permutation was drawn over, and step, epoch, step_in_epoch and samples_in_epoch
 * must be exactly where steps of 'batch' from 'since' lead. Returns 0, or -1 with err. */
int dt_ckpt_check_position(const dt_train_state *st, long train_samples, const char *path, char *err, size_t errlen);

/* Writes the final weights (params and buffers, PyTorch names and layouts) to path atomically. */
int dt_model_save(const char *path, const dt_graph *g, char *err, size_t errlen);
/* The same with extra __metadata__ entries after "format": "pt" (keys other than "format" and
 * "crc32"; e.g. "vocab", a text model's vocabulary as two hex digits per byte). */
int dt_model_save_meta(const char *path, const dt_graph *g, const dt_st_meta *meta, int nmeta,
                       char *err, size_t errlen);

/* Reads a weights file written by dt_model_save into g (params and buffers), validating the
 * structure (dt_st_read) and that every tensor of the graph is there with its shape and nothing
 * else is. On success f stays open for its metadata (dt_st_meta_get; the caller dt_st_free's
 * it); on -1, err names the file and the failed check and g is untouched. */
int dt_model_load(const char *path, dt_graph *g, dt_st_file *f, char *err, size_t errlen);

/* Writes a small file atomically (temp, fsync, rename, fsync dir). */
int dt_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

#endif
