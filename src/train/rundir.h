/* train/rundir.h - one run per output directory: DIR/.lock held with flock(2) by the run writing
 * DIR, naming its pid, so a second run into the same directory is refused instead of deleting the
 * first one's checkpoint temporaries. The kernel drops the lock when the holder dies. */
#ifndef DT_RUNDIR_H
#define DT_RUNDIR_H

/* Takes DIR's lock: 0 with *lock_fd open (close it to release), DT_EXIT_USAGE when another run
 * holds it, DT_EXIT_DATA when the lock file cannot be made; a message is printed either way. */
int dt_run_lock(const char *dir, int *lock_fd);

#endif
