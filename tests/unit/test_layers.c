/* tests/unit/test_layers.c - finite-difference gradient checks for every layer and option that
 * changes the math, the losses, and a forward value computed by hand. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gradcheck.h"
#include "layers/loss.h"
#include "backend/backend.h"

#define GC(input, layer, B, training) do { \
        double w = dt_gradcheck(input, layer, B, training); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layer, w); } while (0)

START_TEST(fc_plain) { GC("[7]", "{type: fc, units: 5}", 3, 1); } END_TEST
START_TEST(fc_nobias) { GC("[7]", "{type: fc, units: 4, bias: false}", 2, 1); } END_TEST
START_TEST(fc_relu) { GC("[6]", "{type: fc, units: 5, activation: relu}", 3, 1); } END_TEST
START_TEST(fc_tanh) { GC("[6]", "{type: fc, units: 5, activation: tanh}", 3, 1); } END_TEST
START_TEST(fc_sigmoid) { GC("[6]", "{type: fc, units: 5, activation: sigmoid}", 3, 1); } END_TEST
START_TEST(fc_gelu) { GC("[6]", "{type: fc, units: 5, activation: gelu}", 3, 1); } END_TEST
START_TEST(fc_leaky) { GC("[6]", "{type: fc, units: 5, activation: leaky_relu, alpha: 0.1}", 3, 1); } END_TEST
START_TEST(fc_seq) { GC("[4, 6]", "{type: fc, units: 3}", 2, 1); } END_TEST
START_TEST(act_relu) { GC("[10]", "{type: activation, function: relu}", 3, 1); } END_TEST
START_TEST(act_leaky) { GC("[10]", "{type: activation, function: leaky_relu, alpha: 0.2}", 3, 1); } END_TEST
START_TEST(act_tanh) { GC("[10]", "{type: activation, function: tanh}", 3, 1); } END_TEST
START_TEST(act_sigmoid) { GC("[10]", "{type: activation, function: sigmoid}", 3, 1); } END_TEST
START_TEST(act_gelu) { GC("[10]", "{type: activation, function: gelu}", 3, 1); } END_TEST
START_TEST(act_gelu_tanh) { GC("[10]", "{type: activation, function: gelu_tanh}", 3, 1); } END_TEST
START_TEST(fc_gelu_tanh) { GC("[6]", "{type: fc, units: 5, activation: gelu_tanh}", 3, 1); } END_TEST
START_TEST(dropout_train) { GC("[12]", "{type: dropout, rate: 0.4}", 4, 1); } END_TEST
START_TEST(dropout_eval) { GC("[12]", "{type: dropout, rate: 0.4}", 4, 0); } END_TEST
START_TEST(flatten) { GC("[2, 3, 4]", "{type: flatten}", 2, 1); } END_TEST

/* loss gradients against central differences of the loss itself */
static void loss_gc(int mse)
{
        enum { R = 4, C = 5 };
        float z[R * C], dz[R * C], t[R * C];
        int32_t lab[R] = { 0, 3, 4, 1 };
        for (int i = 0; i < R * C; i++) { z[i] = (float)sin(i * 1.3) * 2; t[i] = (float)cos(i * 0.7); }
        float scale = 1.0f / R;
        if (mse) dt_loss_mse(z, t, NULL, R, C, scale, dz, NULL);
        else dt_loss_softmax_xent(z, lab, R, C, scale, dz, NULL);
        for (int i = 0; i < R * C; i++) {
                float k = z[i];
                const float e = 1e-3f;
                z[i] = k + e;
                double lp = mse ? dt_loss_mse(z, t, NULL, R, C, 0, NULL, NULL) : dt_loss_softmax_xent(z, lab, R, C, 0, NULL, NULL);
                z[i] = k - e;
                double lm = mse ? dt_loss_mse(z, t, NULL, R, C, 0, NULL, NULL) : dt_loss_softmax_xent(z, lab, R, C, 0, NULL, NULL);
                z[i] = k;
                double num = (lp - lm) / (2 * e) * scale;
                ck_assert_msg(fabs(num - dz[i]) <= 1e-3 + 1e-2 * fabs(num), "loss %d elem %d: %g vs %g", mse, i, dz[i], num);
        }
}
START_TEST(xent_grad) { loss_gc(0); } END_TEST
START_TEST(mse_grad) { loss_gc(1); } END_TEST

