/* parallel/schedule.h - pipeline schedules as data: for each stage of a pipeline, the ordered list
 * of compute and point-to-point actions of one training step (gpipe, 1f1b, zb-h1), the micro-batch
 * slot each action works in, and a simulator that runs the lists with MPI's blocking rules, one step
 * or K back to back, to give the makespan, each stage's bubble (the steady state's too), or the stage
 * and action that would wait forever. Pure data: no MPI, no graph; the trainer walks a stage's list,
 * the planner simulates it. */
#ifndef DT_SCHEDULE_H
#define DT_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

#define DT_SCHEDULE_MAX_STAGES 64
#define DT_SCHEDULE_MAX_MICRO 1024

typedef enum dt_schedule_kind {
        /* GPipe: every forward, then every backward in reverse micro-batch order; m slots. */
        DT_SCHEDULE_GPIPE,
        /* PipeDream-flush as in Megatron's non-interleaved schedule: stage s warms up with
         * min(p - s - 1, m) forwards, alternates one forward and one backward, then cools down;
         * min(m, p - s) slots. */
        DT_SCHEDULE_1F1B,
        /* Zero-bubble H1 (arXiv 2401.10241): 1f1b's order of F and B with the backward split into
         * B (input gradient, sent at once) and W (weight gradient); stage s keeps up to s W's
         * deferred and runs them in what 1f1b leaves idle, ending with them. The warm-up is 1f1b's,
         * so the peak over stages stays 1f1b's min(m, p) micro-batches in flight (stage 0's),
         * though later stages hold more than under 1f1b (min(m, p) each). */
        DT_SCHEDULE_ZB_H1,
        /* Megatron's interleaved 1F1B (Narayanan et al. 2021): v chunks per rank, rank r holding
         * virtual stages r, r + p, ..., 1f1b over the p v virtual stages with each rank's forwards
         * taken p micro-batches at a time per chunk (chunk 0's p, chunk 1's p, ..., then the next p)
         * and its backwards likewise from the last chunk; warm-up 2 (p - r - 1) + (v - 1) p. */
        DT_SCHEDULE_INTERLEAVED,
        /* ZB-V (Qi et al., "Pipeline parallelism with controllable memory", the sail-sg zero-bubble
         * schedules; PyTorch's ScheduleZBVZeroBubble order): v = 2, rank r holding virtual stage r
         * going down and 2p - 1 - r coming back up, so the last rank turns the micro-batch round
         * itself and the first rank both feeds and scores; backward split into B and W as zb-h1's,
         * the W's filling what would be bubble. */
        DT_SCHEDULE_ZB_V,
        /* V-Half (Qi et al.'s controllable-memory family, the "half" of 1f1b's activations): zb-v's
         * placement and split backward, the order built by dt_schedule_vhalf_order under a cap on
         * each chunk's micro-batches in flight, p + 1 half-stage micro-batches on every stage in all
         * (1f1b's first stage holds p whole-stage ones), for a larger bubble than zb-v's. */
        DT_SCHEDULE_V_HALF,
} dt_schedule_kind;

typedef enum dt_action_kind {
        DT_ACT_FORWARD,         /* F: forward of mb on this stage's layers */
        DT_ACT_BACKWARD_INPUT,  /* B: dX of mb through this stage's layers */
        DT_ACT_BACKWARD_WEIGHT, /* W: dW of mb, accumulated into the gradient buffer */
        DT_ACT_SEND_ACT,        /* mb's output activation to peer (the next stage) */
        DT_ACT_RECV_ACT,        /* mb's input activation from peer (the previous stage) */
        DT_ACT_SEND_GRAD,       /* mb's input gradient to peer (the previous stage) */
        DT_ACT_RECV_GRAD,       /* mb's output gradient from peer (the next stage) */
} dt_action_kind;

