/* train/device.c - backend choice (cpu | cuda | auto) agreed by all ranks, and the host mirror of
 * a device backend's parameters, buffers and optimizer moments for checkpoints (see device.h). */
#include "train/device.h"

#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "util/common.h"

int dt_device_is_remote(const dt_backend *be)
{
        return be && !dt_backend_supports(be, DT_CAP_HOST_MEMORY);
}

int dt_device_open(const char *device, const char *from, dt_comm *comm, int deterministic, int quiet,
                   dt_backend **out)
{
        dt_backend *be = NULL;
        const char *why = "";
        int want = !strcmp(device, "cuda"), maybe = !strcmp(device, "auto");
        if (want || maybe) be = dt_backend_cuda_new(comm->local_rank, &why);
        /* every rank must take the same kind of backend */
        int fail = be ? 0 : 1, anyfail = fail;
        if (want || maybe) anyfail = dt_comm_agree(comm, fail, "device choice");
        if (want && anyfail) {
                if (fail) dt_error("--device cuda (from %s): %s; use --device cpu", from, why);
                if (be) dt_backend_free(be);
                return DT_EXIT_RUNTIME;
        }
        if (maybe && anyfail) {
                if (be) dt_backend_free(be);
                be = NULL;
                if (comm->rank == 0 && !quiet) dt_note("device auto: %s; running on the cpu", fail ? why : "a rank has no CUDA device");
        }
        if (be) be->deterministic = deterministic;
        *out = be;      /* NULL: the caller makes the cpu backend */
        return 0;
}

int dt_device_check_cluster(const dt_backend *be, const dt_cluster_spec *cs, int nranks)
{
        if (!dt_device_is_remote(be) || nranks == 1) return 0;
        const char *what = NULL;
        if (cs->sync != DT_SYNC_ALLREDUCE) what = "a sync mode other than allreduce";
        else if (cs->compression) what = "gradient compression";
        else if (cs->reproducible) what = "reproducible: true";
        if (!what) return 0;
        dt_error("the %s backend does not support %s with several ranks yet; use sync: allreduce without "
                 "compression, or --device cpu", be->ops->name, what);
        return DT_EXIT_USAGE;
}

/* ---- host mirror ---- */

void dt_mirror_init(dt_host_mirror *m, dt_backend *be, const dt_graph *g, const dt_moments *mo)
{
        memset(m, 0, sizeof *m);
        m->be = be;
        m->active = dt_device_is_remote(be);
        if (!m->active) return;
        m->hg = *g;
        m->hg.params = dt_falloc(g->nparams);
        m->hg.buffers = dt_falloc(g->nbuffers);
        m->hmo.n = mo->n;
        if (mo->m) m->hmo.m = dt_falloc(g->nparams);
        if (mo->v) m->hmo.v = dt_falloc(g->nparams);
}

void dt_mirror_pull(dt_host_mirror *m, const dt_graph *g, const dt_moments *mo, const dt_graph **hg,
                    dt_moments **hmo)
{
        if (!m->active) {
                *hg = g;
                *hmo = (dt_moments *)mo;
                return;
        }
        const dt_backend_ops *o = m->be->ops;
        o->to_host(m->be, m->hg.params, g->params, g->nparams);
        o->to_host(m->be, m->hg.buffers, g->buffers, g->nbuffers);
        if (mo->m) o->to_host(m->be, m->hmo.m, mo->m, g->nparams);
        if (mo->v) o->to_host(m->be, m->hmo.v, mo->v, g->nparams);
        *hg = &m->hg;
        *hmo = &m->hmo;
}

void dt_mirror_target(dt_host_mirror *m, dt_graph *g, dt_moments *mo, dt_graph **hg, dt_moments **hmo)
{
        if (!m->active) {
                *hg = g;
                *hmo = mo;
                return;
        }
        *hg = &m->hg;
        *hmo = &m->hmo;
}

void dt_mirror_push(dt_host_mirror *m, dt_graph *g, dt_moments *mo)
{
        if (!m->active) return;
        const dt_backend_ops *o = m->be->ops;
        o->to_device(m->be, g->params, m->hg.params, g->nparams);
        o->to_device(m->be, g->buffers, m->hg.buffers, g->nbuffers);
        if (mo->m) o->to_device(m->be, mo->m, m->hmo.m, g->nparams);
        if (mo->v) o->to_device(m->be, mo->v, m->hmo.v, g->nparams);
}

void dt_mirror_free(dt_host_mirror *m)
{
        if (m->active) {
                free(m->hg.params);
                free(m->hg.buffers);
                free(m->hmo.m);
                free(m->hmo.v);
        }
        memset(m, 0, sizeof *m);
}
