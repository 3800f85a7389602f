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

double dt_gradcheck(const char *input, const char *layer, int B, int training)
{
        char path[64], items[512];
        snprintf(items, sizeof items, "  - %s", layer);
        if (dt_test_spec_file(path, sizeof path, input, items, NULL) < 0) return INFINITY;
        dt_model_spec s;
        dt_diag d = { 0 };
        dt_graph g;
        double worst = 0;
        int rc = dt_model_spec_load(&s, path, &d);
        if (rc == 0) rc = dt_graph_build(&g, &s, &d);
        if (rc < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                unlink(path);
                return INFINITY;
        }
        dt_backend *be = dt_backend_cpu_new(1);
        dt_graph_alloc(&g, be, B);
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
        l->ops->backward(l, &c, x, y, dy, dx, B);

        const double eps = 1e-2, rtol = 2e-2, atol = 2e-3;
        for (size_t i = 0; i < nx; i++) {
                float keep = x[i];
                x[i] = keep + (float)eps; double lp = loss_of(l, &c, x, y, r, B);
                x[i] = keep - (float)eps; double lm = loss_of(l, &c, x, y, r, B);
                x[i] = keep;
                double e = err_of(dx[i], (lp - lm) / (2 * eps), rtol, atol);
                if (e > worst) worst = e;
                if (e > 1) fprintf(stderr, "gradcheck %s: dx[%zu] analytic %g numeric %g\n", layer, i, dx[i], (lp - lm) / (2 * eps));
        }
        for (size_t i = 0; i < g.nparams; i++) {
                float keep = g.params[i];
                g.params[i] = keep + (float)eps; double lp = loss_of(l, &c, x, y, r, B);
                g.params[i] = keep - (float)eps; double lm = loss_of(l, &c, x, y, r, B);
                g.params[i] = keep;
                double e = err_of(g.grads[i], (lp - lm) / (2 * eps), rtol, atol);
                if (e > worst) worst = e;
                if (e > 1) fprintf(stderr, "gradcheck %s: dparam[%zu] analytic %g numeric %g\n", layer, i, g.grads[i], (lp - lm) / (2 * eps));
        }
        free(r); free(dy); free(dx);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        unlink(path);
        return worst;
}
