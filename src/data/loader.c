/* data/loader.c - the loader thread: prepares this rank's part of the next global batches (gather,
 * read and convert, normalise, augment) into a bounded ring of slots while the current step
 * computes. Batches come out in order and hold exactly the bytes a synchronous gather would make
 * (the same functions on the same indices), so a run with the thread is bitwise the run without.
 * The thread never calls MPI and never exits the process: a data error travels in its slot and the
 * consumer dies with it on the main thread. */
#include "data/data.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
        dt_batch b;
        size_t xcap, ycap, tcap;        /* allocated samples */
        int failed;
        char msg[DT_PATH_MAX + 256];
} slot;

struct dt_loader {
        const dt_dataset *ds;
        int parts;                      /* DT_LOAD_INPUTS | DT_LOAD_LABELS: what this rank reads */
        int depth, nslot;
        dt_loader_range range;
        void *ud;
        slot *s;
        /* the epoch being produced (guarded by mu) */
        const long *perm;
        long n, next;                   /* producer's cursor: the next global batch's first position */
        int batch, augment;
        uint64_t seed;
        long epoch;
        long produced, consumed;        /* batches of this epoch */
        unsigned long gen;              /* bumped by start and stop: a batch of an old epoch is dropped */
        int active, busy, quit;
        double waited, prepared;
        pthread_t th;
        int have_thread;
        pthread_mutex_t mu;
        pthread_cond_t prod, cons, idle;
};

static void grow(slot *s, const dt_dataset *ds, int parts, int k)
{
        size_t need = (size_t)(k > 0 ? k : 1);
        int labels = parts & DT_LOAD_LABELS;
        if ((parts & DT_LOAD_INPUTS) && need > s->xcap) {
                free(s->b.x);
                s->b.x = dt_falloc(need * ds->dim);
                s->xcap = need;
        }
        if (labels && dt_dataset_labelled(ds) && need > s->ycap) {
                free(s->b.y);
                s->b.y = dt_malloc(need * (size_t)DT_MAX(1, ds->label_rows) * sizeof(int32_t));
                s->ycap = need;
        }
        if (labels && ds->target && need > s->tcap) {
                free(s->b.t);
                s->b.t = dt_falloc(need * (size_t)ds->tdim);
                s->tcap = need;
        }
}

/* the global batch starting at 'start': this rank's positions, read and converted */
static void prepare(const dt_loader *L, slot *s, const long *perm, long n, long start, int batch, uint64_t seed,
                    long epoch, int augment)
{
        double t0 = dt_now();
        int B = (int)DT_MIN((long)batch, n - start), lo = 0, hi = B;
        L->range(L->ud, B, &lo, &hi);
        grow(s, L->ds, L->parts, hi - lo);
        s->b.start = start;
        s->b.B = B;
        s->b.lo = lo;
        s->b.hi = hi;
        const long *idx = perm + start + lo;
        int k = hi - lo;
        int labels = L->parts & DT_LOAD_LABELS;
        float *x = L->parts & DT_LOAD_INPUTS ? s->b.x : NULL;
        int32_t *y = labels && dt_dataset_labelled(L->ds) ? s->b.y : NULL;
        float *t = labels && L->ds->target ? s->b.t : NULL;
        s->failed = k > 0 && (augment ? dt_dataset_gather_train(L->ds, idx, k, seed, epoch, x, y, t, s->msg,
                                                                sizeof s->msg)
                                      : dt_dataset_gather_msg(L->ds, idx, k, x, y, t, s->msg, sizeof s->msg));
        s->b.seconds = dt_now() - t0;
}

static void *run(void *arg)
{
        dt_loader *L = arg;
        pthread_mutex_lock(&L->mu);
        while (!L->quit) {
                if (!L->active || L->produced - L->consumed >= L->nslot || L->next >= L->n) {
                        pthread_cond_wait(&L->prod, &L->mu);
                        continue;
                }
                slot *s = &L->s[L->produced % L->nslot];
                unsigned long gen = L->gen;
                long start = L->next;
                const long *perm = L->perm;
                long n = L->n, epoch = L->epoch;
                int batch = L->batch, augment = L->augment;
                uint64_t seed = L->seed;
                L->busy = 1;
                pthread_mutex_unlock(&L->mu);
                prepare(L, s, perm, n, start, batch, seed, epoch, augment);
                pthread_mutex_lock(&L->mu);
                L->busy = 0;
                pthread_cond_broadcast(&L->idle);
                if (gen != L->gen) continue;    /* stopped or restarted meanwhile */
                L->prepared += s->b.seconds;
                L->produced++;
                L->next += s->b.B;
                pthread_cond_signal(&L->cons);
        }
        pthread_mutex_unlock(&L->mu);
        return NULL;
}

