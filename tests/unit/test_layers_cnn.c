/* tests/unit/test_layers_cnn.c - gradient checks for conv, pooling and batch norm over every option
 * that changes the math, and forward/backward values computed by hand. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "util/common.h"

/* conv.c: scratch cap in floats (lowered here to force several im2col chunks per batch) */
extern size_t dt_conv_scratch_limit;
/* conv.c: nonzero makes im2col/col2im go row by row where the span and register forms apply */
extern int dt_conv_plain_rows;
/* pool.c: nonzero sends 2x2 stride-2 max pooling through the general loops */
extern int dt_pool_general_only;
/* batchnorm.c: nonzero keeps the plain loops where the AVX-512 ones would run */
extern int dt_bn_plain;

#define GC(input, layer, B, training) do { \
        double w = dt_gradcheck(input, layer, B, training); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layer, w); } while (0)

/* ---- conv ---- */
START_TEST(conv_plain) { GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3}", 2, 1); } END_TEST
START_TEST(conv_stride2) { GC("[2, 7, 7]", "{type: conv, filters: 3, kernel: 3, stride: 2}", 2, 1); } END_TEST
START_TEST(conv_pad1) { GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, padding: 1}", 2, 1); } END_TEST
START_TEST(conv_same_even) { GC("[2, 6, 5]", "{type: conv, filters: 2, kernel: 4, padding: same}", 2, 1); } END_TEST
START_TEST(conv_same_dil) { GC("[1, 6, 6]", "{type: conv, filters: 2, kernel: [2, 3], dilation: [3, 2], padding: same}", 2, 1); } END_TEST
START_TEST(conv_dilation2) { GC("[2, 7, 7]", "{type: conv, filters: 3, kernel: 3, dilation: 2}", 2, 1); } END_TEST
START_TEST(conv_groups2) { GC("[4, 5, 5]", "{type: conv, filters: 6, kernel: 3, groups: 2, padding: 1}", 2, 1); } END_TEST
START_TEST(conv_depthwise) { GC("[3, 5, 5]", "{type: conv, filters: 3, kernel: 3, groups: 3, padding: 1}", 2, 1); } END_TEST
START_TEST(conv_nobias) { GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, bias: false}", 2, 1); } END_TEST
/* few outputs: a random pre-activation within the step of 0 would straddle relu's kink */
START_TEST(conv_relu) { GC("[2, 4, 4]", "{type: conv, filters: 2, kernel: 3, activation: relu}", 2, 1); } END_TEST
START_TEST(conv_gelu) { GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, activation: gelu}", 2, 1); } END_TEST
START_TEST(conv_1x1) { GC("[4, 3, 3]", "{type: conv, filters: 5, kernel: 1}", 2, 1); } END_TEST
START_TEST(conv_1x1_groups) { GC("[4, 3, 3]", "{type: conv, filters: 4, kernel: 1, groups: 2, activation: tanh}", 2, 1); } END_TEST
START_TEST(conv_1x1_stride) { GC("[3, 5, 5]", "{type: conv, filters: 2, kernel: 1, stride: 2}", 2, 1); } END_TEST
START_TEST(conv_nonsquare) { GC("[2, 6, 7]", "{type: conv, filters: 3, kernel: [2, 3], stride: [2, 1]}", 2, 1); } END_TEST
/* rows wider than 16 floats (two masked vectors in im2col and col2im) and a bias sum over P = 60
 * (full 16-float blocks and a tail) */
START_TEST(conv_wide_rows) { GC("[2, 3, 20]", "{type: conv, filters: 2, kernel: [2, 3], padding: 1}", 2, 1); } END_TEST
START_TEST(conv_pad_pair) { GC("[2, 4, 5]", "{type: conv, filters: 2, kernel: 3, stride: 2, padding: [2, 1]}", 2, 1); } END_TEST

/* one sample per chunk: (C*KH*KW + F) * P = (2*9 + 3) * 9 = 189 floats per sample */
START_TEST(conv_chunk1)
{
        size_t keep = dt_conv_scratch_limit;
        dt_conv_scratch_limit = 189;
        GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, activation: sigmoid}", 3, 1);
        dt_conv_scratch_limit = keep;
}
END_TEST

/* chunks of 2, 2, 1: the reorder path, the recompute path and the cached last chunk;
 * with padding 1, P = 25 and a sample needs (2*9 + 3) * 25 = 525 floats */
START_TEST(conv_chunk2)
{
        size_t keep = dt_conv_scratch_limit;
        dt_conv_scratch_limit = 2 * 525 + 5;
        GC("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, padding: 1}", 5, 1);
        dt_conv_scratch_limit = keep;
}
END_TEST

/* ---- zb-h1's split backward: the halves are the combined backward bit for bit over the paths
 * that matter (im2col chunks with the cached last one, the 1x1 direct path, groups, the z kept for
 * gelu, 2 threads' partial sums), and pass the finite-difference check on their own ---- */
static const char *const conv_kinds[] = {
        "{type: conv, filters: 4, kernel: 3, padding: 1, activation: relu}",
        "{type: conv, filters: 3, kernel: 3, stride: 2, bias: false}",
        "{type: conv, filters: 6, kernel: 3, groups: 2, activation: gelu}",
        "{type: conv, filters: 5, kernel: 1, activation: tanh}",
        "{type: conv, filters: 4, kernel: 1, groups: 2}",
};

START_TEST(conv_split_same)
{
        size_t keep = dt_conv_scratch_limit;
        /* the default (one chunk per thread's samples), then 1 and 2 samples per chunk for the
         * first kind ((4*9 + 4) * 36 = 1440 floats a sample), 2 and 4 for the third (672) */
        const size_t limits[] = { keep, 1500, 2 * 1440 + 10 };
        for (int lim = 0; lim < 3; lim++) {
                dt_conv_scratch_limit = limits[lim];
                for (size_t i = 0; i < sizeof conv_kinds / sizeof *conv_kinds; i++) {
                        DT_SPLIT_SAME("[4, 6, 6]", conv_kinds[i], 5, 1);
                        DT_SPLIT_SAME("[4, 6, 6]", conv_kinds[i], 7, 2);
                }
        }
        dt_conv_scratch_limit = keep;
}
END_TEST

#define GCS(input, layer, B) do { \
        double w = dt_gradcheck_split(input, layer, B, 1); \
        ck_assert_msg(w <= 1.0, "%s (split): worst scaled error %g", layer, w); } while (0)
