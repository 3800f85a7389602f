/* layers/im2col.h - convolution's host row kernels (conv.c), one table per CPU path (util/cpu.h):
 * im2col, its adjoint col2im, and the bias gradient's row sum. Every path gives the same bits. */
#ifndef DT_IM2COL_H
#define DT_IM2COL_H

#include "util/cpu.h"

/* One convolution's geometry: C input channels of H x W, OH x OW = P outputs, a KH x KW kernel,
 * strides, top/left padding, dilations */
typedef struct dt_im2col_geo {
        int C, H, W, OH, OW, P;
        int kh, kw, sh, sw, pt, pl, dh, dw;
} dt_im2col_geo;

typedef struct dt_conv_kern {
        /* cols[(c*KH + i)*KW + j][b*P + oh*OW + ow] = x[b][c][oh*SH - PT + i*DH][ow*SW - PL + j*DW]
         * (0 outside the image), for the nb samples of x (nb, C, H, W); cols is (C*KH*KW, nb*P) */
        void (*im2col)(const dt_im2col_geo *g, const float *x, int nb, float *cols);
        /* the adjoint: dx[b][c][ih][iw] = sum of cols[...] over every (i, j, oh, ow) that read it,
         * added in (i, j) order; dx is overwritten */
        void (*col2im)(const dt_im2col_geo *g, const float *cols, int nb, float *dx);
        /* the sum of r[0..P) in 16 interleaved partial sums, added pairwise at the end */
        float (*row_sum)(const float *r, int P);
} dt_conv_kern;

extern const dt_kfam dt_conv_kfam;

/* Nonzero: im2col and col2im go row by row (the form every stride and path takes) also where the
 * span copy and the AVX-512 forms apply. The unit tests set it to check the forms bit for bit. */
extern int dt_conv_plain_rows;

static inline const dt_conv_kern *dt_conv_kern_get(void) { return (const dt_conv_kern *)dt_kfam_pick(&dt_conv_kfam); }

#endif
