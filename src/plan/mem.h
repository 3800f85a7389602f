/* plan/mem.h - the per-rank memory plan: the one function that the run's check, `dtrain check`,
 * `dtrain bench`, the planner's dt_prediction.mem and `dtrain plan` take their figure from, term
 * by term (parameters, gradients, moments, activations, snapshots, data, fixed), in bytes.
 *
 * Every buffer dtrain allocates for a rank is written once when allocated (dt_falloc zeroes it), so
 * what is planned here is resident: the run's measured peak (VmHWM) is the plan plus what the
 * kernel maps on its own. The ZeRO stage is an input, and the recomputed layers are g's own marks
 * (dt_graph_set_recompute: dt_graph_memory_slots counts what they keep), so that sharding and
 * recomputation change the plan here and nowhere else. */
#ifndef DT_PLAN_MEM_H
#define DT_PLAN_MEM_H

#include <stddef.h>
#include "graph/graph.h"

typedef struct dt_mem_in {
        const dt_graph *g;      /* this rank's graph: its pipeline stage, its tensor shard */
        int batch;              /* samples one slot's activations hold: the largest forward a step runs */
        int nslots;             /* micro-batches in flight (a pipeline's slots); 0 or 1: one */
        int nmoments;           /* the optimizer's moments per parameter */
        int dp, shard;          /* data-parallel replicas, and the ZeRO stage over them: 1 divides
                                 * the moments by dp; 2 adds the ring reduce-scatter's receive buffer
                                 * (the gradient buffer stays whole: a rank's parts stay where they
                                 * lie); 3 also divides the parameters and gradients (and adds the
                                 * gathered buckets, parallel/shard.h) */
        double bucket_mb;       /* partition.bucket_mb: shard 3 gathers per bucket */
        int mixed;              /* the data axis shares the grid with pipeline or tensor */
        int pipelined;          /* with pipeline stages: a stage writes every bucket's gradient in
                                 * its first micro-batch and sums it after its last, so shard 3's
                                 * gradient is planned whole (dt_shard_bound_grads) */
        int accum;              /* micro-batches accumulate their gradients before it is summed:
                                 * shard 3's gradient is whole until the last one, unless ... */
        int sums_each;          /* ... each micro-batch's is reduce-scattered into the rank's parts
                                 * (shard 3 on a data axis walking layer by layer: dt_shard_sums_each) */
        int repro_bufs;         /* reproducible mode (parallel/repro.c): the chunk tree's sums, each
                                 * the rank's whole gradient (dt_repro_buffers); its gradient and
                                 * parameters are whole for the step at any shard stage */
        size_t snapshot_floats; /* floats one checkpoint snapshot copies (parameters, buffers, moments) */
        int snapshots;          /* snapshots this rank may hold at once (0: none) */
        size_t stream_floats;   /* a streamed checkpoint's pieces on this rank (dt_mem_stream_floats) */
        size_t data;            /* datasets in memory, the loader's batches, labels */
        size_t mapped;          /* dataset caches mapped from disk: resident once read, but clean
                                 * file pages the kernel drops under pressure */
        size_t fixed;           /* the process before the model: libraries, MPI, threads */
        size_t floor;           /* the peak the process has already made (setup's), if known */
        int onednn, threads;    /* convolutions may take oneDNN (cpu backend, conv not im2col, built
                                 * in), and the threads per rank that its scratchpads are made for */
        int msg_bufs;           /* a pipeline stage's message buffers (dt_pipe_message_bufs), each of
                                 * batch samples of its largest message */
        size_t init_floats;     /* floats a tensor-split rank holds whole while it draws its shards'
                                 * first values (parallel/tensor.h's dt_tp_init_params: its stage's
                                 * parameters and buffers unsplit, and one tensor's draw), before the
                                 * moments exist; 0 without tensor splits */
        int speculate;          /* a pipeline stage's post-validation copies (dt_mem_speculates) */
        int sum_esz;            /* the gradient's flat all-reduces' bytes an entry (dt_dp_sum_esz;
                                 * 0: none): their temporaries in flight (dt_dp_inflight_bytes) */
} dt_mem_in;

/* Whether a stage takes its step before the stages' gradient norm is known and keeps its state from
 * before it (post-validation, train/stepper.c): pipeline stages, clipping on, no ZeRO sharding. The
 * copies: parameters, gradients, moments and buffers, once each. */
int dt_mem_speculates(int stages, double clip_norm, int shard);

typedef struct dt_mem_plan {
        double params, grads, moments, buffers, acts, workspace, snapshots, data, mapped, fixed;
        double messages;        /* a pipeline stage's send and receive buffers */
        double speculation;     /* its post-validation copies */
        double sums;            /* the gradient all-reduces' temporaries in flight */
        double repro;           /* reproducible mode's chunk-tree sums */
        double init;            /* what the initialisation's whole tensors (init_floats) take beyond
                                 * the rest of the plan, when they make the peak */
        double total;           /* the sum (the larger of mapped and init: the caches are read
                                 * after the initialisation), or the floor where that is more: what
                                 * the rank's resident peak will be */
        double need;            /* the sum but mapped: what a memory limit must hold */
} dt_mem_plan;

/* in's step as a data axis of 'replicas' walks it under cs (after in->sum_esz is set): whether a
 * replica's 'slice' runs as micro-batches that accumulate, and reproducible mode's chunk tree on
 * data rank 'data_rank' (-1: the most of any), neither with pipeline stages. */
struct dt_cluster_spec;
void dt_mem_set_walk(dt_mem_in *in, const struct dt_cluster_spec *cs, int pipelined, int slice, int replicas,
                     int data_rank);
/* The plan of in (total and need 1e30 when the sizes overflow, as an infeasible plan). */
void dt_mem_plan_of(const dt_mem_in *in, dt_mem_plan *out);
/* "parameters 76.4 MiB, gradients ..., total 831.1 MiB": the terms above 0.05 MiB, largest first. */
void dt_mem_plan_str(const dt_mem_plan *p, char *buf, size_t n);
/* The floats a streamed checkpoint's pieces take on a rank (train/ckpt_stream.c) of the whole model
 * 'whole': rank 0 (writer) holds the writer's piece and, where other ranks send, one sender's runs
 * of it; every other rank its own runs of one piece where it sends any; a piece is at most
 * DT_ST_CHUNK floats of one tensor. 'sends' is dt_mem_stream_sends'. */
size_t dt_mem_stream_floats(const dt_graph *whole, int writer, int sends);
/* Whether a rank sends values of a streamed checkpoint (writer: whether any other rank does): a
 * copy held by several data ranks is sent by data rank 0, so a rank on another data rank sends only
 * its parts (moments from shard 1, parameters at shard 3). */
int dt_mem_stream_sends(int writer, int data_rank, int shard, int nmoments, int mixed);
/* train/safetensors.h's DT_ST_CHUNK (the planner's floor cannot include it; train/memory.c asserts
 * they agree) */
#define DT_MEM_STREAM_PIECE ((size_t)1 << 20)
/* The fixed part where it cannot be measured (a layout of another rank count): the process's
 * libraries and runtime, measured on this machine, and Open MPI's shared-memory segments per rank
 * on the node. */
size_t dt_mem_fixed_model(int local_ranks);

#endif
