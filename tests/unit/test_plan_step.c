/* tests/unit/test_plan_step.c - the planner's step beyond layers, sums and update: the slice's data,
 * which the loader thread prepares on the rank's own core, and the loss, both timed by the profile
 * (plan/dataprof.c) and priced into the step, and the neighbour cores' slowdown the step's compute
 * and its optimizer step each take (FLOP-modelled layers: no load dependence), and both factors
 * kept across starts. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "plan/plan.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan/profile_int.h"
#include "graph/graph.h"
#include "data/data.h"
#include "spec_fixture.h"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-12 + 1e-9 * fabs(b), "%.12g != %.12g", (double)(a), (double)(b))

static const char mlp[] = "name: m\ninput: [784]\nlayers:\n"
                          "  - {type: fc, name: fc1, units: 64, activation: relu}\n"
                          "  - {type: fc, name: fc2, units: 10}\n"
                          "loss: softmax_cross_entropy\n"
                          "data:\n  train: {format: synthetic, n: 4096}\n  classes: 10\n"
                          "train: {batch: 128, optimizer: {type: adam, lr: 0.001}}\n";

/* The layout of data D alone, from the search over D ranks. */
static dt_layout data_only(dt_planner *p, const dt_machine *m, int D)
{
        enum { MAX = 512 };
        dt_candidate *c = malloc(MAX * sizeof *c);
        p->data_pin = -1;
        int n = dt_plan_search(p, m, D, c, MAX), at = -1;
        for (int i = 0; i < n && at < 0; i++)
                if (c[i].L.grid[0] == D && c[i].L.grid[1] == 1 && c[i].L.grid[2] == 1 && !c[i].L.shard)
                        at = i;
        ck_assert_msg(at >= 0, "no data %d layout", D);
        dt_layout L = c[at].L;
        free(c);
        return L;
}

/* The profile times the slice's data on the model's own dataset (the loader's preparation and the
 * copy into the input) and its loss: both grow with the slice. */
START_TEST(test_data_timed)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        ck_assert(p->pf.loss_c > 0);
        ck_assert(dt_prof_loss(&p->pf, 128) > dt_prof_loss(&p->pf, 32));
        NEAR(dt_prof_feed(&p->pf, 128), 0.0);     /* no data known */
        dt_dataset ds;
        memset(&ds, 0, sizeof ds);
        dt_load_opts lo = { .part = 0, .parts = 1, .scan_max = 1 };
        char msg[512];
        ck_assert_msg(dt_dataset_open(&ds, &s.data.train, &s.data, &s.input, 10, &lo, msg, sizeof msg) == 0, "%s", msg);
        dt_planner_time_data(p, &ds);
        ck_assert(p->pf.feed_c > 0);
        ck_assert(dt_prof_feed(&p->pf, 128) > dt_prof_feed(&p->pf, 32));
        /* well below a millisecond a sample: 784 floats each */
        ck_assert(dt_prof_feed(&p->pf, 128) < 128e-3);
        dt_planner_time_data(p, NULL);
        NEAR(dt_prof_feed(&p->pf, 128), 0.0);
        dt_dataset_free(&ds);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* The step holds its slice's data and loss (1 rank: the batch; data 2: half of it), in the update's
 * place and shown apart (pr->data); mlp on 2 ranks spent 68 us of its 0.97 ms step in the loader
 * thread on its core and 11 us in the loss, which the planner had as 51 us of both by a constant. */
START_TEST(test_step_data)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        for (int N = 1; N <= 2; N++) {
                dt_machine m;
                dt_machine_from(&m, &cs, N, 1);
                dt_layout L = data_only(p, &m, N);
                dt_prediction a, b;
                p->pf.feed_a = p->pf.feed_c = p->pf.loss_a = p->pf.loss_c = 0;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &a), 0);
                NEAR(a.data, 0.0);
                p->pf.feed_a = 5e-6, p->pf.feed_c = 1e-6, p->pf.loss_a = 1e-6, p->pf.loss_c = 1e-7;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &b), 0);
                double slice = 128.0 / N, want = 5e-6 + 1e-6 * slice + 1e-6 + 1e-7 * slice;
                NEAR(b.data, want);
                NEAR(b.step - a.step, want);
                NEAR(b.update, a.update);
        }
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* Busy cores slow each other while they compute: data-parallel replicas compute in step, so the
 * whole measured factor applies to their compute however long their sums take. The step's average
 * of busy cores, rounded, turned it off where the sums were a quarter of the step or more, and put
 * mlp's prediction 6% apart between two profiles whose average fell either side of 1.5. */
