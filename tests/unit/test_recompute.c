/* tests/unit/test_recompute.c - activation recomputation (partition.recompute) on the graph: with two
 * micro-batches in flight, a graph that drops and remakes its layers' outputs gives the gradients,
 * outputs and running statistics of one that keeps them, bit for bit, on a branched CNN (a residual
 * add, a concat, batch norm, dropout) and an LSTM; and the memory plan counts what it saves. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "util/common.h"

static const char *cnn =
        "  - {type: conv, name: c1, filters: 3, kernel: 3, padding: 1}\n"
        "  - {type: batchnorm, name: bn1, activation: relu}\n"
        "  - {type: conv, name: c2, filters: 3, kernel: 3, padding: 1}\n"
        "  - {type: batchnorm, name: bn2}\n"
        "  - {type: add, name: res, inputs: [bn2, bn1], activation: relu}\n"
        "  - {type: concat, name: cat, inputs: [res, c1]}\n"
        "  - {type: maxpool, name: pool, kernel: 2}\n"
        "  - {type: flatten, name: flat}\n"
        "  - {type: fc, name: fc1, units: 8, activation: tanh}\n"
        "  - {type: dropout, name: drop, rate: 0.3}\n"
        "  - {type: fc, name: out, units: 3}\n";

/* cnn-bn's pattern: batch norm (relu fused) whose backward reads x only, a max pool whose backward
 * reads neither tensor, and batch norm, flatten and dropout that take dx == dy */
static const char *chain =
        "  - {type: conv, name: c1, filters: 4, kernel: 3, padding: 1, bias: false}\n"
        "  - {type: batchnorm, name: bn1, activation: relu}\n"
        "  - {type: maxpool, name: pool, kernel: 2}\n"
        "  - {type: flatten, name: flat}\n"
        "  - {type: fc, name: fc1, units: 8, activation: relu}\n"
        "  - {type: dropout, name: drop, rate: 0.3}\n"
        "  - {type: batchnorm, name: bn2}\n"
        "  - {type: fc, name: out, units: 3}\n";

static const char *rnn =
        "  - {type: lstm, name: rec, hidden: 6, return_sequences: true}\n"
        "  - {type: dropout, name: drop, rate: 0.4}\n"
        "  - {type: lstm, name: rec2, hidden: 5}\n"
        "  - {type: batchnorm, name: bn}\n"
        "  - {type: fc, name: out, units: 3}\n";

typedef struct model {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        char path[64];
} model;

static void build(model *m, const char *shape, const char *lay, const dt_recompute_rules *r, int B, int nslots)
{
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(m->path, sizeof m->path, shape, lay, NULL), 0);
        ck_assert_int_eq(dt_model_spec_load(&m->s, m->path, &d), 0);
        ck_assert_int_eq(dt_graph_build(&m->g, &m->s, &d), 0);
        ck_assert_int_eq(d.n, 0);
        if (r) dt_graph_set_recompute(&m->g, r);
        m->be = dt_backend_cpu_new(1);
        if (B) {
                ck_assert_int_eq(dt_graph_alloc_slots(&m->g, m->be, B, nslots), 0);
                dt_graph_init_params(&m->g, 11);
        }
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

/* F0 F1 B0 B1 as gpipe runs them, L = |out|^2 / 2 per micro-batch; out[j] gets each forward's output */
static void two_micro_batches(model *m, int B, float *out[2])
{
        size_t n = (size_t)B * dt_shape_size(&m->g.layers[m->g.n - 1].out);
        dt_fwd_ctx c[2];
        for (int j = 0; j < 2; j++) {
                c[j] = (dt_fwd_ctx){ .training = 1, .seed = 3, .step = 1, .pos0 = B * j };
                dt_graph_use_slot(&m->g, j);
                input(m, B, 20 + j);
                dt_graph_forward(&m->g, &c[j], B);
                memcpy(out[j], m->g.act[m->g.n], n * sizeof(float));
        }
        for (int j = 0; j < 2; j++) {
                dt_graph_use_slot(&m->g, j);
                memcpy(m->g.dact[m->g.n], m->g.act[m->g.n], n * sizeof(float));
                dt_graph_backward(&m->g, &c[j], B);
        }
}

