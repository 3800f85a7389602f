/* layers/pool.c - 2-D pooling on (C,H,W) inputs with PyTorch's semantics (ceil_mode false):
 * maxpool (MaxPool2d: padding counts as -inf), avgpool (AvgPool2d, count_include_pad true: the
 * divisor is always KH*KW) and global_avgpool ((C,H,W) -> (C)). No parameters.
 * Output size: floor((H + 2*pad - k) / stride) + 1. Host loops for the CPU backend: 2x2 stride-2
 * max pooling in one pass each way (pool_kern.c, per CPU path; a byte per output saying which
 * cell won), the other windows through general loops that give the same bits; device backends run
 * their pool_plan/pool_fwd/pool_bwd ops instead. */
#include "layers/layer.h"
#include "layers/bnpool.h"
#include "layers/pool_kern.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pool_cfg {
        int kh, kw, sh, sw, ph, pw;
};

struct pool_priv {
        int32_t *arg;   /* maxpool: (B, C, OH, OW) index ih*W + iw of each maximum in its plane */
        uint8_t *code;  /* 2x2 stride-2 maxpool instead: (B, C, OH, OW) which cell of the window, 0..3 */
        dt_pool_desc dd;        /* device backends: the fused op's plan (dd.state set) */
};

/* Device backends (pool_plan set) run every pooling kind through their fused op; the host loops
 * below are the cpu backend's. */
static int fused_setup(dt_layer *l, int max_batch, dt_pool_mode mode, int kh, int kw, int sh, int sw, int ph, int pw)
{
        struct pool_priv *p = dt_calloc(1, sizeof *p);
        l->priv = p;
        p->dd = (dt_pool_desc){ .mode = mode, .C = l->in.d[0], .H = l->in.d[1], .W = l->in.d[2], .OH = l->out.n == 3 ? l->out.d[1] : 1,
                                .OW = l->out.n == 3 ? l->out.d[2] : 1, .KH = kh, .KW = kw, .SH = sh, .SW = sw, .PH = ph, .PW = pw };
        if (l->be->ops->pool_plan(l->be, &p->dd, max_batch) == 0) return 0;
        dt_error("layer '%s' (%s) cannot run on the %s backend", l->name, l->ops->name, l->be->ops->name);
        return -1;
}

static int fused(const dt_layer *l)
{
        const struct pool_priv *p = l->priv;
        return p && p->dd.state;
}

static int avgpool_setup(dt_layer *l, int max_batch)
{
        const struct pool_cfg *c = l->cfg;
        if (!l->be->ops->pool_plan) return 0;
        return fused_setup(l, max_batch, DT_POOL_AVG, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw);
}

/* global average pool = average pooling with the whole plane as its window */
static int gap_setup(dt_layer *l, int max_batch)
{
        if (!l->be->ops->pool_plan) return 0;
        return fused_setup(l, max_batch, DT_POOL_AVG, l->in.d[1], l->in.d[2], l->in.d[1], l->in.d[2], 0, 0);
}

static int pool_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct pool_cfg *c = cfg;
        int rc = 0;
        if (dt_ymap_pair(m, "kernel", &c->kh, &c->kw, 1, 1, 4096, 1) < 0) rc = -1;
        dt_ykey_describe(NULL, "(the kernel)");
        int r = dt_ymap_pair(m, "stride", &c->sh, &c->sw, 1, 1, 4096, 0);
        if (r < 0) rc = -1;
        if (r == 0) { c->sh = c->kh; c->sw = c->kw; }   /* PyTorch: stride defaults to kernel */
        if (dt_ymap_pair(m, "padding", &c->ph, &c->pw, 0, 0, 2048, 0) < 0) rc = -1;
        return rc;
}

static int pool_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        const struct pool_cfg *c = cfg;
        char b[64];
        if (in->n != 3) {
                snprintf(why, n, "needs a (C,H,W) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        if (2 * c->ph > c->kh || 2 * c->pw > c->kw) {
                snprintf(why, n, "padding [%d, %d] must be at most half the kernel [%d, %d]",
                         c->ph, c->pw, c->kh, c->kw);
                return -1;
        }
        int H = in->d[1] + 2 * c->ph, W = in->d[2] + 2 * c->pw;
        if (H < c->kh || W < c->kw) {
                snprintf(why, n, "kernel %dx%d is larger than the padded input %s", c->kh, c->kw,
                         dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = (dt_shape){ 3, { in->d[0], (H - c->kh) / c->sh + 1, (W - c->kw) / c->sw + 1 } };
        return 0;
}

static double pool_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)in;
        const struct pool_cfg *c = cfg;
        return (double)dt_shape_size(out) * c->kh * c->kw;
}

