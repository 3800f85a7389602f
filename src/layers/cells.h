/* layers/cells.h - the recurrent cells' per-step kernels (lstm.c, gru.c, rnn.c), one table per CPU path
 * (util/cpu.h); cellkern.h holds the math. The AVX2 and AVX-512 tables give the same bits (FMA
 * contraction in both); the generic table has no FMA and rounds differently, as it did before. */
#ifndef DT_CELLS_H
#define DT_CELLS_H

#include "util/cpu.h"

#include <stddef.h>

typedef struct dt_cell_kern {
        /* LSTM, B rows of H units: gt (B,4H) pre-activations less the bias bs (4H) in, gate
         * activations out; cp = c_{t-1}; c, tc = tanh(c), h (B,H) out */
        void (*lstm_fwd)(int B, int H, float *gt, const float *bs, const float *cp, float *c, float *tc, float *h);
        /* gt: activations in, d(pre-activation) out; dc: dL/dc_t in, dL/dc_{t-1} out; db (4H) += column sums */
        void (*lstm_bwd)(int B, int H, float *gt, const float *cp, const float *tc, const float *dh, float *dc,
                         float *db);
        /* GRU: at (B,3H) x W_ih^T in, r, z, n out; gh = h_{t-1} W_hh^T; hn = gh_n + b_hn kept; h out */
        void (*gru_fwd)(int B, int H, float *at, const float *gh, const float *bih, const float *bhh, const float *hp,
                        float *hn, float *h);
        /* at: d(input-side pre) out; dgh d(hidden-side pre); dhp += dh z; dbi, dbh += column sums */
        void (*gru_bwd)(int B, int H, float *at, const float *hn, const float *hp, const float *dh, float *dgh,
                        float *dhp, float *dbi, float *dbh);
        /* RNN: x = tanh(x) in place over n floats, each element the same function wherever it lies */
        void (*rnn_tanh)(size_t n, float *x);
} dt_cell_kern;

extern const dt_kfam dt_cell_kfam;
extern const dt_cell_kern dt_cell_kern_generic, dt_cell_kern_avx2, dt_cell_kern_avx512;

static inline const dt_cell_kern *dt_cell_kern_get(void) { return (const dt_cell_kern *)dt_kfam_pick(&dt_cell_kfam); }

#endif
