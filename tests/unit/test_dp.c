/* tests/unit/test_dp.c - Check tests of the data-parallel parts that need no second rank: the
 * bucket cut (dp.c), the reproducible reduction tree (repro.c), the SSP ring's bookkeeping
 * (ssp.c), and the cluster settings checked once the graph exists (dt_cluster_spec_validate_run).
 * MPI is never started: every call here runs on one rank or without MPI at all. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/dp.h"

/* ---- helpers ---- */

/* Builds the graph of a model with input 'input' and the layer list 'layers' (YAML lines). */
static void load(dt_model_spec *s, dt_graph *g, const char *input, const char *layers)
{
        char path[64];
        snprintf(path, sizeof path, "/tmp/dtrain-test-dp-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "name: dp\ninput: %s\nlayers:\n%sloss: mse\ndata:\n  train: {format: synthetic, n: 8}\n",
                input, layers);
        fclose(f);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_model_spec_load(s, path, &d), 0);
        unlink(path);
        ck_assert_int_eq(dt_graph_build(g, s, &d), 0);
        ck_assert_int_eq(d.n, 0);
}

static void unload(dt_model_spec *s, dt_graph *g)
{
        dt_graph_free(g);
        dt_model_spec_free(s);
}

/* The bucket invariants for any size: contiguous slices covering [0, nparams) from the end, each
 * starting where its first layer's gradients start, each but the last at least target floats. */
static void check_cut(const dt_graph *g, const dt_bucket *b, int nb, size_t target)
{
        ck_assert_int_ge(nb, 1);
        size_t end = g->nparams;
        for (int j = 0; j < nb; j++) {
                ck_assert_uint_eq(b[j].off + b[j].len, end);
                const dt_layer *l = &g->layers[b[j].first_layer];
                int k = 0;
                while (!l->ps[k].trainable) k++;
                ck_assert_uint_eq(l->off[k], b[j].off);
                if (j < nb - 1) ck_assert_uint_ge(b[j].len, target);
                ck_assert_int_eq(b[j].started, 0);
                ck_assert(b[j].req == MPI_REQUEST_NULL);
                end = b[j].off;
        }
        ck_assert_uint_eq(end, 0);
}

/* fc 127 -> 127 -> relu -> 127 -> 8: 16256, 16256 and 1024 floats of gradients */
#define MLP \
        "  - {type: fc, name: f1, units: 127}\n" \
        "  - {type: activation, name: act, function: relu}\n" \
        "  - {type: fc, name: f2, units: 127}\n" \
        "  - {type: fc, name: f3, units: 8}\n"

/* ---- bucket cut ---- */

START_TEST(test_buckets)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, "[127]", MLP);
        ck_assert_uint_eq(g.nparams, 16256 + 16256 + 1024);
        dt_bucket b[8];

        /* 1024 floats (4 KiB): f3 fills a bucket exactly, f2 one, f1 (the lowest) the last */
        int nb = dt_dp_buckets(&g, 4096.0 / 1048576.0, b);
        ck_assert_int_eq(nb, 3);
        ck_assert(b[0].off == 32512 && b[0].len == 1024 && b[0].first_layer == 3);
        ck_assert(b[1].off == 16256 && b[1].len == 16256 && b[1].first_layer == 2);
        ck_assert(b[2].off == 0 && b[2].len == 16256 && b[2].first_layer == 0);
        check_cut(&g, b, nb, 1024);

        /* under 1024 floats is raised to 1024 */
        ck_assert_int_eq(dt_dp_buckets(&g, 1e-9, b), 3);

        /* 17000 floats: f3 and f2 together reach it; f1 closes the last */
        nb = dt_dp_buckets(&g, 17000.0 * 4 / 1048576.0, b);
        ck_assert_int_eq(nb, 2);
        ck_assert(b[0].off == 16256 && b[0].len == 17280 && b[0].first_layer == 2);
        ck_assert(b[1].off == 0 && b[1].len == 16256 && b[1].first_layer == 0);

        /* the default 1 MiB holds the whole model: one bucket, done when f1's backward is */
        nb = dt_dp_buckets(&g, 1.0, b);
        ck_assert_int_eq(nb, 1);
        ck_assert(b[0].off == 0 && b[0].len == g.nparams && b[0].first_layer == 0);

        for (double mb = 1e-4; mb < 0.2; mb *= 1.7) check_cut(&g, b, dt_dp_buckets(&g, mb, b),
                                                               DT_MAX((size_t)(mb * 262144.0), (size_t)1024));

        /* dt_dp_init cuts the same (one rank, no compression: no MPI call) */
        dt_comm one = { .rank = 0, .size = 1 };
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        cs.bucket_mb = 4096.0 / 1048576.0;
        dt_dp dp;
        dt_dp_init(&dp, &one, &cs, &g);
        ck_assert_int_eq(dp.nb, dt_dp_buckets(&g, cs.bucket_mb, b));
        for (int j = 0; j < dp.nb; j++)
                ck_assert(dp.b[j].off == b[j].off && dp.b[j].len == b[j].len &&
                          dp.b[j].first_layer == b[j].first_layer);
        ck_assert_int_eq(dp.bytes, (long)(g.nparams * sizeof(float)));
        dt_dp_free(&dp);
        unload(&s, &g);
}
END_TEST

