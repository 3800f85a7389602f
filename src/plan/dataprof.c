/* plan/dataprof.c - the step's own work besides the layers and the update, timed on this machine
 * (profile.h): the loader's preparation of a rank's slice from the model's own dataset (data/loader.c,
 * the run's code) with its copy into the model's input, and the loss over the slice's outputs; each
 * as seconds a + c b for a slice of b samples, fitted through two sizes. */
#include "plan/profile.h"

#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/stats.h"
#include "layers/loss.h"
#include "data/data.h"

enum { REPS = 7 };

/* Reads 64 MiB, so that what was just read is no longer in the caches: a run's samples come from
 * memory, a dataset's cache being larger than the caches or read long before. */
static void flush_caches(void)
{
        size_t n = (size_t)16 << 20;
        float *f = dt_falloc(n);
        memset(f, 0, n * sizeof *f);
        volatile float sink = 0;
        for (size_t k = 0; k < n; k += 16) sink += f[k];
        (void)sink;
        free(f);
}

static void first_b(void *ud, int B, int *lo, int *hi)
{
        *lo = 0;
        *hi = DT_MIN(B, *(const int *)ud);
}

static double process_cpu(void)
{
        struct timespec ts;
        if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return dt_now();
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The median seconds of a slice of b samples from *at in epoch 0's order: the loader's thread
 * preparing each (depth 1) and this one taking and copying it into an input buffer as the step
 * does, both on this thread's core as a bound rank's are; the process's CPU time from one batch
 * taken to the next, so the thread's work and the switches to it and back count, and the
 * machine's other work taking the core does not. */
static double feed_time(const dt_dataset *ds, const long *perm, int b, uint64_t seed, long *at)
{
        cpu_set_t was, one;
        int cpu = sched_getcpu(), pinned = sched_getaffinity(0, sizeof was, &was) == 0;
        CPU_ZERO(&one);
        CPU_SET(cpu < 0 ? 0 : cpu, &one);
        if (pinned) pinned = sched_setaffinity(0, sizeof one, &one) == 0;    /* the thread inherits it */
        dt_loader *L = dt_loader_new(ds, 1, b, first_b, &b);
        float *x = dt_falloc((size_t)b * ds->dim);
        int32_t *y = dt_malloc((size_t)b * (size_t)DT_MAX(1, ds->label_rows) * sizeof *y);
        double t[REPS], t0 = 0;
        int n = 0;
        /* once untimed, so that the pages of the dataset's mapped cache are this process's: a run
         * has mapped most of them within its first few hundred batches, and the first touches
         * took 1.8x as long here (mlp's 128 samples: 281 us, then 154) */
        for (int pass = 0; pass < 2; pass++) {
                if (pass) flush_caches();
                dt_loader_start(L, perm, ds->n, *at, b, seed, 0, 1);
                for (int k = 0; k <= REPS && *at + (long)(k + 1) * b <= ds->n; k++) {
                        double now = process_cpu();
                        if (pass && k > 0) t[n++] = now - t0;
                        t0 = now;
                        const dt_batch *bt = dt_loader_next(L);
                        if (bt->x) memcpy(x, bt->x, (size_t)b * ds->dim * sizeof *x);
                        if (bt->y) memcpy(y, bt->y, (size_t)b * (size_t)DT_MAX(1, ds->label_rows) * sizeof *y);
                        dt_loader_release(L);
                }
        }
        *at += (long)(REPS + 1) * b;
        dt_loader_stop(L);
        dt_loader_free(L);
        if (pinned) sched_setaffinity(0, sizeof was, &was);
        free(x);
        free(y);
        return n ? dt_median(t, n) : 0;
}

/* a + c b through (b1, t1) and (b2, t2), neither part negative */
static void fit(double b1, double t1, double b2, double t2, double *a, double *c)
{
        *c = b2 > b1 && t2 > t1 ? (t2 - t1) / (b2 - b1) : t2 / DT_MAX(b2, 1.0);
        *a = DT_MAX(0.0, t2 - *c * b2);
}

void dt_prof_time_data(dt_prof *pf, const dt_dataset *ds, int batch, uint64_t seed)
{
        pf->feed_a = pf->feed_c = 0;
        if (!ds || ds->n < 2 || batch < 1) return;
        int b2 = (int)DT_MIN((long)batch, ds->n / (2 * REPS + 2)), b1 = DT_MAX(1, b2 / 4);
        if (b2 < 1) return;
        long *perm = dt_malloc((size_t)ds->n * sizeof *perm), at = 0;
        dt_shuffle(perm, ds->n, seed, 0);
        double t1 = feed_time(ds, perm, b1, seed, &at), t2 = feed_time(ds, perm, b2, seed, &at);
        free(perm);
        fit(b1, t1, b2, t2, &pf->feed_a, &pf->feed_c);
}

/* Median seconds of the loss over r rows of C outputs (random values, random labels). */
static double loss_time(dt_prof *pf, int xent, int r, int C)
{
        size_t n = (size_t)r * C;
        float *z = dt_falloc(n), *dz = dt_falloc(n), *t = xent ? NULL : dt_falloc(n);
        int32_t *lab = dt_malloc((size_t)r * sizeof *lab);
        uint64_t h = 0x9e3779b97f4a7c15ull;
        for (size_t k = 0; k < n; k++) {
                h ^= h << 13, h ^= h >> 7, h ^= h << 17;
                z[k] = (float)((h >> 40) * (1.0 / 16777216.0)) * 4.0f - 2.0f;
                if (t) t[k] = z[k] * 0.5f;
        }
        for (int k = 0; k < r; k++) lab[k] = (int32_t)((uint64_t)k * 2654435761u % (uint64_t)C);
        double v[REPS];
        for (int k = -1; k < REPS; k++) {       /* one warm-up */
                long corr = 0;
                double t0 = dt_now();
                if (xent) dt_loss_softmax_xent_be(pf->be, z, lab, r, C, 1.0f / (float)r, dz, &corr);
                else dt_loss_mse(z, t, lab, r, C, 1.0f / (float)r, dz, &corr);
                if (k >= 0) v[k] = dt_now() - t0;
        }
        free(z), free(dz), free(t), free(lab);
        return dt_median(v, REPS);
}

void dt_prof_time_loss(dt_prof *pf, const dt_graph *g, int batch)
{
        pf->loss_a = pf->loss_c = 0;
        if (!g || g->n <= 0 || batch < 1) return;
        const dt_shape *os = &g->layers[g->n - 1].out;
        int rows = os->n == 2 ? os->d[0] : 1, C = os->d[os->n - 1];   /* as train/setup.c reads them */
        int xent = g->spec && g->spec->loss == DT_LOSS_SOFTMAX_XENT;
        int b2 = batch, b1 = DT_MAX(1, batch / 4);
        fit(b1, loss_time(pf, xent, b1 * rows, C), b2, loss_time(pf, xent, b2 * rows, C), &pf->loss_a, &pf->loss_c);
}

double dt_prof_feed(const dt_prof *pf, double b)
{
        return b > 0 ? pf->feed_a + pf->feed_c * b : 0;
}

double dt_prof_loss(const dt_prof *pf, double b)
{
        return b > 0 ? pf->loss_a + pf->loss_c * b : 0;
}
