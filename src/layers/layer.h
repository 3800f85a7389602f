/* layers/layer.h - the layer vtable and instance. A layer kind is one file that fills a dt_layer_ops
 * and one line in layers/registry.c. Layers parse their own YAML keys, infer shapes, declare their
 * parameters (the graph places them in the flat buffers) and do forward/backward through the
 * backend. Backward overwrites dx and ACCUMULATES (+=) into parameter gradients. */
#ifndef DT_LAYER_H
#define DT_LAYER_H

#include <stdint.h>
#include "layers/tensor.h"
#include "backend/backend.h"
#include "util/yaml_util.h"

#define DT_MAX_PARAMS 16
/* The most tensors one layer reads (add, concat); every other kind reads one. */
#define DT_MAX_INPUTS 16

typedef enum {
        DT_INIT_ZERO = 0, DT_INIT_ONE, DT_INIT_CONST,
        DT_INIT_XAVIER_UNIFORM, DT_INIT_XAVIER_NORMAL, DT_INIT_HE_UNIFORM, DT_INIT_HE_NORMAL,
        DT_INIT_TORCH,       /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        DT_INIT_ORTHOGONAL,  /* reserved for recurrent weights */
        DT_INIT_COUNT
} dt_init;
extern const char *const dt_init_names[]; /* "zeros","ones","const","xavier_uniform",... NULL-terminated */

/* One parameter (or buffer) a layer asks for. Names follow PyTorch: the checkpoint tensor is
 * "<layer name>.<suffix>" with this exact shape (e.g. fc weight (out, in)). */
typedef struct dt_param_spec {
        char suffix[32];
        dt_shape shape;         /* full (unsharded) shape */
        dt_init init;
        float init_arg;         /* DT_INIT_CONST value; gain for xavier/he */
        int fan_in, fan_out;
        int trainable;          /* 0: a buffer (running statistics): saved, no gradient */
        int groups;             /* dim 0 stacks this many gate blocks (lstm 4, gru 3); 0 or 1: one.
                                 * A split divides each block, so a shard holds a slice of every gate */
} dt_param_spec;

/* Tensor parallelism: how a layer is split across the ranks of a tensor group (Megatron-LM's
 * column/row pairing for fc; output channels for conv; hidden units of every gate for recurrent
 * layers). Each kind declares its ways (dt_split_way below); parallel/tensor.c chooses the splits
 * from those declarations and builds each rank's graph, whose split layers run their kind's variant
 * ops (the shard op's answer). */
typedef enum {
        DT_SPLIT_NONE = 0,      /* whole on every rank of the group (replicated) */
        DT_SPLIT_COLUMN,        /* fc: output units split; output all-gathered unless a row layer takes the shard */
        DT_SPLIT_ROW,           /* fc: input units split (a column layer's shard); output all-reduced */
        DT_SPLIT_CHANNEL,       /* conv: output channels split; output all-gathered */
        DT_SPLIT_HIDDEN,        /* rnn/lstm/gru: hidden units of every gate split; h all-gathered each step */
        DT_SPLIT_PASS,          /* an elementwise layer between a column and a row layer: runs on the shard */
        DT_SPLIT_HEADS,         /* attention: heads split (their q, k, v rows, out_proj's columns); output all-reduced */
        DT_SPLIT_COUNT
} dt_split;
extern const char *const dt_split_names[];      /* "none", "column", "row", "channel", "hidden", "pass", "heads" */

/* The collectives of a tensor group, as a layer sees them: layers never call MPI themselves.
 * Each call is collective over the group and waits under the run's deadline. */
typedef struct dt_tp dt_tp;
struct dt_tp {
        int size, rank;
        /* buf (n floats) = its sum over the group */
        void (*allreduce)(const dt_tp *t, float *buf, size_t n);
        /* in: rows x w, this member's columns; out: rows x (w * size), member k's in at columns
         * [k w, (k + 1) w) of every row */
        void (*allgather_cols)(const dt_tp *t, const float *in, float *out, size_t rows, size_t w);
        void *ud;
};

/* What a layer kind declares about its splits (dt_layer_ops.splits); parallel/tensor.c plans from
 * these and nothing else, and prices and reports the collectives they list.
 *
 * The part a split plays among its neighbours: */
