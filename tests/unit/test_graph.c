/* tests/unit/test_graph.c - Check tests of graph/graph.c through its API, without allocating:
 * shape inference along a small chain, the parameter and buffer layout (offsets, names, the flat
 * buffer sizes, FLOPs) and the memory plan, and shape errors at the layer's file:line:col. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "plan/mem.h"
#include "parallel/dp.h"

/* ---- helpers ---- */

static char path[64];

/* Loads a model with input 'input' and the layer list 'layers' (YAML lines, from line 4 of the
 * file) and builds its graph; returns dt_graph_build's result. */
static int load(dt_model_spec *s, dt_graph *g, const char *input, const char *layers, dt_diag *d)
{
        snprintf(path, sizeof path, "/tmp/dtrain-test-graph-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "name: g\ninput: %s\nlayers:\n%sloss: mse\ndata:\n  train: {format: synthetic, n: 8}\n",
                input, layers);
        fclose(f);
        int rc = dt_model_spec_load(s, path, d);
        unlink(path);
        ck_assert_int_eq(rc, 0);
        return dt_graph_build(g, s, d);
}

static void unload(dt_model_spec *s, dt_graph *g, dt_diag *d)
{
        dt_graph_free(g);
        dt_model_spec_free(s);
        dt_diag_free(d);
}

static void shape_is(const dt_shape *s, int n, int d0, int d1, int d2)
{
        int want[3] = { d0, d1, d2 };
        ck_assert_int_eq(s->n, n);
        for (int i = 0; i < n; i++) ck_assert_int_eq(s->d[i], want[i]);
}

/* lines 4-11 of the spec: conv, batchnorm, relu, maxpool, flatten, fc, dropout, fc */
#define CHAIN \
        "  - {type: conv, name: c1, filters: 3, kernel: 3}\n" \
        "  - {type: batchnorm, name: bn}\n" \
        "  - {type: activation, name: act, function: relu}\n" \
        "  - {type: maxpool, name: pool, kernel: 2}\n" \
        "  - {type: flatten, name: flat}\n" \
        "  - {type: fc, name: f1, units: 5}\n" \
        "  - {type: dropout, name: drop, rate: 0.5}\n" \
        "  - {type: fc, name: f2, units: 3}\n"

/* ---- shapes ---- */

START_TEST(test_shapes)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s, &g, "[2, 6, 6]", CHAIN, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_int_eq(g.n, 8);
        shape_is(&g.input, 3, 2, 6, 6);
        shape_is(&g.layers[0].in, 3, 2, 6, 6);
        shape_is(&g.layers[0].out, 3, 3, 4, 4);         /* 3x3 kernel, no padding */
        shape_is(&g.layers[1].out, 3, 3, 4, 4);
        shape_is(&g.layers[2].out, 3, 3, 4, 4);
        shape_is(&g.layers[3].out, 3, 3, 2, 2);         /* 2x2 pool */
        shape_is(&g.layers[4].out, 1, 12, 0, 0);
        shape_is(&g.layers[5].out, 1, 5, 0, 0);
        shape_is(&g.layers[6].out, 1, 5, 0, 0);
        shape_is(&g.layers[7].out, 1, 3, 0, 0);
        for (int i = 1; i < g.n; i++) {                 /* a chain: each input is the last output */
                ck_assert_int_eq(g.layers[i].index, i);
                ck_assert_mem_eq(&g.layers[i].in, &g.layers[i - 1].out, sizeof(dt_shape));
        }
        ck_assert_str_eq(g.layers[5].name, "f1");
        ck_assert_str_eq(g.layers[5].ops->name, "fc");
        ck_assert_ptr_eq(g.spec, &s);
        ck_assert_ptr_null(g.params);                   /* build allocates no buffers */
        unload(&s, &g, &d);
}
END_TEST

/* ids (T) become vectors (T, E); a recurrent layer keeps T only with return_sequences; fc on
 * (T, I) keeps T */
