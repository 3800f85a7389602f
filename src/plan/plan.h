/* plan/plan.h - the planner behind `strategy: auto` and `dtrain plan`: a cost model of one training
 * step under a layout (data x pipeline x tensor grid, per-layer tensor splits, stage cuts,
 * micro-batches, schedule, shard stage, recomputation), a search over layouts, and the explanation
 * of the choice.
 *
 * Compute comes from each layer's measured forward, input-gradient and weight-gradient times for
 * the exact shard and micro-batch shape (plan/profile.c, cached per machine), scaled by how many
 * ranks share a node's cores. Communication is alpha-beta per message and per collective algorithm
 * (plan/netmodel.c), on the node's shared memory inside a node and the cluster spec's network
 * between nodes. The step time is not a closed formula: the pipeline's own action lists
 * (parallel/schedule.h) run through the schedule simulator, and the data-parallel buckets run as
 * events beside the backward pass they overlap (plan/predict.c). */
#ifndef DT_PLAN_H
#define DT_PLAN_H

#include <stdio.h>
#include "graph/graph.h"
#include "spec/cluster_spec.h"
#include "parallel/schedule.h"
#include "parallel/hier.h"
#include "parallel/layout.h"

/* ---- the machine and network ---- */
typedef struct dt_link {
        double alpha;           /* seconds per message */
        double beta;            /* seconds per byte */
        double gamma;           /* seconds per byte of a reduction's work (the sum's reads and writes) */
        double gamma_near;      /* ... while the sum's operands stay in the caches (0: gamma at any size) */
        double near, far;       /* bytes up to which gamma_near holds, from which gamma does (log2 between) */
        double eager;           /* bytes a message sends at once; the rest waits for the receiver's
                                 * answer (Open MPI's rendezvous); 0: all at once */
        double send_o, send_beta;       /* a send's own core time: seconds per message, and per byte
                                         * of a message within the eager limit (LogP's o) */
        int recv_copy;          /* 1: the receiver copies a message out of the sender's memory once
                                 * it has matched it (shared memory's single copy, Open MPI vader's
                                 * CMA; a rank's message to itself likewise): its bytes cost the
                                 * receiver's core after it reaches the receive, not the wire before */
} dt_link;

typedef struct dt_machine {
        int cores_per_node;     /* cores a node's ranks share */
        int ranks_per_node;     /* consecutive world ranks on one node */
        int threads;            /* BLAS threads per rank */
        dt_link intra, inter;   /* shared memory inside a node; the network between nodes */
        double copy_beta;       /* seconds per byte of a memcpy here (a message's packing) */
        double stream_slow;     /* how much slower a memcpy from memory runs than one in the caches */
        double mem_bytes;       /* memory one rank may use */
        int hierarchical;       /* partition.hierarchical: 0 auto, 1 false, 2 true */
        dt_hier_link choice_intra, choice_inter;   /* the links auto's choice weighs, as the run
                                                    * does (dt_hier_links: the spec's, no measurement) */
} dt_machine;

/* One point-to-point message of n bytes. */
double dt_net_p2p(const dt_link *l, double n);
/* The same as the schedule simulator plays it: past the link's eager limit, with the handshake. */
void dt_net_sim_link(const dt_link *l, double n, dt_sim_link *out);
/* Sum over p ranks of n bytes each, the cheaper of Open MPI's recursive doubling and ring. */
double dt_net_allreduce(const dt_link *l, int p, double n);
/* Every one of p ranks ends with all p blocks, n bytes in total (ring). */
double dt_net_allgather(const dt_link *l, int p, double n);
/* The link a group of p ranks spaced 'stride' world ranks apart talks over: the network once the
 * group spans nodes. */
const dt_link *dt_net_link(const dt_machine *m, int p, int stride);
/* The bytes that leave one node over its network link when p ranks spaced 'stride' apart (a node's
 * ranks numbered together, as dt_net_allreduce_data2 counts them) run one collective of n bytes:
 * what the node's tc counters see, where the bytes above are one rank's messages. Ring all-reduce
 * (libnbc's, which main.c selects) of an n-byte vector: one ring edge leaves each node, 2 (p - 1)/p n.
 * Two-level (parallel/hier.c): the node's segments cross once each way between the k nodes,
 * 2 (k - 1)/k n. All-gather of n bytes in all (libnbc's linear and recursive doubling alike) and
 * all-to-all of n bytes from each rank: each of a node's l ranks sends its n/p share to each of the
 * (k - 1) l ranks elsewhere, l^2 (k - 1) n/p; on nodes of 2 ranks that is more than the ring, as
 * every rank of a node crosses. 0 when the group fits one node. */
