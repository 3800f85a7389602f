/* tests/unit/test_conv_paths.c - the cpu backend's convolution paths (im2col + SGEMM and oneDNN)
 * against each other and against finite differences: forward, dx and the parameter gradients over
 * stride, padding (symmetric, per side, 'same', more than a window needs), dilation, groups,
 * depthwise, 1x1, odd sizes, fused and separate activations, batch 1, fewer samples than threads,
 * 1 and 2 threads, several batch sizes through one layer (one set of primitives each), oneDNN's
 * calls in chunks of 1, a few or all of a thread's samples, the split backward bit for bit, and
 * oneDNN's results the same from run to run; the direct kernel of one input channel (auto) likewise
 * against im2col and finite differences on each vector path. In a build without oneDNN
 * the oneDNN halves are skipped with a note; in a build with it, oneDNN failing to load fails. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config.h"
#include "gradcheck.h"
#include "backend/onednn.h"
#include "graph/graph.h"
#include "util/common.h"
#include "util/cpu.h"

/* Whether the oneDNN halves run: fails the test where oneDNN is built in but cannot load. */
static int have_onednn(void)
{
        const char *why = "";
        int ok = dt_onednn_available(&why);
#ifdef DT_HAVE_ONEDNN
        ck_assert_msg(ok, "built with oneDNN but it does not load: %s", why);
#else
        static int said;
        if (!ok && !said++) fprintf(stderr, "note: %s; the oneDNN checks are skipped\n", why);
#endif
        return ok;
}

/* ---- finite differences, each path forced ---- */

static const char *const gc_kinds[][2] = {
        { "[2, 5, 5]", "{type: conv, filters: 3, kernel: 3}" },
        { "[3, 7, 6]", "{type: conv, filters: 4, kernel: 3, stride: 2, padding: 1}" },
        { "[2, 6, 5]", "{type: conv, filters: 2, kernel: 4, padding: same}" },
        { "[1, 6, 6]", "{type: conv, filters: 2, kernel: [2, 3], dilation: [3, 2], padding: same}" },
        { "[4, 5, 5]", "{type: conv, filters: 6, kernel: 3, groups: 2, padding: 1, activation: gelu}" },
        { "[3, 5, 5]", "{type: conv, filters: 3, kernel: 3, groups: 3, padding: 1, activation: tanh}" },
        { "[4, 3, 3]", "{type: conv, filters: 5, kernel: 1, bias: false}" },
        { "[3, 5, 5]", "{type: conv, filters: 2, kernel: 1, stride: 2}" },
        { "[2, 4, 5]", "{type: conv, filters: 2, kernel: 3, stride: 2, padding: [2, 1]}" },
        { "[2, 4, 4]", "{type: conv, filters: 2, kernel: 3, activation: relu}" },
        { "[1, 7, 5]", "{type: conv, filters: 4, kernel: 3, padding: same, activation: sigmoid}" },
};
#define NGC (sizeof gc_kinds / sizeof *gc_kinds)

/* oneDNN's budget for a call's samples: the default (all of these small batches in one call),
 * 1 byte (a call per sample) and 64 KiB (a few samples a call for the larger shapes) */
static const size_t budgets[] = { 0, 1, 64 << 10 };
#define NBUDGETS (sizeof budgets / sizeof *budgets)

static void gradcheck_path(int conv, size_t budget)
{
        int keep = dt_test_conv;
        size_t keep_b = dt_onednn_chunk_bytes;
        dt_test_conv = conv;
        if (budget) dt_onednn_chunk_bytes = budget;
        for (size_t k = 0; k < NGC; k++) {
                for (int B = 1; B <= 3; B += 2) {
                        double w = dt_gradcheck(gc_kinds[k][0], gc_kinds[k][1], B, 1);
                        ck_assert_msg(w <= 1.0, "%s on %s, B %d, conv %s: worst scaled error %g", gc_kinds[k][1],
                                      gc_kinds[k][0], B, dt_conv_algo_names[conv], w);
                }
                double w = dt_gradcheck_split(gc_kinds[k][0], gc_kinds[k][1], 2, 1);
                ck_assert_msg(w <= 1.0, "%s, split backward, conv %s: worst scaled error %g", gc_kinds[k][1],
                              dt_conv_algo_names[conv], w);
        }
        dt_test_conv = keep;
        dt_onednn_chunk_bytes = keep_b;
}

START_TEST(gradcheck_im2col) { gradcheck_path(DT_CONV_IM2COL, 0); } END_TEST
START_TEST(gradcheck_onednn)
{
        if (!have_onednn()) return;
        gradcheck_path(DT_CONV_ONEDNN, 0);
        gradcheck_path(DT_CONV_ONEDNN, 1);
}
END_TEST

