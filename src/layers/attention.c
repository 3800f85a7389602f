/* layers/attention.c - multi-head self-attention over a sequence (T,F) -> (T,F), PyTorch's
 * nn.MultiheadAttention(F, heads, batch_first=True) called as mha(x, x, x) (with the causal mask
 * under causal: true). Tensors with its names and layouts: in_proj_weight (3F, F) and in_proj_bias
 * (3F) stack the q, k, v projections; out_proj.weight (F, F), out_proj.bias (F).
 *
 *   [q k v] = x W_in^T + b_in        (R = B T rows of 3F; head h reads columns h D .. (h + 1) D of each)
 *   o_h = softmax(q_h k_h^T / sqrt(D) + mask) v_h        (attn_kern.c, one (sample, head) per call)
 *   y = [o_1 .. o_H] W_out^T + b_out
 *
 * Heads are independent between the projections, and every per-head loop runs over the layer's own
 * heads [h0, h0 + nh): a split by heads (Megatron-LM; DT_SPLIT_HEADS) gives each of t ranks H/t of
 * them: their rows of q, k and v in in_proj (Fl = F/t of each block) and their columns of out_proj.
 * Its partial o_l W_out,l^T is all-reduced before out_proj.bias is added (once, as a row-split fc),
 * and backward all-reduces dx; so a block costs one all-reduce each way. Dropout's mask is keyed by
 * the global head, so t ranks draw what 1 rank draws. A device backend runs the heads through its
 * attention ops (the plain kernel) on its own memory; the projections are its gemm either way. */
#include "layers/layer.h"
#include "layers/attn_kern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KERN_AUTO = 0, KERN_PLAIN, KERN_BLOCKED };
static const char *const kern_names[] = { "auto", "plain", "blocked", NULL };

struct attn_cfg {
        int heads, causal, kernel, block;
        float dropout;
        /* set by attn_shard: this rank's nh heads from h0 (zero as parsed: all of them) */
        int h0, nh;
};

/* this layer's heads, and the width Fl = nh D of each of its q, k, v blocks */
static int nheads(const struct attn_cfg *c) { return c->nh ? c->nh : c->heads; }
static int width(const struct attn_cfg *c, int F) { return F / c->heads * nheads(c); }

struct attn_priv {
        int blocked;            /* the kernel chosen at setup */
        float *qkv;             /* (R, 3F) projections, kept for backward */
        float *o;               /* (R, F) the heads' outputs, kept for backward */
        float *keep;            /* plain: (B, H, T, T) probabilities; blocked: (B, H, T) log-sum-exps */
        float *dqkv, *dO;       /* backward only: (R, 3F), (R, F) */
        float *ws;              /* nt per-thread kernel workspaces */
        size_t wsn;
        int nt;
        dt_attn_desc dd;        /* device: its attention ops' heads (the buffers above are its memory) */
        int device;
};

static int attn_parse(dt_ymap *m, void *cfg, dt_diag *d)
{
        (void)d;
        struct attn_cfg *c = cfg;
        long heads = 1, block = 64;
        double p = 0;
        int rc = 0;
        if (dt_ymap_int(m, "heads", &heads, 1, 1, 4096, 0) < 0) rc = -1;
        if (dt_ymap_bool(m, "causal", &c->causal, 0, 0) < 0) rc = -1;
        if (dt_ymap_num(m, "dropout", &p, 0.0, 0.0, 0.99, 0) < 0) rc = -1;
        if (dt_ymap_enum(m, "kernel", kern_names, &c->kernel, KERN_AUTO, 0) < 0) rc = -1;
        if (dt_ymap_int(m, "block", &block, 64, 1, 4096, 0) < 0) rc = -1;
        c->heads = (int)heads;
        c->block = (int)block;
        c->dropout = (float)p;
        return rc;
}

static int attn_infer(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t n)
{
        const struct attn_cfg *c = cfg;
        char b[64];
        if (in->n != 2) {
                snprintf(why, n, "needs a sequence (T,F) input, got %s", dt_shape_str(in, b, sizeof b));
                return -1;
        }
        if (in->d[1] % c->heads) {
                snprintf(why, n, "heads: %d heads do not divide the input's %d features (each head takes F / heads)",
                         c->heads, in->d[1]);
                return -1;
        }
        *out = *in;
        return 0;
}

/* PyTorch's _reset_parameters: xavier_uniform_ over the whole (3F, F) in_proj_weight, zero biases;
 * out_proj keeps nn.Linear's U(-1/sqrt(F), 1/sqrt(F)) */