typedef enum {
        DT_ROLE_ALONE = 0,      /* the output is whole again after the layer (its shards all-gathered) */
        DT_ROLE_OPENS,          /* the output is this shard's slice, which a CLOSES layer after it takes
                                 * (through PASSES layers only); all-gathered when no such layer follows */
        DT_ROLE_PASSES,         /* elementwise: runs on the slice between an OPENS and a CLOSES layer */
        DT_ROLE_CLOSES,         /* takes an OPENS layer's slice (the split 'takes'); the output is whole */
} dt_split_role;

/* One collective a shard runs: its size is the layer's output, its input, or one time step's hidden
 * state (the output's last dimension) once per step of the input sequence. */
typedef enum { DT_COLL_OUTPUT = 0, DT_COLL_INPUT, DT_COLL_STEP } dt_coll_size;
typedef enum {
        DT_COLL_ALWAYS = 0,
        DT_COLL_IF_GATHER,      /* only when the output is all-gathered (dt_placement.gather) */
        DT_COLL_IF_DX,          /* only when backward makes an input gradient */
} dt_coll_when;
typedef struct dt_split_coll {
        int gather;             /* 0 all-reduce, 1 all-gather */
        int backward;           /* 0 in forward, 1 in backward */
        dt_coll_size size;
        dt_coll_when when;
} dt_split_coll;

#define DT_SPLIT_MAX_COLLS 3
typedef struct dt_split_way {
        dt_split split;
        dt_split_role role;
        const char *what;       /* what it divides, for messages: "its outputs" */
        dt_split takes;         /* CLOSES: the split of the OPENS layer whose slice it reads */
        /* the automatic plan, for an ALONE or OPENS layer left alone: the multiply-adds per float of
         * input and output below which gathering costs more than the shard saves, and the layer stays
         * whole (0: it always splits) */
        double min_work;
        /* the automatic plan splits it or refuses the tensor size (at the key) when a size does not
         * divide, rather than leave it whole on every rank: attention's heads */
        int required;
        int ncoll;
        dt_split_coll coll[DT_SPLIT_MAX_COLLS];
} dt_split_way;

/* Where a layer's slice lives; set by parallel/tensor.c. Single process, data parallelism and
 * pipeline stages leave it zero (DT_SPLIT_NONE, one shard). */
typedef struct dt_placement {
        dt_split split;
        int nshards, shard;     /* the tensor group's size and this rank's index in it */
        int gather;             /* COLUMN: the output is all-gathered (no row layer takes the shard) */
        const dt_tp *tp;        /* the group's collectives; NULL when unsplit */
} dt_placement;

/* Rows x W <-> rows x w: the columns [off, off + w) of every row (host memory). */
void dt_cols_take(float *dst, const float *src, size_t rows, size_t W, size_t off, size_t w);
void dt_cols_put(float *dst, const float *src, size_t rows, size_t W, size_t off, size_t w);

/* Per-call context. Randomness (dropout) is a pure function of (seed, step, layer, global sample
 * position), so N ranks draw what 1 rank draws and a resumed run draws what it would have. */
typedef struct dt_fwd_ctx {
        int training;
        uint64_t seed;
        long step;              /* global optimizer step (0-based) */
        long pos0;              /* position in the global batch of this call's first sample */
} dt_fwd_ctx;

typedef struct dt_layer dt_layer;