START_TEST(test_sequence_shapes)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s, &g, "[7]",
                              "  - {type: embedding, name: emb, vocab: 20, dim: 4}\n"
                              "  - {type: lstm, name: rnn, hidden: 6, return_sequences: true}\n"
                              "  - {type: fc, name: proj, units: 20}\n"
                              "  - {type: gru, name: last, hidden: 3}\n", &d), 0);
        shape_is(&g.layers[0].out, 2, 7, 4, 0);
        shape_is(&g.layers[1].out, 2, 7, 6, 0);
        shape_is(&g.layers[2].out, 2, 7, 20, 0);
        shape_is(&g.layers[3].out, 1, 3, 0, 0);
        unload(&s, &g, &d);
}
END_TEST

/* ---- parameter layout ---- */

START_TEST(test_layout)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s, &g, "[2, 6, 6]", CHAIN, &d), 0);
        /* trainable tensors one after another in layer order, buffers in their own buffer */
        static const struct { const char *name; int trainable; size_t off, len; } want[] = {
                { "c1.weight", 1, 0, 3 * 2 * 3 * 3 },
                { "c1.bias", 1, 54, 3 },
                { "bn.weight", 1, 57, 3 },
                { "bn.bias", 1, 60, 3 },
                { "bn.running_mean", 0, 0, 3 },
                { "bn.running_var", 0, 3, 3 },
                { "f1.weight", 1, 63, 5 * 12 },
                { "f1.bias", 1, 123, 5 },
                { "f2.weight", 1, 128, 3 * 5 },
                { "f2.bias", 1, 143, 3 },
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                int li, pi;
                ck_assert_msg(dt_graph_find_tensor(&g, want[i].name, &li, &pi) == 0, "%s", want[i].name);
                const dt_layer *l = &g.layers[li];
                ck_assert_int_eq(l->ps[pi].trainable, want[i].trainable);
                ck_assert_uint_eq(l->off[pi], want[i].off);
                ck_assert_uint_eq(l->len[pi], want[i].len);
                ck_assert_uint_eq(dt_shape_size(&l->ps[pi].shape), want[i].len);
        }
        ck_assert_uint_eq(g.nparams, 146);
        ck_assert_uint_eq(g.nbuffers, 6);
        /* layers without tensors */
        ck_assert_int_eq(g.layers[2].np, 0);
        ck_assert_int_eq(g.layers[3].np, 0);
        ck_assert_int_eq(g.layers[4].np, 0);
        ck_assert_int_eq(g.layers[6].np, 0);
        /* PyTorch's shapes: conv weight (F, C, KH, KW), fc weight (out, in) */
        int li, pi;
        ck_assert_int_eq(dt_graph_find_tensor(&g, "c1.weight", &li, &pi), 0);
        const dt_shape *w = &g.layers[li].ps[pi].shape;
        ck_assert(w->n == 4 && w->d[0] == 3 && w->d[1] == 2 && w->d[2] == 3 && w->d[3] == 3);
        ck_assert_int_eq(dt_graph_find_tensor(&g, "f1.weight", &li, &pi), 0);
        w = &g.layers[li].ps[pi].shape;
        ck_assert(w->n == 2 && w->d[0] == 5 && w->d[1] == 12);
        /* names that are not tensors */
        ck_assert_int_eq(dt_graph_find_tensor(&g, "f1.running_mean", &li, &pi), -1);
        ck_assert_int_eq(dt_graph_find_tensor(&g, "f3.weight", &li, &pi), -1);
        ck_assert_int_eq(dt_graph_find_tensor(&g, "f1weight", &li, &pi), -1);
        ck_assert_int_eq(dt_graph_find_tensor(&g, "f", &li, &pi), -1);
        /* FLOPs: the sum of the layers' own counts */
        double flops = 0;
        for (int i = 0; i < g.n; i++) {
                const dt_layer *l = &g.layers[i];
                if (l->ops->flops) flops += l->ops->flops(l->cfg, &l->in, &l->out);
        }
        ck_assert_double_eq(g.flops, flops);
        ck_assert_double_eq_tol(g.layers[0].ops->flops(g.layers[0].cfg, &g.layers[0].in, &g.layers[0].out),
                                2.0 * 3 * 4 * 4 * 2 * 3 * 3, 0.5);
        unload(&s, &g, &d);
}
END_TEST

