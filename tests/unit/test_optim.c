/* tests/unit/test_optim.c - each optimizer against steps computed by hand from torch.optim's
 * formulas; schedules and clipping at known points. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include "optim/optim.h"
#include "optim/moments.h"
#include "util/common.h"
#include <stdint.h>

static float step1(dt_optim_hp hp, float lr, long t, float p, float g, float *m, float *v)
{
        dt_optim_update_cpu(&hp, lr, t, &p, &g, m, v, 1);
        return p;
}

#define EQ(a, b) ck_assert_msg(fabs((double)(a) - (double)(b)) < 1e-6, "%.9g != %.9g", (double)(a), (double)(b))

START_TEST(sgd)
{
        float m = 0, v = 0;
        EQ(step1((dt_optim_hp){ .kind = DT_OPT_SGD }, 0.1f, 1, 1.0f, 0.5f, &m, &v), 0.95);
        /* weight decay adds wd * p to the gradient: 0.5 + 0.1 = 0.6 */
        EQ(step1((dt_optim_hp){ .kind = DT_OPT_SGD, .weight_decay = 0.1f }, 0.1f, 1, 1.0f, 0.5f, &m, &v), 0.94);
}
END_TEST

START_TEST(momentum)
{
        dt_optim_hp hp = { .kind = DT_OPT_MOMENTUM, .momentum = 0.9f };
        float m = 0, v = 0;
        float p = step1(hp, 0.1f, 1, 1.0f, 0.5f, &m, &v);   /* b = 0.5, p = 0.95 */
        EQ(p, 0.95); EQ(m, 0.5);
        p = step1(hp, 0.1f, 2, p, 0.5f, &m, &v);            /* b = 0.45 + 0.5, p = 0.95 - 0.095 */
        EQ(p, 0.855); EQ(m, 0.95);
}
END_TEST

START_TEST(nesterov)
{
        dt_optim_hp hp = { .kind = DT_OPT_NESTEROV, .momentum = 0.9f };
        float m = 0, v = 0;
        float p = step1(hp, 0.1f, 1, 1.0f, 0.5f, &m, &v);   /* p = 1 - 0.1 (0.5 + 0.9 * 0.5) */
        EQ(p, 0.905);
        p = step1(hp, 0.1f, 2, p, 0.5f, &m, &v);            /* b = 0.95; p -= 0.1 (0.5 + 0.855) */
        EQ(p, 0.7695);
}
END_TEST

START_TEST(rmsprop)
{
        dt_optim_hp hp = { .kind = DT_OPT_RMSPROP, .alpha = 0.99f, .eps = 1e-8f };
        float m = 0, v = 0;
        /* v = 0.01 * 0.25 = 0.0025; p = 1 - 0.01 * 0.5 / 0.05 = 0.9 */
        float p = step1(hp, 0.01f, 1, 1.0f, 0.5f, &m, &v);
        EQ(v, 0.0025); EQ(p, 0.9);
        hp.momentum = 0.5f; m = 0; v = 0;
        p = step1(hp, 0.01f, 1, 1.0f, 0.5f, &m, &v);        /* buf = 10, p = 0.9 */
        p = step1(hp, 0.01f, 2, p, 0.5f, &m, &v);           /* v = 0.0025*0.99 + 0.0025*0.01 */
        double v2 = 0.0025 * 0.99 + 0.01 * 0.25, d2 = 0.5 / (sqrt(v2) + 1e-8), b2 = 0.5 * 10 + d2;
        ck_assert(fabs(p - (0.9 - 0.01 * b2)) < 1e-5);
}
END_TEST

