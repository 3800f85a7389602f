/* parallel/pipeline.h - inter-layer model parallelism: the model cut into stages, each rank of a
 * pipeline running one stage's layers, micro-batches flowing forward and gradients backward by
 * point-to-point messages in the order one precomputed schedule gives (parallel/schedule.h).
 * The stage never sees the data or the loss: the trainer feeds stage 0 and scores on the last
 * stage through hooks. Every message goes through the deadline waits of parallel/comm.h. */
#ifndef DT_PIPELINE_H
#define DT_PIPELINE_H

#include <stdint.h>
#include "graph/graph.h"
#include "parallel/comm.h"
#include "parallel/schedule.h"
#include "spec/cluster_spec.h"

/* Virtual stage vs runs layers [first[vs], first[vs + 1]) of the model; first[nstages x nchunks] =
 * the layer count; stage s holds virtual stages dt_schedule_vstage(kind, nstages, nchunks, s, c)
 * (nchunks 1: stage s is virtual stage s). */
typedef struct dt_stage_plan {
        int nstages;
        int first[DT_MAX_STAGES + 1];
        int nchunks;            /* 0 or 1: one piece per stage */
        dt_schedule_kind kind;  /* the placement, with chunks */
} dt_stage_plan;

/* The cut into nstages pieces (virtual stages with chunks: pipeline x virtual_stages): the cluster
 * spec's named cuts (each the first layer of a piece after the first), or balanced so that the
 * largest piece's forward and backward cost (FLOPs, plus a floor per layer) is least. Errors at the
 * stages key (unknown name, out of order, wrong count). */
int dt_stage_plan_make(const dt_cluster_spec *cs, const dt_graph *full, int nstages, dt_stage_plan *p,
                       dt_diag *d);

/* What the trainer supplies. pos0 and b: global-batch positions [pos0, pos0 + b). */
typedef struct dt_pipe_hooks {
        /* stage 0: the samples into g->act[0] (the current slot's) */
        void (*feed)(void *ud, long pos0, int b);
        /* last stage: the loss of g->act[n] (the current slot's), its gradient into g->dact[n],
         * (loss sum, correct count) added into stats; training 0: no gradient */
        void (*score)(void *ud, long pos0, int b, int training, double stats[2]);
        void *ud;
        /* training: the graph hooks of the backward pass that completes the stage's gradients (the
         * last micro-batch's B, or under zb-h1 its last W), so the data axis's all-reduce of each
         * layer starts as soon as that layer is done; NULL none */
        const dt_graph_hooks *grads_done;
} dt_pipe_hooks;

/* Where a stage's walk spends its time (dtrain bench): dt_pipe_train adds to it every step and
 * nothing in training reads it; zero it to start a measurement. An action's time covers all it
 * does: F includes the feed hook on stage 0, B the score hook on the last stage and the gradient's
 * upload, a receive its wait and upload, a send its copy and post. */
#define DT_PIPE_NACT 8                  /* more than any dt_action_kind */
typedef struct dt_pipe_times {
        double act[DT_PIPE_NACT];       /* seconds in each kind of action, summed over steps */
        long nact[DT_PIPE_NACT];        /* how many of each ran */
        /* the same for each chunk's F, B and W (a V's two chunks differ: stage 0 holds the model's
         * first layers and its last, with the loss) */
        double chunk[DT_SCHEDULE_MAX_CHUNKS][3];
        long nchunk[DT_SCHEDULE_MAX_CHUNKS][3];
        double sends;                   /* the end-of-step wait for the step's sends */
        double recv_wait;               /* the receives' waits for their messages (inside act[]) */
        double train;                   /* the whole of dt_pipe_train */
        long steps;
} dt_pipe_times;

typedef struct dt_pipe_buf {
        float *p;
        size_t cap;                     /* floats */
} dt_pipe_buf;

