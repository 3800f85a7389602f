/* tests/unit/test_half.c - every CPU path's fp16 casts and sum (parallel/half.c) give _Float16's
 * bits: all 65536 halves, float edge values (NaN payloads, overflow, ties, subnormals) and random
 * floats, at lengths that exercise every vector tail. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "parallel/half.h"

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        return (uint32_t)(rs >> 16);
}

static uint16_t ref_half(float x)
{
        _Float16 h = (_Float16)x;
        uint16_t u;
        memcpy(&u, &h, sizeof u);
        return u;
}
static float ref_float(uint16_t u)
{
        _Float16 h;
        memcpy(&h, &u, sizeof h);
        return (float)h;
}
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* Floats whose casts take every branch: NaNs (quiet, signalling, payloads above and below half's
 * 10 bits), infinities, half's overflow edge (65504, 65519.99, 65520), round-to-even ties around
 * normals and subnormals, float subnormals, and random bit patterns over every exponent. */
#define NF 200000
static size_t float_inputs(float *x)
{
        const uint32_t edge[] = { 0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                0x7f800001u, 0x7fa00000u, 0x7fbfffffu, 0xffc01234u, 0x7f802000u, 0x7f801fffu, 0x7fffffffu,
                0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x7f7fffffu, 0xff7fffffu,
                0x33800000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x33c00000u, 0x38800000u, 0x387fc000u,
                0x387fe000u, 0x387ff000u, 0x00000001u, 0x807fffffu, 0x3f801000u, 0x3f803000u, 0x3f800fffu,
                0x3f801001u, 0xbf803000u, 0x3f7ff000u };
        size_t n = 0;
        for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) x[n++] = bitsf(edge[i]);
        for (uint32_t e = 0; e < 256; e++)      /* every exponent, ties and near-ties included */
                for (int k = 0; k < 64; k++) {
                        uint32_t m = rnd() & 0x7fffffu;
                        if (k & 1) m = (m & ~0x1fffu) | 0x1000u;   /* a tie at half's normal precision */
                        x[n++] = bitsf((rnd() & 0x80000000u) | e << 23 | m);
                }
        for (int e = -25; e <= -15; e++)        /* ties at half's subnormal spacing, 2^-24 */
                for (int k = 0; k < 32; k++) {
                        int d = 13 + (-14 - e);    /* float mantissa bits below that spacing */
                        uint32_t m = ((rnd() & 0x7fffffu) >> d << d) | 1u << (d - 1);
                        if (d > 23) m = 0;         /* 2^-25 exactly: the tie between 0 and 2^-24 */
                        x[n++] = bitsf((rnd() & 0x80000000u) | (uint32_t)(e + 127) << 23 | (m & 0x7fffffu));
                }
        while (n < NF) x[n++] = bitsf(rnd());
        return n;
}

START_TEST(test_half_paths)
{
        static float x[NF], xf[65536], yf[65536];
        static uint16_t h[NF], all[65536], a[65536], b[65536], want[65536];
        size_t nf = float_inputs(x);
        for (uint32_t u = 0; u < 65536; u++) all[u] = (uint16_t)u;
        for (size_t i = 0; i < 65536; i++) a[i] = (uint16_t)rnd(), b[i] = (uint16_t)rnd();
        for (size_t i = 0; i < 4096; i++) a[i] = all[(i * 97) & 0xffff], b[i] = all[(i * 31 + 7) & 0xffff];
        for (size_t i = 0; i < 64; i++) a[4096 + i] = all[0x7bff - (i & 7)], b[4096 + i] = all[0x7bff - (i >> 3)];
        for (size_t i = 0; i < 65536; i++) {  /* x86's rule, which dp.c's op always followed: b's NaN first */
                float fa = ref_float(a[i]), fb = ref_float(b[i]);
                want[i] = ref_half(fa != fa && fb != fb ? fb + fb : fa + fb);  /* fb + fb: b's, quieted */
        }
        dt_isa best = dt_cpu_best();
        for (int p = 0; p <= (int)best; p++) {
                ck_assert_int_eq(dt_cpu_force((dt_isa)p), 0);
                const dt_half_kern *k = dt_half_get();
                for (size_t len = 1; len <= 40; len++) {       /* every tail, from every offset */
                        memset(h, 0, len * sizeof *h);
                        k->to_half(x + 3 * len, h, len);
                        for (size_t i = 0; i < len; i++) ck_assert_uint_eq(h[i], ref_half(x[3 * len + i]));
                }
                k->to_half(x, h, nf);
                for (size_t i = 0; i < nf; i++)
                        if (h[i] != ref_half(x[i]))
                                ck_abort_msg("%s: float %08x -> %04x, _Float16 %04x", dt_isa_name((dt_isa)p),
                                             fbits(x[i]), h[i], ref_half(x[i]));
                k->to_float(all, xf, 65536);
                k->to_float(all + 5, yf, 37);
                for (uint32_t u = 0; u < 65536; u++)
                        if (fbits(xf[u]) != fbits(ref_float((uint16_t)u)))
                                ck_abort_msg("%s: half %04x -> %08x, _Float16 %08x", dt_isa_name((dt_isa)p), u,
                                             fbits(xf[u]), fbits(ref_float((uint16_t)u)));
                for (int i = 0; i < 37; i++) ck_assert_uint_eq(fbits(yf[i]), fbits(ref_float(all[5 + i])));
                static uint16_t s[65536];
                memcpy(s, b, sizeof s);
                k->sum(a, s, 65536 - 3);
                for (size_t i = 0; i < 65536 - 3; i++)
                        if (s[i] != want[i])
                                ck_abort_msg("%s: %04x + %04x -> %04x, _Float16 %04x", dt_isa_name((dt_isa)p),
                                             a[i], b[i], s[i], want[i]);
                for (size_t i = 65536 - 3; i < 65536; i++) ck_assert_uint_eq(s[i], b[i]);  /* past n: untouched */
        }
        dt_cpu_force(best);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("half");
        TCase *t = tcase_create("paths");
        tcase_add_test(t, test_half_paths);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int nf = srunner_ntests_failed(r);
        srunner_free(r);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
