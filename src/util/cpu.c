/* util/cpu.c - the CPU's kernel path (util/cpu.h): detection once, DTRAIN_CPU, the families' pick. */
#include "util/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[DT_ISA_N] = { "generic", "avx2", "avx512" };

static int inited;
static dt_isa best, cur;

const char *dt_isa_name(dt_isa isa) { return isa >= 0 && isa < DT_ISA_N ? names[isa] : "?"; }

/* __builtin_cpu_supports reads cpuid and, for AVX and AVX-512, checks with xgetbv that the OS saves
 * the ymm/zmm and mask registers (a kernel booted with AVX-512 off reports avx512f absent). */
static dt_isa detect(void)
{
#if DT_ISA_X86
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                   __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("f16c");
        if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512cd"))
                return DT_ISA_AVX512;
        if (avx2) return DT_ISA_AVX2;
#endif
        return DT_ISA_GENERIC;
}

int dt_cpu_init(char *msg, size_t len)
{
        best = cur = detect();
        inited = 1;
        const char *e = getenv("DTRAIN_CPU");
        if (!e || !*e) return 0;
        for (int i = 0; i < DT_ISA_N; i++)
                if (!strcmp(e, names[i])) {
                        if (i > (int)best) {
                                snprintf(msg, len, "DTRAIN_CPU=%s: this CPU (or its OS) runs only the %s path%s", e,
                                         names[best], DT_ISA_X86 ? "" : " (this build has no other)");
                                return -1;
                        }
                        cur = (dt_isa)i;
                        return 0;
                }
        snprintf(msg, len, "DTRAIN_CPU=%s: unknown path; expected generic, avx2 or avx512", e);
        return -1;
}

static void init_once(void)
{
        if (!inited) {  /* no DTRAIN_CPU here: only main reports its errors */
                best = cur = detect();
                inited = 1;
        }
}

dt_isa dt_cpu_best(void)
{
        init_once();
        return best;
}

dt_isa dt_cpu_isa(void)
{
        init_once();
        return cur;
}

int dt_cpu_force(dt_isa isa)
{
        init_once();
        if (isa < 0 || isa > best) return -1;
        cur = isa;
        return 0;
}

int dt_kfam_isa(const dt_kfam *f)
{
        for (int i = (int)dt_cpu_isa(); i >= 0; i--)
                if (f->v[i]) return i;
        return -1;
}

const void *dt_kfam_pick(const dt_kfam *f)
{
        int i = dt_kfam_isa(f);
        return i < 0 ? NULL : f->v[i];
}
