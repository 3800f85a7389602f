/* plan/profile_share.c - what sharing a node costs the layers profile.c times: stages taking turns
 * on one core (forked processes passing a token, dt_prof_turns) and busy cores slowing each other
 * (the model's layers alone and beside pinned copies of themselves, dt_prof_neighbours), both kept
 * in the profile's file cache. */
#include <fcntl.h>
#include "plan/profile.h"
#include "plan/profile_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>
#include <signal.h>
#include <errno.h>
#include <sys/wait.h>
#include <mpi.h>
#include "util/common.h"
#include "util/stats.h"
#include "optim/moments.h"
#include "optim/optim.h"

/* ---- stages taking turns on one core ---- */

/* One stage's forward or backward over the micro-batch, seconds. */
static double pass(dt_graph *g, int b, int backward)
{
        dt_fwd_ctx c = { .training = 1, .seed = 1 };
        double t0 = dt_now();
        if (backward) dt_graph_backward(g, &c, b);
        else dt_graph_forward(g, &c, b);
        return dt_now() - t0;
}

static void pin_to(int cpu)
{
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        sched_setaffinity(0, sizeof one, &one);
}

enum { TURN_WARM = 2, TURN_ROUNDS = 7 };

/* A token from a nonblocking pipe, waited for as dt_comm_wait waits: polling, and yielding the core
 * to the ranks that share it. */
static int get_token(int fd)
{
        char tok;
        for (;;) {
                ssize_t n = read(fd, &tok, 1);
                if (n == 1) return 0;
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -1;
                sched_yield();
        }
}

static int put_token(int fd)
{
        char tok = 1;
        return write(fd, &tok, 1) == 1 ? 0 : -1;
}

/* Stage s of a pipeline on one core: m micro-batches forward, each after the stage before it has
 * passed it on, then m backward, each after the stage after it (GPipe's order). Returns the median
 * seconds of a round, from its first forward to its last backward (stage 0's: the round's span),
 * or < 0 on a broken pipe. */
static double take_turns(dt_graph *g, int b, int s, int P, int m, int (*fwd)[2], int (*bwd)[2])
{
        double r[TURN_ROUNDS];
        for (int k = 0; k < TURN_WARM + TURN_ROUNDS; k++) {
                double t0 = dt_now();
                for (int j = 0; j < m; j++) {
                        if (s > 0 && get_token(fwd[s - 1][0])) return -1;
                        pass(g, b, 0);
                        if (s < P - 1 && put_token(fwd[s][1])) return -1;
                }
                for (int j = 0; j < m; j++) {
                        if (s < P - 1 && get_token(bwd[s][0])) return -1;
                        pass(g, b, 1);
                        if (s > 0 && put_token(bwd[s - 1][1])) return -1;
                }
                if (k >= TURN_WARM) r[k - TURN_WARM] = dt_now() - t0;
        }
        return dt_median(r, TURN_ROUNDS);
}

static uint64_t turns_key(const dt_graph *const *g, int P, int m, int b)
{
        uint64_t h = dt_hash64(0x7475726e73ull, (uint64_t)P << 40 | (uint64_t)m << 24 | (uint64_t)b);
        for (int s = 0; s < P; s++)
                for (int i = 0; i < g[s]->n; i++) h = dt_hash64(h, dt_prof_gkey(g[s], i, b));
        return h;
}

/* Measures the pipeline on one core: each stage alone first (the same passes, hot), then all of
 * them as processes pinned to this core passing tokens; the ratio of the round to the stages' sum.
 * 0 when it cannot (inside an MPI job, no fork). */
