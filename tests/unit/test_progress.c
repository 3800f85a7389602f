/* tests/unit/test_progress.c - the progress ETA and bar against --max-steps: the epoch's remaining
 * steps end at the run's last step when it comes first (issue 25: at step 88 of --max-steps 200,
 * "ETA 8.7s" for 2.6 s left, the bar counting to the epoch's 469th step). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train/progress.h"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%.12g != %.12g", (double)(a), (double)(b))

START_TEST(eta_max_steps_inside_epoch)
{
        /* Fashion-MNIST at batch 128: 469 steps an epoch, --max-steps 200, 0.025 s a step */
        dt_progress_info in = { .epoch = 1, .epochs = 15, .k = 88, .spe = 469, .step = 88, .total = 200,
                                .epoch_elapsed = 88 * 0.025 };
        double ep, run;
        long end;
        dt_progress_etas(&in, 0.025, &ep, &run, &end);
        ck_assert_int_eq(end, 200);
        NEAR(ep, 112 * 0.025);
        NEAR(run, 112 * 0.025);
}
END_TEST

START_TEST(eta_whole_epochs)
{
        /* 3 epochs of 100: the epoch at its own rate (0.1 s), the two after at the run's (0.2 s) */
        dt_progress_info in = { .epoch = 1, .epochs = 3, .k = 50, .spe = 100, .step = 50, .total = 300,
                                .epoch_elapsed = 5.0 };
        double ep, run;
        long end;
        dt_progress_etas(&in, 0.2, &ep, &run, &end);
        ck_assert_int_eq(end, 100);
        NEAR(ep, 5.0);
        NEAR(run, 5.0 + 200 * 0.2);
        /* --max-steps 250 ends the run in the third epoch: this one runs out, 150 steps after it */
        in.total = 250;
        dt_progress_etas(&in, 0.2, &ep, &run, &end);
        ck_assert_int_eq(end, 100);
        NEAR(run, 5.0 + 150 * 0.2);
        /* resumed in epoch 2 at step 150 with --max-steps 170: 20 steps of this epoch are left */
        dt_progress_info r = { .epoch = 2, .epochs = 3, .k = 50, .spe = 100, .step = 150, .total = 170,
                               .epoch_elapsed = 5.0 };
        dt_progress_etas(&r, NAN, &ep, &run, &end);
        ck_assert_int_eq(end, 70);
        NEAR(ep, 20 * 0.1);
        NEAR(run, 20 * 0.1);
        /* the last step: nothing left */
        r.k = 70, r.step = 170, r.epoch_elapsed = 7.0;
        dt_progress_etas(&r, 0.1, &ep, &run, &end);
        ck_assert_int_eq(end, 70);
        NEAR(ep, 0);
        NEAR(run, 0);
}
END_TEST

/* the plain line off a terminal and the bar on one name the ETA and the step the run stops at */
START_TEST(printed_line_and_bar)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_progress p;
        dt_progress_init(&p, DT_PROGRESS_LINES, f, 10, 0, 100.0, 0);
        dt_progress_info in = { .epoch = 1, .epochs = 15, .k = 88, .spe = 469, .step = 88, .total = 200,
                                .loss = 0.5, .sps = 5120, .elapsed = 2.2, .epoch_elapsed = 2.2 };
        dt_progress_step(&p, &in, 111.0);       /* 11 s after the start: a line is due */
        fflush(f);
        ck_assert_msg(strstr(buf, "step 88/200 (88/469 in epoch)") && strstr(buf, "ETA epoch 2.8s run 2.8s\n"), "%s", buf);
        fclose(f);
        free(buf);
        buf = NULL;
        f = open_memstream(&buf, &len);
        dt_progress_init(&p, DT_PROGRESS_BAR, f, 10, 0, 100.0, 0);
        p.width = 100;
        dt_progress_step(&p, &in, 102.2);
        fflush(f);
        ck_assert_msg(strstr(buf, " 88/200 loss 0.5000") && strstr(buf, "ETA 2.8s"), "%s", buf);
        fclose(f);
        free(buf);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("progress");
        TCase *tc = tcase_create("progress");
        tcase_add_test(tc, eta_max_steps_inside_epoch);
        tcase_add_test(tc, eta_whole_epochs);
        tcase_add_test(tc, printed_line_and_bar);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
