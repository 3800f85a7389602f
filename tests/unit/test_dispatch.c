/* tests/unit/test_dispatch.c - every CPU kernel family's variants against its generic one, for each
 * path this CPU runs (util/cpu.h): bit for bit, except the recurrent cells, whose generic variant
 * has no FMA (AVX2 and AVX-512 agree bit for bit; generic within a stated rounding), and the direct
 * convolution, each path bit for bit against its reference loop (fmaf chains; generic: without
 * FMA). Odd sizes and vector tails throughout; paths the CPU lacks are skipped and named. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gradcheck.h"
#include "data/bytes.h"
#include "graph/graph.h"
#include "layers/kernels.h"
#include "backend/ew.h"
#include "util/common.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float rnd(void)  /* uniform in [-1, 1) */
{
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = rnd(); }

/* the variant of family f for path p, NULL when the CPU cannot run p or f has no table of its own there */
static const void *variant(const dt_kfam *f, dt_isa p)
{
        if (p > dt_cpu_best() || !f->v[p]) return NULL;
        return f->v[p];
}

/* floats that differ in any bit (NaN payloads included) */
static long diff_bits(const float *a, const float *b, size_t n)
{
        long d = 0;
        for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof *a) != 0;
        return d;
}

START_TEST(cpu_paths)
{
        dt_isa best = dt_cpu_best();
        ck_assert(best >= DT_ISA_GENERIC && best < DT_ISA_N);
        ck_assert_str_eq(dt_isa_name(DT_ISA_AVX512), "avx512");
        ck_assert_int_eq(dt_cpu_force(DT_ISA_GENERIC), 0);
        ck_assert_int_eq(dt_cpu_isa(), DT_ISA_GENERIC);
        if (best < DT_ISA_AVX512) ck_assert_int_eq(dt_cpu_force(DT_ISA_AVX512), -1);
        ck_assert_int_eq(dt_cpu_force(best), 0);
        /* a family picks its best table at or below the path: stepgemm has none below AVX-512 */
        dt_cpu_force(DT_ISA_GENERIC);
        ck_assert_ptr_null(dt_kfam_pick(&dt_stepgemm_kfam));
        ck_assert_ptr_eq(dt_kfam_pick(&dt_pool_kfam), dt_pool_kfam.v[DT_ISA_GENERIC]);
        dt_cpu_force(best);
        /* DTRAIN_CPU: a path the CPU lacks and a word that is none are refused with a message */
        char msg[160];
        setenv("DTRAIN_CPU", "avx3", 1);
        ck_assert_int_eq(dt_cpu_init(msg, sizeof msg), -1);
        ck_assert_ptr_nonnull(strstr(msg, "unknown path"));
        if (best < DT_ISA_AVX512) {
                setenv("DTRAIN_CPU", "avx512", 1);
                ck_assert_int_eq(dt_cpu_init(msg, sizeof msg), -1);
                ck_assert_ptr_nonnull(strstr(msg, "runs only"));
        }
        setenv("DTRAIN_CPU", "generic", 1);
        ck_assert_int_eq(dt_cpu_init(msg, sizeof msg), 0);
        ck_assert_int_eq(dt_cpu_isa(), DT_ISA_GENERIC);
        unsetenv("DTRAIN_CPU");
        ck_assert_int_eq(dt_cpu_init(msg, sizeof msg), 0);
        ck_assert_int_eq(dt_cpu_isa(), best);
        printf("test_dispatch: this CPU runs paths up to %s\n", dt_isa_name(best));
}
END_TEST

START_TEST(bytes_same)
{
        const dt_bytes_kern *g = dt_bytes_kfam.v[DT_ISA_GENERIC];
        float lut[256];
        fill(lut, 256);
        unsigned char r[100];
        for (int i = 0; i < 100; i++) r[i] = (unsigned char)(rs >> (i % 56)) ^ (unsigned char)(i * 37);
        for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                const dt_bytes_kern *k = variant(&dt_bytes_kfam, (dt_isa)p);
                if (!k) continue;
                for (size_t n = 0; n <= 67; n++)
                        for (int fl = 0; fl < 2; fl++) {
                                float a[100], b[100];
                                memset(a, 0x7f, sizeof a);
                                memcpy(b, a, sizeof b);
                                g->lut(r + 1, n, fl ? 0x80 : 0, lut, a);
                                k->lut(r + 1, n, fl ? 0x80 : 0, lut, b);
                                ck_assert_msg(diff_bits(a, b, 100) == 0, "bytes %s, n %zu", dt_isa_name((dt_isa)p), n);
                        }
        }
}
END_TEST

/* One shape's 2x2 stride-2 max pooling on rows [g0, g1) of five planes, variant k against the
 * generic loop: y, codes and dx (including what lies outside the call's rows, which neither may
 * touch: the vector tails read and write whole vectors inside it), and the NaN planes */
