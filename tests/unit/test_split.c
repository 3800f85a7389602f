/* tests/unit/test_split.c - every tensor split of every splittable layer kind, at 2 and 3 shards,
 * against the whole layer: the S shards of a graph run in one process, one thread each, their
 * collectives stand-ins over the shard copies (an all-reduce sums the members' buffers in member
 * order, an all-gather puts their columns side by side), and each shard's output, input gradient
 * and parameter gradients are compared with the whole graph's (its own cut of them).
 *
 * Bit for bit where the split leaves every sum in the order the whole layer adds it; within a
 * stated tolerance where a collective adds partial sums (an all-reduce of a split dot product:
 * the row fc's output, every split layer's input gradient, a recurrent layer's per-step dh).
 * A column split's dot products are the whole layer's only where the GEMM library computes each
 * element the same whatever the matrix's other dimensions: OpenBLAS's AVX-512 kernels do, its
 * Haswell/Zen kernels (0.3.21, what an AVX2-only machine runs) do not, so there those cases are
 * held to the reordering tolerance (gemm_splits_exact says which). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "parallel/tensor.h"
#include "util/common.h"

#define MAXS 3

/* ---- stand-in collectives: the members are threads of this process ---- */
typedef struct group {
        int S;
        pthread_barrier_t bar;
        const float *in[MAXS];
        float *buf[MAXS];
} group;

/* every member sums the group's buffers in member order, then all overwrite their own */
static void sa_allreduce(const dt_tp *t, float *buf, size_t n)
{
        group *g = t->ud;
        g->buf[t->rank] = buf;
        pthread_barrier_wait(&g->bar);
        float *sum = dt_falloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) {
                float s = g->buf[0][i];
                for (int k = 1; k < g->S; k++) s += g->buf[k][i];
                sum[i] = s;
        }
        pthread_barrier_wait(&g->bar);
        memcpy(buf, sum, n * sizeof *buf);
        free(sum);
}

static void sa_allgather_cols(const dt_tp *t, const float *in, float *out, size_t rows, size_t w)
{
        group *g = t->ud;
        g->in[t->rank] = in;
        pthread_barrier_wait(&g->bar);
        for (int k = 0; k < g->S; k++) dt_cols_put(out, g->in[k], rows, w * (size_t)g->S, (size_t)k * w, w);
        pthread_barrier_wait(&g->bar);
}

/* ---- one case ---- */

/* What a case expects of the shards, each bitwise (tolerance 0) or within tol times the tensor's
 * largest magnitude (at least 1). */
typedef struct expect {
        double y, dx, dparam;
} expect;

typedef struct shard_run {
        dt_graph *g;
        const dt_fwd_ctx *c;
        const float *r;         /* dL/dy, the whole output's shape */
        int B;
} shard_run;

static void *run_shard(void *arg)
{
        shard_run *s = arg;
        dt_graph *g = s->g;
        dt_graph_forward(g, s->c, s->B);
        size_t ny = (size_t)s->B * dt_shape_size(&g->layers[g->n - 1].out);
        memcpy(g->dact[g->n], s->r, ny * sizeof *s->r);
        memset(g->grads, 0, g->nparams * sizeof *g->grads);
        dt_graph_backward(g, s->c, s->B);
        return NULL;
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float urand(void)
{
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        return (float)((double)(rs >> 11) / 9007199254740992.0 * 2 - 1);
}

/* worst |a - b| over n, relative to max(1, max |a|); 0 exactly when every bit agrees */
static double diff(const float *a, const float *b, size_t n, int *bits)
{
        double worst = 0, big = 1;
        *bits = 0;
        for (size_t i = 0; i < n; i++) {
                if (memcmp(&a[i], &b[i], sizeof *a)) *bits = 1;
                if (fabs(a[i]) > big) big = fabs(a[i]);
        }
        for (size_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - b[i]);
                if (d != d || (d > worst)) worst = d != d ? INFINITY : d;
        }
        return worst / big;
}

