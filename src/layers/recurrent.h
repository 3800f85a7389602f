/* layers/recurrent.h - what rnn, lstm and gru share: their common keys, the (T,F) -> (T,H) or (H)
 * shape rule, PyTorch's per-layer tensors (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
 * bias_hh_l{k} with G gate blocks of H rows) and the FLOP count. */
#ifndef DT_RECURRENT_H
#define DT_RECURRENT_H

#include "layers/layer.h"

/* The first member of each recurrent layer's cfg. */
struct dt_rec_cfg {
        int hidden, layers, return_seq, bptt, bias;
};

/* Reads hidden, layers (1..max_layers), return_sequences, bptt, bias. */
int dt_rec_parse(dt_ymap *m, struct dt_rec_cfg *c, int max_layers);
int dt_rec_infer(const struct dt_rec_cfg *c, const dt_shape *in, dt_shape *out, char *why, size_t n);
/* G gate blocks (1 rnn, 3 gru, 4 lstm); torch draws every tensor from U(-1/sqrt(H), 1/sqrt(H)). */
int dt_rec_params(const struct dt_rec_cfg *c, int G, const dt_shape *in, dt_param_spec *ps);
double dt_rec_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in);
/* Host loops, or the backend's fused recurrent op without bptt. */
int dt_rec_supports(const struct dt_rec_cfg *c, const char *backend, unsigned caps, char *why, size_t n);

/* (B, T, F) <-> (T, B, F): the cells run time-major, activations are batch-major. */
void dt_rec_time_major(float *dst, const float *src, int B, int T, int F);
void dt_rec_batch_major(float *dst, const float *src, int B, int T, int F);
/* y = the top layer's sequence (T, B, H) batch-major, or its last step without return_sequences. */
void dt_rec_output(const struct dt_rec_cfg *c, float *y, const float *top, int B, int T);
/* dH (T, B, H) = dL/d(top sequence) from dy: all steps, or only the last without return_sequences. */
void dt_rec_seed_grad(const struct dt_rec_cfg *c, float *dH, const float *dy, int B, int T);

#endif