static void pool_case(const dt_pool_kern *k, const char *path, int H, int W, int nan, size_t g0, size_t g1)
{
        const dt_pool_kern *g = dt_pool_kfam.v[DT_ISA_GENERIC];
        const int OH = H / 2, OW = W / 2, planes = 5;
        const size_t nx = (size_t)planes * H * W, ny = (size_t)planes * OH * OW;
        float *x = malloc(nx * sizeof *x), *y0 = malloc(ny * sizeof *y0), *y1 = malloc(ny * sizeof *y1);
        float *dx0 = malloc(nx * sizeof *dx0), *dx1 = malloc(nx * sizeof *dx1), *dy = malloc(ny * sizeof *dy);
        uint8_t *c0 = malloc(ny), *c1 = malloc(ny);
        for (size_t i = 0; i < nx; i++) x[i] = (float)((int)(rnd() * 4));    /* ties */
        if (nan) x[nx / 2] = NAN;
        fill(dy, ny);
        memset(y0, 0x55, ny * sizeof *y0);
        memcpy(y1, y0, ny * sizeof *y1);
        memset(c0, 7, ny);
        memset(c1, 7, ny);
        size_t lo0 = (size_t)-1, hi0 = (size_t)-1, lo1 = (size_t)-1, hi1 = (size_t)-1;
        g->max2x2_fwd(x, y0, c0, H, W, OH, OW, g0, g1, &lo0, &hi0);
        k->max2x2_fwd(x, y1, c1, H, W, OH, OW, g0, g1, &lo1, &hi1);
        /* the planes to redo: the generic one's, or more (a vector may hold rows of two planes) */
        ck_assert_msg(hi0 == (size_t)-1 || (hi1 != (size_t)-1 && lo1 <= lo0 && hi1 >= hi0),
                      "pool %s %dx%d: NaN planes [%zu, %zu] miss [%zu, %zu]", path, H, W, lo1, hi1, lo0, hi0);
        for (int pl = 0; pl < planes; pl++) {   /* a NaN plane's outputs are the caller's to redo */
                if (hi1 != (size_t)-1 && (size_t)pl >= lo1 && (size_t)pl <= hi1) continue;
                size_t o = (size_t)pl * OH * OW;
                ck_assert_msg(diff_bits(y0 + o, y1 + o, (size_t)OH * OW) == 0 && !memcmp(c0 + o, c1 + o, (size_t)OH * OW),
                              "pool %s %dx%d rows [%zu, %zu) plane %d", path, H, W, g0, g1, pl);
        }
        for (size_t i = 0; i < ny; i++) c0[i] &= 3;     /* codes outside the rows: still valid ones */
        memcpy(c1, c0, ny);
        memset(dx0, 0x55, nx * sizeof *dx0);
        memcpy(dx1, dx0, nx * sizeof *dx1);
        g->max2x2_bwd(dy, c0, dx0, H, W, OH, OW, g0, g1);
        k->max2x2_bwd(dy, c1, dx1, H, W, OH, OW, g0, g1);
        ck_assert_msg(diff_bits(dx0, dx1, nx) == 0, "pool bwd %s %dx%d rows [%zu, %zu)", path, H, W, g0, g1);
        free(x); free(y0); free(y1); free(dx0); free(dx1); free(dy); free(c0); free(c1);
}

/* 2x2 stride-2 max pooling: outputs, codes and the NaN planes over odd and even widths, rows
 * shorter and longer than a vector (lenet's 10x10 and cnn-bn's 7x7 planes among them), all rows
 * or all but the first and last, ties and a NaN */
START_TEST(pool_same)
{
        static const int shapes[][2] = { { 2, 2 }, { 4, 6 }, { 5, 7 }, { 6, 3 }, { 8, 34 }, { 3, 33 }, { 10, 17 }, { 2, 64 },
                                         { 7, 7 }, { 10, 10 }, { 4, 2 }, { 3, 5 }, { 6, 9 }, { 14, 14 }, { 4, 20 }, { 9, 23 } };
        for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                const dt_pool_kern *k = variant(&dt_pool_kfam, (dt_isa)p);
                if (!k) continue;
                for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
                        for (int nan = 0; nan < 2; nan++) {
                                const size_t rows = 5 * (size_t)(shapes[s][0] / 2);
                                pool_case(k, dt_isa_name((dt_isa)p), shapes[s][0], shapes[s][1], nan, 0, rows);
                                pool_case(k, dt_isa_name((dt_isa)p), shapes[s][0], shapes[s][1], nan, 1, rows - 1);
                        }
                /* global average pooling: the vector sums against the serial loop */
                if (k->gap16)
                        for (size_t HW = 1; HW <= 50; HW += 7) {
                                const size_t planes = 37;
                                float *x = malloc(planes * HW * sizeof *x), y0[37], y1[37];
                                fill(x, planes * HW);
                                const float inv = 1.0f / (float)HW;
                                for (size_t pl = 0; pl < planes; pl++) {
                                        float s = 0;
                                        for (size_t q = 0; q < HW; q++) s += x[pl * HW + q];
                                        y0[pl] = s * inv;
                                }
                                memcpy(y1, y0, sizeof y1);
                                size_t left = k->gap16(x, y1, 3, planes, HW, inv);
                                ck_assert_uint_eq(left, 3 + 32);
                                ck_assert_msg(diff_bits(y0, y1, planes) == 0, "gap %s HW %zu", dt_isa_name((dt_isa)p), HW);
                                free(x);
                        }
        }
}
END_TEST

/* im2col, col2im and row_sum over strides, paddings, dilations, rows shorter and longer than a
 * vector ('valid' narrow rows, 'same' spans, wide rows), against the generic ones and against the
 * row-by-row forms */
