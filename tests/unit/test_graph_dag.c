/* tests/unit/test_graph_dag.c - the layer graph as a DAG: finite-difference gradient checks of add
 * and concat and of graphs where one tensor has several readers (gradients summed), the reader
 * bookkeeping, and the pipeline cut's crossing tensors (dt_graph_range's extra inputs/outputs). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "util/common.h"

#define GG(input, layers, B) do { \
        double w = dt_gradcheck_graph(input, layers, B); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layers, w); } while (0)

/* ---- add ---- */
START_TEST(add_residual)
{
        GG("[2, 4, 4]",
           "  - {type: conv, name: a, filters: 2, kernel: 3, padding: 1}\n"
           "  - {type: conv, name: b, filters: 2, kernel: 1, input: input}\n"
           "  - {type: add, name: s, inputs: [a, b]}\n", 2);
}
END_TEST

START_TEST(add_identity_shortcut)   /* y = conv(x) + x: the graph's input has two readers */
{
        GG("[2, 4, 4]",
           "  - {type: conv, name: a, filters: 2, kernel: 3, padding: 1}\n"
           "  - {type: add, name: s, inputs: [a, input], activation: tanh}\n", 2);
}
END_TEST

START_TEST(add_three_gelu)
{
        GG("[5]",
           "  - {type: fc, name: a, units: 4}\n"
           "  - {type: fc, name: b, units: 4, input: input}\n"
           "  - {type: fc, name: c, units: 4, input: input}\n"
           "  - {type: add, name: s, inputs: [a, b, c], activation: gelu}\n", 3);
}
END_TEST

START_TEST(add_relu)    /* inputs away from relu's kink: a large bias */
{
        GG("[4]",
           "  - {type: fc, name: a, units: 3}\n"
           "  - {type: fc, name: b, units: 3, input: input}\n"
           "  - {type: add, name: s, inputs: [a, b], activation: sigmoid}\n", 2);
}
END_TEST

START_TEST(add_same_twice)      /* y = x + x: one layer reads a tensor twice */
{
        GG("[4]",
           "  - {type: fc, name: a, units: 3}\n"
           "  - {type: add, name: s, inputs: [a, a]}\n"
           "  - {type: fc, name: o, units: 2}\n", 2);
}
END_TEST

/* ---- concat ---- */
START_TEST(concat_channels)
{
        GG("[2, 4, 4]",
           "  - {type: conv, name: a, filters: 3, kernel: 3, padding: 1}\n"
           "  - {type: conv, name: b, filters: 2, kernel: 1, input: input}\n"
           "  - {type: concat, name: c, inputs: [a, b, input]}\n"
           "  - {type: conv, name: o, filters: 2, kernel: 1}\n", 2);
}
END_TEST

START_TEST(concat_flat)
{
        GG("[5]",
           "  - {type: fc, name: a, units: 3}\n"
           "  - {type: fc, name: b, units: 2, input: input}\n"
           "  - {type: concat, name: c, inputs: [b, a]}\n"
           "  - {type: fc, name: o, units: 3}\n", 3);
}
END_TEST

START_TEST(concat_sequence)     /* (T,F): features of every step */
{
        GG("[3, 2]",
           "  - {type: activation, name: a, function: tanh}\n"
           "  - {type: concat, name: c, inputs: [input, a, input]}\n", 2);
}
END_TEST

/* ---- one output, three readers ---- */
START_TEST(three_readers)
{
        /* fc1's output feeds fc2, fc3 and fc4 (each a single-input layer: the later two in backward
         * add their share through the scratch), then a concat and an add read them again */
        GG("[4]",
           "  - {type: fc, name: fc1, units: 5, activation: tanh}\n"
           "  - {type: fc, name: fc2, units: 3, input: fc1}\n"
           "  - {type: fc, name: fc3, units: 3, input: fc1}\n"
           "  - {type: fc, name: fc4, units: 3, input: fc1}\n"
           "  - {type: add, name: s, inputs: [fc2, fc3, fc4]}\n"
           "  - {type: concat, name: c, inputs: [s, fc1]}\n", 2);
}
END_TEST

START_TEST(residual_block_bn)   /* a basic block, batch statistics in training */
{
        GG("[2, 4, 4]",
           "  - {type: conv, name: c1, filters: 3, kernel: 3, padding: 1, bias: false}\n"
           "  - {type: batchnorm, name: b1}\n"
           "  - {type: activation, name: r1, function: tanh}\n"
           "  - {type: conv, name: c2, filters: 3, kernel: 3, padding: 1, bias: false}\n"
           "  - {type: batchnorm, name: b2}\n"
           "  - {type: conv, name: p, filters: 3, kernel: 1, bias: false, input: input}\n"
           "  - {type: add, name: s, inputs: [b2, p], activation: tanh}\n", 3);
}
END_TEST

