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
#include "plan_cmd.h"
#include "graph/graph.h"
#include "spec_fixture.h"

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


/* The best layout of the model on two ranks, one per node, on a network of lat us and gbs GB/s. */
static dt_candidate best_of(const char *body, double lat, double gbs)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, body);
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

/* The data axis's sum as dp.c and hier.c run it (issue 28): the flat path is libnbc's ring (main.c
 * asks for it), whose 6 rounds over 2 nodes of 2 carry 1.5 buckets across each link each way; the
 * two-level path carries one, both ways at once. Where the user asks libnbc for its binomial tree
 * (the MCA variable at 2) the flat path crosses 3 times. auto takes the two-level path where a
 * node holds several ranks of several nodes, by those costs. */
START_TEST(test_hier_cost)
{
        dt_hier_link intra = { .alpha = 4e-6, .beta = 1.0 / 8e9 }, inter = { .alpha = 50e-6, .beta = 1.0 / 0.125e9 };
        double n = 1e6, flat, two, cross = n * inter.beta;
        unsetenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
        dt_hier_cost(&intra, &inter, 2, 4, n, &flat, &two);
        ck_assert(flat > 1.5 * cross && flat < 1.5 * cross + 1e-3);
        ck_assert(two > cross && two < cross + 1e-3);
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "2", 1);
        dt_hier_cost(&intra, &inter, 2, 4, n, &flat, &two);
        ck_assert(flat > 3 * cross && flat < 3 * cross + 1e-3);
        unsetenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
        /* nodes of 3 and 1: one segment, the whole bucket crosses once each way */
        dt_hier_cost(&intra, &inter, 3, 4, n, &flat, &two);
        ck_assert(two > cross && two < cross + 1e-3);
        /* past the eager limit, in chunks of it: the node steps of one chunk, not of the bucket,
         * beside the crossing (a 1 GB/s node: the bucket's node steps alone would cost 1 ms) */
        dt_hier_link slow = { .alpha = 4e-6, .beta = 1.0 / 1e9 }, eager = inter;
        eager.eager = 65536;
        ck_assert_int_eq(dt_hier_chunks(&eager, 2, 2, n), 8);
        ck_assert_int_eq(dt_hier_chunks(&eager, 3, 2, n), 1);
        ck_assert_int_eq(dt_hier_chunks(&eager, 2, 2, 1e4), 1);
        dt_hier_cost(&slow, &eager, 2, 4, n, &flat, &two);
        ck_assert(two > cross + eager.alpha && two < cross + eager.alpha + 0.2e-3);
        ck_assert(dt_hier_choose(0, 2, 2, &intra, &inter, 4, &n, 1) == 1);
        ck_assert(dt_hier_choose(1, 2, 2, &intra, &inter, 4, &n, 1) == 0);      /* false */
        ck_assert(dt_hier_choose(0, 1, 4, &intra, &inter, 4, &n, 1) == 0);      /* one node */
        ck_assert(dt_hier_choose(0, 4, 1, &intra, &inter, 4, &n, 1) == 0);      /* a rank per node */
        ck_assert(dt_hier_choose(2, 4, 1, &intra, &inter, 4, &n, 1) == 1);      /* true */
        /* the planner: 4 ranks, 2 per node, the same network; data 4's sum predicted each way */
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 2;
        cs.latency_us = 50;
        cs.bandwidth_gbs = 0.125;
        dt_machine m;
        dt_machine_from(&m, &cs, 4, 1);
        dt_data_sum ds = { &m, 1, 0 };
        int hier;
        double t = dt_net_allreduce_data2(&ds, 4, n, &flat, &two, &hier);
        ck_assert(hier == 1 && t == two && two < flat && two > cross && flat > 1.5 * cross);
        m.hierarchical = 1;
        t = dt_net_allreduce_data2(&ds, 4, n, &flat, &two, &hier);
        ck_assert(hier == 0 && t == flat);
}
END_TEST

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
 * penalty, and so do the replicas' gradient sums. */