/* layers without gradients (first, last, between; batchnorm's buffers) take no bucket of their own */
START_TEST(test_buckets_gaps)
{
        dt_model_spec s;
        dt_graph g;
        load(&s, &g, "[1, 8, 8]",
             "  - {type: activation, name: a0, function: tanh}\n"
             "  - {type: conv, name: c1, filters: 4, kernel: 3}\n"
             "  - {type: batchnorm, name: bn}\n"
             "  - {type: maxpool, name: p, kernel: 2}\n"
             "  - {type: flatten, name: fl}\n"
             "  - {type: fc, name: f, units: 2}\n"
             "  - {type: dropout, name: dr, rate: 0.1}\n");
        dt_bucket b[8];
        int nb = dt_dp_buckets(&g, 1e-9, b);      /* 1024 floats: c1 40, bn 8, f 74 */
        ck_assert_int_eq(nb, 1);
        ck_assert_int_eq(b[0].first_layer, 1);   /* the lowest layer with gradients, not a0 */
        check_cut(&g, b, nb, 1024);
        unload(&s, &g);

        load(&s, &g, "[1000]",
             "  - {type: fc, name: f1, units: 2}\n"
             "  - {type: batchnorm, name: bn}\n"
             "  - {type: fc, name: f2, units: 1000}\n");
        nb = dt_dp_buckets(&g, 1e-9, b);
        ck_assert_int_eq(nb, 2);
        ck_assert_int_eq(b[0].first_layer, 2);   /* f2: 3000 floats */
        ck_assert_int_eq(b[1].first_layer, 0);   /* bn's 4 ride with f1 */
        ck_assert_uint_eq(b[1].len, 2002 + 4);
        check_cut(&g, b, nb, 1024);
        unload(&s, &g);
}
END_TEST

/* ---- reproducible tree ---- */

static int is_tree_node(int lo, int hi, int a, int b)
{
        if (lo == a && hi == b) return 1;
        if (hi - lo < 2 || a < lo || b > hi) return 0;
        int mid = lo + (hi - lo) / 2;
        return b <= mid ? is_tree_node(lo, mid, a, b) : a >= mid ? is_tree_node(mid, hi, a, b) : 0;
}

