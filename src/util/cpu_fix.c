/* util/cpu_fix.c - OpenBLAS core detection and the re-exec with OPENBLAS_CORETYPE. The check
 * compares OpenBLAS's own answer (openblas_get_corename) with the CPU's feature flags (cpuid via
 * __builtin_cpu_supports); only a core ranked below what the flags allow is overridden, and never
 * when the user set OPENBLAS_CORETYPE. */
#include "util/cpu_fix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>

/* 1: SSE-era, 2: AVX, 3: AVX2+FMA, 4: AVX-512 */
static int core_rank(const char *c)
{
        static const char *const r4[] = { "skylakex", "cooperlake", "sapphirerapids", NULL };
        static const char *const r3[] = { "haswell", "zen", "skylake", NULL };
        static const char *const r2[] = { "sandybridge", "bulldozer", "piledriver", "steamroller", "excavator", NULL };
        for (int i = 0; r4[i]; i++) if (!strcasecmp(c, r4[i])) return 4;
        for (int i = 0; r3[i]; i++) if (!strcasecmp(c, r3[i])) return 3;
        for (int i = 0; r2[i]; i++) if (!strcasecmp(c, r2[i])) return 2;
        return 1;
}

const char *dt_blas_best_core(void)
{
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512cd"))
                return "SkylakeX";
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
        if (__builtin_cpu_supports("avx")) return "Sandybridge";
        return NULL;
}

void dt_blas_fix(char **argv)
{
        if (getenv("OPENBLAS_CORETYPE")) return;        /* the user's choice wins */
        const char *best = dt_blas_best_core();
        const char *core = openblas_get_corename();
        if (!best || !core || core_rank(core) >= core_rank(best)) return;
        char detected[64];
        snprintf(detected, sizeof detected, "%s", core);
        setenv("OPENBLAS_CORETYPE", best, 1);
        setenv("DTRAIN_BLAS_DETECTED", detected, 1);
        execv("/proc/self/exe", argv);
        /* exec failed (no /proc?): carry on with the slow kernels, but say so */
        fprintf(stderr, "dtrain: warning: OpenBLAS chose '%s' kernels on a %s-capable CPU and re-exec failed; "
                "set OPENBLAS_CORETYPE=%s for full speed\n", detected, best, best);
}

const char *dt_blas_core_desc(void)
{
        static char buf[160];
        const char *core = openblas_get_corename();
        const char *det = getenv("DTRAIN_BLAS_DETECTED");
        if (det)
                snprintf(buf, sizeof buf, "%s (OPENBLAS_CORETYPE set by dtrain; OpenBLAS detected %s)", core, det);
        else if (getenv("OPENBLAS_CORETYPE"))
                snprintf(buf, sizeof buf, "%s (OPENBLAS_CORETYPE=%s from the environment)", core, getenv("OPENBLAS_CORETYPE"));
        else
                snprintf(buf, sizeof buf, "%s", core);
        return buf;
}