/* zb-h1's halves are the combined backward bit for bit through oneDNN too (1 and 2 threads) */
START_TEST(split_same_onednn)
{
        if (!have_onednn()) return;
        int keep = dt_test_conv;
        size_t keep_b = dt_onednn_chunk_bytes;
        dt_test_conv = DT_CONV_ONEDNN;
        for (size_t b = 0; b < 2; b++) {
                dt_onednn_chunk_bytes = budgets[b] ? budgets[b] : keep_b;
                for (size_t k = 0; k < NGC; k++) {
                        DT_SPLIT_SAME(gc_kinds[k][0], gc_kinds[k][1], 5, 1);
                        DT_SPLIT_SAME(gc_kinds[k][0], gc_kinds[k][1], 7, 2);
                }
        }
        dt_test_conv = keep;
        dt_onednn_chunk_bytes = keep_b;
}
END_TEST

/* ---- the two paths on the same layer ---- */

typedef struct one {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        dt_layer *l;
} one;

static void build(one *t, const char *input, const char *layer, int B, int threads, int conv)
{
        char path[64], items[512];
        snprintf(items, sizeof items, "  - %s", layer);
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, items, NULL), 0);
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(&t->s, path, &d);
        if (rc == 0) rc = dt_graph_build(&t->g, &t->s, &d);
        if (rc < 0 || d.n) dt_diag_print(&d, stderr);
        ck_assert(rc == 0 && d.n == 0);
        unlink(path);
        t->be = dt_backend_cpu_new(threads);
        t->be->conv = conv;
        ck_assert_int_eq(dt_graph_alloc(&t->g, t->be, B), 0);
        dt_graph_init_params(&t->g, 1);
        t->l = &t->g.layers[0];
        /* the path asked for is the path taken (auto: the direct kernel, which it is asked for here) */
        const char *impl = t->l->ops->impl(t->l, NULL);
        const char *want = conv == DT_CONV_ONEDNN ? "onednn" : conv == DT_CONV_AUTO ? "direct" : "im2col";
        ck_assert_msg(impl && !strcmp(impl, want), "%s took %s, not %s", layer, impl ? impl : "(none)", want);
}

static void destroy(one *t)
{
        dt_graph_free(&t->g);
        dt_backend_free(t->be);
        dt_model_spec_free(&t->s);
}

/* forward (training), then backward with dx wanted; out: y, dx, the gradients */
static void run(one *t, const float *x, const float *dy, int B, float *y, float *dx, float *grads)
{
        dt_fwd_ctx c = { .training = 1 };
        size_t nx = (size_t)B * dt_shape_size(&t->l->in), ny = (size_t)B * dt_shape_size(&t->l->out);
        float *dyc = dt_falloc(ny);
        memcpy(t->g.act[0], x, nx * sizeof *x);
        t->l->ops->forward(t->l, &c, t->g.act[0], t->g.act[1], B);
        memcpy(y, t->g.act[1], ny * sizeof *y);
        memcpy(dyc, dy, ny * sizeof *dy);
        memset(t->g.grads, 0, t->g.nparams * sizeof *t->g.grads);
        t->l->ops->backward(t->l, &c, t->g.act[0], t->g.act[1], dyc, dx, B);
        memcpy(grads, t->g.grads, t->g.nparams * sizeof *grads);
        free(dyc);
}

/* |a - b| within a few float roundings of the larger terms: the paths sum in different orders.
 * A wrong index or a missed term is off by O(1) of these values. */
static void close_enough(const float *a, const float *b, size_t n, const char *what, const char *layer,
                         const char *input, int B, int threads)
{
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(fabsf(a[i] - b[i]) <= 1e-4f * fmaxf(1.0f, fabsf(b[i])),
                              "%s on %s, B %d, %d thread(s): %s[%zu] oneDNN or direct %.9g, im2col %.9g", layer, input, B,
                              threads, what, i, a[i], b[i]);
}