static int attn_params(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps)
{
        (void)out;
        int F = in->d[1], Fl = width(cfg, F);
        ps[0] = (dt_param_spec){ .suffix = "in_proj_weight", .shape = { 2, { 3 * Fl, F } }, .init = DT_INIT_XAVIER_UNIFORM,
                                 .init_arg = 1.0f, .fan_in = F, .fan_out = 3 * F, .trainable = 1, .groups = 3 };
        ps[1] = (dt_param_spec){ .suffix = "in_proj_bias", .shape = { 1, { 3 * Fl } }, .init = DT_INIT_ZERO,
                                 .fan_in = F, .fan_out = 3 * F, .trainable = 1, .groups = 3 };
        ps[2] = (dt_param_spec){ .suffix = "out_proj.weight", .shape = { 2, { F, Fl } }, .init = DT_INIT_TORCH,
                                 .init_arg = 1.0f, .fan_in = F, .fan_out = F, .trainable = 1 };
        ps[3] = (dt_param_spec){ .suffix = "out_proj.bias", .shape = { 1, { F } }, .init = DT_INIT_ZERO,
                                 .fan_in = F, .fan_out = F, .trainable = 1 };
        return 4;
}

static double attn_flops(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct attn_cfg *c = cfg;
        double T = in->d[0], F = in->d[1], Fl = width(c, in->d[1]);
        /* the projections, then q k^T and P v over the scores computed (half under the mask) */
        return 2.0 * T * 4.0 * F * Fl + 4.0 * T * T * Fl * (c->causal ? 0.5 : 1.0);
}

static int use_blocked(const struct attn_cfg *c, int T)
{
        return c->kernel == KERN_BLOCKED || (c->kernel == KERN_AUTO && T > c->block);
}

/* per sample: the projections and the heads' outputs, their gradients (backward's, but set up with
 * them in each slot: char-gpt ran 0.5 MiB a sample over its plan without them), and the kernel's
 * probabilities or log-sum-exps */
static size_t attn_scratch(const void *cfg, const dt_shape *in, const dt_shape *out)
{
        (void)out;
        const struct attn_cfg *c = cfg;
        size_t T = (size_t)in->d[0], F = (size_t)width(c, in->d[1]), H = (size_t)nheads(c);
        return 8 * T * F + (use_blocked(c, in->d[0]) ? H * T : H * T * T);
}

/* a device backend: the plain kernel's buffers in its memory, and its plan of the heads */
static int setup_device(dt_layer *l, struct attn_priv *p, int max_batch)
{
        const struct attn_cfg *c = l->cfg;
        dt_backend *be = l->be;
        int T = l->in.d[0], F = width(c, l->in.d[1]), H = nheads(c), D = l->in.d[1] / c->heads;
        size_t R = (size_t)max_batch * T;
        p->device = 1;
        if (c->kernel == KERN_BLOCKED) {
                dt_error("layer '%s' (attention): kernel: blocked runs on the cpu backend only", l->name);
                return -1;
        }
        p->dd = (dt_attn_desc){ .T = T, .D = D, .H = H, .h0 = c->h0, .causal = c->causal, .scale = 1.0f / sqrtf((float)D) };
        if (be->ops->attn_plan(be, &p->dd, max_batch) < 0) {
                dt_error("layer '%s' (attention) cannot run on the %s backend", l->name, be->ops->name);
                return -1;
        }
        p->qkv = be->ops->alloc(be, R * 3 * F);
        p->o = be->ops->alloc(be, R * F);
        p->keep = be->ops->alloc(be, (size_t)max_batch * H * T * T);
        p->dqkv = be->ops->alloc(be, R * 3 * F);
        p->dO = be->ops->alloc(be, R * F);
        return p->qkv && p->o && p->keep && p->dqkv && p->dO ? 0 : -1;
}

static int attn_setup(dt_layer *l, int max_batch)
{
        const struct attn_cfg *c = l->cfg;
        struct attn_priv *p = dt_calloc(1, sizeof *p);
        l->priv = p;
        if (l->be->ops->attn_fwd) return setup_device(l, p, max_batch);
        int T = l->in.d[0], F = width(c, l->in.d[1]), H = nheads(c), D = l->in.d[1] / c->heads;
        size_t R = (size_t)max_batch * T;
        p->blocked = use_blocked(c, T);
        p->qkv = dt_falloc(R * 3 * F);
        p->o = dt_falloc(R * F);
        p->keep = dt_falloc((size_t)max_batch * H * T * (p->blocked ? 1 : (size_t)T));
        p->dqkv = dt_falloc(R * 3 * F);
        p->dO = dt_falloc(R * F);
        p->nt = dt_par_threads(l->be);
        p->wsn = p->blocked ? dt_attn_blocked_ws(T, D, c->block) : dt_attn_plain_ws(T, D, c->block);
        p->ws = dt_falloc(p->wsn * p->nt);
        return 0;
}

