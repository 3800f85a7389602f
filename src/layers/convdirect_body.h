/* layers/convdirect_body.h - the direct convolution's vector kernels, included once per path by
 * convdirect.c with V(name), VT (the vector), VW (its lanes), NV (vectors per output block), FB (filters
 * per block), RB (rows per block of dx's few channels), FW and TG (filters and taps per weight-gradient block) and the V_* operations defined. */

#define BW (NV * VW)    /* output columns per block */
#define G16 (16 / VW)   /* vectors per 16 lanes */

/* Per block of fb filters, output row and BW columns: fb x NV accumulators in registers; per tap,
 * NV loads of the shifted input row and one broadcast weight per filter. Columns past OW are
 * computed from the next row (or the frame's slack) and never stored. */
static void V(fwd)(const struct dt_convd_core *g, const float *xp, const float *wp, const float *bias, float *z)
{
        const int K = g->K, fb = FB;
        for (int f0 = 0; f0 < g->co; f0 += fb) {
                const float *wb = wp + (size_t)(f0 / fb) * K * fb;
                const int nf = g->co - f0 < fb ? g->co - f0 : fb;
                for (int oh = 0; oh < g->OH; oh++)
                        for (int ow0 = 0; ow0 < g->OW; ow0 += BW) {
                                VT acc[FB][NV];
#pragma GCC unroll 16
                                for (int ff = 0; ff < fb; ff++)
#pragma GCC unroll 4
                                        for (int v = 0; v < NV; v++) acc[ff][v] = V_ZERO();
                                const float *wk = wb;
                                for (int c = 0; c < g->Ci; c++)
                                        for (int i = 0; i < g->kh; i++) {
                                                const float *r = xp + ((size_t)c * g->Hp + oh + i * g->dh) * g->Wp + ow0;
                                                for (int j = 0; j < g->kw; j++, wk += fb, r += g->dw) {
                                                        VT xv[NV];
#pragma GCC unroll 4
                                                        for (int v = 0; v < NV; v++) xv[v] = V_LOAD(r + v * VW);
#pragma GCC unroll 16
                                                        for (int ff = 0; ff < fb; ff++) {
                                                                VT wv = V_BCAST(wk + ff);
#pragma GCC unroll 4
                                                                for (int v = 0; v < NV; v++)
                                                                        acc[ff][v] = V_FMA(wv, xv[v], acc[ff][v]);
                                                        }
                                                }
                                        }
                                const int n = g->OW - ow0;
#pragma GCC unroll 16
                                for (int ff = 0; ff < fb; ff++) {
                                        if (ff >= nf) break;
                                        float *zr = z + ((size_t)(f0 + ff) * g->OH + oh) * g->OW + ow0;
#pragma GCC unroll 4
                                        for (int v = 0; v < NV; v++) {
                                                VT a = acc[ff][v];
                                                if (bias) a = V_ADD(a, V_BCAST(bias + f0 + ff));
                                                V_STOREN(zr + v * VW, a, n - v * VW);
                                        }
                                }
                        }
        }
}

/* dx's few output channels (the layer's inputs) against its many input ones (the filters): per
 * output channel, blocks of RB rows x BW columns, one broadcast weight per tap serving RB x NV
 * accumulators. Rows past OH repeat the last and are never stored. */
static void V(fwd_few)(const struct dt_convd_core *g, const float *xp, const float *wp, const float *bias, float *z)
{
        const int K = g->K, fb = FBN;
        for (int f = 0; f < g->co; f++) {
                const float *wf = wp + (size_t)(f / fb) * K * fb + f % fb;
                for (int oh0 = 0; oh0 < g->OH; oh0 += RB)
                        for (int ow0 = 0; ow0 < g->OW; ow0 += BW) {
                                VT acc[RB][NV];
                                size_t ro[RB];
#pragma GCC unroll 8
                                for (int rr = 0; rr < RB; rr++) {
                                        ro[rr] = (size_t)(oh0 + rr < g->OH ? oh0 + rr : g->OH - 1) * g->Wp + ow0;
#pragma GCC unroll 4
                                        for (int v = 0; v < NV; v++) acc[rr][v] = V_ZERO();
                                }
                                const float *wk = wf;
                                for (int c = 0; c < g->Ci; c++)
                                        for (int i = 0; i < g->kh; i++) {
                                                const float *r = xp + ((size_t)c * g->Hp + i * g->dh) * g->Wp;
                                                for (int j = 0; j < g->kw; j++, wk += fb, r += g->dw) {
                                                        VT wv = V_BCAST(wk);
#pragma GCC unroll 8
                                                        for (int rr = 0; rr < RB; rr++)
#pragma GCC unroll 4
                                                                for (int v = 0; v < NV; v++)
                                                                        acc[rr][v] = V_FMA(wv, V_LOAD(r + ro[rr] + v * VW), acc[rr][v]);
                                                }
                                        }
                                const int n = g->OW - ow0;
#pragma GCC unroll 8
                                for (int rr = 0; rr < RB; rr++) {
                                        if (oh0 + rr >= g->OH) break;
                                        float *zr = z + ((size_t)f * g->OH + oh0 + rr) * g->OW + ow0;
#pragma GCC unroll 4
                                        for (int v = 0; v < NV; v++) {
                                                VT a = acc[rr][v];
                                                if (bias) a = V_ADD(a, V_BCAST(bias + f));
                                                V_STOREN(zr + v * VW, a, n - v * VW);
                                        }
                                }
                        }
        }
}