START_TEST(conv_rows_same)
{
        static const dt_im2col_geo geos[] = {
                /* C, H, W, OH, OW, P, kh, kw, sh, sw, pt, pl, dh, dw */
                { 2, 7, 7, 5, 5, 25, 3, 3, 1, 1, 0, 0, 1, 1 },          /* valid, narrow */
                { 3, 14, 14, 10, 10, 100, 5, 5, 1, 1, 0, 0, 1, 1 },     /* lenet's second */
                { 2, 9, 21, 9, 21, 189, 3, 3, 1, 1, 1, 1, 1, 1 },       /* same, wide rows */
                { 1, 6, 6, 6, 6, 36, 2, 3, 1, 1, 1, 2, 3, 2 },          /* same with dilation */
                { 2, 7, 9, 3, 4, 12, 3, 3, 2, 2, 0, 0, 1, 1 },          /* stride 2 */
                { 2, 5, 37, 5, 37, 185, 3, 5, 1, 1, 1, 2, 1, 1 },       /* same, 37 wide */
                { 1, 4, 19, 2, 17, 34, 3, 3, 1, 1, 0, 0, 1, 1 },        /* valid, 17 wide */
                { 2, 6, 5, 4, 3, 12, 3, 3, 1, 2, 0, 1, 1, 1 },          /* column stride 2 */
        };
        const dt_conv_kern *g = dt_conv_kfam.v[DT_ISA_GENERIC];
        for (int p = DT_ISA_GENERIC; p < DT_ISA_N; p++) {
                const dt_conv_kern *k = variant(&dt_conv_kfam, (dt_isa)p);
                if (!k) continue;
                for (size_t s = 0; s < sizeof geos / sizeof *geos; s++) {
                        const dt_im2col_geo *q = &geos[s];
                        const int nb = 3;
                        const size_t nx = (size_t)nb * q->C * q->H * q->W, nc = (size_t)q->C * q->kh * q->kw * nb * q->P;
                        float *x = malloc(nx * sizeof *x), *c0 = malloc(nc * sizeof *c0), *c1 = malloc(nc * sizeof *c1);
                        float *d0 = malloc(nx * sizeof *d0), *d1 = malloc(nx * sizeof *d1);
                        fill(x, nx);
                        x[1] = -0.0f;
                        dt_conv_plain_rows = 1;         /* the reference: generic, row by row */
                        g->im2col(q, x, nb, c0);
                        g->col2im(q, c0, nb, d0);
                        dt_conv_plain_rows = 0;
                        k->im2col(q, x, nb, c1);
                        ck_assert_msg(diff_bits(c0, c1, nc) == 0, "im2col %s geometry %zu", dt_isa_name((dt_isa)p), s);
                        fill(c1, nc);
                        memcpy(c0, c1, nc * sizeof *c0);
                        dt_conv_plain_rows = 1;
                        g->col2im(q, c0, nb, d0);
                        dt_conv_plain_rows = 0;
                        fill(d1, nx);   /* col2im overwrites dx */
                        k->col2im(q, c1, nb, d1);
                        ck_assert_msg(diff_bits(d0, d1, nx) == 0, "col2im %s geometry %zu", dt_isa_name((dt_isa)p), s);
                        free(x); free(c0); free(c1); free(d0); free(d1);
                }
                float r[300];
                fill(r, 300);
                for (int P = 0; P <= 300; P += 13)
                        ck_assert_msg(g->row_sum(r, P) == k->row_sum(r, P), "row_sum %s P %d", dt_isa_name((dt_isa)p), P);
        }
}
END_TEST

/* The step GEMM on each path that has it (AVX2, AVX-512) against the plain fmaf loop it promises,
 * bit for bit: one FMA chain per element in k order from C, so the two paths agree with each other
 * too. Row tails of both kernels' 6-row tiles, panels of 1..4 (AVX-512) and K across the 256
 * blocks; B packed as it lies and from its transpose. */
START_TEST(stepgemm_same)
{
        static const int dims[][3] = { { 1, 16, 1 }, { 7, 48, 33 }, { 13, 80, 300 }, { 6, 64, 257 }, { 64, 512, 128 },
                                       { 11, 128, 512 } };
        for (dt_isa isa = DT_ISA_AVX2; isa <= DT_ISA_AVX512; isa++) {
                if (!variant(&dt_stepgemm_kfam, isa)) {
                        printf("test_dispatch: stepgemm: no %s here, skipped\n", dt_isa_name(isa));
                        continue;
                }
                dt_cpu_force(isa);
                for (size_t d = 0; d < sizeof dims / sizeof *dims; d++) {
                        const int M = dims[d][0], N = dims[d][1], K = dims[d][2], lda = K + 3, ldb = N + 16, ldc = N + 5;
                        float *A = malloc((size_t)M * lda * sizeof *A), *B = malloc((size_t)K * ldb * sizeof *B);
                        float *C0 = malloc((size_t)M * ldc * sizeof *C0), *C1 = malloc((size_t)M * ldc * sizeof *C1);
                        float *Bt = malloc((size_t)N * K * sizeof *Bt), *P = malloc((size_t)N * K * sizeof *P);
                        fill(A, (size_t)M * lda); fill(B, (size_t)K * ldb); fill(C0, (size_t)M * ldc);
                        memcpy(C1, C0, (size_t)M * ldc * sizeof *C1);
                        for (int m = 0; m < M; m++)
                                for (int n = 0; n < N; n++) {
                                        float s = C0[(size_t)m * ldc + n];
                                        for (int kk = 0; kk < K; kk++) s = fmaf(A[(size_t)m * lda + kk], B[(size_t)kk * ldb + n], s);
                                        C0[(size_t)m * ldc + n] = s;
                                }
                        for (int n = 0; n < N; n++)
                                for (int kk = 0; kk < K; kk++) Bt[(size_t)n * K + kk] = B[(size_t)kk * ldb + n];
                        ck_assert(dt_stepgemm_ok(N));
                        for (int tr = 0; tr < 2; tr++) {
                                float *C = malloc((size_t)M * ldc * sizeof *C);
                                memcpy(C, C1, (size_t)M * ldc * sizeof *C);
                                if (tr) dt_stepgemm_pack(N, K, Bt, K, 1, P);
                                else dt_stepgemm_pack(N, K, B, ldb, 0, P);
                                dt_stepgemm(M, N, K, A, lda, P, C, ldc);
                                ck_assert_msg(diff_bits(C0, C, (size_t)M * ldc) == 0, "stepgemm %s %dx%dx%d trans %d",
                                              dt_isa_name(isa), M, N, K, tr);
                                free(C);
                        }
                        free(A); free(B); free(C0); free(C1); free(Bt); free(P);
                }
        }
        dt_cpu_force(dt_cpu_best());
}
END_TEST

