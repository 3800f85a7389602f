/* train/ckpt_stream.h - checkpoints and final weights of a run in parts, streamed piece by piece to
 * rank 0's writer from the ranks that hold each part, and read back by each rank for its parts. */
#ifndef DT_CKPT_STREAM_H
#define DT_CKPT_STREAM_H

#include <stddef.h>
#include "train/safetensors.h"

struct trainer;

/* Whether this run streams its checkpoints and final weights: its model is in parts (pipeline
 * stages, tensor splits) or partition.shard divides it over the data axis, and no compressor's
 * state is kept (those gather the whole model on rank 0). */
int dt_ckpt_stream_on(const struct trainer *t);
/* Every rank: the checkpoint of t->st committed by rank 0's writer from the pieces the holders
 * send. 0, or -1 with err on rank 0 (an earlier commit's error, or this one's). */
int dt_ckpt_stream_save(struct trainer *t, char *err, size_t errlen);
/* Every rank: the final weights written atomically to path by rank 0 the same way (dt_model_save_meta's
 * bytes). 0, or -1 with err on rank 0. */
int dt_ckpt_stream_final(struct trainer *t, const char *path, const dt_st_meta *meta, int nmeta, char *err,
                         size_t errlen);

/* Every rank, a resume of such a run: the checkpoint in dir validated as dt_ckpt_load does (the
 * verdict every rank's, the files' crc32 summed a share per rank), its files mapped and only what
 * this rank holds copied in; t->st read. 0, or -1 with err. */
int dt_ckpt_stream_load(struct trainer *t, const char *dir, char *err, size_t errlen);

#endif