START_TEST(conv_split_gradcheck)
{
        size_t keep = dt_conv_scratch_limit;
        GCS("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, activation: gelu}", 2);
        GCS("[4, 5, 5]", "{type: conv, filters: 6, kernel: 3, groups: 2, padding: 1}", 2);
        GCS("[4, 3, 3]", "{type: conv, filters: 4, kernel: 1, groups: 2, activation: tanh}", 2);
        dt_conv_scratch_limit = 2 * 525 + 5;    /* chunks of 2, 2, 1 (see conv_chunk2) */
        GCS("[2, 5, 5]", "{type: conv, filters: 3, kernel: 3, padding: 1, activation: sigmoid}", 5);
        dt_conv_scratch_limit = keep;
}
END_TEST

/* ---- pooling ---- */
START_TEST(avgpool_pad) { GC("[2, 5, 5]", "{type: avgpool, kernel: 3, stride: 2, padding: 1}", 2, 1); } END_TEST
START_TEST(avgpool_2x2) { GC("[2, 4, 4]", "{type: avgpool, kernel: 2}", 2, 1); } END_TEST
START_TEST(global_avgpool) { GC("[3, 3, 4]", "{type: global_avgpool}", 2, 1); } END_TEST

/* ---- batch norm ---- */
START_TEST(bn_train_chw) { GC("[2, 3, 3]", "{type: batchnorm}", 3, 1); } END_TEST
START_TEST(bn_train_flat) { GC("[4]", "{type: batchnorm}", 5, 1); } END_TEST
START_TEST(bn_train_noaffine) { GC("[2, 2, 3]", "{type: batchnorm, affine: false}", 3, 1); } END_TEST
START_TEST(bn_eval_chw) { GC("[2, 3, 3]", "{type: batchnorm}", 3, 0); } END_TEST
START_TEST(bn_eval_flat) { GC("[4]", "{type: batchnorm, eps: 0.001}", 5, 0); } END_TEST
/* a fused activation: its derivative recomputed from x in backward */
START_TEST(bn_act_relu) { GC("[2, 3, 3]", "{type: batchnorm, activation: relu}", 3, 1); } END_TEST
START_TEST(bn_act_tanh) { GC("[2, 3, 3]", "{type: batchnorm, activation: tanh}", 3, 1); } END_TEST
START_TEST(bn_act_gelu_flat) { GC("[4]", "{type: batchnorm, activation: gelu}", 5, 1); } END_TEST
START_TEST(bn_act_sigmoid_eval) { GC("[2, 3, 3]", "{type: batchnorm, activation: sigmoid}", 3, 0); } END_TEST
START_TEST(bn_act_leaky_noaffine) { GC("[2, 2, 3]", "{type: batchnorm, affine: false, activation: leaky_relu, alpha: 0.1}", 3, 1); } END_TEST

/* ---- known values ---- */

/* A one-layer graph over the CPU backend, for tests that set parameters by hand. */
typedef struct {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        dt_layer *l;
} one_layer;

static void build_t(one_layer *t, const char *input, const char *layer, int B, int threads);
static void build(one_layer *t, const char *input, const char *layer, int B) { build_t(t, input, layer, B, 1); }

static void build_t(one_layer *t, const char *input, const char *layer, int B, int threads)
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
        ck_assert_int_eq(dt_graph_alloc(&t->g, t->be, B), 0);
        dt_graph_init_params(&t->g, 1);
        t->l = &t->g.layers[0];
}

static void destroy(one_layer *t)
{
        dt_graph_free(&t->g);
        dt_backend_free(t->be);
        dt_model_spec_free(&t->s);
}

static void run(one_layer *t, const float *x, float *y, float *dy, float *dx, int B, int training)
{
        dt_fwd_ctx c = { .training = training };
        size_t nx = (size_t)B * dt_shape_size(&t->l->in), ny = (size_t)B * dt_shape_size(&t->l->out);
        memcpy(t->g.act[0], x, nx * sizeof *x);
        t->l->ops->forward(t->l, &c, t->g.act[0], t->g.act[1], B);
        memcpy(y, t->g.act[1], ny * sizeof *y);
        if (!dy) return;
        memset(t->g.grads, 0, t->g.nparams * sizeof *t->g.grads);
        t->l->ops->backward(t->l, &c, t->g.act[0], t->g.act[1], dy, dx, B);
}

/* Input-gradient check for layers without parameters whose forward is piecewise linear (max
 * pooling): the inputs are distinct values 0.05 apart in shuffled order, so a step of 1e-3 never
 * crosses a tie and central differences are exact up to rounding. (dt_gradcheck draws random
 * inputs, where two values of a window may lie closer than its step.) */
static double pool_gradcheck(const char *input, const char *layer, int B)
{
        one_layer t;
        build(&t, input, layer, B);
        size_t nx = (size_t)B * dt_shape_size(&t.l->in), ny = (size_t)B * dt_shape_size(&t.l->out);
        float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *r = malloc(ny * sizeof *r);
        float *dy = malloc(ny * sizeof *dy), *dx = malloc(nx * sizeof *dx);
        uint64_t rs = 0x2545F4914F6CDD1Dull;
        for (size_t i = 0; i < nx; i++) x[i] = (float)(0.05 * (double)i - 0.025 * (double)nx);
        for (size_t i = nx - 1; i > 0; i--) {   /* Fisher-Yates */
                rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
                size_t j = (size_t)(rs % (i + 1));
                float k = x[i]; x[i] = x[j]; x[j] = k;
        }
        for (size_t i = 0; i < ny; i++) r[i] = (float)sin(1.7 * (double)i + 0.3);
        memcpy(dy, r, ny * sizeof *dy);
        run(&t, x, y, dy, dx, B, 1);
        double worst = 0;
        const float e = 1e-3f;
        for (size_t i = 0; i < nx; i++) {
                float k = x[i];
                double lp = 0, lm = 0;
                x[i] = k + e; run(&t, x, y, NULL, NULL, B, 1);
                for (size_t j = 0; j < ny; j++) lp += (double)y[j] * r[j];
                x[i] = k - e; run(&t, x, y, NULL, NULL, B, 1);
                for (size_t j = 0; j < ny; j++) lm += (double)y[j] * r[j];
                x[i] = k;
                double num = (lp - lm) / (2.0 * (double)((k + e) - k));
                double err = fabs(num - dx[i]) / (1e-3 + 1e-2 * fabs(num));
                if (err > worst) worst = err;
        }
        free(x); free(y); free(r); free(dy); free(dx);
        destroy(&t);
        return worst;
}

