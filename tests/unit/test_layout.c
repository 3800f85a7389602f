/* tests/unit/test_layout.c - the layout (parallel/layout.h) without MPI: the rank formula both ways
 * for several grids, the plain layout a cluster spec names equal to the planner's layout that wrote
 * those keys (so strategy auto's layout runs as the same keys would), and a 1 x 1 x 1 grid's gather
 * and cut of the whole model as the identity. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "data/data.h"
#include "graph/graph.h"
#include "spec_fixture.h"
#include "parallel/layout.h"
#include "plan/plan.h"

START_TEST(test_rank_formula)
{
        static const int grids[][3] = { { 1, 1, 1 }, { 4, 1, 1 }, { 1, 4, 1 }, { 1, 1, 4 }, { 2, 2, 2 },
                                        { 3, 2, 4 }, { 2, 5, 3 }, { 1, 3, 2 } };
        for (size_t k = 0; k < sizeof grids / sizeof grids[0]; k++) {
                const int *gr = grids[k];
                int N = gr[0] * gr[1] * gr[2];
                char *seen = calloc((size_t)N, 1);
                for (int d = 0; d < gr[0]; d++)
                        for (int p = 0; p < gr[1]; p++)
                                for (int t = 0; t < gr[2]; t++) {
                                        dt_grid_pos at = { d, p, t };
                                        int r = dt_layout_rank(gr, at);
                                        ck_assert_int_eq(r, (d * gr[1] + p) * gr[2] + t);      /* tensor fastest */
                                        ck_assert(r >= 0 && r < N && !seen[r]);
                                        seen[r] = 1;
                                        dt_grid_pos back = dt_layout_pos(gr, r);
                                        ck_assert_int_eq(back.replica, d);
                                        ck_assert_int_eq(back.stage, p);
                                        ck_assert_int_eq(back.shard, t);
                                }
                free(seen);
                ck_assert_int_eq(dt_layout_stride(gr, DT_AXIS_TENSOR), 1);
                ck_assert_int_eq(dt_layout_stride(gr, DT_AXIS_PIPE), gr[2]);
                ck_assert_int_eq(dt_layout_stride(gr, DT_AXIS_DATA), gr[1] * gr[2]);
        }
        /* micro-batches: the layout's count, at most the smallest replica slice, 1 without stages */
        dt_layout L = { .grid = { 2, 2, 1 }, .micro = 8 };
        ck_assert_int_eq(dt_layout_micro(&L, 64), 8);
        ck_assert_int_eq(dt_layout_micro(&L, 9), 4);
        ck_assert_int_eq(dt_layout_micro(&L, 1), 1);
        L.grid[1] = 1;
        ck_assert_int_eq(dt_layout_micro(&L, 64), 1);
}
END_TEST

static const char four_fc[] = "name: four\ninput: [64]\nlayers:\n"
                              "  - {type: fc, name: fc1, units: 256, activation: relu}\n"
                              "  - {type: dropout, name: drop1, rate: 0.1}\n"
                              "  - {type: fc, name: fc2, units: 128, activation: relu}\n"
                              "  - {type: fc, name: fc3, units: 256, activation: relu}\n"
                              "  - {type: fc, name: fc4, units: 10}\n"
                              "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 32}\n";

/* Every layout the planner tries on 4 and 8 ranks, written as cluster keys (what strategy auto
 * records and `dtrain plan` prints) and read back: the same grid, cut, micro-batches, schedule and
 * splits, so building the run from the planner's layout is building it from those keys. */