/* Forward reads x and writes y (and maxpool's general path its argmax); backward reads dy (and
 * the 2x2 max path x and y, the general one the argmax) and writes dx. */
static double pool_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)cfg; (void)backward;
        return sizeof(float) * ((double)dt_shape_size(in) + (double)dt_shape_size(out));
}

static int fast_2x2(const struct pool_cfg *c);
/* 2x2 stride 2: forward reads x, writes y and a byte per output; backward reads dy and those bytes
 * and writes dx once. General: an int32 index per output instead, and dx cleared before the
 * scatter (counted once: the scatter's writes mostly hit lines the clearing brought in). */
static double maxpool_traffic(const void *cfg, const dt_shape *in, const dt_shape *out, int backward)
{
        (void)backward;
        double i = (double)dt_shape_size(in), o = (double)dt_shape_size(out);
        if (fast_2x2(cfg)) return sizeof(float) * (i + o) + o;
        return sizeof(float) * (i + 2 * o);
}

/* Window of output (oh, ow), clipped to the image: rows [*h0, *h1), columns [*w0, *w1). */
static inline void window(const struct pool_cfg *c, int H, int W, int oh, int ow,
                          int *h0, int *h1, int *w0, int *w1)
{
        int a = oh * c->sh - c->ph, b = ow * c->sw - c->pw;
        *h0 = a < 0 ? 0 : a;
        *h1 = a + c->kh > H ? H : a + c->kh;
        *w0 = b < 0 ? 0 : b;
        *w1 = b + c->kw > W ? W : b + c->kw;
}

/* ---- maxpool ---- */

/* Tests set this to send 2x2 stride-2 pooling through the general loops too (same results). */
int dt_pool_general_only = 0;

/* y[b][c][oh][ow] = max over the window of x[b][c][ih][iw] (padding is -inf, so it never wins);
 * the first maximal position (row-major) wins a tie, and the first NaN wins over everything,
 * as in PyTorch. 2x2 stride 2 unpadded takes a fast path. */
static int fast_2x2(const struct pool_cfg *c)
{
        return c->kh == 2 && c->kw == 2 && c->sh == 2 && c->sw == 2 && !c->ph && !c->pw && !dt_pool_general_only;
}

static size_t maxpool_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)in;
        /* 2x2: one byte per output (which of the four cells); else an int32 index per output */
        return fast_2x2(cfg) ? (dt_shape_size(out) + 3) / 4 : dt_shape_size(out);
}

static int maxpool_setup(dt_layer *l, int max_batch)
{
        const struct pool_cfg *c = l->cfg;
        if (l->be->ops->pool_plan) return fused_setup(l, max_batch, DT_POOL_MAX, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw);
        struct pool_priv *p = dt_calloc(1, sizeof *p);
        l->priv = p;
        /* indices and codes live in a float-sized buffer from the backend */
        size_t n = (size_t)max_batch * dt_shape_size(&l->out);
        if (fast_2x2(c)) {
                p->code = (uint8_t *)l->be->ops->alloc(l->be, (n + 3) / 4);
                return p->code ? 0 : -1;
        }
        p->arg = (int32_t *)l->be->ops->alloc(l->be, n);
        return p->arg ? 0 : -1;
}

static void maxpool_teardown(dt_layer *l)
{
        struct pool_priv *p = l->priv;
        if (!p) return;
        if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);
        if (p->arg) l->be->ops->free(l->be, (float *)p->arg);
        if (p->code) l->be->ops->free(l->be, (float *)p->code);
        free(p);
        l->priv = NULL;
}

/* The host loops run on the backend's threads, each on its own planes (b, c): no plane is
 * shared, so the results are those of one thread. */
struct pjob {
        const dt_layer *l;
        const float *x, *y, *dy;
        float *out;             /* forward: y; backward: dx */
        size_t planes;
};

