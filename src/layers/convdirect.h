/* layers/convdirect.h - the direct convolution for few input channels (conv.c): stride 1, one
 * group, no im2col and no GEMM; forward, dx and dW per CPU path (util/cpu.h). AVX2 and AVX-512 give
 * the same bits (one FMA per tap in the same order); generic the same sums without FMA. */
#ifndef DT_CONVDIRECT_H
#define DT_CONVDIRECT_H

#include <stddef.h>
#include "backend/backend.h"
#include "util/cpu.h"

/* One convolution: C input channels of H x W, F filters of KH x KW with dilation (DH, DW), top and
 * left padding PT, PL, outputs OH x OW (stride 1: OH = H + PT + PB - DH*(KH-1)) */
typedef struct dt_convd_geo {
        int C, H, W, F, OH, OW;
        int kh, kw, pt, pl, dh, dw;
} dt_convd_geo;

/* A path's kernels on one padded sample (convdirect.c's drivers pad, pack and loop the samples).
 * The padded frame xp is (Ci, Hp, Wp) with Hp = OH + DH*(KH-1), Wp = OW + DW*(KW-1); taps are
 * k = (c*KH + i)*KW + j, K = Ci*KH*KW of them. */
struct dt_convd_core {
        int co, Ci, OH, OW, kh, kw, dh, dw, Hp, Wp, K;
};
typedef struct dt_convd_kern {
        int fb, fbn;    /* filters per register block of fwd and fwd_few: wp holds ceil(co/fb) blocks of (K, fb) */
        /* z[f][oh][ow] = sum over taps k in order of wp[f][k] * xp[k's row oh, column ow] (+ bias[f]
         * after, where bias) */
        void (*fwd)(const struct dt_convd_core *g, const float *xp, const float *wp, const float *bias, float *z);
        /* the same for co <= fbn (dx of 1-3 channels) */
        void (*fwd_few)(const struct dt_convd_core *g, const float *xp, const float *wp, const float *bias, float *z);
        /* per filter f and tap k, 16 lanes: lane l adds dz[f][oh][ow] * xp[tap k at (oh, ow)] for
         * the ow = 16m + l of each row, rows in order; lacc is (co, K, 16) */
        void (*wgrad)(const struct dt_convd_core *g, const float *xp, const float *dz, float *lacc);
} dt_convd_kern;

extern const dt_kfam dt_convd_kfam;

/* Floats of per-thread scratch the calls below need: a frame, packed weights and the lane sums */
size_t dt_convd_scratch(const dt_convd_geo *g);
/* w (F, C, KH, KW) packed into scratch for dt_convd_forward (transposed 0) or, flipped and
 * transposed to (C, F, KH, KW), for dt_convd_backward_data (1); before a run of either */
void dt_convd_pack(const dt_convd_geo *g, const float *w, int transposed, float *scratch);
/* z = W * x (+ bias) for nb samples: x (nb, C, H, W), z (nb, F, OH, OW) */
void dt_convd_forward(const dt_convd_geo *g, const float *x, const float *bias, int nb, float *z, float *scratch);
/* dx = W^T * dz (overwritten): the forward on dz padded by DH*(KH-1) - PT (top) and DW*(KW-1) - PL
 * (left) with the transposed weights */
void dt_convd_backward_data(const dt_convd_geo *g, const float *dz, int nb, float *dx, float *scratch);
/* dw[f][c][i][j] += sum over samples of dz[b][f] x[b][c] shifted by tap (i, j): start zeroes 16 lane
 * sums per (f, tap), each add adds nb samples' rows and 16-column blocks into them, finish adds
 * them pairwise into dw. The lane sums live in scratch apart from what pack and the others use. */
void dt_convd_wgrad_start(const dt_convd_geo *g, float *scratch);
void dt_convd_wgrad_add(const dt_convd_geo *g, const float *x, const float *dz, int nb, float *scratch);
void dt_convd_wgrad_finish(const dt_convd_geo *g, float *dw, float *scratch);

/* A conv layer's direct path (conv.c) on one thread's samples [s0, s1) in chunks of `chunk`, each
 * chunk in cache from the kernel to f or f' and the bias gradient */
typedef struct dt_convd_run {
        const dt_convd_geo *g;
        dt_backend *be;
        dt_act act;
        float alpha;
        int chunk;
        float *scratch;         /* dt_convd_scratch(g) floats, this thread's */
} dt_convd_run;
/* z = W * x + b, y = f(z) (z may be y) */
void dt_convd_run_fwd(const dt_convd_run *r, const float *x, const float *w, const float *bias, float *z, float *y,
                      long s0, long s1);
/* The input half (in): dz = f'(z) dy over dy, and dx = W^T * dz unless dx is NULL; the weight half
 * (dw not NULL): dw and db (unless NULL) added into */
void dt_convd_run_bwd(const dt_convd_run *r, int in, const float *x, const float *w, const float *z, const float *y,
                      float *dz, float *dx, float *dw, float *db, long s0, long s1);

#endif