typedef struct dt_action {
        dt_action_kind kind;
        int mb;         /* micro-batch, 0..nmicro-1 */
        int peer;       /* the stage sent to or received from; -1 for F, B, W */
        int slot;       /* the slot holding mb's forward state on this stage (dt_graph_use_slot
                         * before F, B and W); -1 for sends and receives */
        int chunk;      /* which of the stage's chunks (0..nchunks-1) computes, sends or receives;
                         * 0 without virtual stages */
} dt_action;

typedef struct dt_stage_actions {
        dt_action *a;
        int n, cap;
        int nslots;     /* slots this stage needs: the most micro-batches in flight at once */
} dt_stage_actions;

/* Contract of the lists every builder produces (and tests/unit/test_schedule.c proves for p <= 8,
 * m <= 32, and with chunks v <= 4):
 * - every SEND has exactly one RECV of the same kind and micro-batch on its peer, and the reverse;
 * - on stage s, F(mb) follows RECV_ACT(mb) (s > 0) and SEND_ACT(mb) follows F(mb) at once
 *   (s < p - 1); B(mb) follows F(mb) and RECV_GRAD(mb) (s < p - 1); W(mb) follows B(mb);
 *   each stage runs every micro-batch's F, B and W exactly once;
 * - with chunks, all of the above per chunk, read with virtual stages for stages: chunk c's messages
 *   go to and come from the stages holding its virtual stage's neighbours (the stage itself where a
 *   zb-v turn or one stage holds both); a message is matched by kind, micro-batch, sender and the
 *   virtual stage it is for;
 * - executed with sends that never block and receives that block, no stage waits forever. The
 *   trainer gets that with MPI_Isend whose buffer stays untouched until a wait at the end of the
 *   step: MPI may complete a large send only once its receive is posted, so waiting for it any
 *   earlier can block, which the simulator does not model; except where the stage has received a
 *   message its peer sent after that receive finished (pipeline.h's dt_pipe_send_release).
 * In gpipe and 1f1b each B is followed at once by the W of the same micro-batch and only then by
 * SEND_GRAD: the trainer may run the pair as one combined backward, which yields the stage's input
 * gradient last. zb-h1 sends the gradient right after B, which is where its gain comes from, and
 * runs its W's in micro-batch order, as 1f1b does, so the weight gradients add up in the same order.
 * Either way a B's input gradient is sent before the stage's next B: the trainer keeps one buffer
 * for it (tests/unit/test_schedule.c proves both).
 *
 * A slot is taken by F and given back after W; F takes the lowest free one, so a stage's slots
 * are 0..nslots-1. A W deferred past other B's (zb-h1) needs what its own B left as well as what
 * F did: each layer's output gradient for that micro-batch, so under zb-h1 those belong in the
 * slot too (graph.h's keep_dact: the shared dact set would keep them only until the next B).
 *
 * m < p is allowed for every kind, as Megatron's warm-up of min(p - s - 1, m) forwards allows it:
 * the pipeline is simply never full, and the bubble formulas below still hold. */
typedef struct dt_schedule {
        dt_schedule_kind kind;
        int nstages, nmicro;
        int nchunks;            /* chunks per stage (virtual_stages): 1 but for interleaved, zb-v, v-half */
        dt_stage_actions *stage;        /* [nstages] */
} dt_schedule;

/* "gpipe", "1f1b", "zb-h1", "interleaved", "zb-v", "v-half": the names users write in the cluster
 * spec. */
const char *dt_schedule_kind_name(dt_schedule_kind kind);
/* Returns 0 and sets *out, or -1 for an unknown name. */
int dt_schedule_kind_parse(const char *name, dt_schedule_kind *out);

/* Builds kind's lists for nstages (1..64) stages and nmicro (1..1024) micro-batches, slots
 * assigned. Returns 0, or -1 with a one-line reason in err (out of range) and s empty. */
int dt_schedule_build(dt_schedule *s, dt_schedule_kind kind, int nstages, int nmicro,
                      char *err, size_t errlen);
/* The same with nchunks chunks per stage (1..DT_SCHEDULE_MAX_CHUNKS; zb-v and v-half take 2, gpipe,
 * 1f1b and zb-h1 1, interleaved 2 to 4). */
