/* tests/unit/test_slots.c - the graph's micro-batch slots and hooks, and the backend capability
 * check: what a pipeline will rely on, proved on the cpu backend before any pipeline exists. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "parallel/pipeline.h"
#include "util/common.h"

/* a model whose backward reads what forward kept: a dropout mask, batch-norm statistics, LSTM gates */
static const char *layers =
        "  - {type: lstm, name: rec, hidden: 6, return_sequences: false}\n"
        "  - {type: fc, name: fc1, units: 8, activation: gelu}\n"
        "  - {type: batchnorm, name: bn}\n"
        "  - {type: dropout, rate: 0.4}\n"
        "  - {type: fc, name: out, units: 3}\n";

typedef struct model {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        char path[64];
} model;

/* a CNN for the split backward: conv and fc split theirs, the rest do it whole in the input pass */
static const char *cnn_layers =
        "  - {type: conv, name: c1, filters: 3, kernel: 3, padding: 1, activation: relu}\n"
        "  - {type: maxpool, kernel: 2}\n"
        "  - {type: conv, name: c2, filters: 4, kernel: 1, activation: gelu}\n"
        "  - {type: flatten}\n"
        "  - {type: fc, name: fc1, units: 8, activation: tanh}\n"
        "  - {type: batchnorm, name: bn}\n"
        "  - {type: dropout, rate: 0.3}\n"
        "  - {type: fc, name: out, units: 3}\n";

/* input_grad and keep_dact as a pipeline stage sets them before alloc */
static void build_with(model *m, const char *input_shape, const char *lay, int B, int nslots, int input_grad,
                       int keep_dact)
{
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(m->path, sizeof m->path, input_shape, lay, NULL), 0);
        ck_assert_int_eq(dt_model_spec_load(&m->s, m->path, &d), 0);
        ck_assert_int_eq(dt_graph_build(&m->g, &m->s, &d), 0);
        ck_assert_int_eq(d.n, 0);
        m->g.input_grad = input_grad;
        m->g.keep_dact = keep_dact;
        m->be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc_slots(&m->g, m->be, B, nslots), 0);
        dt_graph_init_params(&m->g, 11);
}

static void build(model *m, int B, int nslots)
{
        build_with(m, "[5, 4]", layers, B, nslots, 0, 0);
}

static void destroy(model *m)
{
        dt_graph_free(&m->g);
        dt_backend_free(m->be);
        dt_model_spec_free(&m->s);
        unlink(m->path);
}

static void input(model *m, int B, unsigned seed)
{
        size_t n = (size_t)B * dt_shape_size(&m->g.input);
        srand(seed);
        for (size_t i = 0; i < n; i++) m->g.act[0][i] = (float)rand() / RAND_MAX - 0.5f;
}

/* dL/dout = out (L = |out|^2 / 2), backward, and the gradient sum */
static void backward(model *m, const dt_fwd_ctx *c, int B)
{
        size_t n = (size_t)B * dt_shape_size(&m->g.layers[m->g.n - 1].out);
        memcpy(m->g.dact[m->g.n], m->g.act[m->g.n], n * sizeof(float));
        dt_graph_backward(&m->g, c, B);
}

/* Two micro-batches in flight (forward a, forward b, backward b, backward a) give the gradient of
 * running them one after the other: each slot kept its own masks, statistics and gates. The two
 * gradients are added in the other order, so they agree to float rounding (2e-5), not bitwise;
 * a slot reading another's state would be off by far more. */
START_TEST(slots_hold_micro_batches)
{
        const int B = 4;
        model ref, two;
        build(&ref, B, 1);
        build(&two, B, 2);
        dt_fwd_ctx ca = { .training = 1, .seed = 3, .step = 0, .pos0 = 0 };
        dt_fwd_ctx cb = { .training = 1, .seed = 3, .step = 0, .pos0 = B };

        input(&ref, B, 1);
        dt_graph_forward(&ref.g, &ca, B);
        backward(&ref, &ca, B);
        input(&ref, B, 2);
        dt_graph_forward(&ref.g, &cb, B);
        backward(&ref, &cb, B);

        dt_graph_use_slot(&two.g, 0);
        input(&two, B, 1);
        dt_graph_forward(&two.g, &ca, B);
        dt_graph_use_slot(&two.g, 1);
        input(&two, B, 2);
        dt_graph_forward(&two.g, &cb, B);
        backward(&two, &cb, B);
        dt_graph_use_slot(&two.g, 0);
        backward(&two, &ca, B);

        ck_assert_uint_eq(ref.g.nparams, two.g.nparams);
        for (size_t i = 0; i < ref.g.nparams; i++)
                ck_assert_msg(fabsf(ref.g.grads[i] - two.g.grads[i]) <= 2e-5f * (1 + fabsf(ref.g.grads[i])),
                              "grad %zu: %g vs %g", i, ref.g.grads[i], two.g.grads[i]);
        /* the slots really are distinct copies */
        ck_assert_ptr_ne(two.g.slot_act[0][1], two.g.slot_act[1][1]);
        ck_assert_ptr_ne(two.g.slot_priv[0], two.g.slot_priv[two.g.n]);
        destroy(&ref);
        destroy(&two);
}
END_TEST