/* The cells: AVX2 and AVX-512 bit for bit (both contract to FMA); generic (no FMA) within
 * 4e-6 absolute + 4e-6 relative, a few float roundings of values of order 1 */
#define CELL_TOL(a, b) (fabsf((a) - (b)) <= 4e-6f + 4e-6f * fabsf(a))
static void cell_case(const dt_cell_kern *k, int B, int H, float *out, size_t *n)
{
        uint64_t save = rs;
        rs = 0x1234567ull * (uint64_t)(B * 131 + H);
        size_t o = 0;
        float *gt = malloc((size_t)B * 4 * H * sizeof *gt), *bs = malloc(4 * (size_t)H * sizeof *bs);
        float *cp = malloc((size_t)B * H * sizeof *cp), *c = malloc((size_t)B * H * sizeof *c);
        float *tc = malloc((size_t)B * H * sizeof *tc), *h = malloc((size_t)B * H * sizeof *h);
        float *dh = malloc((size_t)B * H * sizeof *dh), *dc = malloc((size_t)B * H * sizeof *dc);
        float *db = calloc(4 * (size_t)H, sizeof *db);
        fill(gt, (size_t)B * 4 * H); fill(bs, 4 * (size_t)H); fill(cp, (size_t)B * H);
        for (size_t i = 0; i < (size_t)B * 4 * H; i++) gt[i] *= 6;    /* into the saturating ranges too */
        fill(dh, (size_t)B * H); fill(dc, (size_t)B * H);
        k->lstm_fwd(B, H, gt, bs, cp, c, tc, h);
        memcpy(out + o, gt, (size_t)B * 4 * H * sizeof *out); o += (size_t)B * 4 * H;
        memcpy(out + o, c, (size_t)B * H * sizeof *out); o += (size_t)B * H;
        memcpy(out + o, h, (size_t)B * H * sizeof *out); o += (size_t)B * H;
        k->lstm_bwd(B, H, gt, cp, tc, dh, dc, db);
        memcpy(out + o, gt, (size_t)B * 4 * H * sizeof *out); o += (size_t)B * 4 * H;
        memcpy(out + o, dc, (size_t)B * H * sizeof *out); o += (size_t)B * H;
        memcpy(out + o, db, 4 * (size_t)H * sizeof *out); o += 4 * (size_t)H;
        /* GRU: at (B,3H), gh (B,3H) */
        float *at = malloc((size_t)B * 3 * H * sizeof *at), *gh = malloc((size_t)B * 3 * H * sizeof *gh);
        float *hn = malloc((size_t)B * H * sizeof *hn), *dgh = malloc((size_t)B * 3 * H * sizeof *dgh);
        float *dbi = calloc(3 * (size_t)H, sizeof *dbi), *dbh = calloc(3 * (size_t)H, sizeof *dbh);
        fill(at, (size_t)B * 3 * H); fill(gh, (size_t)B * 3 * H);
        k->gru_fwd(B, H, at, gh, bs, bs + H, cp, hn, h);
        memcpy(out + o, at, (size_t)B * 3 * H * sizeof *out); o += (size_t)B * 3 * H;
        memcpy(out + o, h, (size_t)B * H * sizeof *out); o += (size_t)B * H;
        k->gru_bwd(B, H, at, hn, cp, dh, dgh, dc, dbi, dbh);
        memcpy(out + o, at, (size_t)B * 3 * H * sizeof *out); o += (size_t)B * 3 * H;
        memcpy(out + o, dgh, (size_t)B * 3 * H * sizeof *out); o += (size_t)B * 3 * H;
        memcpy(out + o, dc, (size_t)B * H * sizeof *out); o += (size_t)B * H;
        memcpy(out + o, dbi, 3 * (size_t)H * sizeof *out); o += 3 * (size_t)H;
        memcpy(out + o, dbh, 3 * (size_t)H * sizeof *out); o += 3 * (size_t)H;
        /* RNN tanh over B H + 3 floats, into saturation too: the padded tail at every length mod 16 */
        float *x = malloc(((size_t)B * H + 3) * sizeof *x);
        fill(x, (size_t)B * H + 3);
        for (size_t i = 0; i < (size_t)B * H + 3; i++) x[i] *= 12;
        k->rnn_tanh((size_t)B * H + 3, x);
        memcpy(out + o, x, ((size_t)B * H + 3) * sizeof *out); o += (size_t)B * H + 3;
        free(x);
        *n = o;
        free(gt); free(bs); free(cp); free(c); free(tc); free(h); free(dh); free(dc); free(db);
        free(at); free(gh); free(hn); free(dgh); free(dbi); free(dbh);
        rs = save;
}

START_TEST(cells_same)
{
        static const int cases[][2] = { { 1, 1 }, { 3, 16 }, { 2, 37 }, { 5, 64 }, { 4, 15 } };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const int B = cases[c][0], H = cases[c][1];
                size_t cap = (size_t)B * H * 40 + 40 * (size_t)H + 3, n0 = 0, n = 0;
                float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got), *fma = NULL;
                cell_case(dt_cell_kfam.v[DT_ISA_GENERIC], B, H, ref, &n0);
                for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                        const dt_cell_kern *k = variant(&dt_cell_kfam, (dt_isa)p);
                        if (!k) continue;
                        cell_case(k, B, H, got, &n);
                        ck_assert_uint_eq(n, n0);
                        for (size_t i = 0; i < n; i++)
                                ck_assert_msg(CELL_TOL(ref[i], got[i]), "cells %s B %d H %d [%zu]: %.9g vs generic %.9g",
                                              dt_isa_name((dt_isa)p), B, H, i, got[i], ref[i]);
                        if (!fma) {
                                fma = malloc(cap * sizeof *fma);
                                memcpy(fma, got, n * sizeof *fma);
                        } else {
                                ck_assert_msg(diff_bits(fma, got, n) == 0, "cells: %s differs from avx2, B %d H %d",
                                              dt_isa_name((dt_isa)p), B, H);
                        }
                }
                free(ref); free(got); free(fma);
        }
}
END_TEST