typedef struct dt_layer_ops {
        const char *name;       /* the YAML 'type' */
        size_t cfg_size;
        /* Reads the layer's own keys ('type' and 'name' are read by the spec). May be NULL when the
         * layer has no keys. Returns 0, or -1 after reporting into d. */
        int (*parse)(dt_ymap *m, void *cfg, dt_diag *d);
        /* Output shape for input shape. On error writes a reason into why (the graph adds
         * file:line:col) and returns -1. */
        int (*infer)(const void *cfg, const dt_shape *in, dt_shape *out, char *why, size_t whylen);
        /* Parameters and buffers in checkpoint order; returns the count (<= DT_MAX_PARAMS). NULL = none. */
        int (*params)(const void *cfg, const dt_shape *in, const dt_shape *out, dt_param_spec *ps);
        /* Forward multiply-adds x2 per sample. NULL = 0. */
        double (*flops)(const void *cfg, const dt_shape *in, const dt_shape *out);
        /* Backward multiply-adds x2 per sample, with the input gradient (dx 1) or without (0: the
         * first layer). NULL: the forward's once for the input gradient and once more for weights,
         * which is every layer's count but the recurrent ones' (their backward carries dh through
         * the steps, a product as big as the weight_hh gradient's, wanted with or without dx). */
        double (*bwd_flops)(const void *cfg, const dt_shape *in, const dt_shape *out, int dx);
        /* Scratch floats per sample the layer keeps between forward and backward (masks,
         * pre-activations), for the memory plan. NULL = 0. */
        size_t (*scratch)(const void *cfg, const dt_shape *in, const dt_shape *out);
        /* Allocates private state for up to max_batch samples. NULL = nothing to allocate. */
        int (*setup)(dt_layer *l, int max_batch);
        void (*teardown)(dt_layer *l);
        void (*forward)(dt_layer *l, const dt_fwd_ctx *c, const float *x, float *y, int B);
        /* dx may be NULL (first layer: no input gradient wanted). */
        void (*backward)(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                         const float *dy, float *dx, int B);
        const char *summary;    /* one line for --help / man */
        /* Called once after fresh parameter initialisation, not on resume or weight loading
         * (LSTM forget_bias). NULL = nothing. */
        void (*post_init)(dt_layer *l);
        /* Checks n samples of input data once, when the data is loaded (the first layer only):
         * e.g. token ids in range. Returns 0, or -1 with the reason in why. NULL = any floats. */
        int (*check_input)(const void *cfg, const dt_shape *in, const float *x, long n, char *why, size_t len);
        /* Whether a backend with capabilities caps (DT_CAP_*) can run this layer as configured;
         * 0, or -1 with the reason in why. NULL = the core ops suffice (every backend). */
        int (*supports)(const void *cfg, const char *backend, unsigned caps, char *why, size_t len);
        /* The same for limits that depend on the input's shape (asked after supports). NULL = none. */
        int (*supports_shape)(const void *cfg, const dt_shape *in, const char *backend, unsigned caps, char *why,
                              size_t len);
        /* Tensor parallelism: the ways this kind splits (nsplits of them; the automatic plan takes the
         * first ALONE or OPENS one). NULL: it cannot split, nor run on a slice. */
        const dt_split_way *splits;
        int nsplits;
        /* local = a copy of cfg (cfg_size bytes) that makes infer and params give this rank's shapes
         * under pl (one of the splits above, its group size); returns the ops of that split's variant,
         * whose forward and backward communicate through pl->tp (so the kind's own ops carry no split
         * case). NULL, with the reason in why: a size does not divide. NULL hook: a PASSES layer that
         * runs on a slice as it runs whole. */
        const struct dt_layer_ops *(*shard)(const void *cfg, const dt_shape *in, const dt_placement *pl, void *local,
                                            char *why, size_t len);
        /* zb-h1's split backward, both or neither. backward_input overwrites dx (may be NULL) and
         * may rewrite dy in place into what backward_weight needs (e.g. dz = f'(z) dy); backward_weight
         * then ADDS the parameter gradients from x and that dy. NULL: backward does all in the input half. */
        void (*backward_input)(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                               const float *dy, float *dx, int B);
        void (*backward_weight)(dt_layer *l, const dt_fwd_ctx *c, const float *x, const float *y,
                                const float *dy, int B);
        /* Memory-bound layers (elementwise, pooling, normalisation): bytes per sample that the
         * forward (backward == 0) or the backward (1, dx wanted) must move through memory -- each
         * tensor read or written once per pass its math needs (batch norm reads x twice: its
         * statistics come before its output), masks and indices included. `dtrain bench` reports
         * these layers against the measured memory bandwidth. NULL: a compute-bound layer (or none
         * worth reporting), measured against the SGEMM peak. */
        double (*traffic)(const void *cfg, const dt_shape *in, const dt_shape *out, int backward);
        /* Layers that read several tensors (add, concat) fill these three instead of infer, forward
         * and backward, which stay NULL. min_inputs is the fewest they take (2: one input would be
         * a copy). infer_n gets every input's shape and the name of the layer it comes from (for
         * messages). backward_n writes dx[k] (NULL: not wanted), or ADDS into it where acc[k] is set:
         * the graph sums a tensor's gradient over its readers that way. */
        int min_inputs;
        int (*infer_n)(const void *cfg, const dt_shape *in, const char *const *from, int nin, dt_shape *out,
                       char *why, size_t whylen);
        void (*forward_n)(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, float *y, int B);
        void (*backward_n)(dt_layer *l, const dt_fwd_ctx *c, const float *const *x, const float *y,
                           const float *dy, float *const *dx, const int *acc, int B);
        /* After setup: which of its ways the layer computes with, for reports (`dtrain bench`):
         * conv's "im2col" or "onednn"; detail (may be NULL) gets the library's own words for it
         * ("jit:avx512_core"). NULL (the hook, or its answer): the layer has one way. */
        const char *(*impl)(const dt_layer *l, const char **detail);
        /* What backward reads besides dy and the layer's own state, on backend be (NULL: the cpu
         * backend's host loops, which the memory plan assumes when it has no backend): DT_BWD_X its
         * inputs, DT_BWD_Y its output; and DT_BWD_INPLACE when it takes dx == dy (every dx value
         * written after the dy values it needs are read, none read again). Recomputation keeps a
         * remade tensor only while a backward reads it, and lets such a layer's input gradient take
         * its output gradient's place (graph/recompute.c). NULL: DT_BWD_X | DT_BWD_Y. */
        unsigned (*bwd_reads)(const dt_layer *l, const dt_backend *be);
        /* This layer and the next one as one op each way, where the graph pairs them (graph/pairs.c:
         * the next layer alone reads this one's output mid, which leaves neither the graph nor its
         * chunk and is not recomputed). forward_pair writes the next layer's output y from x;
         * backward_pair this layer's dx (may be NULL) from the next one's dy, and ADDS the parameter
         * gradients as backward does. Either may leave mid and its gradient dmid unwritten, or run
         * the two layers' own ops where it cannot fuse them. NULL: never paired. */
        void (*forward_pair)(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, float *mid, float *y,
                             int B);
        void (*backward_pair)(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, const float *mid,
                              const float *y, const float *dy, float *dmid, float *dx, int B);
} dt_layer_ops;