START_TEST(slots_in_memory_plan)
{
        model m;
        build(&m, 2, 1);
        size_t one = dt_graph_memory(&m.g, 32, 2), s1 = dt_graph_memory_slots(&m.g, 32, 2, 1);
        size_t s4 = dt_graph_memory_slots(&m.g, 32, 2, 4);
        ck_assert_uint_eq(one, s1);
        ck_assert_uint_gt(s4, s1);
        ck_assert_uint_lt(s4, 4 * s1);  /* weights, gradients, moments and dact are not per slot */
        destroy(&m);
}
END_TEST

/* zb-h1 on one stage, 3 micro-batches over 3 slots: F0 F1 F2 B0 B1 W0 B2 W1 W2, each W after
 * other micro-batches' B's, against F B+W one micro-batch at a time (1f1b's order of the same
 * work). The W's run in micro-batch order, so the gradients are equal bit for bit; so is each
 * B's input gradient, read from the shared dact[0] right after its B (as the pipeline sends it). */
static void split_matches_combined(const char *shape, const char *lay)
{
        enum { B = 4, M = 3 };
        model ref, zb;
        build_with(&ref, shape, lay, B, 1, 1, 0);
        build_with(&zb, shape, lay, B, M, 1, 1);
        size_t nin = (size_t)B * dt_shape_size(&ref.g.input), nout = (size_t)B * dt_shape_size(&ref.g.layers[ref.g.n - 1].out);
        float *din[2][M];
        dt_fwd_ctx c[M];
        for (int j = 0; j < M; j++) {
                c[j] = (dt_fwd_ctx){ .training = 1, .seed = 3, .step = 0, .pos0 = B * j };
                din[0][j] = dt_falloc(nin);
                din[1][j] = dt_falloc(nin);
        }
        for (int j = 0; j < M; j++) {
                input(&ref, B, 10 + j);
                dt_graph_forward(&ref.g, &c[j], B);
                memcpy(ref.g.dact[ref.g.n], ref.g.act[ref.g.n], nout * sizeof(float));
                dt_graph_backward(&ref.g, &c[j], B);
                memcpy(din[0][j], ref.g.dact[0], nin * sizeof(float));
        }
        static const char plan[] = "FFFBBWBWW";
        int nb = 0, nw = 0, nf = 0;
        for (const char *a = plan; *a; a++) {
                int j = *a == 'F' ? nf++ : *a == 'B' ? nb++ : nw++;
                dt_graph_use_slot(&zb.g, j);    /* micro-batch j holds slot j here */
                if (*a == 'F') {
                        input(&zb, B, 10 + j);
                        dt_graph_forward(&zb.g, &c[j], B);
                } else if (*a == 'B') {
                        memcpy(zb.g.dact[zb.g.n], zb.g.act[zb.g.n], nout * sizeof(float));
                        dt_graph_backward_input_h(&zb.g, &c[j], B, NULL);
                        memcpy(din[1][j], zb.g.dact[0], nin * sizeof(float));
                } else {
                        dt_graph_backward_weight_h(&zb.g, &c[j], B, NULL);
                }
        }
        for (int j = 0; j < M; j++) {
                ck_assert_msg(!memcmp(din[0][j], din[1][j], nin * sizeof(float)), "micro-batch %d: input gradient", j);
                free(din[0][j]);
                free(din[1][j]);
        }
        for (size_t i = 0; i < ref.g.nparams; i++)
                ck_assert_msg(!memcmp(&ref.g.grads[i], &zb.g.grads[i], sizeof(float)), "grad %zu: %.9g vs %.9g", i,
                              ref.g.grads[i], zb.g.grads[i]);
        /* the split layers' output gradients are per slot, the others and dact[0] shared */
        for (int i = 0; i < zb.g.n; i++)
                if (zb.g.layers[i].ops->backward_weight)
                        ck_assert_ptr_ne(zb.g.slot_dact[0][i + 1], zb.g.slot_dact[1][i + 1]);
                else
                        ck_assert_ptr_eq(zb.g.slot_dact[0][i + 1], zb.g.slot_dact[2][i + 1]);
        ck_assert_ptr_eq(zb.g.slot_dact[0][0], zb.g.slot_dact[1][0]);
        destroy(&ref);
        destroy(&zb);
}