/* The RNN's tanh: an element's value is the same in a call of any length at any offset (the
 * padded tail), on every path, and within 3e-7 of libm's tanhf, which it replaced */
START_TEST(rnn_tanh_anywhere)
{
        enum { N = 77 };
        float x[N], y[N];
        fill(x, N);
        for (int i = 0; i < N; i++) x[i] *= 1.0f + (float)(i % 9);
        for (int p = DT_ISA_GENERIC; p < DT_ISA_N; p++) {
                const dt_cell_kern *k = variant(&dt_cell_kfam, (dt_isa)p);
                if (!k) continue;
                memcpy(y, x, sizeof y);
                k->rnn_tanh(N, y);
                for (int i = 0; i < N; i++) {
                        float one = x[i];
                        k->rnn_tanh(1, &one);
                        ck_assert_msg(diff_bits(&one, &y[i], 1) == 0, "rnn_tanh %s [%d]", dt_isa_name((dt_isa)p), i);
                        ck_assert_msg(fabsf(y[i] - tanhf(x[i])) <= 3e-7f, "rnn_tanh %s [%d]: %.9g vs tanhf %.9g",
                                      dt_isa_name((dt_isa)p), i, y[i], tanhf(x[i]));
                }
        }
}
END_TEST

/* batchnorm through the layer (its kernels need the layer's job): every path's forward output,
 * input gradient and parameter gradients against the generic path's, (C,H,W) with odd planes */
static void bn_run(const char *input, const char *layer, int B, dt_isa p, float *out, size_t *n)
{
        char path[64], items[256];
        snprintf(items, sizeof items, "  - %s", layer);
        ck_assert_int_eq(dt_test_spec_file(path, sizeof path, input, items, NULL), 0);
        dt_model_spec s;
        dt_graph g;
        dt_diag d = { 0 };
        ck_assert_int_eq(dt_cpu_force(p), 0);
        int rc = dt_model_spec_load(&s, path, &d);
        if (rc == 0) rc = dt_graph_build(&g, &s, &d);
        unlink(path);
        ck_assert(rc == 0 && d.n == 0);
        dt_backend *be = dt_backend_cpu_new(1);
        ck_assert_int_eq(dt_graph_alloc(&g, be, B), 0);
        dt_graph_init_params(&g, 1);
        dt_layer *l = &g.layers[0];
        size_t nx = (size_t)B * dt_shape_size(&l->in);
        uint64_t save = rs;
        rs = 0xC0FFEEull;
        float *x = malloc(nx * sizeof *x), *dy = malloc(nx * sizeof *dy);
        fill(x, nx); fill(dy, nx);
        for (size_t i = 0; i < g.nparams; i++) g.params[i] = 1.0f + 0.25f * rnd();
        rs = save;
        dt_fwd_ctx c = { .training = 1 };
        memcpy(g.act[0], x, nx * sizeof *x);
        l->ops->forward(l, &c, g.act[0], g.act[1], B);
        memset(g.grads, 0, g.nparams * sizeof *g.grads);
        float *dx = out + nx;
        l->ops->backward(l, &c, g.act[0], g.act[1], dy, dx, B);
        memcpy(out, g.act[1], nx * sizeof *out);
        memcpy(out + 2 * nx, g.grads, g.nparams * sizeof *out);
        memcpy(out + 2 * nx + g.nparams, g.buffers, g.nbuffers * sizeof *out);     /* running statistics */
        *n = 2 * nx + g.nparams + g.nbuffers;
        free(x); free(dy);
        dt_graph_free(&g);
        dt_backend_free(be);
        dt_model_spec_free(&s);
        dt_cpu_force(dt_cpu_best());
}

