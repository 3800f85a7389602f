/* tests/unit/test_rnn_layout.c - the PyTorch <-> cuDNN recurrent weight mapping (pure host): for
 * rnn, lstm and gru shapes with and without bias, over one and several layers, with offset tables
 * laid out as cuDNN does (per layer: the 2G matrices, then the 2G biases) and in a scrambled
 * order, pack then unpack gives back every tensor exactly; each gate block lands at its offset;
 * accumulate adds; bad tables are refused. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/rnn_layout.h"

/* cuDNN-like table: layer by layer, matrices in id order, then biases; 'gap' floats of padding
 * between items (cuDNN may align), 'reverse' lays the ids out in reverse order. */
static size_t make_table(const dt_rnn_shape *s, dt_rnn_offsets *o, size_t gap, int reverse)
{
        size_t at = 0, H = (size_t)s->H;
        memset(o, 0, sizeof *o);
        for (int k = 0; k < s->L; k++) {
                size_t I = (size_t)(k ? s->H : s->I);
                for (int j = 0; j < 2 * s->gates; j++) {
                        int id = reverse ? 2 * s->gates - 1 - j : j;
                        o->w[k][id] = at;
                        at += H * (id >= s->gates ? H : I) + gap;
                }
                if (s->bias)
                        for (int j = 0; j < 2 * s->gates; j++) {
                                int id = reverse ? 2 * s->gates - 1 - j : j;
                                o->b[k][id] = at;
                                at += H + gap;
                        }
        }
        return at;
}

static void roundtrip(int gates, int I, int H, int L, int bias, size_t gap, int reverse)
{
        dt_rnn_shape s = { .gates = gates, .I = I, .H = H, .L = L, .bias = bias };
        dt_rnn_offsets o;
        size_t flat_len = make_table(&s, &o, gap, reverse);
        int nt = dt_rnn_layout_ntensors(&s);
        ck_assert_int_eq(nt, L * (bias ? 4 : 2));
        float **src = calloc((size_t)nt, sizeof *src), **back = calloc((size_t)nt, sizeof *back);
        size_t total = 0;
        for (int t = 0; t < nt; t++) {
                size_t n = dt_rnn_layout_tensor_len(&s, t);
                total += n;
                src[t] = malloc(n * sizeof **src);
                back[t] = calloc(n, sizeof **back);
                for (size_t i = 0; i < n; i++) src[t][i] = (float)(t * 100000 + (int)i);   /* unique values */
        }
        dt_rnn_seg *segs = malloc((size_t)dt_rnn_layout_nsegs(&s) * sizeof *segs);
        char why[256];
        int n = dt_rnn_layout_plan(&s, &o, flat_len, segs, why, sizeof why);
        ck_assert_msg(n == dt_rnn_layout_nsegs(&s), "plan: %d (%s)", n, n < 0 ? why : "");
        size_t covered = 0;
        for (int i = 0; i < n; i++) covered += segs[i].len;
        ck_assert_uint_eq(covered, total);      /* every element of every tensor exactly once */

        float *flat = malloc(flat_len * sizeof *flat);
        for (size_t i = 0; i < flat_len; i++) flat[i] = -1.0f;
        dt_rnn_layout_pack(segs, n, (const float *const *)src, flat);
        /* gate g of weight_ih_l0 sits at o.w[0][g], of weight_hh_l0 at o.w[0][G+g], row-major */
        size_t I0 = (size_t)I;
        for (int g = 0; g < gates; g++) {
                ck_assert(flat[o.w[0][g]] == src[0][(size_t)g * H * I0]);
                ck_assert(flat[o.w[0][g] + 1] == src[0][(size_t)g * H * I0 + 1]);
                ck_assert(flat[o.w[0][gates + g] + (size_t)H * H - 1] == src[1][(size_t)(g + 1) * H * H - 1]);
                if (bias) {
                        ck_assert(flat[o.b[0][g]] == src[2][(size_t)g * H]);
                        ck_assert(flat[o.b[0][gates + g] + (size_t)H - 1] == src[3][(size_t)(g + 1) * H - 1]);
                }
        }
        if (L > 1) ck_assert(flat[o.w[1][0]] == src[bias ? 4 : 2][0]);
        dt_rnn_layout_unpack(segs, n, flat, back, 0);
        for (int t = 0; t < nt; t++)
                ck_assert_msg(!memcmp(src[t], back[t], dt_rnn_layout_tensor_len(&s, t) * sizeof(float)),
                              "tensor %d differs after the round trip", t);
        /* accumulate: back += flat's values = 2 src */
        dt_rnn_layout_unpack(segs, n, flat, back, 1);
        for (int t = 0; t < nt; t++)
                for (size_t i = 0; i < dt_rnn_layout_tensor_len(&s, t); i++)
                        ck_assert(back[t][i] == 2 * src[t][i]);
        for (int t = 0; t < nt; t++) {
                free(src[t]);
                free(back[t]);
        }
        free(src);
        free(back);
        free(segs);
        free(flat);
}

START_TEST(lstm_layouts)
{
        roundtrip(4, 28, 16, 1, 1, 0, 0);
        roundtrip(4, 28, 16, 2, 1, 0, 0);
        roundtrip(4, 5, 7, 3, 1, 3, 1);
        roundtrip(4, 9, 4, 2, 0, 0, 0);
}
END_TEST

START_TEST(gru_layouts)
{
        roundtrip(3, 28, 16, 1, 1, 0, 0);
        roundtrip(3, 6, 5, 2, 1, 1, 1);
        roundtrip(3, 6, 5, 2, 0, 0, 0);
}
END_TEST

START_TEST(rnn_layouts)
{
        roundtrip(1, 10, 8, 1, 1, 0, 0);
        roundtrip(1, 3, 8, 4, 1, 2, 1);
        roundtrip(1, 3, 8, 2, 0, 0, 0);
}
END_TEST

START_TEST(bad_tables)
{
        dt_rnn_shape s = { .gates = 4, .I = 4, .H = 3, .L = 1, .bias = 1 };
        dt_rnn_offsets o;
        size_t len = make_table(&s, &o, 0, 0);
        dt_rnn_seg segs[16];
        char why[256];
        ck_assert_int_eq(dt_rnn_layout_plan(&s, &o, len - 1, segs, why, sizeof why), -1);   /* too small */
        ck_assert_ptr_nonnull(strstr(why, "leaves"));
        o.b[0][1] = o.b[0][0] + 1;                                                            /* overlap */
        ck_assert_int_eq(dt_rnn_layout_plan(&s, &o, len, segs, why, sizeof why), -1);
        ck_assert_ptr_nonnull(strstr(why, "overlap"));
        s.gates = 2;
        ck_assert_int_eq(dt_rnn_layout_plan(&s, &o, len, segs, why, sizeof why), -1);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("rnn_layout");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, lstm_layouts);
        tcase_add_test(tc, gru_layouts);
        tcase_add_test(tc, rnn_layouts);
        tcase_add_test(tc, bad_tables);
        suite_add_tcase(s, tc);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? 1 : 0;
}
