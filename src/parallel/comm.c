/* parallel/comm.c - communicators as values and deadline waits. Open MPI has no timeout on
 * collectives, so every collective dtrain runs is nonblocking and waited on here: MPI_Testall in a
 * loop, heartbeats meanwhile, and MPI_Abort (through dt_die) past the deadline naming the silent
 * ranks. */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include "util/common.h"
#include "util/fault.h"
#include "util/trace.h"
#include "parallel/mpierr.h"

static int solo;

int dt_comm_launched(void)
{
        /* Open MPI's mpirun/orterun, PMIx (Open MPI 5, srun --mpi=pmix), PMI-1/2 (MPICH's hydra,
         * Intel MPI, srun --mpi=pmi2), MPICH's local rank, and any Slurm task (srun, or a batch
         * step: MPI_Init as before, whatever the job means to do) */
        static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                            "PMI_RANK", "PMI_SIZE", "PMI_FD", "MPI_LOCALRANKID", "SLURM_PROCID",
                                            "DTRAIN_MPI_INIT", NULL };
        for (int i = 0; vars[i]; i++)
                if (getenv(vars[i])) return 1;
        return 0;
}

void dt_comm_set_solo(void) { solo = 1; }

void dt_comm_world_rank(int *rank, int *size)
{
        *rank = 0;
        *size = 1;
        if (solo) return;
        MPI_Comm_rank(MPI_COMM_WORLD, rank);
        MPI_Comm_size(MPI_COMM_WORLD, size);
}

/* the one-rank world of a process without MPI */
static void describe_solo(dt_comm *c, double timeout)
{
        c->comm = MPI_COMM_NULL;
        c->rank = 0;
        c->size = 1;
        c->world = dt_calloc(1, sizeof *c->world);
        c->local_rank = 0;
        c->local_size = 1;
        c->timeout = timeout > 0 ? timeout : 300;
}

/* rank, size, world ranks and node-local rank of c->comm */
static void describe(dt_comm *c, double timeout)
{
        dt_mpi_errhandler_set(c->comm);
        MPI_Comm_rank(c->comm, &c->rank);
        MPI_Comm_size(c->comm, &c->size);
        c->world = dt_calloc((size_t)c->size, sizeof *c->world);
        int *mine = dt_calloc((size_t)c->size, sizeof *mine);
        MPI_Group g, w;
        MPI_Comm_group(c->comm, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &w);     /* the world is meant: ranks are named by it */
        for (int r = 0; r < c->size; r++) mine[r] = r;
        MPI_Group_translate_ranks(g, c->size, mine, w, c->world);
        MPI_Group_free(&g);
        MPI_Group_free(&w);
        free(mine);
        MPI_Comm node;
        MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
        dt_mpi_errhandler_set(node);
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
        c->timeout = timeout > 0 ? timeout : 300;
}

void dt_comm_world(dt_comm *c, double timeout)
{
        memset(c, 0, sizeof *c);
        if (solo) {
                describe_solo(c, timeout);
                c->owns_hb = 1;         /* dt_hb_new(0, 1) is NULL */
                return;
        }
        MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
        describe(c, timeout);
        if (c->size > 1)
                snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", c->rank, c->size);
        c->hb = dt_hb_new(c->rank, c->size, c->timeout);
        c->owns_hb = 1;
}

void dt_comm_split(const dt_comm *parent, int color, int key, dt_comm *out)
{
        memset(out, 0, sizeof *out);
        if (solo) {
                (void)color; (void)key;
                describe_solo(out, parent->timeout);
                return;
        }
        MPI_Comm_split(parent->comm, color, key, &out->comm);
        describe(out, parent->timeout);
        out->hb = parent->hb;
}

void dt_comm_set_timeout(dt_comm *c, double timeout)
{
        c->timeout = timeout > 0 ? timeout : 300;
        if (c->owns_hb) dt_hb_set_timeout(c->hb, c->timeout);
}

void dt_comm_free(dt_comm *c)
{
        if (c->size == 0) return;       /* never initialised */
        if (c->owns_hb) dt_hb_free(c->hb);
        free(c->world);
        if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
        memset(c, 0, sizeof *c);
}

/* The process's step, whichever communicator waits: a pipeline's or a tensor group's split
 * reported step 1 for a stall at step 100 while it kept a step of its own that nobody set. */
static long cur_step;

void dt_comm_announce(dt_comm *c, long step)
{
        (void)c;
        cur_step = step;
}

/* --trace: a blocking collective is one "comm" span; a wait on requests issued earlier (overlapped
 * gradient buckets, pipeline messages) is a "wait" span */
static int in_blocking;
static int idle_wait;   /* dt_comm_bcast_idle: sleep between polls */
/* Whether a wait yields its core between polls (dt_comm_set_yield): on until the setup knows the
 * node's ranks and threads. */
static int yield_wait = 1;

void dt_comm_set_yield(int on) { yield_wait = on; }

int dt_comm_yields(void) { return yield_wait; }
static void wait_reqs(dt_comm *c, int n, MPI_Request *r, const char *what, int any);

static _Thread_local void (*progress_fn)(void *);
static _Thread_local void *progress_ud;
static _Thread_local int in_progress;

void dt_comm_set_progress(void (*fn)(void *ud), void *ud)
{
        progress_fn = fn;
        progress_ud = ud;
}

void dt_comm_wait(dt_comm *c, int n, MPI_Request *r, const char *what)
{
        double tt = in_blocking ? 0 : dt_trace_t();
        wait_reqs(c, n, r, what, 0);
        if (!in_blocking) dt_trace_end("wait", what, NULL, tt);
}