static int measure_turns(dt_prof *pf, const dt_graph *const *g0, int P, int m, int b, double *factor)
{
        int mpi = 0;
        MPI_Initialized(&mpi);
        if (mpi || P < 2 || P > 64) return 0;
        dt_prof_prepared *pg = dt_calloc((size_t)P, sizeof *pg);
        double alone = 0;
        for (int s = 0; s < P; s++) dt_prof_prepare(pf, g0[s], b, &pg[s], 0);
        for (int s = 0; s < P; s++) {
                double r[TURN_ROUNDS];
                for (int k = 0; k < TURN_WARM + TURN_ROUNDS; k++) {
                        double t = pass(&pg[s].lg, b, 0) + pass(&pg[s].lg, b, 1);
                        if (k >= TURN_WARM) r[k - TURN_WARM] = t;
                }
                alone += m * dt_median(r, TURN_ROUNDS);
        }
        cpu_set_t was;
        int cpu = sched_getcpu(), ok = 1;
        sched_getaffinity(0, sizeof was, &was);
        pin_to(cpu < 0 ? 0 : cpu);
        int (*fwd)[2] = dt_malloc((size_t)P * sizeof *fwd), (*bwd)[2] = dt_malloc((size_t)P * sizeof *bwd);
        pid_t kids[64];
        int nk = 0;
        for (int s = 0; s < P; s++) fwd[s][0] = fwd[s][1] = bwd[s][0] = bwd[s][1] = -1;
        for (int s = 0; s < P && ok; s++) {
                if (pipe(fwd[s]) || pipe(bwd[s])) ok = 0;
                else for (int e = 0; e < 2; e++) {
                        fcntl(fwd[s][e], F_SETFL, O_NONBLOCK);
                        fcntl(bwd[s][e], F_SETFL, O_NONBLOCK);
                }
        }
        fflush(NULL);
        for (int s = 1; s < P && ok; s++) {
                pid_t pid = fork();
                if (pid == 0) _exit(take_turns(&pg[s].lg, b, s, P, m, fwd, bwd) < 0);
                if (pid < 0) ok = 0;
                else kids[nk++] = pid;
        }
        double round = ok ? take_turns(&pg[0].lg, b, 0, P, m, fwd, bwd) : -1;
        if (round < 0)
                for (int k = 0; k < nk; k++) kill(kids[k], SIGKILL);
        for (int k = 0; k < nk; k++) waitpid(kids[k], NULL, 0);
        for (int s = 0; s < P; s++) {
                for (int e = 0; e < 2; e++) {
                        if (fwd[s][e] >= 0) close(fwd[s][e]);
                        if (bwd[s][e] >= 0) close(bwd[s][e]);
                }
                dt_graph_free(&pg[s].lg);
        }
        free(fwd), free(bwd), free(pg);
        sched_setaffinity(0, sizeof was, &was);
        if (round < 0) return 0;
        *factor = DT_MAX(1.0, round / (alone > 0 ? alone : 1e-9));
        return 1;
}

double dt_prof_turns(dt_prof *pf, const dt_graph *const *g, int P, int m, int b)
{
        if (P < 2) return 1.0;
        m = DT_MAX(1, DT_MIN(m, 8));    /* enough micro-batches for the stages to overlap */
        uint64_t key = turns_key(g, P, m, b);
        dt_layer_cost *c = dt_prof_find(pf, key);
        double f = 1.0;
        if (c) return c->f;
        if (!pf->measure || !measure_turns(pf, g, P, m, b, &f)) return 1.0;
        dt_prof_put(pf, key, (dt_layer_cost){ f, 0, 0, 0 }, 0);
        dt_prof_cache_save(pf, key, (dt_layer_cost){ f, 0, 0, 0 }, 0);
        return f;
}

/* ---- cores slowing each other ---- */

uint64_t dt_prof_neigh_key(const dt_prof *pf, int busy)
{
        return dt_prof_ref_key(pf, 0x6e65696768ull + (uint64_t)busy);
}

/* Copies of this process running the model's layers (pf->ref at pf->ref_b samples) without end,
 * one on each of busy - 1 cores other than this one, this process pinned to the first: what ranks
 * filling a node do to each other. Each copy is on a core of its own, as mpirun binds ranks (left
 * to the kernel, a copy sometimes started on the parent's core and the ratio read 1.9), and they
 * count only once they say they have set up (timed while they were still allocating and filling
 * their buffers, the shared time came out up to 2x). */
struct copies {
        cpu_set_t was;
        pid_t kids[64];
        int nk, cpus[64], nc;
        void (*work)(void *);   /* what each copy runs without end (NULL: the model's layers) */
        void *arg;
};

static void graph_work(dt_prof *pf)
{
        dt_prof_graph_time(pf, pf->ref, pf->ref_b);
}

static void copy_work(dt_prof *pf, const struct copies *cp)
{
        if (cp->work) cp->work(cp->arg);
        else graph_work(pf);
}

/* Pins this process to its first core and returns how many cores can be busy (<= busy), or 0. */
static int copies_pin(dt_prof *pf, struct copies *cp, int busy)
{
        int mpi = 0;
        MPI_Initialized(&mpi);
        cp->nk = cp->nc = 0;
        cp->work = NULL, cp->arg = NULL;
        if (busy < 2 || mpi || !pf->ref || sched_getaffinity(0, sizeof cp->was, &cp->was) != 0) return 0;
        for (int c = 0; c < CPU_SETSIZE && cp->nc < 64; c++)
                if (CPU_ISSET(c, &cp->was)) cp->cpus[cp->nc++] = c;
        if (cp->nc < busy) busy = cp->nc;
        if (busy < 2) return 0;
        pin_to(cp->cpus[0]);
        dt_prof_layer_clock = pf->threads == 1 ? dt_thread_cpu : dt_now;      /* the copies inherit it */
        return busy;
}

