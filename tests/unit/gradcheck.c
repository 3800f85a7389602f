/* tests/unit/gradcheck.c - central-difference gradient checks through the real spec parser,
 * graph layout and CPU backend. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "graph/graph.h"
#include "util/common.h"

int dt_test_spec_file(char *path, size_t len, const char *input, const char *layers_yaml, const char *extra)
{
        snprintf(path, len, "/tmp/dtrain-test-XXXXXX.yaml");
        int fd = mkstemps(path, 5);
        if (fd < 0) return -1;
        FILE *f = fdopen(fd, "w");
        fprintf(f, "name: gradcheck\ninput: %s\nlayers:\n%s\nloss: mse\n"
                "data:\n  train: {format: synthetic, n: 8}\n%s", input, layers_yaml, extra ? extra : "");
        fclose(f);
        return 0;
}

int dt_test_conv = DT_CONV_AUTO;

static uint64_t rs = 88172645463325252ull;
static double urand(void)
{
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        return (double)(rs >> 11) / 9007199254740992.0;
}

static double loss_of(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, const float *r, int B)
{
        l->ops->forward(l, c, x, y, B);
        size_t n = (size_t)B * dt_shape_size(&l->out);
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)y[i] * r[i];
        return s;
}

static double err_of(double a, double n, double rtol, double atol)
{
        return fabs(a - n) / (atol + rtol * fmax(fabs(a), fabs(n)));
}

/* One layer from YAML on a CPU backend of threads threads, allocated for B samples. */
static int build_one(const char *input, const char *layer, int B, int threads, dt_model_spec *s, dt_graph *g,
                     dt_backend **be)
{
        char path[64], items[512];
        snprintf(items, sizeof items, "  - %s", layer);
        if (dt_test_spec_file(path, sizeof path, input, items, NULL) < 0) return -1;
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(s, path, &d);
        if (rc == 0) rc = dt_graph_build(g, s, &d);
        unlink(path);
        if (rc < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return -1;
        }
        *be = dt_backend_cpu_new(threads);
        (*be)->conv = dt_test_conv;
        dt_graph_alloc(g, *be, B);
        return 0;
}

/* backward, or its two halves */
static void backward(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y, float *dy, float *dx,
                     int B, int split)
{
        if (!split) {
                l->ops->backward(l, c, x, y, dy, dx, B);
                return;
        }
        l->ops->backward_input(l, c, x, y, dy, dx, B);
        l->ops->backward_weight(l, c, x, y, dy, B);
}