static void attn_teardown(dt_layer *l)
{
        struct attn_priv *p = l->priv;
        if (!p) return;
        if (p->device) {
                float *bufs[] = { p->qkv, p->o, p->keep, p->dqkv, p->dO };
                for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
                        if (bufs[i]) l->be->ops->free(l->be, bufs[i]);
                if (p->dd.state) l->be->ops->op_release(l->be, p->dd.state);
                free(p);
                l->priv = NULL;
                return;
        }
        free(p->qkv);
        free(p->o);
        free(p->keep);
        free(p->dqkv);
        free(p->dO);
        free(p->ws);
        free(p);
        l->priv = NULL;
}

/* ---- the heads: a region over (sample, head) pairs; each pair writes only its own columns ---- */

struct attn_job {
        dt_layer *l;
        const dt_fwd_ctx *c;
        int B, backward;
};

/* dropout's key: (seed, step, layer), as the dropout layer's */
static uint64_t drop_key(const dt_layer *l, const dt_fwd_ctx *c)
{
        return dt_hash64(dt_hash64(c->seed, (uint64_t)c->step), (uint64_t)l->index);
}

static dt_attn_head head_of(const struct attn_job *j, int b, int h)
{
        const struct attn_cfg *c = j->l->cfg;
        const struct attn_priv *p = j->l->priv;
        int T = j->l->in.d[0], F = width(c, j->l->in.d[1]), D = j->l->in.d[1] / c->heads;
        int drop = j->c->training && c->dropout > 0;
        const float *q = p->qkv + (size_t)b * T * 3 * F + (size_t)h * D;
        return (dt_attn_head){
                .T = T, .D = D, .causal = c->causal, .block = c->block, .scale = 1.0f / sqrtf((float)D),
                .p = drop ? c->dropout : 0.0f,
                .key = drop_key(j->l, j->c),
                .pos = (uint64_t)(j->c->pos0 + b), .head = c->h0 + h,
                .q = q, .k = q + F, .v = q + 2 * F, .ld = 3 * (size_t)F, .ldo = (size_t)F, .be = j->l->be,
        };
}

static void heads_run(void *arg, int t, int nt)
{
        const struct attn_job *j = arg;
        const struct attn_cfg *c = j->l->cfg;
        struct attn_priv *p = j->l->priv;
        int T = j->l->in.d[0], F = width(c, j->l->in.d[1]), H = nheads(c);
        float *ws = p->ws + (size_t)t * p->wsn;
        long lo, hi;
        dt_par_range((long)j->B * H, t, nt, 1, &lo, &hi);
        for (long i = lo; i < hi; i++) {
                int b = (int)(i / H), h = (int)(i % H);
                dt_attn_head hd = head_of(j, b, h);
                size_t oo = (size_t)b * T * F + (size_t)h * hd.D, qo = (size_t)(hd.q - p->qkv);
                float *kp = p->keep + (size_t)i * T * (p->blocked ? 1 : (size_t)T);
                if (!j->backward) {
                        if (p->blocked) dt_attn_blocked_fwd(&hd, p->o + oo, kp, ws);
                        else dt_attn_plain_fwd(&hd, p->o + oo, kp, ws);
                        continue;
                }
                float *dq = p->dqkv + qo;
                if (p->blocked) dt_attn_blocked_bwd(&hd, p->o + oo, p->dO + oo, kp, dq, dq + F, dq + 2 * F, ws);
                else dt_attn_plain_bwd(&hd, p->o + oo, p->dO + oo, kp, dq, dq + F, dq + 2 * F, ws);
        }
}

/* a device backend's attention ops: o from qkv, or (backward) dqkv from dO, every head at once */
static void heads_device(dt_layer *l, const dt_fwd_ctx *c, int B, int backward)
{
        const struct attn_cfg *cf = l->cfg;
        const struct attn_priv *p = l->priv;
        dt_attn_drop dr = { .p = c->training && cf->dropout > 0 ? cf->dropout : 0.0f, .key = drop_key(l, c), .pos0 = c->pos0 };
        if (backward) l->be->ops->attn_bwd(l->be, &p->dd, &dr, p->qkv, p->keep, p->dO, p->dqkv, B);
        else l->be->ops->attn_fwd(l->be, &p->dd, &dr, p->qkv, p->o, p->keep, B);
}

