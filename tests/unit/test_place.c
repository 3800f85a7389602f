/* tests/unit/test_place.c - where ranks go when a node's ranks outnumber its cores
 * (parallel/place.c): each pipeline's stages on one core unit when there are enough pipelines,
 * replicas and tensor shards of one stage spread, every rank a unit when there are few. */
#include <check.h>
#include "parallel/place.h"

/* world rank = (replica x P + stage) x T + shard, as train/setup.c lays out the grid */
static int unit_of(int D, int P, int T, int rank, int units)
{
        dt_place_member m[64];
        int n = D * P * T;
        for (int r = 0; r < n; r++) {
                int shard = r % T, stage = r / T % P, replica = r / (P * T);
                m[r] = (dt_place_member){ replica * T + shard, stage, r };
        }
        return dt_place_unit(m, n, rank, units);
}

START_TEST(test_pipelines_share)
{
        /* data 2 x pipeline 2 on 2 cores: ranks 0, 1 (replica 0's stages) on one, 2, 3 on the other */
        ck_assert_int_eq(unit_of(2, 2, 1, 0, 2), 0);
        ck_assert_int_eq(unit_of(2, 2, 1, 1, 2), 0);
        ck_assert_int_eq(unit_of(2, 2, 1, 2, 2), 1);
        ck_assert_int_eq(unit_of(2, 2, 1, 3, 2), 1);
        /* pipeline 2 x tensor 2: each shard's two stages together, the shards apart */
        ck_assert_int_eq(unit_of(1, 2, 2, 0, 2), unit_of(1, 2, 2, 2, 2));
        ck_assert_int_eq(unit_of(1, 2, 2, 1, 2), unit_of(1, 2, 2, 3, 2));
        ck_assert_int_ne(unit_of(1, 2, 2, 0, 2), unit_of(1, 2, 2, 1, 2));
}
END_TEST

START_TEST(test_spread)
{
        /* data 4 and tensor 4 on 2 cores: two ranks each, alternating */
        for (int r = 0; r < 4; r++) {
                ck_assert_int_eq(unit_of(4, 1, 1, r, 2), r % 2);
                ck_assert_int_eq(unit_of(1, 1, 4, r, 2), r % 2);
        }
        /* pipeline 4 on 2 cores (one pipeline): stages 0, 2 and 1, 3 */
        for (int r = 0; r < 4; r++) ck_assert_int_eq(unit_of(1, 4, 1, r, 2), r % 2);
        /* data 4 x pipeline 2 on 2 cores: four pipelines, two per unit, each whole */
        for (int r = 0; r < 8; r++) ck_assert_int_eq(unit_of(4, 2, 1, r, 2), (r / 2) % 2);
        /* not a member */
        ck_assert_int_eq(unit_of(2, 1, 1, 5, 2), -1);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("place");
        TCase *t = tcase_create("core");
        tcase_add_test(t, test_pipelines_share);
        tcase_add_test(t, test_spread);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? 1 : 0;
}
