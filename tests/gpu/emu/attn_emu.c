/* tests/gpu/emu/attn_emu.c - the CUDA backend's transformer ops checked on the host, without a GPU:
 * backend/cuda/attn.c as it is, kernels_attn.cu's kernels run by emu.h, cublasSgemmStridedBatched
 * by cuBLAS's column-major definition (emu_fakes.c). Attention against layers/attn_kern.c's plain kernel
 * per (sample, head), with and without the causal mask and dropout, T past a block's 256 threads;
 * layer norm against a double-precision reference. This checks the index math, the operand order of
 * every product and the kernels' barriers, not the GPU itself: tests/gpu/ does that. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/cuda_priv.h"
#include "layers/attn_kern.h"

static unsigned long long rs = 88172645463325252ull;
static float frand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 40) / 16777216.0) * 2 - 1; }

static double rel(const float *a, const float *b, size_t n)
{
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
                double d = fabs((double)a[i] - b[i]);
                if (d > num || d != d) num = d;
                if (fabs(a[i]) > den) den = fabs(a[i]);
        }
        return num / (den > 0 ? den : 1);
}

/* |e| / |m|, 0 when both are 0 (a row of one feature has dx = 0 exactly) */
static double ratio(double e, double m) { return m > 0 ? e / m : e; }

static int fails;
static void check(const char *what, double e, double tol)
{
        printf("  %-28s %.2e%s\n", what, e, e <= tol ? "" : "  FAIL");
        if (!(e <= tol)) fails++;
}

static void attn_case(int B, int T, int H, int D, int causal, float p, int h0)
{
        int W = H * D;
        size_t nq = (size_t)B * T * 3 * W, no = (size_t)B * T * W, np = (size_t)B * H * T * T;
        float *qkv = malloc(nq * 4), *o = malloc(no * 4), *P = malloc(np * 4), *dO = malloc(no * 4), *dq = malloc(nq * 4);
        float *oref = calloc(no, 4), *Pref = calloc(np, 4), *dqref = calloc(nq, 4);
        for (size_t i = 0; i < nq; i++) qkv[i] = 2 * frand();
        for (size_t i = 0; i < no; i++) dO[i] = frand();
        memset(o, 0x7f, no * 4); memset(P, 0x7f, np * 4); memset(dq, 0x7f, nq * 4);
        dt_cuda c = { 0 };
        dt_backend g = { .priv = &c };
        dt_attn_desc d = { .T = T, .D = D, .H = H, .h0 = h0, .causal = causal, .scale = 1.0f / sqrtf((float)D) };
        dt_attn_drop dr = { .p = p, .key = 0x1234567ull, .pos0 = 5 };
        if (dt_cuda_attn_plan(&g, &d, B) < 0) { fails++; return; }
        dt_cuda_attn_fwd(&g, &d, &dr, qkv, o, P, B);
        dt_cuda_attn_bwd(&g, &d, &dr, qkv, P, dO, dq, B);
        dt_backend *cpu = dt_backend_cpu_new(1);
        float *ws = malloc(dt_attn_plain_ws(T, D, 64) * 4);
        for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                        size_t qo = (size_t)b * T * 3 * W + (size_t)h * D, oo = (size_t)b * T * W + (size_t)h * D;
                        dt_attn_head hd = { .T = T, .D = D, .causal = causal, .block = 64, .scale = d.scale, .p = p,
                                            .key = dr.key, .pos = (uint64_t)(dr.pos0 + b), .head = h0 + h,
                                            .q = qkv + qo, .k = qkv + qo + W, .v = qkv + qo + 2 * W,
                                            .ld = 3 * (size_t)W, .ldo = (size_t)W, .be = cpu };
                        float *pr = Pref + ((size_t)b * H + h) * T * T;
                        dt_attn_plain_fwd(&hd, oref + oo, pr, ws);
                        dt_attn_plain_bwd(&hd, oref + oo, dO + oo, pr, dqref + qo, dqref + qo + W, dqref + qo + 2 * W, ws);
                }
        printf("B %d T %d H %d D %d causal %d p %.2f h0 %d\n", B, T, H, D, causal, p, h0);
        check("P", rel(Pref, P, np), 1e-5);
        check("o", rel(oref, o, no), 1e-5);
        check("dqkv", rel(dqref, dq, nq), 1e-5);
        /* q, k and v blocks apart */
        double eq = 0, ek = 0, ev = 0;
        for (size_t r = 0; r < (size_t)B * T; r++) {
                double a = rel(dqref + r * 3 * W, dq + r * 3 * W, W), bb = rel(dqref + r * 3 * W + W, dq + r * 3 * W + W, W),
                       cc = rel(dqref + r * 3 * W + 2 * W, dq + r * 3 * W + 2 * W, W);
                eq = a > eq ? a : eq; ek = bb > ek ? bb : ek; ev = cc > ev ? cc : ev;
        }
        check("dq rows (worst)", eq, 1e-4); check("dk rows (worst)", ek, 1e-4); check("dv rows (worst)", ev, 1e-4);
        dt_backend_free(cpu);
        free(qkv); free(o); free(P); free(dO); free(dq); free(oref); free(Pref); free(dqref); free(ws);
}

