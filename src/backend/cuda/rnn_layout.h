/* backend/cuda/rnn_layout.h - maps recurrent weights between dtrain's (PyTorch's) per-tensor
 * layout and cuDNN's flat weight space. Pure host code: the offsets come in a table (on a GPU,
 * from cudnnGetRNNWeightParams), and the mapping is a list of contiguous copies that the caller
 * applies with memcpy (tests) or cudaMemcpyAsync (the backend).
 *
 * PyTorch, per layer k: weight_ih_l{k} (G*H, I_k), weight_hh_l{k} (G*H, H), bias_ih_l{k} (G*H),
 * bias_hh_l{k} (G*H); gate g's block is rows [g*H, (g+1)*H). G = 1 (rnn), 4 (lstm: i,f,g,o),
 * 3 (gru: r,z,n). cuDNN, per pseudo-layer k: linear layer ids 0..G-1 are the input-side matrices
 * (H, I_k) row-major in the same gate order, ids G..2G-1 the recurrent ones (H, H); with
 * CUDNN_RNN_DOUBLE_BIAS each id has its own bias (H) (the GRU's recurrent n-bias sits inside
 * r * (.), as in PyTorch). So every gate block is one contiguous copy. */
#ifndef DT_RNN_LAYOUT_H
#define DT_RNN_LAYOUT_H

#include <stddef.h>

#define DT_RNN_LAYOUT_MAX_LAYERS 8
#define DT_RNN_LAYOUT_MAX_GATES 4

typedef struct dt_rnn_shape {
        int gates;              /* G: 1, 3 or 4 */
        int I, H, L;            /* input features, hidden size, layers */
        int bias;
} dt_rnn_shape;

/* Offsets in floats from the start of the flat weight space, per layer and linear layer id
 * (0 .. 2G-1): the matrix and (when bias) the bias vector. */
typedef struct dt_rnn_offsets {
        size_t w[DT_RNN_LAYOUT_MAX_LAYERS][2 * DT_RNN_LAYOUT_MAX_GATES];
        size_t b[DT_RNN_LAYOUT_MAX_LAYERS][2 * DT_RNN_LAYOUT_MAX_GATES];
} dt_rnn_offsets;

/* One contiguous copy between tensor 'tensor' (index in PyTorch order, as the layer's params)
 * at element 'toff' and the flat space at 'foff'. */
typedef struct dt_rnn_seg {
        int tensor;
        size_t toff, foff, len;
} dt_rnn_seg;

/* Tensors of a shape in PyTorch order (2 or 4 per layer). */
int dt_rnn_layout_ntensors(const dt_rnn_shape *s);
/* Elements of tensor t. */
size_t dt_rnn_layout_tensor_len(const dt_rnn_shape *s, int t);
/* Maximum segments a shape needs: L * 2G * (bias ? 2 : 1). */
int dt_rnn_layout_nsegs(const dt_rnn_shape *s);
/* Fills segs (room for dt_rnn_layout_nsegs) from the offsets; checks that no segment leaves a
 * flat space of 'flat_len' floats and that segments do not overlap there. Returns the count, or
 * -1 with a reason in why. */
int dt_rnn_layout_plan(const dt_rnn_shape *s, const dt_rnn_offsets *o, size_t flat_len,
                       dt_rnn_seg *segs, char *why, size_t whylen);
/* Host application: flat <- tensors, tensors <- flat (accumulate: +=). */
void dt_rnn_layout_pack(const dt_rnn_seg *segs, int n, const float *const *tensors, float *flat);
void dt_rnn_layout_unpack(const dt_rnn_seg *segs, int n, const float *flat, float *const *tensors,
                          int accumulate);

#endif
