/* spec/cluster_spec.h - the cluster YAML (dtrain-cluster(5)) as plain C structs: ranks, threads,
 * devices, network figures and the partitioning. The same keys may appear in the model spec's
 * 'parallel:' section; a key set in the cluster file wins over the model's. */
#ifndef DT_CLUSTER_SPEC_H
#define DT_CLUSTER_SPEC_H

#include <stdint.h>
#include "util/yaml_util.h"

struct dt_model_spec;

typedef enum { DT_PART_DATA = 0, DT_PART_MODEL, DT_PART_HYBRID, DT_PART_AUTO, DT_PART_COUNT } dt_part_strategy;
typedef enum { DT_SYNC_ALLREDUCE = 0, DT_SYNC_AVERAGE, DT_SYNC_SSP, DT_SYNC_COUNT } dt_sync_kind;
typedef enum { DT_COMP_NONE = 0, DT_COMP_FP16, DT_COMP_TOPK, DT_COMP_BF16, DT_COMP_POWERSGD, DT_COMP_THRESHOLD,
               DT_COMP_AUTO,
               DT_COMP_COUNT } dt_comp_kind;
extern const char *const dt_part_names[], *const dt_sync_names[], *const dt_comp_names[];
/* partition.hierarchical: the index is parallel/hier.h's mode (0 auto, 1 off, 2 on) */
extern const char *const dt_hier_names[];       /* "auto", "false", "true" */
/* elastic: what an elastic relaunch does with a fixed layout that no longer fits (train/elastic.h) */
extern const char *const dt_elastic_names[];    /* "replan", "strict" */

/* Bits of dt_cluster_spec.set: which keys were given (so the cluster file can override the model's
 * 'parallel:' section key by key). A key is its field below, its bit here and one row in
 * cluster_spec.c's key table, which parsing, defaults, merging and the mode checks all read. */
typedef uint64_t dt_cs_bits;
#define DT_CS_RANKS      (UINT64_C(1) << 0)
#define DT_CS_THREADS    (UINT64_C(1) << 1)
#define DT_CS_DEVICE     (UINT64_C(1) << 2)
#define DT_CS_LATENCY    (UINT64_C(1) << 3)
#define DT_CS_BANDWIDTH  (UINT64_C(1) << 4)
#define DT_CS_STRATEGY   (UINT64_C(1) << 5)
#define DT_CS_SYNC       (UINT64_C(1) << 6)
#define DT_CS_BUCKET     (UINT64_C(1) << 7)
#define DT_CS_EVERY      (UINT64_C(1) << 8)
#define DT_CS_STALENESS  (UINT64_C(1) << 9)
#define DT_CS_COMPRESSION (UINT64_C(1) << 10)
#define DT_CS_TOPK       (UINT64_C(1) << 11)
#define DT_CS_REPRO      (UINT64_C(1) << 12)
#define DT_CS_CHUNKS     (UINT64_C(1) << 13)
#define DT_CS_MICRO      (UINT64_C(1) << 14)
#define DT_CS_TIMEOUT    (UINT64_C(1) << 15)
#define DT_CS_COMM       (UINT64_C(1) << 16)
#define DT_CS_GDATA      (UINT64_C(1) << 17)
#define DT_CS_GPIPE      (UINT64_C(1) << 18)
#define DT_CS_GTENSOR    (UINT64_C(1) << 19)
#define DT_CS_STAGES     (UINT64_C(1) << 20)
#define DT_CS_MICROS     (UINT64_C(1) << 21)
#define DT_CS_SCHEDULE   (UINT64_C(1) << 22)
#define DT_CS_SPLITS     (UINT64_C(1) << 23)
#define DT_CS_CORES      (UINT64_C(1) << 24)
#define DT_CS_RPN        (UINT64_C(1) << 25)
#define DT_CS_ILAT       (UINT64_C(1) << 26)
#define DT_CS_IBW        (UINT64_C(1) << 27)
#define DT_CS_CONV       (UINT64_C(1) << 28)
#define DT_CS_EAGER      (UINT64_C(1) << 29)
#define DT_CS_SENDUS     (UINT64_C(1) << 30)
#define DT_CS_SENDBW     (UINT64_C(1) << 31)
#define DT_CS_RECOMPUTE  (UINT64_C(1) << 32)
#define DT_CS_SHARD      (UINT64_C(1) << 33)
#define DT_CS_MEMORY     (UINT64_C(1) << 34)
#define DT_CS_SNAPSHOTS  (UINT64_C(1) << 35)
#define DT_CS_HIER       (UINT64_C(1) << 36)
#define DT_CS_PSGD_RANK  (UINT64_C(1) << 37)
#define DT_CS_THRESHOLD  (UINT64_C(1) << 38)
#define DT_CS_THR_MIN    (UINT64_C(1) << 39)
#define DT_CS_THR_MAX    (UINT64_C(1) << 40)
#define DT_CS_VSTAGES    (UINT64_C(1) << 41)
#define DT_CS_ELASTIC    (UINT64_C(1) << 42)
#define DT_CS_CX_WARMUP  (UINT64_C(1) << 43)
#define DT_CS_NKEYS 44                  /* number of DT_CS_* bits */
#define DT_MAX_SPLITS 64
#define DT_MAX_STAGES 64

