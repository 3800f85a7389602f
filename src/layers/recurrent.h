/* layers/recurrent.h - what rnn, lstm and gru share: their common keys, the (T,F) -> (T,H) or (H)
 * shape rule, PyTorch's per-layer tensors (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
 * bias_hh_l{k} with G gate blocks of H rows), the FLOP count, and one driver that runs them: the
 * time-major layout, each layer's input GEMM over all steps, the loop over steps with its recurrent
 * products, the weight and input gradients, the device backends' fused op and the split's
 * collectives. A kind gives only its cell (dt_rec_kind): the math of one step and its buffers.
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
/* backward's per sample: both weight gradients, dh carried through the steps, the inner layers'
 * input gradients and, with dx, layer 0's */
double dt_rec_bwd_flops(const struct dt_rec_cfg *c, int G, const dt_shape *in, int dx);
/* Host loops, or the backend's fused recurrent op without bptt (and unsplit). */
int dt_rec_supports(const struct dt_rec_cfg *c, const char *backend, unsigned caps, char *why, size_t n);
/* The one way they split: hidden units, h gathered each step forward, its gradient summed each
 * step backward, dx summed once. */
extern const dt_split_way dt_rec_splits[];
/* The shard op's common part: lc (a copy of c) split as pl says (H divisible by the group size). */
int dt_rec_shard(const struct dt_rec_cfg *c, const dt_placement *pl, struct dt_rec_cfg *lc, char *why, size_t n);

/* ---- the driver ---- */

#define DT_REC_MAX_LAYERS 4

/* One step of one layer for the rows [r0, r0 + nr) of a batch of B, as a cell sees it. Pointers are
 * at row r0 of (B, U) blocks (U = H/t, this rank's units), except gh's of (B, G U). */
typedef struct dt_rec_step {
        int k, t, B;
        long r0;
        int nr;
        int thread;             /* which of the threads running the row ranges (0 .. nt-1) */
        float *h;               /* this step's h on the rank's units: the cell's output forward */
        const float *hp;        /* the previous step's; NULL at t = 0 */
        const float *gh;        /* forward, hidden_apart kinds: h_{t-1} W_hh^T; NULL at t = 0 */
        float *dh;              /* backward: dL/dh_t, complete (from above and from step t + 1) */
        float *dhp;             /* backward: dL/dh_{t-1}, which the cell may add its direct path to; NULL
                                 * at t = 0 and at a bptt cut, where the carried state counts as a constant */
} dt_rec_step;

/* What a kind gives the driver. Its private state starts with a struct dt_rec_state. */
typedef struct dt_rec_kind {
        int G;                  /* gate blocks: 1 rnn, 3 gru, 4 lstm */
        int hidden_apart;       /* the step's h_{t-1} W_hh^T goes to its own buffer (gru: r scales part of
                                 * it), else it is added into the gate pre-activations */
        int keeps_h;            /* backward reads the units' h of every step (a split keeps them all) */
        int rows;               /* threads may run the steps of disjoint row ranges (whole layers only) */
        int stepgemm;           /* the step GEMMs go through dt_stepgemm where it applies */
        size_t priv_size;
        dt_rnn_mode (*mode)(const void *cfg);   /* the device backends' fused op */
        /* the kind's own buffers for Bm samples, T steps, U units (o->alloc'd); freed by release */
        void (*alloc)(dt_layer *l, size_t Bm, size_t T, size_t U);
        void (*release)(dt_layer *l);
        /* (T, B, G U) of layer k: the input GEMM writes x W_ih^T there, for the cells */
        float *(*gates)(dt_layer *l, int k);
        void (*layer_fwd)(dt_layer *l, int k, int B);   /* after the input GEMM (biases); may be NULL */
        void (*cell_fwd)(dt_layer *l, const dt_rec_step *s);
        /* a row range's backward of layer k starts (thread t0): zero its accumulators; may be NULL */
        void (*bwd_begin)(dt_layer *l, int k, int B, int t0, long r0, int nr);
        /* returns dG_t at row r0, (nr, G U): what dL/dh_{t-1} gets dG_t W_hh from */
        const float *(*cell_bwd)(dt_layer *l, const dt_rec_step *s);
        /* after layer k's steps (dL: its dL/dh on the units, (T, B, U)): dA (T, B, G U) for dW_ih and
         * dx, dGH for dW_hh (its steps 1 .. T-1), and the bias gradients' sums dbi, dbh (G U) */
        void (*grads)(dt_layer *l, int k, int B, float *dL, const float **dA, const float **dGH,
                      const float **dbi, const float **dbh);
} dt_rec_kind;