#define PGC(input, layer, B) do { \
        double w = pool_gradcheck(input, layer, B); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layer, w); } while (0)

START_TEST(maxpool_2x2) { PGC("[2, 4, 6]", "{type: maxpool, kernel: 2}", 2); } END_TEST
START_TEST(maxpool_3s2p1) { PGC("[2, 5, 5]", "{type: maxpool, kernel: 3, stride: 2, padding: 1}", 2); } END_TEST
START_TEST(maxpool_odd) { PGC("[1, 5, 7]", "{type: maxpool, kernel: [2, 3], stride: [1, 2]}", 2); } END_TEST

#define NEAR(a, b) ck_assert_msg(fabs((double)(a) - (double)(b)) <= 1e-5 * (1 + fabs((double)(b))), \
                                 "%s = %g, expected %g", #a, (double)(a), (double)(b))

/* Input x = [[1,2,3],[4,5,6],[7,8,9]], filter w = [[1,2],[3,4]], bias 0.5, no padding:
 *   y00 = 1*1 + 2*2 + 3*4 + 4*5 + .5 = 37.5     y01 = 1*2 + 2*3 + 3*5 + 4*6 + .5 = 47.5
 *   y10 = 1*4 + 2*5 + 3*7 + 4*8 + .5 = 67.5     y11 = 1*5 + 2*6 + 3*8 + 4*9 + .5 = 77.5
 * A second sample of all ones gives 1+2+3+4 + .5 = 10.5 everywhere.
 * With dy = 1 everywhere:
 *   dW[i][j] = sum over the 4 outputs of x[oh+i][ow+j]: sample 1 gives 1+2+4+5 = 12, 2+3+5+6 = 16,
 *   4+5+7+8 = 24, 5+6+8+9 = 28; sample 2 adds 4 to each: 16, 20, 28, 32.  db = 8.
 *   dx[ih][iw] = sum of the w[i][j] with (ih-i, iw-j) an output position, for each sample:
 *   [[1, 1+2, 2], [1+3, 1+2+3+4, 2+4], [3, 3+4, 4]] = [[1,3,2],[4,10,6],[3,7,4]] */
START_TEST(conv_hand)
{
        one_layer t;
        build(&t, "[1, 3, 3]", "{type: conv, filters: 1, kernel: 2}", 2);
        float w[4] = { 1, 2, 3, 4 }, b = 0.5f;
        memcpy(t.l->p[0], w, sizeof w);
        t.l->p[1][0] = b;
        float x[18] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
        float y[8], dy[8], dx[18];
        for (int i = 0; i < 8; i++) dy[i] = 1;
        run(&t, x, y, dy, dx, 2, 1);
        const float ey[8] = { 37.5f, 47.5f, 67.5f, 77.5f, 10.5f, 10.5f, 10.5f, 10.5f };
        const float edw[4] = { 16, 20, 28, 32 }, edx[9] = { 1, 3, 2, 4, 10, 6, 3, 7, 4 };
        for (int i = 0; i < 8; i++) NEAR(y[i], ey[i]);
        for (int i = 0; i < 4; i++) NEAR(t.l->g[0][i], edw[i]);
        NEAR(t.l->g[1][0], 8);
        for (int i = 0; i < 18; i++) NEAR(dx[i], edx[i % 9]);
        destroy(&t);
}
END_TEST

/* 'same' with an even kernel pads asymmetrically, the smaller half first (PyTorch):
 * x = [1, 2, 3] (1x1x3), kernel [1, 2] with w = [1, 10]: total pad 1 = 0 left + 1 right, so
 *   y = [1*1 + 2*10, 2*1 + 3*10, 3*1 + 0*10] = [21, 32, 3]
 * (padding on the left instead would give [10, 21, 32]). */
START_TEST(conv_same_asym)
{
        one_layer t;
        build(&t, "[1, 1, 3]", "{type: conv, filters: 1, kernel: [1, 2], padding: same, bias: false}", 1);
        ck_assert_int_eq(t.l->out.d[2], 3);
        t.l->p[0][0] = 1;
        t.l->p[0][1] = 10;
        float x[3] = { 1, 2, 3 }, y[3];
        run(&t, x, y, NULL, NULL, 1, 0);
        NEAR(y[0], 21); NEAR(y[1], 32); NEAR(y[2], 3);
        destroy(&t);
}
END_TEST

/* Stride 2, padding 1, two groups, 3x3 filters of ones, biases 0: each output is the sum of its
 * group's inputs under the window. x channel 0 = 1s, channel 1 = 2s on 3x3; groups: 2 -> out (2,2,2)
 * with filters=2. Output (0,0) covers rows -1..1, cols -1..1: 4 valid cells -> 4 (ch0), 8 (ch1);
 * (0,1): cols 1..3 -> 4 valid; (1,1): rows 1..3, cols 1..3 -> 4 valid; every corner window sees 4. */
START_TEST(conv_groups_hand)
{
        one_layer t;
        build(&t, "[2, 3, 3]", "{type: conv, filters: 2, kernel: 3, stride: 2, padding: 1, groups: 2}", 1);
        ck_assert_int_eq(t.l->out.d[1], 2);
        for (int i = 0; i < 18; i++) t.l->p[0][i] = 1;
        t.l->p[1][0] = t.l->p[1][1] = 0;
        float x[18], y[8];
        for (int i = 0; i < 18; i++) x[i] = i < 9 ? 1 : 2;
        run(&t, x, y, NULL, NULL, 1, 0);
        for (int i = 0; i < 4; i++) { NEAR(y[i], 4); NEAR(y[4 + i], 8); }
        destroy(&t);
}
END_TEST

START_TEST(conv_bad_groups)
{
        char path[64];
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, "[3, 5, 5]",
                         "  - {type: conv, filters: 4, kernel: 3, groups: 2}", NULL), 0);
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(&s, path, &d);
        ck_assert_int_eq(rc, 0);
        ck_assert_int_lt(dt_graph_build(&g, &s, &d), 0);
        ck_assert_int_eq(d.n, 1);
        ck_assert_msg(strstr(d.msgs[0].text, "groups 2 must divide"), "%s", d.msgs[0].text);
        dt_diag_free(&d);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
        unlink(path);
}
END_TEST

