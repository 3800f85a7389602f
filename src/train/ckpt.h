/* train/ckpt.h - checkpoints: everything needed to continue a run exactly, committed atomically.
 * Layout: DIR/checkpoints/step-NNNNNNNN/{model.safetensors, optim.safetensors, state.json} and
 * DIR/checkpoints/latest (a one-line file naming the committed step directory). */
#ifndef DT_CKPT_H
#define DT_CKPT_H

#include <stdint.h>
#include "graph/graph.h"
#include "train/safetensors.h"
#include "optim/moments.h"

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
        /* the run around it (optional fields: older checkpoints lack them) */
        long best_step;         /* the checkpoint with the best 'best_metric' so far; -1 none */
        double best_value;      /* its value */
        char best_metric[24];   /* "test_loss", "test_accuracy", "train_loss"; "" none */
        long epochs;            /* train.epochs of the run that wrote it; 0 unknown */
        char schedule[96];      /* its learning-rate schedule in words; "" unknown */
        double elapsed;         /* seconds of training before this checkpoint, over every resume */
} dt_train_state;

/* What dt_ckpt_save_keep keeps besides the checkpoint it writes: the 'keep' most recent step
 * directories (>= 1) and the one st->best_step names, which checkpoints/best then names. */
typedef struct dt_ckpt_policy {
        int keep;
} dt_ckpt_policy;

/* Tensors a checkpoint keeps in optim.safetensors beside the moments, named "dtrain.*" (no
 * PyTorch name is): the gradient compressor's state (train/ckpt_cx.c). Their data: the caller's
 * when saving, buf's after dt_ckpt_load_x (dt_ckpt_extra_free releases them). */
typedef struct dt_ckpt_extra {
        int n;
        dt_st_tensor *t;
        float *buf;
} dt_ckpt_extra;
#define DT_CKPT_EXTRA_PREFIX "dtrain."
void dt_ckpt_extra_free(dt_ckpt_extra *x);

/* One checkpoint's content, ready to commit: the tensors of both files by PyTorch name (their
 * data pointers at memory that must stay as it is until the commit returns) and the state. */
typedef struct dt_ckpt_data {
        dt_st_tensor *mt, *ot;  /* model (params, buffers) and optimizer (moments) tensors */
        int nm, no;
        int nmoments;
        dt_train_state st;
        /* NULL: the tensors' data pointers hold the values; else both files' data come from fill,
         * piece by piece in file order (dt_st_write_stream), and the pointers are not read */
        dt_st_fill fill;
        void *fill_ud;
} dt_ckpt_data;

/* Fills d from g's flat buffers (host-readable), mo and x (NULL: none; its tensors follow the
 * moments); -1 with err for a graph that cannot be checkpointed (sharded tensors, over-long names).
 * dt_ckpt_data_free releases the lists. */
int dt_ckpt_collect(const dt_graph *g, const dt_moments *mo, const dt_ckpt_extra *x, const dt_train_state *st,
                    dt_ckpt_data *d, char *err, size_t errlen);
void dt_ckpt_data_free(dt_ckpt_data *d);
/* A commit whose last fsync (the pointers') is left to the next commit: latest and best are
 * renamed but maybe not yet durable, so the checkpoints they named before stay on disk. */
typedef struct dt_ckpt_lag {
        int open;
        long step;              /* the checkpoint latest now names */
        long best;              /* the one best names, -1 none */
} dt_ckpt_lag;

/* What a commit does besides the checkpoint. */
typedef struct dt_ckpt_commit_opts {
        const int *logs;        /* append-only logs (metrics.jsonl) fsync'd in the same batch, so the */
        int nlogs;              /* logs on disk reach at least the committed checkpoint */
        const int *abandon;     /* read between the steps (atomically): nonzero gives the commit up
                                 * before latest moves (a newer checkpoint supersedes it); NULL never */
        const int *more;        /* read at the end (atomically): nonzero when another commit follows at
                                 * once; its directory fsync then also makes this one's pointers
                                 * durable, so this one leaves its last fsync to it through lag */
        dt_ckpt_lag *lag;       /* in: the previous commit's open lag, closed by this one's step 4;
                                 * out: this one's, when 'more' deferred its last fsync */
} dt_ckpt_commit_opts;

/* Commits checkpoint d->st.step under outdir atomically (the order and why: ckpt.c's header): its
 * files and the pointers' temporaries written together, all fsync'd, the directory renamed into
 * place and its parent fsync'd, then best and latest renamed over and the parent fsync'd once
 * more; the previous checkpoints go (policy) only after that. o may be NULL. Returns 0; 1 when
 * o->abandon stopped it (its temporaries gone, latest and best untouched; a step directory
 * already renamed stays for the next commit's cleanup); or -1 with the file and errno's text in
 * err. */
int dt_ckpt_commit(const char *outdir, const dt_ckpt_data *d, const dt_ckpt_policy *pol,
                   const dt_ckpt_commit_opts *o, char *err, size_t errlen);
/* Closes an open lag: the fsync of checkpoints/ its commit left, then the cleanup it deferred.
 * 0 (also when lag is not open) or -1 with err. */
int dt_ckpt_flush(const char *outdir, const dt_ckpt_policy *pol, dt_ckpt_lag *lag, char *err, size_t errlen);

/* dt_ckpt_collect + dt_ckpt_commit on the caller's thread, keeping 1 and the best. Params must be
 * host-readable (g->params). Returns 0 or -1 with a message in err. */
