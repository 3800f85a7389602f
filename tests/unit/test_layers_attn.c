/* tests/unit/test_layers_attn.c - the transformer's layers: finite-difference gradient checks of
 * layernorm, the same bits for any thread count, and their refusal on a backend without host loops. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "layers/attn_mm.h"
#include "graph/graph.h"
#include "util/common.h"

#define GC(input, layer, B, training) do { \
        double w = dt_gradcheck(input, layer, B, training); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layer, w); } while (0)

START_TEST(ln_flat) { GC("[9]", "{type: layernorm}", 3, 1); } END_TEST
START_TEST(ln_seq) { GC("[4, 6]", "{type: layernorm, eps: 0.001}", 2, 1); } END_TEST
START_TEST(ln_plain) { GC("[5, 7]", "{type: layernorm, affine: false}", 2, 0); } END_TEST

/* heads 1, 2, 4; causal and not; dropout off (rate 0, and evaluation) and on (fixed masks) */
START_TEST(at_h1) { GC("[5, 8]", "{type: attention, heads: 1}", 2, 1); } END_TEST
START_TEST(at_h2_causal) { GC("[6, 8]", "{type: attention, heads: 2, causal: true}", 2, 1); } END_TEST
START_TEST(at_h4) { GC("[4, 8]", "{type: attention, heads: 4}", 3, 1); } END_TEST
START_TEST(at_h4_causal) { GC("[6, 8]", "{type: attention, heads: 4, causal: true, dropout: 0.3}", 2, 0); } END_TEST
START_TEST(at_dropout) { GC("[6, 4]", "{type: attention, heads: 2, causal: true, dropout: 0.3}", 2, 1); } END_TEST
/* the blocked kernel over several tiles, the last one partial, and the mask crossing tiles */
START_TEST(at_blocked) { GC("[7, 4]", "{type: attention, heads: 2, kernel: blocked, block: 3}", 2, 1); } END_TEST
START_TEST(at_blocked_causal)
{
        GC("[7, 4]", "{type: attention, heads: 1, causal: true, kernel: blocked, block: 2}", 2, 1);
        GC("[8, 8]", "{type: attention, heads: 4, causal: true, kernel: blocked, block: 3, dropout: 0.2}", 1, 1);
}
END_TEST

START_TEST(pos_seq) { GC("[5, 3]", "{type: positions}", 3, 1); } END_TEST
/* through the graph: positions, then a causal pre-norm block with its residual add */
START_TEST(pos_graph)
{
        double w = dt_gradcheck_graph("[6, 4]", "  - {type: positions, name: pos}\n  - {type: layernorm}\n"
                                      "  - {type: attention, name: att, heads: 2, causal: true}\n"
                                      "  - {type: add, inputs: [att, pos]}\n", 2);
        ck_assert_msg(w <= 1.0, "worst scaled error %g", w);
}
END_TEST

typedef struct model {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
} model;

static int build(model *m, const char *input, const char *layers, int B, int threads)
{
        char path[64];
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, layers, NULL), 0);
        int rc = dt_model_spec_load(&m->s, path, &d);
        if (rc == 0) rc = dt_graph_build(&m->g, &m->s, &d);
        unlink(path);
        if (rc < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return -1;
        }
        m->be = dt_backend_cpu_new(threads);
        dt_graph_alloc(&m->g, m->be, B);
        dt_graph_init_params(&m->g, 5);
        return 0;
}

static void destroy(model *m)
{
        dt_graph_free(&m->g);
        dt_backend_free(m->be);
        dt_model_spec_free(&m->s);
}