/* every elementwise kernel and optimizer of each path against the generic one, tails included */
START_TEST(ew_same)
{
        const size_t n = 1031;
        const int rows = 7, cols = 147;
        float *x = dt_falloc(n), *y = dt_falloc(n), *dy = dt_falloc(n), *o0 = dt_falloc(n), *o1 = dt_falloc(n);
        float *m0 = dt_falloc(n), *m1 = dt_falloc(n), *v0 = dt_falloc(n), *v1 = dt_falloc(n);
        fill(x, n); fill(y, n); fill(dy, n);
        for (size_t i = 0; i < n; i++) y[i] = 0.5f + 0.5f * y[i];     /* an activation's output */
        const dt_ew_kern *g = dt_ew_kfam.v[DT_ISA_GENERIC];
        int ran = 0;
        for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                const dt_ew_kern *k = variant(&dt_ew_kfam, (dt_isa)p);
                if (!k) continue;
                ran++;
                for (int a = 0; a < DT_ACT_COUNT; a++) {
                        g->act_fwd((dt_act)a, 0.1f, x, o0, n); k->act_fwd((dt_act)a, 0.1f, x, o1, n);
                        ck_assert_msg(!diff_bits(o0, o1, n), "%s act_fwd %d", dt_isa_name((dt_isa)p), a);
                        g->act_bwd((dt_act)a, 0.1f, x, y, dy, o0, n); k->act_bwd((dt_act)a, 0.1f, x, y, dy, o1, n);
                        ck_assert_msg(!diff_bits(o0, o1, n), "%s act_bwd %d", dt_isa_name((dt_isa)p), a);
                }
                memcpy(o0, x, n * 4); memcpy(o1, x, n * 4);
                g->bias_add(o0, dy, rows, cols); k->bias_add(o1, dy, rows, cols);
                g->bias_grad(o0, y, rows, cols, 3, cols - 2); k->bias_grad(o1, y, rows, cols, 3, cols - 2);
                g->axpy(n, 0.3f, y, o0); k->axpy(n, 0.3f, y, o1);
                g->scale(n, 1.7f, o0); k->scale(n, 1.7f, o1);
                g->mul(n, o0, y, o0); k->mul(n, o1, y, o1);
                g->add(n, o0, dy, o0); k->add(n, o1, dy, o1);
                ck_assert_msg(!diff_bits(o0, o1, n), "%s bias/axpy/scale/mul/add", dt_isa_name((dt_isa)p));
                ck_assert_msg(g->sumsq(x, n) == k->sumsq(x, n), "%s sumsq", dt_isa_name((dt_isa)p));
                g->dropout_mask(o0, 0, 7, 147, 12345, 99, 0.3f); k->dropout_mask(o1, 0, 7, 147, 12345, 99, 0.3f);
                ck_assert_msg(!diff_bits(o0, o1, n), "%s dropout_mask", dt_isa_name((dt_isa)p));
                for (int kind = 0; kind < DT_OPT_COUNT; kind++) {
                        dt_optim_hp hp = { .kind = (dt_opt_kind)kind, .weight_decay = 0.01f, .momentum = 0.9f,
                                           .dampening = 0.1f, .alpha = 0.99f, .eps = 1e-8f, .beta1 = 0.9f,
                                           .beta2 = 0.999f };
                        memcpy(o0, x, n * 4); memcpy(o1, x, n * 4);
                        memset(m0, 0, n * 4); memset(m1, 0, n * 4); memset(v0, 0, n * 4); memset(v1, 0, n * 4);
                        for (long t = 1; t <= 3; t++) {
                                g->optim(&hp, 0.01f, t, o0, dy, m0, v0, n);
                                k->optim(&hp, 0.01f, t, o1, dy, m1, v1, n);
                        }
                        ck_assert_msg(!diff_bits(o0, o1, n) && !diff_bits(m0, m1, n) && !diff_bits(v0, v1, n),
                                      "%s optimizer %d", dt_isa_name((dt_isa)p), kind);
                }
        }
        if (!ran) fprintf(stderr, "ew_same: this CPU runs only the generic path\n");
        free(x); free(y); free(dy); free(o0); free(o1); free(m0); free(m1); free(v0); free(v1);
}
END_TEST

START_TEST(bn_same)
{
        static const char *const cases[][2] = {
                { "[3, 7, 7]", "{type: batchnorm}" }, { "[5, 3, 11]", "{type: batchnorm, activation: relu}" },
                { "[2, 17, 17]", "{type: batchnorm, activation: relu, affine: false}" }, { "[4, 1, 1]", "{type: batchnorm}" },
                { "[20, 2, 9]", "{type: batchnorm, activation: relu}" },
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const int B = 5;
                size_t cap = 4 * (size_t)B * 20 * 17 * 17 + 1024, n0 = 0, n = 0;
                float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
                bn_run(cases[c][0], cases[c][1], B, DT_ISA_GENERIC, ref, &n0);
                for (int p = DT_ISA_AVX2; p <= (int)dt_cpu_best(); p++) {
                        bn_run(cases[c][0], cases[c][1], B, (dt_isa)p, got, &n);
                        ck_assert_uint_eq(n, n0);
                        ck_assert_msg(diff_bits(ref, got, n) == 0, "batchnorm %s %s on %s: %ld floats differ", cases[c][0],
                                      cases[c][1], dt_isa_name((dt_isa)p), diff_bits(ref, got, n));
                }
                free(ref); free(got);
        }
}
END_TEST

/* ---- the direct convolution: every path against the fmaf chains it promises ---- */

/* x (C, H, W) at frame position (r - pt, s - pl), 0 outside */
static float at(const float *x, int H, int W, int c, int r, int s)
{
        return r < 0 || r >= H || s < 0 || s >= W ? 0.0f : x[((size_t)c * H + r) * W + s];
}

/* The promised sums, one sample: z by one fmaf chain per output over the taps (c, i, j) in order,
 * then + bias; dx likewise over (f, i', j') with W flipped; dw by 16 lanes of fmaf chains (lane l:
 * the columns ow = l mod 16, rows in order) added pairwise into dw. fused 0: the same without FMA. */
static void convd_ref(const dt_convd_geo *g, const float *x, const float *w, const float *bias, const float *dz,
                      float *z, float *dx, float *dw, int fused)
{
        const int K = g->C * g->kh * g->kw;
        for (int f = 0; f < g->F; f++)
                for (int oh = 0; oh < g->OH; oh++)
                        for (int ow = 0; ow < g->OW; ow++) {
                                float a = 0;
                                for (int k = 0; k < K; k++) {
                                        int c = k / (g->kh * g->kw), i = k / g->kw % g->kh, j = k % g->kw;
                                        float v = at(x, g->H, g->W, c, oh + i * g->dh - g->pt, ow + j * g->dw - g->pl);
                                        a = fused ? fmaf(w[(size_t)f * K + k], v, a) : a + w[(size_t)f * K + k] * v;
                                }
                                z[((size_t)f * g->OH + oh) * g->OW + ow] = bias ? a + bias[f] : a;
                        }
        const int pt2 = g->dh * (g->kh - 1) - g->pt, pl2 = g->dw * (g->kw - 1) - g->pl;
        for (int c = 0; c < g->C; c++)
                for (int ih = 0; ih < g->H; ih++)
                        for (int iw = 0; iw < g->W; iw++) {
                                float a = 0;
                                for (int f = 0; f < g->F; f++)
                                        for (int i = 0; i < g->kh; i++)
                                                for (int j = 0; j < g->kw; j++) {
                                                        float wv = w[(((size_t)f * g->C + c) * g->kh + g->kh - 1 - i) * g->kw + g->kw - 1 - j];
                                                        float v = at(dz, g->OH, g->OW, f, ih + i * g->dh - pt2, iw + j * g->dw - pl2);
                                                        a = fused ? fmaf(wv, v, a) : a + wv * v;
                                                }
                                dx[((size_t)c * g->H + ih) * g->W + iw] = a;
                        }
        for (int f = 0; f < g->F; f++)
                for (int k = 0; k < K; k++) {
                        int c = k / (g->kh * g->kw), i = k / g->kw % g->kh, j = k % g->kw;
                        float l[16] = { 0 };
                        for (int oh = 0; oh < g->OH; oh++)
                                for (int ow = 0; ow < g->OW; ow++) {
                                        float d = dz[((size_t)f * g->OH + oh) * g->OW + ow];
                                        float v = at(x, g->H, g->W, c, oh + i * g->dh - g->pt, ow + j * g->dw - g->pl);
                                        l[ow % 16] = fused ? fmaf(d, v, l[ow % 16]) : l[ow % 16] + d * v;
                                }
                        for (int h = 8; h >= 1; h /= 2)
                                for (int q = 0; q < h; q++) l[q] += l[q + h];
                        dw[(size_t)f * K + k] += l[0];
                }
}

