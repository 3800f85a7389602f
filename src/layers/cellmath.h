/* layers/cellmath.h - vector exp/sigmoid/tanh for the recurrent cells (cellkern.h). Static inline in
 * a header on purpose: these run once per gate vector in the innermost loop and must inline into
 * the cells, so cellkern.h includes it under each CPU path's target. */
#ifndef DT_CELLMATH_H
#define DT_CELLMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- vector math: GCC/Clang vector extensions, 16 floats (four SSE ops, two AVX, one AVX-512). Vectors
 * go into helpers by pointer: GCC warns about by-value wide vectors without AVX even when
 * the helper is inlined, and its note cannot be silenced. ---- */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* returned vectors: the helpers are static inline, no ABI crosses a call */
#endif
typedef float vec __attribute__((vector_size(64)));
typedef int32_t veci __attribute__((vector_size(64)));

#define VL 16     /* lanes */

static inline vec ld(const float *p)
{
        vec v;
        memcpy(&v, p, sizeof v);
        return v;
}

static inline void st(float *p, const vec *v) { memcpy(p, v, sizeof *v); }

static inline vec vset(float a) { return (vec){ a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a }; }

/* e^x, Cephes' expf: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n through the
 * exponent bits. x is clamped to [-87, 88] so 2^n stays a normal float (relative error ~2 ulp). */
static inline vec vexp(const vec *px)
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
static inline vec vsigm(const vec *x)
{
        vec m = -*x;
        return vset(1.0f) / (vset(1.0f) + vexp(&m));
}

/* tanh x = 1 - 2 / (e^{2x} + 1): absolute error ~1e-7, saturates cleanly to +-1 */
static inline vec vtanh(const vec *x)
{
        vec x2 = *x + *x;
        return vset(1.0f) - vset(2.0f) / (vexp(&x2) + vset(1.0f));
}

static inline float sigmf(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