static double gradcheck(const char *input, const char *layer, int B, int training, int split)
{
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        double worst = 0;
        if (build_one(input, layer, B, 1, &s, &g, &be) < 0) return INFINITY;
        if (split && !g.layers[0].ops->backward_input) {
                fprintf(stderr, "gradcheck %s: no split backward\n", layer);
                dt_graph_free(&g);
                dt_backend_free(be);
                dt_model_spec_free(&s);
                return INFINITY;
        }
        dt_layer *l = &g.layers[0];
        size_t nx = (size_t)B * dt_shape_size(&l->in), ny = (size_t)B * dt_shape_size(&l->out);
        float *x = g.act[0], *y = g.act[1];
        float *r = dt_falloc(ny), *dy = dt_falloc(ny), *dx = dt_falloc(nx);
        /* inputs away from 0 so that relu kinks and max ties are not straddled by eps */
        for (size_t i = 0; i < nx; i++) {
                double u = urand() * 2 - 1;
                x[i] = (float)(u + (u >= 0 ? 0.1 : -0.1));
        }
        for (size_t i = 0; i < g.nparams; i++) g.params[i] = (float)(urand() - 0.5);
        for (size_t i = 0; i < g.nbuffers; i++) g.buffers[i] = (float)(urand() * 0.5 + 0.5);
        for (size_t i = 0; i < ny; i++) r[i] = (float)(urand() * 2 - 1);
        dt_fwd_ctx c = { .training = training, .seed = 7, .step = 3, .pos0 = 0 };

        loss_of(l, &c, x, y, r, B);
        memcpy(dy, r, ny * sizeof *dy);
        memset(g.grads, 0, g.nparams * sizeof *g.grads);
        backward(l, &c, x, y, dy, dx, B, split);

        const double eps = 3e-3, rtol = 2e-2, atol = 2e-3;
        double l0 = loss_of(l, &c, x, y, r, B);
        size_t kinks = 0;
        for (size_t i = 0; i < nx + g.nparams; i++) {
                float *v = i < nx ? &x[i] : &g.params[i - nx];
                double an = i < nx ? dx[i] : g.grads[i - nx];
                float keep = *v;
                *v = keep + (float)eps; double lp = loss_of(l, &c, x, y, r, B);
                *v = keep - (float)eps; double lm = loss_of(l, &c, x, y, r, B);
                *v = keep;
                double num = (lp - lm) / (2 * eps), e = err_of(an, num, rtol, atol);
                if (e > 1) {
                        /* A relu or max kink inside [-eps, eps]: the central difference mixes two
                         * slopes, but one one-sided slope still equals the analytic gradient. Such
                         * points are skipped; only a few may be. */
                        double sp = (lp - l0) / eps, sm = (l0 - lm) / eps;
                        if (err_of(an, sp, rtol, atol) <= 1 || err_of(an, sm, rtol, atol) <= 1) { kinks++; continue; }
                        fprintf(stderr, "gradcheck %s: %s[%zu] analytic %g numeric %g (one-sided %g, %g)\n", layer,
                                i < nx ? "dx" : "dparam", i < nx ? i : i - nx, an, num, sp, sm);
                }
                if (e > worst) worst = e;
        }
        if (kinks * 10 > nx + g.nparams) {
                fprintf(stderr, "gradcheck %s: %zu of %zu points straddle a kink\n", layer, kinks, nx + g.nparams);
                worst = INFINITY;
        }
        free(r); free(dy); free(dx);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        return worst;
}

double dt_gradcheck(const char *input, const char *layer, int B, int training)
{
        return gradcheck(input, layer, B, training, 0);
}

double dt_gradcheck_split(const char *input, const char *layer, int B, int training)
{
        return gradcheck(input, layer, B, training, 1);
}

static long count_diff(const char *layer, const char *what, const float *a, const float *b, size_t n)
{
        long k = 0;
        for (size_t i = 0; i < n; i++)
                if (memcmp(&a[i], &b[i], sizeof *a) && k++ == 0)
                        fprintf(stderr, "split %s: %s[%zu] combined %.9g split %.9g\n", layer, what, i, a[i], b[i]);
        return k;
}

long dt_split_mismatch(const char *input, const char *layer, int B, int threads, int want_dx)
{
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        if (build_one(input, layer, B, threads, &s, &g, &be) < 0) return -1;
        dt_layer *l = &g.layers[0];
        long bad = -1;
        if (l->ops->backward_input && l->ops->backward_weight) {
                size_t nx = (size_t)B * dt_shape_size(&l->in), ny = (size_t)B * dt_shape_size(&l->out);
                float *dy[2], *dx[2] = { NULL, NULL }, *gr[2], *r = dt_falloc(ny);
                for (size_t i = 0; i < nx; i++) g.act[0][i] = (float)(urand() * 2 - 1);
                for (size_t i = 0; i < g.nparams; i++) g.params[i] = (float)(urand() - 0.5);
                for (size_t i = 0; i < ny; i++) r[i] = (float)(urand() * 2 - 1);
                dt_fwd_ctx c = { .training = 1, .seed = 7, .step = 3, .pos0 = 0 };
                for (int k = 0; k < 2; k++) {   /* k = 0 combined, 1 split; each after its own forward */
                        dy[k] = dt_falloc(ny);
                        gr[k] = dt_falloc(g.nparams);
                        if (want_dx) dx[k] = dt_falloc(nx);
                        memcpy(dy[k], r, ny * sizeof *r);
                        /* gradients accumulate: start from the same nonzero values */
                        for (size_t i = 0; i < g.nparams; i++) g.grads[i] = (float)i * 0.001f;
                        l->ops->forward(l, &c, g.act[0], g.act[1], B);
                        backward(l, &c, g.act[0], g.act[1], dy[k], dx[k], B, k);
                        memcpy(gr[k], g.grads, g.nparams * sizeof *gr[k]);
                }
                bad = count_diff(layer, "dy", dy[0], dy[1], ny) + count_diff(layer, "dparam", gr[0], gr[1], g.nparams);
                if (want_dx) bad += count_diff(layer, "dx", dx[0], dx[1], nx);
                for (int k = 0; k < 2; k++) {
                        free(dy[k]);
                        free(dx[k]);
                        free(gr[k]);
                }
                free(r);
        }
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        return bad;
}