dt_loader *dt_loader_new(const dt_dataset *ds, int depth, int max_local, dt_loader_range range, void *ud)
{
        return dt_loader_new_parts(ds, depth, max_local, DT_LOAD_INPUTS | DT_LOAD_LABELS, range, ud);
}

dt_loader *dt_loader_new_parts(const dt_dataset *ds, int depth, int max_local, int parts, dt_loader_range range,
                               void *ud)
{
        dt_loader *L = dt_calloc(1, sizeof *L);
        L->ds = ds;
        L->parts = parts;
        L->depth = depth;
        L->nslot = depth > 0 ? depth : 1;
        L->range = range;
        L->ud = ud;
        L->s = dt_calloc((size_t)L->nslot, sizeof *L->s);
        for (int i = 0; i < L->nslot; i++) grow(&L->s[i], ds, parts, max_local);
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->prod, NULL);
        pthread_cond_init(&L->cons, NULL);
        pthread_cond_init(&L->idle, NULL);
        if (depth > 0) {
                if (pthread_create(&L->th, NULL, run, L) != 0) dt_die(DT_EXIT_RUNTIME, "cannot start the loader thread");
                L->have_thread = 1;
        }
        return L;
}

void dt_loader_stop(dt_loader *L)
{
        pthread_mutex_lock(&L->mu);
        L->active = 0;
        L->gen++;
        while (L->busy) pthread_cond_wait(&L->idle, &L->mu);   /* perm is free once this returns */
        pthread_mutex_unlock(&L->mu);
}

void dt_loader_free(dt_loader *L)
{
        if (!L) return;
        if (L->have_thread) {
                pthread_mutex_lock(&L->mu);
                L->quit = 1;
                pthread_cond_broadcast(&L->prod);
                pthread_mutex_unlock(&L->mu);
                pthread_join(L->th, NULL);
        }
        for (int i = 0; i < L->nslot; i++) {
                free(L->s[i].b.x);
                free(L->s[i].b.y);
                free(L->s[i].b.t);
        }
        free(L->s);
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->prod);
        pthread_cond_destroy(&L->cons);
        pthread_cond_destroy(&L->idle);
        free(L);
}

void dt_loader_start(dt_loader *L, const long *perm, long n, long start, int batch, uint64_t seed, long epoch,
                     int augment)
{
        dt_loader_stop(L);
        pthread_mutex_lock(&L->mu);
        L->perm = perm;
        L->n = n;
        L->next = start;
        L->batch = batch;
        L->seed = seed;
        L->epoch = epoch;
        L->augment = augment;
        L->produced = L->consumed = 0;
        L->gen++;
        L->active = 1;
        pthread_cond_signal(&L->prod);
        pthread_mutex_unlock(&L->mu);
}

const dt_batch *dt_loader_next(dt_loader *L)
{
        slot *s;
        if (!L->have_thread) {  /* synchronous: the same preparation, now */
                s = &L->s[0];
                DT_ASSERT(L->active && L->next < L->n);
                prepare(L, s, L->perm, L->n, L->next, L->batch, L->seed, L->epoch, L->augment);
                L->prepared += s->b.seconds;
                L->waited += s->b.seconds;
                L->next += s->b.B;
        } else {
                double t0 = dt_now();
                pthread_mutex_lock(&L->mu);
                DT_ASSERT(L->active);
                while (L->produced == L->consumed) pthread_cond_wait(&L->cons, &L->mu);
                s = &L->s[L->consumed % L->nslot];
                pthread_mutex_unlock(&L->mu);
                L->waited += dt_now() - t0;
        }
        if (s->failed) dt_die(DT_EXIT_DATA, "%s", s->msg);
        return &s->b;
}

void dt_loader_release(dt_loader *L)
{
        if (!L->have_thread) return;
        pthread_mutex_lock(&L->mu);
        L->consumed++;
        pthread_cond_signal(&L->prod);
        pthread_mutex_unlock(&L->mu);
}

void dt_loader_times(dt_loader *L, double *waited, double *prepared)
{
        pthread_mutex_lock(&L->mu);
        *waited = L->waited;
        *prepared = L->prepared;
        L->waited = L->prepared = 0;
        pthread_mutex_unlock(&L->mu);
}

size_t dt_loader_bytes(const dt_dataset *ds, int depth, int max_local)
{
        size_t per = ds->dim * sizeof(float) +
                     (dt_dataset_labelled(ds) ? (size_t)DT_MAX(1, ds->label_rows) * sizeof(int32_t) : 0) +
                     (ds->target ? (size_t)ds->tdim * sizeof(float) : 0);
        /* the slots, and one sample's raw bytes of scratch per gather */
        return (size_t)(depth > 0 ? depth : 1) * (size_t)DT_MAX(1, max_local) * per + ds->dim * sizeof(double);
}