/* the heads' outputs p->o from p->qkv; backward: p->dqkv (overwritten) from p->dO */
static void heads(dt_layer *l, const dt_fwd_ctx *c, int B, int backward)
{
        struct attn_job j = { .l = l, .c = c, .B = B, .backward = backward };
        const struct attn_priv *p = l->priv;
        if (p->device) {
                heads_device(l, c, B, backward);
                return;
        }
        /* the host kernels add into dq, dk, dv */
        if (backward) memset(p->dqkv, 0, (size_t)B * l->in.d[0] * 3 * width(l->cfg, l->in.d[1]) * sizeof *p->dqkv);
        /* the threads were counted at setup, each with its workspace */
        if (p->nt > 1 && (long)B * nheads(l->cfg) > 1) dt_par_run(l->be, heads_run, &j);
        else heads_run(&j, 0, 1);
}

/* ---- the projections ---- */

struct fill_job { float *c; const float *b; long rows; int cols; };

static void fill_rows(void *arg, int t, int nt)
{
        const struct fill_job *f = arg;
        long lo, hi;
        dt_par_range(f->rows, t, nt, 1, &lo, &hi);
        for (long r = lo; r < hi; r++) memcpy(f->c + (size_t)r * f->cols, f->b, (size_t)f->cols * sizeof *f->b);
}

/* C (R x N) = A W^T + b. In host memory C starts as b's rows and the gemm adds into it (beta 1):
 * the same bits as a gemm into zeros and then the bias (each sum a + b, in either order, while the
 * gemm's K fits its one block), without BLAS clearing C first and a second pass for the bias
 * (a sixth of the attention's forward on gpt-block, 1 thread). */
static void proj(dt_layer *l, int R, int N, int K, const float *A, const float *W, const float *b, float *C)
{
        const struct attn_priv *p = l->priv;
        const dt_backend_ops *o = l->be->ops;
        if (p->device) {
                o->gemm(l->be, 0, 1, R, N, K, 1.0f, A, K, W, K, 0.0f, C, N);
                o->bias_add(l->be, C, b, R, N);
                return;
        }
        struct fill_job f = { .c = C, .b = b, .rows = R, .cols = N };
        if (dt_par_threads(l->be) > 1 && (size_t)R * N >= 65536) dt_par_run(l->be, fill_rows, &f);
        else fill_rows(&f, 0, 1);
        o->gemm(l->be, 0, 1, R, N, K, 1.0f, A, K, W, K, 1.0f, C, N);
}

/* [q k v] = x W_in^T + b_in;  the heads;  y = o W_out^T, + b_out when bias (a split adds it after its sum) */
static void attn_matmuls(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B, int bias)
{
        struct attn_priv *p = l->priv;
        const dt_backend_ops *o = l->be->ops;
        int F = l->in.d[1], Fl = width(l->cfg, F), R = B * l->in.d[0];
        proj(l, R, 3 * Fl, F, x, l->p[0], l->p[1], p->qkv);
        heads(l, ctx, B, 0);
        if (bias) proj(l, R, F, Fl, p->o, l->p[2], l->p[3], y);
        else o->gemm(l->be, 0, 1, R, F, Fl, 1.0f, p->o, Fl, l->p[2], Fl, 0.0f, y, F);
}

/* y = o W_out^T + b_out */
static void attn_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        attn_matmuls(l, ctx, x, y, B, 1);
}

/* dW_out += dy^T o, db_out += sum dy, do = dy W_out;  the heads' dq dk dv;
 * dW_in += dqkv^T x, db_in += sum dqkv, dx = dqkv W_in (this rank's heads' share of it) */
static void attn_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                          const float *dy, float *dx, int B)
{
        (void)y;
        struct attn_priv *p = l->priv;
        const dt_backend_ops *o = l->be->ops;
        int F = l->in.d[1], Fl = width(l->cfg, F), R = B * l->in.d[0];
        o->gemm(l->be, 1, 0, F, Fl, R, 1.0f, dy, F, p->o, Fl, 1.0f, l->g[2], Fl);
        o->bias_grad(l->be, l->g[3], dy, R, F);
        o->gemm(l->be, 0, 0, R, Fl, F, 1.0f, dy, F, l->p[2], Fl, 0.0f, p->dO, Fl);
        heads(l, ctx, B, 1);
        o->gemm(l->be, 1, 0, 3 * Fl, F, R, 1.0f, p->dqkv, 3 * Fl, x, F, 1.0f, l->g[0], F);
        o->bias_grad(l->be, l->g[1], p->dqkv, R, 3 * Fl);
        if (dx) o->gemm(l->be, 0, 0, R, F, 3 * Fl, 1.0f, p->dqkv, 3 * Fl, l->p[0], F, 0.0f, dx, F);
}