START_TEST(test_oversubscribed)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, two_fc);
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
        int n = dt_plan_search(p, &roomy, 2, c, 64), pipes = 0, others = 0, sums = 0;
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
                        /* the replicas' gradient sum is their own copying and adding inside MPI,
                         * on the core they share: slowed as their compute */
                        NEAR(b.dp, a.dp * full);
                        others++;
                        sums += a.dp > 0;
                }
        }
        ck_assert(pipes > 0 && others > 0 && sums > 0);
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
        dt_fixture_temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, two_fc);
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
        dt_fixture_drop_cache(dir);

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
        dt_fixture_temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, "name: rep\ninput: [128]\nlayers:\n"
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
        dt_fixture_drop_cache(dir);
}
END_TEST

/* When no layout fits the memory, the one needing least comes first and the reason says so. */
START_TEST(test_none_fits)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, two_fc);
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
        dt_plan_why(NULL, &c[0], &c[1], why, sizeof why);
        ck_assert_msg(strstr(why, "no layout fits") && strstr(why, "least memory"), "%s", why);
        dt_plan_why(NULL, &c[0], NULL, why, sizeof why);
        ck_assert_msg(strstr(why, "no layout fits") != NULL, "%s", why);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* 4 fc layers of 256 at batch 512: activations dominate the memory, so recompute all saves some */
static const char deep_fc[] = "name: deep\ninput: [64]\nlayers:\n"
                              "  - {type: fc, name: fc1, units: 256, activation: relu}\n"
                              "  - {type: fc, name: fc2, units: 256, activation: relu}\n"
                              "  - {type: fc, name: fc3, units: 256, activation: relu}\n"
                              "  - {type: fc, name: fc4, units: 10}\n"
                              "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\n"
                              "train: {batch: 512, optimizer: {type: adamw, lr: 0.001}}\n";

/* The candidates on N ranks under mem bytes per rank. */
static int search_deep_n(dt_cluster_spec *cs, double mem, dt_candidate *c, int max, int N)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, deep_fc);
        dt_planner *p = dt_planner_new(&g, cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, cs, N, 1);
        m.mem_bytes = mem;
        int n = dt_plan_search(p, &m, N, c, max);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        return n;
}

static int search_deep(dt_cluster_spec *cs, double mem, dt_candidate *c, int max)
{
        return search_deep_n(cs, mem, c, max, 2);
}

/* The search tries the shard stages 0-3 (data > 1 only) and recompute all (never with zb-h1 or the V's;
 * with interleaved's chunks) with every grid, keeps the spec's own shard and recompute, ranks a
 * variant that only ties its plain layout behind it, and under a limit only recomputation meets
 * picks it; the chosen one reaches the cluster spec and its YAML; v-half's memory as its lists. */