/* Per block of FW filters and TG taps: FW x TG x 16 lane sums in registers over every row and
 * 16-column block of the sample (the row's tail masked: zeros from dz and x), kept in lacc between
 * samples. A block's spare taps and filters repeat its first ones and are never stored. */
static void V(wgrad)(const struct dt_convd_core *g, const float *xp, const float *dz, float *lacc)
{
        const int K = g->K, khw = g->kh * g->kw;
        const size_t P = (size_t)g->OH * g->OW;
        for (int f0 = 0; f0 < g->co; f0 += FW) {
                const int nf = g->co - f0 < FW ? g->co - f0 : FW;
                for (int k0 = 0; k0 < K; k0 += TG) {
                        const int nt = K - k0 < TG ? K - k0 : TG;
                        size_t off[TG];
                        const float *dzf[FW];
                        VT acc[FW][TG][G16];
#pragma GCC unroll 4
                        for (int e = 0; e < FW; e++) dzf[e] = dz + (size_t)(f0 + (e < nf ? e : 0)) * P;
#pragma GCC unroll 32
                        for (int t = 0; t < TG; t++) {
                                int k = k0 + (t < nt ? t : 0);
                                int c = k / khw, i = k % khw / g->kw, j = k % g->kw;
                                off[t] = ((size_t)c * g->Hp + (size_t)i * g->dh) * g->Wp + (size_t)j * g->dw;
#pragma GCC unroll 4
                                for (int e = 0; e < FW; e++)
#pragma GCC unroll 2
                                        for (int u = 0; u < G16; u++)
                                                acc[e][t][u] = t < nt && e < nf
                                                        ? V_LOAD(lacc + ((size_t)(f0 + e) * K + k0 + t) * 16 + u * VW) : V_ZERO();
                        }
                        for (int oh = 0; oh < g->OH; oh++) {
                                const size_t dro = (size_t)oh * g->OW;
                                const float *xr = xp + (size_t)oh * g->Wp;
                                int ow0 = 0;
                                for (; ow0 + 16 <= g->OW; ow0 += 16) {
                                        VT d[FW][G16];
#pragma GCC unroll 4
                                        for (int e = 0; e < FW; e++)
#pragma GCC unroll 2
                                                for (int u = 0; u < G16; u++) d[e][u] = V_LOAD(dzf[e] + dro + ow0 + u * VW);
#pragma GCC unroll 32
                                        for (int t = 0; t < TG; t++)
#pragma GCC unroll 2
                                                for (int u = 0; u < G16; u++) {
                                                        VT xv = V_LOAD(xr + off[t] + ow0 + u * VW);
#pragma GCC unroll 4
                                                        for (int e = 0; e < FW; e++) acc[e][t][u] = V_FMA(d[e][u], xv, acc[e][t][u]);
                                                }
                                }
                                if (ow0 < g->OW) {
                                        const int n = g->OW - ow0;
                                        VT d[FW][G16];
#pragma GCC unroll 4
                                        for (int e = 0; e < FW; e++)
#pragma GCC unroll 2
                                                for (int u = 0; u < G16; u++) d[e][u] = V_LOADN(dzf[e] + dro + ow0 + u * VW, n - u * VW);
#pragma GCC unroll 32
                                        for (int t = 0; t < TG; t++)
#pragma GCC unroll 2
                                                for (int u = 0; u < G16; u++) {
                                                        VT xv = V_LOADN(xr + off[t] + ow0 + u * VW, n - u * VW);
#pragma GCC unroll 4
                                                        for (int e = 0; e < FW; e++) acc[e][t][u] = V_FMA(d[e][u], xv, acc[e][t][u]);
                                                }
                                }
                        }
#pragma GCC unroll 4
                        for (int e = 0; e < FW; e++)
#pragma GCC unroll 32
                                for (int t = 0; t < TG; t++) {
                                        if (t >= nt || e >= nf) break;
#pragma GCC unroll 2
                                        for (int u = 0; u < G16; u++)
                                                V_STORE(lacc + ((size_t)(f0 + e) * K + k0 + t) * 16 + u * VW, acc[e][t][u]);
                                }
                }
        }
}

#undef BW
#undef G16
