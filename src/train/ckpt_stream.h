/* train/ckpt_stream.h - a sharded run's checkpoint streamed piece by piece to rank 0's writer. */
#ifndef DT_CKPT_STREAM_H
#define DT_CKPT_STREAM_H

#include <stddef.h>

struct trainer;

/* Whether this run streams its checkpoints (partition.shard on a data-parallel grid without stages
 * or tensor splits; those gather the whole model on rank 0). */
int dt_ckpt_stream_on(const struct trainer *t);
/* Every rank of the data axis: the checkpoint of t->st committed by rank 0's writer from the
 * pieces the owners send. 0, or -1 with err on rank 0 (an earlier commit's error, or this one's). */
int dt_ckpt_stream_save(struct trainer *t, char *err, size_t errlen);

/* A resume of such a run: the checkpoint in dir validated as dt_ckpt_load does, its files mapped
 * and only this rank's parts (and what every rank holds whole) copied in; t->st read. 0, or -1. */
int dt_ckpt_stream_load(struct trainer *t, const char *dir, char *err, size_t errlen);

#endif