/* Starts the copies; 1 once every one of them is running its layers. */
static int copies_start(dt_prof *pf, struct copies *cp, int busy)
{
        int ready[2];
        cp->nk = 0;
        if (pipe(ready)) return 0;
        fflush(NULL);
        for (int k = 1; k < busy && k < 64; k++) {
                pid_t pid = fork();
                if (pid == 0) {
                        close(ready[0]);
                        pin_to(cp->cpus[k]);
                        copy_work(pf, cp);
                        char c = 1;
                        if (write(ready[1], &c, 1) != 1) _exit(1);
                        for (;;) copy_work(pf, cp);     /* until the parent ends it */
                }
                if (pid > 0) cp->kids[cp->nk++] = pid;
        }
        close(ready[1]);
        int up = 0;
        char c;
        while (up < cp->nk && read(ready[0], &c, 1) == 1) up++;
        close(ready[0]);
        return cp->nk && up == cp->nk;
}

static void copies_stop(struct copies *cp)
{
        for (int k = 0; k < cp->nk; k++) kill(cp->kids[k], SIGKILL);
        for (int k = 0; k < cp->nk; k++) waitpid(cp->kids[k], NULL, 0);
        cp->nk = 0;
}

static void copies_unpin(struct copies *cp)
{
        sched_setaffinity(0, sizeof cp->was, &cp->was);
        dt_prof_layer_clock = dt_now;
}

/* Over five pairs, alone then beside the copies (each pair starting them afresh), the median of
 * timed's shared seconds over the median of its alone seconds, kept in the file cache under key with
 * the last few starts' and the median of those returned (>= 1); unpins. Not the median of each
 * pair's ratio: on a 2-vCPU Zen 3 lstm's layers timed alone read 13.0 or 17.7 ms from one timing
 * to the next, and each pair's ratio, 0.54 to 1.75, made one start's factor 1.70 where its medians
 * gave 1.02 and the runs' compute 1.0-1.07 (lstm's 2-rank step predicted 19.7% long). */
static double shared_over_alone(dt_prof *pf, struct copies *cp, int busy, double (*timed)(dt_prof *, void *),
                                void *arg, uint64_t key)
{
        /* alone and shared alternately: the host's own load drifts */
        double a[5], sh[5];
        int reps = 0;
        for (; reps < 5; reps++) {
                double alone = timed(pf, arg);
                int up = copies_start(pf, cp, busy);
                if (!cp->nk) break;
                double shared = up ? timed(pf, arg) : alone;
                copies_stop(cp);
                a[reps] = alone, sh[reps] = shared;
        }
        copies_unpin(cp);
        if (!reps) return 1.0;
        /* kept with the last few starts' factors under a key of its own (a ratio line), and their
         * median taken (profile_cache.c): one start's five pairs read
         * 0.75 to 1.87 each and their median 1.01 in one start and 1.44 two starts later, and
         * cnn-bn's 2-rank step was predicted 42 and 85 ms with nothing else changed */
        double ma = dt_median(a, reps);
        double f = dt_median(sh, reps) / (ma > 0 ? ma : 1e-9);
        dt_prof_put(pf, key, (dt_layer_cost){ f, 0, 0, 0 }, 0);
        dt_prof_cache_save(pf, key, (dt_layer_cost){ f, 0, 0, 0 }, 0);
        f = dt_prof_find(pf, key)->f;
        return f < 1.0 ? 1.0 : f;
}

static double graph_timed(dt_prof *pf, void *arg)
{
        (void)arg;
        return dt_prof_graph_time(pf, pf->ref, pf->ref_b);
}

/* How much slower one core runs the model's own layers while busy - 1 copies run them on the other
 * cores (shared caches, memory bandwidth, and on a virtual machine whatever shares its host's
 * cores). Measured now and on the model itself, because on this VM it drifts and depends on the
 * layers: two busy vCPUs ran lenet's layers 1.0x and 1.4x slower per rank an hour apart while an
 * SGEMM and a copy ran unslowed. 1 under MPI (no fork inside a job) or when fork fails. */
