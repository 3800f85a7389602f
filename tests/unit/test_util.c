/* tests/unit/test_util.c - diagnostics ordering, checked arithmetic, shapes. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"
#include "layers/tensor.h"

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

int main(void)
{
        Suite *s = suite_create("util");
        TCase *tc = tcase_create("util");
        tcase_add_test(tc, diag_sorted);
        tcase_add_test(tc, checked_math);
        tcase_add_test(tc, mkdir_p);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