START_TEST(test_spec_equals_planner)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, four_fc);
        dt_cluster_spec pcs;
        dt_cluster_spec_init(&pcs);
        pcs.ranks_per_node = pcs.cores_per_node = 8;
        dt_planner *p = dt_planner_new(&g, &pcs, 1, 0);
        int pipelines = 0, tensors = 0, chunked = 0;
        for (int N = 4; N <= 8; N += 4) {
                dt_machine m;
                dt_machine_from(&m, &pcs, N, 1);
                enum { MAXC = 256 };
                dt_candidate *c = malloc(MAXC * sizeof *c);
                int n = dt_plan_search(p, &m, N, c, MAXC);
                ck_assert_int_gt(n, 0);
                for (int i = 0; i < n; i++) {
                        const dt_layout *L = &c[i].L;
                        dt_cluster_spec cs;
                        dt_cluster_spec_init(&cs);
                        dt_layout_apply_graph(&g, L, &cs);
                        dt_layout R;
                        dt_diag d = { 0 };
                        ck_assert_int_eq(dt_layout_from_spec(&cs, &g, N, &R, &d), 0);
                        ck_assert_int_eq(d.n, 0);
                        dt_diag_free(&d);
                        ck_assert_int_eq(memcmp(R.grid, L->grid, sizeof R.grid), 0);
                        int P = L->grid[DT_AXIS_PIPE], T = L->grid[DT_AXIS_TENSOR];
                        /* with chunks (interleaved, zb-v) every piece's cut and the chunk count too */
                        ck_assert_int_eq(dt_layout_chunks(&R), dt_layout_chunks(L));
                        ck_assert_int_eq(memcmp(R.first, L->first, (size_t)(dt_layout_pieces(L) + 1) * sizeof R.first[0]), 0);
                        chunked += dt_layout_chunks(L) > 1;
                        ck_assert_int_eq(dt_layout_micro(&R, s.train.batch), dt_layout_micro(L, s.train.batch));
                        if (P > 1) ck_assert_int_eq(R.sched, L->sched);
                        for (int k = 0; k < g.n && T > 1; k++) {
                                ck_assert_int_eq(R.split[k], L->split[k]);
                                ck_assert_int_eq(R.gather[k], L->gather[k]);
                        }
                        pipelines += P > 1;
                        tensors += T > 1;
                }
                free(c);
        }
        ck_assert_int_gt(pipelines, 0);         /* both kinds were compared */
        ck_assert_int_gt(tensors, 0);
        ck_assert_int_gt(chunked, 0);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* A cut named in the cluster spec and splits named there come back as the plain layout. */
START_TEST(test_spec_keys)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, four_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.strategy = DT_PART_MODEL;
        cs.grid_pipeline = 2;
        cs.grid_tensor = 2;
        cs.set |= DT_CS_STRATEGY | DT_CS_GPIPE | DT_CS_GTENSOR;
        snprintf(cs.cuts.name[0], sizeof cs.cuts.name[0], "fc3");
        cs.cuts.n = 1;
        cs.micro_batches = 4;
        dt_layout L;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_layout_from_spec(&cs, &g, 4, &L, &d), 0);
        ck_assert_int_eq(L.grid[0], 1);
        ck_assert_int_eq(L.grid[1], 2);
        ck_assert_int_eq(L.grid[2], 2);
        ck_assert_int_eq(L.first[0], 0);
        ck_assert_int_eq(L.first[1], 3);
        ck_assert_int_eq(L.first[2], 5);
        ck_assert_int_eq(L.micro, 4);
        /* stage 0: fc1 column, drop1 passes the shard, fc2 row; stage 1: fc3 column with fc4 its row */
        ck_assert_int_eq(L.split[0], DT_SPLIT_COLUMN);
        ck_assert_int_eq(L.split[1], DT_SPLIT_PASS);
        ck_assert_int_eq(L.split[2], DT_SPLIT_ROW);
        ck_assert_int_eq(L.split[3], DT_SPLIT_COLUMN);
        ck_assert_int_eq(L.split[4], DT_SPLIT_ROW);
        /* the rank graphs: stage 1 of the cut, and shard 1's half of fc3 */
        dt_graph sg, lg;
        dt_layout_stage_graph(&L, &g, 1, &sg);
        ck_assert_int_eq(sg.n, 2);
        ck_assert_int_eq(sg.first, 3);
        ck_assert(sg.input_grad);
        dt_tp tp = { .size = 2, .rank = 1 };
        dt_layout_shard_graph(&L, &sg, &tp, &lg);
        ck_assert_int_eq(lg.layers[0].out.d[0], 128);
        ck_assert_int_eq(lg.layers[0].place.shard, 1);
        dt_graph_free(&lg);
        dt_graph_free(&sg);
        dt_diag_free(&d);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* One rank holding the whole model: the gather is its own buffers and the cut puts them back. */
