/* tests/unit/test_schedule_steady.c - Check tests of the simulator's steps back to back
 * (dt_schedule_simulate_steps) and the steady-state bubble formulas (dt_schedule_bubble_steady_v):
 * two-stage cases worked by hand, the errors, zb-v's zero steady-state bubble at equal times and its
 * once-per-run descent, and every other kind's steady state equal to its one step's. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"

#define MAXP 8
#define MAXM 32
#define NEAR(x, y) (fabs((x) - (y)) < 1e-9)

static const dt_schedule_kind kinds[] = { DT_SCHEDULE_GPIPE, DT_SCHEDULE_1F1B, DT_SCHEDULE_ZB_H1,
                                          DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

static int chunks(dt_schedule_kind k)
{
        return k == DT_SCHEDULE_INTERLEAVED || k == DT_SCHEDULE_ZB_V || k == DT_SCHEDULE_V_HALF ? 2 : 1;
}

static void build(dt_schedule *s, dt_schedule_kind k, int p, int m)
{
        char err[256] = "";
        ck_assert_msg(dt_schedule_build_v(s, k, p, chunks(k), m, err, sizeof err) == 0, "%s", err);
}

static void costs(dt_stage_cost *c, double f, double b, double w)
{
        for (int i = 0; i < 2 * MAXP; i++) c[i] = (dt_stage_cost){ f, b, w };
}

/* Two stages passing one activation a step: stage 0 F0 sa0, stage 1 ra0 F0. */
static void chain(dt_schedule *s)
{
        dt_schedule_init(s, DT_SCHEDULE_GPIPE, 2, 1);
        dt_schedule_add(s, 0, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(s, 0, DT_ACT_SEND_ACT, 0, 1);
        dt_schedule_add(s, 1, DT_ACT_RECV_ACT, 0, 0);
        dt_schedule_add(s, 1, DT_ACT_FORWARD, 0, -1);
}

/* ---- worked by hand ---- */

/* The chain at f = 1: step k (from 0) runs on stage 0 over [k, k + 1] and on stage 1 over
 * [k + 1, k + 2], a parallelogram: one step alone idles half of 2 x 2, five back to back end at 6,
 * each step 1 after the last, and no stage idles in steady state (the run's own bubble 1 - 10 / 12). */
START_TEST(test_chain)
{
        dt_schedule s;
        chain(&s);
        dt_stage_cost c[2] = { { 1, 0, 0 }, { 1, 0, 0 } };
        dt_sim_link lk = { 0 };
        dt_schedule_steady r;
        char err[256] = "";
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 5, &r, err, sizeof err), 0);
        ck_assert_int_eq(r.nsteps, 5);
        ck_assert(NEAR(r.first, 2) && NEAR(r.makespan, 6) && NEAR(r.period, 1));
        ck_assert(NEAR(r.busy[0], 1) && NEAR(r.busy[1], 1) && NEAR(r.idle[0], 0) && NEAR(r.idle[1], 0));
        ck_assert(NEAR(r.bubble, 0) && NEAR(r.amortised, 1.0 / 6));
        /* one step: the one-step play's figures */
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 1, &r, err, sizeof err), 0);
        ck_assert(NEAR(r.period, 2) && NEAR(r.makespan, 2) && NEAR(r.bubble, 0.5) && NEAR(r.amortised, 0.5));
        /* a message 0.5 late: every stage 1 action 0.5 later, the spacing the same */
        lk.p2p = 0.5;
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 3, &r, err, sizeof err), 0);
        ck_assert(NEAR(r.first, 2.5) && NEAR(r.makespan, 4.5) && NEAR(r.period, 1));
        /* stage 1 three times slower: it sets the pace (F at 1, 4, 7, 10), stage 0 idles 2 a step */
        c[1].f = 3;
        lk.p2p = 0;
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 4, &r, err, sizeof err), 0);
        ck_assert(NEAR(r.first, 4) && NEAR(r.makespan, 13) && NEAR(r.period, 3));
        ck_assert(NEAR(r.idle[0], 2) && NEAR(r.idle[1], 0) && NEAR(r.bubble, 1 - 4.0 / 6));
        dt_schedule_free(&s);
}
END_TEST

/* 1f1b on 2 stages, one micro-batch, f = b = w = 1: stage 0 F [0, 1], stage 1 F B W [1, 4], stage 0
 * B W [4, 6]. Stage 0 both starts a step and ends it: the next starts at 6 and stage 1 waits from 4
 * to 7 for it, so back to back the step still takes 6 and each stage idles 3 of it, the formula's
 * (p - 1) / (m + p - 1) = 1/2. */
