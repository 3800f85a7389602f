/* backend/peak.h - the machine's measured peaks (backend/peak.c), what `dtrain bench` compares the
 * layers against and what the planner scales its cost model by. */
#ifndef DT_PEAK_H
#define DT_PEAK_H

#include <stddef.h>

/* Best-of-a-few cblas_sgemm 1024^3 GFLOP/s with the current OpenBLAS thread count. */
double dt_peak_sgemm_gflops(void);
/* GFLOP/s of one thread running independent vectorised fma chains (the core's FMA peak), timed in
 * the thread's CPU time so that a busy machine does not lower it; the chains' vector width is the
 * CPU path's (util/cpu.h), dt_peak_kfam the loop's variants. */
double dt_peak_fma_gflops(void);
extern const struct dt_kfam dt_peak_kfam;
/* STREAM-style triad a = b + s c in GB/s (3 x 4 bytes an element) over arrays far larger than the
 * per-core caches, on be's threads (dt_par_run), best of five. */
struct dt_backend;
double dt_peak_triad_gbs(struct dt_backend *be);
/* The bytes of the triad's three arrays (for the report). */
size_t dt_peak_triad_bytes(void);

#endif