/* forward and backward of L = sum(y * r) on fixed random data; out gets y, the gradients, dx */
static size_t run_once(const char *input, const char *layers, int B, int threads, float **out)
{
        model m;
        ck_assert_int_eq(build(&m, input, layers, B, threads), 0);
        m.g.input_grad = 1;
        size_t nx = (size_t)B * dt_shape_size(&m.g.input);
        size_t ny = (size_t)B * dt_shape_size(&m.g.layers[m.g.n - 1].out);
        srand(3);
        for (size_t i = 0; i < nx; i++) m.g.act[0][i] = (float)rand() / RAND_MAX - 0.5f;
        dt_fwd_ctx c = { .training = 1, .seed = 7, .step = 1 };
        dt_graph_forward(&m.g, &c, B);
        for (size_t i = 0; i < ny; i++) m.g.dact[m.g.n][i] = (float)rand() / RAND_MAX - 0.5f;
        memset(m.g.grads, 0, m.g.nparams * sizeof(float));
        size_t n = ny + m.g.nparams;
        *out = dt_falloc(n);
        memcpy(*out, m.g.act[m.g.n], ny * sizeof(float));
        dt_graph_backward(&m.g, &c, B);
        memcpy(*out + ny, m.g.grads, m.g.nparams * sizeof(float));
        destroy(&m);
        return n;
}

/* the host loops split rows and features by thread, never a sum: 1 and 2 threads agree bit for bit */
static void same_bits(const char *input, const char *layers, int B)
{
        float *a, *b;
        size_t n = run_once(input, layers, B, 1, &a);
        ck_assert_uint_eq(run_once(input, layers, B, 2, &b), n);
        ck_assert_msg(!memcmp(a, b, n * sizeof *a), "%s: 1 and 2 threads differ", layers);
        free(a);
        free(b);
}

START_TEST(ln_threads)
{
        /* 64 x 640 floats: above the size where the loops go parallel. The layer norm alone: an fc
         * before it split its GEMM by thread, whose bits OpenBLAS's Haswell/Zen kernels change */
        same_bits("[64, 640]", "  - {type: layernorm}\n", 2);
}
END_TEST

/* the blocked kernel computes the plain one's function: y and every gradient within 2e-6 of the
 * largest value (rounding differs: it rescales as each tile raises a row's maximum) */
static void kernels_agree(const char *input, const char *common, int B)
{
        char plain[256], blocked[256];
        snprintf(plain, sizeof plain, "  - {type: attention, kernel: plain, %s}\n", common);
        snprintf(blocked, sizeof blocked, "  - {type: attention, kernel: blocked, block: 3, %s}\n", common);
        float *a, *b;
        size_t n = run_once(input, plain, B, 1, &a);
        ck_assert_uint_eq(run_once(input, blocked, B, 1, &b), n);
        double big = 0, worst = 0;
        for (size_t i = 0; i < n; i++) big = fmax(big, fabs(a[i]));
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
        ck_assert_msg(worst <= 2e-6 * big, "%s: plain and blocked differ by %g (largest %g)", common, worst, big);
        free(a);
        free(b);
}

START_TEST(at_kernels_agree)
{
        kernels_agree("[10, 8]", "heads: 2", 3);
        kernels_agree("[10, 8]", "heads: 2, causal: true", 3);
        kernels_agree("[11, 12]", "heads: 3, causal: true, dropout: 0.25", 2);
        kernels_agree("[3, 4]", "heads: 1, causal: true", 2);
}
END_TEST

START_TEST(at_threads)
{
        same_bits("[16, 32]", "  - {type: attention, heads: 4, causal: true, kernel: plain}\n", 4);
        same_bits("[16, 32]", "  - {type: attention, heads: 4, causal: true, kernel: blocked, block: 5}\n", 4);
}
END_TEST

/* The cpu backend runs the layers; a backend of caps (no host memory) runs them when what is NULL,
 * else refuses them at the layer's key with what, naming the backend */
static void caps_check(const char *input, const char *layers, unsigned caps, const char *what)
{
        model m;
        ck_assert_int_eq(build(&m, input, layers, 1, 1), 0);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cpu", dt_backend_caps_of("cpu"), &d), 0);
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cuda", caps, &d), what ? -1 : 0);
        ck_assert_int_eq(d.n, what ? 1 : 0);
        if (what) ck_assert_msg(strstr(d.msgs[0].text, what), "%s", d.msgs[0].text);
        dt_diag_free(&d);
        destroy(&m);
}