START_TEST(conv_same_stride)
{
        char path[64];
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, "[3, 5, 5]",
                         "  - {type: conv, filters: 4, kernel: 3, stride: 2, padding: same}", NULL), 0);
        dt_model_spec s;
        dt_diag d = { 0 };
        ck_assert_int_lt(dt_model_spec_load(&s, path, &d), 0);
        ck_assert_int_ge(d.n, 1);
        ck_assert_msg(strstr(d.msgs[0].text, "'same' needs stride 1"), "%s", d.msgs[0].text);
        dt_diag_free(&d);
        unlink(path);
}
END_TEST

/* maxpool 2x2 over the 4x4 plane 0..15 (row-major) picks the bottom-right of each window:
 * [[5, 7], [13, 15]]; dx puts dy there. 3x3 stride 2 padding 1 over the same plane: windows
 * rows {-1..1, 1..3} x cols {-1..1, 1..3} -> [[5, 7], [13, 15]] as well; on the negated plane
 * the maxima are the top-left valid cells (0,0), (0,1), (1,0), (1,1): [[0, -1], [-4, -5]]. */
START_TEST(maxpool_hand)
{
        one_layer t;
        build(&t, "[1, 4, 4]", "{type: maxpool, kernel: 2}", 1);
        float x[16], y[4], dy[4] = { 1, 2, 3, 4 }, dx[16];
        for (int i = 0; i < 16; i++) x[i] = (float)i;
        run(&t, x, y, dy, dx, 1, 1);
        NEAR(y[0], 5); NEAR(y[1], 7); NEAR(y[2], 13); NEAR(y[3], 15);
        for (int i = 0; i < 16; i++)
                NEAR(dx[i], i == 5 ? 1 : i == 7 ? 2 : i == 13 ? 3 : i == 15 ? 4 : 0);
        destroy(&t);

        build(&t, "[1, 4, 4]", "{type: maxpool, kernel: 3, stride: 2, padding: 1}", 1);
        ck_assert_int_eq(t.l->out.d[1], 2);
        run(&t, x, y, NULL, NULL, 1, 0);
        NEAR(y[0], 5); NEAR(y[1], 7); NEAR(y[2], 13); NEAR(y[3], 15);
        for (int i = 0; i < 16; i++) x[i] = -(float)i;
        run(&t, x, y, NULL, NULL, 1, 0);
        NEAR(y[0], 0); NEAR(y[1], -1); NEAR(y[2], -4); NEAR(y[3], -5);
        destroy(&t);
}
END_TEST

/* avgpool 3x3 stride 2 padding 1 on a 3x3 plane of ones: each window has 4 real cells of 9,
 * and count_include_pad divides by 9 -> 4/9 everywhere. global_avgpool of 0..11 = 5.5. */
START_TEST(avgpool_hand)
{
        one_layer t;
        build(&t, "[1, 3, 3]", "{type: avgpool, kernel: 3, stride: 2, padding: 1}", 1);
        float x[12], y[4];
        for (int i = 0; i < 9; i++) x[i] = 1;
        run(&t, x, y, NULL, NULL, 1, 0);
        for (int i = 0; i < 4; i++) NEAR(y[i], 4.0 / 9);
        destroy(&t);

        build(&t, "[1, 3, 4]", "{type: global_avgpool}", 1);
        for (int i = 0; i < 12; i++) x[i] = (float)i;
        run(&t, x, y, NULL, NULL, 1, 0);
        ck_assert_int_eq(t.l->out.n, 1);
        NEAR(y[0], 5.5);
        destroy(&t);
}
END_TEST

/* Training batch norm on (2,2,2) with B = 4: each channel's 16 values come out with mean 0 and
 * biased variance var/(var + eps) ~ 1. One step with momentum 0.1 from (0, 1) gives
 * running_mean = 0.1 mean, running_var = 0.9 + 0.1 * unbiased var. */
START_TEST(bn_hand)
{
        one_layer t;
        enum { B = 4, C = 2, S = 4, N = B * C * S };
        build(&t, "[2, 2, 2]", "{type: batchnorm}", B);
        float x[N], y[N];
        for (int i = 0; i < N; i++) x[i] = (float)(3 * sin(i * 0.9) + (i / S % C) * 5);
        run(&t, x, y, NULL, NULL, B, 1);
        for (int c = 0; c < C; c++) {
                double m = 0, v = 0, my = 0, vy = 0;
                for (int b = 0; b < B; b++)
                        for (int q = 0; q < S; q++) {
                                m += x[(b * C + c) * S + q];
                                my += y[(b * C + c) * S + q];
                        }
                m /= B * S;
                my /= B * S;
                for (int b = 0; b < B; b++)
                        for (int q = 0; q < S; q++) {
                                double dv = x[(b * C + c) * S + q] - m, dq = y[(b * C + c) * S + q] - my;
                                v += dv * dv;
                                vy += dq * dq;
                        }
                ck_assert_msg(fabs(my) < 1e-5, "channel %d mean %g", c, my);
                ck_assert_msg(fabs(vy / (B * S) - v / (v + B * S * 1e-5)) < 1e-4, "channel %d var %g", c, vy / (B * S));
                /* buffers: running_mean then running_var */
                ck_assert_msg(fabs(t.l->p[2][c] - 0.1 * m) < 1e-5, "running_mean %g vs %g", t.l->p[2][c], 0.1 * m);
                ck_assert_msg(fabs(t.l->p[3][c] - (0.9 + 0.1 * v / (B * S - 1))) < 1e-5,
                              "running_var %g vs %g", t.l->p[3][c], 0.9 + 0.1 * v / (B * S - 1));
        }
        /* evaluation with the updated running statistics: y = (x - rm) / sqrt(rv + eps) */
        float rm = t.l->p[2][0], rv = t.l->p[3][0];
        run(&t, x, y, NULL, NULL, B, 0);
        NEAR(y[0], (x[0] - rm) / sqrt(rv + 1e-5));
        destroy(&t);
}
END_TEST

/* maxpool 2x2 (the fast path) with a NaN: its window's output is NaN and takes the gradient
 * (PyTorch), the other windows are untouched, and a NaN in the odd last row, outside every window,
 * changes nothing; +Inf wins its window like any value. */