START_TEST(test_repro_cover)
{
        dt_repro_node n[DT_REPRO_MAX_NODES];
        /* 16 chunks over 3 ranks: [0, 5), [5, 10), [10, 16) */
        ck_assert_int_eq(dt_repro_cover(16, 3, 0, n), 2);
        ck_assert(n[0].lo == 0 && n[0].hi == 4 && n[1].lo == 4 && n[1].hi == 5);
        ck_assert_int_eq(dt_repro_cover(16, 3, 1, n), 3);
        ck_assert(n[0].lo == 5 && n[0].hi == 6 && n[1].lo == 6 && n[1].hi == 8 && n[2].lo == 8 && n[2].hi == 10);
        ck_assert_int_eq(dt_repro_cover(16, 3, 2, n), 2);
        ck_assert(n[0].lo == 10 && n[0].hi == 12 && n[1].lo == 12 && n[1].hi == 16);
        ck_assert_int_eq(dt_repro_nodes(16, 3), 7);
        /* one rank: the root; one chunk each: the leaves; powers of two: one subtree each */
        ck_assert_int_eq(dt_repro_nodes(16, 1), 1);
        ck_assert_int_eq(dt_repro_nodes(16, 16), 16);
        ck_assert_int_eq(dt_repro_nodes(16, 4), 4);
        ck_assert_int_eq(dt_repro_nodes(65536, 1), 1);

        /* any chunks and ranks: every rank's nodes are tree nodes inside its own chunks, and all
         * of them in rank order tile [0, chunks) left to right (so the tree can be finished) */
        for (int C = 1; C <= 70; C++)
                for (int P = 1; P <= C; P++) {
                        int at = 0;
                        long total = 0;
                        for (int r = 0; r < P; r++) {
                                int k = dt_repro_cover(C, P, r, n), a = (int)((long)C * r / P);
                                int b = (int)((long)C * (r + 1) / P);
                                ck_assert_int_le(k, DT_REPRO_MAX_NODES);
                                for (int i = 0; i < k; i++) {
                                        ck_assert_int_eq(n[i].lo, at);
                                        ck_assert(n[i].lo >= a && n[i].hi <= b && n[i].hi > n[i].lo);
                                        ck_assert(is_tree_node(0, C, n[i].lo, n[i].hi));
                                        at = n[i].hi;
                                }
                                ck_assert_int_eq(at, b);
                                total += k;
                        }
                        ck_assert_int_eq(at, C);
                        ck_assert_int_eq(dt_repro_nodes(C, P), total);
                }
        /* the buffers the tree holds (the memory plan's): all ranks' node sums and a partial sum
         * per depth of the rank's recursions and of the finish above the nodes */
        ck_assert_int_eq(dt_repro_buffers(16, 1, 0), 1 + 4);
        ck_assert_int_eq(dt_repro_buffers(16, 2, 1), 2 + 3);
        ck_assert_int_eq(dt_repro_buffers(16, 16, 5), 16 + 4);
        ck_assert_int_eq(dt_repro_buffers(12, 4, -1), 4 + 2);
        /* the widest chunk count: at most two nodes per level */
        for (int P = 1; P <= 64; P++)
                for (int r = 0; r < P; r++) ck_assert_int_le(dt_repro_cover(65536, P, r, n), 2 * 17);
}
END_TEST

/* Chunk values whose float sum depends on the order of the additions. */
static float chunk_value(int c)
{
        static const float v[] = { 1e8f, 1.0f, -1e8f, 3.0f, 0.5f, 7e7f, -7e7f, 1.0f, 2.5f, -3.0f, 1e-3f, 9.0f };
        return v[c % 12] * (float)(1 + c / 12);
}

static float tree_sum(int lo, int hi)
{
        if (hi - lo == 1) return chunk_value(lo);
        int mid = lo + (hi - lo) / 2;
        float a = tree_sum(lo, mid), b = tree_sum(mid, hi);
        return a + b;
}

typedef struct fake { dt_graph *g; int per, calls, next; } fake;

/* The trainer's part: gradients of global-batch positions [lo, hi), one chunk at a time. */
static void chunk_grad(void *ud, int lo, int hi, double stats[2])
{
        fake *f = ud;
        ck_assert_int_eq(hi - lo, f->per);
        ck_assert_int_eq(lo % f->per, 0);
        int c = lo / f->per;
        ck_assert_int_eq(c, f->next);           /* chunks in order, each once */
        f->next++;
        f->calls++;
        f->g->grads[0] += chunk_value(c);
        f->g->grads[1] += 1.0f;
        stats[0] += c;
        stats[1] += 1;
}

START_TEST(test_repro_sum)
{
        float grads[2];
        dt_graph g;
        memset(&g, 0, sizeof g);
        g.nparams = 2;
        g.grads = grads;
        dt_comm one = { .rank = 0, .size = 1 };
        dt_dp dp;
        memset(&dp, 0, sizeof dp);
        dp.comm = &one;
        dp.g = &g;
        for (int C = 1; C <= 48; C++) {
                fake f = { &g, 3, 0, 0 };
                double stats[2] = { 0, 0 };
                grads[0] = grads[1] = 12345.0f;       /* overwritten, not added to */
                dt_repro_grads(&dp, 3 * C, C, chunk_grad, &f, stats);
                ck_assert_int_eq(f.calls, C);
                float want = tree_sum(0, C);
                ck_assert_mem_eq(&grads[0], &want, sizeof want);  /* bitwise: the tree's order */
                ck_assert_float_eq(grads[1], (float)C);
                ck_assert_double_eq(stats[0], (double)C * (C - 1) / 2);
                ck_assert_double_eq(stats[1], C);
        }
        /* the order matters for these values, so the test above would see another order */
        float seq = 0;
        for (int c = 0; c < 16; c++) seq += chunk_value(c);
        float tree = tree_sum(0, 16);
        ck_assert(memcmp(&seq, &tree, sizeof seq) != 0);
        free(dp.repro);         /* the tree's buffers, kept from call to call */
}
END_TEST

