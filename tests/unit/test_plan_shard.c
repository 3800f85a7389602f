/* tests/unit/test_plan_shard.c - what the planner's data-parallel step with shard stages rests on:
 * sums and all-gathers priced by whether their buckets stay in the caches, the update past them,
 * and dtrain plan --data's pinned data degree (FLOP-modelled costs: no load dependence). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan/plan.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "graph/graph.h"
#include "spec_fixture.h"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-12 + 1e-9 * fabs(b), "%.12g != %.12g", (double)(a), (double)(b))

/* A sum of buckets that stay in the caches costs gamma_near a byte, one from memory gamma, log2
 * between: mlp's 0.94 MB bucket took 0.135-0.15 ms over 2 ranks, the 2.4 copies a byte that an
 * 80 MB one costs would be 0.33 ms. The machine measures where its caches end. */
START_TEST(test_cache_sum)
{
        double M = 1048576.0;
        dt_link l = { .alpha = 4e-6, .beta = 1e-10, .gamma = 2.4e-10, .gamma_near = 0.35e-10, .near = 16 * M,
                      .far = 64 * M };
        /* 2 ranks: recursive doubling's one round, alpha + n (beta + gamma) */
        NEAR(dt_net_allreduce(&l, 2, 1e6), 4e-6 + 1e6 * (1e-10 + 0.35e-10));
        NEAR(dt_net_allreduce(&l, 2, 128 * M), 4e-6 + 128 * M * (1e-10 + 2.4e-10));
        NEAR(dt_net_allreduce(&l, 2, 32 * M), 4e-6 + 32 * M * (1e-10 + 0.5 * (0.35e-10 + 2.4e-10)));
        l.gamma_near = 0;       /* off: gamma at every size (the network's links) */
        NEAR(dt_net_allreduce(&l, 2, 1e6), 4e-6 + 1e6 * (1e-10 + 2.4e-10));
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_machine m;
        dt_machine_from(&m, &cs, 2, 1);
        ck_assert(m.intra.gamma_near > 0 && m.intra.gamma_near < m.intra.gamma);
        ck_assert(m.intra.near >= 4 * M && m.intra.near < m.intra.far && m.intra.far <= 64 * M);
        ck_assert(m.inter.gamma_near == 0);
        ck_assert(m.stream_slow >= 1.0);
        /* a copy past the caches streams from memory: slower by the copies' ratio */
        m.intra.near = 16 * M;
        m.intra.far = 64 * M;
        m.stream_slow = 2.0;
        NEAR(dt_machine_stream(&m, 4 * M), 1.0);
        NEAR(dt_machine_stream(&m, 32 * M), 1.5);
        NEAR(dt_machine_stream(&m, 80e6), 2.0);
        /* an all-gather in shared memory: the receiver's copy, 2/3 of the sum's work a byte */
        l.gamma_near = 0.35e-10;
        NEAR(dt_net_allgather(&l, 2, 1e6), 4e-6 + 0.5e6 * (1e-10 + 2.0 / 3 * 0.35e-10));
        NEAR(dt_net_allgather(&l, 2, 80e6), 4e-6 + 40e6 * (1e-10 + 2.0 / 3 * 2.4e-10));
}
END_TEST

static const char mlp[] = "name: m\ninput: [64]\nlayers:\n"
                          "  - {type: fc, name: fc1, units: 256, activation: relu}\n"
                          "  - {type: fc, name: fc2, units: 256, activation: relu}\n"
                          "  - {type: fc, name: fc3, units: 10}\n"
                          "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\n"
                          "train: {batch: 256, optimizer: {type: adamw, lr: 0.001}}\n";

/* The layouts found on N ranks with the planner's data degree pinned to pin (0: any). */
static int search_pinned(int N, int pin, dt_candidate *c, int max)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        p->data_pin = pin;
        dt_machine m;
        dt_machine_from(&m, &cs, N, 1);
        int n = dt_plan_search(p, &m, N, c, max);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        return n;
}

/* dtrain plan --data: only layouts of that data degree (-1: all ranks data-parallel), so that the
 * validation can hold the data grid while the shard stage varies */
START_TEST(test_data_pin)
{
        enum { MAX = 512 };
        dt_candidate *c = malloc(MAX * sizeof *c);
        int n = search_pinned(4, 0, c, MAX), other = 0;
        for (int i = 0; i < n; i++) other += c[i].L.grid[0] != 4;
        ck_assert_int_gt(other, 0);
        n = search_pinned(4, -1, c, MAX);
        ck_assert_int_gt(n, 0);
        for (int i = 0; i < n; i++) ck_assert_int_eq(c[i].L.grid[0], 4);
        n = search_pinned(4, 2, c, MAX);
        ck_assert_int_gt(n, 0);
        for (int i = 0; i < n; i++) ck_assert_int_eq(c[i].L.grid[0], 2);
        ck_assert_int_eq(search_pinned(2, 4, c, MAX), 0);
        free(c);
}
END_TEST