enum { DT_NET_RING, DT_NET_TWO_LEVEL, DT_NET_GATHER, DT_NET_ALLTOALL };
double dt_net_node_bytes(const dt_machine *m, int p, int stride, int kind, double n);
/* The data axis (D ranks, stride apart in the world) summing n bytes as parallel/dp.c does: the
 * flat all-reduce over dt_net_link's link, or, where partition.hierarchical takes the two-level
 * path (parallel/hier.c), a reduce-scatter over each node's shared memory, each segment's
 * all-reduce between the nodes over the network, and an all-gather in the node. */
typedef struct dt_data_sum {
        const dt_machine *m;
        int stride;
        int ring;       /* partition.shard >= 2: the gradients' ring reduce-scatter (parallel/shard.c) */
} dt_data_sum;
double dt_net_allreduce_data(const dt_data_sum *ds, int D, double n);
/* parallel/shard.c's ring reduce-scatter of an n-byte bucket over p ranks on l: p - 1 rounds, each
 * one message of a part into a buffer, then that buffer added into the bucket's part. */
double dt_net_reduce_scatter(const dt_machine *m, const dt_link *l, int p, double n);
/* The same, with both paths' predictions (two: 0 where a node holds one rank, or one node all). */
double dt_net_allreduce_data2(const dt_data_sum *ds, int D, double n, double *flat, double *two, int *hier);
/* ---- the gradient compressors (plan/cxmodel.c) ---- */
/* A bucket's gradient as the compressors see it. */
typedef struct dt_cx_bucket {
        double floats;          /* gradient entries */
        double p, qd;           /* powersgd: floats of its P factors; of its Q factors and dense rest */
        double mat;             /* powersgd: entries of the matrices it factors */
        double tk;              /* topk: the (index, value) pairs a rank sends (dt_topk_keep) */
} dt_cx_bucket;
/* Seconds to sum bucket b over the D ranks of the data axis under compression 'method' with cs's
 * settings (none: dt_net_allreduce_data), encode and decode included; *wire: the bytes of this
 * rank's messages for it (what dtrain bench reports); *link (unless NULL): the bytes that leave each
 * node for it (dt_net_node_bytes of its collectives, what tc counts on the node's link). */
double dt_plan_cx_sum(const dt_data_sum *dl, int D, const dt_cluster_spec *cs, int method, const dt_cx_bucket *b,
                      double *wire, double *link);
/* Layer l's trainable gradients (powersgd at cs's rank, topk at its ratio); a += b. */
void dt_plan_cx_layer(const dt_layer *l, const dt_cluster_spec *cs, dt_cx_bucket *b);
void dt_plan_cx_add(dt_cx_bucket *a, const dt_cx_bucket *b);
/* Why compression: auto cannot compress on D data ranks under cs (device: a device backend's
 * ranks), NULL when it may. */
const char *dt_plan_cx_plain(const dt_cluster_spec *cs, int D, int device);

/* How much slower compute runs when a node's ranks want more threads than it has cores (>= 1). */
double dt_machine_share(const dt_machine *m);
/* How much slower a memory-bound pass over arrays of 'bytes' each runs than over arrays that stay in
 * the caches (1 up to intra.near, stream_slow from intra.far, log2 between). */
double dt_machine_stream(const dt_machine *m, double bytes);
/* The receiver's seconds for the single copy of an n-byte message over a recv_copy link: at the
 * link's bytes per second (a copy from memory's, where the spec names none, whatever its size:
 * another core wrote it). */
double dt_net_recv_copy(const dt_link *l, double n);
/* This machine: cores, memory, memcpy bandwidth and a thread hand-off latency for the shared-memory
 * link; the cluster spec's network for the rest (its cores_per_node and ranks_per_node win). */
void dt_machine_from(dt_machine *m, const dt_cluster_spec *cs, int ranks, int threads);

/* ---- a layout and its predicted cost ---- */
/* dt_layout, the plain layout the search varies, and its rank formula: parallel/layout.h */