/* about 32K floats of input per region before it pays for its wake-up */
static void run(const dt_layer *l, dt_par_fn fn, struct pjob *j)
{
        if (j->planes >= 2 && j->planes * dt_shape_size(&l->in) / (size_t)l->in.d[0] >= ((size_t)32 << 10))
                dt_par_run(l->be, fn, j);
        else
                fn(j, 0, 1);
}

/* B samples' planes (b, c) through fn (forward: out is y; backward: dx). */
static void run_planes(const dt_layer *l, dt_par_fn fn, const float *x, const float *y, const float *dy, float *out,
                       int B)
{
        struct pjob j = { .l = l, .x = x, .y = y, .dy = dy, .out = out, .planes = (size_t)B * l->in.d[0] };
        run(l, fn, &j);
}

/* The backend's own pooling (cuDNN) when it has one: 1 when it ran. */
static int fused_fwd(dt_layer *l, const float *x, float *y, int B)
{
        if (!fused(l)) return 0;
        l->be->ops->pool_fwd(l->be, &((struct pool_priv *)l->priv)->dd, x, y, B);
        return 1;
}

static int fused_bwd(dt_layer *l, const float *x, const float *y, const float *dy, float *dx, int B)
{
        if (!fused(l)) return 0;
        l->be->ops->pool_bwd(l->be, &((struct pool_priv *)l->priv)->dd, x, y, dy, dx, B);
        return 1;
}

/* The maximum of output (oh, ow)'s window in plane xp and the index ih*W + iw where it is. */
static inline float window_max(const struct pool_cfg *c, const float *xp, int H, int W, int oh, int ow, int32_t *at)
{
        int h0, h1, w0, w1;
        window(c, H, W, oh, ow, &h0, &h1, &w0, &w1);
        float m = -INFINITY;
        int32_t am = h0 * W + w0;
        for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                        float v = xp[(size_t)ih * W + iw];
                        if (v > m || v != v) {
                                m = v;
                                am = ih * W + iw;
                                if (v != v) goto done;
                        }
                }
done:
        *at = am;
        return m;
}

static void maxpool_fwd_part(void *arg, int t, int nt);
static void maxpool_bwd_part(void *arg, int t, int nt);

static void maxpool_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (fused_fwd(l, x, y, B)) return;
        run_planes(l, maxpool_fwd_part, x, NULL, NULL, y, B);
}

static void maxpool_fwd_part(void *arg, int t, int nt)
{
        const struct pjob *j = arg;
        const dt_layer *l = j->l;
        const float *x = j->x;
        float *y = j->out;
        const struct pool_cfg *c = l->cfg;
        struct pool_priv *p = l->priv;
        const int H = l->in.d[1], W = l->in.d[2], OH = l->out.d[1], OW = l->out.d[2];
        const size_t HW = (size_t)H * W, P = (size_t)OH * OW;
        long p0, p1;
        dt_par_range((long)j->planes, t, nt, 1, &p0, &p1);
        size_t a = (size_t)p0, b = (size_t)p1;  /* planes the general loop does */
        if (p->code) {
                /* planes that hold a NaN under a window (rare) are redone by the general loop */
                size_t lo = (size_t)-1, hi = (size_t)-1;
                dt_pool_kern_get()->max2x2_fwd(x, y, p->code, H, W, OH, OW, a * OH, b * OH, &lo, &hi);
                if (hi == (size_t)-1) return;
                a = lo;
                b = hi + 1;
        }
        for (size_t pl = a; pl < b; pl++) {
                const float *xp = x + pl * HW;
                float *yp = y + pl * P;
                for (int oh = 0; oh < OH; oh++)
                        for (int ow = 0; ow < OW; ow++) {
                                int32_t at;
                                float m = window_max(c, xp, H, W, oh, ow, &at);
                                yp[(size_t)oh * OW + ow] = m;
                                if (p->code)
                                        p->code[pl * P + (size_t)oh * OW + ow] = (uint8_t)((at / W - 2 * oh) * 2 + (at % W - 2 * ow));
                                else
                                        p->arg[pl * P + (size_t)oh * OW + ow] = at;
                        }
        }
}

/* dx[b][c][arg] += dy[b][c][oh][ow]: the gradient goes to the maximum only. */
static void maxpool_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                             const float *dy, float *dx, int B)
{
        (void)ctx;
        if (fused_bwd(l, x, y, dy, dx, B)) return;
        if (!dx) return;
        run_planes(l, maxpool_bwd_part, x, y, dy, dx, B);
}