/* adding a layer at the end leaves every earlier offset where it was */
START_TEST(test_layout_stable)
{
        dt_model_spec s1, s2;
        dt_graph g1, g2;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s1, &g1, "[2, 6, 6]", CHAIN, &d), 0);
        ck_assert_int_eq(load(&s2, &g2, "[2, 6, 6]", CHAIN "  - {type: fc, name: f3, units: 2}\n", &d), 0);
        for (int i = 0; i < g1.n; i++)
                for (int k = 0; k < g1.layers[i].np; k++)
                        ck_assert_uint_eq(g1.layers[i].off[k], g2.layers[i].off[k]);
        ck_assert_uint_eq(g2.nparams, g1.nparams + 2 * 3 + 2);
        unload(&s1, &g1, &d);
        unload(&s2, &g2, &d);
}
END_TEST

/* ---- memory plan ---- */

START_TEST(test_memory)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s, &g, "[2, 6, 6]", CHAIN, &d), 0);
        /* per sample: the input, each output and its gradient, each layer's scratch; then the
         * parameters, their gradients and the optimizer's moments, and the buffers */
        size_t per = 2 * 6 * 6, scratch = 0;
        for (int i = 0; i < g.n; i++) {
                const dt_layer *l = &g.layers[i];
                per += 2 * dt_shape_size(&l->out);
                if (l->ops->scratch) scratch += l->ops->scratch(l->cfg, &l->in, &l->out);
        }
        per += scratch;
        ck_assert_uint_gt(scratch, 0);          /* dropout keeps its mask, pooling its choice */
        for (int nm = 0; nm <= 2; nm++)
                for (int B = 1; B <= 64; B *= 4)
                        ck_assert_uint_eq(dt_graph_memory(&g, B, nm),
                                          sizeof(float) * (per * B + 146 * (2 + (size_t)nm) + 6));
        /* linear in the batch */
        ck_assert_uint_eq(dt_graph_memory(&g, 9, 2) - dt_graph_memory(&g, 8, 2), sizeof(float) * per);
        /* the largest batch still fits 64 bits here */
        ck_assert_uint_eq(dt_graph_memory(&g, INT32_MAX, 2), sizeof(float) * (per * (size_t)INT32_MAX + 146 * 4 + 6));
        unload(&s, &g, &d);

        /* overflow is reported, not wrapped: 3 x 2^31 floats per sample x 2^31 samples x 4 bytes */
        ck_assert_int_eq(load(&s, &g, "[32768, 65536]", "  - {type: activation, function: relu}\n", &d), 0);
        ck_assert_uint_eq(dt_graph_memory(&g, INT32_MAX, 2), SIZE_MAX);
        unload(&s, &g, &d);
}
END_TEST

/* plan/mem.h: its activations are the graph's per-sample plan; ZeRO stages divide the moments,
 * then the gradients, then the parameters by the replicas; snapshots copy what they are told */