START_TEST(maxpool_nan)
{
        one_layer t;
        build(&t, "[1, 5, 4]", "{type: maxpool, kernel: 2}", 1);
        float x[20], y[4], dy[4] = { 1, 2, 3, 4 }, dx[20];
        for (int i = 0; i < 20; i++) x[i] = (float)i;
        x[5] = NAN;             /* row 1, column 1: window (0, 0) */
        x[2] = INFINITY;        /* row 0, column 2: window (0, 1) */
        x[17] = NAN;            /* row 4: no window reads it */
        run(&t, x, y, dy, dx, 1, 1);
        ck_assert(isnan(y[0]));
        ck_assert(isinf(y[1]) && y[1] > 0);
        ck_assert(y[2] == 13.0f && y[3] == 15.0f);
        for (int i = 0; i < 20; i++) {
                float want = i == 5 ? 1 : i == 2 ? 2 : i == 13 ? 3 : i == 15 ? 4 : 0;
                ck_assert_msg(dx[i] == want, "dx[%d] = %g, wanted %g", i, dx[i], want);
        }
        destroy(&t);
}
END_TEST

/* maxpool 2x2: the fast path (vector rows, a byte per output, one pass backward) against the
 * general loops, bit for bit, on inputs full of ties (few distinct values, +0 and -0), infinities
 * and planes with NaNs under a window or only outside every window; odd and even sizes, rows of
 * one, two and more vectors, one thread and two (planes split between them). */
START_TEST(maxpool_fast_general)
{
        const char *in[5] = { "[3, 7, 7]", "[2, 6, 9]", "[2, 5, 4]", "[1, 4, 34]", "[64, 14, 14]" };
        const int Bs[5] = { 3, 2, 4, 3, 3 };
        for (int s = 0; s < 5; s++)
                for (int th = 1; th <= 2; th++) {
                        one_layer t[2];
                        float *x = NULL, *dy = NULL, *y[2], *dx[2];
                        size_t nx = 0, ny = 0;
                        const int B = Bs[s];
                        for (int k = 0; k < 2; k++) {
                                dt_pool_general_only = k;
                                build_t(&t[k], in[s], "{type: maxpool, kernel: 2}", B, th);
                                dt_pool_general_only = 0;
                                if (!x) {
                                        nx = (size_t)B * dt_shape_size(&t[k].l->in);
                                        ny = (size_t)B * dt_shape_size(&t[k].l->out);
                                        x = malloc(nx * sizeof *x);
                                        dy = malloc(ny * sizeof *dy);
                                        uint64_t rs = 0x9E3779B97F4A7C15ull + (uint64_t)s;
                                        for (size_t i = 0; i < nx; i++) {
                                                rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
                                                int v = (int)(rs % 7);
                                                x[i] = v == 0 ? -0.0f : v == 6 ? (rs >> 20) % 50 ? 1.0f : INFINITY
                                                                                : (float)(v - 3);
                                        }
                                        /* NaNs: in the first plane under a window, and in the last
                                         * plane's odd last row or column where there is one */
                                        x[1] = NAN;
                                        x[nx - 1] = NAN;
                                        for (size_t i = 0; i < ny; i++) dy[i] = (float)(i % 13) - 6.5f;
                                }
                                y[k] = malloc(ny * sizeof *y[k]);
                                dx[k] = malloc(nx * sizeof *dx[k]);
                                run(&t[k], x, y[k], dy, dx[k], B, 1);
                        }
                        ck_assert_ptr_nonnull(((int32_t **)t[1].l->priv)[0]);   /* the general path ran */
                        ck_assert_msg(memcmp(y[0], y[1], ny * sizeof *x) == 0, "%s t%d: y", in[s], th);
                        ck_assert_msg(memcmp(dx[0], dx[1], nx * sizeof *x) == 0, "%s t%d: dx", in[s], th);
                        for (int k = 0; k < 2; k++) {
                                free(y[k]);
                                free(dx[k]);
                                destroy(&t[k]);
                        }
                        free(x);
                        free(dy);
                }
}
END_TEST

/* global_avgpool sums sixteen planes at once, one per vector lane: each plane's sum must still be
 * the serial sum in order, bit for bit, for whole vectors of planes and a tail, on one thread and
 * on two (past the 32K floats where the planes are split). */
START_TEST(gap_serial_sum)
{
        const char *in[2] = { "[40, 3, 5]", "[64, 7, 7]" };
        const int Bs[2] = { 3, 16 };
        for (int s = 0; s < 2; s++)
                for (int th = 1; th <= 2; th++) {
                        one_layer t;
                        build_t(&t, in[s], "{type: global_avgpool}", Bs[s], th);
                        size_t HW = (size_t)t.l->in.d[1] * t.l->in.d[2], np = (size_t)Bs[s] * t.l->in.d[0];
                        float *x = malloc(np * HW * sizeof *x), *y = malloc(np * sizeof *y);
                        for (size_t i = 0; i < np * HW; i++) x[i] = (float)sin(0.7 * (double)i) * 100.0f + (float)(i % 3);
                        run(&t, x, y, NULL, NULL, Bs[s], 1);
                        for (size_t pl = 0; pl < np; pl++) {
                                float acc = 0;
                                for (size_t q = 0; q < HW; q++) acc += x[pl * HW + q];
                                float want = acc * (1.0f / (float)HW);
                                ck_assert_msg(memcmp(&y[pl], &want, sizeof want) == 0, "%s t%d plane %zu: %.9g vs %.9g",
                                              in[s], th, pl, y[pl], want);
                        }
                        free(x);
                        free(y);
                        destroy(&t);
                }
}
END_TEST

/* ---- fused against unfused ----
 * batchnorm with activation f against batchnorm then an activation layer f, on the same input,
 * gamma, beta and output gradient: outputs, running statistics, input gradients and dgamma/dbeta.
 * Returns the largest |a - b| / max(1, |b|) (0: bit for bit). */