/* ---- SSP ring ---- */

typedef struct sim {
        long arrive[64];        /* the time step t's contributions are all in */
        long now;
        long applied[64];
        int napplied, waits;
} sim;

static int sim_arrived(void *ud, long t, int wait)
{
        sim *m = ud;
        if (wait) {
                m->waits++;
                if (m->now < m->arrive[t]) m->now = m->arrive[t];       /* blocks until then */
                return 1;
        }
        return m->arrive[t] <= m->now;
}

static void sim_apply(void *ud, long t)
{
        sim *m = ud;
        m->applied[m->napplied++] = t;
}

START_TEST(test_ssp_ring)
{
        dt_ssp_ring r;
        dt_ssp_ring_init(&r, 2);
        ck_assert_int_eq(r.W, 4);
        ck_assert(r.next_apply == 0 && r.pushed == 0);
        ck_assert_int_eq(dt_ssp_ring_slot(&r, 0), 0);
        ck_assert_int_eq(dt_ssp_ring_slot(&r, 5), 1);
        ck_assert_int_eq(dt_ssp_ring_slot(&r, 1000003), 3);
        ck_assert(dt_ssp_ring_can_push(&r, 0));
        ck_assert(!dt_ssp_ring_can_push(&r, 1));      /* in order only */
        r.pushed = 4;
        ck_assert(!dt_ssp_ring_can_push(&r, 4));      /* slot 0 still holds step 0 */
        r.next_apply = 1;
        ck_assert(dt_ssp_ring_can_push(&r, 4));

        /* apply: nothing arrived and nothing due: nothing applied */
        sim m;
        memset(&m, 0, sizeof m);
        for (int t = 0; t < 64; t++) m.arrive[t] = 100;
        dt_ssp_ring_apply(&r, -1, sim_arrived, sim_apply, &m);
        ck_assert_int_eq(m.napplied, 0);
        ck_assert_int_eq(r.next_apply, 1);
        /* a later step that has arrived waits for the earlier one: order is kept */
        m.arrive[2] = 0;
        dt_ssp_ring_apply(&r, -1, sim_arrived, sim_apply, &m);
        ck_assert_int_eq(m.napplied, 0);
        /* up to 2 is due: 1 and 2 are waited for (until time 5), 3 (at 100) is not taken */
        m.arrive[1] = 5;
        dt_ssp_ring_apply(&r, 2, sim_arrived, sim_apply, &m);
        ck_assert_int_eq(m.napplied, 2);
        ck_assert(m.applied[0] == 1 && m.applied[1] == 2);
        ck_assert_int_eq(m.waits, 2);
        ck_assert_int_eq(m.now, 5);
        ck_assert_int_eq(r.next_apply, 3);
        m.arrive[3] = 0;
        dt_ssp_ring_apply(&r, -1, sim_arrived, sim_apply, &m);
        ck_assert_int_eq(m.napplied, 3);
        ck_assert_int_eq(r.next_apply, 4);
        dt_ssp_ring_apply(&r, 100, sim_arrived, sim_apply, &m);   /* nothing pushed beyond */
        ck_assert_int_eq(m.napplied, 3);
}
END_TEST

/* The trainer's use, as train_step makes it: apply up to t - s - 1, compute and push t, apply
 * what is complete. With any arrival times, every step is applied once and in order, never more
 * than s steps of updates are missing when a step is computed, and a push always finds its slot
 * free (the ring of s + 2 is big enough). */
