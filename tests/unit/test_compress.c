/* tests/unit/test_compress.c - the pure parts of the gradient compressors (parallel/compress*.c):
 * bf16 rounding (nearest, ties to even, NaN kept); threshold encoding (units, codes, residual, clipping)
 * and tau's adaptation; topk's entries per tensor. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "parallel/compress.h"

static float bits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

START_TEST(test_bf16_round)
{
        ck_assert_uint_eq(dt_bf16_round(1.0f), 0x3f80);
        ck_assert_uint_eq(dt_bf16_round(bits(0x3f808000u)), 0x3f80);   /* tie: to the even one */
        ck_assert_uint_eq(dt_bf16_round(bits(0x3f818000u)), 0x3f82);   /* tie: to the even one */
        ck_assert_uint_eq(dt_bf16_round(bits(0x3f808001u)), 0x3f81);   /* above the tie: up */
        ck_assert_uint_eq(dt_bf16_round(bits(0x3f807fffu)), 0x3f80);   /* below: down */
        ck_assert_uint_eq(dt_bf16_round(-2.5f), 0xc020);
        ck_assert_uint_eq(dt_bf16_round(bits(0x7f7fffffu)), 0x7f80);   /* largest float: infinity */
        ck_assert(isnan(dt_bf16_float(dt_bf16_round(NAN))));
        ck_assert(isinf(dt_bf16_float(dt_bf16_round(INFINITY))));
        ck_assert(dt_bf16_float(dt_bf16_round(3.140625f)) == 3.140625f); /* exact in bf16 */
}
END_TEST

START_TEST(test_threshold_encode)
{
        float res[6] = { 0.5f, -0.5f, 0, 0, 0.0f, 0 }, g[6] = { 0.6f, -0.6f, 0.2f, -9.0f, 0.99f, 2.5f };
        int8_t q[6];
        int32_t code[16];
        size_t m = dt_threshold_encode(res, g, 6, 1.0f, 3, q);
        ck_assert_uint_eq(m, 7);
        ck_assert_int_eq(q[0], 1);              /* 1.1 >= tau: one unit, 0.1 left */
        ck_assert_int_eq(q[1], -1);             /* -1.1: -1, -0.1 left */
        ck_assert_int_eq(q[3], -3);             /* -9: at most qmax = 3 units, the rest clipped */
        ck_assert_int_eq(q[5], 2);              /* 2.5: two whole units, 0.5 left */
        ck_assert(q[2] == 0 && q[4] == 0);
        ck_assert(fabsf(res[0] - 0.1f) < 1e-6f && fabsf(res[1] + 0.1f) < 1e-6f && res[5] == 0.5f);
        ck_assert(res[2] == 0.2f && res[4] == 0.99f);
        ck_assert(res[3] == -5.0f);             /* -6 clipped to -5 tau */
        ck_assert_uint_eq(dt_threshold_codes(q, 6, code), 7);
        const int32_t want[7] = { 1, -2, -4, -4, -4, 6, 6 };
        for (int i = 0; i < 7; i++) ck_assert_int_eq(code[i], want[i]);
        ck_assert(dt_threshold_adapt(1.0, 1e-5, 1e-4, 1e-2) < 1.0);
        ck_assert(dt_threshold_adapt(1.0, 0.5, 1e-4, 1e-2) > 1.0);
        ck_assert(dt_threshold_adapt(1.0, 1e-3, 1e-4, 1e-2) == 1.0);
        double t = 1.0;
        for (int i = 0; i < 20; i++) t = dt_threshold_adapt(t, 0, 1e-4, 1e-2);
        ck_assert(fabs(t - 0.5) < 1e-3);        /* DL4J's decay: half in 20 steps */
}
END_TEST

START_TEST(test_topk_keep)
{
        dt_param_spec w = { .trainable = 1, .shape = { .n = 2, .d = { 256, 784 } } };
        dt_param_spec b = { .trainable = 1, .shape = { .n = 1, .d = { 256 } } };
        dt_param_spec small = { .trainable = 1, .shape = { .n = 2, .d = { 120, 100 } } };
        dt_param_spec buf = { .trainable = 0, .shape = { .n = 1, .d = { 64 } } };
        ck_assert_uint_eq(dt_topk_keep(&w, 256 * 784, 0.2), 40141);    /* ceil(0.2 x 200704) */
        ck_assert_uint_eq(dt_topk_keep(&w, 256 * 784, 1e-9), 1);       /* at least one */
        ck_assert_uint_eq(dt_topk_keep(&w, 256 * 784, 1.0), 256 * 784);
        ck_assert_uint_eq(dt_topk_keep(&b, 256, 0.2), 256);             /* a bias: whole */
        ck_assert_uint_eq(dt_topk_keep(&small, 12000, 0.2), 12000);     /* under 16384 entries: whole */
        ck_assert_uint_eq(dt_topk_keep(&buf, 64, 0.2), 0);              /* a buffer: nothing */
}
END_TEST

static Suite *compress_suite(void)
{
        Suite *s = suite_create("compress");
        TCase *t = tcase_create("compress");
        tcase_add_test(t, test_bf16_round);
        tcase_add_test(t, test_threshold_encode);
        tcase_add_test(t, test_topk_keep);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(compress_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