/* Seconds per step, by where they go (the critical path's share of each). */
typedef struct dt_prediction {
        double step;            /* predicted seconds per training step */
        double compute;         /* the slowest rank's forward and backward compute */
        double tensor;          /* tensor-parallel collectives on that rank */
        double p2p;             /* pipeline messages on the critical path */
        double bubble;          /* pipeline idle time of the busiest stage */
        double dp;              /* data-parallel all-reduce not hidden behind backward */
        double dp_flat, dp_two; /* the gradients' sum each way, whole (dp_two 0: one way only) */
        int dp_hier;            /* the two-level path runs (partition.hierarchical, auto by cost) */
        double update;          /* optimizer step and gradient norm */
        double data;            /* the step's data (the loader's, on the rank's core) and loss */
        double mem;             /* bytes on the fullest rank */
        double limit;           /* bytes a rank may use (the machine's mem_bytes) */
        double bytes_dp, bytes_tp, bytes_p2p;   /* bytes one rank moves per step, by kind */
        double link_dp;         /* bytes the gradients' sum sends out of each node per step */
        double syncs;           /* times a rank waits on others in a step: collectives, messages */
        double work;            /* compute seconds of every rank together, unslowed by sharing: the
                                 * batch's layers at this layout's shapes (a superlinear speedup's
                                 * source, dt_plan_superlinear) */
        double share;           /* a node's ranks' threads over its cores (1 when they fit) */
        double busy;            /* the cores computing while the busiest rank computes (1 .. cores) */
        int light, heavy;       /* a pipeline's stages with the least and the most compute */
        double light_frac;      /* the light one's compute over the heavy one's (1 without stages) */
        double heavy_frac;      /* the heavy one's share of the model's compute */
        int fits;               /* mem within the machine's limit */
        char why[160];          /* when it does not fit, or cannot run */
} dt_prediction;

/* Per-layer costs for one micro-batch, seconds. */
typedef struct dt_layer_cost {
        double f, bi, bw;       /* forward; backward's input-gradient and weight-gradient parts */
        double r;               /* a recomputed layer's forward run again before its backward (its
                                 * graph's recompute region, graph/recompute.c); 0 for a kept one */
} dt_layer_cost;

typedef struct dt_planner dt_planner;

/* A planner for the model g (built, unallocated) with its spec's batch and optimizer. measure 0:
 * costs from FLOPs at the measured SGEMM rate only (no profiling; the scaling table's large
 * counts). */
dt_planner *dt_planner_new(const dt_graph *g, const dt_cluster_spec *cs, int threads, int measure);
/* The fixed part of a rank's memory (plan/mem.h) the plans count, measured by a running job (VmRSS
 * before the model; 0 keeps the model), the data's bytes on every rank and per sample of its slice
 * (the loader's), and whether convolutions take oneDNN (its buffers). */
void dt_planner_set_memory(dt_planner *p, double fixed, double data, double per_sample, int onednn);
/* Times the step's data work on the model's training set ds (plan/dataprof.c); without it a step's
 * data is priced 0. */
void dt_planner_time_data(dt_planner *p, const struct dt_dataset *ds);
void dt_planner_free(dt_planner *p);
/* Predicts the step of layout L on N ranks of machine m. Returns 0, or -1 with the reason in
 * pr->why (the layout cannot be built: sizes do not divide, too few layers). */
int dt_plan_predict(dt_planner *p, const dt_machine *m, const dt_layout *L, dt_prediction *pr);
/* Ranks that outnumber a node's cores compute slower than the ranks-to-cores ratio alone by up to
 * this much (5-15% measured here with symmetric ranks that compute and then synchronise). It is
 * paid at their meeting points: a rank that waits for one whose core runs another rank waits for
 * that rank's time slice, so the full penalty needs a meeting every DT_PLAN_SYNC_QUANTUM seconds
 * of the step or more often, and a step with fewer pays in proportion (the wide MLP's tensor 4,
 * 6 meetings in a 100 ms step, ran at the ratio: 96 ms, 108 with the penalty). */
#define DT_PLAN_OVERSUB_PENALTY 0.15
#define DT_PLAN_SYNC_QUANTUM 250e-6
/* compression: auto for layout L on m: the step predicted under none, bf16 and threshold (the
 * methods that kept the accuracy at their defaults); the fastest, or the least change to the
 * gradient predicted within DT_PLAN_TIE of it (none unless compressing is worth it). why: one line,
 * "METHOD: because". */
