/* backend/cuda_stub.c - the CUDA entry points of a build without CUDA (configure found no toolkit
 * or was given --without-cuda): they answer "no" with a reason, so callers need no #ifdef. */
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
