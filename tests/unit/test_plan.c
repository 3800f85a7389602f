/* tests/unit/test_plan.c - the planner: alpha-beta formulas against hand-computed values, the
 * machine's core sharing and node spans, and the search on two tiny models whose best layout on
 * two ranks is known by hand (FLOP-modelled costs, so the answer does not depend on the load). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "plan/plan.h"
#include "plan/planner.h"
#include "graph/graph.h"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-9 + 1e-9 * fabs(b), "%.12g != %.12g", (double)(a), (double)(b))

START_TEST(test_formulas)
{
        dt_link l = { .alpha = 1e-6, .beta = 1e-9 };
        NEAR(dt_net_p2p(&l, 1000), 1e-6 + 1e-6);
        /* p = 4, 1 MB: recursive doubling 2 (1e-6 + 1e-3) = 2.002e-3; ring 6e-6 + 1.5e-3 = 1.506e-3 */
        NEAR(dt_net_allreduce(&l, 4, 1e6), 1.506e-3);
        /* p = 2, 8 bytes: recursive doubling 1.008e-6 beats the ring's 2.008e-6 */
        NEAR(dt_net_allreduce(&l, 2, 8), 1.008e-6);
        /* p = 3: recursive doubling takes ceil(log2 3) = 2 rounds */
        NEAR(dt_net_allreduce(&l, 3, 8), fmin(2 * (1e-6 + 8e-9), 4e-6 + 4.0 / 3 * 8e-9));
        NEAR(dt_net_allreduce(&l, 1, 1e6), 0.0);
        /* all-gather of 4 MB in all over 4 ranks: 3 alpha + 3/4 of it */
        NEAR(dt_net_allgather(&l, 4, 4e6), 3e-6 + 3e-3);

        dt_machine m = { .cores_per_node = 2, .ranks_per_node = 2, .threads = 1,
                         .intra = { 1e-6, 1e-10 }, .inter = { 5e-5, 8e-9 } };
        ck_assert_ptr_eq(dt_net_link(&m, 2, 1), &m.intra);     /* ranks 0, 1: one node */
        ck_assert_ptr_eq(dt_net_link(&m, 2, 2), &m.inter);     /* ranks 0, 2: two nodes */
        ck_assert_ptr_eq(dt_net_link(&m, 1, 8), &m.intra);
        NEAR(dt_machine_share(&m), 1.0);
        m.ranks_per_node = 4;
        NEAR(dt_machine_share(&m), 2.0);                        /* 4 ranks on 2 cores */
}
END_TEST

static char path[64];

static void load(dt_model_spec *s, dt_graph *g, const char *body)
{
        snprintf(path, sizeof path, "/tmp/dtrain-test-plan-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        fputs(body, f);
        fclose(f);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_model_spec_load(s, path, &d), 0);
        unlink(path);
        ck_assert_int_eq(dt_graph_build(g, s, &d), 0);
        dt_diag_free(&d);
}

/* A file cache of its own for one test (XDG_CACHE_HOME), removed by drop_cache. */
static void temp_cache(char *dir)
{
        ck_assert_ptr_nonnull(mkdtemp(dir));
        setenv("XDG_CACHE_HOME", dir, 1);
}

static void drop_cache(const char *dir)
{
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
        unsetenv("XDG_CACHE_HOME");
}

/* The best layout of the model on two ranks, one per node, on a network of lat us and gbs GB/s. */
static dt_candidate best_of(const char *body, double lat, double gbs)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, body);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.latency_us = lat;
        cs.bandwidth_gbs = gbs;
        cs.ranks_per_node = 1;
        cs.cores_per_node = 1;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        dt_candidate c[64];
        int n = dt_plan_search(p, &m, 2, c, 64);
        ck_assert_int_ge(n, 2);
        for (int i = 1; i < n; i++) ck_assert(c[i].pr.step >= c[0].pr.step || !c[i].pr.fits);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        return c[0];
}

START_TEST(test_search_wide)
{
        /* 2M parameters, 8 samples, 1 Gbit/s: the gradient all-reduce (8 MB) costs ~67 ms, the
         * column-row pair's one all-reduce of 8 x 512 floats (16 KB) ~0.2 ms: tensor 2 */
        dt_candidate b = best_of("name: wide\ninput: [512]\nlayers:\n"
                                 "  - {type: fc, name: fc1, units: 2048, activation: relu}\n"
                                 "  - {type: fc, name: fc2, units: 512}\n"
                                 "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 8}\n",
                                 50, 0.125);
        ck_assert_int_eq(b.L.grid[0], 1);
        ck_assert_int_eq(b.L.grid[1], 1);
        ck_assert_int_eq(b.L.grid[2], 2);
        ck_assert_int_eq(b.L.split[0], DT_SPLIT_COLUMN);
        ck_assert_int_eq(b.L.split[1], DT_SPLIT_ROW);
        ck_assert(b.pr.bytes_dp == 0 && b.pr.bytes_tp > 0);
}
END_TEST

