/* layers/im2col_body.h - the row-by-row im2col and col2im, included by im2col.c once per CPU path
 * with V(name) naming that path's copies and its row_copy, row_zero and row_add; IM2COL_AVX512 adds
 * the forms that need masked and expand loads (im2col_narrow, col2im_gather). No include guard. */

/* One row of cols, (i, j) of one channel xp, when both strides are 1 and W == OW ('same'
 * padding): output rows oh and input rows ih = oh - PT + i*DH then have the same length, so the
 * valid part of every output row, [lo, hi), lies at the same distance from its source in one
 * contiguous span. That span is copied at once (full vectors instead of one short row at a time),
 * then the few border columns it filled with neighbouring values, [0, lo) and [hi, OW) of each
 * row, are zeroed, as are the rows whose input row lies in the padding. */
static void V(im2col_span)(const dt_im2col_geo *g, const float *restrict xp, int i, int off,
                        int lo, int hi, float *restrict row)
{
        const int OW = g->OW, di = i * g->dh - g->pt;   /* ih = oh + di */
        int oh0 = di < 0 ? -di : 0, oh1 = g->H - di < g->OH ? g->H - di : g->OH;
        if (oh1 < oh0) oh1 = oh0;
        V(row_zero)(row, oh0 * OW);
        V(row_zero)(row + (size_t)oh1 * OW, (g->OH - oh1) * OW);
        if (oh1 == oh0 || hi <= lo) {
                V(row_zero)(row + (size_t)oh0 * OW, (oh1 - oh0) * OW);
                return;
        }
        ptrdiff_t a = (ptrdiff_t)oh0 * OW + lo, e = (ptrdiff_t)(oh1 - 1) * OW + hi;
        V(row_copy)(row + a, xp + (a + (ptrdiff_t)di * OW + off), (int)(e - a));
        for (int oh = oh0; oh < oh1; oh++) {
                float *d = row + (size_t)oh * OW;
                for (int q = 0; q < lo; q++) d[q] = 0;
                for (int q = hi; q < OW; q++) d[q] = 0;
        }
}

/* cols[(c*KH + i)*KW + j][b*P + oh*OW + ow] = x[b][c][oh*SH - PT + i*DH][ow*SW - PL + j*DW]
 * (0 outside the image), for the nb samples of x.  cols is (C*KH*KW, nb*P). */
static void V(im2col)(const dt_im2col_geo *g, const float *restrict x, int nb,
                   float *restrict cols)
{
        const size_t N = (size_t)nb * g->P, HW = (size_t)g->H * g->W;
        const int W = g->W, OW = g->OW, sw = g->sw;
        const int span = sw == 1 && g->sh == 1 && W == OW && !dt_conv_plain_rows;
        const int narrow = sw == 1 && OW <= 16 && !dt_conv_plain_rows;
        (void)narrow;   /* AVX-512 only */
        for (int b = 0; b < nb; b++)
                for (int ch = 0; ch < g->C; ch++) {
                        const float *xp = x + ((size_t)b * g->C + ch) * HW;
                        for (int i = 0; i < g->kh; i++)
                                for (int j = 0; j < g->kw; j++) {
                                        float *row = cols + ((size_t)(ch * g->kh + i) * g->kw + j) * N + (size_t)b * g->P;
                                        int off = j * g->dw - g->pl, lo, hi;
                                        valid_range(off, sw, W, OW, &lo, &hi);
                                        if (span) {
                                                V(im2col_span)(g, xp, i, off, lo, hi, row);
                                                continue;
                                        }
#if IM2COL_AVX512
                                        if (narrow) {
                                                V(im2col_narrow)(g, xp, i, off, lo, hi, row);
                                                continue;
                                        }
#endif
                                        for (int oh = 0; oh < g->OH; oh++) {
                                                float *d = row + (size_t)oh * OW;
                                                int ih = oh * g->sh - g->pt + i * g->dh;
                                                if (ih < 0 || ih >= g->H) {
                                                        V(row_zero)(d, OW);
                                                        continue;
                                                }
                                                const float *s = xp + (size_t)ih * W;
                                                V(row_zero)(d, lo);
                                                if (sw == 1) {
                                                        V(row_copy)(d + lo, s + lo + off, hi - lo);
                                                } else {
                                                        for (int ow = lo; ow < hi; ow++) d[ow] = s[ow * sw + off];
                                                }
                                                V(row_zero)(d + hi, OW - hi);
                                        }
                                }
                }
}

/* The adjoint of im2col: dx[b][c][ih][iw] = sum of dcols[...] over every (i, j, oh, ow) that read it. */
static void V(col2im)(const dt_im2col_geo *g, const float *restrict cols, int nb,
                   float *restrict dx)
{
        const size_t N = (size_t)nb * g->P, HW = (size_t)g->H * g->W;
        const int W = g->W, OW = g->OW, sw = g->sw;
#if IM2COL_AVX512
        if (sw == 1 && g->sh == 1 && g->kw <= COL2IM_MAX_KW && !dt_conv_plain_rows) {
                V(col2im_gather)(g, cols, nb, dx);
                return;
        }
#endif
        memset(dx, 0, (size_t)nb * g->C * HW * sizeof *dx);
        for (int b = 0; b < nb; b++)
                for (int ch = 0; ch < g->C; ch++) {
                        float *xp = dx + ((size_t)b * g->C + ch) * HW;
                        for (int i = 0; i < g->kh; i++)
                                for (int j = 0; j < g->kw; j++) {
                                        const float *row = cols + ((size_t)(ch * g->kh + i) * g->kw + j) * N + (size_t)b * g->P;
                                        int off = j * g->dw - g->pl, lo, hi;
                                        valid_range(off, sw, W, OW, &lo, &hi);
                                        for (int oh = 0; oh < g->OH; oh++) {
                                                int ih = oh * g->sh - g->pt + i * g->dh;
                                                if (ih < 0 || ih >= g->H) continue;
                                                const float *d = row + (size_t)oh * OW;
                                                float *s = xp + (size_t)ih * W;
                                                if (sw == 1) {
                                                        V(row_add)(s + lo + off, d + lo, hi - lo);
                                                } else {
                                                        for (int ow = lo; ow < hi; ow++) s[ow * sw + off] += d[ow];
                                                }
                                        }
                                }
                }
}