/* in parallel/schedule.h's dt_schedule_kind order */
typedef enum { DT_PIPE_GPIPE = 0, DT_PIPE_1F1B, DT_PIPE_ZBH1, DT_PIPE_INTERLEAVED, DT_PIPE_ZBV,
               DT_PIPE_VHALF, DT_PIPE_COUNT } dt_pipe_schedule;
extern const char *const dt_pipe_names[];       /* "gpipe", "1f1b", "zb-h1", "interleaved", "zb-v", "v-half" */

/* partition.stages: the first layer of each stage after the first, by name */
typedef struct dt_stage_cuts {
        int n;
        char name[DT_MAX_STAGES - 1][64];
        dt_pos pos[DT_MAX_STAGES - 1];
} dt_stage_cuts;

/* partition.splits: how layers split across a tensor group, by layer name or glob pattern
 * (fnmatch), in the order written; the first pattern that matches a layer wins */
typedef struct dt_split_rules {
        int n;
        char pattern[DT_MAX_SPLITS][64];
        int how[DT_MAX_SPLITS];         /* dt_split (layers/layer.h): none, column, row, channel, hidden, heads */
        dt_pos pos[DT_MAX_SPLITS];      /* the pattern's key */
} dt_split_rules;

/* partition.recompute: which layers remake their outputs in backward instead of keeping them
 * (graph/recompute.c says how each mode picks them) */
typedef enum { DT_RECOMPUTE_NONE = 0, DT_RECOMPUTE_ALL, DT_RECOMPUTE_AUTO, DT_RECOMPUTE_LIST } dt_recompute_mode;
#define DT_MAX_RECOMPUTE 64
typedef struct dt_recompute_rules {
        dt_recompute_mode mode;
        int n;                          /* DT_RECOMPUTE_LIST: layer names or glob patterns (fnmatch) */
        char pattern[DT_MAX_RECOMPUTE][64];
        dt_pos pos[DT_MAX_RECOMPUTE];   /* each pattern's place in the file */
} dt_recompute_rules;