/* 64 -> 256 -> 10, batch 32: small enough to plan in no time */
static const char two_fc[] = "name: two\ninput: [64]\nlayers:\n"
                             "  - {type: fc, name: fc1, units: 256, activation: relu}\n"
                             "  - {type: fc, name: fc2, units: 10}\n"
                             "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 32}\n";

/* Ranks that outnumber cores (2 ranks, 1 core): a pipeline's two stages share the core and take
 * turns, so its compute slows by the demand for core time (less than the ratio: the bubble);
 * replicas or tensor shards compute at once and slow by the ratio times the time-slicing
 * penalty. */
START_TEST(test_oversubscribed)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, two_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 2;
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine roomy, shared;
        dt_machine_from(&roomy, &cs, 2, 1);
        cs.cores_per_node = 1;
        dt_machine_from(&shared, &cs, 2, 1);
        NEAR(dt_machine_share(&shared), 2.0);
        dt_candidate c[64];
        int n = dt_plan_search(p, &roomy, 2, c, 64), pipes = 0, others = 0;
        ck_assert_int_ge(n, 2);
        const double full = 2.0 * (1.0 + DT_PLAN_OVERSUB_PENALTY);
        for (int i = 0; i < n; i++) {
                dt_prediction a, b;
                ck_assert_int_eq(dt_plan_predict(p, &roomy, &c[i].L, &a), 0);
                ck_assert_int_eq(dt_plan_predict(p, &shared, &c[i].L, &b), 0);
                ck_assert(b.step > a.step);
                if (c[i].L.grid[1] > 1 && c[i].L.grid[2] == 1) {
                        /* the layers slow by less than the ratio; on the shared core the compute
                         * also holds the stages' messages (alpha a side, the receiver's copy) */
                        int mi = c[i].L.micro, bm = (32 + mi - 1) / mi;
                        double msgs = mi * (2 * shared.intra.alpha + 4.0 * bm * 256 * shared.intra.beta);
                        ck_assert_msg(b.compute >= a.compute && b.compute < a.compute * full + msgs + 1e-9,
                                      "%g %g %g", b.compute, a.compute * full, msgs);
                        pipes++;
                } else {
                        NEAR(b.compute, a.compute * full);
                        others++;
                }
        }
        ck_assert(pipes > 0 && others > 0);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* A pipeline whose stages share a core: their turn-taking is measured once, as processes pinned
 * to one core (a slowdown of at least 1 and nothing absurd), and served from the file cache
 * afterwards; its replicas, sharing cores, sum their stages' gradients one after another (where
 * each stage has its own core they sum at once and the slowest counts). */
START_TEST(test_turns)
{
        char dir[] = "/tmp/dtrain-test-turns-XXXXXX";
        temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, two_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_layout L = { .grid = { 2, 2, 1 }, .first = { 0, 1, 2 }, .micro = 2, .sched = DT_SCHEDULE_1F1B };
        double f[2];
        for (int k = 0; k < 2; k++) {   /* measured, then from the file */
                dt_planner *p = dt_planner_new(&g, &cs, 1, 1);
                dt_graph sg[2], lg;
                const dt_graph *gs[2];
                for (int st = 0; st < 2; st++) {
                        ck_assert_int_eq(dt_plan_stage_graphs(p, &L, st, &sg[st], &lg), 0);
                        gs[st] = &sg[st];
                }
                f[k] = dt_prof_turns(&p->pf, gs, 2, 2, 8);
                ck_assert_msg(f[k] >= 1.0 && f[k] < 10.0, "turns %g", f[k]);
                if (k == 0) NEAR(dt_prof_turns(&p->pf, gs, 2, 2, 8), f[0]);     /* from memory */
                for (int st = 0; st < 2; st++) dt_graph_free(&sg[st]);
                dt_planner_free(p);
        }
        ck_assert_msg(fabs(f[1] - f[0]) <= 1e-8 * f[0], "%.12g from the file, %.12g measured", f[1], f[0]);
        drop_cache(dir);

        /* the gradient sums: fc1 has 64 x 256 + 256 parameters, fc2 256 x 10 + 10 */
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        cs.ranks_per_node = 4;
        cs.cores_per_node = 2;
        dt_machine shared, roomy;
        dt_machine_from(&shared, &cs, 4, 1);
        cs.cores_per_node = 4;
        dt_machine_from(&roomy, &cs, 4, 1);
        dt_prediction a, b;
        ck_assert_int_eq(dt_plan_predict(p, &shared, &L, &a), 0);
        ck_assert_int_eq(dt_plan_predict(p, &roomy, &L, &b), 0);
        double s0 = dt_net_allreduce(&shared.intra, 2, 4.0 * 16640), s1 = dt_net_allreduce(&shared.intra, 2, 4.0 * 2570);
        NEAR(a.dp, s0 + s1);
        NEAR(b.dp, fmax(s0, s1));
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* A shape the model holds several times is measured once per instance and stored as their median;
 * every instance is costed by what is stored, so searching twice gives the same step. */
START_TEST(test_repeated_shapes)
{
        char dir[] = "/tmp/dtrain-test-rep-XXXXXX";
        temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, "name: rep\ninput: [128]\nlayers:\n"
                     "  - {type: fc, name: fc1, units: 128, activation: relu}\n"
                     "  - {type: fc, name: fc2, units: 128, activation: relu}\n"
                     "  - {type: fc, name: fc3, units: 128, activation: relu}\n"
                     "  - {type: fc, name: fc4, units: 10}\n"
                     "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 64}\n");
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_planner *p = dt_planner_new(&g, &cs, 1, 1);
        dt_layer_cost c[4];
        dt_prof_graph(&p->pf, &g, 32, c);
        /* fc2 and fc3 are the same shape (fc1 is not: it makes no input gradient) */
        ck_assert(c[1].f == c[2].f && c[1].bi == c[2].bi && c[1].bw == c[2].bw);
        dt_machine m;
        dt_machine_from(&m, &cs, 1, 1);
        dt_candidate a, b;
        ck_assert_int_eq(dt_plan_search(p, &m, 1, &a, 1), 1);
        ck_assert_int_eq(dt_plan_search(p, &m, 1, &b, 1), 1);
        ck_assert(a.pr.step == b.pr.step);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        drop_cache(dir);
}
END_TEST