START_TEST(test_1f1b_two)
{
        dt_schedule s;
        build(&s, DT_SCHEDULE_1F1B, 2, 1);
        dt_stage_cost c[2 * MAXP];
        costs(c, 1, 1, 1);
        dt_sim_link lk = { 0 };
        dt_schedule_steady r;
        char err[256] = "";
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 3, &r, err, sizeof err), 0);
        ck_assert(NEAR(r.first, 6) && NEAR(r.makespan, 18) && NEAR(r.period, 6));
        ck_assert(NEAR(r.idle[0], 3) && NEAR(r.idle[1], 3) && NEAR(r.bubble, 0.5) && NEAR(r.amortised, 0.5));
        ck_assert(NEAR(dt_schedule_bubble_steady_v(DT_SCHEDULE_1F1B, 2, 1, 1, 1, 1, 1), 0.5));
        dt_schedule_free(&s);
}
END_TEST

/* Stage 0 (fast) runs a step ahead of stage 1, which takes its micro-batches in the other order:
 * each receive takes its own step's message (step 2's sa0 and sa1 are sent before step 1's ra0 is
 * played), and stage 1 sets the pace: F1 [1, 4], F0 [4, 7], then 2 x 3 a step. */
START_TEST(test_order_across_steps)
{
        dt_schedule s;
        dt_schedule_init(&s, DT_SCHEDULE_GPIPE, 2, 2);
        for (int mb = 0; mb < 2; mb++) {
                dt_schedule_add(&s, 0, DT_ACT_FORWARD, mb, -1);
                dt_schedule_add(&s, 0, DT_ACT_SEND_ACT, mb, 1);
        }
        for (int mb = 1; mb >= 0; mb--) {
                dt_schedule_add(&s, 1, DT_ACT_RECV_ACT, mb, 0);
                dt_schedule_add(&s, 1, DT_ACT_FORWARD, mb, -1);
        }
        dt_stage_cost c[2] = { { 0.5, 0, 0 }, { 3, 0, 0 } };
        dt_sim_link lk = { 0 };
        dt_schedule_steady r;
        char err[256] = "";
        ck_assert_msg(dt_schedule_simulate_steps(&s, c, &lk, 3, &r, err, sizeof err) == 0, "%s", err);
        ck_assert(NEAR(r.first, 7) && NEAR(r.period, 6) && NEAR(r.makespan, 19));
        dt_schedule_free(&s);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
        dt_schedule s;
        chain(&s);
        dt_stage_cost c[2] = { { 1, 0, 0 }, { 1, 0, 0 } };
        dt_sim_link lk = { 0 };
        dt_schedule_steady r;
        char err[512];
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 0, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "steps to simulate must be 1 to 1024, and at most 65536 micro-batches in all, got 0 x 1");
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, DT_SCHEDULE_MAX_STEPS + 1, &r, err, sizeof err), -1);
        dt_schedule_free(&s);
        /* each stage waits for the other's activation first: named with the step's numbering */
        dt_schedule_init(&s, DT_SCHEDULE_GPIPE, 2, 1);
        for (int st = 0; st < 2; st++) {
                dt_schedule_add(&s, st, DT_ACT_RECV_ACT, 0, 1 - st);
                dt_schedule_add(&s, st, DT_ACT_FORWARD, 0, -1);
                dt_schedule_add(&s, st, DT_ACT_SEND_ACT, 0, 1 - st);
        }
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 2, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "2 steps back to back (step k's micro-batch j is k x 1 + j): deadlock: stage 0 "
                         "waits forever at action 0 (ra0 from stage 1), stage 1 waits forever at action 0 (ra0 "
                         "from stage 0); 2 stages stuck");
        dt_schedule_free(&s);
        /* more steps than the play holds micro-batches for */
        build(&s, DT_SCHEDULE_1F1B, 2, 128);
        ck_assert_int_eq(dt_schedule_simulate_steps(&s, c, &lk, 513, &r, err, sizeof err), -1);
        dt_schedule_free(&s);
}
END_TEST

/* ---- the steady state of every kind ---- */

/* zb-v at f = b = w: no idle in steady state once m >= 2p - 1 (each stage busy without a gap from
 * its first forward on), so the run's bubble is the descent's (p - 1) f once: over K steps
 * (p - 1) f / (2 K m (f + b + w) + (p - 1) f). The acceptance figure: p = 4, m = 8, under 1% at
 * K = 64 (0 steady, 0.10% over the run). Shorter steps keep some idle, below the one step's. */