int dt_schedule_build_v(dt_schedule *s, dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                        char *err, size_t errlen);
void dt_schedule_free(dt_schedule *s);

/* ---- virtual stages: where each chunk of the model sits ----
 * The model is cut into p v pieces (virtual stages, in model order); chunk c of stage (rank) r holds
 * virtual stage dt_schedule_vstage: c p + r, interleaved (and c = 0 for the others: r), or for zb-v
 * and v-half r going down (c = 0) and 2p - 1 - r coming back up (c = 1). The one placement formula: layout.c's
 * rank graphs, the walker and the planner all take it from here. */
#define DT_SCHEDULE_MAX_CHUNKS 4
int dt_schedule_vstage(dt_schedule_kind kind, int nstages, int nchunks, int stage, int chunk);
/* The reverse: the stage and chunk holding virtual stage vs. */
void dt_schedule_place(dt_schedule_kind kind, int nstages, int nchunks, int vs, int *stage, int *chunk);
/* Whether kind runs with nchunks chunks per stage (1 for gpipe, 1f1b, zb-h1; 2 for zb-v and v-half;
 * 2..4 for interleaved); 0 with a one-line reason in err when not. */
int dt_schedule_chunks_ok(dt_schedule_kind kind, int nchunks, char *err, size_t errlen);
/* Whether kind places its two chunks as a V (zb-v, v-half). */
int dt_schedule_is_v(dt_schedule_kind kind);

/* ---- v-half's order (schedule_vhalf.c) ---- */
/* One compute step of a stage: F, B or W of micro-batch mb on chunk c. */
typedef struct dt_vhalf_step {
        dt_action_kind kind;
        int chunk, mb;
} dt_vhalf_step;
/* The most micro-batches chunk of stage holds at once under v-half (F done, W not), p + 1 over the
 * stage's two chunks, shared as the time each chunk's micro-batch must stay (its arm of the V). */
int dt_schedule_vhalf_cap(int nstages, int stage, int chunk);
/* V-Half's compute order for nstages stages (nstages x 2 <= 64) and nmicro micro-batches: stage st's
 * 6 nmicro steps at out[st * 6 nmicro ...]. */
void dt_schedule_vhalf_order(int nstages, int nmicro, dt_vhalf_step *out);
/* Its bubble (dt_schedule_bubble_theory_v): its lists played with f, b, w on every virtual stage. */
double dt_schedule_vhalf_bubble(int nstages, int nmicro, double f, double b, double w);

/* ---- hand-built lists (tests; schedules from elsewhere) ---- */
/* An empty schedule with nstages stages (kind is only a label here). */
void dt_schedule_init(dt_schedule *s, dt_schedule_kind kind, int nstages, int nmicro);
/* Appends an action to stage's list (chunk 0); slot is set by dt_schedule_assign_slots. */
void dt_schedule_add(dt_schedule *s, int stage, dt_action_kind kind, int mb, int peer);
/* The same for one chunk of a stage (s->nchunks set first). */
void dt_schedule_add_chunk(dt_schedule *s, int stage, int chunk, dt_action_kind kind, int mb, int peer);
/* Sets every F, B and W's slot and each stage's nslots. Returns 0, or -1 with the stage and action
 * in err when a B or W names a micro-batch that holds no slot there (no F before it, or its W ran).
 * Each chunk has its own slots 0..k (its layers' share of a slot is its own), so a stage's nslots is
 * the most micro-batches one of its chunks holds at once. */
int dt_schedule_assign_slots(dt_schedule *s, char *err, size_t errlen);

/* ---- reading ---- */
/* "F3", "B3", "W3", "sa3" (send activation), "ra3" (receive activation), "sg3" (send gradient),
 * "rg3" (receive gradient); chunk c > 0 adds ".c" ("F3.1"). */
void dt_action_format(const dt_action *a, char *buf, size_t len);
/* One line per stage, "stage 1: F0 F1 B0 W0 F2 ...": the compute actions only, or every action
 * when with_comm. */