START_TEST(test_ssp_protocol)
{
        uint64_t rs = 12345;
        for (int s = 0; s <= 4; s++)
                for (int trial = 0; trial < 50; trial++) {
                        dt_ssp_ring r;
                        dt_ssp_ring_init(&r, s);
                        sim m;
                        memset(&m, 0, sizeof m);
                        const int N = 40;
                        for (long t = 0; t < N; t++) {
                                dt_ssp_ring_apply(&r, t - s - 1, sim_arrived, sim_apply, &m);
                                ck_assert_int_ge(r.next_apply, t - s);
                                ck_assert(dt_ssp_ring_can_push(&r, t));
                                /* the steps in the ring sit in distinct slots */
                                for (long a = r.next_apply; a < t; a++)
                                        ck_assert_int_ne(dt_ssp_ring_slot(&r, a), dt_ssp_ring_slot(&r, t));
                                m.now++;
                                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                                m.arrive[t] = m.now + (long)((rs >> 33) % 7);   /* peers 0-6 ticks late */
                                r.pushed = t + 1;
                                dt_ssp_ring_apply(&r, -1, sim_arrived, sim_apply, &m);
                        }
                        dt_ssp_ring_apply(&r, N - 1, sim_arrived, sim_apply, &m);    /* before the end */
                        ck_assert_int_eq(m.napplied, N);
                        for (int i = 0; i < N; i++) ck_assert_int_eq(m.applied[i], i);
                        ck_assert_int_eq(r.next_apply, N);
                }
}
END_TEST

/* ---- settings that need the built graph ---- */

static int parse_text(dt_cluster_spec *c, const char *text, dt_diag *d)
{
        dt_ydoc y;
        dt_cluster_spec_init(c);
        int rc = dt_ydoc_load_string(&y, "c.yaml", text, d);
        if (rc == 0) rc = dt_cluster_spec_parse(c, &y, dt_ydoc_root(&y), d);
        dt_ydoc_free(&y);
        return rc;
}

static const char *msg(const dt_diag *d, int i, char *buf, size_t len)
{
        ck_assert_int_lt(i, d->n);
        snprintf(buf, len, "%s:%d:%d: %s", d->msgs[i].file ? d->msgs[i].file : "", d->msgs[i].line,
                 d->msgs[i].col, d->msgs[i].text);
        return buf;
}

START_TEST(test_validate_run)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        char b[512];
        /* reproducible: the gathered node sums must fit one MPI message (an int count) */
        ck_assert_int_eq(parse_text(&c, "partition:\n  reproducible: true\n  chunks: 64\n", &d), 0);
        dt_cluster_run run = { .nparams = 1000000, .repro_nodes = dt_repro_nodes(64, 8) };
        ck_assert_int_eq(run.repro_nodes, 8);
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &run, &d), 0);
        run.nparams = INT32_MAX / 8;
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &run, &d), 0);
        run.nparams = INT32_MAX / 8 + 1;
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &run, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:3:3: reproducible mode: 268435456 parameters x 8 tree "
                         "nodes exceed one MPI message; use fewer chunks than 64");
        dt_diag_free(&d);
        /* the default chunks: reported at 'reproducible' */
        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: true}\n", &d), 0);
        run.repro_nodes = dt_repro_nodes(16, 3);
        run.nparams = 400000000;
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &run, &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:13: reproducible mode: 400000000 parameters x 7 tree "
                         "nodes exceed one MPI message; use fewer chunks than 16 (the default)");
        dt_diag_free(&d);
        /* not reproducible: no gather, no limit */
        ck_assert_int_eq(parse_text(&c, "{}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &run, &d), 0);

        /* comm: nccl needs a build with NCCL, where a device backend sums over ranks */
        ck_assert_int_eq(parse_text(&c, "partition:\n  comm: nccl\n", &d), 0);
        dt_cluster_run dev = { .nparams = 10, .device_sync = 1, .nccl = 0 };
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &dev, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:2:3: comm: nccl was asked but this dtrain was built "
                         "without NCCL");
        dt_diag_free(&d);
        dev.nccl = 1;
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &dev, &d), 0);
        dev.nccl = 0;
        dev.device_sync = 0;                    /* the cpu, or one rank: MPI carries it */
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &dev, &d), 0);
        ck_assert_int_eq(parse_text(&c, "partition: {comm: mpi}\n", &d), 0);
        dev.device_sync = 1;
        ck_assert_int_eq(dt_cluster_spec_validate_run(&c, &dev, &d), 0);
        ck_assert_int_eq(d.n, 0);
}
END_TEST

static Suite *dp_suite(void)
{
        Suite *s = suite_create("dp");
        TCase *t = tcase_create("dp");
        tcase_set_timeout(t, 60);      /* the covers of every chunk and rank count take ~10 s under ASan */
        tcase_add_test(t, test_buckets);
        tcase_add_test(t, test_buckets_gaps);
        tcase_add_test(t, test_repro_cover);
        tcase_add_test(t, test_repro_sum);
        tcase_add_test(t, test_ssp_ring);
        tcase_add_test(t, test_ssp_protocol);
        tcase_add_test(t, test_validate_run);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(dp_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
