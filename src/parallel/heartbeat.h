/* parallel/heartbeat.h - who is still answering: while a rank waits on a collective it tells
 * rank 0 its step (at once for a new step, then every beat), and rank 0 tells every rank; so
 * when a collective times out, rank 0 names the ranks that went silent (stopped, killed, or
 * stuck in their computation) and the others can name rank 0. A rank stopped inside MPI is
 * silent like any other: arrival at the collective alone could not tell it from a waiting one. */
#ifndef DT_HEARTBEAT_H
#define DT_HEARTBEAT_H

#include <stddef.h>
#include <mpi.h>

typedef struct dt_hb dt_hb;

/* Collective over MPI_COMM_WORLD (it duplicates it for its own messages). NULL for one rank;
 * every function takes NULL. timeout: the collective deadline, which sets the beat. */
dt_hb *dt_hb_new(int rank, int size, double timeout);
void dt_hb_free(dt_hb *h);
/* A new collective deadline (the cluster spec is read after the world is made); sets the beat. */
void dt_hb_set_timeout(dt_hb *h, double timeout);
/* Called while waiting: sends what is due (now for a step not yet announced) and takes in what
 * came. Cheap enough for every poll round. */
void dt_hb_tick(dt_hb *h, long step);
/* Past the deadline of a collective of 'step' (overdue: seconds past it). Fills why and returns
 * 1 (end the job now) naming, in this order: this rank, when it did not run for a while itself
 * (stopped, then woken by the launcher); the ranks not answering (rank 0 names any, the others
 * rank 0); or "every rank answers". Returns 0 on a rank other than 0 when rank 0 answered at
 * this rank's deadline, for up to one more timeout: rank 0 then ends the job with its own list,
 * which names the culprits where this rank cannot. */
int dt_hb_blame(dt_hb *h, long step, double overdue, char *why, size_t n);

#endif
