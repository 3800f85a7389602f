/* tests/unit/test_util.c - diagnostics ordering, checked arithmetic, shapes, the DTRAIN_FAULT grammar. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"
#include "layers/tensor.h"
#include "util/fault.h"
#include "util/pages.h"
#include "util/rss.h"

START_TEST(diag_sorted)
{
        dt_diag d = { 0 };
        dt_diag_add(&d, "a.yaml", 9, 3, "second");
        dt_diag_add(&d, "a.yaml", 2, 5, "first");
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_diag_print(&d, f);
        fclose(f);
        ck_assert_str_eq(buf, "a.yaml:2:5: error: first\na.yaml:9:3: error: second\n"
                              "dtrain: 2 errors in 1 file; nothing was run\n");
        free(buf);
        dt_diag_free(&d);
}
END_TEST

/* Paged buffers: untouched pages take no memory; zeroing a range clears exactly it, handing its
 * whole pages back (the resident bytes drop) and clearing the partial ones at its ends. */
START_TEST(pages_zero)
{
        size_t n = (size_t)16 << 20;    /* 64 MiB */
        size_t before = dt_rss_now();
        float *p = dt_pages_alloc(n);
        ck_assert_uint_lt(dt_rss_now(), before + ((size_t)8 << 20));
        for (size_t i = 0; i < n; i++) p[i] = 1.0f;
        size_t full = dt_rss_now();
        dt_pages_zero(p + 1000, n - 2000);
        ck_assert_float_eq(p[999], 1.0f);
        ck_assert_float_eq(p[1000], 0.0f);
        ck_assert_float_eq(p[n / 2], 0.0f);
        ck_assert_float_eq(p[n - 1001], 0.0f);
        ck_assert_float_eq(p[n - 1000], 1.0f);
        if (full) ck_assert_uint_lt(dt_rss_now() + ((size_t)48 << 20), full);
        float q[3] = { 1, 2, 3 };      /* no whole page inside: cleared in place */
        dt_pages_zero(q + 1, 1);
        ck_assert(q[0] == 1 && q[1] == 0 && q[2] == 3);
        dt_pages_free(p, n);
}
END_TEST

/* dt_pages_populate: the whole pages inside the range resident at once (what shard 3 does before
 * a gather and a backward writes into handed-back parts), their contents kept, nothing outside
 * touched; on a kernel without MADV_POPULATE_WRITE it may do nothing (resident or not, the same) */
START_TEST(pages_populate)
{
        size_t n = (size_t)16 << 20;    /* 64 MiB */
        float *p = dt_pages_alloc(n);
        p[5] = 7.0f;
        size_t before = dt_rss_now();
        dt_pages_populate(p, n / 2);
        size_t after = dt_rss_now();
#ifdef MADV_POPULATE_WRITE
        if (before) ck_assert_uint_gt(after, before + ((size_t)24 << 20));
        if (before) ck_assert_uint_lt(after, before + ((size_t)40 << 20));    /* the first half only */
#else
        (void)after;
#endif
        ck_assert_float_eq(p[5], 7.0f);
        ck_assert_float_eq(p[n / 2 - 1], 0.0f);
        dt_pages_populate(p + 3, 10);   /* no whole page inside: nothing */
        dt_pages_free(p, n);
}
END_TEST

START_TEST(checked_math)
{
        size_t r;
        ck_assert(dt_mul_ok(1u << 20, 1u << 20, &r) && r == (size_t)1 << 40);
        ck_assert(!dt_mul_ok(SIZE_MAX / 2, 3, &r));
        ck_assert(!dt_add_ok(SIZE_MAX, 1, &r));
        dt_shape s = { 3, { 1 << 30, 1 << 30, 1 << 30 } };
        ck_assert_uint_eq(dt_shape_size(&s), 0);     /* 2^90 overflows size_t */
        dt_shape big = { 4, { 1 << 30, 1 << 30, 1 << 30, 1 << 30 } };
        ck_assert_uint_eq(dt_shape_size(&big), 0);   /* overflow is refused, not wrapped */
        dt_shape neg = { 2, { 3, -1 } };
        ck_assert_uint_eq(dt_shape_size(&neg), 0);
}
END_TEST

