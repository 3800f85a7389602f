/* parallel/devcomm.h - summing a device buffer over the ranks, by the best path this build and
 * MPI offer, chosen once: NCCL (built with it and 'comm: nccl'), CUDA-aware MPI (Open MPI says so
 * through MPIX_Query_cuda_support), else staged through a pinned host buffer. Implemented in
 * backend/cuda/devcomm.c, in the CUDA module that backend/cuda_load.c loads. */
#ifndef DT_DEVCOMM_H
#define DT_DEVCOMM_H

#include <stddef.h>
#include "backend/backend.h"
#include "parallel/comm.h"

typedef struct dt_devcomm dt_devcomm;

/* NULL with *why when no path works (e.g. 'nccl' asked in a build without NCCL). */
dt_devcomm *dt_devcomm_new(dt_backend *be, dt_comm *comm, int want_nccl, size_t max_floats, const char **why);
/* In place: x (device memory, n floats) = its sum over the ranks. Waits for the device first. */
void dt_devcomm_allreduce(dt_devcomm *dc, float *x, size_t n, const char *what);
/* "nccl", "cuda-aware MPI" or "staged through host memory" */
const char *dt_devcomm_name(const dt_devcomm *dc);
void dt_devcomm_free(dt_devcomm *dc);

#endif
