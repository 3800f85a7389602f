/* tests/unit/test_layers_rnn.c - rnn, lstm, gru and embedding: gradient checks through the real
 * parser and registry, an independent double-precision reference (forward values, and gradients
 * of the truncated-BPTT surrogate), known values from PyTorch, forget_bias and N(0,1) init.
 *
 * How truncated BPTT is checked. With bptt = k the sequence is cut into chunks [0,k), [k,2k), ...;
 * the state crosses a boundary forward but no gradient flows back across it. That gradient is
 * exactly the gradient of a surrogate: run the network with the state entering each chunk
 * replaced by a constant equal to its value in the unperturbed run. The reference below computes
 * that surrogate in double (ref_loss with frozen states) and differentiates it by central
 * differences, so the analytic truncated gradient is compared with a numeric gradient of a
 * well-defined function, not with the full gradient. With bptt = 0 (nothing frozen) the same
 * comparison checks full BPTT, and bptt >= T must give the full gradient bit for bit. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "gradcheck.h"
#include "graph/graph.h"
#include "util/common.h"
#include "layers/stepgemm.h"

#define GC(input, layer, B) do { \
        double w_ = dt_gradcheck(input, layer, B, 1); \
        fprintf(stderr, "%-22s worst scaled error %.3g\n", __func__, w_); \
        ck_assert_msg(w_ <= 1.0, "%s: worst scaled error %g", layer, w_); } while (0)

/* ---- a one-layer model through the real spec parser, registry and graph ---- */
typedef struct one {
        dt_model_spec s;
        dt_graph g;
        dt_backend *be;
        dt_layer *l;
} one;

static int one_build_t(one *m, const char *input, const char *layer, int B, int threads);
static int one_build(one *m, const char *input, const char *layer, int B) { return one_build_t(m, input, layer, B, 1); }

static int one_build_t(one *m, const char *input, const char *layer, int B, int threads)
{
        char path[64], items[512];
        dt_diag d = { 0 };
        snprintf(items, sizeof items, "  - %s", layer);
        if (dt_test_spec_file(path, sizeof path, input, items, NULL) < 0) return -1;
        int rc = dt_model_spec_load(&m->s, path, &d);
        unlink(path);
        if (rc < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return -1;
        }
        if (dt_graph_build(&m->g, &m->s, &d) < 0 || d.n) {
                dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                free(m->g.layers);
                dt_model_spec_free(&m->s);
                return -1;
        }
        m->be = dt_backend_cpu_new(threads);
        ck_assert_int_eq(dt_graph_alloc(&m->g, m->be, B), 0);
        m->l = &m->g.layers[0];
        return 0;
}