START_TEST(test_neighbours_in_step)
{
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;  /* one core: no neighbours */
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.cores_per_node = 2;
        cs.intra_bandwidth_gbs = 0.05;  /* sums far longer than the compute */
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        dt_layout L = data_only(p, &m, 2);
        dt_prediction a, b;
        p->pf.neigh_busy = 2;
        p->pf.neigh = 1.0;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &a), 0);
        /* under 1.5 busy cores on the step's average */
        ck_assert_msg(2 * (a.compute + a.update + a.data) < 1.5 * a.step, "compute %g update %g data %g step %g",
                      a.compute, a.update, a.data, a.step);
        NEAR(a.busy, 2.0);
        p->pf.neigh = 1.2;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &b), 0);
        NEAR(b.compute, 1.2 * a.compute);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* mlp, and a measuring planner over a file cache of its own (dir: a mkdtemp template) */
static dt_planner *own_cache_planner(char *dir, dt_model_spec *s, dt_graph *g, dt_cluster_spec *cs)
{
        dt_fixture_temp_cache(dir);
        dt_fixture_load(s, g, mlp);
        dt_cluster_spec_init(cs);
        return dt_planner_new(g, cs, 1, 1);
}

/* that cache's file, open to append lines to */
static FILE *cache_append(const char *dir)
{
        char path[96];
        snprintf(path, sizeof path, "%s/dtrain/profile.tsv", dir);
        FILE *f = fopen(path, "a");
        ck_assert_ptr_nonnull(f);
        return f;
}

/* Three kept starts that read 3 in the cache against this start's own factor (key, factor: the
 * compute's or the optimizer step's). */
static void kept_outvote(uint64_t (*key_of)(const dt_prof *, int), double (*factor)(dt_prof *, double))
{
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;  /* one core: no neighbours */
        char dir[] = "/tmp/dtrain-neigh-XXXXXX";
        dt_model_spec s;
        dt_graph g;
        dt_cluster_spec cs;
        dt_planner *p = own_cache_planner(dir, &s, &g, &cs);
        double first = factor(&p->pf, 2);
        ck_assert(first >= 1.0);
        uint64_t key = key_of(&p->pf, p->pf.neigh_busy), machine = p->pf.machine;
        dt_planner_free(p);
        FILE *f = cache_append(dir);
        for (int k = 0; k < 3; k++)
                fprintf(f, "%llx %llx 3 0 0 0\n", (unsigned long long)machine, (unsigned long long)key);
        fclose(f);
        p = dt_planner_new(&g, &cs, 1, 1);
        double again = factor(&p->pf, 2);
        ck_assert_msg(fabs(again - (p->pf.neigh_busy == 2 ? 3.0 : 1.0 + 2.0 / (p->pf.neigh_busy - 1))) < 1e-9,
                      "factor %g: this start's own, not the median of the kept ones", again);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        dt_fixture_drop_cache(dir);
}

/* The neighbours' factor is kept a line a start in the file cache and used as the median of the
 * last few: one start's five pairs of timings read 0.75 to 1.87 on a virtual
 * machine, and their median moved cnn-bn's predicted 2-rank step from 42 to 85 ms between two starts
 * a minute apart. Three earlier starts that read 3 outvote this one's own factor. */
START_TEST(test_neighbours_kept)
{
        kept_outvote(dt_prof_neigh_key, dt_prof_neighbours);
}
END_TEST

/* The optimizer step's factor is kept as the compute's is. */
START_TEST(test_update_neighbours_kept)
{
        kept_outvote(dt_prof_neigh_mem_key, dt_prof_neighbours_mem);
}
END_TEST