struct dt_rec_split;

/* The driver's state, the first member of a kind's private state. */
struct dt_rec_state {
        const dt_rec_kind *kind;
        const struct dt_rec_split *sp;  /* whole, or split by hidden unit: the collectives */
        int Bm, U, nt;                  /* nt: dt_par_threads at setup */
        int rows_nt;                    /* threads the steps may take (1: the caller's alone) */
        int ran_nt;                     /* threads the last backward's steps ran on */
        dt_rnn_desc dd;                 /* device backends: the fused op's plan (dd.state set) */
        float *xt;                      /* (T, Bm, F) the input, time-major */
        float *h[DT_REC_MAX_LAYERS];    /* (T, Bm, H) each layer's output sequence */
        float *dh[2];                   /* (T, Bm, max(F,H)) ping-pong: d(loss)/d(a layer's output, then input) */
        float *gh;                      /* (Bm, G U) hidden_apart: a step's h_{t-1} W_hh^T */
        float *whht;                    /* W_hh^T (H x G U) of the layer being run, packed for dt_stepgemm;
                                         * NULL: the backend's gemm */
        float *whhp;                    /* W_hh (G U x H) likewise, for the backward's carry */
        /* where a cell's h on the rank's units goes: hu[k] + (t B + row) hu_w + ... (whole: the output
         * sequence itself, hu_w = H; split: hl, (T, B, U) per layer, or one step's (B, U) with hu_w 0) */
        float *hu[DT_REC_MAX_LAYERS];
        int hu_w;
        /* split only (NULL whole): */
        float *hl[DT_REC_MAX_LAYERS];   /* keeps_h: (T, Bm, U) per layer; else hl[0] (Bm, U) */
        float *dhl;                     /* (T, Bm, U) this rank's columns of dH */
        float *part;                    /* (Bm, H) a step's dG_t W_hh, this rank's part of the sum */
};

/* The layer ops the kinds share: setup for the whole layer or its hidden-unit shard (the split's
 * variant ops use the second), forward, backward, teardown. */
int dt_rec_setup_whole(dt_layer *l, int max_batch, const dt_rec_kind *kind);
int dt_rec_setup_hidden(dt_layer *l, int max_batch, const dt_rec_kind *kind);
void dt_rec_teardown(dt_layer *l);
void dt_rec_forward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, float *y, int B);
void dt_rec_backward(dt_layer *l, const dt_fwd_ctx *ctx, const float *x, const float *y, const float *dy,
                     float *dx, int B);
/* scratch floats per sample of the driver's buffers (the kind adds its own) */
size_t dt_rec_scratch(const struct dt_rec_cfg *c, const dt_shape *in, int keeps_h);
/* layer k's parameters: weight_ih, weight_hh, bias_ih, bias_hh (NULL without bias) */
static inline float *dt_rec_p(const dt_layer *l, int k, int which)
{
        const struct dt_rec_cfg *c = l->cfg;
        return which < 2 || c->bias ? l->p[(c->bias ? 4 : 2) * k + which] : NULL;
}

/* (B, T, F) <-> (T, B, F): the cells run time-major, activations are batch-major. */
void dt_rec_time_major(float *dst, const float *src, int B, int T, int F);
void dt_rec_batch_major(float *dst, const float *src, int B, int T, int F);
/* y = the top layer's sequence (T, B, H) batch-major, or its last step without return_sequences. */
void dt_rec_output(const struct dt_rec_cfg *c, float *y, const float *top, int B, int T);
/* dH (T, B, H) = dL/d(top sequence) from dy: all steps, or only the last without return_sequences. */
void dt_rec_seed_grad(const struct dt_rec_cfg *c, float *dH, const float *dy, int B, int T);

#endif