/* softmax cross-entropy of logits (1, 2, 3) with label 2 = log(e + e^2 + e^3) - 3 */
START_TEST(xent_value)
{
        float z[3] = { 1, 2, 3 };
        int32_t y = 2;
        long corr = 0;
        double l = dt_loss_softmax_xent(z, &y, 1, 3, 1, NULL, &corr);
        ck_assert_double_eq_tol(l, log(exp(1) + exp(2) + exp(3)) - 3, 1e-6);
        ck_assert_int_eq(corr, 1);
}
END_TEST

/* the loss on 2 threads (rows split among them) gives the 1-thread total, gradient and hits bit for bit */
START_TEST(xent_threads_same)
{
        const int R = 301, C = 86;
        float *z = malloc((size_t)R * C * sizeof *z), *d1 = malloc((size_t)R * C * sizeof *d1),
              *d2 = malloc((size_t)R * C * sizeof *d2);
        int32_t *lab = malloc((size_t)R * sizeof *lab);
        uint64_t s = 12345;
        for (int i = 0; i < R * C; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                z[i] = (float)((s >> 40) % 20000) / 1000.0f - 10.0f;
        }
        for (int r = 0; r < R; r++) lab[r] = (r * 7) % C;
        dt_backend *be = dt_backend_cpu_new(2);
        long c1 = 0, c2 = 0;
        double l1 = dt_loss_softmax_xent(z, lab, R, C, 0.01f, d1, &c1);
        double l2 = dt_loss_softmax_xent_be(be, z, lab, R, C, 0.01f, d2, &c2);
        ck_assert_msg(l1 == l2, "loss %.17g on 2 threads, %.17g on 1", l2, l1);
        ck_assert_int_eq(c1, c2);
        ck_assert_msg(!memcmp(d1, d2, (size_t)R * C * sizeof *d1), "the gradient differs on 2 threads");
        dt_backend_free(be);
        free(z); free(d1); free(d2); free(lab);
}
END_TEST

/* gelu_tanh against PyTorch's F.gelu(x, approximate='tanh') in float64, on the cpu backend's kernels */
START_TEST(gelu_tanh_value)
{
        const float x[8] = { -3.0f, -1.0f, -0.5f, 0.25f, 1.0f, 2.5f, 10.0f, -10.0f };
        const double want[8] = { -0.0036373920817729943, -0.15880800939172324, -0.15428599017485606,
                                 0.149675350701685, 0.8411919906082768, 2.484915733910001, 10.0, 0.0 };
        float y[8];
        dt_backend *be = dt_backend_cpu_new(1);
        be->ops->act_fwd(be, DT_ACT_GELU_TANH, 0, x, y, 8);
        for (int i = 0; i < 8; i++)
                ck_assert_msg(fabs(y[i] - want[i]) <= 2e-7 * fmax(1, fabs(want[i])), "gelu_tanh(%g) = %.9g, want %.9g",
                              (double)x[i], (double)y[i], want[i]);
        dt_backend_free(be);
}
END_TEST

/* dropout keeps about 1 - p of the elements, independent of how the batch is cut */
START_TEST(dropout_mask_split)
{
        dt_backend *be = dt_backend_cpu_new(1);
        enum { B = 64, P = 100 };
        float *a = calloc(B * P, 4), *b = calloc(B * P, 4);
        be->ops->dropout_mask(be, a, B, P, 1234, 0, 0.3f);
        be->ops->dropout_mask(be, b, B / 2, P, 1234, 0, 0.3f);
        be->ops->dropout_mask(be, b + B / 2 * P, B / 2, P, 1234, B / 2, 0.3f);
        int kept = 0;
        for (int i = 0; i < B * P; i++) {
                ck_assert(a[i] == b[i]);
                kept += a[i] != 0;
        }
        ck_assert(fabs(kept / (double)(B * P) - 0.7) < 0.03);
        free(a); free(b);
        dt_backend_free(be);
}
END_TEST

/* dropout's mask and product over two threads (from 32K floats) give one thread's bits, on either
 * side of the threshold */