double dt_gradcheck_graph(const char *input, const char *layers_yaml, int B)
{
        char path[64];
        if (dt_test_spec_file(path, sizeof path, input, layers_yaml, NULL) < 0) return INFINITY;
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        int rc = dt_model_spec_load(&s, path, &d);
        if (rc == 0) rc = dt_graph_build(&g, &s, &d);
        unlink(path);
        if (rc < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return INFINITY;
        }
        dt_backend *be = dt_backend_cpu_new(1);
        be->conv = dt_test_conv;
        g.input_grad = 1;       /* dL/dx of the graph's input too */
        dt_graph_alloc(&g, be, B);
        size_t nx = (size_t)B * dt_shape_size(&g.input), ny = (size_t)B * dt_shape_size(&g.layers[g.n - 1].out);
        float *x = g.act[0], *r = dt_falloc(ny), *dx = dt_falloc(nx), *gr = dt_falloc(g.nparams);
        for (size_t i = 0; i < nx; i++) {
                double u = urand() * 2 - 1;
                x[i] = (float)(u + (u >= 0 ? 0.1 : -0.1));
        }
        for (size_t i = 0; i < g.nparams; i++) g.params[i] = (float)(urand() - 0.5);
        for (size_t i = 0; i < ny; i++) r[i] = (float)(urand() * 2 - 1);
        dt_fwd_ctx c = { .training = 1, .seed = 7, .step = 3, .pos0 = 0 };
        /* L = sum(y * r): dL/dy = r; every buffer starts dirty, so a gradient that is written
         * where it should be added (or the reverse) shows */
        for (int t = 0; t < dt_graph_ntensors(&g); t++)
                if (g.dact[t]) for (size_t i = 0; i < (size_t)B * dt_shape_size(dt_graph_tensor_shape(&g, t)); i++) g.dact[t][i] = 7.0f;
        dt_graph_forward(&g, &c, B);
        memcpy(g.dact[g.n], r, ny * sizeof *r);
        for (size_t i = 0; i < g.nparams; i++) g.grads[i] = 0;
        dt_graph_backward(&g, &c, B);
        memcpy(dx, g.dact[0], nx * sizeof *dx);
        memcpy(gr, g.grads, g.nparams * sizeof *gr);
        const double eps = 3e-3, rtol = 2e-2, atol = 2e-3;
        double worst = 0;
        for (size_t i = 0; i < nx + g.nparams; i++) {
                float *v = i < nx ? &x[i] : &g.params[i - nx];
                double an = i < nx ? dx[i] : gr[i - nx], lp, lm;
                float keep = *v;
                *v = keep + (float)eps;
                dt_graph_forward(&g, &c, B);
                lp = 0;
                for (size_t j = 0; j < ny; j++) lp += (double)g.act[g.n][j] * r[j];
                *v = keep - (float)eps;
                dt_graph_forward(&g, &c, B);
                lm = 0;
                for (size_t j = 0; j < ny; j++) lm += (double)g.act[g.n][j] * r[j];
                *v = keep;
                double num = (lp - lm) / (2 * eps), e = err_of(an, num, rtol, atol);
                if (e > 1)
                        fprintf(stderr, "gradcheck graph: %s[%zu] analytic %g numeric %g\n", i < nx ? "dx" : "dparam",
                                i < nx ? i : i - nx, an, num);
                if (e > worst) worst = e;
        }
        free(r); free(dx); free(gr);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        return worst;
}