static const char *const par_kinds[][2] = {
        { "[1, 28, 28]", "{type: conv, filters: 32, kernel: 3, padding: same, activation: relu}" },   /* cnn's conv1 */
        { "[32, 14, 14]", "{type: conv, filters: 64, kernel: 3, padding: same, bias: false}" },       /* cnn-bn's conv2 */
        { "[6, 14, 14]", "{type: conv, filters: 16, kernel: 5, activation: relu}" },                  /* lenet's conv2 */
        { "[16, 8, 8]", "{type: conv, filters: 32, kernel: 3, stride: 2, padding: 1, bias: false}" }, /* resnet's */
        { "[16, 8, 8]", "{type: conv, filters: 32, kernel: 1, stride: 2, bias: false}" },             /* its proj */
        { "[20, 9, 7]", "{type: conv, filters: 24, kernel: 3, padding: 1, activation: tanh}" },       /* odd, not x16 */
        { "[3, 9, 7]", "{type: conv, filters: 5, kernel: 3, stride: 2, padding: 1}" },
        { "[4, 7, 7]", "{type: conv, filters: 6, kernel: 1, activation: leaky_relu}" },
        { "[8, 6, 6]", "{type: conv, filters: 8, kernel: 3, groups: 2, padding: 1, activation: gelu}" },
        { "[16, 6, 6]", "{type: conv, filters: 16, kernel: 3, groups: 16, padding: 1}" },             /* depthwise */
        { "[2, 11, 9]", "{type: conv, filters: 3, kernel: [2, 3], dilation: [3, 2], padding: same}" },
        { "[2, 4, 5]", "{type: conv, filters: 2, kernel: 3, stride: 2, padding: [2, 1]}" },
        { "[2, 8, 8]", "{type: conv, filters: 3, kernel: 3, stride: [2, 1], padding: [0, 2], activation: sigmoid}" },
};
#define NPAR (sizeof par_kinds / sizeof *par_kinds)

/* One input channel: auto takes the direct kernel (convdirect.h) */
static const char *const direct_kinds[][2] = {
        { "[1, 28, 28]", "{type: conv, filters: 32, kernel: 3, padding: same, activation: relu}" },   /* cnn's conv1 */
        { "[1, 28, 28]", "{type: conv, filters: 6, kernel: 5, padding: 2, activation: relu}" },       /* lenet's */
        { "[1, 28, 28]", "{type: conv, filters: 32, kernel: 3, padding: same, bias: false}" },        /* cnn-bn's */
        { "[1, 11, 9]", "{type: conv, filters: 3, kernel: [2, 3], dilation: [3, 2], padding: same}" },
        { "[1, 9, 19]", "{type: conv, filters: 13, kernel: 3, padding: 3, activation: gelu}" },      /* dx's frame crops */
        { "[1, 6, 17]", "{type: conv, filters: 5, kernel: [2, 4], padding: [1, 2], activation: sigmoid}" },
};
#define NDIRECT (sizeof direct_kinds / sizeof *direct_kinds)

/* Each kind at batch Bmax, then (same layers, same primitives' owner) at smaller batches, on 1 and
 * 2 threads, for each chunk budget: oneDNN (direct: the direct kernel, auto) against im2col. */
static void paths_agree(size_t k0, size_t k1, int direct)
{
        if (!direct && !have_onednn()) return;
        static const int Bs[] = { 5, 1, 2, 3 };         /* 1 and 2 below 2 threads' one sample each */
        size_t keep_b = dt_onednn_chunk_bytes;
        const char *const (*kinds)[2] = direct ? direct_kinds : par_kinds;
        const size_t nk = direct ? NDIRECT : NPAR;
        for (size_t bu = 0; bu < (direct ? 1 : NBUDGETS); bu++)
        for (size_t k = k0; k < k1 && k < nk; k++)
                for (int threads = 1; threads <= 2; threads++) {
                        dt_onednn_chunk_bytes = budgets[bu] ? budgets[bu] : keep_b;
                        one a, b;
                        const int Bmax = Bs[0];
                        build(&a, kinds[k][0], kinds[k][1], Bmax, threads, direct ? DT_CONV_AUTO : DT_CONV_ONEDNN);
                        build(&b, kinds[k][0], kinds[k][1], Bmax, threads, DT_CONV_IM2COL);
                        ck_assert_int_eq((int)a.g.nparams, (int)b.g.nparams);
                        size_t sx = dt_shape_size(&a.l->in), sy = dt_shape_size(&a.l->out), np = a.g.nparams;
                        float *x = dt_falloc(Bmax * sx), *dy = dt_falloc(Bmax * sy);
                        for (size_t i = 0; i < Bmax * sx; i++) x[i] = (float)sin(0.37 * (double)i + 0.1);
                        for (size_t i = 0; i < Bmax * sy; i++) dy[i] = (float)cos(0.71 * (double)i);
                        float *y[2], *dx[2], *gr[2];
                        for (int p = 0; p < 2; p++) {
                                y[p] = dt_falloc(Bmax * sy);
                                dx[p] = dt_falloc(Bmax * sx);
                                gr[p] = dt_falloc(np);
                        }
                        for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++) {
                                int B = Bs[bi];
                                run(&a, x, dy, B, y[0], dx[0], gr[0]);
                                run(&b, x, dy, B, y[1], dx[1], gr[1]);
                                close_enough(y[0], y[1], B * sy, "y", kinds[k][1], kinds[k][0], B, threads);
                                close_enough(dx[0], dx[1], B * sx, "dx", kinds[k][1], kinds[k][0], B, threads);
                                close_enough(gr[0], gr[1], np, "gradient", kinds[k][1], kinds[k][0], B, threads);
                        }
                        for (int p = 0; p < 2; p++) {
                                free(y[p]);
                                free(dx[p]);
                                free(gr[p]);
                        }
                        free(x);
                        free(dy);
                        destroy(&a);
                        destroy(&b);
                }
        dt_onednn_chunk_bytes = keep_b;
}