START_TEST(test_zbv_steady)
{
        dt_stage_cost c[2 * MAXP];
        costs(c, 1, 1, 1);
        dt_sim_link lk = { 0 };
        char err[512] = "";
        for (int p = 1; p <= MAXP; p++)
                for (int m = 1; m <= MAXM; m++) {
                        dt_schedule s;
                        build(&s, DT_SCHEDULE_ZB_V, p, m);
                        int K = p == 4 && m == 8 ? 64 : 6;
                        dt_schedule_steady r;
                        dt_schedule_sim one;
                        ck_assert_msg(dt_schedule_simulate_steps(&s, c, &lk, K, &r, err, sizeof err) == 0, "%s", err);
                        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &lk, &one, err, sizeof err), 0);
                        double form = dt_schedule_bubble_steady_v(DT_SCHEDULE_ZB_V, p, 2, m, 1, 1, 1);
                        ck_assert_msg(NEAR(form, r.bubble), "zb-v p=%d m=%d: formula %g, simulated %g", p, m, form,
                                      r.bubble);
                        ck_assert(r.bubble <= one.bubble + 1e-12 && NEAR(r.first, one.makespan));
                        if (m >= 2 * p - 1) {
                                ck_assert_msg(NEAR(r.bubble, 0), "zb-v p=%d m=%d: %g", p, m, r.bubble);
                                ck_assert(NEAR(r.period, 6.0 * m));
                                ck_assert(NEAR(r.amortised, (p - 1.0) / (6.0 * K * m + p - 1)));
                        }
                        if (p == 4 && m == 8) ck_assert(r.bubble < 0.01 && r.amortised < 0.0011);
                        dt_schedule_free(&s);
                }
}
END_TEST

/* Every other kind's first stage starts a step and ends it last: back to back, its steps take what
 * one takes, with unequal times too (the simulator's one-step figure, the formula's for gpipe and
 * 1f1b everywhere); zb-v's is at most its one step's, and its formula (the simulator's play of a few
 * steps where no closed form holds) is the play's of 16. Every play ends: K steps never deadlock
 * where one does not, with free and slow messages. */
START_TEST(test_kinds_steady)
{
        static const double fbw[][3] = { { 1, 1, 1 }, { 1, 2, 1 }, { 1, 2, 0.5 }, { 2, 1, 1 }, { 0.7, 1.3, 0.4 } };
        dt_stage_cost c[2 * MAXP];
        char err[512] = "";
        for (int k = 0; k < NKINDS; k++)
                for (int t = 0; t < 5; t++)
                        for (int p = 2; p <= MAXP; p += 3)
                                for (int m = 1; m <= MAXM; m += 3) {
                                        double f = fbw[t][0], b = fbw[t][1], w = fbw[t][2];
                                        costs(c, f, b, w);
                                        dt_schedule s;
                                        build(&s, kinds[k], p, m);
                                        dt_sim_link lk = { .p2p = t == 4 ? 0.7 : 0 };
                                        dt_schedule_steady r;
                                        dt_schedule_sim one;
                                        ck_assert_msg(dt_schedule_simulate_steps(&s, c, &lk, 16, &r, err, sizeof err) == 0,
                                                      "%s", err);
                                        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &lk, &one, err, sizeof err), 0);
                                        const char *name = dt_schedule_kind_name(kinds[k]);
                                        if (kinds[k] == DT_SCHEDULE_ZB_V)
                                                ck_assert(r.bubble <= one.bubble + 1e-12);
                                        else
                                                ck_assert_msg(NEAR(r.bubble, one.bubble), "%s p=%d m=%d %g %g %g: "
                                                              "steady %g, one step %g", name, p, m, f, b, w, r.bubble,
                                                              one.bubble);
                                        if (lk.p2p > 0) {
                                                dt_schedule_free(&s);
                                                continue;
                                        }
                                        double form = dt_schedule_bubble_steady_v(kinds[k], p, chunks(kinds[k]), m, f, b, w);
                                        double th = dt_schedule_bubble_theory_v(kinds[k], p, chunks(kinds[k]), m, f, b, w);
                                        if (kinds[k] == DT_SCHEDULE_ZB_V)
                                                ck_assert_msg(NEAR(form, r.bubble), "zb-v p=%d m=%d %g %g %g: formula "
                                                              "%g, 16 steps %g", p, m, f, b, w, form, r.bubble);
                                        else
                                                ck_assert(NEAR(form, th));
                                        if (kinds[k] == DT_SCHEDULE_GPIPE || kinds[k] == DT_SCHEDULE_1F1B)
                                                ck_assert(NEAR(r.bubble, th));
                                        dt_schedule_free(&s);
                                }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("schedule_steady");
        TCase *t = tcase_create("schedule_steady");
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_chain);
        tcase_add_test(t, test_1f1b_two);
        tcase_add_test(t, test_order_across_steps);
        tcase_add_test(t, test_errors);
        tcase_add_test(t, test_zbv_steady);
        tcase_add_test(t, test_kinds_steady);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