enum { DT_BWD_X = 1, DT_BWD_Y = 2, DT_BWD_INPLACE = 4 };

struct dt_layer {
        const dt_layer_ops *ops;
        const void *cfg;
        const char *name;       /* "fc1" */
        int index;
        dt_shape in, out;       /* in: the first input's shape (the only one but for add and concat) */
        /* The tensors it reads, as the graph's tensor ids (graph.h: 0 the graph's input, i + 1 layer
         * i's output, n + 1 + k its k-th extra input), their shapes, and whether backward ADDS into
         * each one's gradient (an earlier-run reader in backward, i.e. a later layer, wrote it first). */
        int nin;
        int src[DT_MAX_INPUTS];
        dt_shape ins[DT_MAX_INPUTS];
        int acc[DT_MAX_INPUTS];
        int np;
        dt_param_spec ps[DT_MAX_PARAMS];
        float *p[DT_MAX_PARAMS];        /* views into the parameter (or buffer) flat buffer */
        float *g[DT_MAX_PARAMS];        /* views into the gradient buffer; NULL for buffers */
        size_t off[DT_MAX_PARAMS];      /* offset in its flat buffer, in floats */
        size_t len[DT_MAX_PARAMS];      /* local element count */
        dt_placement place;
        int recompute;                  /* partition.recompute marked it (graph/recompute.c) */
        dt_backend *be;
        void *priv;                     /* state from setup() */
};

/* ---- registry ---- */
const dt_layer_ops *dt_layer_find(const char *type);
/* NULL-terminated list of all kinds, registry order. */
extern const dt_layer_ops *const dt_layer_kinds[];
int dt_layer_kind_count(void);

/* Shared parse helper for layers with an activation key. */
int dt_parse_act(dt_ymap *m, const char *key, dt_act *out, float *alpha, dt_act def);
int dt_parse_init(dt_ymap *m, const char *key, dt_init *out, dt_init def);

/* For a layer's supports op: host loops, or the fused op 'fused' (a DT_CAP_*) named 'what'. */
int dt_layer_host_or(unsigned caps, unsigned fused, const char *backend, const char *what, char *why, size_t n);

/* Random bits for per-sample randomness: a counter-based hash (splitmix64 chain). */
uint64_t dt_hash64(uint64_t a, uint64_t b);

#endif