static void maxpool_bwd_part(void *arg, int t, int nt)
{
        const struct pjob *j = arg;
        const dt_layer *l = j->l;
        struct pool_priv *p = l->priv;
        const int H = l->in.d[1], W = l->in.d[2], OH = l->out.d[1], OW = l->out.d[2];
        const size_t HW = (size_t)H * W, P = (size_t)OH * OW;
        long p0, p1;
        dt_par_range((long)j->planes, t, nt, 1, &p0, &p1);
        if (p->code) {
                /* windows do not overlap: one pass writes each dx element once, the cells no
                 * window covers (an odd last row or column) with zeros */
                dt_pool_kern_get()->max2x2_bwd(j->dy, p->code, j->out, H, W, OH, OW, (size_t)p0 * OH, (size_t)p1 * OH);
                return;
        }
        for (size_t pl = (size_t)p0; pl < (size_t)p1; pl++) {
                float *dp = j->out + pl * HW;
                const float *g = j->dy + pl * P;
                const int32_t *ap = p->arg + pl * P;
                memset(dp, 0, HW * sizeof *dp);
                for (size_t q = 0; q < P; q++) dp[ap[q]] += g[q];
        }
}

/* ---- avgpool ---- */

/* y[b][c][oh][ow] = sum over the window of x / (KH*KW)   (padding counts as zeros) */
static void avgpool_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (fused_fwd(l, x, y, B)) return;
        const struct pool_cfg *c = l->cfg;
        const int H = l->in.d[1], W = l->in.d[2], OH = l->out.d[1], OW = l->out.d[2];
        const size_t planes = (size_t)B * l->in.d[0];
        const float inv = 1.0f / (float)(c->kh * c->kw);
        for (size_t pl = 0; pl < planes; pl++) {
                const float *xp = x + pl * H * W;
                float *yp = y + pl * OH * OW;
                for (int oh = 0; oh < OH; oh++)
                        for (int ow = 0; ow < OW; ow++) {
                                int h0, h1, w0, w1;
                                window(c, H, W, oh, ow, &h0, &h1, &w0, &w1);
                                float s = 0;
                                for (int ih = h0; ih < h1; ih++)
                                        for (int iw = w0; iw < w1; iw++) s += xp[(size_t)ih * W + iw];
                                yp[(size_t)oh * OW + ow] = s * inv;
                        }
        }
}

/* dx[b][c][ih][iw] = sum over the windows holding (ih, iw) of dy / (KH*KW) */
static void avgpool_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                             const float *dy, float *dx, int B)
{
        (void)ctx; (void)x; (void)y;
        if (fused_bwd(l, x, y, dy, dx, B)) return;
        if (!dx) return;
        const struct pool_cfg *c = l->cfg;
        const int H = l->in.d[1], W = l->in.d[2], OH = l->out.d[1], OW = l->out.d[2];
        const size_t planes = (size_t)B * l->in.d[0];
        const float inv = 1.0f / (float)(c->kh * c->kw);
        memset(dx, 0, planes * H * W * sizeof *dx);
        for (size_t pl = 0; pl < planes; pl++) {
                float *dp = dx + pl * H * W;
                const float *g = dy + pl * OH * OW;
                for (int oh = 0; oh < OH; oh++)
                        for (int ow = 0; ow < OW; ow++) {
                                int h0, h1, w0, w1;
                                window(c, H, W, oh, ow, &h0, &h1, &w0, &w1);
                                float v = g[(size_t)oh * OW + ow] * inv;
                                for (int ih = h0; ih < h1; ih++)
                                        for (int iw = w0; iw < w1; iw++) dp[(size_t)ih * W + iw] += v;
                        }
        }
}

/* ---- global average pool ---- */

static int gap_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        (void)cfg;
        char b[64];
        if (in->n != 3) {
                snprintf(why, n, "needs a (C,H,W) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        *out = (dt_shape){ 1, { in->d[0] } };
        return 0;
}

static double gap_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)cfg; (void)out;
        return (double)dt_shape_size(in);
}

/* y[b][c] = mean over (h, w) of x[b][c][h][w], each plane summed in order (so any vector width
 * gives the serial sum's bits). Sixteen planes go at once, one per vector lane, so the sixteen
 * additions are independent instead of one chain waiting on the adder's latency. */
