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

static void build(model *m, int B, int nslots)
{
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(m->path, sizeof m->path, "[5, 4]", layers, NULL), 0);
        ck_assert_int_eq(dt_model_spec_load(&m->s, m->path, &d), 0);
        ck_assert_int_eq(dt_graph_build(&m->g, &m->s, &d), 0);
        ck_assert_int_eq(d.n, 0);
        m->be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc_slots(&m->g, m->be, B, nslots), 0);
        dt_graph_init_params(&m->g, 11);
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