typedef struct dt_pipe {
        dt_comm *axis;                  /* the pipeline axis: member s runs stage s */
        dt_graph *g;                    /* this stage */
        int stage, nstages;
        dt_schedule_kind kind;
        int nchunks;                    /* chunks on this stage (virtual stages), 1 without */
        int micro;                      /* micro-batches per step (fewer when a slice is smaller) */
        dt_schedule *sched;             /* [micro + 1], built on first use for each count */
        int **rel;                      /* [micro + 1]: this stage's dt_pipe_send_release of each */
        char **direct;                  /* [micro + 1]: its dt_pipe_direct */
        int host;                       /* the backend's memory is the host's: messages of one tensor
                                         * may skip their copies (set at each walk) */
        int check;                      /* DTRAIN_PIPE_CHECK=1: every send's buffer checksummed at its
                                         * post and again once done, a direct gradient receive's at its
                                         * B; a change dies (a buffer written while in flight) */
        /* What crosses the cuts, one message per micro-batch each way (a branched graph may cross a
         * cut with several tensors: a residual block's shortcut beside its body): the tensors this
         * stage receives (its extra inputs, then act[0]) and sends (g->out_t), in ascending model
         * id on both sides of a cut, and their floats per sample. */
        int nin_t, *in_t, nout_t, *out_t;
        size_t in_per, out_per;
        /* with chunks, the same per chunk (chunk 0's are the fields above without), and the
         * virtual stage each runs */
        struct dt_pipe_chunk {
                int vs, nin_t, nout_t;
                const int *in_t, *out_t;
                size_t in_per, out_per;
        } ch[DT_SCHEDULE_MAX_CHUNKS];
        MPI_Request *sreq;              /* sends in flight this step, and their buffers */
        dt_pipe_buf *sbuf;              /* (p NULL: sent from a tensor, no copy) */
        dt_pipe_buf *sck;               /* under check: what each sends from, and its checksum */
        uint64_t *ssum;
        int nsend, capsend;
        dt_pipe_buf *pool;              /* message buffers free for reuse, kept across steps */
        int npool, cappool;
        double t_wait;                  /* seconds spent waiting on messages (bench) */
        double t_step;                  /* seconds in dt_pipe_train, and its calls */
        long nsteps;
        dt_pipe_times tm;               /* (bench) */
} dt_pipe;

/* The slots a stage's graph needs for kind with nchunks chunks and micro micro-batches (before
 * dt_graph_alloc_slots): the most one chunk holds at once (each chunk's layers have their share of
 * every slot). */
int dt_pipe_slots(dt_schedule_kind kind, int nstages, int nchunks, int stage, int micro);
/* The same, told to the stage graph g too: with chunks each one's own count (g->chunk[c].nslots),
 * so a chunk that holds fewer micro-batches has no copy in the slots beyond. */
int dt_pipe_graph_slots(dt_graph *g, dt_schedule_kind kind, int nstages, int stage, int micro);
/* The message buffers stage's walk holds at its peak (the pool dt_pipe keeps across steps): every
 * send's copy until its receiver surely has it (dt_pipe_send_release), a received output gradient
 * until its B, an activation only while it is unpacked; direct (dt_pipe_one_tensor's messages on a
 * backend with host memory): only what dt_pipe_direct leaves a copy, and each input gradient from
 * its B, which writes it into its send's buffer, until the send's release. Each holds the graph's
 * largest micro-batch of the largest message, dt_pipe_message_per floats per sample: the widest one
 * its pieces send or receive (the model's input and the loss's output are never messages). */
int dt_pipe_message_bufs(dt_schedule_kind kind, int nstages, int nchunks, int stage, int micro, int direct);
/* Whether every message stage graph g sends or receives is one tensor (a chain's cut; a branched
 * cut crosses with several): then on a backend with host memory they skip their copies. */
int dt_pipe_one_tensor(const dt_graph *g);
/* Whether piece c of g (a chunk, or the whole stage graph) receives its inputs from another piece
 * (it is not the model's first) and sends its outputs to one (not its last): the first piece's
 * input comes from the data, the last's output goes to the loss, and neither is ever a message. */
