/* backend/backend.h - the math behind one small vtable. Layers call these ops and never know which
 * device runs them. All pointers are device pointers of the backend (host memory for cpu); the
 * optional fused ops at the end (conv, pool, batchnorm, rnn, loss) are NULL on the cpu backend.
 * Matrices are row-major. Unless noted, ops overwrite their output. The cpu backend also lends
 * its threads to the layers' host loops (dt_par_run, at the end). */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct dt_backend dt_backend;

typedef enum {
        DT_ACT_NONE = 0, DT_ACT_RELU, DT_ACT_LEAKY_RELU, DT_ACT_TANH, DT_ACT_SIGMOID, DT_ACT_GELU,
        DT_ACT_GELU_TANH,       /* PyTorch's gelu(approximate='tanh'), GPT-2's */
        DT_ACT_COUNT
} dt_act;
extern const char *const dt_act_names[]; /* "none", "relu", ... NULL-terminated */

/* How the cpu backend's conv layers compute (cluster spec 'conv', --conv): im2col + SGEMM, oneDNN
 * (backend/onednn.h, when built in), or auto: oneDNN where it is built in and the layer's rule
 * (layers/conv.c) measured it faster, else im2col. Device backends use their own (cuDNN). */
typedef enum { DT_CONV_AUTO = 0, DT_CONV_IM2COL, DT_CONV_ONEDNN, DT_CONV_COUNT } dt_conv_algo;
extern const char *const dt_conv_algo_names[];  /* "auto", "im2col", "onednn", NULL-terminated */

/* Optimizer hyper-parameters, as the update kernels need them. */
typedef enum {
        DT_OPT_SGD = 0, DT_OPT_MOMENTUM, DT_OPT_NESTEROV, DT_OPT_RMSPROP, DT_OPT_ADAM, DT_OPT_ADAMW,
        DT_OPT_COUNT
} dt_opt_kind;

typedef struct dt_optim_hp {
        dt_opt_kind kind;
        float momentum;      /* momentum, nesterov, rmsprop (0 = none) */
        float dampening;     /* momentum/nesterov, as torch.optim.SGD */
        float beta1, beta2;  /* adam, adamw */
        float alpha;         /* rmsprop smoothing */
        float eps;           /* adam, adamw, rmsprop */
        float weight_decay;  /* L2 added to the gradient; decoupled for adamw */
} dt_optim_hp;

/* ---- descriptors of the optional fused ops (see the end of dt_backend_ops) ----
 * A layer fills one in setup() and hands it to the backend's *_plan, which keeps its own state
 * (library descriptors, chosen algorithms, workspaces) in 'state'; op_release frees it. */
typedef struct dt_conv_desc {
        int C, H, W;            /* input (C,H,W) */
        int F, OH, OW;          /* output (F,OH,OW) */
        int KH, KW, SH, SW, DH, DW, G;
        int pt, pb, pl, pr;     /* padding top, bottom, left, right */
        void *state;
} dt_conv_desc;

typedef enum { DT_POOL_MAX = 0, DT_POOL_AVG } dt_pool_mode;
typedef struct dt_pool_desc {
        dt_pool_mode mode;      /* max: padding is -inf; avg: padding counts as zeros (divisor KH*KW) */
        int C, H, W, OH, OW, KH, KW, SH, SW, PH, PW;
        void *state;
} dt_pool_desc;

typedef struct dt_bn_desc {
        int C;                  /* channels; statistics over (B, S) per channel */
        int S;                  /* H*W, or 1 for flat (F) inputs */
        float eps, momentum;    /* PyTorch's: running = (1 - momentum) running + momentum batch */
        void *state;
} dt_bn_desc;

typedef enum { DT_RNN_TANH = 0, DT_RNN_RELU, DT_RNN_LSTM, DT_RNN_GRU } dt_rnn_mode;
/* Multi-head attention's heads (layers/attention.c), between its projections: qkv (B, T, 3W) holds
 * per row the q, k and v blocks of W = H D columns, head h at columns h D of each; o (B, T, W). */
#define DT_ATTN_DEVICE_TMAX 8192      /* the longest T the ops take: they keep B H T T probabilities */
typedef struct dt_attn_desc {
        int T, D, H;            /* steps, head width, heads */
        int h0;                 /* the first head's index in the unsplit layer (dropout's) */
        int causal;             /* step t reads steps 0 .. t only */
        float scale;            /* 1 / sqrt(D), as the cpu kernels compute it */
        void *state;
} dt_attn_desc;
/* Dropout on the probabilities for one call, as layers/attn_kern.h: element (t, s) of head h of
 * sample b kept with dt_dropout_keep(key, pos0 + b, ((h0 + h) T + t) T + s, p), scaled 1 / (1 - p);
 * p = 0: none. */