START_TEST(paths_agree_first) { paths_agree(0, 6, 0); } END_TEST
START_TEST(paths_agree_rest) { paths_agree(6, NPAR, 0); } END_TEST

/* The direct kernel, on each vector path this CPU runs (generic C is never taken): against im2col
 * to rounding (it sums in another order), against finite differences (the small kinds), and zb-h1's
 * halves against the combined backward bit for bit */
START_TEST(direct_paths)
{
        for (int p = DT_ISA_AVX2; p <= (int)dt_cpu_best(); p++) {
                ck_assert_int_eq(dt_cpu_force((dt_isa)p), 0);
                paths_agree(0, NDIRECT, 1);
                int keep = dt_test_conv;
                dt_test_conv = DT_CONV_AUTO;
                for (size_t k = 3; k < NDIRECT; k++) {
                        for (int B = 1; B <= 3; B += 2) {
                                double w = dt_gradcheck(direct_kinds[k][0], direct_kinds[k][1], B, 1);
                                ck_assert_msg(w <= 1.0, "%s, B %d, direct on %s: worst scaled error %g", direct_kinds[k][1],
                                              B, dt_isa_name((dt_isa)p), w);
                        }
                        DT_SPLIT_SAME(direct_kinds[k][0], direct_kinds[k][1], 5, 1);
                        DT_SPLIT_SAME(direct_kinds[k][0], direct_kinds[k][1], 7, 2);
                }
                dt_test_conv = keep;
        }
        dt_cpu_force(dt_cpu_best());
}
END_TEST

/* The first layer (dx not wanted) takes the backward-weights primitive alone, and the results of
 * oneDNN do not change from one run to the next: y and the gradients bit for bit. */
START_TEST(onednn_repeatable)
{
        if (!have_onednn()) return;
        const char *in = "[1, 28, 28]", *layer = "{type: conv, filters: 32, kernel: 3, padding: same, activation: relu}";
        const int B = 6;
        float *out[2][2];
        size_t n[2];
        for (int r = 0; r < 2; r++) {
                one t;
                build(&t, in, layer, B, 2, DT_CONV_ONEDNN);
                size_t nx = B * dt_shape_size(&t.l->in), ny = B * dt_shape_size(&t.l->out);
                n[0] = ny;
                n[1] = t.g.nparams;
                for (size_t i = 0; i < nx; i++) t.g.act[0][i] = (float)sin(0.11 * (double)i);
                dt_fwd_ctx c = { .training = 1 };
                t.l->ops->forward(t.l, &c, t.g.act[0], t.g.act[1], B);
                float *dy = dt_falloc(ny);
                for (size_t i = 0; i < ny; i++) dy[i] = (float)cos(0.3 * (double)i);
                memset(t.g.grads, 0, t.g.nparams * sizeof *t.g.grads);
                t.l->ops->backward(t.l, &c, t.g.act[0], t.g.act[1], dy, NULL, B);
                out[r][0] = dt_falloc(ny);
                out[r][1] = dt_falloc(t.g.nparams);
                memcpy(out[r][0], t.g.act[1], ny * sizeof(float));
                memcpy(out[r][1], t.g.grads, t.g.nparams * sizeof(float));
                free(dy);
                destroy(&t);
        }
        ck_assert_msg(!memcmp(out[0][0], out[1][0], n[0] * sizeof(float)), "y differs between two runs");
        ck_assert_msg(!memcmp(out[0][1], out[1][1], n[1] * sizeof(float)), "gradients differ between two runs");
        for (int r = 0; r < 2; r++) {
                free(out[r][0]);
                free(out[r][1]);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("conv_paths");
        TCase *tc = tcase_create("paths");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, gradcheck_im2col);
        tcase_add_test(tc, gradcheck_onednn);
        tcase_add_test(tc, split_same_onednn);
        tcase_add_test(tc, paths_agree_first);
        tcase_add_test(tc, paths_agree_rest);
        tcase_add_test(tc, onednn_repeatable);
        tcase_add_test(tc, direct_paths);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}