static double bn_fused_diff(const char *input, const char *fn, int B, int training, int threads)
{
        char fused[160], plain[160], path[64], items[512];
        snprintf(fused, sizeof fused, "{type: batchnorm, name: bn, activation: %s}", fn);
        snprintf(plain, sizeof plain, "{type: batchnorm, name: bn}\n  - {type: activation, name: f, function: %s}", fn);
        const char *lay[2] = { fused, plain };
        dt_model_spec s[2];
        dt_graph g[2];
        dt_backend *be[2];
        for (int k = 0; k < 2; k++) {
                snprintf(items, sizeof items, "  - %s", lay[k]);
                ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, items, NULL), 0);
                dt_diag d = { 0 };
                int rc = dt_model_spec_load(&s[k], path, &d);
                if (rc == 0) rc = dt_graph_build(&g[k], &s[k], &d);
                if (rc < 0 || d.n) dt_diag_print(&d, stderr);
                ck_assert(rc == 0 && d.n == 0);
                unlink(path);
                be[k] = dt_backend_cpu_new(threads);
                ck_assert_int_eq(dt_graph_alloc(&g[k], be[k], B), 0);
                dt_graph_init_params(&g[k], 1);
        }
        dt_layer *bn0 = &g[0].layers[0], *bn1 = &g[1].layers[0], *f1 = &g[1].layers[1];
        int C = bn0->in.d[0];
        for (int c = 0; c < C; c++) {   /* gamma, beta, running statistics away from their defaults */
                for (int k = 0; k < 2; k++) {
                        dt_layer *l = &g[k].layers[0];
                        l->p[0][c] = (float)(0.5 + 0.3 * c);
                        l->p[1][c] = (float)(0.2 * sin(c + 1.0));
                        l->p[2][c] = (float)(0.1 * c);
                        l->p[3][c] = (float)(1.0 + 0.2 * c);
                }
        }
        size_t n = (size_t)B * dt_shape_size(&bn0->in);
        float *x = malloc(n * sizeof *x), *dy = malloc(n * sizeof *dy), *y0 = malloc(n * sizeof *y0);
        float *z1 = malloc(n * sizeof *z1), *y1 = malloc(n * sizeof *y1), *dz1 = malloc(n * sizeof *dz1);
        float *dx0 = malloc(n * sizeof *dx0), *dx1 = malloc(n * sizeof *dx1);
        for (size_t i = 0; i < n; i++) {
                x[i] = (float)(2.0 * sin(0.37 * (double)i) + 0.5 * cos(1.3 * (double)i) + 3.0);
                dy[i] = (float)cos(0.71 * (double)i + 0.2);
        }
        dt_fwd_ctx c = { .training = training };
        memset(g[0].grads, 0, g[0].nparams * sizeof *g[0].grads);
        memset(g[1].grads, 0, g[1].nparams * sizeof *g[1].grads);
        bn0->ops->forward(bn0, &c, x, y0, B);
        bn0->ops->backward(bn0, &c, x, y0, dy, dx0, B);
        bn1->ops->forward(bn1, &c, x, z1, B);
        f1->ops->forward(f1, &c, z1, y1, B);
        f1->ops->backward(f1, &c, z1, y1, dy, dz1, B);
        bn1->ops->backward(bn1, &c, x, z1, dz1, dx1, B);
        double worst = 0;
#define DIFF(a, b, m) for (size_t i_ = 0; i_ < (size_t)(m); i_++) { \
                double d_ = fabs((double)(a)[i_] - (b)[i_]) / fmax(1.0, fabs((double)(b)[i_])); \
                if (d_ > worst) worst = d_; }
        DIFF(y0, y1, n);
        DIFF(dx0, dx1, n);
        for (int k = 0; k < 4; k++) DIFF(bn0->p[k], bn1->p[k], C);     /* running statistics */
        for (int k = 0; k < 2; k++) DIFF(bn0->g[k], bn1->g[k], C);     /* dgamma, dbeta */
#undef DIFF
        free(x); free(dy); free(y0); free(z1); free(y1); free(dz1); free(dx0); free(dx1);
        for (int k = 0; k < 2; k++) {
                dt_graph_free(&g[k]);
                dt_backend_free(be[k]);
                dt_model_spec_free(&s[k]);
        }
        return worst;
}

/* relu is the same expressions either way: bit for bit, on one thread and two (the host loops
 * split channels over threads from 32K floats: [8, 32, 32] x 4 samples); the others within
 * rounding (f(z) computed on a row instead of the whole tensor: the same math, so also 0 today) */
START_TEST(bn_fused_same)
{
        const char *in[3] = { "[3, 5, 5]", "[8, 32, 32]", "[6]" };
        const int B[3] = { 4, 4, 7 };
        for (int i = 0; i < 3; i++)
                for (int tr = 0; tr < 2; tr++)
                        for (int th = 1; th <= 2; th++) {
                                double w = bn_fused_diff(in[i], "relu", B[i], tr, th);
                                ck_assert_msg(w == 0, "%s relu, training %d, %d threads: differs by %g", in[i], tr, th, w);
                                const char *fns[3] = { "tanh", "gelu", "sigmoid" };
                                for (int f = 0; f < 3; f++) {
                                        w = bn_fused_diff(in[i], fns[f], B[i], tr, th);
                                        ck_assert_msg(w <= 1e-6, "%s %s, training %d, %d threads: differs by %g", in[i],
                                                      fns[f], tr, th, w);
                                }
                        }
}
END_TEST

/* the host loops give the same bits on one thread and on two (each channel on one thread), for
 * images and for flat inputs (BatchNorm1d: blocks of channels across each row) */
START_TEST(bn_threads_same)
{
        const char *in[2] = { "[8, 32, 32]", "[520]" };
        const int Bs[2] = { 4, 128 };   /* both past the 32K floats where the loops go parallel */
        for (int s = 0; s < 2; s++)
                for (int tr = 0; tr < 2; tr++) {
                        one_layer t[2];
                        const int B = Bs[s];
                        float *y[2], *dx[2];
                        size_t n = 0;
                        float *x = NULL, *dy = NULL;
                        for (int k = 0; k < 2; k++) {
                                build_t(&t[k], in[s], "{type: batchnorm, activation: relu}", B, k + 1);
                                if (!x) {
                                        n = (size_t)B * dt_shape_size(&t[k].l->in);
                                        x = malloc(n * sizeof *x);
                                        dy = malloc(n * sizeof *dy);
                                        for (size_t i = 0; i < n; i++) {
                                                x[i] = (float)(sin(0.1 * (double)i) * 4 + 1);
                                                dy[i] = (float)cos(0.3 * (double)i);
                                        }
                                }
                                y[k] = malloc(n * sizeof *y[k]);
                                dx[k] = malloc(n * sizeof *dx[k]);
                                run(&t[k], x, y[k], dy, dx[k], B, tr);
                        }
                        ck_assert_msg(memcmp(y[0], y[1], n * sizeof *x) == 0, "%s: y", in[s]);
                        ck_assert_msg(memcmp(dx[0], dx[1], n * sizeof *x) == 0, "%s: dx", in[s]);
                        ck_assert(memcmp(t[0].g.grads, t[1].g.grads, t[0].g.nparams * sizeof *x) == 0);
                        ck_assert(memcmp(t[0].g.params, t[1].g.params, t[0].g.nparams * sizeof *x) == 0);
                        for (int k = 0; k < 2; k++) {
                                free(y[k]);
                                free(dx[k]);
                                destroy(&t[k]);
                        }
                        free(x);
                        free(dy);
                }
}
END_TEST