START_TEST(split_backward_mlp) { split_matches_combined("[5, 4]", layers); } END_TEST
START_TEST(split_backward_cnn) { split_matches_combined("[2, 6, 6]", cnn_layers); } END_TEST

/* keep_dact adds each split layer's output gradient once per slot beyond the first */
START_TEST(split_in_memory_plan)
{
        model m;
        build_with(&m, "[2, 6, 6]", cnn_layers, 2, 1, 1, 0);
        size_t off = dt_graph_memory_slots(&m.g, 32, 2, 4), off1 = dt_graph_memory_slots(&m.g, 32, 2, 1), kept = 0;
        m.g.keep_dact = 1;
        size_t on = dt_graph_memory_slots(&m.g, 32, 2, 4);
        for (int i = 0; i < m.g.n; i++)
                if (m.g.layers[i].ops->backward_weight) kept += dt_shape_size(&m.g.layers[i].out);
        ck_assert_uint_gt(kept, 0);
        ck_assert_uint_eq(on - off, 3 * 32 * kept * sizeof(float));
        ck_assert_uint_eq(dt_graph_memory_slots(&m.g, 32, 2, 1), off1);
        m.g.keep_dact = 0;      /* as allocated, for dt_graph_free */
        destroy(&m);
}
END_TEST

static int order[64], norder;
static void on_fwd(void *ud, int layer) { (void)ud; order[norder++] = layer; }
static void on_bwd(void *ud, int layer) { (void)ud; order[norder++] = 100 + layer; }

START_TEST(hooks_after_each_layer)
{
        model m;
        build(&m, 2, 1);
        dt_graph_hooks h = { .fwd_done = on_fwd, .bwd_done = on_bwd };
        dt_fwd_ctx c = { .training = 1, .seed = 3 };
        input(&m, 2, 5);
        norder = 0;
        dt_graph_forward_h(&m.g, &c, 2, &h);
        memcpy(m.g.dact[m.g.n], m.g.act[m.g.n], 2 * 3 * sizeof(float));
        dt_graph_backward_h(&m.g, &c, 2, &h);
        ck_assert_int_eq(norder, 2 * m.g.n);
        for (int i = 0; i < m.g.n; i++) {
                ck_assert_int_eq(order[i], i);
                ck_assert_int_eq(order[m.g.n + i], 100 + m.g.n - 1 - i);
        }
        /* the split passes: each calls bwd_done for every layer, last to first */
        norder = 0;
        dt_graph_forward(&m.g, &c, 2);
        memcpy(m.g.dact[m.g.n], m.g.act[m.g.n], 2 * 3 * sizeof(float));
        dt_graph_backward_input_h(&m.g, &c, 2, &h);
        dt_graph_backward_weight_h(&m.g, &c, 2, &h);
        ck_assert_int_eq(norder, 2 * m.g.n);
        for (int i = 0; i < m.g.n; i++) {
                ck_assert_int_eq(order[i], 100 + m.g.n - 1 - i);
                ck_assert_int_eq(order[m.g.n + i], 100 + m.g.n - 1 - i);
        }
        destroy(&m);
}
END_TEST

