/* train/rundir.h - one run per output directory: DIR/.lock held with flock(2) by the run writing
 * DIR, naming its pid, so a second run into the same directory is refused instead of deleting the
 * first one's checkpoint temporaries. The kernel drops the lock when the holder dies. */
#ifndef DT_RUNDIR_H
#define DT_RUNDIR_H

#include <stddef.h>

/* Takes DIR's lock: 0 with *lock_fd open (close it to release), DT_EXIT_USAGE when another run
 * holds it, DT_EXIT_DATA when the lock file cannot be made; a message is printed either way. */
int dt_run_lock(const char *dir, int *lock_fd);

/* A fresh run (no --resume) into DIR: when DIR holds a previous run's outputs (checkpoints,
 * metrics.jsonl, model.safetensors, TensorBoard events) it is refused with a message naming
 * --resume and --force (DT_EXIT_USAGE), or with force those outputs are removed first so
 * nothing of the old run is mixed into the new one. Returns 0 or an exit status. */
int dt_run_fresh(const char *dir, int force, int quiet);

/* The previous run's outputs in DIR: how many, the first three named in found ("" when none). */
int dt_run_outputs(const char *dir, char *found, size_t len);

#endif