/* the cuda backend's ln ops (DT_CAP_FUSED_LN); a device backend without them refuses the layer */
START_TEST(ln_cuda)
{
        const char *ln = "  - {type: layernorm, name: ln}\n";
        caps_check("[4, 6]", ln, dt_backend_caps_of("cuda"), NULL);
        caps_check("[6]", "  - {type: layernorm, name: ln, affine: false}\n", dt_backend_caps_of("cuda"), NULL);
        caps_check("[4, 6]", ln, dt_backend_caps_of("cuda") & ~DT_CAP_FUSED_LN,
                   "layer 'ln' (layernorm): the cuda backend has no layer normalisation op");
}
END_TEST

/* causal: step t's output reads steps 0..t only; changing the last step changes no earlier output,
 * for both kernels (the blocked one over several tiles); without the mask it changes every one */
static void causal_check(const char *layer, int causal)
{
        model m;
        ck_assert_int_eq(build(&m, "[9, 8]", layer, 1, 1), 0);
        size_t n = 9 * 8;
        float *y0 = dt_falloc(n);
        srand(5);
        for (size_t i = 0; i < n; i++) m.g.act[0][i] = (float)rand() / RAND_MAX - 0.5f;
        dt_fwd_ctx c = { .training = 0 };
        dt_graph_forward(&m.g, &c, 1);
        memcpy(y0, m.g.act[1], n * sizeof *y0);
        for (int j = 0; j < 8; j++) m.g.act[0][8 * 8 + j] += 1.0f;
        dt_graph_forward(&m.g, &c, 1);
        for (int t = 0; t < 8; t++) {
                int same = !memcmp(y0 + 8 * t, m.g.act[1] + 8 * t, 8 * sizeof *y0);
                ck_assert_msg(same == causal, "%s: step %d %s when the last step changed", layer, t,
                              same ? "did not change" : "changed");
        }
        free(y0);
        destroy(&m);
}

START_TEST(at_causal)
{
        causal_check("  - {type: attention, heads: 2, causal: true, kernel: plain}\n", 1);
        causal_check("  - {type: attention, heads: 2, causal: true, kernel: blocked, block: 2}\n", 1);
        causal_check("  - {type: attention, heads: 2, kernel: blocked, block: 2}\n", 0);
}
END_TEST

/* attn_mm.h's kernel on every CPU path against a double-precision sum: whole register blocks and
 * the tails, B and B^T, each triangle mode (A zeroed where the mode says it is), beta 0 and 1 */
static void mm_case(int m, int n, int k, int bt, int tri, float beta)
{
        size_t lda = (size_t)k + 3, ldb = (size_t)(bt ? k : n) + 5, ldc = (size_t)n + 2;
        float *a = malloc(sizeof(float) * m * lda), *b = malloc(sizeof(float) * (bt ? n : k) * ldb);
        float *c = malloc(sizeof(float) * m * ldc), *c0 = malloc(sizeof(float) * m * ldc);
        for (size_t i = 0; i < (size_t)m * lda; i++) a[i] = (float)((i * 37 % 101) / 50.0 - 1.0);
        for (size_t i = 0; i < (size_t)(bt ? n : k) * ldb; i++) b[i] = (float)((i * 53 % 97) / 48.0 - 1.0);
        for (size_t i = 0; i < (size_t)m * ldc; i++) c0[i] = (float)((i * 29 % 89) / 44.0 - 1.0);
        for (int i = 0; i < m; i++)
                for (int q = 0; q < k; q++)
                        if ((tri == DT_MM_KLE && q > i) || (tri == DT_MM_KGE && q < i)) a[(size_t)i * lda + q] = 0;
        dt_isa best = dt_cpu_best();
        for (int isa = 0; isa <= (int)best; isa++) {
                if (dt_cpu_force((dt_isa)isa) != 0) continue;
                memcpy(c, c0, sizeof(float) * m * ldc);
                dt_attn_mm p = { .m = m, .n = n, .k = k, .bt = bt, .tri = tri, .alpha = 0.5f, .beta = beta, .a = a,
                                 .b = b, .ars = lda, .acs = 1, .ldb = ldb, .ldc = ldc, .c = c };
                dt_attn_mm_get()->mm(&p);
                for (int i = 0; i < m; i++)
                        for (int j = 0; j < (tri == DT_MM_JLE && i + 1 < n ? i + 1 : n); j++) {
                                double s = 0;
                                for (int q = 0; q < k; q++)
                                        s += (double)a[(size_t)i * lda + q] *
                                             (bt ? b[(size_t)j * ldb + q] : b[(size_t)q * ldb + j]);
                                double want = 0.5 * s + beta * c0[(size_t)i * ldc + j];
                                ck_assert_msg(fabs(c[(size_t)i * ldc + j] - want) <= 1e-5 * (1 + fabs(want)),
                                              "isa %d %dx%dx%d bt %d tri %d (%d, %d): %g, want %g", isa, m, n, k, bt,
                                              tri, i, j, c[(size_t)i * ldc + j], want);
                        }
        }
        dt_cpu_force(best);
        free(a), free(b), free(c), free(c0);
}