START_TEST(adam)
{
        dt_optim_hp hp = { .kind = DT_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
        float m = 0, v = 0;
        /* t=1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25: p -= 0.001 * 0.5 / 0.5 */
        float p = step1(hp, 0.001f, 1, 1.0f, 0.5f, &m, &v);
        EQ(p, 0.999);
        /* t=2, g=-0.5: m = -0.005, v = 0.00049975; m^ = -0.005/0.19, sqrt(v^) = 0.5 */
        p = step1(hp, 0.001f, 2, p, -0.5f, &m, &v);
        EQ(p, 0.999 + 0.001 * (0.005 / 0.19) / 0.5);
        /* L2 weight decay only changes the gradient: first step still moves by lr */
        hp.weight_decay = 0.1f; m = v = 0;
        EQ(step1(hp, 0.001f, 1, 1.0f, 0.5f, &m, &v), 0.999);
}
END_TEST

START_TEST(adamw)
{
        dt_optim_hp hp = { .kind = DT_OPT_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f };
        float m = 0, v = 0;
        /* p *= 1 - lr wd, then the Adam step: 0.9999 - 0.001 */
        EQ(step1(hp, 0.001f, 1, 1.0f, 0.5f, &m, &v), 0.9989);
}
END_TEST

START_TEST(schedules)
{
        dt_sched_spec s = { .kind = DT_SCHED_COSINE };
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 0, 10, 100), 1.0, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 50, 10, 100), 0.5, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 100, 10, 100), 0.0, 1e-12);
        s.min_lr = 0.1;
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 50, 10, 100), 0.55, 1e-12);
        s = (dt_sched_spec){ .kind = DT_SCHED_LINEAR };
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 25, 10, 100), 0.75, 1e-12);
        s = (dt_sched_spec){ .kind = DT_SCHED_STEP, .step_size = 2, .step_unit_epochs = 1, .gamma = 0.1 };
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 19, 10, 100), 1.0, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 20, 10, 100), 0.1, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 45, 10, 100), 0.01, 1e-12);
        s = (dt_sched_spec){ .kind = DT_SCHED_CONSTANT, .warmup_steps = 10 };
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 0, 10, 100), 0.1, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 9, 10, 100), 1.0, 1e-12);
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 10, 10, 100), 1.0, 1e-12);
        /* cosine after warm-up spans the remaining steps */
        s = (dt_sched_spec){ .kind = DT_SCHED_COSINE, .warmup_steps = 20 };
        ck_assert_double_eq_tol(dt_sched_lr(&s, 1.0, 60, 10, 100), 0.5, 1e-12);
}
END_TEST

START_TEST(clipping)
{
        ck_assert_float_eq(dt_clip_factor(3.0, 5.0), 1.0f);
        ck_assert_float_eq(dt_clip_factor(3.0, 0.0), 1.0f);
        ck_assert_float_eq_tol(dt_clip_factor(10.0, 5.0), 0.5f, 1e-6);
}
END_TEST

/* the moments' block: m and v 1 and 2 KiB (mod 4 KiB) past its start (which a large allocation
 * shares with the parameters' when glibc maps both), n floats each, not overlapping; one moment
 * (momentum): m only */
START_TEST(moments_layout)
{
        static const size_t sizes[] = { 1, 1000, 1024, 65536, ((size_t)1 << 22) + 1024, ((size_t)1 << 22) + 777 };
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
                size_t n = sizes[i];
                dt_moments mo = { .n = 2 };
                dt_moments_alloc(&mo, n);
                const uintptr_t at = (uintptr_t)mo.blk;
                ck_assert_uint_eq(((uintptr_t)mo.m - at) % 4096, 1024);
                ck_assert_uint_eq(((uintptr_t)mo.v - at) % 4096, 2048);
                ck_assert(mo.m + n <= mo.v);
                mo.m[0] = mo.m[n - 1] = mo.v[0] = mo.v[n - 1] = 1.0f;  /* within the block (ASan) */
                free(mo.blk);
                dt_moments one = { .n = 1 };
                dt_moments_alloc(&one, n);
                ck_assert(one.m != NULL && one.v == NULL);
                one.m[n - 1] = 1.0f;
                free(one.blk);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("optim");
        TCase *tc = tcase_create("steps");
        tcase_add_test(tc, sgd); tcase_add_test(tc, momentum); tcase_add_test(tc, nesterov);
        tcase_add_test(tc, rmsprop); tcase_add_test(tc, adam); tcase_add_test(tc, adamw);
        tcase_add_test(tc, schedules); tcase_add_test(tc, clipping); tcase_add_test(tc, moments_layout);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
