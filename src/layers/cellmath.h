/* layers/cellmath.h - vector exp/sigmoid/tanh for the recurrent cells (cellkern.h). Static inline in
 * a header on purpose: these run once per gate vector in the innermost loop and must inline into
 * the cells, so cellkern.h includes it under each CPU path's target. */
#ifndef DT_CELLMATH_H
#define DT_CELLMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- vector math: GCC/Clang vector extensions, CELL_VBYTES bytes (the includer may set it before
 * including cellkern.h): 64 by default, 16 floats (four SSE ops, two AVX, one AVX-512); the avx2
 * path takes 32, one ymm register, since a cell's dozen live 16-float vectors as ymm pairs spilled
 * to the stack. Vectors go into helpers by pointer: GCC warns about by-value wide vectors without
 * AVX even when the helper is inlined, and its note cannot be silenced. ---- */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* returned vectors: the helpers are static inline, no ABI crosses a call */
#endif
#ifndef CELL_VBYTES
#define CELL_VBYTES 64
#endif
typedef float vec __attribute__((vector_size(CELL_VBYTES)));
typedef int32_t veci __attribute__((vector_size(CELL_VBYTES)));

#define VL (CELL_VBYTES / 4)    /* lanes */
/* GCC stopped inlining vexp into the 8-lane cells (a call per gate vector: the LSTM's forward cell
 * 1.3x slower); the 16-lane builds inlined it already, so this changes no code there */
#if defined(__GNUC__)
#define CELL_INLINE __attribute__((always_inline))
#else
#define CELL_INLINE
#endif
#define VW 16                   /* a row's lanes below H - H mod VW run vector code on every path */

static inline vec ld(const float *p)
{
        vec v;
        memcpy(&v, p, sizeof v);
        return v;
}

static inline void st(float *p, const vec *v) { memcpy(p, v, sizeof *v); }

static inline vec vset(float a)
{
        vec v;
        for (int i = 0; i < VL; i++) v[i] = a;
        return v;
}

/* e^x, Cephes' expf: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n through the
 * exponent bits. x is clamped to [-87, 88] so 2^n stays a normal float (relative error ~2 ulp). */
static inline CELL_INLINE vec vexp(const vec *px)
{
        const vec hi = vset(88.0f), lo = vset(-87.0f), magic = vset(12582912.0f); /* 1.5 * 2^23 */
        vec x = *px;
        veci m = x > hi;
        x = (vec)((m & (veci)hi) | (~m & (veci)x));
        m = x < lo;
        x = (vec)((m & (veci)lo) | (~m & (veci)x));
        vec t = x * vset(1.44269504088896341f) + magic;  /* round(x log2 e) in the low mantissa bits */
        veci ni = (veci)t - 0x4B400000;
        vec n = t - magic;
        vec r = x - n * vset(0.693359375f);
        r = r - n * vset(-2.12194440e-4f);
        vec p = vset(1.9875691500e-4f);
        p = p * r + vset(1.3981999507e-3f);
        p = p * r + vset(8.3334519073e-3f);
        p = p * r + vset(4.1665795894e-2f);
        p = p * r + vset(1.6666665459e-1f);
        p = p * r + vset(5.0000001201e-1f);
        p = p * r * r + r + vset(1.0f);
        return p * (vec)((ni + 127) << 23);
}

/* sigm x = 1 / (1 + e^-x) */
static inline CELL_INLINE vec vsigm(const vec *x)
{
        vec m = -*x;
        return vset(1.0f) / (vset(1.0f) + vexp(&m));
}

/* tanh x = 1 - 2 / (e^{2x} + 1): absolute error ~1e-7, saturates cleanly to +-1 */
static inline CELL_INLINE vec vtanh(const vec *x)
{
        vec x2 = *x + *x;
        return vset(1.0f) - vset(2.0f) / (vexp(&x2) + vset(1.0f));
}

static inline float sigmf(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