START_TEST(test_memory_ways)
{
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        enum { MAX = 512 };
        dt_candidate *c = malloc(MAX * sizeof *c);
        int n = search_deep(&cs, 1024, c, MAX);         /* nothing fits: every variant is kept */
        int seen[4][2] = { { 0 } }, rc_il = 0;     /* shard 0-3 x recompute */
        double plain_mem = 1e300, plain_step = 0, rc_mem = 0, rc_step = 0;
        for (int i = 0; i < n; i++) {
                const dt_layout *L = &c[i].L;
                ck_assert(L->grid[0] > 1 || L->shard == 0);
                ck_assert(!((L->sched == DT_SCHEDULE_ZB_H1 || dt_schedule_is_v(L->sched)) && L->recompute));
                if (L->sched == DT_SCHEDULE_INTERLEAVED && L->recompute) rc_il++;
                if (L->grid[0] == 2) {
                        seen[L->shard][L->recompute] = 1;
                        if (L->shard == 0 && !L->recompute) plain_mem = c[i].pr.mem, plain_step = c[i].pr.step;
                        if (L->shard == 0 && L->recompute) rc_mem = c[i].pr.mem, rc_step = c[i].pr.step;
                }
        }
        for (int z = 0; z < 4; z++)
                for (int r = 0; r < 2; r++) ck_assert_msg(seen[z][r], "data 2, shard %d, recompute %d not tried", z, r);
        ck_assert_msg(rc_il > 0, "interleaved with recompute all not tried");   /* per chunk */
        /* recomputation costs the recomputed layers' forward again and saves their activations */
        ck_assert(rc_step > plain_step && rc_mem < plain_mem);
        /* roomy: nothing trades time for memory without being faster beyond a tie than its plain twin */
        n = search_deep(&cs, 1e15, c, MAX);
        ck_assert(c[0].pr.fits && !c[0].L.recompute);
        for (int i = 0; i < n; i++) ck_assert(!c[i].L.recompute);
        /* v-half is tried and planned below zb-v at each micro-batch count from 4: its lists hold 3
         * half-stage micro-batches on 2 stages, zb-v's 5. Not below 1f1b's 2 whole ones in bytes: a
         * chunk's micro-batch keeps its input and the output gradients its deferred W reads */
        int vh = 0;
        for (int i = 0; i < n; i++)
                for (int j = 0; j < n && c[i].L.sched == DT_SCHEDULE_V_HALF && c[i].L.micro >= 4; j++)
                        if (c[j].L.micro == c[i].L.micro && c[j].L.grid[1] == 2 &&
                            c[j].L.sched == DT_SCHEDULE_ZB_V) {
                                ck_assert(c[i].pr.mem < c[j].pr.mem);
                                vh++;
                        }
        ck_assert_int_ge(vh, 3);
        /* a limit below every layout that keeps its activations, above recompute's need: on 1 rank
         * (on 2, a pipeline's slots hold one micro-batch each, and keeping them needs no more than
         * recomputing them) */
        double least = 1e300, least_rc = 1e300;
        n = search_deep_n(&cs, 1024, c, MAX, 1);
        for (int i = 0; i < n; i++) {
                if (c[i].L.recompute) least_rc = fmin(least_rc, c[i].pr.mem);
                else least = fmin(least, c[i].pr.mem);
        }
        ck_assert(least_rc < least);
        n = search_deep_n(&cs, 0.5 * (least + least_rc), c, MAX, 1);
        ck_assert(c[0].pr.fits && c[0].L.recompute == 1);
        char why[1024], lay[512];
        dt_plan_why(NULL, &c[0], n > 1 ? &c[1] : NULL, why, sizeof why);
        ck_assert_msg(strstr(why, "recompute all: fits") != NULL, "%s", why);
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, deep_fc);
        dt_layout L = c[0].L;
        L.shard = L.grid[0] > 1 ? 2 : 0;
        dt_cluster_spec out;
        dt_cluster_spec_init(&out);
        dt_layout_apply_graph(&g, &L, &out);
        ck_assert(out.recompute.mode == DT_RECOMPUTE_ALL && (out.set & DT_CS_RECOMPUTE));
        ck_assert(L.grid[0] == 1 || (out.shard == 2 && (out.set & DT_CS_SHARD)));
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_layout_str(p, &L, lay, sizeof lay);
        ck_assert_msg(strstr(lay, "recompute all") != NULL, "%s", lay);
        char *text = NULL;
        size_t cap = 0;
        FILE *f = open_memstream(&text, &cap);
        dt_layout_yaml(p, &L, f);
        fclose(f);
        ck_assert_msg(strstr(text, "  recompute: all\n") != NULL, "%s", text);
        free(text);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        /* the spec's own keys are kept, not searched */
        cs.shard = 1;
        cs.recompute.mode = DT_RECOMPUTE_NONE;
        cs.set |= DT_CS_SHARD | DT_CS_RECOMPUTE;
        n = search_deep(&cs, 1024, c, MAX);
        for (int i = 0; i < n; i++) {
                ck_assert_int_eq(c[i].L.shard, c[i].L.grid[0] > 1 ? 1 : 0);
                ck_assert(!c[i].L.recompute);
        }
        free(c);
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
        dt_fixture_load(&s, &g, "name: cut\ninput: [64]\nlayers:\n"
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


/* A candidate with the parts the ranking and the why-line read. */
static dt_candidate cand(int D, int P, int T, int micro, double step_ms, double mem_mib)
{
        dt_candidate c;
        memset(&c, 0, sizeof c);
        c.L.grid[0] = D, c.L.grid[1] = P, c.L.grid[2] = T;
        c.L.micro = micro;
        c.pr.step = step_ms * 1e-3;
        c.pr.compute = 0.9 * c.pr.step;
        c.pr.mem = mem_mib * 1048576.0;
        c.pr.fits = 1;
        c.pr.light_frac = 1.0;
        return c;
}

/* Predictions within DT_PLAN_TIE are a tie: said so, and broken by memory, then by simplicity;
 * never "0.0% faster". Outside it the faster wins whatever its memory. */
START_TEST(test_tie)
{
        char why[1024];
        /* the faster by a hair needs 5x the memory: the leaner one goes first */
        dt_candidate c[4] = { cand(1, 2, 1, 16, 10.00, 447), cand(2, 1, 1, 1, 10.05, 70), cand(1, 2, 1, 8, 12.0, 10) };
        dt_plan_rank(c, 3);
        ck_assert_int_eq(c[0].L.grid[0], 2);
        ck_assert_int_eq(c[1].L.micro, 16);
        ck_assert_int_eq(c[2].L.micro, 8);     /* not tied with the fastest: stays last, leaner or not */
        dt_plan_why(NULL, &c[0], &c[1], why, sizeof why);
        ck_assert_msg(strstr(why, "a tie") && strstr(why, "less memory") && !strstr(why, "faster"), "%s", why);
        /* the same memory: the simpler (fewer ranks per model copy) */
        c[0] = cand(1, 2, 1, 4, 10.00, 100), c[1] = cand(2, 1, 1, 1, 10.09, 100.5);
        dt_plan_rank(c, 2);
        ck_assert_int_eq(c[0].L.grid[0], 2);
        dt_plan_why(NULL, &c[0], &c[1], why, sizeof why);
        ck_assert_msg(strstr(why, "a tie") && strstr(why, "simpler") && strstr(why, "1 rank per model copy"), "%s", why);
        /* one pipeline, two schedules alike to the microsecond: fewer micro-batches */
        c[0] = cand(1, 2, 1, 8, 10.0, 100), c[1] = cand(1, 2, 1, 4, 10.0, 100);
        dt_plan_rank(c, 2);
        ck_assert_int_eq(c[0].L.micro, 4);
        /* apart: the faster, and by how much */
        c[0] = cand(2, 1, 1, 1, 11.0, 10), c[1] = cand(1, 2, 1, 4, 10.0, 100);
        dt_plan_rank(c, 2);
        ck_assert_int_eq(c[0].L.grid[1], 2);
        dt_plan_why(NULL, &c[0], &c[1], why, sizeof why);
        ck_assert_msg(strstr(why, "9.1% faster") && !strstr(why, "tie"), "%s", why);
        /* a chain of near ties is ranked against the fastest left, not pairwise */
        c[0] = cand(1, 1, 2, 1, 10.0, 50), c[1] = cand(1, 2, 1, 2, 10.09, 40), c[2] = cand(2, 1, 1, 1, 10.18, 30);
        dt_plan_rank(c, 3);
        ck_assert_int_eq(c[0].L.grid[1], 2);   /* 10.09 ties 10.0 and is leaner; 10.18 does not tie 10.0 */
        ck_assert_int_eq(c[1].L.grid[2], 2);   /* then 10.0 is the fastest left, 10.18 within 1% and leaner */
}
END_TEST

/* mlp.yaml's layers on 3 ranks: a pipeline cut at the dropout and fc2 leaves a stage of a dropout
 * alone; the why-line says it is light on purpose and why (a wide input, so that even on a fast
 * SGEMM the FLOP-modelled fc1 outweighs the dropout's memory passes many times). */
START_TEST(test_light_stage)
{
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, "name: light\ninput: [3072]\nlayers:\n"
                     "  - {type: fc, name: fc1, units: 256, activation: relu}\n"
                     "  - {type: dropout, name: drop, rate: 0.1}\n"
                     "  - {type: fc, name: fc2, units: 128, activation: relu}\n"
                     "  - {type: fc, name: fc3, units: 10}\n"
                     "loss: mse\ndata:\n  train: {format: synthetic, n: 64}\ntrain: {batch: 128}\n");
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 3;
        cs.cores_per_node = 2;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m;
        dt_machine_from(&m, &cs, 3, 1);
        dt_candidate a = { .L = { .grid = { 1, 3, 1 }, .first = { 0, 1, 2, 4 }, .micro = 3, .sched = DT_SCHEDULE_1F1B } };
        ck_assert_int_eq(dt_plan_predict(p, &m, &a.L, &a.pr), 0);
        ck_assert_int_eq(a.pr.light, 1);
        ck_assert_int_eq(a.pr.heavy, 0);
        ck_assert_msg(a.pr.light_frac < DT_PLAN_LIGHT, "%g", a.pr.light_frac);
        char why[1024];
        dt_plan_why(p, &a, NULL, why, sizeof why);
        ck_assert_msg(strstr(why, "stage 1 (drop) is deliberately light") && strstr(why, "stage 0 (fc1) holds") &&
                      strstr(why, "giving its core"), "%s", why);
        /* an even pipeline says nothing of the kind */
        dt_candidate b = { .L = { .grid = { 1, 2, 1 }, .first = { 0, 1, 4 }, .micro = 2, .sched = DT_SCHEDULE_1F1B } };
        ck_assert_int_eq(dt_plan_predict(p, &m, &b.L, &b.pr), 0);
        if (b.pr.light_frac >= DT_PLAN_LIGHT) {
                dt_plan_why(p, &b, NULL, why, sizeof why);
                ck_assert_msg(!strstr(why, "light"), "%s", why);
        }
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

/* A speedup above linear is never printed bare: the note names its source. */
START_TEST(test_superlinear)
{
        dt_prediction one = { .step = 10e-3, .work = 9e-3, .compute = 9e-3, .update = 1e-3 }, x = one;
        char note[512] = "";
        x.step = 5.02e-3;       /* 1.99x on 2 ranks: linear, no note */
        ck_assert_int_eq(dt_plan_superlinear(&one, &x, 2, note, sizeof note), 0);
        ck_assert_str_eq(note, "");
        x.step = 4e-3, x.work = 7e-3;   /* 2.5x: its layers compute the batch faster in all */
        ck_assert_int_eq(dt_plan_superlinear(&one, &x, 2, note, sizeof note), 1);
        ck_assert_msg(strstr(note, "2.50x on 2 ranks is above linear") && strstr(note, "7.00 ms in all against 9.00") &&
                      strstr(note, "caches"), "%s", note);
        x.work = 9e-3, x.update = 0.2e-3;       /* the update shrank more than 2-fold */
        ck_assert_int_eq(dt_plan_superlinear(&one, &x, 2, note, sizeof note), 1);
        ck_assert_msg(strstr(note, "optimizer update"), "%s", note);
        x.update = 0.6e-3;
        ck_assert_int_eq(dt_plan_superlinear(&one, &x, 2, note, sizeof note), 1);
        ck_assert_msg(strstr(note, "noise"), "%s", note);
        ck_assert_int_eq(dt_plan_superlinear(&one, &x, 1, note, sizeof note), 0);
}
END_TEST

/* The scaling table's FLOP model anchored at the measured costs: where it plans what the measured
 * planner planned (the same counts on the same machine) it predicts the same step, and where it
 * models a shape never timed, it continues the measured costs (a layer's modelled cost at another
 * micro-batch is scaled by its own measured-to-modelled ratio). */
START_TEST(test_anchor)
{
        char dir[] = "/tmp/dtrain-test-anchor-XXXXXX";
        dt_fixture_temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, two_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 1;  /* a rank a node: no neighbours' factor to measure */
        cs.cores_per_node = 1;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 1), *q = dt_planner_new(&g, &cs, 1, 0);
        dt_machine m1, m2;
        dt_machine_from(&m1, &cs, 1, 1);
        dt_machine_from(&m2, &cs, 2, 1);
        dt_candidate a[64], b[64], qa[64], qb[64];
        ck_assert_int_ge(dt_plan_search(p, &m1, 1, a, 64), 1);
        int na = dt_plan_search(p, &m2, 2, b, 64);
        ck_assert_int_ge(na, 2);
        ck_assert_int_ge(dt_plan_search(q, &m1, 1, qa, 64), 1);
        double unanchored = qa[0].pr.step;
        dt_prof_anchor(&q->pf, &p->pf, &g, 32);
        ck_assert_int_ge(dt_plan_search(q, &m1, 1, qa, 64), 1);
        ck_assert_int_eq(dt_plan_search(q, &m2, 2, qb, 64), na);
        NEAR(qa[0].pr.step, a[0].pr.step);
        NEAR(qb[0].pr.step, b[0].pr.step);
        ck_assert_msg(unanchored != a[0].pr.step, "%g", unanchored);
        /* a shape never timed (micro-batch 5): the FLOP model times the layer's own measured ratio */
        dt_planner *r = dt_planner_new(&g, &cs, 1, 0);  /* the FLOP model alone */
        r->pf.sgemm = q->pf.sgemm;                      /* at the rate q measured */
        dt_layer_cost t[2], m32[2], m5[2], at5[2];
        dt_prof_graph(&p->pf, &g, 32, t);
        dt_prof_graph(&r->pf, &g, 32, m32);
        dt_prof_graph(&r->pf, &g, 5, m5);
        dt_prof_graph(&q->pf, &g, 5, at5);
        for (int i = 0; i < 2; i++) {
                double k = (t[i].f + t[i].bi + t[i].bw) / (m32[i].f + m32[i].bi + m32[i].bw);
                ck_assert_msg(fabs(k - 1.0) > 1e-6, "layer %d: measured as modelled?", i);
                NEAR(at5[i].f, m5[i].f * k);
                NEAR(at5[i].bi, m5[i].bi * k);
                NEAR(at5[i].bw, m5[i].bw * k);
        }
        dt_planner_free(r);
        dt_planner_free(q);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        dt_fixture_drop_cache(dir);
}
END_TEST