/* When no layout fits the memory, the one needing least comes first and the reason says so. */
START_TEST(test_none_fits)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, two_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        m.mem_bytes = 1024;
        dt_candidate c[64];
        int n = dt_plan_search(p, &m, 2, c, 64);
        ck_assert_int_ge(n, 2);
        for (int i = 0; i < n; i++) {
                ck_assert(!c[i].pr.fits);
                ck_assert(c[i].pr.mem >= c[0].pr.mem);
        }
        char why[512];
        dt_plan_why(&c[0], &c[1], why, sizeof why);
        ck_assert_msg(strstr(why, "no layout fits") && strstr(why, "least memory"), "%s", why);
        dt_plan_why(&c[0], NULL, why, sizeof why);
        ck_assert_msg(strstr(why, "no layout fits") != NULL, "%s", why);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

START_TEST(test_search_narrow)
{
        /* 340 parameters, 4096 samples, 10 GB/s: halving the batch beats any split, whose
         * collectives move activations of all 4096 samples: data 2 */
        dt_candidate b = best_of("name: narrow\ninput: [16]\nlayers:\n"
                                 "  - {type: fc, name: fc1, units: 16, activation: relu}\n"
                                 "  - {type: fc, name: fc2, units: 4}\n"
                                 "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 4096}\n",
                                 1, 10);
        ck_assert_int_eq(b.L.grid[0], 2);
        ck_assert_int_eq(b.L.grid[1], 1);
        ck_assert_int_eq(b.L.grid[2], 1);
}
END_TEST

/* A pipeline over a 1 Gbit/s link whose messages (16 samples x 4096 floats, 256 KiB) pass the
 * eager limit: the rest of each waits for the receiver's answer, so the step can only be slower
 * than with every message sent at once (eager_kb 0, or a limit above the message, alike). */
START_TEST(test_eager)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, "name: cut\ninput: [64]\nlayers:\n"
                     "  - {type: fc, name: fc1, units: 4096, activation: relu}\n"
                     "  - {type: fc, name: fc2, units: 10}\n"
                     "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 32}\n");
        dt_layout L = { .grid = { 1, 2, 1 }, .first = { 0, 1, 2 }, .micro = 2, .sched = DT_SCHEDULE_1F1B };
        double step[3];
        const double eager[3] = { 64, 0, 1024 };
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.latency_us = 10;
        cs.bandwidth_gbs = 0.125;
        cs.ranks_per_node = 1;
        cs.cores_per_node = 1;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        for (int k = 0; k < 3; k++) {   /* the machine carries the limit */
                cs.eager_kb = eager[k];
                dt_machine m;
                dt_machine_from(&m, &cs, 2, 1);
                dt_prediction pr;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &pr), 0);
                step[k] = pr.step;
        }
        dt_planner_free(p);
        NEAR(step[1], step[2]);
        /* each of the 4 messages waits at least the answer's 10 us more */
        ck_assert_msg(step[0] >= step[1] + 4 * 10e-6, "eager 64 KiB %.9g s, at once %.9g s", step[0], step[1]);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("plan");
        TCase *t = tcase_create("plan");
        tcase_set_timeout(t, 120);
        tcase_add_test(t, test_formulas);
        tcase_add_test(t, test_search_wide);
        tcase_add_test(t, test_search_narrow);
        tcase_add_test(t, test_oversubscribed);
        tcase_add_test(t, test_turns);
        tcase_add_test(t, test_eager);
        tcase_add_test(t, test_repeated_shapes);
        tcase_add_test(t, test_none_fits);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