/* flat inputs take their own loops (channels across a row): against the image loops on the same
 * values, (C) with 2B samples as (C, 1, 2) with B (sample 2b + q is position q of sample b), the
 * outputs, input gradients, dgamma, dbeta and running statistics agree within rounding (the two
 * sum in different orders) */
/* batch norm's vector loops (16 folds at once, masked tails) against the plain loops, bit for bit:
 * outputs, running statistics, input gradients, dgamma and dbeta, in training and evaluation, with
 * relu fused, without, and tanh (the plain loops either way); planes of 5, 16, 49 and 300 values
 * (past the 256-value chunks of backward), batches below, at and past 16 rows. */
START_TEST(bn_vec_plain)
{
        const char *in[4] = { "[3, 1, 5]", "[2, 4, 4]", "[4, 7, 7]", "[2, 15, 20]" };
        const char *lay[3] = { "{type: batchnorm, activation: relu}", "{type: batchnorm}", "{type: batchnorm, activation: tanh}" };
        const int Bs[3] = { 3, 16, 37 };
        for (int s = 0; s < 4; s++)
                for (int a = 0; a < 3; a++)
                        for (int bi = 0; bi < 3; bi++)
                                for (int tr = 0; tr < 2; tr++) {
                                        one_layer t[2];
                                        const int B = Bs[bi];
                                        float *y[2], *dx[2], *x = NULL, *dy = NULL;
                                        size_t n = 0;
                                        for (int k = 0; k < 2; k++) {
                                                dt_bn_plain = k;
                                                build(&t[k], in[s], lay[a], B);
                                                if (!x) {
                                                        n = (size_t)B * dt_shape_size(&t[k].l->in);
                                                        x = malloc(n * sizeof *x);
                                                        dy = malloc(n * sizeof *dy);
                                                        for (size_t i = 0; i < n; i++) {
                                                                x[i] = (float)(sin(0.37 * (double)i) * 3 + 0.5);
                                                                dy[i] = (float)cos(0.23 * (double)i);
                                                        }
                                                }
                                                for (int q = 0; q < 2; q++)     /* gamma, beta off their defaults */
                                                        for (size_t i = 0; i < t[k].l->len[q]; i++) t[k].l->p[q][i] = 0.5f + 0.25f * (float)i - 0.5f * (float)q;
                                                y[k] = malloc(n * sizeof *y[k]);
                                                dx[k] = malloc(n * sizeof *dx[k]);
                                                run(&t[k], x, y[k], dy, dx[k], B, tr);
                                                dt_bn_plain = 0;
                                        }
                                        ck_assert_msg(memcmp(y[0], y[1], n * sizeof *x) == 0, "%s %s B %d tr %d: y", in[s], lay[a], B, tr);
                                        ck_assert_msg(memcmp(dx[0], dx[1], n * sizeof *x) == 0, "%s %s B %d tr %d: dx", in[s], lay[a], B, tr);
                                        ck_assert_msg(memcmp(t[0].g.grads, t[1].g.grads, t[0].g.nparams * sizeof *x) == 0, "%s: grads", in[s]);
                                        ck_assert_msg(memcmp(t[0].g.params, t[1].g.params, t[0].g.nparams * sizeof *x) == 0, "%s: params", in[s]);
                                        for (int k = 0; k < 2; k++) {
                                                free(y[k]);
                                                free(dx[k]);
                                                destroy(&t[k]);
                                        }
                                        free(x);
                                        free(dy);
                                }
}
END_TEST

START_TEST(bn_flat_as_image)
{
        for (int tr = 0; tr < 2; tr++) {
                enum { B = 9, C = 37 };
                one_layer a, b;
                build(&a, "[37]", "{type: batchnorm, activation: gelu}", 2 * B);
                build(&b, "[37, 1, 2]", "{type: batchnorm, activation: gelu}", B);
                float xa[2 * B * C], dya[2 * B * C], xb[2 * B * C], dyb[2 * B * C];
                float ya[2 * B * C], yb[2 * B * C], dxa[2 * B * C], dxb[2 * B * C];
                for (int s2 = 0; s2 < 2 * B; s2++)
                        for (int c = 0; c < C; c++) {
                                int i = s2 * C + c, k = ((s2 / 2) * C + c) * 2 + s2 % 2;
                                xa[i] = xb[k] = (float)(3 * sin(0.7 * i) + 2 + 0.1 * c);
                                dya[i] = dyb[k] = (float)cos(0.45 * i);
                        }
                run(&a, xa, ya, dya, dxa, 2 * B, tr);
                run(&b, xb, yb, dyb, dxb, B, tr);
                for (int s2 = 0; s2 < 2 * B; s2++)
                        for (int c = 0; c < C; c++) {
                                int i = s2 * C + c, k = ((s2 / 2) * C + c) * 2 + s2 % 2;
                                ck_assert_msg(fabs(ya[i] - yb[k]) <= 1e-5 * fmax(1, fabs(yb[k])), "y %d: %g vs %g", i, ya[i], yb[k]);
                                ck_assert_msg(fabs(dxa[i] - dxb[k]) <= 1e-5 * fmax(1, fabs(dxb[k])), "dx %d: %g vs %g", i, dxa[i], dxb[k]);
                        }
                for (size_t i = 0; i < a.g.nparams; i++)
                        ck_assert_msg(fabs(a.g.grads[i] - b.g.grads[i]) <= 1e-5 * fmax(1, fabs(b.g.grads[i])), "grad %zu", i);
                for (int k = 0; k < 4; k++)
                        for (int c = 0; c < C; c++)
                                ck_assert_msg(fabs(a.l->p[k][c] - b.l->p[k][c]) <= 1e-5 * fmax(1, fabs(b.l->p[k][c])),
                                              "tensor %d channel %d", k, c);
                destroy(&a);
                destroy(&b);
        }
}
END_TEST