int dt_plan_compression(dt_planner *p, const dt_machine *m, const dt_layout *L, char *why, size_t n);
/* The per-layer table of L for the report: name, split, f, b, tensor bytes, memory of rank 0. */
void dt_plan_print_layers(dt_planner *p, const dt_machine *m, const dt_layout *L, FILE *f);

/* ---- the search ---- */
typedef struct dt_candidate {
        dt_layout L;
        dt_prediction pr;
} dt_candidate;

/* Two predictions within this fraction of each other are a tie: the planner cannot order them
 * (--validate found layouts predicted that close in either order from run to run, and its check
 * of the measured order calls them equal too). */
#define DT_PLAN_TIE 0.01
/* A pipeline stage computing less than this fraction of the busiest stage's time is light enough
 * that the why-line says so and why (mlp.yaml's dropout alone as the middle of 3 stages: 3%). */
#define DT_PLAN_LIGHT 0.25

/* Every layout worth trying on N ranks, predicted and ranked (dt_plan_rank): each grid with its
 * cuts, splits, micro-batches and schedules, under shard 0-2 (data > 1) and recompute none or all
 * (not zb-h1) unless the planner's cluster spec names them (a variant only where its plain layout
 * does not fit or it is faster beyond DT_PLAN_TIE); only data degree p->data_pin where that is set.
 * Returns the count (at
 * most max), 0 when none can be built. */
int dt_plan_search(dt_planner *p, const dt_machine *m, int N, dt_candidate *out, int max);
/* Whether a and b are predicted within DT_PLAN_TIE of each other. */
int dt_plan_tie(const dt_prediction *a, const dt_prediction *b);
/* Orders c[0..n): layouts that fit first, fastest first, and among layouts tied with the fastest
 * one left (dt_plan_tie) the one that shards and recomputes least, then the one needing least
 * memory (within 1%), then the simplest (fewer ranks
 * per model copy, then fewer grid dimensions above 1, then fewer micro-batches); layouts that do
 * not fit last, the nearest to fitting first. */
void dt_plan_rank(dt_candidate *c, int n);
/* Layouts of several rank counts, each group on its own machine, timed again side by side: the
 * samples of every stage's layers are dropped, then 'rounds' rounds time each layout's stages in
 * turn (A B C A B C ...), so that every layout's costs are medians taken under the same
 * conditions (a busy moment slows a round's layouts alike, not one rank count's); then each
 * group is predicted again and ranked (what dtrain plan does for the layouts it shows). */
typedef struct dt_plan_group {
        const dt_machine *m;
        dt_candidate *c;
        int n;
} dt_plan_group;
void dt_plan_refine(dt_planner *p, dt_plan_group *g, int ng, int rounds);
/* "data 2 x pipeline 1 x tensor 2; fc1 column, fc2 row" */
void dt_layout_str(const dt_planner *p, const dt_layout *L, char *buf, size_t n);
/* One line: why a beat b (the runner-up; NULL when a is the only layout), from the biggest
 * difference in their predictions, or that they tie and what broke the tie, or that a does not
 * fit; and when a's pipeline has a light stage, that it is light on purpose and why. p (may be
 * NULL) names the stage's layers. */
void dt_plan_why(const dt_planner *p, const dt_candidate *a, const dt_candidate *b, char *buf, size_t n);
/* When x on N ranks predicts more than N times one's speed (one: the 1-rank layout), a note
 * saying so and where it comes from (its layers computing the batch in less time in all than one
 * rank's, or its optimizer update); returns 1 then, 0 (buf untouched) when the speedup is at most
 * linear. */
int dt_plan_superlinear(const dt_prediction *one, const dt_prediction *x, int N, char *buf, size_t n);
/* The cluster spec keys that make dtrain run L (partition: strategy, data, pipeline, tensor,
 * stages, micro_batches, schedule, splits; shard and recompute where L sets them) into cs. */
void dt_layout_apply(const dt_planner *p, const dt_layout *L, dt_cluster_spec *cs);
/* The same for the model graph g the layout was planned on. */
void dt_layout_apply_graph(const dt_graph *g, const dt_layout *L, dt_cluster_spec *cs);
/* The same as YAML text (a cluster file's partition section). */
void dt_layout_yaml(const dt_planner *p, const dt_layout *L, FILE *f);

#endif
