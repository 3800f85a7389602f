/* tests/gpu/emu/layers_emu.c - the layers' device paths (layernorm.c, attention.c taking a backend's
 * ln and attn ops, on its memory) checked on the host: a backend whose core ops are the cpu
 * backend's, whose caps are cuda's (no host memory) and whose transformer ops are backend/cuda/attn.c
 * with emu.h's kernels, against the plain cpu backend, layer by layer through the graph as
 * test_gpu_parity does (each backward from the cpu's dy): a char-gpt block with dropout, and T past
 * a block's threads. Built and run by run.sh after attn_emu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cuda/cuda_priv.h"
#include "graph/graph.h"
#include "spec/model_spec.h"

static dt_backend *cpu;

/* ---- the core ops: the cpu backend's, called with the cpu backend ---- */
static float *h_alloc(dt_backend *be, size_t n) { (void)be; return cpu->ops->alloc(cpu, n); }
static void h_free(dt_backend *be, float *p) { (void)be; cpu->ops->free(cpu, p); }
static void h_to_device(dt_backend *be, float *d, const float *s, size_t n) { (void)be; cpu->ops->to_device(cpu, d, s, n); }
static void h_to_host(dt_backend *be, float *d, const float *s, size_t n) { (void)be; cpu->ops->to_host(cpu, d, s, n); }
static void h_copy(dt_backend *be, float *d, const float *s, size_t n) { (void)be; cpu->ops->copy(cpu, d, s, n); }
static void h_zero(dt_backend *be, float *x, size_t n) { (void)be; cpu->ops->zero(cpu, x, n); }
static void h_gemm(dt_backend *be, int ta, int tb, int M, int N, int K, float al, const float *A, int lda, const float *B,
                   int ldb, float beta, float *C, int ldc)
{
        (void)be;
        cpu->ops->gemm(cpu, ta, tb, M, N, K, al, A, lda, B, ldb, beta, C, ldc);
}
static void h_bias_add(dt_backend *be, float *y, const float *b, int r, int c) { (void)be; cpu->ops->bias_add(cpu, y, b, r, c); }
static void h_bias_grad(dt_backend *be, float *db, const float *dy, int r, int c) { (void)be; cpu->ops->bias_grad(cpu, db, dy, r, c); }
static void h_act_fwd(dt_backend *be, dt_act a, float al, const float *x, float *y, size_t n)
{
        (void)be;
        cpu->ops->act_fwd(cpu, a, al, x, y, n);
}
static void h_act_bwd(dt_backend *be, dt_act a, float al, const float *x, const float *y, const float *dy, float *dx, size_t n)
{
        (void)be;
        cpu->ops->act_bwd(cpu, a, al, x, y, dy, dx, n);
}
static void h_axpy(dt_backend *be, size_t n, float a, const float *x, float *y) { (void)be; cpu->ops->axpy(cpu, n, a, x, y); }
static void h_scale(dt_backend *be, size_t n, float a, float *x) { (void)be; cpu->ops->scale(cpu, n, a, x); }
static void h_mul(dt_backend *be, size_t n, const float *x, const float *m, float *y) { (void)be; cpu->ops->mul(cpu, n, x, m, y); }
static void h_dropout_mask(dt_backend *be, float *m, int B, size_t per, uint64_t key, long pos0, float p)
{
        (void)be;
        cpu->ops->dropout_mask(cpu, m, B, per, key, pos0, p);
}
static void h_add(dt_backend *be, size_t n, const float *a, const float *b, float *y) { (void)be; cpu->ops->add(cpu, n, a, b, y); }
static void h_copy_cols(dt_backend *be, float *d, size_t ldd, const float *s, size_t lds, size_t rows, size_t w, int acc)
{
        (void)be;
        cpu->ops->copy_cols(cpu, d, ldd, s, lds, rows, w, acc);
}

/* the transformer ops, counted: the layers must have taken them */
static int n_ln, n_attn;
static void c_ln_fwd(dt_backend *be, const float *x, float *y, const float *w, const float *b, float *mean, float *rstd,
                     int R, int F, float eps)
{
        n_ln++;
        dt_cuda_ln_fwd(be, x, y, w, b, mean, rstd, R, F, eps);
}
static void c_attn_fwd(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, float *o,
                       float *P, int B)
{
        n_attn++;
        dt_cuda_attn_fwd(be, d, dr, qkv, o, P, B);
}

static const dt_backend_ops emu_ops = {
        .name = "cuda", .caps = DT_CAPS_CUDA,
        .alloc = h_alloc, .free = h_free, .to_device = h_to_device, .to_host = h_to_host, .copy = h_copy, .zero = h_zero,
        .gemm = h_gemm, .bias_add = h_bias_add, .bias_grad = h_bias_grad, .act_fwd = h_act_fwd, .act_bwd = h_act_bwd,
        .axpy = h_axpy, .scale = h_scale, .mul = h_mul, .dropout_mask = h_dropout_mask, .add = h_add,
        .copy_cols = h_copy_cols,
        .ln_fwd = c_ln_fwd, .ln_bwd = dt_cuda_ln_bwd,
        .attn_plan = dt_cuda_attn_plan, .attn_fwd = c_attn_fwd, .attn_bwd = dt_cuda_attn_bwd,
};

static int fails;
static double rel(const float *a, const float *b, size_t n)
{
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - b[i]);
                if (d > num || d != d) num = d;
                if (fabs(a[i]) > den) den = fabs(a[i]);
        }
        return den > 0 ? num / den : num;
}
static void check(const char *layer, const char *what, double e)
{
        if (!(e <= 1e-5)) {
                printf("  FAIL %s %s: %.2e\n", layer, what, e);
                fails++;
        }
}