/* ---- bookkeeping ---- */
static int build(const char *input, const char *layers, dt_model_spec *s, dt_graph *g)
{
        char path[64];
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, layers, NULL), 0);
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(s, path, &d);
        if (rc == 0) rc = dt_graph_build(g, s, &d);
        unlink(path);
        if (d.n) dt_diag_print(&d, stderr);
        dt_diag_free(&d);
        return rc;
}

START_TEST(readers_acc)
{
        dt_model_spec s;
        dt_graph g;
        ck_assert_int_eq(build("[4]",
                               "  - {type: fc, name: a, units: 3}\n"
                               "  - {type: fc, name: b, units: 3, input: a}\n"
                               "  - {type: fc, name: c, units: 3, input: a}\n"
                               "  - {type: add, name: s, inputs: [b, c, a]}\n", &s, &g), 0);
        /* backward runs s, c, b: s writes a's gradient first, c and b add theirs */
        ck_assert_int_eq(g.layers[3].acc[2], 0);
        ck_assert_int_eq(g.layers[2].acc[0], 1);
        ck_assert_int_eq(g.layers[1].acc[0], 1);
        ck_assert_int_eq(g.layers[3].acc[0], 0);
        ck_assert_uint_eq(g.gsum_per, 3);
        ck_assert_int_eq(g.nout, 1);
        ck_assert_int_eq(g.out_t[0], 4);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

START_TEST(cut_inside_block)
{
        dt_model_spec s;
        dt_graph g, s0, s1;
        ck_assert_int_eq(build("[4]",
                               "  - {type: fc, name: a, units: 3}\n"           /* tensor 1 */
                               "  - {type: fc, name: b, units: 3}\n"           /* 2 */
                               "  - {type: fc, name: c, units: 3}\n"           /* 3 */
                               "  - {type: add, name: s, inputs: [c, a]}\n"    /* 4 */
                               "  - {type: fc, name: o, units: 2}\n", &s, &g), 0);
        /* cut before c: b's output and a's (the shortcut) cross */
        dt_graph_range(&g, 0, 2, &s0);
        dt_graph_range(&g, 2, 5, &s1);
        ck_assert_int_eq(s0.nout, 2);
        ck_assert_int_eq(s0.out_t[0], 1);       /* a */
        ck_assert_int_eq(s0.out_t[1], 2);       /* b = s0's act[n] */
        ck_assert_int_eq(s1.nx, 1);
        ck_assert_int_eq(s1.x_id[0], 1);
        ck_assert_int_eq(s1.layers[1].src[1], s1.n + 1);        /* s reads the extra input */
        ck_assert_int_eq(s1.layers[0].src[0], 0);               /* c reads act[0] = b */
        ck_assert_int_eq(s1.nout, 1);
        ck_assert_int_eq(s1.out_t[0], s1.n);
        /* a stage of c alone: a crosses into it and out again untouched (a pass-through) */
        dt_graph m;
        dt_graph_range(&g, 2, 3, &m);
        ck_assert_int_eq(m.nx, 1);
        ck_assert_int_eq(m.nout, 2);
        ck_assert_int_eq(m.out_t[0], m.n + 1);  /* a, passed on untouched */
        ck_assert_int_eq(m.out_t[1], m.n);
        dt_graph_free(&m);
        dt_graph_free(&s0);
        dt_graph_free(&s1);
        dt_graph_free(&g);
        dt_model_spec_free(&s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("graph_dag");
        TCase *tc = tcase_create("gradcheck");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, add_residual); tcase_add_test(tc, add_identity_shortcut);
        tcase_add_test(tc, add_three_gelu); tcase_add_test(tc, add_relu); tcase_add_test(tc, add_same_twice);
        tcase_add_test(tc, concat_channels); tcase_add_test(tc, concat_flat); tcase_add_test(tc, concat_sequence);
        tcase_add_test(tc, three_readers); tcase_add_test(tc, residual_block_bn);
        suite_add_tcase(s, tc);
        TCase *tb = tcase_create("bookkeeping");
        tcase_add_test(tb, readers_acc); tcase_add_test(tb, cut_inside_block);
        suite_add_tcase(s, tb);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
