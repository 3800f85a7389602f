/* tests/unit/test_plan_pipe_msgs.c - the planner's price for a pipeline's messages on the stages' own
 * cores: a cut of one tensor goes straight from and into the layers' tensors (parallel/pipe_msgs.c),
 * so its step does not move with the machine's copy speed; a branched cut of two tensors is still
 * packed and unpacked, two copies a micro-batch each way on each side. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include "plan/plan.h"
#include "plan/planner.h"
#include "graph/graph.h"
#include "spec_fixture.h"

static const char chain[] = "name: chain\ninput: [64]\nlayers:\n"
                            "  - {type: fc, name: a, units: 256, activation: relu}\n"
                            "  - {type: fc, name: b, units: 512, activation: relu}\n"
                            "  - {type: fc, name: c, units: 256, activation: relu}\n"
                            "  - {type: fc, name: out, units: 10}\n"
                            "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 32}\n";

/* the same shapes, but the cut after b also carries a (read again by the add after it) */
static const char branched[] = "name: branched\ninput: [64]\nlayers:\n"
                               "  - {type: fc, name: a, units: 256, activation: relu}\n"
                               "  - {type: fc, name: b, units: 256, activation: relu}\n"
                               "  - {type: add, name: c, inputs: [b, a]}\n"
                               "  - {type: fc, name: out, units: 10}\n"
                               "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 32}\n";

/* The busiest stage's compute (compute + tensor) of 2 stages cut after layer b, at copy_beta cb[k]
 * (one profile for both). */
static void compute_at(const char *yaml, const double cb[2], double out[2])
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, yaml);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 2;
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_layout L = { .grid = { 1, 2, 1 }, .first = { 0, 2, 4 }, .micro = 2, .sched = DT_SCHEDULE_1F1B };
        for (int k = 0; k < 2; k++) {
                dt_machine m;
                dt_machine_from(&m, &cs, 2, 1);
                m.copy_beta = cb[k];
                dt_prediction pr;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &pr), 0);
                out[k] = pr.compute + pr.tensor;
        }
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}

static const double speeds[2] = { 1e-12, 1e-6 };

START_TEST(test_chain_no_copies)
{
        double t[2];
        compute_at(chain, speeds, t);
        double fast = t[0], slow = t[1];
        ck_assert_msg(fabs(slow - fast) <= 1e-9 * fast, "copy speed moved a chain's step: %.9g s against %.9g s",
                      slow, fast);
}
END_TEST

START_TEST(test_branched_copies)
{
        /* 16 samples x (256 + 256) floats a message; each micro-batch copies it twice (F: pack or
         * unpack the activation, B: the gradient), on both stages alike */
        double t[2];
        compute_at(branched, speeds, t);
        double fast = t[0], slow = t[1];
        double copies = 2 * 2 * 4.0 * 16 * 512 * (1e-6 - 1e-12);
        ck_assert_msg(fabs((slow - fast) - copies) <= 1e-6 * copies, "copies %.9g s, expected %.9g s", slow - fast, copies);
}
END_TEST

/* Stages on cores of their own over shared memory: a message past the eager limit is the
 * receiver's copy once its receive matches, so each of the heavy last stage's m activations costs
 * its core the copy even when it arrived while the stage was computing. As a transfer the
 * receiver computes through (the model before), the step moved by about the first activation's
 * and the last gradient's, 2 copies, not m. */
START_TEST(test_receiver_copies)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, chain);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 2;
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        const int micro = 8, bm = 32 / micro;
        /* cut after a: the second stage computes b, c and out, the most */
        dt_layout L = { .grid = { 1, 2, 1 }, .first = { 0, 1, 4 }, .micro = micro, .sched = DT_SCHEDULE_1F1B };
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        m.intra.alpha = 0;
        m.intra.beta = 1e-15;
        dt_prediction fast, slow;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &fast), 0);
        /* each copy a tenth of a micro-batch's compute on the busiest stage: hidden, were it a
         * transfer, behind the stages' work but for the pipeline's ends */
        double n = 4.0 * bm * 256, copy = 0.1 * fast.compute / micro;
        m.intra.beta = copy / n;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &slow), 0);
        ck_assert_msg(slow.step - fast.step >= 0.9 * micro * copy,
                      "step %.9g s with copies of %.9g s against %.9g s: %.2f copies, expected at least %d", slow.step,
                      copy, fast.step, (slow.step - fast.step) / copy, micro);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("plan_pipe_msgs");
        TCase *t = tcase_create("plan_pipe_msgs");
        tcase_set_timeout(t, 120);
        tcase_add_test(t, test_chain_no_copies);
        tcase_add_test(t, test_branched_copies);
        tcase_add_test(t, test_receiver_copies);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
