/* backend/cuda_load.c - the CUDA entry points (backend.h, parallel/devcomm.h) as the binary sees
 * them: the CUDA backend is a module, dtrain-cuda.so, that configure builds when it finds CUDA and
 * that is loaded (dlopen) the first time a run asks for a device, so a CPU run maps none of the CUDA
 * libraries (cuDNN, cuBLAS, NCCL: ~800 MB, 200 MB resident, 70 ms at start-up when linked in).
 * Where the module is looked for, first found wins: $DTRAIN_CUDA_MODULE; next to the executable
 * (the build tree: src/dtrain beside src/dtrain-cuda.so); ../lib/dtrain/ and ../lib64/dtrain/
 * from it (a relocated install); the configured $(pkglibdir). Without a GPU device node
 * (/dev/nvidia*), 'auto' answers "no CUDA device" without loading anything. A build without CUDA
 * answers "no" with a reason, so callers need no #ifdef. */
#include "backend/backend.h"
#include "parallel/devcomm.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config.h"

#ifndef DT_PKGLIBDIR
#define DT_PKGLIBDIR "/usr/local/lib/dtrain"
#endif

/* what the module exports, under names the binary does not have (the module's objects are
 * compiled with -Ddt_backend_cuda_new=dt_cudamod_backend_new ...; see Makefile.am) */
static struct {
        int tried;
        void *h;
        const char *why;
        dt_backend *(*backend_new)(int, const char **);
        int (*device_count)(const char **);
        dt_devcomm *(*devcomm_new)(dt_backend *, dt_comm *, int, size_t, const char **);
        void (*devcomm_allreduce)(dt_devcomm *, float *, size_t, const char *);
        const char *(*devcomm_name)(const dt_devcomm *);
        void (*devcomm_free)(dt_devcomm *);
} mod;

#ifdef DT_HAVE_CUDA
static char load_err[512];

static void *try_open(const char *path)
{
        if (access(path, R_OK) != 0) return NULL;
        /* RTLD_GLOBAL: the CUDA libraries' own plug-ins (cuDNN's sub-libraries) find its symbols */
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!h) snprintf(load_err, sizeof load_err, "cannot load the CUDA module %s: %s", path, dlerror());
        return h;
}

static void *open_module(void)
{
        const char *env = getenv("DTRAIN_CUDA_MODULE");
        if (env && *env) {
                void *h = try_open(env);
                if (!h && !load_err[0])
                        snprintf(load_err, sizeof load_err, "DTRAIN_CUDA_MODULE=%s: no such file", env);
                return h;
        }
        char exe[PATH_MAX], path[PATH_MAX + 64];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
                exe[n] = 0;
                char *slash = strrchr(exe, '/');
                if (slash) *slash = 0;
                static const char *const rel[] = { "/dtrain-cuda.so", "/../lib/dtrain/dtrain-cuda.so",
                                                   "/../lib64/dtrain/dtrain-cuda.so", NULL };
                for (int i = 0; rel[i]; i++) {
                        snprintf(path, sizeof path, "%s%s", exe, rel[i]);
                        void *h = try_open(path);
                        if (h || load_err[0]) return h;
                }
        }
        void *h = try_open(DT_PKGLIBDIR "/dtrain-cuda.so");
        if (!h && !load_err[0])
                snprintf(load_err, sizeof load_err, "this dtrain was built with CUDA but its module dtrain-cuda.so "
                         "is not next to the executable nor in %s (set DTRAIN_CUDA_MODULE)", DT_PKGLIBDIR);
        return h;
}
#endif

/* 0 when the module is loaded; else -1 with mod.why */
static int load(void)
{
        if (mod.tried) return mod.h ? 0 : -1;
        mod.tried = 1;
#ifdef DT_HAVE_CUDA
        if (!(mod.h = open_module())) {
                mod.why = load_err;
                return -1;
        }
        *(void **)&mod.backend_new = dlsym(mod.h, "dt_cudamod_backend_new");
        *(void **)&mod.device_count = dlsym(mod.h, "dt_cudamod_device_count");
        *(void **)&mod.devcomm_new = dlsym(mod.h, "dt_cudamod_devcomm_new");
        *(void **)&mod.devcomm_allreduce = dlsym(mod.h, "dt_cudamod_devcomm_allreduce");
        *(void **)&mod.devcomm_name = dlsym(mod.h, "dt_cudamod_devcomm_name");
        *(void **)&mod.devcomm_free = dlsym(mod.h, "dt_cudamod_devcomm_free");
        if (!mod.backend_new || !mod.device_count || !mod.devcomm_new || !mod.devcomm_allreduce ||
            !mod.devcomm_name || !mod.devcomm_free) {
                snprintf(load_err, sizeof load_err, "the CUDA module lacks its entry points (from another "
                         "dtrain version?)");
                mod.why = load_err;
                dlclose(mod.h);
                mod.h = NULL;
                return -1;
        }
        return 0;
#else
        mod.why = "this dtrain was built without CUDA (configure --with-cuda to build the CUDA backend)";
        return -1;
#endif
}

#ifdef DT_HAVE_CUDA
/* A machine without NVIDIA's device nodes has no device to find: say so without loading ~800 MB
 * of libraries. DTRAIN_CUDA_MODULE set: always load (containers may name devices otherwise). */
static int no_device_node(void)
{
        if (getenv("DTRAIN_CUDA_MODULE") || access("/dev/dxg", F_OK) == 0) return 0;      /* WSL2: /dev/dxg */
        glob_t g;
        int none = glob("/dev/nvidia[0-9]*", 0, NULL, &g) != 0 || g.gl_pathc == 0;
        globfree(&g);
        return none;
}

static const char no_node[] = "no CUDA device on this machine (no /dev/nvidia* device node)";
#endif

dt_backend *dt_backend_cuda_new(int local_rank, const char **why)
{
#ifdef DT_HAVE_CUDA
        if (!mod.h && no_device_node()) {
                if (why) *why = no_node;
                return NULL;
        }
#endif
        if (load() < 0) {
                if (why) *why = mod.why;
                return NULL;
        }
        return mod.backend_new(local_rank, why);
}

int dt_cuda_device_count(const char **why)
{
#ifdef DT_HAVE_CUDA
        if (!mod.h && no_device_node()) {
                if (why) *why = no_node;
                return 0;
        }
#endif
        if (load() < 0) {
                if (why) *why = mod.why;
                return -1;
        }
        return mod.device_count(why);
}

dt_devcomm *dt_devcomm_new(dt_backend *be, dt_comm *comm, int want_nccl, size_t max_floats, const char **why)
{
        if (load() < 0) {
                if (why) *why = mod.why;
                return NULL;
        }
        return mod.devcomm_new(be, comm, want_nccl, max_floats, why);
}

/* the three below run only with a device backend, so with the module loaded */
void dt_devcomm_allreduce(dt_devcomm *dc, float *x, size_t n, const char *what)
{
        if (mod.h) mod.devcomm_allreduce(dc, x, n, what);
}

const char *dt_devcomm_name(const dt_devcomm *dc)
{
        return mod.h ? mod.devcomm_name(dc) : "none";
}

void dt_devcomm_free(dt_devcomm *dc)
{
        if (mod.h && dc) mod.devcomm_free(dc);
}
