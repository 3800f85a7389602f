/* backend/cpu.c - the CPU backend: OpenBLAS SGEMM and plain C loops the compiler vectorises.
 * Activation math lives here once; every layer that needs f(x) or f'(x) calls these. With more
 * than one thread it owns a small pool (dt_par_run) that splits GEMMs and the layers' host loops. */
#include "backend/backend.h"
#include "backend/ew.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cblas.h>
#include "util/common.h"

/* ---- the thread pool ----
 * Why our own threads and not OpenBLAS's: the GEMMs of these models are small (a conv chunk is
 * ~64K floats, an LSTM step (B, 4H, H)), so OpenBLAS's two threads barely help them, and the work
 * around them (im2col, col2im, pooling, the LSTM cell, bias, activations) ran on one thread.
 * Splitting whole regions -- a conv layer's chunks of samples, an LSTM's batch rows for all its
 * steps, a GEMM's rows or columns -- keeps each thread on its own data with a single-threaded
 * GEMM inside, and one wake-up covers all of it.
 *
 * Why a pthread pool and not OpenMP: libgomp reads OMP_WAIT_POLICY/GOMP_SPINCOUNT once, in a
 * constructor that runs before main, so the program cannot make its idle threads passive; the
 * default spins for up to ~0.3 s, and on a 2-core machine shared with another job (autogroup
 * scheduling gives each process a share, not each thread) a spinning thread takes the core from
 * its own process's workers. Here a waiting thread spins for at most ~SPIN pause instructions
 * (tens of microseconds: a layer's next region usually starts within that) and then sleeps on a
 * condition variable.
 *
 * OpenBLAS (Debian's openblas-pthread 0.3.21) is set to one thread for the length of a region:
 * its own thread server is not meant to be entered from two threads at once, while concurrent
 * single-threaded cblas_sgemm calls are supported (its buffer allocator is locked). Outside
 * regions it keeps the backend's thread count, so direct cblas calls (dtrain bench's SGEMM peak)
 * see what they did before; cpu_gemm never lets it thread (see there). */
#define PAR_MAX 64
#define SPIN 4000

struct pool {
        int nt;                         /* threads including the caller */
        pthread_t th[PAR_MAX];
        pthread_mutex_t mu;
        pthread_cond_t go, done;
        atomic_uint gen;                /* bumped once per region */
        atomic_int pending;             /* workers still inside the current region */
        int quit;
        dt_par_fn fn;
        void *arg;
};

struct worker { struct pool *pl; int t; };

static _Thread_local int in_region;

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p)
{
        struct worker w = *(struct worker *)p;
        struct pool *pl = w.pl;
        free(p);
        in_region = 1;          /* anything a worker runs is inside a region */
        unsigned seen = 0;
        for (;;) {
                int spin = SPIN;
                while (atomic_load_explicit(&pl->gen, memory_order_acquire) == seen && spin-- > 0) relax();
                if (atomic_load_explicit(&pl->gen, memory_order_acquire) == seen) {
                        pthread_mutex_lock(&pl->mu);
                        while (atomic_load_explicit(&pl->gen, memory_order_acquire) == seen && !pl->quit)
                                pthread_cond_wait(&pl->go, &pl->mu);
                        pthread_mutex_unlock(&pl->mu);
                }
                if (pl->quit) return NULL;
                seen = atomic_load_explicit(&pl->gen, memory_order_acquire);
                pl->fn(pl->arg, w.t, pl->nt);
                if (atomic_fetch_sub_explicit(&pl->pending, 1, memory_order_acq_rel) == 1) {
                        pthread_mutex_lock(&pl->mu);
                        pthread_cond_signal(&pl->done);
                        pthread_mutex_unlock(&pl->mu);
                }
        }
}