/* Shard 2's ring reduce-scatter (parallel/shard.c) as it runs: p - 1 rounds of a part's message and
 * its add; past the caches the add reads the part back from the ring's buffer in memory, a copy's
 * more a byte than the all-reduce's pieces (mlp-4096, 2 ranks: 17.5 ms against ~12.5 for half the
 * all-reduce). The data axis's sum takes it where dt_data_sum says ring. */
START_TEST(test_ring_reduce_scatter)
{
        double M = 1048576.0;
        dt_machine m;
        memset(&m, 0, sizeof m);
        m.copy_beta = 1.3e-10;
        m.ranks_per_node = 4;
        m.intra = (dt_link){ .alpha = 4e-6, .beta = 1e-10, .gamma = 2.4e-10, .gamma_near = 0.35e-10, .near = 16 * M,
                             .far = 64 * M };
        NEAR(dt_net_reduce_scatter(&m, &m.intra, 2, 1e6), 4e-6 + 0.5e6 * (1e-10 + 0.35e-10));
        NEAR(dt_net_reduce_scatter(&m, &m.intra, 2, 128 * M), 4e-6 + 64 * M * (1e-10 + 2.4e-10 + 1.3e-10));
        NEAR(dt_net_reduce_scatter(&m, &m.intra, 4, 32 * M),
             3 * (4e-6 + 8 * M * (1e-10 + 0.5 * (0.35e-10 + 2.4e-10) + 0.5 * 1.3e-10)));
        /* half the all-reduce was the price before: far below the ring's past the caches */
        ck_assert(dt_net_reduce_scatter(&m, &m.intra, 2, 128 * M) > 1.3 * 0.5 * dt_net_allreduce(&m.intra, 2, 128 * M));
        dt_data_sum ring = { &m, 1, 1 }, flat = { &m, 1, 0 };
        double f, t;
        int h = 1;
        NEAR(dt_net_allreduce_data2(&ring, 4, 32 * M, &f, &t, &h), dt_net_reduce_scatter(&m, &m.intra, 4, 32 * M));
        ck_assert_int_eq(h, 0);
        NEAR(dt_net_allreduce_data(&flat, 4, 32 * M), dt_net_allreduce(&m.intra, 4, 32 * M));
}
END_TEST

/* The layout of data 2 (nothing else) at shard stage z, from the search over 2 ranks. */
static dt_layout data2(dt_planner *p, const dt_machine *m, int z)
{
        enum { MAX = 512 };
        dt_candidate *c = malloc(MAX * sizeof *c);
        p->data_pin = -1;
        int n = dt_plan_search(p, m, 2, c, MAX), at = -1;
        for (int i = 0; i < n; i++)
                if (c[i].L.grid[0] == 2 && c[i].L.grid[1] == 1 && c[i].L.grid[2] == 1 && c[i].L.shard == z &&
                    !c[i].L.recompute)
                        at = i;
        ck_assert_msg(at >= 0, "no data 2 layout at shard %d", z);
        dt_layout L = c[at].L;
        free(c);
        return L;
}

/* mlp planned without measuring on 2 ranks of a 2-core node, its buckets past the model */
static dt_planner *two_ranks(dt_model_spec *s, dt_graph *g, dt_machine *m)
{
        dt_fixture_load(s, g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.bucket_mb = 64;
        cs.cores_per_node = 2;
        dt_machine_from(m, &cs, 2, 1);
        return dt_planner_new(g, &cs, 1, 0);
}

/* Below stage 3 the step zeroes the whole gradient (train/stepper.c) while the update's pass covers
 * 1/D of it; the gradients' sum at stage 2 is the ring's, then the parameters' all-gather (one
 * bucket here: bucket_mb past the model). */
START_TEST(test_shard_step_parts)
{
        dt_model_spec s;
        dt_graph g;
        dt_machine m;
        dt_planner *p = two_ranks(&s, &g, &m);
        for (int z = 0; z < DT_PROF_UPDATE_SIZES; z++) p->pf.update_per_param[z] = 3e-9, p->pf.zero_per_param[z] = 1e-9;
        dt_layout L0 = data2(p, &m, 0), L1 = data2(p, &m, 1), L2 = data2(p, &m, 2);
        dt_prediction a, b, c;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L0, &a), 0);
        ck_assert_int_eq(dt_plan_predict(p, &m, &L1, &b), 0);
        ck_assert_int_eq(dt_plan_predict(p, &m, &L2, &c), 0);
        double n = (double)g.nparams;
        NEAR(b.update - a.update, 3e-9 * (n / 2) + 1e-9 * (n - n / 2) - 3e-9 * n);
        NEAR(c.update, b.update);
        NEAR(c.dp, dt_net_reduce_scatter(&m, &m.intra, 2, 4 * n) + dt_net_allgather(&m.intra, 2, 4 * n));
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* partition.micro_batch without stages: the slice's walks in pieces of that size, their activations
 * one piece's; the gradient summed once after the last below shard 3, and at shard 3 (walking layer
 * by layer) every piece's reduce-scattered (stepper.c), its parameters gathered again only where a
 * walk let them go: one bucket (bucket_mb past the model) stays resident, many do not. */
