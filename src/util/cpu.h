/* util/cpu.h - the CPU-specific kernel paths, chosen once at start-up: what the CPU and the OS
 * support (cpuid and xgetbv, through __builtin_cpu_supports), narrowed by DTRAIN_CPU, fixed before
 * any kernel runs; each kernel family (a table of function pointers per path) gives the best
 * variant it has for that path. */
#ifndef DT_CPU_H
#define DT_CPU_H

#include <stddef.h>

/* The paths, in order: a variant of path p uses only instructions that every CPU of path >= p has.
 *   generic  the build's baseline (x86-64 by default; any CPU the binary runs on)
 *   avx2     AVX2 and FMA (Haswell, Zen 1-3 and later)
 *   avx512   AVX-512 F, BW, VL and DQ, plus AVX2 and FMA (Skylake-SP, Ice Lake, Zen 4 and later) */
typedef enum { DT_ISA_GENERIC, DT_ISA_AVX2, DT_ISA_AVX512, DT_ISA_N } dt_isa;

/* Variants other than generic are built only by GCC for x86-64 (the target attribute and pragma). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DT_ISA_X86 1
/* Between these two, every function (static inline ones from headers included there too) is
 * compiled for the path, so helpers inline into the kernels that call them. */
#define DT_ISA_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,bmi,bmi2,popcnt,f16c\")")
#define DT_ISA_BEGIN_AVX512 _Pragma("GCC push_options") \
        _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx2,fma,bmi,bmi2,popcnt,f16c\")")
#define DT_ISA_END _Pragma("GCC pop_options")
#else
#define DT_ISA_X86 0
#endif

/* A kernel family: its name (what `dtrain bench` and the run banner print) and its table for each
 * path, NULL where the family has no variant of its own (the next lower one runs; a family with no
 * generic table runs nothing of its own there, its callers take another route). */
typedef struct dt_kfam {
        const char *name;
        const void *v[DT_ISA_N];
} dt_kfam;

/* Reads the CPU's features and DTRAIN_CPU (generic, avx2, avx512, or unset: the best the CPU has).
 * 0, or -1 with a message in msg when DTRAIN_CPU names an unknown path or one this CPU lacks.
 * main calls it first; a program that does not (a unit test) gets the CPU's best on first use. */
int dt_cpu_init(char *msg, size_t len);
/* The best path this CPU and OS can run, whatever DTRAIN_CPU says */
dt_isa dt_cpu_best(void);
/* The path in force */
dt_isa dt_cpu_isa(void);
/* Tests: run path isa from now on (-1 when the CPU lacks it). Not while kernels run. */
int dt_cpu_force(dt_isa isa);
const char *dt_isa_name(dt_isa isa);

/* The table family f has for the path in force (NULL: none at or below it), and which path that
 * table is for (-1: none) */
const void *dt_kfam_pick(const dt_kfam *f);
int dt_kfam_isa(const dt_kfam *f);

#endif