static struct pool *pool_new(int nt)
{
        struct pool *pl = dt_calloc(1, sizeof *pl);
        pl->nt = nt;
        pthread_mutex_init(&pl->mu, NULL);
        pthread_cond_init(&pl->go, NULL);
        pthread_cond_init(&pl->done, NULL);
        for (int t = 1; t < nt; t++) {
                struct worker *w = dt_calloc(1, sizeof *w);
                *w = (struct worker){ pl, t };
                int rc = pthread_create(&pl->th[t], NULL, worker_main, w);
                if (rc) {       /* run with the threads we have */
                        dt_note("cannot start thread %d of %d: %s; using %d", t + 1, nt, strerror(rc), t);
                        free(w);
                        pl->nt = t;
                        break;
                }
        }
        return pl;
}

static void pool_free(struct pool *pl)
{
        if (!pl) return;
        pthread_mutex_lock(&pl->mu);
        pl->quit = 1;
        atomic_fetch_add_explicit(&pl->gen, 1, memory_order_release);
        pthread_cond_broadcast(&pl->go);
        pthread_mutex_unlock(&pl->mu);
        for (int t = 1; t < pl->nt; t++) pthread_join(pl->th[t], NULL);
        pthread_cond_destroy(&pl->go);
        pthread_cond_destroy(&pl->done);
        pthread_mutex_destroy(&pl->mu);
        free(pl);
}

static const dt_backend_ops cpu_ops;

static struct pool *pool_of(const dt_backend *be)
{
        return be && be->ops == &cpu_ops ? be->priv : NULL;
}

int dt_par_threads(const dt_backend *be)
{
        const struct pool *pl = pool_of(be);
        return pl && !in_region ? pl->nt : 1;
}

void dt_par_run(dt_backend *be, dt_par_fn fn, void *arg)
{
        struct pool *pl = pool_of(be);
        if (!pl || in_region) {
                fn(arg, 0, 1);
                return;
        }
        openblas_set_num_threads(1);
        in_region = 1;
        pl->fn = fn;
        pl->arg = arg;
        atomic_store_explicit(&pl->pending, pl->nt - 1, memory_order_relaxed);
        pthread_mutex_lock(&pl->mu);
        atomic_fetch_add_explicit(&pl->gen, 1, memory_order_release);
        pthread_cond_broadcast(&pl->go);
        pthread_mutex_unlock(&pl->mu);
        fn(arg, 0, pl->nt);
        int spin = SPIN;
        while (atomic_load_explicit(&pl->pending, memory_order_acquire) > 0 && spin-- > 0) relax();
        if (atomic_load_explicit(&pl->pending, memory_order_acquire) > 0) {
                pthread_mutex_lock(&pl->mu);
                while (atomic_load_explicit(&pl->pending, memory_order_acquire) > 0)
                        pthread_cond_wait(&pl->done, &pl->mu);
                pthread_mutex_unlock(&pl->mu);
        }
        in_region = 0;
        openblas_set_num_threads(pl->nt);
}

const char *const dt_act_names[] = { "none", "relu", "leaky_relu", "tanh", "sigmoid", "gelu", "gelu_tanh", NULL };
const char *const dt_conv_algo_names[] = { "auto", "im2col", "onednn", NULL };

static float *cpu_alloc(dt_backend *be, size_t n) { (void)be; return dt_falloc(n); }
static void cpu_free(dt_backend *be, float *p) { (void)be; free(p); }
static void cpu_copy_par(dt_backend *be, float *dst, const float *src, size_t n);
static void cpu_copy(dt_backend *be, float *dst, const float *src, size_t n)
{
        if (dst == src) return;
        /* large non-overlapping copies (flatten, dropout in evaluation) go over the threads: one
         * thread's memcpy reached about half the 2-thread triad */
        if (dst + n <= src || src + n <= dst) cpu_copy_par(be, dst, src, n);
        else memmove(dst, src, n * sizeof *dst);
}
static void cpu_zero(dt_backend *be, float *x, size_t n) { (void)be; memset(x, 0, n * sizeof *x); }

struct gemm_args {
        int ta, tb, M, N, K;
        float alpha, beta;
        const float *A, *B;
        float *C;
        int lda, ldb, ldc, split_n;
};

static void sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Thread t's block of C: a range of columns (of op(B)) or of rows (of op(A)); each element of C is
 * computed by one thread, over the whole K, so no partial sums are combined. */
