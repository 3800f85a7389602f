/* backend/peak.c - the machine's measured peaks for `dtrain bench` and the planner: SGEMM 1024^3
 * through OpenBLAS (what the layers' GEMMs could reach), a register-blocked FMA loop (what one
 * core's FMA units can do at all), a STREAM-style triad (the memory bandwidth the elementwise
 * layers could reach). */
#include "backend/peak.h"
#include "backend/backend.h"     /* before cblas.h, whose complex.h defines I */

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <cblas.h>
#include "util/common.h"
#include "util/cpu.h"

double dt_peak_sgemm_gflops(void)
{
        enum { N = 1024 };
        float *a = dt_falloc((size_t)N * N), *b = dt_falloc((size_t)N * N), *c = dt_falloc((size_t)N * N);
        for (size_t i = 0; i < (size_t)N * N; i++) {
                a[i] = (float)(i % 17) * 0.01f;
                b[i] = (float)(i % 13) * 0.01f;
        }
        double best = 0;
        for (int r = 0; r < 4; r++) {   /* the first call pays for thread start-up and page faults */
                double t0 = dt_now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
                double dt = dt_now() - t0;
                if (r > 0 && dt > 0 && 2.0 * N * N * N / dt > best) best = 2.0 * N * N * N / dt;
        }
        free(a);
        free(b);
        free(c);
        return best / 1e9;
}

/* NV independent chains of W-wide vectors, acc = acc * a + b: enough chains to cover the FMA
 * latency on two ports, few enough to stay in registers. The inner loop is what the compiler
 * vectorises (fmaf becomes vfmadd where the path has FMA); the v loop is unrolled so acc lives in
 * registers. One copy per CPU path, W its vector width in floats; returns the sum and sets *flops
 * per k. */
#define FMA_NV 10
#define FMA_CHAINS(sfx, W) \
static float fma_chains_##sfx(long n, float a, float b, double *flops) \
{ \
        float acc[FMA_NV][W]; \
        for (int v = 0; v < FMA_NV; v++) \
                for (int w = 0; w < W; w++) acc[v][w] = (float)(v * W + w) * 1e-3f; \
        for (long k = 0; k < n; k++) { \
                _Pragma("GCC unroll 10") \
                for (int v = 0; v < FMA_NV; v++) \
                        for (int w = 0; w < W; w++) acc[v][w] = fmaf(acc[v][w], a, b); \
        } \
        float s = 0; \
        for (int v = 0; v < FMA_NV; v++) \
                for (int w = 0; w < W; w++) s += acc[v][w]; \
        *flops = 2.0 * FMA_NV * W; \
        return s; \
}

struct peak_kern { float (*fma_chains)(long n, float a, float b, double *flops); };

FMA_CHAINS(generic, 4)
static const struct peak_kern k_generic = { fma_chains_generic };
#if DT_ISA_X86
DT_ISA_BEGIN_AVX2
FMA_CHAINS(avx2, 8)
static const struct peak_kern k_avx2 = { fma_chains_avx2 };
DT_ISA_END
DT_ISA_BEGIN_AVX512
FMA_CHAINS(avx512, 16)
static const struct peak_kern k_avx512 = { fma_chains_avx512 };
DT_ISA_END
const dt_kfam dt_peak_kfam = { .name = "fma peak", .v = { &k_generic, &k_avx2, &k_avx512 } };
#else
const dt_kfam dt_peak_kfam = { .name = "fma peak", .v = { [DT_ISA_GENERIC] = &k_generic } };
#endif

/* This thread's CPU seconds: what the core can do, whatever else the machine runs (a loop timed by
 * the wall clock on a shared machine came out at a third of the core, below what layers timed in a
 * quieter moment reached). */
static double thread_cpu_s(void)
{
        struct timespec ts;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return dt_now();
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dt_peak_fma_gflops(void)
{
        volatile float sink = 0, a = 0.999999f, b = 1e-6f;  /* volatile: not known at compile time */
        const struct peak_kern *k = dt_kfam_pick(&dt_peak_kfam);
        long n = 1 << 16;
        double dt = 0, flops = 0;
        /* grow n until one run takes ~50 ms, then take the best of three */
        for (;;) {
                double t0 = thread_cpu_s();
                sink += k->fma_chains(n, a, b, &flops);
                dt = thread_cpu_s() - t0;
                if (dt > 0.05 || n > (1L << 34)) break;
                n *= dt > 0.005 ? (long)ceil(0.06 / dt) : 8;
        }
        double best = dt;
        for (int r = 0; r < 3; r++) {
                double t0 = thread_cpu_s();
                sink += k->fma_chains(n, a, b, &flops);
                dt = thread_cpu_s() - t0;
                if (dt < best) best = dt;
        }
        (void)sink;
        return flops * (double)n / best / 1e9;
}

/* ---- memory bandwidth: STREAM's triad a = b + s c ----
 * Arrays of DT_TRIAD_MIB each, out of the per-core caches and most of a shared L3 slice, split
 * over the backend's threads as the layers' loops are (each thread first touches its own range).
 * Counted as STREAM counts it: 3 x 4 bytes per element (the write-allocate read is not). */
#define DT_TRIAD_MIB 64

struct triad { float *a, *b, *c; size_t n; float s; int init; };

static void triad_part(void *arg, int t, int nt)
{
        const struct triad *j = arg;
        long lo, hi;
        dt_par_range((long)j->n, t, nt, 16, &lo, &hi);
        float *restrict a = j->a + lo;
        const float *restrict b = j->b + lo, *restrict c = j->c + lo;
        size_t m = (size_t)(hi - lo);
        if (j->init) {
                for (size_t i = 0; i < m; i++) { a[i] = 0.0f; ((float *)b)[i] = 1.0f; ((float *)c)[i] = 2.0f; }
                return;
        }
        for (size_t i = 0; i < m; i++) a[i] = b[i] + j->s * c[i];
}

double dt_peak_triad_gbs(dt_backend *be)
{
        struct triad j = { .n = (size_t)DT_TRIAD_MIB << 18, .s = 0.5f, .init = 1 };
        j.a = dt_falloc(j.n);
        j.b = dt_falloc(j.n);
        j.c = dt_falloc(j.n);
        dt_par_run(be, triad_part, &j);
        j.init = 0;
        double best = 0;
        for (int r = 0; r < 6; r++) {   /* the first pass may still fault pages in */
                double t0 = dt_now();
                dt_par_run(be, triad_part, &j);
                double dt = dt_now() - t0;
                if (r > 0 && dt > 0 && 3.0 * sizeof(float) * (double)j.n / dt > best) best = 3.0 * sizeof(float) * (double)j.n / dt;
        }
        free(j.a);
        free(j.b);
        free(j.c);
        /* the arrays are unmapped again; reset the peak-RSS mark so that `peak RSS` stays the
         * model's (Linux: 5 > clear_refs resets VmHWM and with it getrusage's ru_maxrss) */
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (f) {
                fputs("5", f);
                fclose(f);
        }
        return best / 1e9;
}

size_t dt_peak_triad_bytes(void) { return (size_t)3 * DT_TRIAD_MIB << 20; }