static void same_as_kept(const char *shape, const char *lay, dt_recompute_mode mode, const char *pattern)
{
        enum { B = 4 };
        dt_recompute_rules r = { .mode = mode, .n = pattern ? 1 : 0 };
        if (pattern) snprintf(r.pattern[0], sizeof r.pattern[0], "%s", pattern);
        model ref, rc;
        build(&ref, shape, lay, NULL, B, 2);
        build(&rc, shape, lay, &r, B, 2);
        int nrc = 0;
        for (int i = 0; i < rc.g.n; i++) nrc += dt_graph_recomputed(&rc.g, i);
        ck_assert_msg(nrc > 0 && rc.g.rc, "mode %d: no layer recomputed", mode);
        ck_assert(!dt_graph_recomputed(&rc.g, rc.g.n - 1));    /* the loss reads the last output */
        size_t no = (size_t)B * dt_shape_size(&ref.g.layers[ref.g.n - 1].out);
        float *o[2][2];
        for (int k = 0; k < 2; k++)
                for (int j = 0; j < 2; j++) o[k][j] = dt_falloc(no);
        two_micro_batches(&ref, B, o[0]);
        two_micro_batches(&rc, B, o[1]);
        for (int j = 0; j < 2; j++) ck_assert_msg(!memcmp(o[0][j], o[1][j], no * sizeof(float)), "output %d", j);
        for (size_t i = 0; i < ref.g.nparams; i++)
                ck_assert_msg(!memcmp(&ref.g.grads[i], &rc.g.grads[i], sizeof(float)), "grad %zu: %.9g vs %.9g", i,
                              ref.g.grads[i], rc.g.grads[i]);
        /* running statistics: each forward's update once, not again when recomputed */
        for (size_t i = 0; i < ref.g.nbuffers; i++)
                ck_assert_msg(!memcmp(&ref.g.buffers[i], &rc.g.buffers[i], sizeof(float)), "buffer %zu: %.9g vs %.9g",
                              i, ref.g.buffers[i], rc.g.buffers[i]);
        /* a recomputed layer's output is not a slot's own, nor its state */
        for (int i = 0; i < rc.g.n; i++)
                if (dt_graph_recomputed(&rc.g, i)) {
                        ck_assert_ptr_eq(rc.g.slot_act[0][i + 1], rc.g.slot_act[1][i + 1]);
                        ck_assert_ptr_eq(rc.g.slot_priv[i], rc.g.slot_priv[rc.g.n + i]);
                }
        for (int k = 0; k < 2; k++)
                for (int j = 0; j < 2; j++) free(o[k][j]);
        destroy(&ref);
        destroy(&rc);
}

START_TEST(cnn_all) { same_as_kept("[2, 6, 6]", cnn, DT_RECOMPUTE_ALL, NULL); } END_TEST
START_TEST(cnn_auto) { same_as_kept("[2, 6, 6]", cnn, DT_RECOMPUTE_AUTO, NULL); } END_TEST
START_TEST(cnn_list) { same_as_kept("[2, 6, 6]", cnn, DT_RECOMPUTE_LIST, "bn*"); } END_TEST
/* the shortcut's source (bn1) remade with the add that reads it several layers later */
START_TEST(cnn_branch) { same_as_kept("[2, 6, 6]", cnn, DT_RECOMPUTE_LIST, "[bcr]*"); } END_TEST
START_TEST(chain_all) { same_as_kept("[1, 6, 6]", chain, DT_RECOMPUTE_LIST, "*"); } END_TEST
START_TEST(rnn_all) { same_as_kept("[5, 4]", rnn, DT_RECOMPUTE_ALL, NULL); } END_TEST
START_TEST(rnn_list) { same_as_kept("[5, 4]", rnn, DT_RECOMPUTE_LIST, "rec*"); } END_TEST

/* In place: bn1's input gradient (c1's output's) takes its output gradient's place, as do flatten's,
 * dropout's and bn2's; pool's and fc1's inputs keep their own (sizes differ; fc reads them). */