static void gemm_part(void *p, int t, int nt)
{
        const struct gemm_args *g = p;
        long lo, hi;
        if (g->split_n) {
                dt_par_range(g->N, t, nt, 16, &lo, &hi);
                if (hi > lo)
                        sgemm(g->ta, g->tb, g->M, (int)(hi - lo), g->K, g->alpha, g->A, g->lda,
                              g->tb ? g->B + lo * g->ldb : g->B + lo, g->ldb, g->beta, g->C + lo, g->ldc);
        } else {
                dt_par_range(g->M, t, nt, 4, &lo, &hi);
                if (hi > lo)
                        sgemm(g->ta, g->tb, (int)(hi - lo), g->N, g->K, g->alpha,
                              g->ta ? g->A + lo : g->A + lo * g->lda, g->lda, g->B, g->ldb, g->beta,
                              g->C + lo * g->ldc, g->ldc);
        }
}

/* At or below this M*N*K a GEMM stays on the calling thread: about the work (~30 us) that pays for
 * a wake-up, and OpenBLAS's own limit for threading (65536 * GEMM_MULTITHREAD_THRESHOLD 4), so
 * OpenBLAS never threads a call it gets from here either. */
#define GEMM_PAR_MNK 262144.0

static void cpu_gemm(dt_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
        if (dt_par_threads(be) > 1 && (double)M * N * K > GEMM_PAR_MNK && (M >= 32 || N >= 32)) {
                struct gemm_args g = { ta, tb, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc, N >= M };
                dt_par_run(be, gemm_part, &g);
                return;
        }
        sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_axpy(dt_backend *be, size_t n, float a, const float *x, float *y)
{
        (void)be;
        dt_ew_get()->axpy(n, a, x, y);
}

static void cpu_scale(dt_backend *be, size_t n, float a, float *x)
{
        (void)be;
        dt_ew_get()->scale(n, a, x);
}

static double cpu_sumsq(dt_backend *be, const float *x, size_t n)
{
        (void)be;
        return dt_ew_get()->sumsq(x, n);
}

/* ---- elementwise ops, split over threads when large ----
 * Each element is the same expression whatever the split (no FMA contraction under -std=c11, so
 * vector and scalar-tail code agree), and bias_grad splits columns, each summing its rows in
 * order: these results do not depend on the thread count. */
#define EW_PAR_MIN ((size_t)1 << 16)     /* floats: ~20-50 us of work, worth a wake-up */

struct ew {
        int kind;
        dt_act a;
        float alpha, p, lr;
        const float *x, *y, *dy, *b;
        float *out, *m, *v;
        size_t n, per;
        int rows, cols;
        uint64_t key;
        long pos0, t;
        const dt_optim_hp *hp;
};
enum { EW_ACT_FWD, EW_ACT_BWD, EW_BIAS_ADD, EW_BIAS_GRAD, EW_MUL, EW_DROPOUT, EW_OPTIM, EW_COPY, EW_ADD };

static void ew_part(void *arg, int t, int nt)
{
        const struct ew *e = arg;
        const dt_ew_kern *k = dt_ew_get();
        long lo, hi;
        switch (e->kind) {
        case EW_ACT_FWD:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                k->act_fwd(e->a, e->alpha, e->x + lo, e->out + lo, (size_t)(hi - lo));
                break;
        case EW_ACT_BWD:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                k->act_bwd(e->a, e->alpha, e->x + lo, e->y + lo, e->dy + lo, e->out + lo, (size_t)(hi - lo));
                break;
        case EW_BIAS_ADD:
                dt_par_range(e->rows, t, nt, 1, &lo, &hi);
                k->bias_add(e->out + (size_t)lo * e->cols, e->b, (int)(hi - lo), e->cols);
                break;
        case EW_BIAS_GRAD:
                dt_par_range(e->cols, t, nt, 16, &lo, &hi);
                k->bias_grad(e->out, e->dy, e->rows, e->cols, (int)lo, (int)hi);
                break;
        case EW_MUL:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                k->mul((size_t)(hi - lo), e->x + lo, e->b + lo, e->out + lo);
                break;
        case EW_DROPOUT:
                dt_par_range(e->rows, t, nt, 1, &lo, &hi);
                k->dropout_mask(e->out, (int)lo, (int)hi, e->per, e->key, e->pos0, e->p);
                break;
        case EW_COPY:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                memcpy(e->out + lo, e->x + lo, (size_t)(hi - lo) * sizeof *e->out);
                break;
        case EW_ADD:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                k->add((size_t)(hi - lo), e->x + lo, e->b + lo, e->out + lo);
                break;
        case EW_OPTIM:
                dt_par_range((long)e->n, t, nt, 16, &lo, &hi);
                k->optim(e->hp, e->lr, e->t, e->out + lo, e->dy + lo, e->m ? e->m + lo : NULL,
                                    e->v ? e->v + lo : NULL, (size_t)(hi - lo));
                break;
        default: DT_ASSERT(0);
        }
}

static int ew_par(dt_backend *be, size_t n) { return n >= EW_PAR_MIN && dt_par_threads(be) > 1; }

static void cpu_act_fwd(dt_backend *be, dt_act a, float alpha, const float *x, float *y, size_t n)
{
        if (!ew_par(be, n) || a == DT_ACT_NONE) { dt_ew_get()->act_fwd(a, alpha, x, y, n); return; }
        struct ew e = { .kind = EW_ACT_FWD, .a = a, .alpha = alpha, .x = x, .out = y, .n = n };
        dt_par_run(be, ew_part, &e);
}

static void cpu_act_bwd(dt_backend *be, dt_act a, float alpha, const float *x, const float *y,
                        const float *dy, float *dx, size_t n)
{
        if (!ew_par(be, n) || a == DT_ACT_NONE) { dt_ew_get()->act_bwd(a, alpha, x, y, dy, dx, n); return; }
        struct ew e = { .kind = EW_ACT_BWD, .a = a, .alpha = alpha, .x = x, .y = y, .dy = dy, .out = dx, .n = n };
        dt_par_run(be, ew_part, &e);
}

static void cpu_bias_add(dt_backend *be, float *y, const float *b, int rows, int cols)
{
        if (!ew_par(be, (size_t)rows * cols) || rows < 2) { dt_ew_get()->bias_add(y, b, rows, cols); return; }
        struct ew e = { .kind = EW_BIAS_ADD, .out = y, .b = b, .rows = rows, .cols = cols };
        dt_par_run(be, ew_part, &e);
}

static void cpu_bias_grad(dt_backend *be, float *db, const float *dy, int rows, int cols)
{
        if (!ew_par(be, (size_t)rows * cols) || cols < 32) { dt_ew_get()->bias_grad(db, dy, rows, cols, 0, cols); return; }
        struct ew e = { .kind = EW_BIAS_GRAD, .out = db, .dy = dy, .rows = rows, .cols = cols };
        dt_par_run(be, ew_part, &e);
}

static void cpu_copy_par(dt_backend *be, float *dst, const float *src, size_t n)
{
        if (!ew_par(be, n)) { memcpy(dst, src, n * sizeof *dst); return; }
        struct ew e = { .kind = EW_COPY, .x = src, .out = dst, .n = n };
        dt_par_run(be, ew_part, &e);
}

/* Dropout's mask (a hash per element) and its products (mul is dropout's alone) go over the
 * threads from 32K floats, half the other elementwise ops' threshold, both at the same size so
 * that forward's mul reads the mask its own thread wrote. Measured (cnn dropout2, mlp dropout1,
 * 2 threads, both CPU paths): at 32K floats 51-61 -> 34-36 us a step (b256), at 16K the backward
 * mul went from 7.5 to 41-50 us where the other thread had gone to sleep. */
#define DROPOUT_PAR_MIN ((size_t)1 << 15)
static int dropout_par(dt_backend *be, size_t n) { return n >= DROPOUT_PAR_MIN && dt_par_threads(be) > 1; }

static void cpu_mul(dt_backend *be, size_t n, const float *x, const float *mask, float *y)
{
        if (!dropout_par(be, n)) { dt_ew_get()->mul(n, x, mask, y); return; }
        struct ew e = { .kind = EW_MUL, .x = x, .b = mask, .out = y, .n = n };
        dt_par_run(be, ew_part, &e);
}

static void cpu_dropout_mask(dt_backend *be, float *mask, int B, size_t per, uint64_t key, long pos0, float p)
{
        /* the same threshold as mul's, which reads the mask next: a mask one thread wrote whole
         * had the other thread's half of mul wait on the first core's cache (t2 slower than t1) */
        if (!dropout_par(be, (size_t)B * per) || B < 2) { dt_ew_get()->dropout_mask(mask, 0, B, per, key, pos0, p); return; }
        struct ew e = { .kind = EW_DROPOUT, .out = mask, .rows = B, .per = per, .key = key, .pos0 = pos0, .p = p };
        dt_par_run(be, ew_part, &e);
}

static void cpu_optim_step(dt_backend *be, const dt_optim_hp *hp, float lr, long t, float *p,
                           const float *g, float *m, float *v, size_t n)
{
        if (!ew_par(be, n / 2)) { dt_ew_get()->optim(hp, lr, t, p, g, m, v, n); return; }
        struct ew e = { .kind = EW_OPTIM, .hp = hp, .lr = lr, .t = t, .out = p, .dy = g, .m = m, .v = v, .n = n };
        dt_par_run(be, ew_part, &e);
}

/* ---- graph junctions: add (over the threads when large) and concat's column copies ---- */
static void cpu_add(dt_backend *be, size_t n, const float *a, const float *b, float *y)
{
        if (!ew_par(be, n)) { dt_ew_get()->add(n, a, b, y); return; }
        struct ew e = { .kind = EW_ADD, .x = a, .b = b, .out = y, .n = n };
        dt_par_run(be, ew_part, &e);
}

static void cpu_copy_cols(dt_backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                          size_t w, int accumulate)
{
        (void)be;
        for (size_t r = 0; r < rows; r++) {
                float *d = dst + r * ldd;
                const float *s = src + r * lds;
                if (accumulate) for (size_t c = 0; c < w; c++) d[c] += s[c];
                else memcpy(d, s, w * sizeof *d);
        }
}

static void cpu_destroy(dt_backend *be)
{
        pool_free(be->priv);
        free(be);
}

static const dt_backend_ops cpu_ops = {
        .name = "cpu", .caps = DT_CAPS_CPU,
        .alloc = cpu_alloc, .free = cpu_free,
        .to_device = cpu_copy, .to_host = cpu_copy, .copy = cpu_copy, .zero = cpu_zero,
        .gemm = cpu_gemm, .bias_add = cpu_bias_add, .bias_grad = cpu_bias_grad,
        .act_fwd = cpu_act_fwd, .act_bwd = cpu_act_bwd,
        .axpy = cpu_axpy, .scale = cpu_scale, .mul = cpu_mul, .dropout_mask = cpu_dropout_mask, .sumsq = cpu_sumsq,
        .optim_step = cpu_optim_step, .destroy = cpu_destroy,
        .add = cpu_add, .copy_cols = cpu_copy_cols,
};

dt_backend *dt_backend_cpu_new(int threads)
{
        dt_backend *be = dt_calloc(1, sizeof *be);
        be->ops = &cpu_ops;
        be->threads = threads;
        if (threads > 0) openblas_set_num_threads(threads);
        long nt = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
        if (nt > PAR_MAX) nt = PAR_MAX;
        if (nt > 1) be->priv = pool_new((int)nt);
        return be;
}

void dt_backend_free(dt_backend *be)
{
        if (be && be->ops->destroy) be->ops->destroy(be);   /* device backends release their context */
        else free(be);
}

unsigned dt_backend_caps_of(const char *kind)
{
        return !strcmp(kind, "cpu") ? DT_CAPS_CPU : !strcmp(kind, "cuda") ? DT_CAPS_CUDA : 0;
}