static int build(dt_graph *g, dt_model_spec *s, dt_backend *be, int B, int input_grad)
{
        dt_diag d = { 0 };
        memset(g, 0, sizeof *g);
        if (dt_graph_build(g, s, &d) < 0 || d.n) {
                dt_diag_print(&d, stderr);
                return -1;
        }
        g->input_grad = input_grad;
        if (dt_graph_alloc(g, be, B) < 0) return -1;
        dt_graph_init_params(g, 7);
        return 0;
}

static unsigned long long rs = 88172645463325252ull;
static float frand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 40) / 16777216.0) * 2 - 1; }

static void run_case(const char *name, const char *input, const char *layers, int B, int ids, dt_backend *emu)
{
        char path[] = "/tmp/dtrain-emu-XXXXXX.yaml";
        int fd = mkstemps(path, 5);
        FILE *f = fdopen(fd, "w");
        fprintf(f, "name: %s\ninput: %s\nlayers:\n%sloss: mse\ndata:\n  train: {format: synthetic, n: 64}\n"
                   "train:\n  epochs: 1\n  batch: %d\n  optimizer: {type: sgd, lr: 0.1}\n", name, input, layers, B);
        fclose(f);
        dt_model_spec s;
        dt_diag d = { 0 };
        dt_graph gc, ge;
        if (dt_model_spec_load(&s, path, &d) < 0 || d.n || build(&gc, &s, cpu, B, !ids) < 0 ||
            build(&ge, &s, emu, B, !ids) < 0) {
                dt_diag_print(&d, stderr);
                printf("%s: spec or graph failed\n", name);
                fails++;
                unlink(path);
                return;
        }
        unlink(path);
        memcpy(ge.params, gc.params, gc.nparams * sizeof *gc.params);
        size_t nin = (size_t)B * dt_shape_size(&gc.input);
        for (size_t i = 0; i < nin; i++) gc.act[0][i] = ge.act[0][i] = ids ? (float)((i * 7 + 3) % (size_t)ids) : frand();
        dt_fwd_ctx c = { .training = 1, .seed = 11, .step = 3, .pos0 = 5 };
        printf("%s\n", name);
        for (int i = 0; i < gc.n; i++) {
                dt_graph_layer_forward(&gc, i, &c, B);
                dt_graph_layer_forward(&ge, i, &c, B);
                check(gc.layers[i].name, "forward", rel(gc.act[i + 1], ge.act[i + 1], (size_t)B * dt_shape_size(&gc.layers[i].out)));
        }
        size_t nout = (size_t)B * dt_shape_size(&gc.layers[gc.n - 1].out);
        for (size_t i = 0; i < nout; i++) gc.dact[gc.n][i] = ge.dact[gc.n][i] = frand();
        for (int i = gc.n - 1; i >= 0; i--) {
                dt_layer *lc = &gc.layers[i], *le = &ge.layers[i];
                dt_graph_layer_backward(&gc, i, &c, B, 0);
                dt_graph_layer_backward(&ge, i, &c, B, 0);
                for (int k = 0; k < lc->nin; k++) {
                        int t = lc->src[k];
                        if (!gc.dact[t]) continue;
                        size_t n = (size_t)B * dt_shape_size(dt_graph_tensor_shape(&gc, t));
                        check(lc->name, "dx", rel(gc.dact[t], ge.dact[t], n));
                        memcpy(ge.dact[t], gc.dact[t], n * sizeof(float));
                }
                for (int k = 0; k < lc->np; k++)
                        if (lc->ps[k].trainable) check(lc->name, lc->ps[k].suffix, rel(lc->g[k], le->g[k], lc->len[k]));
        }
        printf("  %d layers compared\n", gc.n);
        dt_graph_free(&gc);
        dt_graph_free(&ge);
        dt_model_spec_free(&s);
}

int main(void)
{
        cpu = dt_backend_cpu_new(1);
        dt_cuda fake = { 0 };
        dt_backend emu = { .ops = &emu_ops, .threads = 1, .priv = &fake };
        run_case("gpt-block", "[12]",
                 "  - {type: embedding, name: emb, vocab: 20, dim: 16}\n"
                 "  - {type: positions, name: pos}\n"
                 "  - {type: layernorm, name: ln1}\n"
                 "  - {type: attention, name: attn, heads: 2, causal: true, dropout: 0.1}\n"
                 "  - {type: add, name: res1, inputs: [attn, pos]}\n"
                 "  - {type: layernorm, name: ln2, affine: false}\n"
                 "  - {type: fc, name: fc1, units: 32, activation: gelu_tanh}\n"
                 "  - {type: fc, name: fc2, units: 16}\n"
                 "  - {type: add, name: res2, inputs: [fc2, res1]}\n"
                 "  - {type: attention, name: a4, heads: 4}\n"
                 "  - {type: flatten, name: flat}\n"
                 "  - {type: layernorm, name: lnflat}\n"
                 "  - {type: fc, name: head, units: 20}\n", 3, 20, &emu);
        run_case("long", "[300, 8]",
                 "  - {type: attention, name: attn, heads: 2, causal: true, dropout: 0.2}\n", 2, 0, &emu);
        dt_backend_free(cpu);
        printf("device ops taken: layernorm %d, attention %d forwards\n", n_ln, n_attn);
        if (n_ln != 3 || n_attn != 3) fails++;
        printf(fails ? "%d FAILED\n" : "all within 1e-5\n", fails);
        return fails != 0;
}
