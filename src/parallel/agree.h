/* parallel/agree.h - one clear message when every rank fails the same way: a step all ranks run
 * (loading the data, reading the spec) has its errors printed once, by the lowest failing rank,
 * and every rank returns the same status marked DT_EXIT_AGREED, so main ends the job with
 * MPI_Finalize instead of MPI_Abort (no abort banner, no message per rank). */
#ifndef DT_AGREE_H
#define DT_AGREE_H

/* Or'ed into an exit status that every rank returns: no peer waits, no MPI_Abort needed. */
#define DT_EXIT_AGREED 0x100

/* Runs fn(ud) on every rank of MPI_COMM_WORLD, the ranks but 0 writing stderr into a buffer;
 * then the ranks agree on the largest status; the lowest failing rank's messages are printed
 * (rank 0's were printed as they came). Returns 0 or the status | DT_EXIT_AGREED. Without MPI
 * (or on one rank) it is fn(ud). */
int dt_agree_run(int (*fn)(void *ud), void *ud);
/* Agrees on the largest rc over MPI_COMM_WORLD (every rank calls it); nonzero | DT_EXIT_AGREED. */
int dt_agree_rc(int rc);

#endif