static void one_free(one *m)
{
        dt_graph_free(&m->g);
        dt_backend_free(m->be);
        dt_model_spec_free(&m->s);
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double urand(void)       /* [0, 1) */
{
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        return (double)(rs >> 11) / 9007199254740992.0;
}

/* ---- the reference: recurrent layers in double, one sample at a time ---- */
enum { K_RNN_TANH, K_RNN_RELU, K_LSTM, K_GRU };
static const char *const kind_type[] = { "rnn", "rnn", "lstm", "gru" };
static const int kind_gates[] = { 1, 1, 4, 3 };

typedef struct rcfg {
        int kind, L, H, F, T, bias, ret, bptt;
} rcfg;

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* Loss sum(y * r) over B samples x (B,T,F); P holds the layer's tensors in its order. With fh
 * (and fc for lstm), each (B, L, T, H), the state entering a bptt chunk is taken from them
 * instead of the running one. oh/oc (same layout) and y (B, out) receive the run when non-NULL. */
static double ref_loss(const rcfg *c, double *const *P, const double *x, int B, const double *r,
                       const double *fh, const double *fc, double *oh, double *oc, double *y)
{
        int H = c->H, T = c->T, L = c->L, G = kind_gates[c->kind] * H, npl = c->bias ? 4 : 2;
        size_t sz = (size_t)L * T * H;
        double *hs = calloc(sz, sizeof *hs), *cs = calloc(sz, sizeof *cs);
        double *gi = malloc((size_t)G * sizeof *gi), *gh = malloc((size_t)G * sizeof *gh);
        double *zero = calloc((size_t)(G + H + c->F), sizeof *zero);     /* absent biases, h_{-1}, c_{-1} */
        double loss = 0;
        int nout = c->ret ? T * H : H;
        for (int b = 0; b < B; b++) {
                for (int l = 0; l < L; l++) {
                        const double *wih = P[npl * l], *whh = P[npl * l + 1];
                        const double *bih = c->bias ? P[npl * l + 2] : zero, *bhh = c->bias ? P[npl * l + 3] : zero;
                        int I = l ? H : c->F;
                        for (int t = 0; t < T; t++) {
                                const double *in = l ? hs + ((size_t)(l - 1) * T + t) * H : x + ((size_t)b * T + t) * c->F;
                                const double *hp = zero, *cp = zero;
                                if (t > 0) {
                                        size_t o = ((size_t)l * T + t - 1) * H;
                                        int frozen = fh && c->bptt > 0 && t % c->bptt == 0;
                                        hp = frozen ? fh + (size_t)b * sz + o : hs + o;
                                        cp = frozen && fc ? fc + (size_t)b * sz + o : cs + o;
                                }
                                for (int j = 0; j < G; j++) {
                                        double si = bih[j], sh = bhh[j];
                                        for (int k = 0; k < I; k++) si += wih[(size_t)j * I + k] * in[k];
                                        for (int k = 0; k < H; k++) sh += whh[(size_t)j * H + k] * hp[k];
                                        gi[j] = si;
                                        gh[j] = sh;
                                }
                                double *h = hs + ((size_t)l * T + t) * H, *cc = cs + ((size_t)l * T + t) * H;
                                for (int j = 0; j < H; j++) {
                                        switch (c->kind) {
                                        case K_RNN_TANH: h[j] = tanh(gi[j] + gh[j]); break;
                                        case K_RNN_RELU: h[j] = fmax(0, gi[j] + gh[j]); break;
                                        case K_LSTM: {
                                                double i = sigm(gi[j] + gh[j]), f = sigm(gi[H + j] + gh[H + j]);
                                                double g = tanh(gi[2 * H + j] + gh[2 * H + j]), o = sigm(gi[3 * H + j] + gh[3 * H + j]);
                                                cc[j] = f * cp[j] + i * g;
                                                h[j] = o * tanh(cc[j]);
                                                break;
                                        }
                                        case K_GRU: {
                                                double rr = sigm(gi[j] + gh[j]), z = sigm(gi[H + j] + gh[H + j]);
                                                double n = tanh(gi[2 * H + j] + rr * gh[2 * H + j]);
                                                h[j] = (1 - z) * n + z * hp[j];
                                                break;
                                        }
                                        }
                                }
                        }
                }
                const double *top = hs + (size_t)(L - 1) * T * H + (c->ret ? 0 : (size_t)(T - 1) * H);
                for (int j = 0; j < nout; j++) loss += top[j] * r[(size_t)b * nout + j];
                if (y) memcpy(y + (size_t)b * nout, top, (size_t)nout * sizeof *y);
                if (oh) memcpy(oh + (size_t)b * sz, hs, sz * sizeof *hs);
                if (oc) memcpy(oc + (size_t)b * sz, cs, sz * sizeof *cs);
        }
        free(hs); free(cs); free(gi); free(gh); free(zero);
        return loss;
}

static void layer_yaml(const rcfg *c, char *buf, size_t n)
{
        snprintf(buf, n, "{type: %s, hidden: %d, layers: %d, return_sequences: %s, bptt: %d, bias: %s%s}",
                 kind_type[c->kind], c->H, c->L, c->ret ? "true" : "false", c->bptt, c->bias ? "true" : "false",
                 c->kind == K_RNN_RELU ? ", nonlinearity: relu" : c->kind == K_RNN_TANH ? ", nonlinearity: tanh" : "");
}

static double scaled(double a, double n) { return fabs(a - n) / (1e-4 + 1e-3 * fmax(fabs(a), fabs(n))); }

/* Builds the layer, checks its forward against ref_loss's y (abs 1e-5) and its backward (input and
 * every parameter) against central differences of the (truncated) reference loss. Returns the
 * worst scaled gradient error (pass <= 1). */
static double ref_check(rcfg c, int B)
{
        char layer[256], input[32];
        layer_yaml(&c, layer, sizeof layer);
        snprintf(input, sizeof input, "[%d, %d]", c.T, c.F);
        one m;
        ck_assert_msg(one_build(&m, input, layer, B) == 0, "%s does not build", layer);
        dt_layer *l = m.l;
        size_t nx = (size_t)B * c.T * c.F, ny = (size_t)B * dt_shape_size(&l->out);
        size_t sz = (size_t)B * c.L * c.T * c.H;
        float *x = m.g.act[0], *yf = m.g.act[1], *dy = m.g.dact[1], *dx = dt_falloc(nx);
        double *xd = malloc(nx * sizeof *xd), *r = calloc(ny, sizeof *r), *yd = malloc(ny * sizeof *yd);
        double *fh = malloc(sz * sizeof *fh), *fc = malloc(sz * sizeof *fc), *P[DT_MAX_PARAMS] = { 0 };
        for (size_t i = 0; i < nx; i++) xd[i] = x[i] = (float)(urand() * 2.2 - 1.1);
        for (size_t i = 0; i < ny; i++) r[i] = urand() * 2 - 1;
        for (int k = 0; k < l->np; k++) {
                P[k] = malloc(l->len[k] * sizeof **P);
                for (size_t i = 0; i < l->len[k]; i++) P[k][i] = l->p[k][i] = (float)(urand() - 0.5);
        }
        dt_fwd_ctx ctx = { .training = 1, .seed = 1 };
        l->ops->forward(l, &ctx, x, yf, B);
        ref_loss(&c, P, xd, B, r, NULL, NULL, fh, fc, yd);
        for (size_t i = 0; i < ny; i++)
                ck_assert_msg(fabs(yf[i] - yd[i]) <= 1e-5, "%s: y[%zu] = %g, reference %g", layer, i, yf[i], yd[i]);
        for (size_t i = 0; i < ny; i++) dy[i] = (float)r[i];
        memset(m.g.grads, 0, m.g.nparams * sizeof *m.g.grads);
        l->ops->backward(l, &ctx, x, yf, dy, dx, B);

        const double eps = 1e-5, *Fh = c.bptt ? fh : NULL, *Fc = c.bptt ? fc : NULL;
        double worst = 0;
        for (size_t i = 0; i < nx; i++) {
                double k = xd[i];
                xd[i] = k + eps; double lp = ref_loss(&c, P, xd, B, r, Fh, Fc, NULL, NULL, NULL);
                xd[i] = k - eps; double lm = ref_loss(&c, P, xd, B, r, Fh, Fc, NULL, NULL, NULL);
                xd[i] = k;
                double e = scaled(dx[i], (lp - lm) / (2 * eps));
                if (e > 1) fprintf(stderr, "%s: dx[%zu] %g vs %g\n", layer, i, dx[i], (lp - lm) / (2 * eps));
                worst = fmax(worst, e);
        }
        for (int t = 0; t < l->np; t++)
                for (size_t i = 0; i < l->len[t]; i++) {
                        double k = P[t][i];
                        P[t][i] = k + eps; double lp = ref_loss(&c, P, xd, B, r, Fh, Fc, NULL, NULL, NULL);
                        P[t][i] = k - eps; double lm = ref_loss(&c, P, xd, B, r, Fh, Fc, NULL, NULL, NULL);
                        P[t][i] = k;
                        double e = scaled(l->g[t][i], (lp - lm) / (2 * eps));
                        if (e > 1) fprintf(stderr, "%s: %s[%zu] %g vs %g\n", layer, l->ps[t].suffix, i, l->g[t][i], (lp - lm) / (2 * eps));
                        worst = fmax(worst, e);
                }
        for (int k = 0; k < l->np; k++) free(P[k]);
        free(xd); free(r); free(yd); free(fh); free(fc); free(dx);
        one_free(&m);
        return worst;
}

#define RC(name, B, ...) START_TEST(name) { \
        rcfg c_ = { __VA_ARGS__ }; double w_ = ref_check(c_, B); \
        fprintf(stderr, "%-22s worst scaled error %.3g\n", #name, w_); \
        ck_assert_msg(w_ <= 1.0, #name ": worst scaled error %g", w_); } END_TEST

/*                          kind        L  H  F  T  bias ret bptt */
RC(ref_rnn_tanh, 3,        K_RNN_TANH, 1, 4, 3, 5, 1, 0, 0)
RC(ref_rnn_relu_seq, 3,    K_RNN_RELU, 1, 4, 3, 5, 1, 1, 0)
RC(ref_rnn_stack_seq, 2,   K_RNN_TANH, 2, 3, 2, 4, 1, 1, 0)
RC(ref_rnn_nobias, 2,      K_RNN_TANH, 1, 3, 2, 4, 0, 0, 0)
RC(ref_rnn_bptt2, 2,       K_RNN_TANH, 1, 4, 3, 5, 1, 1, 2)
RC(ref_rnn_stack_bptt2, 2, K_RNN_RELU, 2, 3, 2, 5, 1, 0, 2)
RC(ref_lstm, 3,            K_LSTM,     1, 3, 4, 5, 1, 0, 0)
RC(ref_lstm_seq, 2,        K_LSTM,     1, 9, 3, 4, 1, 1, 0)
RC(ref_lstm_wide, 2,       K_LSTM,     1, 21, 3, 3, 1, 1, 2)  /* H = 21: a full 16-lane block and a tail */
RC(ref_lstm_stack, 2,      K_LSTM,     2, 3, 2, 4, 1, 0, 0)
RC(ref_lstm_stack_seq, 2,  K_LSTM,     2, 3, 2, 4, 1, 1, 0)
RC(ref_lstm_nobias, 2,     K_LSTM,     1, 3, 2, 4, 0, 1, 0)
RC(ref_lstm_bptt2, 2,      K_LSTM,     1, 3, 2, 5, 1, 1, 2)
RC(ref_lstm_bptt2_last, 2, K_LSTM,     2, 3, 2, 5, 1, 0, 2)
RC(ref_lstm_bptt1, 2,      K_LSTM,     1, 3, 2, 4, 1, 1, 1)
/* H a multiple of 16: the steps' products run through dt_stepgemm (AVX-512 builds); 2 layers of
 * 16 (the upper one's input is h), and 48 (three 64-column panels forward, a 48-column one back) */
RC(ref_lstm_h16_stack, 3,  K_LSTM,     2, 16, 3, 4, 1, 1, 0)
RC(ref_lstm_h48_bptt2, 2,  K_LSTM,     1, 48, 5, 4, 1, 0, 2)
RC(ref_gru, 3,             K_GRU,      1, 3, 4, 5, 1, 0, 0)
RC(ref_gru_seq, 2,         K_GRU,      1, 9, 3, 4, 1, 1, 0)
RC(ref_gru_wide, 2,        K_GRU,      1, 21, 3, 3, 1, 1, 2)
RC(ref_gru_stack, 2,       K_GRU,      2, 3, 2, 4, 1, 1, 0)
RC(ref_gru_nobias, 2,      K_GRU,      1, 3, 2, 4, 0, 0, 0)
RC(ref_gru_bptt2, 2,       K_GRU,      2, 3, 2, 5, 1, 1, 2)

/* the project's float gradient check (full BPTT), as every layer has */
START_TEST(gc_rnn) { GC("[5, 3]", "{type: rnn, hidden: 4}", 2); } END_TEST
START_TEST(gc_rnn_relu_seq) { GC("[4, 3]", "{type: rnn, hidden: 4, nonlinearity: relu, return_sequences: true}", 2); } END_TEST
START_TEST(gc_rnn_stack) { GC("[4, 3]", "{type: rnn, hidden: 3, layers: 2, return_sequences: true}", 2); } END_TEST
START_TEST(gc_lstm) { GC("[5, 3]", "{type: lstm, hidden: 4}", 2); } END_TEST
START_TEST(gc_lstm_seq_fb) { GC("[4, 3]", "{type: lstm, hidden: 4, return_sequences: true, forget_bias: 1.0}", 2); } END_TEST
START_TEST(gc_lstm_stack) { GC("[4, 2]", "{type: lstm, hidden: 3, layers: 2}", 2); } END_TEST
START_TEST(gc_gru) { GC("[5, 3]", "{type: gru, hidden: 4}", 2); } END_TEST
START_TEST(gc_gru_stack) { GC("[4, 2]", "{type: gru, hidden: 3, layers: 2, return_sequences: true}", 2); } END_TEST

/* bptt >= T cuts nothing: gradients equal full BPTT bit for bit; bptt < T differs */
static void bptt_same(const char *type)
{
        enum { B = 3, NV = 2 };
        const char *v[NV] = { "bptt: 0", "bptt: 6" };
        float *g[NV + 1];
        size_t n = 0;
        for (int k = 0; k <= NV; k++) {
                char layer[160];
                snprintf(layer, sizeof layer, "{type: %s, hidden: 5, layers: 2, return_sequences: true, %s}",
                         type, k < NV ? v[k] : "bptt: 2");
                one m;
                ck_assert_int_eq(one_build(&m, "[6, 3]", layer, B), 0);
                rs = 12345;
                size_t nx = (size_t)B * 18, ny = (size_t)B * 30;
                for (size_t i = 0; i < nx; i++) m.g.act[0][i] = (float)(urand() * 2 - 1);
                for (size_t i = 0; i < m.g.nparams; i++) m.g.params[i] = (float)(urand() - 0.5);
                for (size_t i = 0; i < ny; i++) m.g.dact[1][i] = (float)(urand() * 2 - 1);
                dt_fwd_ctx ctx = { .training = 1 };
                m.l->ops->forward(m.l, &ctx, m.g.act[0], m.g.act[1], B);
                m.l->ops->backward(m.l, &ctx, m.g.act[0], m.g.act[1], m.g.dact[1], NULL, B);
                n = m.g.nparams;
                g[k] = malloc(n * sizeof *g[k]);
                memcpy(g[k], m.g.grads, n * sizeof *g[k]);
                one_free(&m);
        }
        ck_assert(memcmp(g[0], g[1], n * sizeof *g[0]) == 0);
        ck_assert(memcmp(g[0], g[2], n * sizeof *g[0]) != 0);
        for (int k = 0; k <= NV; k++) free(g[k]);
}
START_TEST(bptt_full_rnn) { bptt_same("rnn"); } END_TEST
START_TEST(bptt_full_lstm) { bptt_same("lstm"); } END_TEST
START_TEST(bptt_full_gru) { bptt_same("gru"); } END_TEST

/* ---- known values from PyTorch (tests/unit/lstm_ref_torch.py) ---- */
/* generated by tests/unit/lstm_ref_torch.py with torch 2.15.0+cu132 */
static const double lstm_y[] = { 0.0861487012, -0.21277629, 0.107566851, 0.105317534 };
static const double lstm_dx[] = { -0.0634516904, -0.124543586, -0.0536290646, -0.0791750221 };
static const double lstm_dweight_ih[] = { -0.0156202859, 0.0156186459, 0.00231969416, -0.0975641175, -0.00255745919, -0.0230171327, 0.00550529352, 0.0495476416, -0.0197046477, -0.0494806294, -0.121501839, -0.0642693687, -0.0113478749, -0.0486852887, 0.00688594686, -0.0817810127 };
static const double lstm_dweight_hh[] = { 0.00126661016, -0.00312836534, 0.00560381072, -0.0138406968, 0.0017625743, -0.00435333342, -0.00379419109, 0.00937116743, 0.00580489047, -0.0143373381, 0.0211484111, -0.0522338745, 0.00457076611, -0.0112892086, 0.0039961121, -0.00986988653 };
static const double lstm_dbias_ih[] = { 0.051455831, 0.0371795597, 0.0204596735, -0.0440423481, 0.0974672052, 0.487663096, 0.0656321356, 0.0125616178 };
static const double lstm_dbias_hh[] = { 0.051455831, 0.0371795597, 0.0204596735, -0.0440423481, 0.0974672052, 0.487663096, 0.0656321356, 0.0125616178 };
static const double gru_y[] = { 0.393515766, -0.323744096, 0.271462985, 0.208202434 };
static const double gru_dx[] = { -0.0973945096, -0.116543971, -0.23341758, -0.166906951 };
static const double gru_dweight_ih[] = { -0.00723099208, 0.00496059546, -0.00182854935, -0.0164569442, 0.0337079918, -0.161441147, -0.00291796053, 0.276323778, -0.0958853738, -0.159257441, -0.211611682, -0.184751173 };
static const double gru_dweight_hh[] = { 0.0033087878, -0.00272212859, 0.00575650399, -0.00473585646, 0.0229968298, -0.0189194145, -0.0748648106, 0.0615910278, 0.0303797797, -0.0249933425, 0.116652825, -0.0959698862 };
static const double gru_dbias_ih[] = { 0.0248881606, 0.0146283948, -0.0509283705, -0.119049456, 0.435924909, 0.883597471 };
static const double gru_dbias_hh[] = { 0.0248881606, 0.0146283948, -0.0509283705, -0.119049456, 0.154307613, 0.621839199 };

/* in = 2, H = 2, T = 2, B = 1; tensor s (0..3 in checkpoint order) holds ((7 i + s) mod 11 - 5) / 10,
 * x[i] = ((5 i + 3) mod 9 - 4.5) / 4, L = sum(y * r) with r[i] = (i + 1) / 4 */
static void torch_known(const char *type, const double *y, const double *dx, const double *const *dp)
{
        char layer[96];
        snprintf(layer, sizeof layer, "{type: %s, hidden: 2, return_sequences: true}", type);
        one m;
        ck_assert_int_eq(one_build(&m, "[2, 2]", layer, 1), 0);
        dt_layer *l = m.l;
        ck_assert_int_eq(l->np, 4);
        for (int s = 0; s < 4; s++)
                for (size_t i = 0; i < l->len[s]; i++) l->p[s][i] = (float)((double)((7 * (int)i + s) % 11 - 5) / 10.0);
        float x[4], dxf[4], dy[4];
        for (int i = 0; i < 4; i++) {
                x[i] = (float)(((5 * i + 3) % 9 - 4.5) / 4.0);
                dy[i] = (float)((i + 1) / 4.0);
        }
        dt_fwd_ctx ctx = { .training = 1 };
        l->ops->forward(l, &ctx, x, m.g.act[1], 1);
        for (int i = 0; i < 4; i++)
                ck_assert_msg(fabs(m.g.act[1][i] - y[i]) <= 2e-6, "%s y[%d] %g vs torch %g", type, i, m.g.act[1][i], y[i]);
        memset(m.g.grads, 0, m.g.nparams * sizeof *m.g.grads);
        l->ops->backward(l, &ctx, x, m.g.act[1], dy, dxf, 1);
        for (int i = 0; i < 4; i++)
                ck_assert_msg(fabs(dxf[i] - dx[i]) <= 2e-6, "%s dx[%d] %g vs torch %g", type, i, dxf[i], dx[i]);
        for (int s = 0; s < 4; s++)
                for (size_t i = 0; i < l->len[s]; i++)
                        ck_assert_msg(fabs(l->g[s][i] - dp[s][i]) <= 2e-6, "%s d%s[%zu] %g vs torch %g",
                                      type, l->ps[s].suffix, i, l->g[s][i], dp[s][i]);
        one_free(&m);
}
START_TEST(torch_lstm)
{
        const double *dp[4] = { lstm_dweight_ih, lstm_dweight_hh, lstm_dbias_ih, lstm_dbias_hh };
        torch_known("lstm", lstm_y, lstm_dx, dp);
}
END_TEST
START_TEST(torch_gru)
{
        const double *dp[4] = { gru_dweight_ih, gru_dweight_hh, gru_dbias_ih, gru_dbias_hh };
        torch_known("gru", gru_y, gru_dx, dp);
}
END_TEST

/* ---- names, shapes, initialisation ---- */
/* dt_stepgemm against the plain loop it promises: every element C + sum A B as one fmaf chain in
 * k order, bit for bit, for row counts around its 6-row tiles, panels of 1..4 vectors, K across
 * its 256 block, and leading dimensions wider than the matrices; B packed as it lies and from its
 * transpose (the forward's W_hh^T) in turn. */
START_TEST(stepgemm_exact)
{
        if (!dt_stepgemm_ok(16)) return;        /* a CPU without AVX2 uses the backend's gemm */
        const int Ms[] = { 1, 5, 6, 7, 13, 32 }, Ns[] = { 16, 48, 64, 80, 512 }, Ks[] = { 1, 7, 128, 300 };
        for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
                for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
                        for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
                                const int M = Ms[a], N = Ns[b], K = Ks[c], lda = K + 3, ldb = N + 16, ldc = N + 5;
                                float *A = malloc((size_t)M * lda * sizeof *A), *B = malloc((size_t)K * ldb * sizeof *B);
                                float *C = malloc((size_t)M * ldc * sizeof *C), *R = malloc((size_t)M * ldc * sizeof *R);
                                for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = (float)(urand() * 2 - 1);
                                for (size_t i = 0; i < (size_t)K * ldb; i++) B[i] = (float)(urand() * 2 - 1);
                                for (size_t i = 0; i < (size_t)M * ldc; i++) R[i] = C[i] = (float)(urand() - 0.5);
                                ck_assert(dt_stepgemm_ok(N));
                                float *P = malloc((size_t)K * N * sizeof *P);
                                if ((a + b + c) % 2) {
                                        float *Bt = malloc((size_t)N * (K + 5) * sizeof *Bt);
                                        for (int n = 0; n < N; n++)
                                                for (int k = 0; k < K; k++) Bt[(size_t)n * (K + 5) + k] = B[(size_t)k * ldb + n];
                                        dt_stepgemm_pack(N, K, Bt, K + 5, 1, P);
                                        free(Bt);
                                } else {
                                        dt_stepgemm_pack(N, K, B, ldb, 0, P);
                                }
                                dt_stepgemm(M, N, K, A, lda, P, C, ldc);
                                free(P);
                                for (int m = 0; m < M; m++)
                                        for (int n = 0; n < N; n++) {
                                                float s = R[(size_t)m * ldc + n];
                                                for (int k = 0; k < K; k++) s = fmaf(A[(size_t)m * lda + k], B[(size_t)k * ldb + n], s);
                                                R[(size_t)m * ldc + n] = s;
                                        }
                                ck_assert_msg(memcmp(C, R, (size_t)M * ldc * sizeof *C) == 0, "M %d N %d K %d", M, N, K);
                                free(A); free(B); free(C); free(R);
                        }
}
END_TEST

/* LSTM on 1 and 2 threads (the batch rows split, each thread its own steps): outputs and input
 * gradients bit for bit, with H = 32 (dt_stepgemm) and H = 21 (gemm); parameter gradients to
 * rounding (the bias sums add the threads' partial sums, in thread order). Bit for bit only with
 * OpenBLAS's AVX-512 kernels: its Haswell kernels (OPENBLAS_CORETYPE=Haswell, or an AVX2 CPU) sum
 * a row of a GEMM split into fewer rows in another order, measured on 288 of 576 shapes, so
 * there the two agree to rounding. */
char *openblas_get_corename(void);     /* cblas.h would bring complex.h's I */

static int blas_rows_exact(void)
{
        const char *c = openblas_get_corename();
        return c && (!strcasecmp(c, "skylakex") || !strcasecmp(c, "cooperlake") || !strcasecmp(c, "sapphirerapids"));
}

START_TEST(lstm_threads_same)
{
        const char *layer[2] = { "{type: lstm, hidden: 32, layers: 2, return_sequences: true}", "{type: lstm, hidden: 21}" };
        for (int v = 0; v < 2; v++) {
                one m[2];
                const int B = 24;
                float *y[2], *dx[2];
                for (int k = 0; k < 2; k++) {
                        ck_assert_int_eq(one_build_t(&m[k], "[5, 7]", layer[v], B, k + 1), 0);
                        dt_layer *l = m[k].l;
                        size_t nx = (size_t)B * dt_shape_size(&l->in), ny = (size_t)B * dt_shape_size(&l->out);
                        rs = 0x1234567ull;
                        for (int q = 0; q < l->np; q++)
                                for (size_t i = 0; i < l->len[q]; i++) l->p[q][i] = (float)(urand() - 0.5);
                        for (size_t i = 0; i < nx; i++) m[k].g.act[0][i] = (float)(urand() * 2 - 1);
                        for (size_t i = 0; i < ny; i++) m[k].g.dact[1][i] = (float)(urand() * 2 - 1);
                        dt_fwd_ctx ctx = { .training = 1, .seed = 1 };
                        y[k] = m[k].g.act[1];
                        dx[k] = dt_falloc(nx);
                        memset(m[k].g.grads, 0, m[k].g.nparams * sizeof *m[k].g.grads);
                        l->ops->forward(l, &ctx, m[k].g.act[0], y[k], B);
                        l->ops->backward(l, &ctx, m[k].g.act[0], y[k], m[k].g.dact[1], dx[k], B);
                }
                size_t nx = (size_t)B * dt_shape_size(&m[0].l->in), ny = (size_t)B * dt_shape_size(&m[0].l->out);
                if (blas_rows_exact()) {
                        ck_assert_msg(memcmp(y[0], y[1], ny * sizeof(float)) == 0, "%s: y", layer[v]);
                        ck_assert_msg(memcmp(dx[0], dx[1], nx * sizeof(float)) == 0, "%s: dx", layer[v]);
                }
                for (size_t i = 0; i < ny; i++)
                        ck_assert_msg(fabsf(y[0][i] - y[1][i]) <= 1e-5f * (1 + fabsf(y[0][i])), "%s: y %zu", layer[v], i);
                for (size_t i = 0; i < nx; i++)
                        ck_assert_msg(fabsf(dx[0][i] - dx[1][i]) <= 1e-5f * (1 + fabsf(dx[0][i])), "%s: dx %zu", layer[v], i);
                for (size_t i = 0; i < m[0].g.nparams; i++)
                        ck_assert_msg(fabsf(m[0].g.grads[i] - m[1].g.grads[i]) <= 1e-5f * (1 + fabsf(m[0].g.grads[i])),
                                      "%s: grad %zu %g vs %g", layer[v], i, m[0].g.grads[i], m[1].g.grads[i]);
                for (int k = 0; k < 2; k++) {
                        free(dx[k]);
                        one_free(&m[k]);
                }
        }
}
END_TEST

START_TEST(lstm_names)
{
        one m;
        ck_assert_int_eq(one_build(&m, "[7, 5]", "{type: lstm, hidden: 6, layers: 2}", 1), 0);
        const char *names[] = { "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1" };
        int rows[] = { 24, 24, 24, 24, 24, 24, 24, 24 }, cols[] = { 5, 6, 0, 0, 6, 6, 0, 0 };
        ck_assert_int_eq(m.l->np, 8);
        for (int k = 0; k < 8; k++) {
                ck_assert_str_eq(m.l->ps[k].suffix, names[k]);
                ck_assert_int_eq(m.l->ps[k].shape.n, cols[k] ? 2 : 1);
                ck_assert_int_eq(m.l->ps[k].shape.d[0], rows[k]);
                if (cols[k]) ck_assert_int_eq(m.l->ps[k].shape.d[1], cols[k]);
        }
        ck_assert_int_eq(m.l->out.n, 1);
        ck_assert_int_eq(m.l->out.d[0], 6);
        one_free(&m);
}
END_TEST

/* forget_bias adds to rows [H, 2H) of every bias_ih once, on fresh initialisation only */
START_TEST(lstm_forget_bias)
{
        one a, b;
        const int H = 5;
        ck_assert_int_eq(one_build(&a, "[3, 4]", "{name: r, type: lstm, hidden: 5, layers: 2}", 1), 0);
        ck_assert_int_eq(one_build(&b, "[3, 4]", "{name: r, type: lstm, hidden: 5, layers: 2, forget_bias: 1.5}", 1), 0);
        dt_graph_init_params(&a.g, 42);
        dt_graph_init_params(&b.g, 42);
        for (int k = 0; k < 8; k++)
                for (size_t i = 0; i < a.l->len[k]; i++) {
                        double d = (double)b.l->p[k][i] - a.l->p[k][i];
                        int fgate = (k % 4 == 2) && (int)i >= H && (int)i < 2 * H;
                        ck_assert_msg(fabs(d - (fgate ? 1.5 : 0)) < 1e-6, "tensor %d [%zu]: diff %g", k, i, d);
                }
        /* torch's U(-1/sqrt(H), 1/sqrt(H)) for everything else */
        for (size_t i = 0; i < a.g.nparams; i++) ck_assert(fabsf(a.g.params[i]) <= 1 / sqrtf(H));
        one_free(&a);
        one_free(&b);
}
END_TEST

START_TEST(shape_errors)
{
        char path[64];
        const char *bad[][2] = {
                { "[1, 28, 28]", "  - {type: lstm, hidden: 8}" },
                { "[28]", "  - {type: gru, hidden: 8}" },
                { "[28, 28]", "  - {type: rnn, hidden: 8, nonlinearity: sigmoid}" },
                { "[28, 28]", "  - {type: lstm, hidden: 8, layers: 5}" },
                { "[28, 28]", "  - {type: lstm, hidden: 8, bias: false, forget_bias: 1}" },
                { "[4, 2]", "  - {type: embedding, vocab: 10, dim: 3}" },
                { "[4]", "  - {type: embedding, dim: 3}" },
        };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                dt_model_spec s;
                dt_graph g;
                dt_diag d = { 0 };
                ck_assert_int_eq(dt_test_spec_file(path, sizeof path, bad[i][0], bad[i][1], NULL), 0);
                int rc = dt_model_spec_load(&s, path, &d);
                if (rc == 0) {
                        rc = dt_graph_build(&g, &s, &d);
                        if (i == 0) ck_assert(d.n && strstr(d.msgs[0].text, "needs a sequence input (T,F), got (1,28,28)"));
                        free(g.layers);
                        dt_model_spec_free(&s);
                }
                unlink(path);
                ck_assert_msg(rc < 0 && d.n > 0, "case %zu accepted", i);
                dt_diag_free(&d);
        }
}
END_TEST

/* ---- embedding ---- */
START_TEST(embedding_grad)
{
        enum { B = 3, T = 6, V = 7, D = 4 };
        one m;
        ck_assert_int_eq(one_build(&m, "[6]", "{type: embedding, vocab: 7, dim: 4}", B), 0);
        dt_layer *l = m.l;
        ck_assert_int_eq(l->out.n, 2);
        ck_assert_int_eq(l->out.d[0], T);
        ck_assert_int_eq(l->out.d[1], D);
        ck_assert_str_eq(l->ps[0].suffix, "weight");
        float *x = m.g.act[0], *y = m.g.act[1], dx[B * T], r[B * T * D];
        for (int i = 0; i < B * T; i++) x[i] = (float)((i * 5) % V);  /* ids repeat: rows accumulate */
        for (int i = 0; i < V * D; i++) l->p[0][i] = (float)(urand() - 0.5);
        for (int i = 0; i < B * T * D; i++) r[i] = (float)(urand() * 2 - 1);
        dt_fwd_ctx ctx = { .training = 1 };
        l->ops->forward(l, &ctx, x, y, B);
        for (int i = 0; i < B * T; i++)
                for (int j = 0; j < D; j++) ck_assert(y[i * D + j] == l->p[0][(int)x[i] * D + j]);
        for (int i = 0; i < B * T; i++) dx[i] = NAN;
        memset(m.g.grads, 0, m.g.nparams * sizeof *m.g.grads);
        l->ops->backward(l, &ctx, x, y, r, dx, B);
        for (int i = 0; i < B * T; i++) ck_assert(dx[i] == 0);
        /* numeric dW of L = sum(y * r): central differences in double over the float forward */
        double worst = 0;
        for (int i = 0; i < V * D; i++) {
                float k = l->p[0][i];
                const float e = 0.01f;
                double lp = 0, lm = 0;
                l->p[0][i] = k + e; l->ops->forward(l, &ctx, x, y, B);
                for (int j = 0; j < B * T * D; j++) lp += (double)y[j] * r[j];
                l->p[0][i] = k - e; l->ops->forward(l, &ctx, x, y, B);
                for (int j = 0; j < B * T * D; j++) lm += (double)y[j] * r[j];
                l->p[0][i] = k;
                double num = (lp - lm) / (2 * (double)e);
                worst = fmax(worst, scaled(l->g[0][i], num));
        }
        fprintf(stderr, "%-22s worst scaled error %.3g\n", "embedding_grad", worst);
        ck_assert_msg(worst <= 1, "embedding dW: worst scaled error %g", worst);
        one_free(&m);
}
END_TEST

/* weight ~ N(0, 1) like torch.nn.Embedding */
START_TEST(embedding_init)
{
        one m;
        ck_assert_int_eq(one_build(&m, "[3]", "{type: embedding, vocab: 1000, dim: 32}", 1), 0);
        dt_graph_init_params(&m.g, 7);
        double s = 0, s2 = 0;
        size_t n = m.l->len[0];
        for (size_t i = 0; i < n; i++) { s += m.l->p[0][i]; s2 += (double)m.l->p[0][i] * m.l->p[0][i]; }
        double mean = s / n, sd = sqrt(s2 / n - mean * mean);
        ck_assert_msg(fabs(mean) < 0.03 && fabs(sd - 1) < 0.03, "mean %g sd %g", mean, sd);
        one_free(&m);
}
END_TEST

/* embedding -> lstm -> fc builds and trains end to end through the graph */
START_TEST(embedding_lstm_graph)
{
        char path[64];
        const char *layers = "  - {type: embedding, vocab: 11, dim: 4}\n"
                             "  - {type: lstm, hidden: 6, return_sequences: true, bptt: 3}\n"
                             "  - {type: gru, hidden: 5, layers: 2}\n"
                             "  - {type: fc, units: 2}";
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, "[8]", layers, NULL), 0);
        ck_assert_int_eq(dt_model_spec_load(&s, path, &d), 0);
        unlink(path);
        ck_assert_int_eq(dt_graph_build(&g, &s, &d), 0);
        ck_assert_int_eq(g.layers[3].out.d[0], 2);
        dt_backend *be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc(&g, be, 4), 0);
        dt_graph_init_params(&g, 1);
        for (int i = 0; i < 4 * 8; i++) g.act[0][i] = (float)(i % 11);
        dt_fwd_ctx ctx = { .training = 1 };
        dt_graph_forward(&g, &ctx, 4);
        for (int i = 0; i < 8; i++) g.dact[4][i] = 1;
        dt_graph_backward(&g, &ctx, 4);
        ck_assert(isfinite(be->ops->sumsq(be, g.grads, g.nparams)) && be->ops->sumsq(be, g.grads, g.nparams) > 0);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("layers_rnn");
        TCase *tc = tcase_create("rnn");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, ref_rnn_tanh); tcase_add_test(tc, ref_rnn_relu_seq); tcase_add_test(tc, ref_rnn_stack_seq);
        tcase_add_test(tc, ref_rnn_nobias); tcase_add_test(tc, ref_rnn_bptt2); tcase_add_test(tc, ref_rnn_stack_bptt2);
        tcase_add_test(tc, ref_lstm); tcase_add_test(tc, ref_lstm_seq); tcase_add_test(tc, ref_lstm_wide); tcase_add_test(tc, ref_lstm_stack);
        tcase_add_test(tc, ref_lstm_stack_seq); tcase_add_test(tc, ref_lstm_nobias); tcase_add_test(tc, ref_lstm_bptt2);
        tcase_add_test(tc, ref_lstm_bptt2_last); tcase_add_test(tc, ref_lstm_bptt1);
        tcase_add_test(tc, ref_lstm_h16_stack); tcase_add_test(tc, ref_lstm_h48_bptt2);
        tcase_add_test(tc, stepgemm_exact); tcase_add_test(tc, lstm_threads_same);
        tcase_add_test(tc, ref_gru); tcase_add_test(tc, ref_gru_seq); tcase_add_test(tc, ref_gru_wide); tcase_add_test(tc, ref_gru_stack);
        tcase_add_test(tc, ref_gru_nobias); tcase_add_test(tc, ref_gru_bptt2);
        tcase_add_test(tc, gc_rnn); tcase_add_test(tc, gc_rnn_relu_seq); tcase_add_test(tc, gc_rnn_stack);
        tcase_add_test(tc, gc_lstm); tcase_add_test(tc, gc_lstm_seq_fb); tcase_add_test(tc, gc_lstm_stack);
        tcase_add_test(tc, gc_gru); tcase_add_test(tc, gc_gru_stack);
        tcase_add_test(tc, bptt_full_rnn); tcase_add_test(tc, bptt_full_lstm); tcase_add_test(tc, bptt_full_gru);
        tcase_add_test(tc, torch_lstm); tcase_add_test(tc, torch_gru);
        tcase_add_test(tc, lstm_names); tcase_add_test(tc, lstm_forget_bias); tcase_add_test(tc, shape_errors);
        tcase_add_test(tc, embedding_grad); tcase_add_test(tc, embedding_init); tcase_add_test(tc, embedding_lstm_graph);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