/* The scaling plot: log2 on both axes, so the linear ideal is one straight line through (1, 1) and
 * (N, N) and a linear curve lies on it; a tick at every power of two of the speedup; a legend. */
START_TEST(test_svg)
{
        int n[11];
        double sp[11], lin[11];
        int anch[11] = { 1, 1 };
        for (int i = 0; i < 11; i++) n[i] = 1 << i, sp[i] = pow(n[i], 0.4), lin[i] = n[i];
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_plan_svg(f, n, sp, anch, 11, "m: predicted speedup", "network: 1.0 us, assumed");
        fclose(f);
        int ticks = 0;
        for (const char *t = buf; (t = strstr(t, "class=\"ytick\"")); t++) ticks++;
        ck_assert_msg(ticks >= 11, "%d y ticks", ticks);       /* 1x .. 1024x */
        ck_assert(strstr(buf, ">1x<") && strstr(buf, ">32x<") && strstr(buf, ">1024x<"));
        ck_assert(strstr(buf, "class=\"legend\"") && strstr(buf, "linear") && strstr(buf, "predicted"));
        ck_assert(strstr(buf, "assumed") != NULL);
        double x1, y1, x2, y2;
        const char *id = strstr(buf, "class=\"ideal\"");
        ck_assert_ptr_nonnull(id);
        ck_assert_int_eq(sscanf(id, "class=\"ideal\" x1=\"%lf\" y1=\"%lf\" x2=\"%lf\" y2=\"%lf\"", &x1, &y1, &x2, &y2), 4);
        free(buf);
        /* a linear curve: every point on the ideal's line */
        buf = NULL;
        f = open_memstream(&buf, &len);
        dt_plan_svg(f, n, lin, NULL, 11, "t", NULL);
        fclose(f);
        const char *pts = strstr(buf, "class=\"predicted\"");
        ck_assert_ptr_nonnull(pts);
        pts = strstr(pts, "points=\"") + 8;
        for (int i = 0; i < 11; i++) {
                double px, py;
                int used;
                ck_assert_int_eq(sscanf(pts, "%lf,%lf %n", &px, &py, &used), 2);
                pts += used;
                double on = y1 + (y2 - y1) * (px - x1) / (x2 - x1);
                ck_assert_msg(fabs(py - on) < 0.2, "point %d (%g, %g) off the ideal (%g)", i, px, py, on);
        }
        free(buf);
}
END_TEST


