/* parallel/comm.h - a communicator as a value: an MPI communicator with its rank, size, node-local
 * rank, the world rank of each member (for messages), and waiting on nonblocking operations with a
 * deadline, so a peer that never arrives ends the job (exit 6) naming the step and the ranks that
 * did not arrive, instead of a hang. The world is one dt_comm; a process grid's axes are others,
 * made by dt_comm_split. Every collective dtrain runs goes through these wrappers. */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <mpi.h>

typedef struct dt_comm {
        MPI_Comm comm;                  /* owned: a duplicate or a split, freed by dt_comm_free */
        int rank, size;
        int *world;                     /* world rank of each member */
        int local_rank, local_size;     /* on this node (MPI_COMM_TYPE_SHARED), within this group */
        double timeout;                 /* seconds a collective may take */
        long step;                      /* for messages */
        /* arrival tracking on member 0: who has announced the current step */
        MPI_Request *arrive_req;
        long *arrive_buf, *arrive_rx;
        long announced;                 /* last step announced by this rank */
        MPI_Request my_arrive;
        long my_arrive_buf;
} dt_comm;

/* The world, duplicated so that dtrain's messages never meet a library's. Collective over
 * MPI_COMM_WORLD. timeout <= 0: 300 s. */
void dt_comm_world(dt_comm *c, double timeout);
/* Members of parent with the same color form one communicator, ordered by key (MPI_Comm_split);
 * the deadline is the parent's. Collective over parent. */
void dt_comm_split(const dt_comm *parent, int color, int key, dt_comm *out);
/* Safe on a zeroed, never-initialised value. */
void dt_comm_free(dt_comm *c);
/* Every rank calls this at the start of each step. At its first collective of the step a rank
 * sends member 0 a small "I reached step s" message, so that member 0 can name the ranks missing
 * when a collective times out. */
void dt_comm_announce(dt_comm *c, long step);
/* Waits for n requests, polling; past the deadline the job ends with exit 6, naming 'what', the
 * step and (on member 0) the world ranks that never announced it. */
void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what);
/* Blocking allreduce (sum) with the same deadline. */
void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what);
/* The same with another operation (MPI_MAX ...). */
void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what);
/* Broadcast from member root with the deadline. */
void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what);
/* The largest rc over the members: "every rank stops together" after a check only some ranks
 * made (rank 0 creating the output directory, one rank's device). */
int dt_comm_agree(dt_comm *c, int rc, const char *what);

/* The message part naming who did not arrive at step: world ranks of members r >= 1 whose last
 * announced step (arrived[r]) is below step. Pure, for tests. */
void dt_comm_missing(const long *arrived, const int *world, int size, long step, char *buf, size_t n);

#endif
