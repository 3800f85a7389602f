/* backend/cuda/devcomm.c - device-buffer allreduce for data parallelism (parallel/devcomm.h):
 * NCCL, CUDA-aware MPI, or staging through pinned host memory. */
#include "parallel/devcomm.h"

#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_priv.h"
#include "config.h"
#ifdef DT_HAVE_MPI_EXT
#include <mpi-ext.h>
#endif
#ifdef DT_HAVE_NCCL
#include <nccl.h>
#define DT_NCCL_CHECK(call) do { \
        ncclResult_t r_ = (call); \
        if (r_ != ncclSuccess) \
                dt_die(DT_EXIT_RUNTIME, "%s:%d: NCCL error: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
} while (0)
#endif

enum { DC_STAGED = 0, DC_MPI_CUDA, DC_NCCL };

struct dt_devcomm {
        int kind;
        dt_comm *comm;
        float *host;            /* staged: pinned, max_floats */
        size_t cap;
#ifdef DT_HAVE_NCCL
        ncclComm_t nccl;
#endif
};

static int mpi_cuda_aware(void)
{
#if defined(DT_HAVE_MPI_EXT) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
        return MPIX_Query_cuda_support() == 1;
#else
        return 0;
#endif
}

dt_devcomm *dt_devcomm_new(dt_backend *be, dt_comm *comm, int want_nccl, size_t max_floats, const char **why)
{
        (void)be;
        (void)why;      /* used without NCCL only */
        dt_devcomm *dc = dt_calloc(1, sizeof *dc);
        dc->comm = comm;
        if (want_nccl) {
#ifdef DT_HAVE_NCCL
                ncclUniqueId id;
                if (comm->rank == 0) DT_NCCL_CHECK(ncclGetUniqueId(&id));
                dt_comm_bcast(comm, &id, (int)sizeof id, MPI_BYTE, 0, "NCCL id broadcast");
                DT_NCCL_CHECK(ncclCommInitRank(&dc->nccl, comm->size, id, comm->rank));
                dc->kind = DC_NCCL;
                return dc;
#else
                if (why) *why = "comm: nccl was asked but this dtrain was built without NCCL";
                free(dc);
                return NULL;
#endif
        }
        /* DTRAIN_STAGED=1 forces the host path (a CUDA-aware MPI that misbehaves, tests) */
        const char *st = getenv("DTRAIN_STAGED");
        if (mpi_cuda_aware() && !(st && !strcmp(st, "1"))) {
                dc->kind = DC_MPI_CUDA;
                return dc;
        }
        dc->kind = DC_STAGED;
        dc->cap = max_floats ? max_floats : 1;
        DT_CUDA_CHECK(cudaMallocHost((void **)&dc->host, dc->cap * sizeof(float)));
        return dc;
}

void dt_devcomm_allreduce(dt_devcomm *dc, float *x, size_t n, const char *what)
{
        if (!n) return;
        switch (dc->kind) {
#ifdef DT_HAVE_NCCL
        case DC_NCCL:
                DT_NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat, ncclSum, dc->nccl, 0));
                DT_CUDA_CHECK(cudaStreamSynchronize(0));
                return;
#endif
        case DC_MPI_CUDA:
                DT_CUDA_CHECK(cudaDeviceSynchronize());   /* the kernels that wrote x are done */
                dt_comm_allreduce(dc->comm, x, (long)n, MPI_FLOAT, what);
                return;
        default:
                for (size_t off = 0; off < n; off += dc->cap) {
                        size_t k = n - off < dc->cap ? n - off : dc->cap;
                        DT_CUDA_CHECK(cudaMemcpy(dc->host, x + off, k * sizeof(float), cudaMemcpyDeviceToHost));
                        dt_comm_allreduce(dc->comm, dc->host, (long)k, MPI_FLOAT, what);
                        DT_CUDA_CHECK(cudaMemcpy(x + off, dc->host, k * sizeof(float), cudaMemcpyHostToDevice));
                }
                return;
        }
}

const char *dt_devcomm_name(const dt_devcomm *dc)
{
        return dc->kind == DC_NCCL ? "nccl" : dc->kind == DC_MPI_CUDA ? "cuda-aware MPI" : "staged through host memory";
}

void dt_devcomm_free(dt_devcomm *dc)
{
        if (!dc) return;
#ifdef DT_HAVE_NCCL
        if (dc->kind == DC_NCCL) ncclCommDestroy(dc->nccl);
#endif
        if (dc->host) cudaFreeHost(dc->host);
        free(dc);
}