/* The layouts dtrain plan shows, of every rank count, are timed again side by side: the samples
 * their shapes had from the search (taken at each count's own moment) are dropped, and each keeps
 * only the samples of the interleaved rounds. */
START_TEST(test_refine_side_by_side)
{
        char dir[] = "/tmp/dtrain-test-refine-XXXXXX";
        dt_fixture_temp_cache(dir);
        dt_model_spec s;
        dt_graph g;
        dt_fixture_load(&s, &g, two_fc);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.ranks_per_node = 1;
        cs.cores_per_node = 1;
        dt_planner *p = dt_planner_new(&g, &cs, 1, 1);
        dt_machine m1, m2;
        dt_machine_from(&m1, &cs, 1, 1);
        dt_machine_from(&m2, &cs, 2, 1);
        dt_candidate a[64], b[64];
        ck_assert_int_ge(dt_plan_search(p, &m1, 1, a, 64), 1);
        int nb = dt_plan_search(p, &m2, 2, b, 64);
        ck_assert_int_ge(nb, 2);
        int n0 = p->pf.n;
        dt_layer_cost (*old)[DT_PROF_SAMPLES] = malloc((size_t)n0 * sizeof *old);
        unsigned char *ns0 = malloc((size_t)n0);
        memcpy(old, p->pf.samp, (size_t)n0 * sizeof *old);
        memcpy(ns0, p->pf.ns, (size_t)n0);
        dt_plan_group grp[2] = { { &m1, a, 1 }, { &m2, b, 2 } };
        dt_plan_refine(p, grp, 2, 3);
        int refined = 0;
        for (int i = 0; i < n0; i++) {
                if (p->pf.ns[i] == ns0[i] && !memcmp(p->pf.samp[i], old[i], ns0[i] * sizeof old[i][0])) continue;
                refined++;
                ck_assert_int_eq(p->pf.ns[i], 3);
                for (int k = 0; k < ns0[i]; k++)
                        for (int j = 0; j < 3; j++)
                                ck_assert_msg(memcmp(&p->pf.samp[i][j], &old[i][k], sizeof old[i][k]),
                                              "shape %d kept a sample from the search", i);
        }
        ck_assert_int_gt(refined, 0);
        for (int i = 1; i < 2; i++) ck_assert(b[i].pr.step >= b[0].pr.step * (1 - DT_PLAN_TIE) || !b[i].pr.fits);
        free(old);
        free(ns0);
        dt_planner_free(p);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        dt_fixture_drop_cache(dir);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("plan");
        TCase *t = tcase_create("plan");
        tcase_set_timeout(t, 120);
        tcase_add_test(t, test_formulas);
        tcase_add_test(t, test_hier_cost);
        tcase_add_test(t, test_search_wide);
        tcase_add_test(t, test_search_narrow);
        tcase_add_test(t, test_oversubscribed);
        tcase_add_test(t, test_turns);
        tcase_add_test(t, test_eager);
        tcase_add_test(t, test_repeated_shapes);
        tcase_add_test(t, test_none_fits);
        tcase_add_test(t, test_memory_ways);
        tcase_add_test(t, test_tie);
        tcase_add_test(t, test_light_stage);
        tcase_add_test(t, test_superlinear);
        tcase_add_test(t, test_anchor);
        tcase_add_test(t, test_svg);
        tcase_add_test(t, test_refine_side_by_side);
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