static void check_one(const char *what, const char *name, int S, const float *want, const float *got, size_t n,
                      double tol)
{
        int bits;
        double d = diff(want, got, n, &bits);
        /* DT_TEST_SPLIT_SHOW=1: every comparison's figure, to see how far from the tolerance it is */
        if (getenv("DT_TEST_SPLIT_SHOW")) {
                uint64_t h = 1469598103934665603ull;    /* FNV-1a of the shard's bits: a refactoring's before/after */
                for (size_t i = 0; i < n * sizeof *got; i++) h = (h ^ ((const unsigned char *)got)[i]) * 1099511628211ull;
                uint64_t w = 1469598103934665603ull;    /* and the whole layer's */
                for (size_t i = 0; i < n * sizeof *want; i++) w = (w ^ ((const unsigned char *)want)[i]) * 1099511628211ull;
                fprintf(stderr, "%-32s S=%d %-24s %s %.3g %016llx %016llx\n", name, S, what, bits ? "differs" : "same", d,
                        (unsigned long long)h, (unsigned long long)w);
        }
        if (tol == 0)
                ck_assert_msg(!bits, "%s, %d shards: %s differs from the whole layer's in some bit (worst %.3g)",
                              name, S, what, d);
        else
                ck_assert_msg(d <= tol, "%s, %d shards: %s off by %.3g of its largest magnitude, tolerance %.3g",
                              name, S, what, d, tol);
}

/* splits: one letter per layer, n none, c column (gathered), C column (a row layer takes the
 * shard), r row, p pass, h hidden, k channel */
static void run_case(const char *name, const char *input, const char *layers, const char *splits, int S, int B,
                     int training, expect e)
{
        char path[64];
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, layers, NULL), 0);
        ck_assert_int_eq(dt_model_spec_load(&s, path, &d), 0);
        unlink(path);
        ck_assert_int_eq(dt_graph_build(&g, &s, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_int_eq((int)strlen(splits), g.n);
        g.input_grad = 1;
        dt_backend *be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc(&g, be, B), 0);
        dt_graph_init_params(&g, 5);
        for (size_t i = 0; i < g.nparams; i++) g.params[i] += 0.05f * urand();  /* biases away from 0 */
        size_t nx = (size_t)B * dt_shape_size(&g.input), ny = (size_t)B * dt_shape_size(&g.layers[g.n - 1].out);
        float *x = dt_falloc(nx), *r = dt_falloc(ny);
        for (size_t i = 0; i < nx; i++) x[i] = urand();
        for (size_t i = 0; i < ny; i++) r[i] = urand();
        dt_fwd_ctx c = { .training = training, .seed = 3, .step = 2, .pos0 = 5 };
        memcpy(g.act[0], x, nx * sizeof *x);
        shard_run whole = { &g, &c, r, B };
        run_shard(&whole);

        dt_tp_plan plan = { .n = g.n, .t = S, .pl = dt_calloc((size_t)g.n, sizeof *plan.pl) };
        for (int i = 0; i < g.n; i++) {
                static const char letters[] = "ncCrphk";
                static const dt_split how[] = { DT_SPLIT_NONE, DT_SPLIT_COLUMN, DT_SPLIT_COLUMN, DT_SPLIT_ROW,
                                                DT_SPLIT_PASS, DT_SPLIT_HIDDEN, DT_SPLIT_CHANNEL };
                const char *at = strchr(letters, splits[i]);
                ck_assert_ptr_nonnull(at);
                plan.pl[i] = (dt_placement){ .split = how[at - letters], .gather = splits[i] != 'C' };
        }
        group grp = { .S = S };
        pthread_barrier_init(&grp.bar, NULL, (unsigned)S);
        dt_tp tp[MAXS];
        dt_graph loc[MAXS];
        dt_backend *lbe[MAXS];
        shard_run run[MAXS];
        pthread_t th[MAXS];
        for (int k = 0; k < S; k++) {
                tp[k] = (dt_tp){ .size = S, .rank = k, .allreduce = sa_allreduce, .allgather_cols = sa_allgather_cols,
                                 .ud = &grp };
                dt_tp_graph(&g, &plan, &tp[k], &loc[k]);
                lbe[k] = dt_backend_cpu_new(1);
                ck_assert_int_eq(dt_graph_alloc(&loc[k], lbe[k], B), 0);
                dt_tp_take(&g, &loc[k], 1, g.params, loc[k].params);
                dt_tp_take(&g, &loc[k], 0, g.buffers, loc[k].buffers);
                memcpy(loc[k].act[0], x, nx * sizeof *x);
                run[k] = (shard_run){ &loc[k], &c, r, B };
                ck_assert_int_eq(pthread_create(&th[k], NULL, run_shard, &run[k]), 0);
        }
        for (int k = 0; k < S; k++) pthread_join(th[k], NULL);
        for (int k = 0; k < S; k++) {
                float *want = dt_falloc(loc[k].nparams ? loc[k].nparams : 1);
                dt_tp_take(&g, &loc[k], 1, g.grads, want);
                check_one("the output", name, S, g.act[g.n], loc[k].act[g.n], ny, e.y);
                check_one("the input gradient", name, S, g.dact[0], loc[k].dact[0], nx, e.dx);
                check_one("the parameter gradients", name, S, want, loc[k].grads, loc[k].nparams, e.dparam);
                free(want);
        }
        for (int k = 0; k < S; k++) {
                dt_graph_free(&loc[k]);
                dt_backend_free(lbe[k]);
        }
        pthread_barrier_destroy(&grp.bar);
        dt_tp_plan_free(&plan);
        free(x);
        free(r);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
}