typedef struct dt_attn_drop {
        float p;
        uint64_t key;
        long pos0;
} dt_attn_drop;

typedef struct dt_rnn_desc {
        dt_rnn_mode mode;
        int T, I, H, L;         /* steps, input features, hidden, stacked layers */
        int bias;               /* bias_ih and bias_hh present */
        int return_seq;         /* y (B,T,H); else (B,H), the top layer's last step */
        void *state;
} dt_rnn_desc;

/* What a backend can do, as flags a layer (or the data-parallel code) asks about instead of
 * comparing backend names. Known per kind without opening a device (dt_backend_caps_of), so
 * `dtrain check` can refuse a layer a backend cannot run, at the layer's key. */
enum {
        DT_CAP_HOST_MEMORY = 1u << 0,   /* pointers are host memory: layers may run host loops */
        DT_CAP_RNN_BPTT = 1u << 1,      /* truncated backpropagation through time (bptt:) */
        DT_CAP_FUSED_CONV = 1u << 2,    /* conv_plan/conv_fwd/conv_bwd */
        DT_CAP_FUSED_POOL = 1u << 3,    /* pool_plan/... */
        DT_CAP_FUSED_BN = 1u << 4,      /* bn_plan/... */
        DT_CAP_FUSED_RNN = 1u << 5,     /* rnn_plan/...: rnn, lstm and gru as one op */
        DT_CAP_DEVICE_LOSS = 1u << 6,   /* loss on device memory */
        DT_CAP_NCCL = 1u << 7,          /* device-buffer allreduce through NCCL (built with it) */
        DT_CAP_FUSED_LN = 1u << 8,      /* ln_fwd/ln_bwd: layer normalisation */
        DT_CAP_FUSED_ATTN = 1u << 9,    /* attn_plan/...: attention's heads (the plain kernel only) */
};
#define DT_CAPS_CPU (DT_CAP_HOST_MEMORY | DT_CAP_RNN_BPTT)
#define DT_CAPS_CUDA (DT_CAP_FUSED_CONV | DT_CAP_FUSED_POOL | DT_CAP_FUSED_BN | DT_CAP_FUSED_RNN | DT_CAP_DEVICE_LOSS | \
                      DT_CAP_FUSED_LN | DT_CAP_FUSED_ATTN)