static void ln_case(int R, int F, int affine)
{
        float *x = malloc((size_t)R * F * 4), *y = malloc((size_t)R * F * 4), *dy = malloc((size_t)R * F * 4),
              *dx = malloc((size_t)R * F * 4), *w = malloc(F * 4), *b = malloc(F * 4), *dw = calloc(F, 4), *db = calloc(F, 4),
              *mean = malloc(R * 4), *rstd = malloc(R * 4);
        for (size_t i = 0; i < (size_t)R * F; i++) { x[i] = 3 + 2 * frand(); dy[i] = frand(); }
        for (int i = 0; i < F; i++) { w[i] = 1 + frand(); b[i] = frand(); dw[i] = 0.5f; db[i] = -0.25f; }
        dt_backend g = { 0 };
        dt_cuda_ln_fwd(&g, x, y, affine ? w : NULL, affine ? b : NULL, mean, rstd, R, F, 1e-5f);
        dt_cuda_ln_bwd(&g, x, dy, dx, affine ? w : NULL, affine ? dw : NULL, affine ? db : NULL, mean, rstd, R, F);
        /* reference in double */
        double ey = 0, edx = 0, my = 0, mdx = 0, edw = 0, mdw = 0, edb = 0, mdb = 0;
        double *aw = calloc(F, 8), *ab = calloc(F, 8);
        for (int r = 0; r < R; r++) {
                const float *xr = x + (size_t)r * F, *gr = dy + (size_t)r * F;
                double mu = 0, var = 0;
                for (int i = 0; i < F; i++) mu += xr[i];
                mu /= F;
                for (int i = 0; i < F; i++) var += (xr[i] - mu) * (xr[i] - mu);
                var /= F;
                double rsd = 1 / sqrt(var + 1e-5), mg = 0, mgh = 0;
                for (int i = 0; i < F; i++) {
                        double xh = (xr[i] - mu) * rsd, yy = affine ? xh * w[i] + b[i] : xh, gg = affine ? gr[i] * w[i] : gr[i];
                        ey = fmax(ey, fabs(yy - y[(size_t)r * F + i])); my = fmax(my, fabs(yy));
                        mg += gg; mgh += gg * xh; aw[i] += gr[i] * xh; ab[i] += gr[i];
                }
                mg /= F; mgh /= F;
                for (int i = 0; i < F; i++) {
                        double xh = (xr[i] - mu) * rsd, gg = affine ? gr[i] * w[i] : gr[i], d = rsd * (gg - mg - xh * mgh);
                        edx = fmax(edx, fabs(d - dx[(size_t)r * F + i])); mdx = fmax(mdx, fabs(d));
                }
        }
        for (int i = 0; affine && i < F; i++) {
                edw = fmax(edw, fabs(aw[i] + 0.5 - dw[i])); mdw = fmax(mdw, fabs(aw[i] + 0.5));
                edb = fmax(edb, fabs(ab[i] - 0.25 - db[i])); mdb = fmax(mdb, fabs(ab[i] - 0.25));
        }
        printf("layernorm R %d F %d affine %d\n", R, F, affine);
        check("y", ratio(ey, my), 1e-5); check("dx", ratio(edx, mdx), 1e-4);
        if (affine) { check("dw", ratio(edw, mdw), 1e-5); check("db", ratio(edb, mdb), 1e-5); }
        free(x); free(y); free(dy); free(dx); free(w); free(b); free(dw); free(db); free(mean); free(rstd); free(aw); free(ab);
}

int main(void)
{
        ln_case(7, 20, 1);
        ln_case(5, 300, 1);     /* F > THREADS: two elements per thread */
        ln_case(70, 33, 0);     /* two parameter blocks of 32 features, the second 1 wide */
        ln_case(3, 1, 1);
        attn_case(2, 5, 2, 3, 0, 0.0f, 0);
        attn_case(3, 7, 2, 4, 1, 0.0f, 0);
        attn_case(2, 6, 3, 2, 1, 0.3f, 1);
        attn_case(2, 9, 1, 5, 0, 0.2f, 0);
        attn_case(1, 300, 2, 4, 1, 0.1f, 2); /* T > THREADS: rows walked in two strides */
        attn_case(2, 1, 2, 3, 1, 0.0f, 0);
        printf(fails ? "%d FAILED\n" : "all passed\n", fails);
        return fails != 0;
}