typedef struct dt_cluster_spec {
        char file[DT_PATH_MAX];         /* where the keys came from (for messages) */
        dt_cs_bits set;                 /* DT_CS_* bits of the keys given */
        int ranks;                      /* 0 = whatever MPI says; else must equal the MPI world size */
        dt_pos ranks_pos;
        int threads_per_rank;           /* 0 = cores on the node / ranks on the node */
        char device[16];                /* cpu | cuda | auto; "" = the model's */
        int conv;                       /* dt_conv_algo (backend.h): the cpu backend's convolutions */
        double latency_us;              /* network alpha, microseconds (default 1) */
        double bandwidth_gbs;           /* network beta, GB/s (default 10) */
        double intra_latency_us;        /* inside a node (shared memory); 0 = the planner's measurement */
        double intra_bandwidth_gbs;
        double eager_kb;                /* network messages up to this go at once; longer ones send
                                         * the rest after the receiver's answer (default 64: Open
                                         * MPI's TCP transport) */
        double send_overhead_us;        /* a network send's cost to its own core (LogP's o), and */
        double send_overhead_gbs;       /* its bytes' rate, within the eager limit; 0: none */
        int cores_per_node;             /* 0 = this machine's */
        int ranks_per_node;             /* 0 = every rank on one node (the planner), or as launched */
        int elastic;                    /* a relaunch on fewer ranks: 0 replan (default), 1 strict */
        /* partition: */
        dt_part_strategy strategy;      /* data (default) | model | hybrid | auto */
        dt_pos strategy_pos;
        dt_sync_kind sync;              /* allreduce (default) | average | ssp */
        double bucket_mb;               /* allreduce bucket size, MiB (default 1) */
        int average_every;              /* average: k steps between parameter averaging (default 1) */
        int staleness;                  /* ssp: s, max steps a rank may run ahead (default 2) */
        dt_comp_kind compression;       /* none (default) | fp16 | topk | bf16 | powersgd | threshold | auto
                                         * (resolved by dt_setup_backend: never auto after it) */
        double topk_ratio;              /* topk: fraction of each large matrix's entries sent a step (default 0.2) */
        int powersgd_rank;              /* powersgd: rank r of the factors (default 4) */
        int compression_warmup;         /* topk, powersgd: the first steps summed uncompressed */
        double threshold;               /* threshold: starting tau (default 1e-3; 0: exact) */
        double threshold_min_density;   /* threshold: tau adapts to keep the units of tau sent per */
        double threshold_max_density;   /* entry and rank in [min, max] (default 0.5, 2) */
        int reproducible;               /* bitwise-identical results for any rank count */
        int chunks;                     /* reproducible: chunks per global batch (default 16) */
        int micro_batch;                /* per-rank micro-batch limit; 0 = the whole slice */
        int shard;                      /* sharded data parallelism: 0 none, 1 moments, 2 + gradients */
        int hierarchical;               /* two-level all-reduce: 0 auto (default), 1 false, 2 true */
        double collective_timeout;      /* seconds (default 300) */
        double memory_per_rank;         /* bytes one rank may use; 0: the machine's available memory shared by its ranks */
        dt_pos memory_pos;              /* where memory_per_rank's value was written */
        int checkpoint_snapshots;       /* copies of the model the checkpoint writer may hold at once (1 or 2, default 1) */
        char comm[16];                  /* mpi (default) | nccl */
        /* the process grid (model and hybrid): degrees whose product is the rank count; 0 = chosen */
        int grid_data, grid_pipeline, grid_tensor;
        dt_stage_cuts cuts;             /* n = 0: stages balanced by the layers' cost */
        int micro_batches;              /* pipeline micro-batches per data replica's slice; 0 = chosen */
        dt_pipe_schedule schedule;      /* default 1f1b */
        int virtual_stages;             /* chunks per pipeline stage: 2 for interleaved, zb-v, v-half unless
                                         * given, else 1 */
        dt_split_rules splits;          /* n = 0: every layer that can split does (parallel/tensor.h) */
        dt_recompute_rules recompute;   /* mode none: every layer keeps what backward reads */
        /* added for validate and merge: */
        dt_pos key_pos[DT_CS_NKEYS];    /* each given key's key node, by DT_CS_* bit number */
        dt_cs_bits bad;                 /* DT_CS_* bits of keys given with a bad value (reported) */
        dt_cs_bits alt_set;             /* after a merge: bits that came from alt_file (the base); */
        char alt_file[DT_PATH_MAX];     /* the others came from file (the override) */
} dt_cluster_spec;

/* Defaults for everything, set = 0. */
void dt_cluster_spec_init(dt_cluster_spec *c);
/* Reads the keys of one mapping node (a cluster file's root, or the model's 'parallel:' value)
 * into c, marking c->set. Returns 0 or -1 with errors in d. */