/* The optimizer step takes the factor busy neighbours slow a memory-bound pass by, not the
 * compute's: every replica steps at once after the same sum and they share the memory's bandwidth.
 * On a 2-vCPU Zen 3 the step of mlp-4096's 20M parameters read 1.54-1.61x slower beside a stepping
 * neighbour while its layers read 1.03-1.16x, and at the compute's factor its 2-rank step was
 * predicted 11% short. */
START_TEST(test_update_neighbours)
{
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;  /* one core: no neighbours */
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        dt_layout L = data_only(p, &m, 2);
        dt_prediction pr[3];
        p->pf.neigh_busy = 2;
        p->pf.neigh = 1.2;
        for (int k = 0; k < 3; k++) {
                p->pf.neigh_mem = 1.0 + k;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &pr[k]), 0);
        }
        ck_assert(pr[1].update > pr[0].update);
        NEAR(pr[2].update - pr[1].update, pr[1].update - pr[0].update);        /* in proportion */
        NEAR(pr[1].compute, pr[0].compute);
        NEAR(pr[1].step - pr[0].step, pr[1].update - pr[0].update);
        /* the compute's factor no longer moves it */
        p->pf.neigh = 1.5;
        dt_prediction q;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &q), 0);
        NEAR(q.update, pr[2].update);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* Costs are the median of a shape's kept timings as timed: neither scaled by the speed reference
 * stored beside them (here a third of the reference now, which the old scaling tripled every cost
 * by) nor by the model's layers timed at this start (pf->drift, reported only), and of an even
 * count the mean of the middle two (the lower median took the faster, and the fast spells of a
 * virtual machine pulled every prediction down). Timed once, then 2x and twice 3x: (2 + 3) / 2. */
START_TEST(test_costs_as_timed)
{
        char dir[] = "/tmp/dtrain-median-XXXXXX";
        dt_model_spec s;
        dt_graph g;
        dt_cluster_spec cs;
        dt_planner *p = own_cache_planner(dir, &s, &g, &cs);
        int b = p->pf.ref_b;
        dt_layer_cost *c = calloc((size_t)g.n, sizeof *c), *t = calloc((size_t)g.n, sizeof *t);
        dt_prof_graph(&p->pf, &g, b, t);        /* timed and written to the file */
        FILE *f = cache_append(dir);
        static const double times[] = { 2, 3, 3 };
        for (int k = 0; k < 3; k++)
                for (int i = 0; i < g.n; i++)
                        fprintf(f, "%llx %llx %.9g %.9g %.9g %.9g\n", (unsigned long long)p->pf.machine,
                                (unsigned long long)dt_prof_gkey(&g, i, b), times[k] * t[i].f, times[k] * t[i].bi,
                                times[k] * t[i].bw, p->pf.ref_now / 3);
        fclose(f);
        dt_planner_free(p);
        p = dt_planner_new(&g, &cs, 1, 1);
        ck_assert_msg(p->pf.drift > 0, "drift %g: not reported", p->pf.drift);
        dt_prof_graph(&p->pf, &g, b, c);
        for (int i = 0; i < g.n; i++) {
                ck_assert_msg(fabs(c[i].f - 2.5 * t[i].f) <= 1e-6 * t[i].f + 1e-12, "layer %d forward %g s, timed %g",
                              i, c[i].f, t[i].f);
                ck_assert_msg(fabs(c[i].bi - 2.5 * t[i].bi) <= 1e-6 * t[i].bi + 1e-12, "layer %d backward %g s, timed %g",
                              i, c[i].bi, t[i].bi);
        }
        dt_planner_free(p);
        free(c);
        free(t);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        dt_fixture_drop_cache(dir);
}
END_TEST

static Suite *step_suite(void)
{
        Suite *s = suite_create("plan_step");
        TCase *t = tcase_create("core");
        tcase_add_test(t, test_data_timed);
        tcase_add_test(t, test_step_data);
        tcase_add_test(t, test_neighbours_in_step);
        tcase_add_test(t, test_neighbours_kept);
        tcase_add_test(t, test_update_neighbours_kept);
        tcase_add_test(t, test_update_neighbours);
        tcase_add_test(t, test_costs_as_timed);
        tcase_set_timeout(t, 60);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(step_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