/* Whether the CPU backend's GEMM gives a column split of z = x W^T (R x O, K deep) into S parts,
 * and the matching row split of dW = dz^T x, the whole product's bits. */
static int gemm_splits_exact(int R, int O, int K, int S)
{
        dt_backend *be = dt_backend_cpu_new(1);
        int o = O / S, same = 1;
        float *x = dt_falloc((size_t)R * K), *w = dt_falloc((size_t)O * K), *dz = dt_falloc((size_t)R * O);
        float *z = dt_falloc((size_t)R * O), *zs = dt_falloc((size_t)R * O);
        float *dw = dt_falloc((size_t)O * K), *dws = dt_falloc((size_t)O * K);
        for (int i = 0; i < R * K; i++) x[i] = urand();
        for (int i = 0; i < O * K; i++) w[i] = urand();
        for (int i = 0; i < R * O; i++) dz[i] = urand();
        be->ops->gemm(be, 0, 1, R, O, K, 1.0f, x, K, w, K, 0.0f, z, O);
        be->ops->gemm(be, 1, 0, O, K, R, 1.0f, dz, O, x, K, 0.0f, dw, K);
        for (int k = 0; k < S; k++) {
                be->ops->gemm(be, 0, 1, R, o, K, 1.0f, x, K, w + (size_t)k * o * K, K, 0.0f, zs + (size_t)k * o, O);
                be->ops->gemm(be, 1, 0, o, K, R, 1.0f, dz + (size_t)k * o, O, x, K, 0.0f, dws + (size_t)k * o * K, K);
        }
        same = !memcmp(z, zs, (size_t)R * O * sizeof *z) && !memcmp(dw, dws, (size_t)o * S * K * sizeof *dw);
        free(x), free(w), free(dz), free(z), free(zs), free(dw), free(dws);
        dt_backend_free(be);
        return same;
}

/* A sum split across the shards and added back by the all-reduce rounds differently from the
 * whole layer's one sum: a few float epsilons of each term's size, which grow through a
 * recurrent layer's steps. 1e-5 of the largest magnitude is far above that and far below what a
 * wrong shard offset, a missing term or a member counted twice gives (of order 1). */
#define REORDER 1e-5

static void both(const char *name, const char *input, const char *layers, const char *splits, int B, int training,
                 expect e)
{
        for (int S = 2; S <= 3; S++) run_case(name, input, layers, splits, S, B, training, e);
}

/* fc, column split gathered: each output unit is the whole layer's dot product (bitwise where the
 * GEMM library's are); dx sums the shards' dz W over their units (reordered). */
START_TEST(fc_column)
{
        double e1 = gemm_splits_exact(4, 12, 10, 2) && gemm_splits_exact(4, 12, 10, 3) ? 0 : REORDER;
        double e2 = gemm_splits_exact(6, 6, 10, 2) && gemm_splits_exact(6, 6, 10, 3) ? 0 : REORDER;
        if (e1 > 0 || e2 > 0)
                fprintf(stderr, "test_split: this GEMM library's column splits change bits; fc column held to %g\n",
                        REORDER);
        both("fc column", "[10]", "  - {type: fc, name: f, units: 12, activation: tanh}\n", "c", 4, 0,
             (expect){ e1, REORDER, e1 });
        both("fc column gelu (2,10)", "[2, 10]", "  - {type: fc, name: f, units: 6, activation: gelu}\n", "c", 3, 0,
             (expect){ e2, REORDER, e2 });
}
END_TEST

/* fc column-row pair with activation and dropout on the shard between: the row layer's x W^T is
 * summed over the shards' inputs (reordered), and so is everything after it in forward and
 * before it in backward; dropout's mask is the whole one's columns. */
START_TEST(fc_pair)
{
        both("fc column-row", "[8]",
             "  - {type: fc, name: a, units: 12, activation: relu}\n"
             "  - {type: activation, function: tanh}\n"
             "  - {type: dropout, rate: 0.3}\n"
             "  - {type: fc, name: b, units: 5}\n", "Cppr", 4, 1, (expect){ REORDER, REORDER, REORDER });
        both("fc column-row no bias", "[3, 8]",
             "  - {type: fc, name: a, units: 6, bias: false}\n"
             "  - {type: fc, name: b, units: 4, activation: sigmoid, bias: false}\n", "Cr", 2, 0,
             (expect){ REORDER, REORDER, REORDER });
}
END_TEST