int dt_cluster_spec_parse(dt_cluster_spec *c, dt_ydoc *y, yaml_node_t *node, dt_diag *d);
/* Loads a cluster file (c is initialised first). */
int dt_cluster_spec_load(dt_cluster_spec *c, const char *path, dt_diag *d);
/* Same, with the cluster spec's --set overrides in sets (spec/overrides.h) applied first. */
struct dt_sets;
int dt_cluster_spec_load_sets(dt_cluster_spec *c, const char *path, const struct dt_sets *sets, dt_diag *d);
/* The cluster spec's top-level keys and sections (up to max, in table order, each once) into out;
 * returns the count. */
int dt_cluster_spec_top_keys(const char **out, int max);
/* dst = base with every key set in over replacing base's. base and over are parsed specs (not
 * merged ones); dst may be either. Positions keep pointing into the file each key came from. */
void dt_cluster_spec_merge(dt_cluster_spec *dst, const dt_cluster_spec *base, const dt_cluster_spec *over);
/* Checks against the run: MPI world size, batch; strategies this build cannot run yet are
 * reported here as errors at their position. Also reports keys that do not apply to a mode set
 * in the other file or left at its default (one mapping's own conflicts are parse errors), so
 * call it for every run, with or without a cluster file. m may be NULL (no batch checks).
 * Returns 0 or -1 with errors in d. */
int dt_cluster_spec_validate(const dt_cluster_spec *c, const struct dt_model_spec *m, int world_size, dt_diag *d);
/* topk's warm-up when compression_warmup is not given: the longer of its default and the model's
 * learning-rate warm-up (Deep Gradient Compression warms up over the learning rate's warm-up); any
 * other method, or a given key, keeps c's value. m may be NULL. */
int dt_cluster_cx_warmup(const dt_cluster_spec *c, const struct dt_model_spec *m);
/* What setup has built by the time the graph exists and the backend is open, for the checks that
 * depend on it. */
typedef struct dt_cluster_run {
        size_t nparams;         /* floats in the gradient (the graph's trainable parameters) */
        long repro_nodes;       /* reproducible: tree nodes gathered per step, all ranks together
                                 * (dt_repro_nodes(chunks, world_size), parallel/dp.h) */
        int device_sync;        /* a device backend sums the gradient over several ranks */
        int device;             /* the backend is a device's (no host loops) */
        int nccl;               /* ... and can do it through NCCL (built with it) */
        const char *no_onednn;  /* conv: onednn cannot run here, and why; NULL: it can, or was not asked */
} dt_cluster_run;

/* The checks that need what setup built: reproducible mode gathers repro_nodes x nparams floats
 * in one MPI message (whose count is an int); 'comm: nccl' needs NCCL where a device backend sums
 * over several ranks; 'conv: onednn' needs oneDNN. Errors at the key, as validate's. Returns 0 or -1
 * with errors in d. */
int dt_cluster_spec_validate_run(const dt_cluster_spec *c, const dt_cluster_run *r, dt_diag *d);
/* The grid the spec asks for on world_size ranks: data x pipeline x tensor (grid[0..2]). Degrees not
 * given are chosen: data strategy -> world x 1 x 1; model -> 1 x world x 1; hybrid -> the pipeline
 * the smallest factor of world above 1 that nlayers allows (data the rest). Errors at the keys
 * (a product that is not world_size names both numbers). */
int dt_cluster_grid(const dt_cluster_spec *c, int world_size, int nlayers, int grid[3], dt_diag *d);
/* Chunks per pipeline stage: partition.virtual_stages, or its default (2 for interleaved, zb-v and
 * v-half, else 1). */
int dt_cluster_virtual_stages(const dt_cluster_spec *c);
/* The file a given key came from (after a merge, either file), for messages at its position. */
const char *dt_cluster_spec_file_of(const dt_cluster_spec *c, dt_cs_bits bit);
/* Where a given key is written in that file (its key node); 0:0 when it was not given. */
dt_pos dt_cluster_spec_pos_of(const dt_cluster_spec *c, dt_cs_bits bit);
/* Prints every key the cluster parser accepts as "cluster.key" / "cluster.partition.key". */
void dt_cluster_spec_list_keys(FILE *f);

#endif