START_TEST(at_mm_paths)
{
        static const int shapes[][3] = { { 64, 64, 32 }, { 64, 32, 64 }, { 13, 37, 20 }, { 9, 40, 64 }, { 3, 5, 1 } };
        for (int s = 0; s < 5; s++)
                for (int tri = DT_MM_FULL; tri <= DT_MM_KGE; tri++)
                        for (int bt = 0; bt < 2; bt++) {
                                mm_case(shapes[s][0], shapes[s][1], shapes[s][2], bt, tri, 0.0f);
                                mm_case(shapes[s][0], shapes[s][1], shapes[s][2], bt, tri, 1.0f);
                        }
}
END_TEST

/* the cuda backend's attention ops (DT_CAP_FUSED_ATTN) compute the plain kernel: auto and plain run
 * there, blocked is refused, and so is T past 8192; a device backend without them refuses the layer */
START_TEST(at_cuda)
{
        unsigned cuda = dt_backend_caps_of("cuda");
        caps_check("[4, 6]", "  - {type: attention, name: at, heads: 2}\n", cuda, NULL);
        caps_check("[4, 6]", "  - {type: attention, name: at, heads: 2, causal: true, dropout: 0.1, kernel: plain}\n",
                   cuda, NULL);
        caps_check("[4, 6]", "  - {type: attention, name: at, heads: 2, kernel: blocked}\n", cuda,
                   "layer 'at' (attention): kernel: blocked runs on the cpu backend only; the cuda backend computes the "
                   "plain kernel (kernel: auto or plain)");
        caps_check("[4, 6]", "  - {type: attention, name: at, heads: 2}\n", cuda & ~DT_CAP_FUSED_ATTN,
                   "layer 'at' (attention): the cuda backend has no attention op");
        /* it keeps T x T per head: T up to 8192 there, any T on the cpu */
        caps_check("[8192, 2]", "  - {type: attention, name: at}\n", cuda, NULL);
        caps_check("[8193, 2]", "  - {type: attention, name: at}\n", cuda,
                   "layer 'at' (attention): 8193 steps: the cuda backend keeps every head's T x T probabilities and "
                   "takes T <= 8192; the cpu backend's blocked kernel takes any T");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("layers_attn");
        TCase *tc = tcase_create("attn");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, ln_flat); tcase_add_test(tc, ln_seq); tcase_add_test(tc, ln_plain);
        tcase_add_test(tc, ln_threads); tcase_add_test(tc, ln_cuda);
        tcase_add_test(tc, at_h1); tcase_add_test(tc, at_h2_causal); tcase_add_test(tc, at_h4);
        tcase_add_test(tc, at_h4_causal); tcase_add_test(tc, at_dropout); tcase_add_test(tc, at_blocked);
        tcase_add_test(tc, at_blocked_causal); tcase_add_test(tc, at_kernels_agree); tcase_add_test(tc, at_threads);
        tcase_add_test(tc, at_cuda); tcase_add_test(tc, at_mm_paths); tcase_add_test(tc, at_causal);
        tcase_add_test(tc, pos_seq); tcase_add_test(tc, pos_graph);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