START_TEST(test_whole_identity)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, "name: bn\ninput: [2, 6, 6]\nlayers:\n"
                     "  - {type: conv, name: conv1, filters: 4, kernel: 3, padding: same}\n"
                     "  - {type: batchnorm, name: bn1, activation: relu}\n"
                     "  - {type: flatten, name: flat}\n"
                     "  - {type: fc, name: fc1, units: 5}\n"
                     "loss: mse\ndata:\n  train: {format: synthetic, n: 8}\ntrain: {batch: 4}\n");
        dt_comm world;
        memset(&world, 0, sizeof world);        /* one process: a 1 x 1 x 1 grid never talks */
        dt_layout one = { .grid = { 1, 1, 1 }, .micro = 1, .first = { 0, g.n } };
        dt_grid gr;
        dt_grid_make(&gr, &one, &world, &g, 4);
        ck_assert(!dt_grid_parts(&gr) && !dt_grid_pipelined(&gr));
        ck_assert(dt_grid_feeds(&gr) && dt_grid_scores(&gr) && dt_grid_counts(&gr));
        ck_assert_int_eq(dt_grid_load_parts(&gr), DT_LOAD_INPUTS | DT_LOAD_LABELS);
        ck_assert_ptr_eq(dt_grid_model(&gr, &g), &g);
        int lo, hi;
        dt_grid_slice(&gr, 10, &lo, &hi);               /* one replica: the whole batch */
        ck_assert(dt_grid_replicas(&gr) == 1 && lo == 0 && hi == 10);
        ck_assert_int_eq(dt_grid_pipeline(&gr), 0);
        dt_backend *be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc(&g, be, 4), 0);
        dt_grid_init_params(&gr, &g, 7);
        ck_assert_int_gt(g.nbuffers, 0);
        size_t np = g.nparams, nb = g.nbuffers;
        float *m = malloc(np * sizeof *m), *v = malloc(np * sizeof *v);
        for (size_t i = 0; i < np; i++) m[i] = (float)i, v[i] = 1.0f / (float)(i + 1);
        for (size_t i = 0; i < nb; i++) g.buffers[i] = 0.5f + (float)i;
        float *mine[4] = { g.params, g.buffers, m, v }, *all[4], *orig[4];
        size_t n[4] = { np, nb, np, np };
        for (int k = 0; k < 4; k++) {
                all[k] = calloc(n[k], sizeof(float));
                orig[k] = malloc(n[k] * sizeof(float));
                memcpy(orig[k], mine[k], n[k] * sizeof(float));
        }
        ck_assert_int_eq(dt_grid_gather(&gr, &g, 4, mine, all), 1);
        for (int k = 0; k < 4; k++) {
                ck_assert_int_eq(memcmp(all[k], orig[k], n[k] * sizeof(float)), 0);
                memset(mine[k], 0, n[k] * sizeof(float));
        }
        dt_grid_take(&gr, &g, 4, all, mine);
        for (int k = 0; k < 4; k++) {
                ck_assert_int_eq(memcmp(mine[k], orig[k], n[k] * sizeof(float)), 0);
                free(all[k]);
                free(orig[k]);
        }
        /* the norm's part: every gradient once, no axis to sum over */
        for (size_t i = 0; i < np; i++) g.grads[i] = 2.0f;
        double ss = dt_grid_sumsq(&gr, &g, g.grads);
        dt_grid_sum_stages(&gr, &ss, "test");
        ck_assert(ss == 4.0 * (double)np);
        free(m);
        free(v);
        dt_graph_free(&g);
        dt_grid_free(&gr);
        dt_backend_free(be);
        dt_model_spec_free(&s);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("layout");
        TCase *t = tcase_create("layout");
        tcase_set_timeout(t, 120);
        tcase_add_test(t, test_rank_formula);
        tcase_add_test(t, test_spec_equals_planner);
        tcase_add_test(t, test_spec_keys);
        tcase_add_test(t, test_whole_identity);
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