/* ---- split by heads: the partial outputs and input gradients summed over the group ---- */

static void heads_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B)
{
        size_t R = (size_t)B * l->in.d[0];
        attn_matmuls(l, ctx, x, y, B, 0);
        l->place.tp->allreduce(l->place.tp, y, R * l->in.d[1]);
        l->be->ops->bias_add(l->be, y, l->p[3], (int)R, l->in.d[1]);
}

static void heads_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y,
                           const float *dy, float *dx, int B)
{
        attn_backward(l, ctx, x, y, dy, dx, B);
        if (dx) l->place.tp->allreduce(l->place.tp, dx, (size_t)B * l->in.d[0] * l->in.d[1]);
}

/* a device backend with attention ops computes the plain kernel (in its memory, up to its T limit) */
static int attn_supports(const void *cfg, const char *backend, unsigned caps, char *why, size_t n)
{
        const struct attn_cfg *c = cfg;
        if (dt_layer_host_or(caps, DT_CAP_FUSED_ATTN, backend, "attention", why, n) < 0) return -1;
        if (!(caps & DT_CAP_HOST_MEMORY) && c->kernel == KERN_BLOCKED) {
                snprintf(why, n, "kernel: blocked runs on the cpu backend only; the %s backend computes the plain "
                         "kernel (kernel: auto or plain)", backend);
                return -1;
        }
        return 0;
}

/* a device backend's attention ops keep every head's T x T probabilities: T is bounded there */
static int attn_supports_shape(const void *cfg, const dt_shape *in, const char *backend, unsigned caps, char *why,
                               size_t n)
{
        (void)cfg;
        if ((caps & DT_CAP_HOST_MEMORY) || in->d[0] <= DT_ATTN_DEVICE_TMAX) return 0;
        snprintf(why, n, "%d steps: the %s backend keeps every head's T x T probabilities and takes T <= %d; the cpu "
                 "backend's blocked kernel takes any T", in->d[0], backend, DT_ATTN_DEVICE_TMAX);
        return -1;
}

static const char *attn_impl(const dt_layer *l, const char **detail)
{
        (void)detail;
        const struct attn_priv *p = l->priv;
        return p && p->blocked ? "blocked" : "plain";
}

/* forward: the output, all-reduced; backward: the input gradient, all-reduced when wanted */
static const dt_split_way attn_splits[] = {
        { .split = DT_SPLIT_HEADS, .role = DT_ROLE_ALONE, .what = "its heads", .required = 1, .ncoll = 2,
          .coll = { { .size = DT_COLL_OUTPUT }, { .backward = 1, .size = DT_COLL_INPUT, .when = DT_COLL_IF_DX } } },
};

static const dt_layer_ops *attn_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n);

#define ATTN_OPS \
        .name = "attention", .cfg_size = sizeof(struct attn_cfg), \
        .parse = attn_parse, .infer = attn_infer, .params = attn_params, .flops = attn_flops, \
        .scratch = attn_scratch, .setup = attn_setup, .teardown = attn_teardown, .supports = attn_supports, \
        .supports_shape = attn_supports_shape, \
        .impl = attn_impl, .splits = attn_splits, .nsplits = 1, .shard = attn_shard, \
        .summary = "multi-head self-attention over (T,F): heads, causal, dropout, kernel, block"

const dt_layer_ops dt_attention_layer = { ATTN_OPS, .forward = attn_forward, .backward = attn_backward };
static const dt_layer_ops attn_heads = { ATTN_OPS, .forward = heads_forward, .backward = heads_backward };

static const dt_layer_ops *attn_shard(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                      char *why, size_t n)
{
        (void)in;
        const struct attn_cfg *c = cfg;
        struct attn_cfg *lc = local;
        if (c->heads % pl->nshards) {
                snprintf(why, n, "heads %d do not divide into %d shards (each rank takes heads / tensor of them)",
                         c->heads, pl->nshards);
                return NULL;
        }
        *lc = *c;
        lc->nh = c->heads / pl->nshards;
        lc->h0 = pl->shard * lc->nh;
        return &attn_heads;
}
