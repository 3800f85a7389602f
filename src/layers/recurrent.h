/* layers/recurrent.h - what rnn, lstm and gru share: their common keys, the (T,F) -> (T,H) or (H)
 * shape rule, PyTorch's per-layer tensors (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
 * bias_hh_l{k} with G gate blocks of H rows) and the FLOP count.
 *
 * Tensor parallel (DT_SPLIT_HIDDEN): each of t ranks owns Hl = H/t hidden units of every gate,
 * units [shard Hl, (shard + 1) Hl): the rows of those units in each gate block of weight_ih,
 * weight_hh and the biases, so a shard's tensors are (G Hl, in), (G Hl, H), (G Hl). weight_hh keeps
 * all H columns because every unit reads the whole h_{t-1}. Forward, a step computes its units'
 * gates and cell, then all-gathers h_t, so every rank holds the full hidden sequence (the next
 * step's and the next layer's input, and the output) bit for bit. Backward, a step's cell runs on
 * the rank's units; the recurrent gradient dG_t W_hh sums over ranks (an all-reduce of (B, H)), of
 * which a rank keeps its own units' columns, and a layer's input gradient dG W_ih is all-reduced
 * once over all steps. Weight gradients need no collective: each rank's rows are its own. */
#ifndef DT_RECURRENT_H
#define DT_RECURRENT_H

#include "layers/layer.h"

/* The first member of each recurrent layer's cfg. */
struct dt_rec_cfg {
        int hidden, layers, return_seq, bptt, bias;
        int t;          /* set by dt_rec_shard: hidden units split over t ranks; 0 (parsed) or 1: whole.
                         * hidden stays the full H: h, the output and weight_hh's columns are whole */
};

/* Ranks the hidden units split over (1 unsplit), and this rank's unit count H/t. */
static inline int dt_rec_nshards(const struct dt_rec_cfg *c) { return c->t > 1 ? c->t : 1; }
static inline int dt_rec_units(const struct dt_rec_cfg *c) { return c->hidden / dt_rec_nshards(c); }

/* Reads hidden, layers (1..max_layers), return_sequences, bptt, bias. */
int dt_rec_parse(dt_ymap *m, struct dt_rec_cfg *c, int max_layers);
int dt_rec_infer(const struct dt_rec_cfg *c, const dt_shape *in, dt_shape *out, char *why, size_t n);
/* G gate blocks (1 rnn, 3 gru, 4 lstm); torch draws every tensor from U(-1/sqrt(H), 1/sqrt(H)). */
int dt_rec_params(const struct dt_rec_cfg *c, int G, const dt_shape *in, dt_param_spec *ps);
double dt_rec_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in);
/* Host loops, or the backend's fused recurrent op without bptt (and unsplit). */
int dt_rec_supports(const struct dt_rec_cfg *c, const char *backend, unsigned caps, char *why, size_t n);
/* The one way they split: hidden units, h gathered each step forward, its gradient summed each
 * step backward, dx summed once. */
extern const dt_split_way dt_rec_splits[];
/* The shard op's common part: lc (a copy of c) split as pl says (H divisible by the group size). */
int dt_rec_shard(const struct dt_rec_cfg *c, const dt_placement *pl, struct dt_rec_cfg *lc, char *why, size_t n);

/* A split layer's per-step collectives, through l->place.tp (only split layers call them).
 * dt_rec_gather_h: h (B, H) = every rank's hl (B, Hl) side by side, rank k's at columns k Hl. */
void dt_rec_gather_h(const dt_layer *l, const float *hl, float *h, int B, int Hl);
/* dhl (B, Hl) += this rank's columns of part (B, H) summed over the ranks; part is overwritten by
 * the sum. The recurrent gradient dG_t W_hh: each rank holds its units' gate rows of it. */
void dt_rec_reduce_h(const dt_layer *l, float *part, float *dhl, int B, int H, int Hl);

/* (B, T, F) <-> (T, B, F): the cells run time-major, activations are batch-major. */
void dt_rec_time_major(float *dst, const float *src, int B, int T, int F);
void dt_rec_batch_major(float *dst, const float *src, int B, int T, int F);
/* y = the top layer's sequence (T, B, H) batch-major, or its last step without return_sequences. */
void dt_rec_output(const struct dt_rec_cfg *c, float *y, const float *top, int B, int T);
/* dH (T, B, H) = dL/d(top sequence) from dy: all steps, or only the last without return_sequences. */
void dt_rec_seed_grad(const struct dt_rec_cfg *c, float *dH, const float *dy, int B, int T);

#endif