typedef struct dt_backend_ops {
        const char *name;
        unsigned caps;                  /* DT_CAP_* */
        /* memory */
        float *(*alloc)(dt_backend *be, size_t n);            /* zeroed */
        void (*free)(dt_backend *be, float *p);
        void (*to_device)(dt_backend *be, float *dst, const float *src, size_t n);
        void (*to_host)(dt_backend *be, float *dst, const float *src, size_t n);
        void (*copy)(dt_backend *be, float *dst, const float *src, size_t n);
        void (*zero)(dt_backend *be, float *x, size_t n);
        /* C = alpha op(A) op(B) + beta C;  op(A) is M x K, op(B) is K x N, C is M x N */
        void (*gemm)(dt_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
        /* y[r][c] += b[c]  (rows x cols) */
        void (*bias_add)(dt_backend *be, float *y, const float *b, int rows, int cols);
        /* db[c] += sum_r dy[r][c] */
        void (*bias_grad)(dt_backend *be, float *db, const float *dy, int rows, int cols);
        /* y = f(x); x == y allowed */
        void (*act_fwd)(dt_backend *be, dt_act a, float alpha, const float *x, float *y, size_t n);
        /* dx = f'(x) * dy, given x (pre-activation) and y = f(x); dx == dy allowed */
        void (*act_bwd)(dt_backend *be, dt_act a, float alpha, const float *x, const float *y,
                        const float *dy, float *dx, size_t n);
        /* y = a x + y */
        void (*axpy)(dt_backend *be, size_t n, float a, const float *x, float *y);
        void (*scale)(dt_backend *be, size_t n, float a, float *x);
        /* y = x * mask (elementwise) */
        void (*mul)(dt_backend *be, size_t n, const float *x, const float *mask, float *y);
        /* Inverted-dropout mask for B samples of 'per' elements: mask[b][j] = keep / (1 - p) with
         * keep decided by dt_dropout_keep(key, pos0 + b, j, p), the same function on every backend. */
        void (*dropout_mask)(dt_backend *be, float *mask, int B, size_t per, uint64_t key, long pos0, float p);
        /* sum of squares in double; returns NaN/Inf when x holds one */
        double (*sumsq)(dt_backend *be, const float *x, size_t n);
        /* One optimizer step on a flat slice. m, v are moment buffers (NULL when the kind needs
         * none); t is the 1-based step count (Adam bias correction). */
        void (*optim_step)(dt_backend *be, const dt_optim_hp *hp, float lr, long t,
                           float *p, const float *g, float *m, float *v, size_t n);
        /* y = a + b (y may be a or b): the add layer */
        void (*add)(dt_backend *be, size_t n, const float *a, const float *b, float *y);
        /* dst[r][c] = src[r][c], or += when accumulate, for rows x w; rows ldd and lds floats apart
         * (concat: a block of columns of each row, forward and backward) */
        void (*copy_cols)(dt_backend *be, float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                          size_t w, int accumulate);

        /* ---- optional: NULL on the cpu backend, whose layers run their own host loops. A layer
         * tests 'if (be->ops->X)' and calls it; a device backend must provide all of them, since
         * the layers' host loops cannot read device memory. *_plan returns 0, or -1 after printing
         * why (dt_error); backward ops ACCUMULATE into parameter gradients and overwrite dx
         * (dx may be NULL: not wanted). ---- */
        void (*destroy)(dt_backend *be);                       /* NULL: free(be) is enough */
        void (*op_release)(dt_backend *be, void *state);        /* a *_plan's state */
        /* y = conv(x, w) + b   x (B,C,H,W), w (F,C/G,KH,KW), b (F) or NULL, y (B,F,OH,OW) */
        int (*conv_plan)(dt_backend *be, dt_conv_desc *d, int max_batch);
        void (*conv_fwd)(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *b,
                         float *y, int B);
        /* dw += dL/dw, db += sum of dy (db NULL: no bias), dx = dL/dx */
        void (*conv_bwd)(dt_backend *be, dt_conv_desc *d, const float *x, const float *w, const float *dy,
                         float *dx, float *dw, float *db, int B);
        int (*pool_plan)(dt_backend *be, dt_pool_desc *d, int max_batch);
        void (*pool_fwd)(dt_backend *be, dt_pool_desc *d, const float *x, float *y, int B);
        void (*pool_bwd)(dt_backend *be, dt_pool_desc *d, const float *x, const float *y, const float *dy,
                         float *dx, int B);
        /* training: batch statistics, saved as smean/sinvstd (C each), running stats updated;
         * else the running statistics. gamma/beta (and dgamma/dbeta) NULL when not affine. */
        int (*bn_plan)(dt_backend *be, dt_bn_desc *d, int max_batch);
        void (*bn_fwd)(dt_backend *be, dt_bn_desc *d, int training, const float *x, float *y,
                       const float *gamma, const float *beta, float *rmean, float *rvar,
                       float *smean, float *sinvstd, int B);
        void (*bn_bwd)(dt_backend *be, dt_bn_desc *d, int training, const float *x, const float *dy,
                       float *dx, const float *gamma, float *dgamma, float *dbeta, const float *rmean,
                       const float *rvar, const float *smean, const float *sinvstd, int B);
        /* Recurrent layers. w / dw: the layer's tensors in its checkpoint order (PyTorch's):
         * per layer weight_ih (G*H, in), weight_hh (G*H, H)[, bias_ih (G*H), bias_hh (G*H)].
         * x (B,T,I); y as dt_rnn_desc.return_seq says. rnn_bwd follows the rnn_fwd (training) of
         * the same batch. */
        int (*rnn_plan)(dt_backend *be, dt_rnn_desc *d, int max_batch);
        void (*rnn_fwd)(dt_backend *be, dt_rnn_desc *d, int training, float *const *w, const float *x,
                        float *y, int B);
        void (*rnn_bwd)(dt_backend *be, dt_rnn_desc *d, float *const *w, float *const *dw, const float *x,
                        const float *y, const float *dy, float *dx, int B);
        /* Layer norm over R rows of F (layers/layernorm.c's math): y = (x - mean) rstd w + b, mean and
         * rstd (R) kept for backward; w, b (F) NULL when not affine. ln_bwd overwrites dx (NULL: not
         * wanted) and adds into dw, db (NULL when not affine). */
        void (*ln_fwd)(dt_backend *be, const float *x, float *y, const float *w, const float *b, float *mean,
                       float *rstd, int R, int F, float eps);
        void (*ln_bwd)(dt_backend *be, const float *x, const float *dy, float *dx, const float *w, float *dw,
                       float *db, const float *mean, const float *rstd, int R, int F);
        /* Attention's heads for up to max_batch samples (dt_attn_desc). attn_fwd writes o and keeps the
         * probabilities before dropout in P (B, H, T, T); attn_bwd, after the attn_fwd of the same batch,
         * OVERWRITES dqkv (B, T, 3W) from dO (B, T, W). */
        int (*attn_plan)(dt_backend *be, dt_attn_desc *d, int max_batch);
        void (*attn_fwd)(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv, float *o,
                         float *P, int B);
        void (*attn_bwd)(dt_backend *be, const dt_attn_desc *d, const dt_attn_drop *dr, const float *qkv,
                         const float *P, const float *dO, float *dqkv, int B);
        /* The loss on device memory 'out' (R rows of C): kind 0 softmax cross-entropy, 1 mse, as
         * layers/loss.h. labels (R) and targets (R*C, or NULL) are HOST arrays. dout may be NULL. */
        double (*loss)(dt_backend *be, int kind, const float *out, const int32_t *labels,
                       const float *targets, int R, int C, float scale, float *dout, long *correct);
} dt_backend_ops;

struct dt_backend {
        const dt_backend_ops *ops;
        int threads;
        int deterministic;      /* the spec's 'deterministic': only reproducible library algorithms */
        int conv;               /* dt_conv_algo (cpu backend; auto unless set after creation) */
        int device;             /* device index (cuda) */
        char desc[128];         /* "NVIDIA H200 (sm_90, 139 GiB)"; "" for cpu */
        void *priv;
};

/* The capabilities of a backend kind ("cpu", "cuda"); 0 for an unknown kind. */
unsigned dt_backend_caps_of(const char *kind);
static inline int dt_backend_supports(const dt_backend *be, unsigned cap)
{
        return be && (be->ops->caps & cap) == cap;
}

/* The CPU backend (OpenBLAS + plain C). threads <= 0 means all cores. */
dt_backend *dt_backend_cpu_new(int threads);
void dt_backend_free(dt_backend *be);

/* ---- host parallelism (cpu backend) ----
 * dt_par_run(be, fn, arg) calls fn(arg, t, nt) for t = 0 .. nt-1 at once, t = 0 on the calling
 * thread, and returns when all have returned; nt = dt_par_threads(be). Inside, OpenBLAS and the
 * gemm op are single-threaded, and a nested dt_par_run runs fn(arg, 0, 1) inline. A backend with
 * one thread, a device backend, or a call from inside a region gives nt = 1: the plain serial
 * loop, so --threads 1 computes exactly what it did before regions existed. Work must be split by
 * t alone (dt_par_range), never by timing, and partial sums combined in t order, so a result
 * depends on the thread count only, never on the run. */
typedef void (*dt_par_fn)(void *arg, int t, int nt);
int dt_par_threads(const dt_backend *be);
void dt_par_run(dt_backend *be, dt_par_fn fn, void *arg);

/* Thread t's share [*lo, *hi) of n items split into nt contiguous ranges, the first ones one item
 * larger when nt does not divide n; ranges start at multiples of 'align' (>= 1) where n allows. */
static inline void dt_par_range(long n, int t, int nt, long align, long *lo, long *hi)
{
        long blocks = (n + align - 1) / align, q = blocks / nt, r = blocks % nt;
        long b0 = t * q + (t < r ? t : r), b1 = b0 + q + (t < r);
        *lo = b0 * align < n ? b0 * align : n;
        *hi = b1 * align < n ? b1 * align : n;
}

/* The CUDA backend on device local_rank % (device count). NULL when this build has no CUDA or no
 * device answers, with *why set to one line saying so (static storage). Defined in
 * backend/cuda/cuda.c, the module dtrain-cuda.so, which backend/cuda_load.c loads on the first
 * call (in builds without CUDA it says why not): callers need no #ifdef. */
dt_backend *dt_backend_cuda_new(int local_rank, const char **why);
/* Number of CUDA devices, or -1 with *why (no driver, built without CUDA). Only calls
 * cudaGetDeviceCount. */
int dt_cuda_device_count(const char **why);

/* 1 when element j of global sample 'pos' is kept: a counter-based hash, so masks depend on
 * (key, pos, j) only, never on how samples are split across ranks or calls. */
static inline int dt_dropout_keep(uint64_t key, uint64_t pos, uint64_t j, float p)
{
        uint64_t z = key ^ (pos * 0x9E3779B97F4A7C15ull) ^ (j * 0xD1B54A32D192ED03ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
}

/* Moment buffers an optimizer kind needs (0, 1 or 2). */
int dt_optim_nmoments(const dt_optim_hp *hp);
/* One step of hp->kind over n elements on the host (backend/cpu_optim.c). m: first moment /
 * momentum buffer, v: second moment; t: 1-based step. Matches torch.optim.{SGD,RMSprop,Adam,AdamW}. */
void dt_optim_update_cpu(const dt_optim_hp *hp, float lr, long t, float *p, const float *g,
                         float *m, float *v, size_t n);

#endif
