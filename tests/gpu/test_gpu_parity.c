/* tests/gpu/test_gpu_parity.c - CPU vs CUDA, layer by layer: the same spec, weights, inputs and
 * output gradients on both backends; every layer's forward output, input gradient and parameter
 * gradients (and the batch-norm running statistics) must agree to a relative error (max |a - b|
 * over max |a|) of at most 1e-4 in fp32. Layers run through the graph (dt_graph_layer_forward and
 * _backward: branched graphs, add and concat, gradients summed over a tensor's readers). Input
 * gradients are reset to the CPU's after each layer,
 * so each layer's backward is judged from the same dy. The transformer layers (layernorm, attention,
 * positions, gelu_tanh) are judged the same way. Also the loss op, the optimizer kernels, sumsq and the
 * dropout mask. Prints the worst error per layer. Exit 0 pass, 1 fail, 77 skip (no GPU: built
 * without CUDA, or cudaGetDeviceCount fails or finds none; the cases' graphs are still built on the
 * cpu and checked against the cuda caps first, 1 when one fails). Plain C, no Check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "graph/graph.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "spec/model_spec.h"
#include "util/common.h"

#define TOL 1e-4

static int failures;
static dt_backend *cpu, *gpu;

static double rel_err(const float *a, const float *b, size_t n)
{
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - (double)b[i]);
                if (d > num || d != d) num = d;
                if (fabs((double)a[i]) > den) den = fabs((double)a[i]);
        }
        return num / (den > 1e-30 ? den : 1e-30);
}

/* compares a host array with a device array of n floats; returns the error */
static double cmp(const float *host, const float *dev, size_t n)
{
        float *h = dt_falloc(n ? n : 1);
        gpu->ops->to_host(gpu, h, dev, n);
        double e = rel_err(host, h, n);
        free(h);
        return e;
}

