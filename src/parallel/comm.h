/* parallel/comm.h - the MPI world as dtrain sees it: rank, size, node-local rank, and waiting on
 * nonblocking operations with a deadline, so a peer that stops answering ends the job (exit 6)
 * with the step and the ranks that went silent (parallel/heartbeat.h), instead of a hang. */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <mpi.h>
#include "parallel/heartbeat.h"

typedef struct dt_comm {
        int rank, size;
        int local_rank, local_size;     /* on this node (MPI_COMM_TYPE_SHARED) */
        double timeout;                 /* seconds a collective may take */
        long step;                      /* for messages */
        dt_hb *hb;                      /* who still answers; NULL for one rank */
} dt_comm;

void dt_comm_init(dt_comm *c, double timeout);
void dt_comm_free(dt_comm *c);
/* Every rank calls this at the start of each step. While a rank waits on a collective it tells
 * rank 0 its step, at once and then every beat, and rank 0 tells every rank it is alive, so that
 * the ranks that went silent can be named when a collective times out. */
void dt_comm_announce(dt_comm *c, long step);
/* Waits for n requests, polling; past the deadline the job ends with exit 6, naming 'what', the
 * step and the ranks not answering (rank 0 names any rank; the others name rank 0, or leave the
 * naming to it). */
void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what);
/* Blocking allreduce (sum) with the same deadline. */
void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what);
/* The same with another operation (MPI_MAX ...). */
void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what);
/* Broadcast from root with the same deadline. */
void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what);

#endif