int dt_ckpt_save(const char *outdir, const dt_graph *g, const dt_moments *mo,
                 const dt_train_state *st, char *err, size_t errlen);
/* The same with a policy: the 'keep' newest checkpoints stay, and the best one (st->best_step,
 * when >= 0) stays and is named by DIR/checkpoints/best. dt_ckpt_save keeps 1 and the best. */
int dt_ckpt_save_keep(const char *outdir, const dt_graph *g, const dt_moments *mo,
                      const dt_train_state *st, const dt_ckpt_policy *pol, char *err, size_t errlen);

/* Finds DIR/checkpoints/latest. 1 = found (path filled), 0 = none, -1 = present but broken (err). */
int dt_ckpt_latest(const char *outdir, char *path, size_t len, char *err, size_t errlen);
/* The same for DIR/checkpoints/NAME ("latest" or "best"). */
int dt_ckpt_named(const char *outdir, const char *name, char *path, size_t len, char *err, size_t errlen);
/* Reads pointer file lp ("step-NNNNNNNN": checkpoints/latest, checkpoints/best) into path, the
 * directory it names beside it. 1 = found, 0 = lp does not exist, -1 = broken (err). */
int dt_ckpt_pointer(const char *lp, char *path, size_t len, char *err, size_t errlen);
/* The checkpoint directory a user's path names: a checkpoint directory itself (state.json), a
 * pointer file (checkpoints/latest, checkpoints/best), a checkpoints/ directory or a run directory
 * (their latest). 0, or -1 with err. */
int dt_ckpt_resolve(const char *arg, char *dir, size_t len, char *err, size_t errlen);
/* The weights file a --weights or train.init_from path names: a weights file as it is, else the
 * model.safetensors of the checkpoint dt_ckpt_resolve finds. 0, or -1 with err. */
int dt_ckpt_weights_file(const char *arg, char *file, size_t len, char *err, size_t errlen);
/* The step directories under outdir/checkpoints, newest first: their steps in steps[0..n), n
 * returned (at most max). */
int dt_ckpt_steps(const char *outdir, long *steps, int max);
/* Reads only a checkpoint directory's state.json (validated as dt_ckpt_load does, crc included). */
int dt_ckpt_read_state(const char *ckdir, dt_train_state *st, char *err, size_t errlen);

/* The crc32 of bytes [lo, hi) of path (a share of a file's crc, joined with zlib's crc32_combine).
 * 0, or -1 (errno set). */
int dt_ckpt_crc_range(const char *path, size_t lo, size_t hi, uint32_t *out);

/* What the ranks of a load that each take their parts do together. agree: nonzero on every rank
 * when rc is nonzero on any; crc: the whole file's crc32 (size bytes), each rank summing a share
 * of it, 0 or -1 (a read failed somewhere) the same on every rank. */
typedef struct dt_ckpt_team {
        void *ud;
        int (*agree)(void *ud, int rc);
        int (*crc)(void *ud, const char *path, size_t size, uint32_t *out);
} dt_ckpt_team;

/* A checkpoint's tensor handed over once validated: file 0 model, 1 optimizer; want the model's
 * tensor (name, shape, n); src its values in the file (mapped: the pages read become resident). */
typedef void (*dt_ckpt_take)(void *ud, int file, const dt_st_tensor *want, const float *src);
/* dt_ckpt_load's checks, with the files mapped and each tensor handed to take instead of copied
 * into g and moments (a rank that holds parts keeps them; each tensor's pages are handed back
 * after it); g gives the names and shapes (its buffers are not used: the whole model's graph will
 * do). team (NULL: none) makes it collective: the verdict is every rank's, and the files' crc32 is
 * summed by the ranks together instead of by each rank alone. */
int dt_ckpt_load_take(const char *ckdir, const dt_graph *g, int nmoments, dt_train_state *st, uint64_t expect_hash,
                      dt_ckpt_take take, void *ud, const dt_ckpt_team *team, char *err, size_t errlen);
/* Loads a checkpoint directory into g (params, buffers), mo and st, validating everything
 * (files, safetensors structure, crc, names, shapes, config hash, format version). Returns 0, or
 * -1 with err naming the file and the failed check (the caller exits 4). */
int dt_ckpt_load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st,
                 uint64_t expect_hash, char *err, size_t errlen);
/* The same, with the "dtrain.*" tensors of optim.safetensors copied into x (x->n 0 when there are
 * none; x NULL: they are checked as part of the file and ignored). */
int dt_ckpt_load_x(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st, dt_ckpt_extra *x,
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

/* The same with the tensors' data streamed from fill (safetensors.h's dt_st_write_stream: g gives
 * the names and shapes only); the same bytes. */
int dt_model_save_stream(const char *path, const dt_graph *g, const dt_st_meta *meta, int nmeta, dt_st_fill fill,
                         void *ud, char *err, size_t errlen);

/* Reads a weights file written by dt_model_save into g (params and buffers), validating the
 * structure (dt_st_read) and that every tensor of the graph is there with its shape and nothing
 * else is. On success f stays open for its metadata (dt_st_meta_get; the caller dt_st_free's
 * it); on -1, err names the file and the failed check and g is untouched. */
int dt_model_load(const char *path, dt_graph *g, dt_st_file *f, char *err, size_t errlen);

#endif