/* mkdir -p: parents made, existing parts fine, the failing prefix reported */
START_TEST(mkdir_p)
{
        char root[64], path[256], failed[256];
        snprintf(root, sizeof root, "/tmp/dtrain-test-util-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
        snprintf(path, sizeof path, "%s/a/b//c/", root);
        ck_assert_int_eq(dt_mkdir_p(path, 0755, failed, sizeof failed), 0);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_int_eq(dt_mkdir_p(path, 0755, NULL, 0), 0);         /* again: all there */

        /* a file in the way: the prefix below it cannot be made */
        snprintf(path, sizeof path, "%s/f", root);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        ck_assert_int_eq(dt_mkdir_p(path, 0755, failed, sizeof failed), 0);   /* exists: the caller checks */
        snprintf(path, sizeof path, "%s/f/x/y", root);
        errno = 0;
        ck_assert_int_eq(dt_mkdir_p(path, 0755, failed, sizeof failed), -1);
        ck_assert_int_eq(errno, ENOTDIR);
        char want[256];
        snprintf(want, sizeof want, "%s/f/x", root);
        ck_assert_str_eq(failed, want);

        char *longp = malloc(DT_PATH_MAX + 8);
        memset(longp, 'a', DT_PATH_MAX + 7);
        longp[DT_PATH_MAX + 7] = 0;
        ck_assert_int_eq(dt_mkdir_p(longp, 0755, NULL, 0), -1);
        ck_assert_int_eq(errno, ENAMETOOLONG);
        free(longp);

        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(fault_grammar)
{
        dt_fault f[DT_FAULT_MAX];
        char err[512];
        ck_assert_int_eq(dt_fault_parse(NULL, f, DT_FAULT_MAX, err, sizeof err), 0);
        ck_assert_int_eq(dt_fault_parse("", f, DT_FAULT_MAX, err, sizeof err), 0);
        /* defaults: every rank, step 1 */
        ck_assert_int_eq(dt_fault_parse("nan_loss", f, DT_FAULT_MAX, err, sizeof err), 1);
        ck_assert_int_eq(f[0].kind, DT_FAULT_NAN_LOSS);
        ck_assert_int_eq(f[0].rank, -1);
        ck_assert_int_eq(f[0].step, 1);
        /* a comma both inside a fault and between two: an item without '=' (or with '@') starts one */
        ck_assert_int_eq(dt_fault_parse("nan_grad@rank=1,step=5,kill@step=9 rank=0", f, DT_FAULT_MAX, err,
                                        sizeof err), 2);
        ck_assert_int_eq(f[0].kind, DT_FAULT_NAN_GRAD);
        ck_assert_int_eq(f[0].rank, 1);
        ck_assert_int_eq(f[0].step, 5);
        ck_assert_int_eq(f[1].kind, DT_FAULT_KILL);
        ck_assert_int_eq(f[1].rank, 0);
        ck_assert_int_eq(f[1].step, 9);
        ck_assert_int_eq(dt_fault_parse("exit@code=3;slow@rank=*,secs=0.25;signal@sig=SIGTERM,step=7;"
                                        "ckpt_kill_mid_write@step=20", f, DT_FAULT_MAX, err, sizeof err), 4);
        ck_assert_int_eq(f[0].code, 3);
        ck_assert(f[1].kind == DT_FAULT_SLOW && f[1].rank == -1 && f[1].secs == 0.25);
        ck_assert(f[2].kind == DT_FAULT_SIGNAL && f[2].sig == SIGTERM && f[2].step == 7);
        ck_assert(f[3].kind == DT_FAULT_CKPT_KILL && f[3].step == 20);
        /* malformed: each says what is wrong */
        static const struct { const char *spec, *why; } bad[] = {
                { "nan_grd", "unknown fault 'nan_grd'" },
                { "step=3", "comes before any fault name" },
                { "hang@", "is not KEY=VALUE" },
                { "hang@rank", "is not KEY=VALUE" },
                { "hang@rank=", "is not KEY=VALUE" },
                { "@rank=1", "unknown fault ''" },
                { "hang@rank=-1", "not a rank number" },
                { "hang@rank=1x", "not a rank number" },
                { "hang@step=0", "not a step number" },
                { "hang@step=99999999999999999999", "not a step number" },
                { "hang@rank=1,rank=2", "'rank' given twice" },
                { "nan_grad@code=1", "takes no key 'code'" },
                { "kill@secs=1", "takes no key 'secs'" },
                { "exit@code=256", "not an exit status" },
                { "slow@secs=nan", "not a number of seconds" },
                { "slow@secs=1e9", "not a number of seconds" },
                { "signal@sig=HUP", "not one dtrain stops on" },
                { "hang@rank=1=2", "is not KEY=VALUE" },
                { "hang@step=1@rank=2", "is not KEY=VALUE" },
                { "hang@speed=1", "takes no key 'speed'" },
        };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                err[0] = 0;
                ck_assert_msg(dt_fault_parse(bad[i].spec, f, DT_FAULT_MAX, err, sizeof err) == -1, "%s", bad[i].spec);
                ck_assert_msg(strstr(err, bad[i].why) != NULL, "%s: got '%s'", bad[i].spec, err);
        }
        char many[512] = "";
        for (int i = 0; i <= DT_FAULT_MAX; i++) strcat(many, "kill;");
        ck_assert_int_eq(dt_fault_parse(many, f, DT_FAULT_MAX, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "more than"));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("util");
        TCase *tc = tcase_create("util");
        tcase_add_test(tc, diag_sorted);
        tcase_add_test(tc, pages_zero);
        tcase_add_test(tc, pages_populate);
        tcase_add_test(tc, checked_math);
        tcase_add_test(tc, mkdir_p);
        tcase_add_test(tc, fault_grammar);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
