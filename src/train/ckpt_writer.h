/* train/ckpt_writer.h - the background checkpoint writer: the training thread copies what a
 * checkpoint needs (weights, buffers, optimizer moments, the state) into a snapshot and goes on;
 * a thread of its own commits it (dt_ckpt_commit: temp files, fsync, rename, prune). A newer
 * request replaces a pending one that the keep policy would delete anyway (coalescing) - never the
 * current best, never one of the keep_checkpoints newest; the one being written always completes. The first failure is kept and
 * returned by the next submit or the drain, and nothing is written after it. */
#ifndef DT_CKPT_WRITER_H
#define DT_CKPT_WRITER_H

#include <stddef.h>
#include "train/ckpt.h"

typedef struct dt_ckpt_writer dt_ckpt_writer;

/* A writer for outdir's checkpoints with policy pol. sync: commit on the caller's thread inside
 * submit (no thread, no snapshot; DTRAIN_CKPT_SYNC=1). */
dt_ckpt_writer *dt_ckpt_writer_new(const char *outdir, const dt_ckpt_policy *pol, int sync);
/* At most n snapshots (1 or 2, the default) at once: with 1 a request waits while the one before
 * is being written (one copy of the model less on the writing rank). Before the first submit. */
void dt_ckpt_writer_set_snapshots(dt_ckpt_writer *w, int n);
/* An append-only log (metrics.jsonl) whose descriptor is fsync'd with every commit. The caller
 * keeps it open until dt_ckpt_writer_drain has returned. */
void dt_ckpt_writer_add_log(dt_ckpt_writer *w, int fd);
/* A checkpoint whose data come from fill (a sharded run's, fed by the ranks that own each piece):
 * committed on the calling thread after every queued one, with no snapshot; g and mo give the
 * tensors' names and shapes only. Returns as submit does. */
int dt_ckpt_writer_stream(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_train_state *st,
                          dt_st_fill fill, void *ud, char *err, size_t errlen);
/* Snapshots g's params and buffers, mo's moments and st (host memory) and queues the checkpoint;
 * waits only when both snapshot slots hold checkpoints that must all be written. Returns 0, or -1
 * with err when an earlier commit failed (reported once: later calls return -1 with err "").
 * Sharded graphs and over-long names fail here, at once. */
int dt_ckpt_writer_submit(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_train_state *st,
                          char *err, size_t errlen);
/* The same with extra tensors for optim.safetensors (x NULL: none), snapshotted with the rest. */
int dt_ckpt_writer_submit_x(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_ckpt_extra *x,
                            const dt_train_state *st, char *err, size_t errlen);
/* Waits until everything submitted is committed (or dropped after a failure). 0, or -1 with err
 * for a failure not yet returned by submit ("" when it was). */
int dt_ckpt_writer_drain(dt_ckpt_writer *w, char *err, size_t errlen);
/* Checkpoints committed and checkpoints replaced by a newer one before they were written. */
void dt_ckpt_writer_counts(dt_ckpt_writer *w, long *written, long *coalesced);
/* Drains (ignoring the result), stops the thread, frees the snapshots. NULL is a no-op. */
void dt_ckpt_writer_free(dt_ckpt_writer *w);
/* dt_die calls this first (util/common.h's dt_on_fatal): a checkpoint already requested is still
 * committed before a fatal exit, unless the fatal error is on the writer's own thread. */
void dt_ckpt_writer_drain_on_fatal(void *w);

/* DTRAIN_CKPT_SYNC: 1 when set to "1" (commit on the training thread), 0 when unset, empty or
 * "0", -1 for any other value. */
int dt_ckpt_sync_env(void);
/* Host memory the snapshots may take: two copies of the parameters, buffers and moments. */
size_t dt_ckpt_snapshot_bytes(size_t nparams, size_t nbuffers, int nmoments);

/* The coalescing rule, pure for the unit tests: may a pending checkpoint of step 'pending' be
 * replaced when a checkpoint of step 'next' (whose best is next_best, -1 none) is requested,
 * 'newer' other queued checkpoints lying between them, under keep_checkpoints 'keep'? Only when
 * the commit of 'next' would delete it: it is not the best and not among the keep newest. */
int dt_ckpt_droppable(long pending, long next, long next_best, int newer, int keep);

#endif
