/* tests/unit/test_compress.c - the pure parts of the gradient compressors (parallel/compress*.c):
 * bf16 rounding (nearest, ties to even, NaN kept). */
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

static Suite *compress_suite(void)
{
        Suite *s = suite_create("compress");
        TCase *t = tcase_create("compress");
        tcase_add_test(t, test_bf16_round);
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