/* one sample through the drivers on path p: z, dx, dw (dw starting from dw0) */
static void convd_run(const dt_convd_geo *g, dt_isa p, const float *x, const float *w, const float *bias,
                      const float *dz, float *z, float *dx, float *dw)
{
        ck_assert_int_eq(dt_cpu_force(p), 0);
        const size_t ns = dt_convd_scratch(g);
        float *scr = malloc((ns + 64) * sizeof *scr);
        for (size_t i = 0; i < ns + 64; i++) scr[i] = NAN;     /* no result may read stale scratch */
        dt_convd_pack(g, w, 0, scr);
        dt_convd_forward(g, x, bias, 1, z, scr);
        dt_convd_wgrad_start(g, scr);
        dt_convd_wgrad_add(g, x, dz, 1, scr);
        dt_convd_pack(g, w, 1, scr);
        dt_convd_backward_data(g, dz, 1, dx, scr);
        dt_convd_wgrad_finish(g, dw, scr);
        for (size_t i = ns; i < ns + 64; i++) ck_assert_msg(isnan(scr[i]), "scratch overrun at %zu of %zu", i, ns);
        free(scr);
        dt_cpu_force(dt_cpu_best());
}

/* AVX2 and AVX-512 give the fmaf chains bit for bit (so each other's bits), generic the same chains
 * without FMA bit for bit (so the others' to rounding: a product rounded before each add). Vector tails
 * and blocks of filters, taps and rows with spare members, padding wider than the kernel's reach
 * (dx's frame then crops), asymmetric padding, dilation, 1-3 channels. */
START_TEST(convd_same)
{
        static const dt_convd_geo geos[] = {
                /* C, H, W, F, OH, OW, kh, kw, pt, pl, dh, dw */
                { 1, 28, 28, 32, 28, 28, 3, 3, 1, 1, 1, 1 },    /* cnn-bn's conv1 */
                { 1, 28, 28, 6, 28, 28, 5, 5, 2, 2, 1, 1 },     /* lenet's */
                { 1, 9, 37, 13, 9, 37, 3, 3, 1, 1, 1, 1 },      /* 37 wide, 13 filters */
                { 2, 7, 5, 3, 5, 3, 3, 3, 0, 0, 1, 1 },         /* valid */
                { 3, 6, 19, 9, 8, 21, 3, 3, 2, 2, 1, 1 },       /* padding past the reach: dx crops */
                { 1, 11, 9, 4, 11, 9, 2, 3, 3, 2, 3, 2 },       /* dilation, 'same' */
                { 2, 5, 17, 1, 6, 16, 2, 4, 1, 1, 1, 1 },       /* one filter, asymmetric padding */
        };
        for (size_t s = 0; s < sizeof geos / sizeof *geos; s++) {
                const dt_convd_geo *g = &geos[s];
                const size_t nx = (size_t)g->C * g->H * g->W, nz = (size_t)g->F * g->OH * g->OW;
                const size_t nw = (size_t)g->F * g->C * g->kh * g->kw;
                float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *b = malloc(g->F * sizeof *b);
                float *dz = malloc(nz * sizeof *dz), *z[2], *dx[2], *dw[2];
                fill(x, nx); fill(w, nw); fill(b, (size_t)g->F); fill(dz, nz);
                for (int r = 0; r < 2; r++) {
                        z[r] = malloc(nz * sizeof *z[r]); dx[r] = malloc(nx * sizeof *dx[r]); dw[r] = malloc(nw * sizeof *dw[r]);
                }
                for (int p = DT_ISA_GENERIC; p <= (int)dt_cpu_best(); p++) {
                        if (!variant(&dt_convd_kfam, (dt_isa)p)) continue;
                        for (size_t i = 0; i < nw; i++) dw[0][i] = dw[1][i] = 0.25f;     /* dw is added into */
                        convd_ref(g, x, w, s % 2 ? b : NULL, dz, z[0], dx[0], dw[0], p != DT_ISA_GENERIC);
                        convd_run(g, (dt_isa)p, x, w, s % 2 ? b : NULL, dz, z[1], dx[1], dw[1]);
                        const char *pn = dt_isa_name((dt_isa)p);
                        ck_assert_msg(diff_bits(z[0], z[1], nz) == 0, "direct fwd %s geometry %zu", pn, s);
                        ck_assert_msg(diff_bits(dx[0], dx[1], nx) == 0, "direct dx %s geometry %zu", pn, s);
                        ck_assert_msg(diff_bits(dw[0], dw[1], nw) == 0, "direct dw %s geometry %zu", pn, s);
                }
                free(x); free(w); free(b); free(dz);
                for (int r = 0; r < 2; r++) { free(z[r]); free(dx[r]); free(dw[r]); }
        }
}
END_TEST