static double neighbour_factor(dt_prof *pf, int busy)
{
        struct copies cp;
        busy = copies_pin(pf, &cp, busy);
        return busy ? shared_over_alone(pf, &cp, busy, graph_timed, NULL, dt_prof_neigh_key(pf, busy)) : 1.0;
}

/* One optimizer step as training takes it (the Adam step, the norm's pass, the zeroing) over n
 * parameters of arrays of one's own: what a rank does between the gradient sum and the next
 * forward, streaming memory where the model is large. */
struct update_arrays {
        dt_prof *pf;
        dt_moments mo;
        float *p, *g;
        size_t n;
        int step;
};

static void update_alloc(dt_prof *pf, struct update_arrays *u, size_t n)
{
        u->pf = pf, u->n = n, u->step = 0;
        u->mo = (dt_moments){ .n = 2 };
        dt_moments_alloc(&u->mo, n);
        u->p = dt_falloc(n), u->g = dt_falloc(n);
        memset(u->p, 0, n * 4); memset(u->g, 0, n * 4); memset(u->mo.m, 0, n * 4); memset(u->mo.v, 0, n * 4);
}

static void update_work(void *arg)
{
        struct update_arrays *u = arg;
        dt_optim_hp hp = { .kind = DT_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
        const dt_backend *be = u->pf->be;
        be->ops->optim_step(u->pf->be, &hp, 1e-3f, ++u->step, u->p, u->g, u->mo.m, u->mo.v, u->n);
        (void)be->ops->sumsq(u->pf->be, u->g, u->n);
        be->ops->zero(u->pf->be, u->g, u->n);
}

static double update_time(struct update_arrays *u)
{
        double best = 1e30;
        for (int k = 0; k < 2; k++) {
                double t0 = dt_prof_layer_clock();
                update_work(u);
                best = DT_MIN(best, dt_prof_layer_clock() - t0);
        }
        return best;
}

uint64_t dt_prof_neigh_mem_key(const dt_prof *pf, int busy)
{
        return dt_prof_ref_key(pf, 0x6e6d656d6f7279ull + (uint64_t)busy);
}

static double update_timed(dt_prof *pf, void *arg)
{
        (void)pf;
        return update_time(arg);
}

/* As neighbour_factor, on the optimizer step over the model's parameters (up to 2^22: past the
 * caches it streams memory as larger ones do) with every copy stepping its own: the update is
 * memory-bound and the replicas of a data axis all take it at once, after the same sum. On a
 * 2-vCPU Zen 3, mlp's update took 1.5x its time alone beside a busy neighbour while its layers
 * computed 1.1x slower. */
static double neighbour_mem_factor(dt_prof *pf, int busy)
{
        struct copies cp;
        busy = copies_pin(pf, &cp, busy);
        if (!busy) return 1.0;
        size_t n = (size_t)DT_MAX(1 << 16, DT_MIN(pf->ref->nparams, (1 << 22) + 44444));
        struct update_arrays u;
        update_alloc(pf, &u, n);
        cp.work = update_work, cp.arg = &u;
        update_time(&u);        /* its pages in place */
        double f = shared_over_alone(pf, &cp, busy, update_timed, &u, dt_prof_neigh_mem_key(pf, busy));
        free(u.p), free(u.g), free(u.mo.blk);
        return f;
}

/* A factor measured with 'all' cores busy, for 'busy' of them (1 .. all): in proportion. */
static double between(double full, double busy, int all)
{
        if (all < 2 || busy <= 1.0) return 1.0;
        return 1.0 + (full - 1.0) * (DT_MIN(busy, (double)all) - 1) / (all - 1);
}

double dt_prof_neighbours(dt_prof *pf, double busy)
{
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (busy > cores) busy = (double)cores;
        if (busy <= 1.0) return 1.0;
        if (pf->neigh <= 0) {   /* every core busy, measured once; fewer interpolate */
                pf->neigh_busy = (int)(cores < 64 ? cores : 64);
                pf->neigh = pf->measure ? neighbour_factor(pf, pf->neigh_busy) : 1.0;
        }
        return between(pf->neigh, busy, pf->neigh_busy);
}

double dt_prof_neighbours_mem(dt_prof *pf, double busy)
{
        if (busy <= 1.0) return 1.0;
        dt_prof_neighbours(pf, busy);   /* sets neigh_busy, the cores both factors are measured on */
        if (pf->neigh_busy < 2) return 1.0;
        if (pf->neigh_mem <= 0) pf->neigh_mem = pf->measure ? neighbour_mem_factor(pf, pf->neigh_busy) : 1.0;
        return between(pf->neigh_mem, busy, pf->neigh_busy);
}