static void gap_fwd_part(void *arg, int t, int nt)
{
        const struct pjob *j = arg;
        const size_t HW = (size_t)j->l->in.d[1] * j->l->in.d[2];
        const float inv = 1.0f / (float)HW;
        long p0, p1;
        dt_par_range((long)j->planes, t, nt, 16, &p0, &p1);
        size_t pl = (size_t)p0;
        const dt_pool_kern *k = dt_pool_kern_get();
        if (k->gap16) pl = k->gap16(j->x, j->out, pl, (size_t)p1, HW, inv);
        for (; pl < (size_t)p1; pl++) {
                const float *xp = j->x + pl * HW;
                float s = 0;
                for (size_t q = 0; q < HW; q++) s += xp[q];
                j->out[pl] = s * inv;
        }
}

static void gap_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        (void)ctx;
        if (fused_fwd(l, x, y, B)) return;
        run_planes(l, gap_fwd_part, x, NULL, NULL, y, B);
}

/* dx[b][c][h][w] = dy[b][c] / (H*W) */
static void gap_bwd_part(void *arg, int t, int nt)
{
        const struct pjob *j = arg;
        const size_t HW = (size_t)j->l->in.d[1] * j->l->in.d[2];
        const float inv = 1.0f / (float)HW;
        long p0, p1;
        dt_par_range((long)j->planes, t, nt, 1, &p0, &p1);
        for (size_t pl = (size_t)p0; pl < (size_t)p1; pl++) {
                float *dp = j->out + pl * HW, v = j->dy[pl] * inv;
                for (size_t q = 0; q < HW; q++) dp[q] = v;
        }
}

static void gap_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                         const float *dy, float *dx, int B)
{
        (void)ctx;
        if (fused_bwd(l, x, y, dy, dx, B)) return;
        if (!dx) return;
        run_planes(l, gap_bwd_part, NULL, NULL, dy, dx, B);
}

/* The host loops route dy by the kept indices (max) or spread it evenly (average): neither x nor y.
 * The device's fused op reads both. */
static unsigned pool_bwd_reads(const dt_layer *l, const dt_backend *be)
{
        (void)l;
        return be && be->ops->pool_plan ? DT_BWD_X | DT_BWD_Y : 0;
}

static int pool_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        (void)cfg;
        return dt_layer_host_or(caps, DT_CAP_FUSED_POOL, backend, "pooling", why, n);
}

const dt_layer_ops dt_maxpool_layer = {
        .name = "maxpool", .cfg_size = sizeof(struct pool_cfg),
        .parse = pool_parse, .infer = pool_infer, .flops = pool_flops, .scratch = maxpool_scratch, .traffic = maxpool_traffic,
        .setup = maxpool_setup, .teardown = maxpool_teardown, .supports = pool_supports, .bwd_reads = pool_bwd_reads,
        .forward = maxpool_forward, .backward = maxpool_backward,
        .summary = "2-D max pooling: kernel, stride (default kernel), padding (-inf)",
};

const dt_layer_ops dt_avgpool_layer = {
        .name = "avgpool", .cfg_size = sizeof(struct pool_cfg),
        .parse = pool_parse, .infer = pool_infer, .flops = pool_flops, .traffic = pool_traffic,
        .setup = avgpool_setup, .teardown = maxpool_teardown, .supports = pool_supports, .bwd_reads = pool_bwd_reads,
        .forward = avgpool_forward, .backward = avgpool_backward,
        .summary = "2-D average pooling: kernel, stride (default kernel), padding (zeros, counted)",
};

const dt_layer_ops dt_global_avgpool_layer = {
        .name = "global_avgpool", .cfg_size = 1,
        .infer = gap_infer, .flops = gap_flops, .traffic = pool_traffic, .setup = gap_setup, .teardown = maxpool_teardown,
        .supports = pool_supports, .bwd_reads = pool_bwd_reads,
        .forward = gap_forward, .backward = gap_backward,
        .summary = "mean over each channel's plane: (C,H,W) -> (C) (no keys)",
};

uint8_t *dt_maxpool_codes(const dt_layer *l)
{
        const struct pool_priv *p = l->ops == &dt_maxpool_layer ? l->priv : NULL;
        return p ? p->code : NULL;
}
