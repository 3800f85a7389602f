/* tests/unit/test_layers_attn.c - the transformer's layers: finite-difference gradient checks of
 * layernorm, the same bits for any thread count, and their refusal on a backend without host loops. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "util/common.h"

#define GC(input, layer, B, training) do { \
        double w = dt_gradcheck(input, layer, B, training); \
        ck_assert_msg(w <= 1.0, "%s: worst scaled error %g", layer, w); } while (0)

START_TEST(ln_flat) { GC("[9]", "{type: layernorm}", 3, 1); } END_TEST
START_TEST(ln_seq) { GC("[4, 6]", "{type: layernorm, eps: 0.001}", 2, 1); } END_TEST
START_TEST(ln_plain) { GC("[5, 7]", "{type: layernorm, affine: false}", 2, 0); } END_TEST

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
        /* 64 x 640 floats: above the size where the loops go parallel */
        same_bits("[64, 640]", "  - {type: fc, units: 640}\n  - {type: layernorm}\n", 2);
}
END_TEST

/* no host memory (the cuda backend's caps): refused at the layer's key, naming the backend */
static void refused(const char *input, const char *layers, const char *what)
{
        model m;
        ck_assert_int_eq(build(&m, input, layers, 1, 1), 0);
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cpu", dt_backend_caps_of("cpu"), &d), 0);
        ck_assert_int_eq(dt_graph_check_backend(&m.g, "cuda", dt_backend_caps_of("cuda"), &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_msg(strstr(d.msgs[0].text, what), "%s", d.msgs[0].text);
        dt_diag_free(&d);
        destroy(&m);
}

START_TEST(ln_cuda_refused)
{
        refused("[4, 6]", "  - {type: layernorm, name: ln}\n",
                "layer 'ln' (layernorm): the cuda backend has no layer normalisation op");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("layers_attn");
        TCase *tc = tcase_create("attn");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, ln_flat); tcase_add_test(tc, ln_seq); tcase_add_test(tc, ln_plain);
        tcase_add_test(tc, ln_threads); tcase_add_test(tc, ln_cuda_refused);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