/* The span and narrow-row im2col and the register-summed col2im (AVX-512) against the row-by-row
 * forms: output, dx, dW and db bit for bit, over paddings that leave whole rows or
 * columns out, dilation, groups, rows wider than one vector, and chunks of several samples. */
START_TEST(conv_rows_same)
{
        static const char *const kinds[][2] = {
                { "[3, 9, 9]", "{type: conv, filters: 4, kernel: 3, padding: same, activation: relu}" },
                { "[2, 7, 21]", "{type: conv, filters: 3, kernel: [3, 5], padding: same}" },
                { "[2, 11, 18]", "{type: conv, filters: 3, kernel: 3, dilation: [3, 2], padding: same}" },
                { "[4, 6, 6]", "{type: conv, filters: 4, kernel: 3, groups: 2, padding: same, activation: tanh}" },
                { "[2, 5, 19]", "{type: conv, filters: 2, kernel: [4, 2], padding: [1, 2]}" },
                { "[2, 4, 17]", "{type: conv, filters: 2, kernel: [2, 3], padding: [3, 1]}" },
                { "[2, 6, 6]", "{type: conv, filters: 3, kernel: 3}" },
                { "[2, 9, 12]", "{type: conv, filters: 3, kernel: [3, 4], padding: [2, 1], activation: relu}" },
                { "[3, 8, 15]", "{type: conv, filters: 2, kernel: [2, 2], stride: [2, 1], padding: [1, 1]}" },
        };
        size_t keep = dt_conv_scratch_limit;
        for (int lim = 0; lim < 2; lim++) {
                dt_conv_scratch_limit = lim ? 2000 : keep;      /* one chunk, then a few samples each */
                for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
                        const int B = 5;
                        float *out[2][3];
                        size_t n[3];
                        for (int plain = 0; plain < 2; plain++) {
                                one_layer t;
                                dt_conv_plain_rows = plain;
                                build(&t, kinds[k][0], kinds[k][1], B);
                                size_t nx = (size_t)B * dt_shape_size(&t.l->in), ny = (size_t)B * dt_shape_size(&t.l->out);
                                float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
                                for (size_t i = 0; i < nx; i++) x[i] = (float)sin(0.37 * (double)i + 0.1);
                                for (size_t i = 0; i < ny; i++) dy[i] = (float)cos(0.71 * (double)i);
                                n[0] = ny; n[1] = nx; n[2] = t.g.nparams;
                                for (int i = 0; i < 3; i++) out[plain][i] = malloc(n[i] * sizeof(float));
                                run(&t, x, out[plain][0], dy, out[plain][1], B, 1);
                                memcpy(out[plain][2], t.g.grads, n[2] * sizeof(float));
                                free(x); free(dy);
                                destroy(&t);
                        }
                        dt_conv_plain_rows = 0;
                        static const char *const what[] = { "y", "dx", "gradients" };
                        for (int i = 0; i < 3; i++) {
                                ck_assert_msg(!memcmp(out[0][i], out[1][i], n[i] * sizeof(float)),
                                              "%s on %s, scratch %zu: %s differ between the two forms",
                                              kinds[k][1], kinds[k][0], dt_conv_scratch_limit, what[i]);
                                free(out[0][i]);
                                free(out[1][i]);
                        }
                }
        }
        dt_conv_scratch_limit = keep;
}
END_TEST

int main(void)
{
        Suite *s = suite_create("layers_cnn");
        TCase *tc = tcase_create("gradcheck");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, conv_plain); tcase_add_test(tc, conv_stride2); tcase_add_test(tc, conv_pad1);
        tcase_add_test(tc, conv_same_even); tcase_add_test(tc, conv_same_dil); tcase_add_test(tc, conv_dilation2);
        tcase_add_test(tc, conv_groups2); tcase_add_test(tc, conv_depthwise); tcase_add_test(tc, conv_nobias);
        tcase_add_test(tc, conv_relu); tcase_add_test(tc, conv_gelu); tcase_add_test(tc, conv_1x1);
        tcase_add_test(tc, conv_1x1_groups); tcase_add_test(tc, conv_1x1_stride);
        tcase_add_test(tc, conv_nonsquare); tcase_add_test(tc, conv_pad_pair);
        tcase_add_test(tc, conv_wide_rows); tcase_add_test(tc, conv_rows_same);
        tcase_add_test(tc, conv_chunk1); tcase_add_test(tc, conv_chunk2);
        tcase_add_test(tc, conv_split_same); tcase_add_test(tc, conv_split_gradcheck);
        tcase_add_test(tc, maxpool_2x2); tcase_add_test(tc, maxpool_3s2p1); tcase_add_test(tc, maxpool_odd);
        tcase_add_test(tc, avgpool_pad); tcase_add_test(tc, avgpool_2x2); tcase_add_test(tc, global_avgpool);
        tcase_add_test(tc, bn_train_chw); tcase_add_test(tc, bn_train_flat); tcase_add_test(tc, bn_train_noaffine);
        tcase_add_test(tc, bn_eval_chw); tcase_add_test(tc, bn_eval_flat);
        tcase_add_test(tc, bn_act_relu); tcase_add_test(tc, bn_act_tanh); tcase_add_test(tc, bn_act_gelu_flat);
        tcase_add_test(tc, bn_act_sigmoid_eval); tcase_add_test(tc, bn_act_leaky_noaffine);
        tcase_add_test(tc, bn_fused_same); tcase_add_test(tc, bn_threads_same); tcase_add_test(tc, maxpool_nan);
        tcase_add_test(tc, maxpool_fast_general); tcase_add_test(tc, gap_serial_sum);
        tcase_add_test(tc, bn_flat_as_image); tcase_add_test(tc, bn_vec_plain);
        suite_add_tcase(s, tc);
        TCase *tv = tcase_create("values");
        tcase_add_test(tv, conv_hand); tcase_add_test(tv, conv_same_asym); tcase_add_test(tv, conv_groups_hand);
        tcase_add_test(tv, conv_bad_groups); tcase_add_test(tv, conv_same_stride);
        tcase_add_test(tv, maxpool_hand); tcase_add_test(tv, avgpool_hand); tcase_add_test(tv, bn_hand);
        suite_add_tcase(s, tv);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
