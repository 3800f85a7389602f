/* parallel/comm.h - a communicator as a value: an MPI communicator with its rank, size, node-local
 * rank and the world rank of each member (for messages), and waiting on nonblocking operations
 * with a deadline, so a peer that stops answering ends the job (exit 6) naming the step and the
 * ranks that went silent (parallel/heartbeat.h), instead of a hang. The world is one dt_comm; a
 * process grid's axes are others, made by dt_comm_split. Every collective dtrain runs goes
 * through these wrappers. */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <mpi.h>
#include "parallel/heartbeat.h"

typedef struct dt_comm {
        MPI_Comm comm;                  /* owned: a duplicate or a split, freed by dt_comm_free */
        int rank, size;
        int *world;                     /* world rank of each member */
        int local_rank, local_size;     /* on this node (MPI_COMM_TYPE_SHARED), within this group */
        double timeout;                 /* seconds a collective may take */
        dt_hb *hb;                      /* the world's heartbeat (who still answers); NULL for one rank */
        int owns_hb;                    /* the world's value owns it; splits share it */
} dt_comm;

/* ---- a process started without a launcher ----
 * Open MPI's singleton MPI_Init costs 0.3-1 s here (an orted daemon, hwloc probing X displays), more
 * than a small run. main.c asks dt_comm_launched() whether a launcher (mpirun, mpiexec, srun, a
 * PMI/PMIx server) started this process; when none did it skips MPI_Init and calls
 * dt_comm_set_solo(), and every dt_comm is then the one-rank world without MPI underneath (the
 * collectives of one rank do nothing, as they did through MPI). */
int dt_comm_launched(void);
void dt_comm_set_solo(void);
/* MPI_COMM_WORLD's rank and size, or 0 and 1 when solo. */
void dt_comm_world_rank(int *rank, int *size);

/* The world, duplicated so that dtrain's messages never meet a library's. Collective over
 * MPI_COMM_WORLD. timeout <= 0: 300 s. */
void dt_comm_world(dt_comm *c, double timeout);
/* Members of parent with the same color form one communicator, ordered by key (MPI_Comm_split);
 * the deadline and the heartbeat are the parent's. Collective over parent. */
void dt_comm_split(const dt_comm *parent, int color, int key, dt_comm *out);
/* A new deadline for c (and, for the world, its heartbeat's beat). Splits made later inherit it. */
void dt_comm_set_timeout(dt_comm *c, double timeout);
/* Safe on a zeroed, never-initialised value. Free splits before the world they came from. */
void dt_comm_free(dt_comm *c);
/* Every rank calls this at the start of each step (c: the world; the step is the process's, the
 * same for every communicator's messages). While a rank waits on a collective it tells
 * world rank 0 its step, at once and then every beat, and rank 0 tells every rank it is alive, so
 * that the ranks that went silent can be named when a collective times out. */
void dt_comm_announce(dt_comm *c, long step);
/* Waits for n requests, polling; past the deadline the job ends with exit 6, naming 'what', the
 * step and the world ranks not answering (rank 0 names any rank; the others name rank 0, or leave
 * the naming to it). */
void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what);
/* The same until one of them completes (it is then MPI_REQUEST_NULL), or at once when all are
 * MPI_REQUEST_NULL: for a caller that moves several chains of messages on as each step ends. */
void dt_comm_wait_any(dt_comm *c, int n, MPI_Request *r, const char *what);
/* Whether dt_comm_wait yields the core between polls (1, the default, until the setup calls this):
 * on when this machine's ranks (dt_comm_machine_size) want more threads than it has cores, so a
 * waiting rank lets the rank it waits on run; off otherwise, since a yield then hands the core to
 * whatever else is runnable (another user's job, at any nice), which keeps it up to a scheduler
 * tick (4 ms at 250 Hz) while the awaited message sits unread. Measured on 2 ranks of a 2-core
 * machine with background jobs at nice 19 (bench/vstages.sh 2 2): v-half's messages were received
 * a median 0.14 ms, a 90th percentile 1.1 ms after both the send and the wait had begun; without
 * the yield 0.02 and 0.04 ms. */
void dt_comm_set_yield(int on);
/* fn(ud) called between the polls of every wait of this thread (none: NULL), never inside itself:
 * what must move on while the thread waits for something else (shard 3's ring reduce-scatter,
 * which a peer may be waiting on while this rank waits in a tensor split's all-reduce). */
void dt_comm_set_progress(void (*fn)(void *ud), void *ud);
int dt_comm_yields(void);
/* How many of c's members run on this machine (one kernel, by its boot id), this one included:
 * local_size counts MPI's node, which emulated nodes (network namespaces, containers) split though
 * they share the cores. Collective over c. */
int dt_comm_machine_size(dt_comm *c);
/* The most bytes one nonblocking all-reduce carries; longer vectors go as several. Open MPI's
 * libnbc progresses a collective whose rounds complete at once by recursion, and over TCP an 80 MB
 * one went 27,000 frames deep and overflowed an 8 MiB stack (SIGSEGV on rank 0). */
#define DT_COMM_PIECE_BYTES (8L << 20)

/* Blocking allreduce (sum) with the same deadline, in pieces of DT_COMM_PIECE_BYTES. */
void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what);
/* The same with another operation (MPI_MAX ...). */
void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what);
/* The same (sum) started: *r is completed by dt_comm_wait, buf left alone until then; with one
 * member *r is MPI_REQUEST_NULL at once. The same algorithm as the blocking one, so the same bits. */
void dt_comm_iallreduce(dt_comm *c, void *buf, int count, MPI_Datatype t, MPI_Request *r);
/* Broadcast from member root with the deadline. */
void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what);
/* The same for a wait known to be long (the other ranks while rank 0 plans): the waiting ranks
 * sleep 1 ms between polls, so that they leave the cores to the rank working, and its timings of
 * the model are not those of a machine with every core polling. */
void dt_comm_bcast_idle(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what);
/* The largest rc over the members: "every rank stops together" after a check only some ranks
 * made (rank 0 creating the output directory, one rank's device). */
int dt_comm_agree(dt_comm *c, int rc, const char *what);

#endif