START_TEST(test_mem_plan)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(load(&s, &g, "[2, 6, 6]", CHAIN, &d), 0);
        const double P = 4.0 * 146, MiB = 1048576.0;
        dt_mem_in in = { .g = &g, .batch = 8, .nmoments = 2, .dp = 4, .snapshot_floats = 1000, .snapshots = 2,
                         .data = 3 * (size_t)MiB, .fixed = 5 * (size_t)MiB };
        dt_mem_plan p;
        dt_mem_plan_of(&in, &p);
        ck_assert_double_eq(p.params, P);
        ck_assert_double_eq(p.grads, P);
        ck_assert_double_eq(p.moments, 2 * P);
        ck_assert_double_eq(p.buffers, 4.0 * 6);
        ck_assert_double_eq(p.acts + 4.0 * (2 * 146 + 6), (double)dt_graph_memory(&g, 8, 0));
        ck_assert_double_eq(p.snapshots, 8000.0);
        ck_assert_double_eq(p.total, p.params + p.grads + p.moments + p.buffers + p.acts + p.workspace + 8000.0 + 8 * MiB);
        ck_assert_double_eq(p.sums, 0);
        /* the gradient sum's all-reduces in flight: the whole gradient, under DT_DP_INFLIGHT_BYTES;
         * fp16's halves; none on one replica */
        in.sum_esz = 4;
        dt_mem_plan_of(&in, &p);
        ck_assert_double_eq(p.sums, P);
        ck_assert_double_eq(dt_dp_inflight_bytes(&g, 1.0, 2), P / 2);
        in.dp = 1;
        dt_mem_plan_of(&in, &p);
        ck_assert_double_eq(p.sums, 0);
        in.dp = 4;
        in.sum_esz = 0;
        dt_cluster_spec cs;
        dt_cluster_spec_init(&cs);
        ck_assert_int_eq(dt_dp_sum_esz(&cs, 0), 4);
        ck_assert_int_eq(dt_dp_sum_esz(&cs, 1), 4);
        ck_assert_int_eq(dt_dp_sum_esz(&cs, 2), 0);     /* the ring reduce-scatter's own buffer */
        cs.compression = DT_COMP_FP16;
        ck_assert_int_eq(dt_dp_sum_esz(&cs, 0), 2);
        cs.compression = DT_COMP_NONE;
        cs.sync = DT_SYNC_AVERAGE;
        ck_assert_int_eq(dt_dp_sum_esz(&cs, 0), 0);
        for (int z = 1; z <= 3; z++) {
                in.shard = z;
                dt_mem_plan_of(&in, &p);
                ck_assert_double_eq(p.moments, 2 * P / 4);
                /* backward writes the whole gradient below shard 3, and shard 3 gathers per bucket:
                 * this model is one bucket (under 1024 floats), whose other ranks' parts (3/4 of
                 * it) a layer needs whole, the gradient's too. From shard 2 the ring
                 * reduce-scatter's receive buffer, the largest part of a bucket, comes on top:
                 * here the whole bucket, one block, is rank 0's part. */
                ck_assert_double_eq(p.grads, z >= 2 ? 2 * P : P);
                ck_assert_double_eq(p.params, P);
        }
        char buf[512];
        dt_mem_plan_str(&p, buf, sizeof buf);
        ck_assert_ptr_nonnull(strstr(buf, "fixed (libraries, MPI, threads) 5.0 MiB, data 3.0 MiB"));
        ck_assert_ptr_nonnull(strstr(buf, "; total "));
        unload(&s, &g, &d);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_shape_errors)
{
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        char want[256];
        /* fc needs a flat input: reported at the layer's list item, and nothing after it */
        ck_assert_int_eq(load(&s, &g, "[2, 6, 6]",
                              "  - {type: conv, name: c1, filters: 3, kernel: 3}\n"
                              "  - {type: fc, name: f1, units: 5}\n"
                              "  - {type: fc, name: f2, units: 3}\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 5);
        ck_assert_int_eq(d.msgs[0].col, 5);
        snprintf(want, sizeof want, "layer 'f1' (fc) needs a flat (I) or sequence (T,I) input, got (3,4,4); "
                 "add a flatten layer before it");
        ck_assert_str_eq(d.msgs[0].text, want);
        ck_assert_str_eq(d.msgs[0].file, path);
        unload(&s, &g, &d);

        /* a kernel larger than the plane */
        ck_assert_int_eq(load(&s, &g, "[1, 2, 2]", "  - {type: conv, name: c, filters: 1, kernel: 3}\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_int_eq(d.msgs[0].line, 4);
        ck_assert_ptr_nonnull(strstr(d.msgs[0].text, "layer 'c' (conv)"));
        unload(&s, &g, &d);

        /* an output too large per sample */
        ck_assert_int_eq(load(&s, &g, "[32768, 65536]", "  - {type: fc, name: big, units: 65537}\n", &d), -1);
        ck_assert_ptr_nonnull(strstr(d.msgs[0].text, "layer 'big' (fc)"));
        unload(&s, &g, &d);
}
END_TEST

static Suite *graph_suite(void)
{
        Suite *s = suite_create("graph");
        TCase *t = tcase_create("build");
        tcase_add_test(t, test_shapes);
        tcase_add_test(t, test_sequence_shapes);
        tcase_add_test(t, test_layout);
        tcase_add_test(t, test_layout_stable);
        tcase_add_test(t, test_memory);
        tcase_add_test(t, test_mem_plan);
        tcase_add_test(t, test_shape_errors);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(graph_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
