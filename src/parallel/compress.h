/* parallel/compress.h - the gradient compressors bf16, powersgd and threshold behind one small
 * interface for dp.c: each turns this rank's gradient, bucket by bucket, into (an approximation of)
 * the sum over the ranks that is the same on every rank, exchanging fewer bytes than the fp32 sum. */
#ifndef DT_COMPRESS_H
#define DT_COMPRESS_H

#include "graph/graph.h"
#include "parallel/comm.h"
#include "spec/cluster_spec.h"

struct dt_bucket;
typedef struct dt_cx dt_cx;

/* What a checkpoint keeps of a compressor, as views of its live arrays (a resume writes into them):
 * this rank's residual, what it has not sent yet (the ranks' residuals summed are what the run
 * still owes the model, so they may be summed onto fewer ranks), and the state every data rank
 * holds the same (threshold's tau per bucket as the bits of doubles, powersgd's warm-start Q). */
typedef struct dt_cx_state {
        float *res;             /* nres floats (the rank graph's nparams), NULL when none */
        size_t nres;
        void *shared;           /* nshared floats' worth of bytes, NULL when none */
        size_t nshared;
} dt_cx_state;

/* One method: its state, what starts when a bucket's gradient is complete (NULL: nothing; the
 * whole exchange then runs in finish), and what finishes bucket j into g->grads. */
typedef struct dt_cx_ops {
        void *(*init)(dt_cx *c);
        void (*start)(dt_cx *c, void *st, int j);
        void (*finish)(dt_cx *c, void *st, int j);
        void (*free)(void *st);
        void (*state)(dt_cx *c, void *st, struct dt_cx_state *out);
} dt_cx_ops;

struct dt_cx {
        const dt_cx_ops *ops;
        void *st;
        const dt_cluster_spec *cs;
        dt_comm *comm;
        dt_graph *g;
        const struct dt_bucket *b;
        int nb;
        long sent;              /* bytes of this rank's messages in the last step, all buckets: what an
                                 * all-reduce reduces, what an all-gather gathers from it */
        double t_encode;        /* seconds spent encoding and decoding, summed over steps */
        /* per bucket, for dtrain bench: the last step's bytes, and encode/decode seconds summed
         * over the steps */
        long *bucket_sent;
        double *bucket_encode;
        long steps;
};

/* NULL unless cs->compression is bf16, powersgd or threshold (fp16 and topk live in dp.c). */
dt_cx *dt_cx_new(const dt_cluster_spec *cs, dt_comm *comm, dt_graph *g, const struct dt_bucket *b, int nb);
void dt_cx_free(dt_cx *c);
/* Bucket j's gradient (g->grads over its slice) is complete; only on more than one rank. */
void dt_cx_start(dt_cx *c, int j);
/* Every bucket: g->grads = the compressed sum over the ranks. */
void dt_cx_finish(dt_cx *c);
/* The views of c's state (all empty for c NULL). */
void dt_cx_state_of(dt_cx *c, dt_cx_state *out);

extern const dt_cx_ops dt_cx_bf16, dt_cx_powersgd, dt_cx_threshold;

/* threshold's pure parts. Residual res += g over n entries; an entry at or past +-tau sends the
 * whole units of tau it holds, at most qmax, into q[i] (signed), and they leave its residual; the
 * residual is then clipped to +-5 tau. Returns the units (sum of |q|). */
size_t dt_threshold_encode(float *res, const float *g, size_t n, float tau, int qmax, int8_t *q);
/* q's units as codes, one int32 a unit (the entry's index + 1, negated for -tau); returns them. */
size_t dt_threshold_codes(const int8_t *q, size_t n, int32_t *code);
/* The next step's tau from this step's density (codes over all ranks / (ranks x entries)) and
 * the target range [lo, hi]. */
double dt_threshold_adapt(double tau, double density, double lo, double hi);

/* powersgd's rule for a parameter tensor of n entries: 1 when its gradient is sent as rank-r
 * factors, rows x cols (the first dimension by the rest; only where 2 r (rows + cols) < rows cols),
 * 0 when it goes dense. */
int dt_powersgd_factors(const dt_param_spec *ps, size_t n, int r, size_t *rows, size_t *cols);

/* topk's rule for a parameter tensor of n entries: how many it sends a step at density ratio. A
 * tensor that is not a matrix (biases, batch norm) or has fewer than DT_TOPK_MIN_ENTRIES goes
 * whole, as Deep Gradient Compression sends biases and size-adaptive compressors (hivemind's
 * SizeAdaptiveCompression) send small tensors: their pairs would save few bytes, and lenet at
 * ratio 0.1 ended 83.49% with every matrix sparse, 84.05% with the three under 10000 entries
 * whole; a matrix sends its own ceil(ratio n) largest (at least 1), so that no layer waits
 * behind a larger one's entries; a buffer nothing. */
#define DT_TOPK_MIN_ENTRIES 16384
size_t dt_topk_keep(const dt_param_spec *ps, size_t n, double ratio);

/* bf16 round to nearest even (NaN kept a quiet NaN), and back. */
uint16_t dt_bf16_round(float f);
float dt_bf16_float(uint16_t h);

#endif