void dt_comm_wait_any(dt_comm *c, int n, MPI_Request *r, const char *what)
{
        double tt = dt_trace_t();
        wait_reqs(c, n, r, what, 1);
        dt_trace_end("wait", what, NULL, tt);
}

/* Until every request (any: one, or none left) completed */
static void wait_reqs(dt_comm *c, int n, MPI_Request *r, const char *what, int any)
{
        double t0 = dt_now();
        dt_hb_tick(c->hb, cur_step);
        dt_fault_at(DT_FAULT_HANG, cur_step + 1);
        /* Open MPI advances nonblocking collectives only inside MPI calls, so poll without
         * sleeping (a sleep between tests made the gradient sync several times slower than
         * MPI_Allreduce); sched_yield lets other ranks run when ranks outnumber cores, and only
         * then (dt_comm_set_yield). */
        for (unsigned long k = 0;; k++) {
                int done = 0, idx;
                if (any) MPI_Testany(n, r, &idx, &done, MPI_STATUS_IGNORE);
                else MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
                if (done) return;
                if (progress_fn && !in_progress) {
                        in_progress = 1;
                        progress_fn(progress_ud);
                        in_progress = 0;
                }
                if (idle_wait) {        /* a long wait: leave the cores to the rank working */
                        struct timespec ts = { 0, 1000000 };
                        nanosleep(&ts, NULL);
                }
                if ((k & 255) == 255 || idle_wait) {
                        double late = dt_now() - t0 - c->timeout;
                        char who[512];
                        if (late > 0 && dt_hb_blame(c->hb, cur_step, late, who, sizeof who))
                                dt_die(DT_EXIT_PEER, "%s at step %ld did not complete within %.0f s (%s)", what,
                                       cur_step + 1, c->timeout, who);
                        dt_hb_tick(c->hb, cur_step);
                        if (yield_wait || idle_wait) sched_yield();
                }
        }
}

/* A blocking collective's wait (r started at trace time tt): one "comm" span, not a "wait" one */
static void blocking_wait(dt_comm *c, MPI_Request *r, const char *coll, const char *what, double tt)
{
        in_blocking = 1;
        dt_comm_wait(c, 1, r, what);
        in_blocking = 0;
        dt_trace_end("comm", coll, what, tt);
}

void dt_comm_allreduce(dt_comm *c, void *buf, long count, MPI_Datatype t, const char *what)
{
        dt_comm_allreduce_op(c, buf, count, t, MPI_SUM, what);
}

void dt_comm_allreduce_op(dt_comm *c, void *buf, long count, MPI_Datatype t, MPI_Op op, const char *what)
{
        if (c->size == 1) return;
        int tsz;
        MPI_Type_size(t, &tsz);
        const long chunk = DT_COMM_PIECE_BYTES / tsz;   /* also keeps MPI's int counts */
        for (long off = 0; off < count; off += chunk) {
                MPI_Request r;
                int cnt = (int)(count - off < chunk ? count - off : chunk);
                double tt = dt_trace_t();
                MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * tsz, cnt, t, op, c->comm, &r);
                blocking_wait(c, &r, "allreduce", what, tt);
        }
}

void dt_comm_iallreduce(dt_comm *c, void *buf, int count, MPI_Datatype t, MPI_Request *r)
{
        *r = MPI_REQUEST_NULL;
        if (c->size > 1) MPI_Iallreduce(MPI_IN_PLACE, buf, count, t, MPI_SUM, c->comm, r);
}

void dt_comm_bcast(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what)
{
        if (c->size == 1) return;
        MPI_Request r;
        double tt = dt_trace_t();
        MPI_Ibcast(buf, count, t, root, c->comm, &r);
        blocking_wait(c, &r, "bcast", what, tt);
}

void dt_comm_bcast_idle(dt_comm *c, void *buf, int count, MPI_Datatype t, int root, const char *what)
{
        if (c->size == 1) return;
        MPI_Request r;
        MPI_Ibcast(buf, count, t, root, c->comm, &r);
        idle_wait = 1;
        dt_comm_wait(c, 1, &r, what);
        idle_wait = 0;
}

int dt_comm_agree(dt_comm *c, int rc, const char *what)
{
        dt_comm_allreduce_op(c, &rc, 1, MPI_INT, MPI_MAX, what);
        return rc;
}

/* The kernel's boot id names the machine: namespaces and containers on one kernel share it (and
 * its cores), where MPI's nodes (MPI_COMM_TYPE_SHARED) follow the launcher's host names or
 * addresses. Without /proc, the host name. */
static void machine_id(char *id, size_t n)
{
        memset(id, 0, n);
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (!f || !fgets(id, (int)n, f)) gethostname(id, n - 1);
        if (f) fclose(f);
        id[n - 1] = 0;
}

int dt_comm_machine_size(dt_comm *c)
{
        if (c->size <= 1 || c->comm == MPI_COMM_NULL) return 1;    /* <= 1: a single run's unopened world */
        enum { N = 64 };
        char mine[N], *all = dt_malloc((size_t)c->size * N);
        machine_id(mine, N);
        MPI_Request r;
        MPI_Iallgather(mine, N, MPI_CHAR, all, N, MPI_CHAR, c->comm, &r);
        dt_comm_wait(c, 1, &r, "machine count");
        int k = 0;
        for (int q = 0; q < c->size; q++) k += !memcmp(all + (size_t)q * N, mine, N);
        free(all);
        return k;
}
