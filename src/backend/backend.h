/* backend/backend.h - the math behind one small vtable. Layers call these ops and never know which
 * device runs them. All pointers are device pointers of the backend (host memory for cpu).
 * Matrices are row-major. Unless noted, ops overwrite their output. */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct dt_backend dt_backend;

typedef enum {
        DT_ACT_NONE = 0, DT_ACT_RELU, DT_ACT_LEAKY_RELU, DT_ACT_TANH, DT_ACT_SIGMOID, DT_ACT_GELU,
        DT_ACT_COUNT
} dt_act;
extern const char *const dt_act_names[]; /* "none", "relu", ... NULL-terminated */

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

typedef struct dt_backend_ops {
        const char *name;
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
} dt_backend_ops;

struct dt_backend {
        const dt_backend_ops *ops;
        int threads;
        void *priv;
};

/* The CPU backend (OpenBLAS + plain C). threads <= 0 means all cores. */
dt_backend *dt_backend_cpu_new(int threads);
void dt_backend_free(dt_backend *be);

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

#endif
