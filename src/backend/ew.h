/* backend/ew.h - the cpu backend's elementwise kernels (activations, bias, axpy, scale, mask,
 * dropout masks, sum of squares, the optimizers), one table per CPU path (util/cpu.h); ewkern.h
 * holds the loops. Every path gives the same bits: -std=c11 contracts no a*b+c to FMA, each
 * element is the same expression in vector and scalar code, and the sum of squares keeps its
 * fixed lanes. A portable build's generic loops ran the AdamW update 3.4x and the dropout mask
 * 1.8x slower than the AVX-512 ones (mlp b64 t1, Xeon: step 1.35 ms vs 0.89). */
#ifndef DT_EW_H
#define DT_EW_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"
#include "util/cpu.h"

typedef struct dt_ew_kern {
        void (*act_fwd)(dt_act a, float alpha, const float *x, float *y, size_t n);
        void (*act_bwd)(dt_act a, float alpha, const float *x, const float *y, const float *dy, float *dx, size_t n);
        void (*bias_add)(float *y, const float *b, int rows, int cols);
        /* columns c0 .. c1 of db += sum_r dy[r][c], rows in order */
        void (*bias_grad)(float *db, const float *dy, int rows, int cols, int c0, int c1);
        void (*axpy)(size_t n, float a, const float *x, float *y);
        void (*scale)(size_t n, float a, float *x);
        void (*mul)(size_t n, const float *x, const float *mask, float *y);
        void (*add)(size_t n, const float *a, const float *b, float *y);
        double (*sumsq)(const float *x, size_t n);
        /* rows b0 .. b1 of mask (per floats each) for samples pos0 + b */
        void (*dropout_mask)(float *mask, int b0, int b1, size_t per, uint64_t key, long pos0, float p);
        /* dt_optim_update_cpu */
        void (*optim)(const dt_optim_hp *hp, float lr, long t, float *p, const float *g, float *m, float *v,
                      size_t n);
} dt_ew_kern;

extern const dt_kfam dt_ew_kfam;
extern const dt_ew_kern dt_ew_kern_generic, dt_ew_kern_avx2, dt_ew_kern_avx512;

static inline const dt_ew_kern *dt_ew_get(void) { return (const dt_ew_kern *)dt_kfam_pick(&dt_ew_kfam); }

#endif