/* conv by output channel: each channel is the whole layer's (bitwise); dx reordered */
START_TEST(conv_channel)
{
        both("conv channel", "[2, 6, 6]",
             "  - {type: conv, name: c, filters: 6, kernel: 3, padding: 1, activation: relu}\n", "k", 3, 0,
             (expect){ 0, REORDER, 0 });
        both("conv channel 1x1 gelu", "[4, 5, 5]",
             "  - {type: conv, name: c, filters: 6, kernel: 1, activation: gelu, bias: false}\n", "k", 2, 0,
             (expect){ 0, REORDER, 0 });
}
END_TEST

/* Recurrent layers by hidden unit: forward, each unit's gates are the whole layer's dot products
 * and its cell the same code on the same lanes when H and H/t are both multiples of the cell's
 * vector width (16) or both below it (bitwise); backward, dh_{t-1} sums dG_t W_hh over the
 * shards' units and dx over their gates (reordered), and every parameter gradient reads them. */
static const expect rec = { 0, REORDER, REORDER };

START_TEST(rnn_hidden)
{
        both("rnn", "[4, 5]", "  - {type: rnn, name: r, hidden: 6}\n", "h", 3, 0, rec);
        both("rnn relu 2 layers seq bptt", "[5, 3]",
             "  - {type: rnn, name: r, hidden: 6, layers: 2, nonlinearity: relu, return_sequences: true, bptt: 2}\n",
             "h", 2, 0, rec);
        both("rnn 96", "[3, 4]", "  - {type: rnn, name: r, hidden: 96, bias: false}\n", "h", 2, 0,
             (expect){ REORDER, REORDER, REORDER });     /* dt_stepgemm whole, the gemm split: as lstm 96 */
}
END_TEST

START_TEST(gru_hidden)
{
        both("gru", "[4, 5]", "  - {type: gru, name: r, hidden: 6}\n", "h", 3, 0, rec);
        both("gru 2 layers seq bptt", "[5, 3]",
             "  - {type: gru, name: r, hidden: 6, layers: 2, return_sequences: true, bptt: 2, bias: false}\n",
             "h", 2, 0, rec);
        both("gru 96", "[3, 4]", "  - {type: gru, name: r, hidden: 96}\n", "h", 2, 0,
             (expect){ REORDER, REORDER, REORDER });     /* as lstm 96 */
}
END_TEST

/* lstm (and rnn, gru): unsplit, the step GEMMs of 16-multiple sizes run through dt_stepgemm (AVX2
 * and AVX-512), whose sums may round apart from the backend's gemm that a shard uses: at H = 96 the
 * output is compared within the tolerance, at H = 6 (the backend's gemm both ways) bit for bit. */
START_TEST(lstm_hidden)
{
        both("lstm", "[4, 5]", "  - {type: lstm, name: r, hidden: 6, forget_bias: 1}\n", "h", 3, 0, rec);
        both("lstm 2 layers seq bptt", "[5, 3]",
             "  - {type: lstm, name: r, hidden: 6, layers: 2, return_sequences: true, bptt: 2}\n", "h", 2, 0, rec);
        both("lstm 96", "[3, 4]", "  - {type: lstm, name: r, hidden: 96}\n", "h", 2, 0,
             (expect){ REORDER, REORDER, REORDER });
}
END_TEST

/* split layers among whole ones: what crosses between them is whole on every shard */
START_TEST(mixed)
{
        both("conv, pool, fc pair", "[1, 6, 6]",
             "  - {type: conv, name: c, filters: 6, kernel: 3, activation: relu}\n"
             "  - {type: maxpool, kernel: 2}\n"
             "  - {type: flatten}\n"
             "  - {type: fc, name: a, units: 6, activation: relu}\n"
             "  - {type: fc, name: b, units: 3}\n", "knnCr", 3, 0, (expect){ REORDER, REORDER, REORDER });
        both("lstm then fc column", "[4, 3]",
             "  - {type: lstm, name: r, hidden: 6, return_sequences: true}\n"
             "  - {type: fc, name: o, units: 6}\n", "hc", 2, 0, (expect){ 0, REORDER, REORDER });
}
END_TEST

int main(void)
{
        Suite *s = suite_create("split");
        TCase *tc = tcase_create("split");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, fc_column);
        tcase_add_test(tc, fc_pair);
        tcase_add_test(tc, conv_channel);
        tcase_add_test(tc, rnn_hidden);
        tcase_add_test(tc, gru_hidden);
        tcase_add_test(tc, lstm_hidden);
        tcase_add_test(tc, mixed);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
