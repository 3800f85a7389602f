/* backend/cuda_stub.c - the CUDA entry points (backend.h, parallel/devcomm.h) of a build without
 * CUDA (no toolkit found, or --without-cuda): they answer "no" with a reason, so callers need no
 * #ifdef. */
#include "backend/backend.h"

#include <stddef.h>

static const char no_cuda[] = "this dtrain was built without CUDA (configure --with-cuda to build the CUDA backend)";

dt_backend *dt_backend_cuda_new(int local_rank, const char **why)
{
        (void)local_rank;
        if (why) *why = no_cuda;
        return NULL;
}

int dt_cuda_device_count(const char **why)
{
        if (why) *why = no_cuda;
        return -1;
}

/* ---- parallel/devcomm.h: unreachable without a device backend ---- */
#include "parallel/devcomm.h"

dt_devcomm *dt_devcomm_new(dt_backend *be, dt_comm *comm, int want_nccl, size_t max_floats, const char **why)
{
        (void)be; (void)comm; (void)want_nccl; (void)max_floats;
        if (why) *why = no_cuda;
        return NULL;
}

void dt_devcomm_allreduce(dt_devcomm *dc, float *x, size_t n, const char *what)
{
        (void)dc; (void)x; (void)n; (void)what;
}

const char *dt_devcomm_name(const dt_devcomm *dc)
{
        (void)dc;
        return "none";
}

void dt_devcomm_free(dt_devcomm *dc)
{
        (void)dc;
}
