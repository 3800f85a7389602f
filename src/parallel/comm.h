/* parallel/comm.h - the MPI world as dtrain sees it: rank, size, node-local rank, and waiting on
 * nonblocking operations with a deadline, so a peer that never arrives ends the job (exit 6)
 * with the step and the ranks that did not arrive, instead of a hang. */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <mpi.h>

typedef struct dt_comm {
        int rank, size;
        int local_rank, local_size;     /* on this node (MPI_COMM_TYPE_SHARED) */
        double timeout;                 /* seconds a collective may take */
        long step;                      /* for messages */
        /* arrival tracking on rank 0: who has announced the current step */
        MPI_Request *arrive_req;
        long *arrive_buf, *arrive_rx;
        long announced;                 /* last step announced by this rank */
        MPI_Request my_arrive;
        long my_arrive_buf;
} dt_comm;

void dt_comm_init(dt_comm *c, double timeout);
void dt_comm_free(dt_comm *c);
/* Every rank calls this at the start of each step. At its first collective of the step a rank
 * sends rank 0 a small "I reached step s" message, so that rank 0 can name the ranks missing when
 * a collective times out. */
void dt_comm_announce(dt_comm *c, long step);
/* Waits for n requests, polling; past the deadline the job ends with exit 6, naming 'what', the
 * step and (on rank 0) the ranks that never announced it. */
void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what);
/* Blocking allreduce (sum) with the same deadline. */
void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what);
/* The same with another operation (MPI_MAX ...). */
void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what);

#endif