START_TEST(backend_caps)
{
        model m;
        build(&m, 2, 1);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cpu", dt_backend_caps_of("cpu"), &d), 0);
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cuda", dt_backend_caps_of("cuda"), &d), 0);
        /* a backend with only the core ops: every layer needing a fused op is named at its key */
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "bare", 0, &d), -1);
        ck_assert_int_eq(d.n, 2);       /* lstm and batchnorm; fc and dropout need only core ops */
        ck_assert_msg(strstr(d.msgs[0].text, "layer 'rec' (lstm): the bare backend has no recurrent op"), "%s",
                      d.msgs[0].text);
        ck_assert_int_eq(d.msgs[0].line, 4);
        ck_assert_msg(strstr(d.msgs[1].text, "layer 'bn' (batchnorm)"), "%s", d.msgs[1].text);
        dt_diag_free(&d);
        ck_assert_uint_eq(dt_backend_caps_of("tpu"), 0);
        ck_assert(dt_backend_supports(m.be, DT_CAP_HOST_MEMORY));
        ck_assert(!dt_backend_supports(m.be, DT_CAP_FUSED_RNN));
        destroy(&m);
}
END_TEST

/* A stage is a contiguous slice of the model: global layer indices (dropout keys), offsets into
 * the stage's own slice of the flat buffers, and its input the previous stage's output. */
START_TEST(graph_range)
{
        model m;
        build(&m, 2, 1);
        dt_graph st;
        dt_graph_range(&m.g, 2, 5, &st);
        ck_assert_int_eq(st.n, 3);
        ck_assert_int_eq(st.first, 2);
        ck_assert_int_eq(st.layers[0].index, 2);
        ck_assert_str_eq(st.layers[0].name, "bn");
        ck_assert(dt_shape_eq(&st.input, &m.g.layers[1].out));
        ck_assert_uint_eq(st.param_base, m.g.layers[2].off[0]);
        ck_assert_uint_eq(st.nparams, m.g.nparams - st.param_base);
        ck_assert_uint_eq(st.layers[0].off[0], 0);
        ck_assert_uint_eq(st.layers[2].off[0], m.g.layers[4].off[0] - st.param_base);
        ck_assert_uint_eq(st.nbuffers, m.g.nbuffers);   /* bn's running statistics */
        dt_graph_free(&st);
        destroy(&m);
}
END_TEST

START_TEST(stage_cuts)
{
        model m;
        build(&m, 2, 1);
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        dt_stage_plan p;
        dt_diag d = { 0 };
        /* balanced: every stage gets a layer, the cut points increase, and the costliest layers
         * (the LSTM, then fc1) are not put together */
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, 3, &p, &d), 0);
        ck_assert_int_eq(p.first[0], 0);
        ck_assert_int_eq(p.first[3], m.g.n);
        for (int s = 0; s < 3; s++) ck_assert_int_lt(p.first[s], p.first[s + 1]);
        ck_assert_int_eq(p.first[1], 1);
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, m.g.n, &p, &d), 0);
        for (int s = 0; s <= m.g.n; s++) ck_assert_int_eq(p.first[s], s);
        /* named cuts */
        cs.cuts.n = 1;
        strcpy(cs.cuts.name[0], "bn");
        cs.cuts.pos[0] = (dt_pos){ 3, 12 };
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, 2, &p, &d), 0);
        ck_assert_int_eq(p.first[1], 2);
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, 3, &p, &d), -1);
        ck_assert_msg(strstr(d.msgs[0].text, "names 1 cut for 3 pipeline stages"), "%s", d.msgs[0].text);
        ck_assert_int_eq(d.msgs[0].line, 3);
        strcpy(cs.cuts.name[0], "rec");
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, 2, &p, &d), -1);
        ck_assert_msg(strstr(d.msgs[1].text, "would start at layer 'rec'"), "%s", d.msgs[1].text);
        strcpy(cs.cuts.name[0], "nope");
        ck_assert_int_eq(dt_stage_plan_make(&cs, &m.g, 2, &p, &d), -1);
        ck_assert_msg(strstr(d.msgs[2].text, "no layer named 'nope'"), "%s", d.msgs[2].text);
        dt_diag_free(&d);
        destroy(&m);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("slots");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, slots_hold_micro_batches);
        tcase_add_test(tc, slots_in_memory_plan);
        tcase_add_test(tc, split_backward_mlp);
        tcase_add_test(tc, split_backward_cnn);
        tcase_add_test(tc, split_in_memory_plan);
        tcase_add_test(tc, hooks_after_each_layer);
        tcase_add_test(tc, backend_caps);
        tcase_add_test(tc, graph_range);
        tcase_add_test(tc, stage_cuts);
        suite_add_tcase(s, tc);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int nf = srunner_ntests_failed(r);
        srunner_free(r);
        return nf ? 1 : 0;
}