START_TEST(chain_in_place)
{
        dt_recompute_rules r = { .mode = DT_RECOMPUTE_LIST, .n = 1 };
        snprintf(r.pattern[0], sizeof r.pattern[0], "*");
        model m;
        build(&m, "[1, 6, 6]", chain, &r, 4, 1);
        float **d = m.g.dact;
        ck_assert_ptr_eq(d[1], d[2]);   /* bn1 */
        ck_assert_ptr_ne(d[2], d[3]);   /* pool */
        ck_assert_ptr_eq(d[3], d[4]);   /* flatten */
        ck_assert_ptr_ne(d[4], d[5]);   /* fc1 */
        ck_assert_ptr_eq(d[5], d[6]);   /* dropout */
        ck_assert_ptr_eq(d[6], d[7]);   /* bn2 */
        ck_assert_ptr_ne(d[7], d[8]);   /* the loss's gradient keeps its own buffer */
        destroy(&m);
}
END_TEST

/* The plan: recomputed layers keep nothing per slot, and the whole plan shrinks, more with slots. */
START_TEST(memory_plan)
{
        dt_recompute_rules all = { .mode = DT_RECOMPUTE_ALL };
        model ref, rc;
        build(&ref, "[2, 6, 6]", cnn, NULL, 0, 1);
        build(&rc, "[2, 6, 6]", cnn, &all, 0, 1);
        /* all's checkpoints: one per window of 4 layers among the outputs that are the only tensor
         * crossing to the next layer; bn1, whose output the add reads, is never one */
        static const int kept[] = { 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1 };
        ck_assert_int_eq(rc.g.n, 11);
        for (int i = 0; i < rc.g.n; i++)
                ck_assert_msg(dt_graph_recomputed(&rc.g, i) == !kept[i], "layer %d", i);
        for (int s = 1; s <= 4; s *= 2) {
                size_t a = dt_graph_memory_slots(&ref.g, 256, 2, s), b = dt_graph_memory_slots(&rc.g, 256, 2, s);
                ck_assert_msg(b < a, "%d slots: %zu with recomputation, %zu without", s, b, a);
        }
        size_t d1 = dt_graph_memory_slots(&ref.g, 256, 2, 4) - dt_graph_memory_slots(&ref.g, 256, 2, 1);
        size_t d2 = dt_graph_memory_slots(&rc.g, 256, 2, 4) - dt_graph_memory_slots(&rc.g, 256, 2, 1);
        ck_assert_uint_lt(d2, d1);      /* a slot costs only the checkpoints */
        for (int i = 0; i < rc.g.n; i++) {
                ck_assert_uint_eq(dt_graph_layer_kept_bytes(&rc.g, i, 8, 1), 0);
                ck_assert_uint_ge(dt_graph_layer_kept_bytes(&rc.g, i, 8, 0),
                                  8 * sizeof(float) * dt_shape_size(&rc.g.layers[i].out));
        }
        /* the region is what the plan adds beyond the checkpoints; none without recomputation */
        ck_assert_uint_gt(dt_graph_recompute_region_bytes(&rc.g, 256), 0);
        ck_assert_uint_lt(dt_graph_recompute_region_bytes(&rc.g, 256), dt_graph_memory_slots(&rc.g, 256, 2, 1));
        ck_assert_uint_eq(dt_graph_recompute_region_bytes(&ref.g, 256), 0);
        /* none marks nothing: the plan is the plain one */
        dt_recompute_rules none = { .mode = DT_RECOMPUTE_NONE };
        dt_graph_set_recompute(&rc.g, &none);
        ck_assert_uint_eq(dt_graph_memory_slots(&rc.g, 256, 2, 3), dt_graph_memory_slots(&ref.g, 256, 2, 3));
        destroy(&ref);
        destroy(&rc);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("recompute");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, cnn_all);
        tcase_add_test(tc, cnn_auto);
        tcase_add_test(tc, cnn_list);
        tcase_add_test(tc, cnn_branch);
        tcase_add_test(tc, chain_all);
        tcase_add_test(tc, chain_in_place);
        tcase_add_test(tc, rnn_all);
        tcase_add_test(tc, rnn_list);
        tcase_add_test(tc, memory_plan);
        suite_add_tcase(s, tc);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int nf = srunner_ntests_failed(r);
        srunner_free(r);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