void dt_schedule_print(const dt_schedule *s, FILE *f, int with_comm);

/* ---- timing ---- */
typedef struct dt_stage_cost {
        double f, b, w;         /* seconds of one micro-batch's F, B and W on this stage */
} dt_stage_cost;

typedef struct dt_schedule_sim {
        double makespan;        /* from the first action to the last stage's last */
        double busy[DT_SCHEDULE_MAX_STAGES];    /* the sum of the stage's F, B and W times */
        double idle[DT_SCHEDULE_MAX_STAGES];    /* makespan - busy: the stage's bubble */
        double bubble;          /* sum of idle / (nstages * makespan) */
} dt_schedule_sim;

/* Runs every stage's list from time 0: a compute action takes its cost[stage] time (with chunks
 * cost[virtual stage], nstages x nchunks of them; a message between two chunks of one stage is
 * there at once), a send takes
 * none and arrives p2p seconds later, a receive waits for its send's arrival (matched by kind,
 * sender and micro-batch, the k-th receive to the k-th send). Returns 0 with r filled, or -1 with
 * err naming what waits forever: the stages waiting on each other in a cycle, each with its action
 * ("deadlock: stage 1 waits forever at action 3 (rg0 from stage 2), stage 2 waits forever at
 * action 0 (ra0 from stage 1); 3 stages stuck"), or the stage whose peer finished without sending;
 * or a send that nobody receives; or an action that names no micro-batch or stage of s. */
int dt_schedule_simulate(const dt_schedule *s, const dt_stage_cost *cost, double p2p,
                         dt_schedule_sim *r, char *err, size_t errlen);
/* A link between two stages, as the simulator plays its messages. */
typedef struct dt_sim_link {
        double p2p;             /* a message's time from its send to its arrival, when it goes at once */
        double busy;            /* how long its bytes hold the link (<= p2p; the latency overlaps) */
        /* A message longer than the transport's eager limit sends only its first part at once (p2p
         * and busy are that part's). The rest (tail seconds from its start to its arrival, holding
         * the link tail_busy) follows a handshake: the receiver answers once it has reached the
         * receive and the first part is there, the answer takes ack seconds, and the rest starts
         * only while the sender is inside MPI (a send, a receive's wait, the end of its step): Open
         * MPI's TCP transport progresses only inside MPI calls. tail = 0: every message at once. */
        double tail, tail_busy, ack;
        double send;            /* the sender's own core time for the send call (LogP's o): its
                                 * compute waits that long; the message leaves as it starts */
        double recv;            /* the receiver's own core time for a receive once its message is
                                 * there (unpacking it into the layers' tensors), a chunk's message
                                 * to its own stage's other chunk too */
} dt_sim_link;
/* The same with each direction between two stages a link that carries one message at a time:
 * a send starts when the link is free, holds it lk->busy seconds and arrives lk->p2p after it
 * started; with lk->tail, the handshake above. dt_schedule_simulate is lk = { p2p }. */
int dt_schedule_simulate_link(const dt_schedule *s, const dt_stage_cost *cost, const dt_sim_link *lk,
                              dt_schedule_sim *r, char *err, size_t errlen);

/* ---- steps back to back: the steady state ----
 * A run's steps need no barrier between them where each stage's optimizer update is its own: a stage
 * updates its weights once its step's last action is done and starts the next step's first at once
 * (the gradient norm's check validated afterwards, as the zero-bubble authors' post-validation). The
 * descent's idle (the later stages waiting for the first activation) is then paid once per run, not
 * once per step: each step's start overlaps the last one's end. */
