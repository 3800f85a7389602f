/* tests/unit/test_pairs.c - layers the graph runs as one op (graph/pairs.c): batch norm with relu and
 * the 2x2 max pool after it give, through the graph's forward and backward, the pooled output, the
 * input gradient, the parameter gradients and the running statistics of the two layers run apart,
 * bit for bit, on every CPU path, with one thread and two, odd planes included; on the vector paths
 * the batch norm's own output is never written; and the graph pairs only where nothing else reads
 * the tensor between the two. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "layers/kernels.h"
#include "util/common.h"

static uint64_t rs;
static float rnd(void)  /* uniform in [-1, 1) */
{
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static long diff_bits(const float *a, const float *b, size_t n)
{
        long d = 0;
        for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof *a) != 0;
        return d;
}

static void load(dt_model_spec *s, dt_graph *g, const char *input, const char *layers)
{
        char path[64];
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, layers, NULL), 0);
        int rc = dt_model_spec_load(s, path, &d);
        if (rc == 0) rc = dt_graph_build(g, s, &d);
        unlink(path);
        ck_assert(rc == 0 && d.n == 0);
}

/* The graph of input and layers, paired or not, on path p with nt threads: two training steps'
 * forward and backward (the second sees the first's running statistics), then an evaluation
 * forward; out gets the outputs, the input gradient, the gradients and the buffers. Returns the
 * count; *mid_kept: the batch norm's output still holds what was there before the last forward. */
static size_t run(const char *input, const char *layers, int B, dt_isa p, int nt, int paired, float *out, int *mid_kept)
{
        dt_model_spec s;
        dt_graph g;
        ck_assert_int_eq(dt_cpu_force(p), 0);
        dt_graph_pairs_off = !paired;
        load(&s, &g, input, layers);
        g.input_grad = 1;
        dt_backend *be = dt_backend_cpu_new(nt);
        ck_assert_int_eq(dt_graph_alloc(&g, be, B), 0);
        ck_assert_msg(paired ? g.pair && g.pair[0] : !g.pair, "%s: paired %d, g.pair %p", input, paired, (void *)g.pair);
        dt_graph_init_params(&g, 1);
        rs = 0xC0FFEEull;
        for (size_t i = 0; i < g.nparams; i++) g.params[i] = 1.0f + 0.25f * rnd();
        size_t nx = (size_t)B * dt_shape_size(&g.input), ny = (size_t)B * dt_shape_size(&g.layers[g.n - 1].out);
        size_t nm = (size_t)B * dt_shape_size(&g.layers[0].out), n = 0;
        memset(g.grads, 0, g.nparams * sizeof *g.grads);
        for (int step = 0; step < 3; step++) {
                dt_fwd_ctx c = { .training = step < 2, .step = step };
                for (size_t i = 0; i < nx; i++) g.act[0][i] = rnd() + (step == 1 ? 0.5f : 0.0f);
                for (size_t i = 0; i < nm; i++) g.act[1][i] = -7.0f;
                dt_graph_forward(&g, &c, B);
                *mid_kept = 1;
                for (size_t i = 0; i < nm; i++) *mid_kept &= g.act[1][i] == -7.0f;
                memcpy(out + n, g.act[g.n], ny * sizeof *out);
                n += ny;
                if (!c.training) break;
                for (size_t i = 0; i < ny; i++) g.dact[g.n][i] = rnd();
                dt_graph_backward(&g, &c, B);
                memcpy(out + n, g.dact[0], nx * sizeof *out);
                n += nx;
        }
        memcpy(out + n, g.grads, g.nparams * sizeof *out);
        n += g.nparams;
        memcpy(out + n, g.buffers, g.nbuffers * sizeof *out);
        n += g.nbuffers;
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        dt_graph_pairs_off = 0;
        dt_cpu_force(dt_cpu_best());
        return n;
}

START_TEST(bn_pool_same)
{
        static const char *const inputs[] = { "[3, 7, 7]", "[4, 14, 14]", "[2, 5, 6]", "[6, 9, 28]" };
        static const char *const layers[] = {
                "  - {type: batchnorm, activation: relu}\n  - {type: maxpool, kernel: 2}",
                "  - {type: batchnorm, activation: relu, affine: false, momentum: 0.3}\n  - {type: maxpool, kernel: 2}",
        };
        const int B = 5;
        size_t cap = 8 * (size_t)B * 6 * 9 * 28 + 4096;
        float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
        for (size_t c = 0; c < sizeof inputs / sizeof *inputs; c++)
                for (size_t k = 0; k < sizeof layers / sizeof *layers; k++)
                        for (int p = DT_ISA_GENERIC; p <= (int)dt_cpu_best(); p++)
                                for (int nt = 1; nt <= 2; nt++) {
                                        int kept0, kept;
                                        size_t n0 = run(inputs[c], layers[k], B, (dt_isa)p, nt, 0, ref, &kept0);
                                        size_t n = run(inputs[c], layers[k], B, (dt_isa)p, nt, 1, got, &kept);
                                        ck_assert_uint_eq(n, n0);
                                        ck_assert_msg(!kept0, "%s unpaired: the batch norm's output unwritten", inputs[c]);
                                        /* the vector paths fuse; the plain loops run the two layers' own ops */
                                        ck_assert_msg(kept == (p != DT_ISA_GENERIC), "%s on %s: batch norm output %s",
                                                      inputs[c], dt_isa_name((dt_isa)p), kept ? "unwritten" : "written");
                                        ck_assert_msg(diff_bits(ref, got, n) == 0, "%s %s on %s, %d threads: %ld floats differ",
                                                      inputs[c], layers[k], dt_isa_name((dt_isa)p), nt,
                                                      diff_bits(ref, got, n));
                                }
        free(ref); free(got);
}
END_TEST

/* paired only where the pool alone reads the batch norm's output, and only batch norm then pool */
START_TEST(pairs_where)
{
        static const struct { const char *layers; int pair0; } cases[] = {
                { "  - {type: batchnorm, activation: relu, name: bn}\n  - {type: maxpool, kernel: 2, name: p1}\n"
                  "  - {type: avgpool, kernel: 2, input: bn, name: p2}\n  - {type: add, inputs: [p1, p2]}", 0 },
                { "  - {type: batchnorm, activation: relu}\n  - {type: maxpool, kernel: 2}\n  - {type: flatten}", 1 },
                { "  - {type: maxpool, kernel: 2}\n  - {type: batchnorm, activation: relu}", 0 },
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                dt_model_spec s;
                dt_graph g;
                load(&s, &g, "[2, 6, 6]", cases[c].layers);
                dt_backend *be = dt_backend_cpu_new(1);
                ck_assert_int_eq(dt_graph_alloc(&g, be, 2), 0);
                ck_assert_msg((g.pair && g.pair[0]) == cases[c].pair0, "case %zu", c);
                dt_graph_free(&g);
                dt_backend_free(be);
                dt_model_spec_free(&s);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("pairs");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, bn_pool_same);
        tcase_add_test(tc, pairs_where);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}
