/* layers/batchnorm_int.h - what batchnorm.c shares with its vector kernels (batchnorm_avx2.c,
 * batchnorm_avx512.c): the settings, the views of a layer's tensors, a job's arguments and the
 * per-channel coefficient functions, so every side does the same arithmetic. Private to those files. */
#ifndef DT_BATCHNORM_INT_H
#define DT_BATCHNORM_INT_H

#include "layers/layer.h"
#include "layers/pool_kern.h"
#include "util/cpu.h"
#include "util/prefetch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bn_cfg {
        float momentum, eps;
        int affine;
        dt_act act;             /* applied to the output, as fc's and conv's activation */
        float alpha;
};

/* what a layer keeps between forward and backward */
struct bn_priv {
        float *mean;    /* (C) batch mean of the last training forward */
        float *invstd;  /* (C) 1/sqrt(var + eps) of the same batch */
        dt_bn_desc dd;  /* device backends: the fused op's plan (dd.state set) */
        float *z;       /* device backends with an activation whose f' needs z: (B, C, S) pre-activation */
        float *dz;      /* device backends with an activation: (B, C, S) f'(z) dy */
};

/* Views: C channels of S = H*W (1 for flat inputs) contiguous values per sample. */
struct bn_view {
        int C;
        size_t S;
        const float *gamma, *beta;
        float *rmean, *rvar;
        float *dgamma, *dbeta;
};

static inline struct bn_view view_of(const dt_layer *l)
{
        const struct bn_cfg *c = l->cfg;
        struct bn_view v = { .C = l->in.d[0], .S = l->in.n == 3 ? (size_t)l->in.d[1] * l->in.d[2] : 1 };
        int k = 0;
        if (c->affine) {
                v.gamma = l->p[0]; v.beta = l->p[1];
                v.dgamma = l->g[0]; v.dbeta = l->g[1];
                k = 2;
        }
        v.rmean = l->p[k];
        v.rvar = l->p[k + 1];
        return v;
}

/* lane accumulators per row; chunk of z or dz values */
#define LANES 16
#define CHUNK 256       /* floats of z or dz at a time for activations other than relu */

/* The 2x2 stride-2 max pool after a batch norm with relu, run in the same pass (bnpool.c): forward
 * pools each block of f(a x + b) planes while it is in cache, writing y and code, never the batch
 * norm's whole output; backward spreads dy by code into such a block, as the pool's own backward
 * would write its dx, and reads that in place of the batch norm's dy. */
struct bn_pool {
        const struct dt_pool_kern *k;
        int H, W, OH, OW;
        float *y;               /* forward: (B, C, OH, OW) the pool's output */
        const float *dy;        /* backward: (B, C, OH, OW) its gradient */
        uint8_t *code;          /* (B, C, OH, OW) which cell of each window won */
};

struct bn_job {
        dt_layer *l;
        int training, B;
        const float *x, *y, *dy;
        float *out;     /* forward: y; backward: dx (NULL: not wanted) */
        const struct bn_pool *pool;     /* NULL, or the pool after it: forward's y and backward's dy are its */
};

/* batchnorm.c: channel c's forward coefficients a, b (y = f(a x + b)) from its sums s1, s2 of
 * x - k and (x - k)^2 (training; running statistics updated) or the running statistics */
void dt_bn_fwd_coef(const struct bn_job *j, int c, float k, double s1, double s2, float *a, float *b);
/* channel c's mean, invstd and forward coefficients, for backward */
void dt_bn_bwd_coef(const struct bn_job *j, int c, float *mean, float *invstd, float *a, float *b);
/* from channel c's sums of dz and dz (x - mean): the parameter gradients, and dx's kk, bx */
void dt_bn_bwd_finish(const struct bn_job *j, int c, double sdy, double sdyx, float a, float invstd, float *kk,
                      float *bx);

/* A path's host passes (dt_par_fn over a struct bn_job): its channels of the forward, the backward */
struct bn_kern {
        void (*fwd_part)(void *job, int t, int nt);
        void (*bwd_part)(void *job, int t, int nt);
        int pools;      /* its (C,H,W) relu passes take a job's pool (the vector kernels; not the plain loops) */
};
/* batchnorm.c: the CPU path's kernels; j through them (its forward or backward), on the backend's
 * threads when it is large enough, each thread on its own channels */
const struct bn_kern *dt_bn_kern(void);
void dt_bn_run(dt_layer *l, int backward, struct bn_job *j);
/* batchnorm_avx2.c and batchnorm_avx512.c, where built */
extern const struct bn_kern dt_bn_kern_avx2, dt_bn_kern_avx512;
/* Nonzero (the tests): the plain loops also where the vector kernels would run */
extern int dt_bn_plain;

#endif