/* one head through kernel table k: plain and blocked, forward and backward, into out (o, P, lse, dqkv twice) */
static void attn_run(const dt_attn_kern *k, const dt_attn_head *h, const float *dO, float *out, float *ws)
{
        const size_t T = (size_t)h->T, D = (size_t)h->D;
        float *o = out, *P = o + T * D, *lse = P + T * T, *d1 = lse + T, *d2 = d1 + 3 * T * D, *o2 = d2 + 3 * T * D;
        memset(d1, 0, 6 * T * D * sizeof *d1);
        k->plain_fwd(h, o, P, ws);
        k->plain_bwd(h, o, dO, P, d1, d1 + D, d1 + 2 * D, ws);
        k->blocked_fwd(h, o2, lse, ws);
        k->blocked_bwd(h, o2, dO, lse, d2, d2 + D, d2 + 2 * D, ws);
}

/* the attention kernels' loops on each path against the generic ones (the products through the one
 * attn_mm variant in force on both sides): causal or not, dropout or not, rows that leave vector tails */
START_TEST(attn_same)
{
        const int T = 70, D = 24, blk = 32;
        const size_t nq = (size_t)T * 3 * D, nout = (size_t)T * D * 8 + (size_t)T * T + T;
        dt_backend *be = dt_backend_cpu_new(1);
        float *qkv = dt_falloc(nq), *dO = dt_falloc((size_t)T * D), *o0 = dt_falloc(nout), *o1 = dt_falloc(nout);
        size_t wsn = dt_attn_plain_ws(T, D, blk) > dt_attn_blocked_ws(T, D, blk) ? dt_attn_plain_ws(T, D, blk)
                                                                                   : dt_attn_blocked_ws(T, D, blk);
        float *ws = dt_falloc(wsn);
        fill(qkv, nq); fill(dO, (size_t)T * D);
        const dt_attn_kern *g = dt_attn_kern_kfam.v[DT_ISA_GENERIC];
        int ran = 0;
        for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                const dt_attn_kern *k = variant(&dt_attn_kern_kfam, (dt_isa)p);
                if (!k) continue;
                ran++;
                for (int c = 0; c < 4; c++) {
                        dt_attn_head h = { .T = T, .D = D, .causal = c & 1, .block = blk, .scale = 1.0f / sqrtf((float)D),
                                           .p = c & 2 ? 0.25f : 0.0f, .key = 77, .pos = 3, .head = 1, .q = qkv,
                                           .k = qkv + D, .v = qkv + 2 * D, .ld = 3 * (size_t)D, .ldo = (size_t)D, .be = be };
                        attn_run(g, &h, dO, o0, ws);
                        attn_run(k, &h, dO, o1, ws);
                        ck_assert_msg(!diff_bits(o0, o1, nout), "%s attention, causal %d, dropout %d",
                                      dt_isa_name((dt_isa)p), c & 1, c >> 1);
                }
        }
        if (!ran) fprintf(stderr, "attn_same: only the generic path on this CPU\n");
        free(qkv); free(dO); free(o0); free(o1); free(ws);
        dt_backend_free(be);
}
END_TEST

/* layer normalisation's loops on each path against the generic ones: a width with a vector tail,
 * affine or not */
START_TEST(ln_same)
{
        const size_t F = 147, R = 5, n = F * R;
        float *x = dt_falloc(n), *dy = dt_falloc(n), *w = dt_falloc(2 * F), *o0 = dt_falloc(3 * n + 4 * R),
              *o1 = dt_falloc(3 * n + 4 * R), *ws = dt_falloc(2 * F);
        fill(x, n); fill(dy, n); fill(w, 2 * F);
        const dt_ln_kern *g = dt_ln_kfam.v[DT_ISA_GENERIC];
        for (int p = DT_ISA_AVX2; p < DT_ISA_N; p++) {
                const dt_ln_kern *k = variant(&dt_ln_kfam, (dt_isa)p);
                if (!k) continue;
                for (int affine = 0; affine < 2; affine++) {
                        const dt_ln_kern *ks[2] = { g, k };
                        float *os[2] = { o0, o1 };
                        for (int v = 0; v < 2; v++) {
                                float *y = os[v], *dx = y + n, *a = dx + n, *mean = a + n, *rstd = mean + R;
                                memset(y, 0, (3 * n + 4 * R) * sizeof *y);
                                ks[v]->fwd(x, y, mean, rstd, affine ? w : NULL, affine ? w + F : NULL, 1e-5f, F, 0, R);
                                ks[v]->bwd(x, dy, dx, mean, rstd, affine ? w : NULL, F, 1, R, ws);
                                ks[v]->params(x, dy, mean, rstd, F, R, 3, F - 5, a, a + F);
                        }
                        ck_assert_msg(!diff_bits(o0, o1, 3 * n + 4 * R), "%s layernorm, affine %d",
                                      dt_isa_name((dt_isa)p), affine);
                }
        }
        free(x); free(dy); free(w); free(o0); free(o1); free(ws);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dispatch");
        TCase *tc = tcase_create("paths");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, cpu_paths); tcase_add_test(tc, bytes_same); tcase_add_test(tc, pool_same);
        tcase_add_test(tc, conv_rows_same); tcase_add_test(tc, stepgemm_same); tcase_add_test(tc, cells_same);
        tcase_add_test(tc, rnn_tanh_anywhere);
        tcase_add_test(tc, bn_same); tcase_add_test(tc, ew_same); tcase_add_test(tc, convd_same);
        tcase_add_test(tc, attn_same); tcase_add_test(tc, ln_same);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}