void dt_pipe_piece_talks(const dt_graph *g, int c, int *recv, int *send);
size_t dt_pipe_message_per(const dt_graph *g);
/* For each send in stage's list (rel[i], the list's n entries), the index of the first action after
 * which its receiver surely has it: the receive itself for a message to the stage's own other chunk,
 * else the first receive of a message the peer sent after its receive of this one finished (so a
 * wait then returns at once), or n when none comes in the step (the end-of-step wait); -1 for the
 * other actions. The walker frees each send's buffer there, so zb-v and interleaved, which send
 * twice 1f1b's messages, hold about as many at once. */
void dt_pipe_send_release(const dt_schedule *s, int stage, int *rel);
/* For each message of stage's list (n entries, rel its dt_pipe_send_release) whether, on a backend
 * with host memory and for a message of one tensor, it may skip its staging copy (direct[i] = 1):
 * - an activation's send goes straight from the slot's output tensor when the chunk runs no F in
 *   that slot before the send's release point (every builder's lists at p <= 8, m <= 32, v <= 4:
 *   tests/unit/test_pipe_msgs.c; its gradient comes back from the same peer, sent after that
 *   peer had the activation, so the release comes before the B that frees the slot). A release
 *   at n is the end-of-step wait: the next step's forwards must come after it;
 * - an activation's receive goes straight into the slot's input tensor: always (the unpack would
 *   write it at the same moment, and its last reader, the slot's previous B, is done);
 * - an output gradient's receive goes straight into dact at the chunk's output (the slot's under
 *   keep_dact, else one for every slot) when the chunk runs no other B and receives no other
 *   gradient before this one's B (every builder's lists: the receive comes right before its B).
 * Input gradients' sends: 0 (pipeline.c's walk has B write them into the send's buffer instead:
 * the chunk's one dact at its inputs is overwritten by its next B, mostly before the release).
 * Other actions: 0. */
void dt_pipe_direct(const dt_schedule *s, int stage, const int *rel, char *direct);
/* What stage's graph (of nstages; 1: no pipeline; nchunks chunks) must be told before alloc, before
 * its memory is planned and before dt_tp_graph makes its shards' graph from it: whether backward
 * makes an input gradient, and under zb-h1 and zb-v that each slot keeps the split layers' output
 * gradients. */
void dt_pipe_stage_graph(dt_graph *g, dt_schedule_kind kind, int nstages, int nchunks, int stage);
/* g: the stage's graph, with chunks one of dt_graph_chunks (their count from it). */
void dt_pipe_init(dt_pipe *p, dt_comm *axis, dt_graph *g, dt_schedule_kind kind, int micro);
void dt_pipe_free(dt_pipe *p);
/* One training step's forward and backward of this replica's slice [lo, hi) of the global batch,
 * split into micro-batches; gradients accumulate into g->grads, complete on return (the last W runs
 * in here; no hook starts a data-parallel sum before: the trainer sums after). The last stage adds
 * (loss sum, correct count) into stats; the others add nothing. */
void dt_pipe_train(dt_pipe *p, const dt_fwd_ctx *ctx, int lo, int hi, const dt_pipe_hooks *h, double stats[2]);
/* Each stage's time per training step in dt_pipe_train and the part of it spent waiting on
 * messages (the bubble a schedule leaves, seen from the stage), one line to f (NULL: print nothing,
 * join the sum). Collective over the pipeline axis. */
void dt_pipe_report(dt_pipe *p, FILE *f);
/* Forward only of [lo, hi) through every stage in turn (evaluation), in slot 0. */
void dt_pipe_eval(dt_pipe *p, const dt_fwd_ctx *ctx, int lo, int hi, const dt_pipe_hooks *h, double stats[2]);

/* The whole model from the stages, for checkpoints and the final weights: stage 0 of the pipeline
 * (world rank 0 for replica 0; member s of axis runs stage s) receives every stage's slice of the flat buffers into all[k], laid
 * out as full's (k: 0 parameters, 1 buffers, 2 and 3 the optimizer moments, nmo of them); the
 * other stages send mine[k], their own (with chunks one slice per chunk, laid out one after
 * another as dt_graph_chunks lays them). Collective over the pipeline axis. */
void dt_pipe_gather(dt_comm *axis, const dt_stage_plan *plan, const dt_graph *full, int nmo,
                    float *const mine[4], float *const all[4]);

#endif