START_TEST(test_micro_batches)
{
        dt_model_spec s;
        dt_graph g;
        dt_machine m;
        dt_planner *p = two_ranks(&s, &g, &m);
        double n = (double)g.nparams;
        for (int z = 0; z <= 3; z += 3) {
                dt_layout L = data2(p, &m, 0);
                L.shard = z;            /* the search offers shard 3 only where memory asks */
                dt_prediction a, b;
                p->cs.micro_batch = 0;
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &a), 0);
                p->cs.micro_batch = 64;         /* slices of 128: two walks */
                ck_assert_int_eq(dt_plan_predict(p, &m, &L, &b), 0);
                ck_assert_msg(b.mem < a.mem, "shard %d: %g MiB in pieces, %g whole", z, b.mem / 1048576, a.mem / 1048576);
                ck_assert_msg(b.compute > 0.8 * a.compute && b.compute < 1.5 * a.compute, "shard %d: compute %g, %g whole",
                              z, b.compute, a.compute);
                NEAR(b.bytes_dp, a.bytes_dp + (z == 3 ? 4 * n : 0));    /* one more reduce-scatter */
                ck_assert(z == 0 || b.dp > a.dp);
        }
        dt_layout L = data2(p, &m, 0);
        L.shard = 3;
        p->cs.bucket_mb = 0.001;        /* a bucket a layer: fc1 and fc3 let go between walks */
        dt_prediction a, b;
        p->cs.micro_batch = 0;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &a), 0);
        p->cs.micro_batch = 64;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L, &b), 0);
        /* the second forward gathers fc3 again (the first backward kept fc2 and fc1), its backward
         * fc1 (as every backward does: the forward kept fc3 and fc2) */
        NEAR(b.bytes_dp, a.bytes_dp + 4 * n + 4.0 * (256 * 10 + 10 + 64 * 256 + 256));
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* The optimizer step is priced at the profile's own rate for its size: the largest size timed lies
 * past the caches (2^23 parameters, 128 MiB), and a larger step costs that rate a parameter. It is
 * not the rate of a size presumed to fit the caches scaled by the copies' ratio: on a Zen 3 whose
 * 32 MiB L3 2^22's arrays already overflow, that priced mlp-4096's 20M step at 58-67 ms against
 * 19-20 timed. */
START_TEST(test_update_measured_rate)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, mlp);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        for (int z = 0; z < DT_PROF_UPDATE_SIZES; z++) ck_assert(p->pf.update_per_param[z] > 0);
        static const double u[DT_PROF_UPDATE_SIZES] = { 4e-9, 3e-9, 2e-9, 1.5e-9 };
        for (int z = 0; z < DT_PROF_UPDATE_SIZES; z++) p->pf.update_per_param[z] = u[z], p->pf.zero_per_param[z] = 0;
        NEAR(dt_prof_update(&p->pf, 20e6), 1.5e-9 * 20e6);     /* past 2^23: its rate */
        NEAR(dt_prof_update(&p->pf, exp2(22.5)), 0.5 * (2e-9 + 1.5e-9) * exp2(22.5));      /* log2 between */
        dt_machine m, slow;
        dt_machine_from(&m, &cs, 2, 1);
        slow = m;       /* copies from memory 3x slower, and every size past the caches */
        slow.stream_slow = 3.0;
        slow.intra.near = 1024;
        slow.intra.far = 4096;
        dt_layout L0 = data2(p, &m, 0);
        dt_prediction a, b;
        ck_assert_int_eq(dt_plan_predict(p, &m, &L0, &a), 0);
        ck_assert_int_eq(dt_plan_predict(p, &slow, &L0, &b), 0);
        NEAR(b.update - b.data, a.update - a.data);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

static Suite *shard_suite(void)
{
        Suite *s = suite_create("plan_shard");
        TCase *t = tcase_create("core");
        tcase_add_test(t, test_cache_sum);
        tcase_add_test(t, test_data_pin);
        tcase_add_test(t, test_ring_reduce_scatter);
        tcase_add_test(t, test_shard_step_parts);
        tcase_add_test(t, test_update_measured_rate);
        tcase_add_test(t, test_micro_batches);
        tcase_set_timeout(t, 60);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(shard_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