START_TEST(dropout_threads)
{
        dt_backend *be1 = dt_backend_cpu_new(1), *be2 = dt_backend_cpu_new(2);
        static const int per[] = { 127, 128, 256, 33 };
        for (size_t i = 0; i < sizeof per / sizeof *per; i++) {
                const int B = 256;
                const size_t n = (size_t)B * per[i];
                float *x = malloc(n * 4), *m1 = malloc(n * 4), *m2 = malloc(n * 4), *y1 = malloc(n * 4), *y2 = malloc(n * 4);
                for (size_t j = 0; j < n; j++) x[j] = (float)j * 0.37f - 1000.0f;
                be1->ops->dropout_mask(be1, m1, B, (size_t)per[i], 99, 5, 0.25f);
                be2->ops->dropout_mask(be2, m2, B, (size_t)per[i], 99, 5, 0.25f);
                be1->ops->mul(be1, n, x, m1, y1);
                be2->ops->mul(be2, n, x, m2, y2);
                ck_assert_msg(!memcmp(m1, m2, n * 4) && !memcmp(y1, y2, n * 4), "dropout %zu floats: 2 threads differ", n);
                free(x); free(m1); free(m2); free(y1); free(y2);
        }
        dt_backend_free(be1);
        dt_backend_free(be2);
}
END_TEST

/* ---- zb-h1's split backward: its two halves are the combined backward bit for bit (1 and 2
 * threads, dx wanted or not), and pass the finite-difference check on their own ---- */
static const char *const fc_kinds[] = {
        "{type: fc, units: 30}", "{type: fc, units: 30, bias: false}",
        "{type: fc, units: 30, activation: relu}", "{type: fc, units: 30, activation: gelu}",
        "{type: fc, units: 30, activation: leaky_relu, alpha: 0}", "{type: fc, units: 30, activation: tanh}",
};

START_TEST(fc_split_same)
{
        for (size_t i = 0; i < sizeof fc_kinds / sizeof *fc_kinds; i++) {
                DT_SPLIT_SAME("[40]", fc_kinds[i], 16, 1);
                DT_SPLIT_SAME("[40]", fc_kinds[i], 16, 2);
        }
        DT_SPLIT_SAME("[5, 12]", "{type: fc, units: 7, activation: sigmoid}", 3, 2);
}
END_TEST

#define GCS(input, layer, B) do { \
        double w = dt_gradcheck_split(input, layer, B, 1); \
        ck_assert_msg(w <= 1.0, "%s (split): worst scaled error %g", layer, w); } while (0)
START_TEST(fc_split_gradcheck)
{
        GCS("[7]", "{type: fc, units: 5}", 3);
        GCS("[6]", "{type: fc, units: 5, activation: gelu}", 3);
        GCS("[6]", "{type: fc, units: 5, activation: tanh, bias: false}", 3);
        GCS("[4, 6]", "{type: fc, units: 3, activation: sigmoid}", 2);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("layers");
        TCase *tc = tcase_create("gradcheck");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, fc_plain); tcase_add_test(tc, fc_nobias); tcase_add_test(tc, fc_relu);
        tcase_add_test(tc, fc_tanh); tcase_add_test(tc, fc_sigmoid); tcase_add_test(tc, fc_gelu);
        tcase_add_test(tc, fc_leaky); tcase_add_test(tc, fc_seq);
        tcase_add_test(tc, act_relu); tcase_add_test(tc, act_leaky); tcase_add_test(tc, act_tanh);
        tcase_add_test(tc, act_sigmoid); tcase_add_test(tc, act_gelu); tcase_add_test(tc, act_gelu_tanh);
        tcase_add_test(tc, fc_gelu_tanh); tcase_add_test(tc, gelu_tanh_value);
        tcase_add_test(tc, dropout_train); tcase_add_test(tc, dropout_eval); tcase_add_test(tc, flatten);
        tcase_add_test(tc, xent_grad); tcase_add_test(tc, mse_grad); tcase_add_test(tc, xent_value);
        tcase_add_test(tc, xent_threads_same);
        tcase_add_test(tc, dropout_mask_split); tcase_add_test(tc, dropout_threads);
        tcase_add_test(tc, fc_split_same); tcase_add_test(tc, fc_split_gradcheck);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