#define DT_SCHEDULE_MAX_STEPS 1024
typedef struct dt_schedule_steady {
        int nsteps;             /* K, the steps played */
        double first;           /* the first step's end (the last stage's): one step's makespan */
        double makespan;        /* the K steps' */
        /* T, the steady step: (end of step K - end of step 1) / (K - 1), a step's end being its
         * last stage's; the first step's end for K = 1. The run's time is first + (K - 1) T. */
        double period;
        double busy[DT_SCHEDULE_MAX_STAGES];    /* each stage's F, B and W per step */
        double idle[DT_SCHEDULE_MAX_STAGES];    /* T - busy: its bubble per step in steady state */
        /* the steady-state bubble, sum over stages of (T - busy) / (p T) */
        double bubble;
        /* the run's own, amortised over its K steps: 1 - K sum busy / (p makespan) */
        double amortised;
} dt_schedule_steady;
/* Plays nsteps (1..DT_SCHEDULE_MAX_STEPS; nsteps x nmicro at most 65536) of s back to back as
 * dt_schedule_simulate_link plays one: each stage runs step k + 1's list right after its own last
 * action of step k, its update free and its sends waited for in an instant. Messages repeat their
 * tags every step, and MPI matches them in order per sender and tag: step k + 1's after step k's.
 * Returns 0 with r filled, or -1 with err as dt_schedule_simulate_link's (micro-batch j of step k
 * named k m + j). */
int dt_schedule_simulate_steps(const dt_schedule *s, const dt_stage_cost *cost, const dt_sim_link *lk,
                               int nsteps, dt_schedule_steady *r, char *err, size_t errlen);

/* The bubble fraction kind should have with the same f, b, w on every stage and free
 * communication, sum of idle / (nstages * makespan):
 *   gpipe, 1f1b  (p - 1)(f + b + w) / ((m + p - 1)(f + b + w)) = (p - 1) / (m + p - 1)
 *   zb-h1        idle (p - 1)(f + b) - (min(m, p) - 1) w, over m (f + b + w) + that idle;
 *                for m >= p the paper's (p - 1)(f + b - w). Exact while w <= f and w <= b
 *                (the deferred W's then fit in the gaps they fill). */
double dt_schedule_bubble_theory(dt_schedule_kind kind, int nstages, int nmicro,
                                 double f, double b, double w);
/* The same with nchunks chunks per stage, f, b and w one chunk's (one virtual stage's) times:
 *   interleaved  idle (p - 1)(f + b + w) against v m (f + b + w) of work: (p - 1) / (v m + p - 1),
 *                Megatron's (p - 1) / (v m) of the ideal time; exact for m a multiple of p (other m
 *                run the next multiple's order less the missing micro-batches).
 *   zb-v         idle (p - 1) f against 2 m (f + b + w): the V's descent, which the last stage
 *                cannot start before (a lower bound for any order), and what this order reaches
 *                for m >= 2p when f = b = w; the W's then fill every other gap. With unequal
 *                times the order is not adaptive and idles more (the simulator's figure).
 *   v-half       no closed form (its order comes from a greedy play under the memory caps): the
 *                simulator's figure for its lists with f, b and w on every virtual stage; for
 *                m >= 2p below 1f1b's (p - 1) / (m + p - 1) (tests/unit/test_schedule_v.c). */
double dt_schedule_bubble_theory_v(dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                                   double f, double b, double w);
/* The steady-state bubble (dt_schedule_steady's) kind should have with f, b and w on every virtual
 * stage and free messages, its steps back to back:
 *   gpipe, 1f1b, zb-h1, interleaved, v-half  the one step's (dt_schedule_bubble_theory_v): their
 *                first stage both starts a step and ends it last, so the next step cannot start
 *                sooner and the descent is paid again every step.
 *   zb-v         0 with f = b = w and m >= 2p - 1: the later stages end the step with the W's their
 *                descent was short of, and each stage runs without a gap (stage i over
 *                [i f + k T, i f + (k + 1) T], T = 2 m (f + b + w)); the descent's (p - 1) f is paid
 *                once per run, so K steps' bubble is (p - 1) f / (2 K m (f + b + w) + (p - 1) f).
 *                Otherwise (unequal times, short steps) no closed form: the simulator's figure.
 * tests/unit/test_schedule_steady.c holds each to the simulator for p <= 8, m <= 32. Returns -1
 * where kind cannot be built with these sizes. */
double dt_schedule_bubble_steady_v(dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                                   double f, double b, double w);

#endif