static uint64_t rng = 0x12345678;
static float frand(void)
{
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int build(dt_graph *g, dt_model_spec *s, const char *path, dt_backend *be, int B, int input_grad)
{
        dt_diag d = { 0 };
        memset(g, 0, sizeof *g);
        if (dt_graph_build(g, s, &d) < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                fprintf(stderr, "%s: graph build failed\n", path);
                return -1;
        }
        dt_diag_free(&d);
        g->input_grad = input_grad;     /* the input's gradient is compared too */
        if (dt_graph_alloc(g, be, B) < 0) {
                fprintf(stderr, "%s: alloc/setup on %s failed\n", path, be->ops->name);
                return -1;
        }
        dt_graph_init_params(g, 7);
        return 0;
}

static void check(const char *what, const char *layer, double e, double *worst)
{
        if (e > *worst || e != e) *worst = e;
        if (!(e <= TOL)) {
                printf("  FAIL %s %s: relative error %.3g\n", layer, what, e);
                failures++;
        }
}

/* Without a GPU: the case's graph, built on the cpu, is one the cuda backend accepts (its layers'
 * supports against the cuda caps), so a case that could never run is found here; the graph and
 * the spec are freed. */
static void dry_check(const char *name, dt_graph *g, dt_model_spec *s)
{
        dt_diag d = { 0 };
        if (dt_graph_check_backend(g, "cuda", dt_backend_caps_of("cuda"), &d) < 0) {
                dt_diag_print(&d, stderr);
                fprintf(stderr, "%s: the cuda backend refuses it\n", name);
                failures++;
        } else {
                printf("%s: builds, the cuda backend takes it\n", name);
        }
        dt_diag_free(&d);
        dt_graph_free(g);
        dt_model_spec_free(s);
}

/* One model: layers[] YAML, input shape, batch; ids > 0 makes the input token ids in [0, ids). */
static void run_case(const char *name, const char *input, const char *layers, int B, int ids)
{
        char path[] = "/tmp/dtrain-parity-XXXXXX.yaml";
        int fd = mkstemps(path, 5);
        if (fd < 0) { perror("mkstemps"); exit(1); }
        FILE *f = fdopen(fd, "w");
        fprintf(f, "name: %s\ninput: %s\nlayers:\n%sloss: mse\n"
                   "data:\n  train: {format: synthetic, n: 64}\n"
                   "train:\n  epochs: 1\n  batch: %d\n  optimizer: {type: sgd, lr: 0.1}\n", name, input, layers, B);
        fclose(f);
        dt_model_spec s;
        dt_diag d = { 0 };
        if (dt_model_spec_load(&s, path, &d) < 0 || d.n) {
                dt_diag_print(&d, stderr);
                fprintf(stderr, "%s: spec failed\n", name);
                failures++;
                dt_diag_free(&d);
                unlink(path);
                return;
        }
        dt_diag_free(&d);
        dt_graph gc, gg;
        int built = build(&gc, &s, path, cpu, B, !ids) == 0;
        if (built && !gpu) {
                unlink(path);
                dry_check(name, &gc, &s);
                return;
        }
        if (!built || build(&gg, &s, path, gpu, B, !ids) < 0) {
                failures++;
                unlink(path);
                return;
        }
        unlink(path);
        /* the same parameters on both: initialised from the same seed; copy anyway */
        gpu->ops->to_device(gpu, gg.params, gc.params, gc.nparams);
        gpu->ops->to_device(gpu, gg.buffers, gc.buffers, gc.nbuffers);
        size_t nin = (size_t)B * dt_shape_size(&gc.input);
        for (size_t i = 0; i < nin; i++) gc.act[0][i] = ids ? (float)((i * 7 + 3) % (size_t)ids) : frand();
        gpu->ops->to_device(gpu, gg.act[0], gc.act[0], nin);
        dt_fwd_ctx c = { .training = 1, .seed = 11, .step = 3, .pos0 = 5 };
        printf("%s (batch %d)\n", name, B);
        double *wf = calloc((size_t)gc.n, sizeof *wf), *wb = calloc((size_t)gc.n, sizeof *wb);
        for (int i = 0; i < gc.n; i++) {
                dt_layer *lc = &gc.layers[i], *lg = &gg.layers[i];
                dt_graph_layer_forward(&gc, i, &c, B);
                dt_graph_layer_forward(&gg, i, &c, B);
                size_t n = (size_t)B * dt_shape_size(&lc->out);
                check("forward", lc->name, cmp(gc.act[i + 1], gg.act[i + 1], n), &wf[i]);
                /* each backend keeps its own output: backward ops (cuDNN's max pooling, the RNN
                 * reserve space) expect the y their forward wrote, so errors may compound a little
                 * from layer to layer; fp32 keeps that far below the tolerance */
                for (int k = 0; k < lc->np; k++)
                        if (!lc->ps[k].trainable)   /* running statistics */
                                check(lc->ps[k].suffix, lc->name, cmp(lc->p[k], lg->p[k], lc->len[k]), &wf[i]);
        }
        /* backward from a random output gradient, layer by layer */
        size_t nout = (size_t)B * dt_shape_size(&gc.layers[gc.n - 1].out);
        for (size_t i = 0; i < nout; i++) gc.dact[gc.n][i] = frand();
        gpu->ops->to_device(gpu, gg.dact[gc.n], gc.dact[gc.n], nout);
        for (int i = gc.n - 1; i >= 0; i--) {
                dt_layer *lc = &gc.layers[i], *lg = &gg.layers[i];
                dt_graph_layer_backward(&gc, i, &c, B, 0);
                dt_graph_layer_backward(&gg, i, &c, B, 0);
                /* the gradient of every tensor it reads (a partial sum where later readers wrote
                 * or this one added): the same on both, then the CPU's on both */
                for (int k = 0; k < lc->nin; k++) {
                        int t = lc->src[k];
                        if (!gc.dact[t]) continue;
                        size_t n = (size_t)B * dt_shape_size(dt_graph_tensor_shape(&gc, t));
                        check("dx", lc->name, cmp(gc.dact[t], gg.dact[t], n), &wb[i]);
                        gpu->ops->to_device(gpu, gg.dact[t], gc.dact[t], n);
                }
                for (int k = 0; k < lc->np; k++)
                        if (lc->ps[k].trainable) {
                                char what[48];
                                snprintf(what, sizeof what, "d%s", lc->ps[k].suffix);
                                check(what, lc->name, cmp(lc->g[k], lg->g[k], lc->len[k]), &wb[i]);
                        }
        }
        for (int i = 0; i < gc.n; i++)
                printf("  %-10s %-14s forward %.2e  backward %.2e\n", gc.layers[i].name, gc.layers[i].ops->name, wf[i],
                       wb[i]);
        free(wf);
        free(wb);
        dt_graph_free(&gc);
        dt_graph_free(&gg);
        dt_model_spec_free(&s);
}

/* ---- ops outside the layers ---- */

static void ops_cases(void)
{
        printf("ops\n");
        double w = 0;
        /* dropout masks: bit-identical */
        int B = 7;
        size_t per = 1000, n = (size_t)B * per;
        float *mc = dt_falloc(n), *mg = gpu->ops->alloc(gpu, n), *mh = dt_falloc(n);
        cpu->ops->dropout_mask(cpu, mc, B, per, 0xabcdefull, 13, 0.3f);
        gpu->ops->dropout_mask(gpu, mg, B, per, 0xabcdefull, 13, 0.3f);
        gpu->ops->to_host(gpu, mh, mg, n);
        if (memcmp(mc, mh, n * sizeof *mc)) {
                printf("  FAIL dropout masks differ\n");
                failures++;
        }
        /* sumsq */
        for (size_t i = 0; i < n; i++) mc[i] = frand();
        gpu->ops->to_device(gpu, mg, mc, n);
        double sc = cpu->ops->sumsq(cpu, mc, n), sg = gpu->ops->sumsq(gpu, mg, n);
        check("sumsq", "ops", fabs(sc - sg) / sc, &w);
        /* losses: R rows of C */
        int R = 37, C = 10;
        size_t rc = (size_t)R * C;
        int32_t lab[37];
        float *tg = dt_falloc(rc), *dzc = dt_falloc(rc), *dzg = gpu->ops->alloc(gpu, rc);
        for (int r = 0; r < R; r++) lab[r] = (r * 3) % C;
        for (size_t i = 0; i < rc; i++) tg[i] = frand();
        for (int kind = 0; kind < 2; kind++) {
                long okc = 0, okg = 0;
                double lc = kind ? dt_loss_mse(mc, tg, lab, R, C, 0.01f, dzc, &okc)
                                 : dt_loss_softmax_xent(mc, lab, R, C, 0.01f, dzc, &okc);
                double lg = gpu->ops->loss(gpu, kind, mg, lab, kind ? tg : NULL, R, C, 0.01f, dzg, &okg);
                check(kind ? "mse loss" : "xent loss", "ops", fabs(lc - lg) / fabs(lc), &w);
                check(kind ? "mse grad" : "xent grad", "ops", cmp(dzc, dzg, rc), &w);
                if (okc != okg) {
                        printf("  FAIL loss %d: correct %ld vs %ld\n", kind, okc, okg);
                        failures++;
                }
        }
        /* optimizers: 3 steps each */
        for (int k = 0; k < DT_OPT_COUNT; k++) {
                dt_optim_hp hp = { .kind = (dt_opt_kind)k, .momentum = k == DT_OPT_RMSPROP ? 0.5f : 0.9f, .dampening = 0.1f,
                                   .beta1 = 0.9f, .beta2 = 0.999f, .alpha = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f };
                size_t m = 1000;
                float *p = dt_falloc(m), *g = dt_falloc(m), *m1 = dt_falloc(m), *v1 = dt_falloc(m);
                float *pd = gpu->ops->alloc(gpu, m), *gd = gpu->ops->alloc(gpu, m), *md = gpu->ops->alloc(gpu, m),
                      *vd = gpu->ops->alloc(gpu, m);
                for (size_t i = 0; i < m; i++) p[i] = frand();
                gpu->ops->to_device(gpu, pd, p, m);
                for (long t = 1; t <= 3; t++) {
                        for (size_t i = 0; i < m; i++) g[i] = frand();
                        gpu->ops->to_device(gpu, gd, g, m);
                        cpu->ops->optim_step(cpu, &hp, 0.01f, t, p, g, m1, v1, m);
                        gpu->ops->optim_step(gpu, &hp, 0.01f, t, pd, gd, md, vd, m);
                }
                char what[32];
                snprintf(what, sizeof what, "optimizer %s", dt_opt_names[k]);
                check(what, "ops", cmp(p, pd, m), &w);
                free(p); free(g); free(m1); free(v1);
                gpu->ops->free(gpu, pd); gpu->ops->free(gpu, gd); gpu->ops->free(gpu, md); gpu->ops->free(gpu, vd);
        }
        printf("  worst %.2e\n", w);
        free(mc); free(mh); free(tg); free(dzc);
        gpu->ops->free(gpu, mg);
        gpu->ops->free(gpu, dzg);
}

/* The transformer layers (attention: the plain kernel on cuda, one softmax block per row):
 * a char-gpt block on token ids (positions, pre-norm, causal heads with dropout, gelu_tanh);
 * non-causal heads, one causal head and layer norms without affine on float input; and a
 * sequence longer than a block's 256 threads, where the cpu's auto is the blocked kernel. */
static void transformer_cases(void)
{
        run_case("gpt-block", "[12]",
                 "  - {type: embedding, name: emb, vocab: 20, dim: 16}\n"
                 "  - {type: positions, name: pos}\n"
                 "  - {type: layernorm, name: ln1}\n"
                 "  - {type: attention, name: attn, heads: 2, causal: true, dropout: 0.1}\n"
                 "  - {type: add, name: res1, inputs: [attn, pos]}\n"
                 "  - {type: layernorm, name: ln2}\n"
                 "  - {type: fc, name: fc1, units: 32, activation: gelu_tanh}\n"
                 "  - {type: fc, name: fc2, units: 16}\n"
                 "  - {type: add, name: res2, inputs: [fc2, res1]}\n"
                 "  - {type: layernorm, name: ln_f}\n"
                 "  - {type: fc, name: head, units: 20}\n", 4, 20);
        run_case("attention", "[7, 8]",
                 "  - {type: attention, name: a4, heads: 4}\n"
                 "  - {type: layernorm, name: ln1, affine: false, eps: 0.001}\n"
                 "  - {type: attention, name: a1, heads: 1, causal: true, dropout: 0.25, kernel: plain}\n"
                 "  - {type: activation, name: gt, function: gelu_tanh}\n"
                 "  - {type: flatten, name: flat}\n"
                 "  - {type: layernorm, name: ln2}\n"
                 "  - {type: fc, name: out, units: 5}\n", 3, 0);
        run_case("attention-long", "[300, 8]",
                 "  - {type: layernorm, name: ln}\n"
                 "  - {type: attention, name: attn, heads: 2, causal: true, dropout: 0.1}\n"
                 "  - {type: layernorm, name: wide, input: input}\n"
                 "  - {type: add, name: sum, inputs: [attn, wide]}\n", 2, 0);
}

int main(void)
{
        const char *why = "";
        gpu = dt_backend_cuda_new(0, &why);
        cpu = dt_backend_cpu_new(1);
        if (!gpu) printf("no GPU (%s): the cases' graphs only, then skip\n", why);
        else printf("device: %s\n", gpu->desc);
        run_case("fc", "[20]",
                 "  - {type: fc, name: fc1, units: 32, activation: relu}\n"
                 "  - {type: fc, name: fc2, units: 16, activation: gelu}\n"
                 "  - {type: fc, name: fc3, units: 12, activation: tanh}\n"
                 "  - {type: fc, name: fc4, units: 8, activation: sigmoid}\n"
                 "  - {type: fc, name: fc5, units: 8, activation: leaky_relu, alpha: 0.1}\n"
                 "  - {type: dropout, name: drop, rate: 0.3}\n"
                 "  - {type: activation, name: act, function: tanh}\n"
                 "  - {type: fc, name: out, units: 5}\n", 9, 0);
        run_case("cnn", "[3, 12, 12]",
                 "  - {type: conv, name: c1, filters: 8, kernel: 3, padding: 1, activation: relu}\n"
                 "  - {type: batchnorm, name: bn1}\n"
                 "  - {type: maxpool, name: p1, kernel: 2}\n"
                 "  - {type: conv, name: c2, filters: 6, kernel: 3, stride: 2, padding: 1, groups: 2, activation: gelu}\n"
                 "  - {type: avgpool, name: p2, kernel: 3, stride: 1, padding: 1}\n"
                 "  - {type: conv, name: c3, filters: 4, kernel: 1}\n"
                 "  - {type: conv, name: c4, filters: 4, kernel: [3, 2], dilation: 2, padding: 1, bias: false}\n"
                 "  - {type: maxpool, name: p3, kernel: 3, stride: 1, padding: 1}\n"
                 "  - {type: batchnorm, name: bn2, affine: false}\n"
                 "  - {type: flatten, name: flat}\n"
                 "  - {type: batchnorm, name: bn3}\n"
                 "  - {type: fc, name: out, units: 5}\n", 6, 0);
        /* batch norm with a fused activation: the host loops recompute f' from x; the device runs
         * cuDNN's batch norm, then the activation (relu from y, gelu from the kept z) */
        run_case("bn-act", "[3, 10, 10]",
                 "  - {type: conv, name: c1, filters: 8, kernel: 3, padding: 1, bias: false}\n"
                 "  - {type: batchnorm, name: bn1, activation: relu}\n"
                 "  - {type: maxpool, name: p1, kernel: 2}\n"
                 "  - {type: conv, name: c2, filters: 6, kernel: 3, padding: 1}\n"
                 "  - {type: batchnorm, name: bn2, activation: gelu}\n"
                 "  - {type: flatten, name: flat}\n"
                 "  - {type: batchnorm, name: bn3, activation: tanh}\n"
                 "  - {type: fc, name: out, units: 5}\n", 6, 0);
        run_case("gap", "[4, 7, 5]",
                 "  - {type: conv, name: c1, filters: 6, kernel: 3, padding: same, activation: relu}\n"
                 "  - {type: global_avgpool, name: gap}\n"
                 "  - {type: fc, name: out, units: 3}\n", 5, 0);
        /* a branched graph: add (one to three inputs, a tensor twice, activations), concat of
         * channels, features and sequence steps; tensors with up to four readers */
        run_case("residual", "[4, 6, 6]",
                 "  - {type: conv, name: c1, filters: 6, kernel: 3, padding: 1, activation: relu}\n"
                 "  - {type: conv, name: c2, filters: 6, kernel: 3, padding: 1}\n"
                 "  - {type: conv, name: proj, filters: 6, kernel: 1, input: input}\n"
                 "  - {type: add, name: add1, inputs: [c2, proj], activation: relu}\n"
                 "  - {type: add, name: add2, inputs: [add1, c1, proj], activation: gelu}\n"
                 "  - {type: concat, name: cat, inputs: [add2, c1, input]}\n"
                 "  - {type: add, name: add3, inputs: [cat, cat], activation: tanh}\n"
                 "  - {type: global_avgpool, name: gap}\n"
                 "  - {type: concat, name: cat2, inputs: [gap, gap]}\n"
                 "  - {type: fc, name: out, units: 3}\n", 5, 0);
        run_case("concat-seq", "[5, 3]",
                 "  - {type: lstm, name: l1, hidden: 4, return_sequences: true}\n"
                 "  - {type: concat, name: cat, inputs: [l1, input]}\n"
                 "  - {type: lstm, name: l2, hidden: 4}\n", 3, 0);
        run_case("lstm", "[9, 6]",
                 "  - {type: lstm, name: lstm1, hidden: 16, layers: 2, return_sequences: true, forget_bias: 1.0}\n"
                 "  - {type: lstm, name: lstm2, hidden: 12}\n"
                 "  - {type: fc, name: out, units: 4}\n", 5, 0);
        run_case("gru", "[7, 5]",
                 "  - {type: gru, name: gru1, hidden: 10, layers: 2, return_sequences: true}\n"
                 "  - {type: gru, name: gru2, hidden: 8, bias: false}\n", 4, 0);
        run_case("rnn", "[6, 5]",
                 "  - {type: rnn, name: rnn1, hidden: 9, layers: 2, return_sequences: true}\n"
                 "  - {type: rnn, name: rnn2, hidden: 7, nonlinearity: relu}\n", 3, 0);
        run_case("text", "[12]",
                 "  - {type: embedding, name: emb, vocab: 20, dim: 8}\n"
                 "  - {type: lstm, name: lstm, hidden: 16, return_sequences: true}\n"
                 "  - {type: fc, name: out, units: 20}\n", 4, 20);
        transformer_cases();
        if (!gpu) {
                dt_backend_free(cpu);
                if (failures) printf("%d FAILED\n", failures);
                else printf("skip: %s\n", why);
                return failures ? 1 : 77;
        }
        ops_cases();
        dt_backend_free(gpu);
        dt_backend_free(cpu);
        if (failures) printf("%d FAILED\n", failures);
        else printf("all within %.0e\n", TOL);
        return failures ? 1 : 0;
}
