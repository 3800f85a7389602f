/* bench/bench_pipe.c - `dtrain bench --cluster` with pipeline stages (strategy model or hybrid).
 * Every rank runs its stage's training step on random samples, the step a run takes (one module:
 * train/stepper.c): dt_pipe_train with a feed hook on stage 0 and a score hook on the last stage,
 * the stage's gradient all-reduce over the data axis, the whole model's gradient norm over the
 * tensor and pipeline axes (tensor shards included), clipping and the optimizer. The walk's own clocks
 * (dt_pipe_times, filled by pipeline.c around each action) say where a stage's time went, so no
 * second driver is written here. Per-stage figures are averaged over a stage's replicas on the
 * data axis and exchanged over the pipeline axis: every rank ends with the whole table, and no
 * rank number is ever derived from the grid's layout. World rank 0 reports them next to the
 * schedule's theoretical bubble and the simulator's prediction from the measured costs. */
#include "bench/bench_int.h"

#include <math.h>
#include <stdlib.h>
#include <malloc.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <mpi.h>
#include "util/common.h"
#include "util/stats.h"
#include "util/cpu_fix.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "parallel/dp.h"
#include "plan/mem.h"
#include "optim/moments.h"
#include "util/rss.h"
#include "parallel/pipeline.h"
#include "parallel/schedule.h"
#include "train/stepper.h"

typedef struct pbench {
        dt_setup *su;
        dt_pipe pipe;
        dt_dp dp;
        dt_bench_pool pl;               /* stage 0: inputs; the last stage: labels (and targets) */
        int B, lo, hi;                  /* global batch; this replica's slice */
        int32_t *lab;                   /* one micro-batch's labels and targets (the last stage) */
        float *tgt;
        dt_moments mo;                  /* optimizer moments (this rank's parts) */
        long step;
        dt_stepper stp;                 /* the step a run takes; its clocks: the hooks' seconds (inside F
                                         * and B's times), the data axis's, the norm's and the update's */
} pbench;

/* Per-rank figures exchanged over the axes: ms per micro-batch (F, B, W, and from V_CH each chunk's
 * F, B and W), else ms per step. */
enum { V_F, V_B, V_W, V_NMB, V_BUSY, V_PIPE, V_RACT, V_RGRAD, V_SENDW, V_SENDP, V_FEED, V_LOSS, V_DP,
       V_NORM, V_UPDATE, V_STEP, V_PARAMS, V_NSEND, V_NRECV, V_RWAIT, V_CH, V_N = V_CH + 3 * DT_SCHEDULE_MAX_CHUNKS };

/* ---- the step ---- */

/* The stepper's data (train/stepper.h): random samples, inputs on stage 0, labels on the last. */
static void fill(void *ud, long pos0, int b, int inputs, int labels)
{
        pbench *t = ud;
        (void)pos0;     /* random samples: the position does not matter */
        dt_bench_pool_draw(&t->pl, t->su->be, b, inputs ? t->su->g.act[0] : NULL, labels ? t->lab : NULL,
                           labels ? t->tgt : NULL);
}

/* One training step as a run takes it (train/stepper.h: the walk, the data axis's sum, the whole
 * model's norm over the tensor and pipeline axes, clipping, the optimizer); returns its seconds. */
static double step(pbench *t)
{
        double stats[2] = { 0, 0 }, t0 = dt_now();
        dt_step_run(&t->stp, t->step, t->B, stats);
        t->step++;
        return dt_now() - t0;
}

/* The timed steps back to back, as a run takes them (a stage starts the next step's walk while
 * others finish this one); steps[i] each one's seconds. Returns the wall time per step between a
 * rendezvous before the first and one after the last: each stage's steady-state step. */
static double timed(pbench *t, double *steps, int iters)
{
        dt_comm *w = &t->su->world;
        int x = 0;
        dt_comm_allreduce(w, &x, 1, MPI_INT, "bench rendezvous");
        double t0 = dt_now();
        for (int i = 0; i < iters; i++) steps[i] = step(t);
        dt_step_settle(&t->stp);        /* the last step's norm sum */
        dt_comm_allreduce(w, &x, 1, MPI_INT, "bench rendezvous");
        double per = (dt_now() - t0) / iters;
        dt_comm_allreduce_op(w, &per, 1, MPI_DOUBLE, MPI_MAX, "bench figures");
        return per;
}

/* ---- set-up ---- */

/* World rank 0's rc to every rank. The others may wait through a whole one-rank run: they sleep
 * between tests rather than spin, which on a small machine would take a core from that run. */
static int bcast_rc_idle(dt_comm *w, int rc)
{
        MPI_Request r;
        int done = 0;
        MPI_Ibcast(&rc, 1, MPI_INT, 0, w->comm, &r);
        for (;;) {
                MPI_Test(&r, &done, MPI_STATUS_IGNORE);
                if (done) return rc;
                nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
        }
}

static void draw_layer(void *ud, int i)
{
        dt_setup *su = ud;
        dt_grid_init_layer(&su->grid, &su->g, i, su->spec.train.seed);
}

static int prepare(pbench *t, const char *path, const dt_bench_opts *o)
{
        dt_setup *su = t->su;
        const dt_train_spec *tr = &su->spec.train;
        dt_setup_opts so = { .model = path, .cluster = o->cluster, .device = "cpu", .conv = o->conv, .batch = o->batch,
                             .max_steps = -1, .seed = -1, .threads = o->threads, .quiet = 1,
                             .sets = &o->sets };
        int rc, nm = dt_optim_nmoments(&tr->opt);
        int micro = dt_setup_micro_batches(su);         /* at most the smallest slice: every replica's count */
        t->B = tr->batch;
        dt_grid_slice(&su->grid, t->B, &t->lo, &t->hi);
        int mbmax = (t->hi - t->lo + micro - 1) / micro;        /* the largest micro-batch (pipeline.c's cut) */
        if ((rc = dt_setup_check_memory(su, mbmax, su->grid.nslots)) || (rc = dt_setup_backend(su, &so))) return rc;
        if (dt_graph_alloc_slots(&su->g, su->be, mbmax, su->grid.nslots) < 0) dt_die(DT_EXIT_RUNTIME, "layer setup failed");
        dt_pipe_init(&t->pipe, &su->grid.pipe_axis, &su->g, su->grid.L.sched, micro);
        /* as the run starts (train/prepare.c): a tensor group's shards cut; shard 3's parameters in
         * pages of which a rank keeps its parts, drawn after dt_dp_init; the moments of this
         * rank's parts, laid out as the run's */
        su->g.paged = su->cs.shard == 3 && dt_grid_replicas(&su->grid) > 1;
        if (!su->g.paged) dt_grid_init_params(&su->grid, &su->g, tr->seed);
        dt_dp_init(&t->dp, su->grid.data, &su->cs, &su->g);
        dt_shard_bound_grads(&t->dp.sh, su->grid.L.grid[DT_AXIS_PIPE] <= 1);
        if (su->g.paged && !dt_shard_init_params(&t->dp.sh, draw_layer, su)) dt_grid_init_params(&su->grid, &su->g, tr->seed);
        t->mo.n = nm;
        size_t nmo = dt_shard_len(&t->dp.sh);
        dt_moments_alloc(&t->mo, nmo);
        if (t->mo.m) memset(t->mo.m, 0, nmo * sizeof(float));
        if (t->mo.v) memset(t->mo.v, 0, nmo * sizeof(float));
        int first = dt_grid_feeds(&su->grid), last = dt_grid_scores(&su->grid);
        dt_bench_pool_make(&t->pl, su, t->hi - t->lo, tr->seed * 2654435761u + (uint64_t)su->rank + 1, first, last);
        if (last) {
                t->lab = dt_malloc((size_t)mbmax * su->rows * sizeof *t->lab);
                if (t->pl.tgt) t->tgt = dt_falloc((size_t)mbmax * su->rows * su->C);
        }
        /* the schedule over an unknown length: any point of it costs the same */
        t->stp = (dt_stepper){ .su = su, .dp = &t->dp, .pipe = &t->pipe, .m = t->mo.m, .v = t->mo.v, .lab = t->lab,
                               .tgt = t->tgt, .fill = fill, .ud = t, .spe = 1, .total = 1L << 40 };
        return 0;
}

static void free_pbench(pbench *t)
{
        dt_step_free(&t->stp);
        dt_dp_free(&t->dp);
        dt_pipe_free(&t->pipe);
        dt_bench_pool_free(&t->pl);
        free(t->lab);
        free(t->tgt);
        free(t->mo.blk);
}

/* This rank's figures per step (means over the timed steps). */
static void figures(const pbench *t, const double *steps, int iters, double v[V_N])
{
        const dt_pipe_times *tm = &t->pipe.tm;
        const double *a = tm->act;
        double n = iters, ms = 1e3 / n, sum = 0;
        long nf = tm->nact[DT_ACT_FORWARD], nb = tm->nact[DT_ACT_BACKWARD_INPUT], nw = tm->nact[DT_ACT_BACKWARD_WEIGHT];
        for (int i = 0; i < iters; i++) sum += steps[i];
        memset(v, 0, V_N * sizeof *v);
        v[V_F] = nf ? 1e3 * a[DT_ACT_FORWARD] / nf : 0;
        v[V_B] = nb ? 1e3 * a[DT_ACT_BACKWARD_INPUT] / nb : 0;
        v[V_W] = nw ? 1e3 * a[DT_ACT_BACKWARD_WEIGHT] / nw : 0;
        v[V_NMB] = nf / n;
        v[V_BUSY] = ms * (a[DT_ACT_FORWARD] + a[DT_ACT_BACKWARD_INPUT] + a[DT_ACT_BACKWARD_WEIGHT]);
        v[V_PIPE] = ms * tm->train;
        v[V_RACT] = ms * a[DT_ACT_RECV_ACT];
        v[V_RGRAD] = ms * a[DT_ACT_RECV_GRAD];
        v[V_SENDW] = ms * tm->sends;
        v[V_SENDP] = ms * (a[DT_ACT_SEND_ACT] + a[DT_ACT_SEND_GRAD]);
        v[V_FEED] = ms * t->stp.t_feed;
        v[V_LOSS] = ms * t->stp.t_loss;
        v[V_DP] = ms * t->stp.t_sync;
        v[V_NORM] = ms * t->stp.t_norm;
        v[V_UPDATE] = ms * t->stp.t_update;
        v[V_STEP] = ms * sum;
        v[V_PARAMS] = (double)t->su->g.nparams;
        v[V_NSEND] = (double)(tm->nact[DT_ACT_SEND_ACT] + tm->nact[DT_ACT_SEND_GRAD]) / n;
        v[V_NRECV] = (double)(tm->nact[DT_ACT_RECV_ACT] + tm->nact[DT_ACT_RECV_GRAD]) / n;
        v[V_RWAIT] = ms * tm->recv_wait;
        for (int c = 0; c < DT_SCHEDULE_MAX_CHUNKS; c++)
                for (int k = 0; k < 3; k++)
                        v[V_CH + 3 * c + k] = tm->nchunk[c][k] ? 1e3 * tm->chunk[c][k] / (double)tm->nchunk[c][k] : 0;
}

/* ---- the report (world rank 0) ---- */

typedef struct pres {
        int P, D, m, mbmax, iters;
        double *tab;                    /* [P][V_N], each stage's figures averaged over its replicas */
        double step_ms, rss_mib, one_ms;
        double plan_mib, plan_err;      /* the largest rank's plan (plan/mem.h), the worst rank's error */
        double pipe_ms, bubble, theory, f, b, w;
        int sim_ok, slowest;
        dt_schedule_sim sim;
        double sim_free;                /* the simulator's bubble with free messages: the gap from the
                                         * formula that the stages' unequal costs alone make */
        double p2p_s;                   /* the simulator's message time */
        /* the steps back to back, no barrier between them (schedule.h's steady state): the formula and
         * the simulator's play of --iters steps with the measured costs */
        double theory_steady;
        int steady_ok;
        dt_schedule_steady steady;
        double steady_free;             /* its bubble with free messages */
        double steady_ms;               /* the timed steps' wall time (back to back) per step */
        double bubble_steady;           /* from it: what each stage leaves idle of it */
        double send_s, recv_s;          /* its core time per send and per receive, measured */
} pres;

/* The simulator's one message time: the cluster spec's network model (latency + bytes / bandwidth)
 * for the largest micro-batch's activation at the widest cut. */
static double p2p_seconds(const dt_setup *su, int mbmax)
{
        const dt_graph *full = dt_setup_model_graph(su);
        double bytes = 0;
        for (int s = 0; s + 1 < su->grid.L.grid[DT_AXIS_PIPE]; s++) {
                dt_graph st;    /* what crosses the cut: the stage's outputs (several on a branched graph) */
                dt_layout_stage_graph(&su->grid.L, full, s, &st);
                double fl = 0;
                for (int k = 0; k < st.nout; k++) fl += (double)dt_shape_size(dt_graph_tensor_shape(&st, st.out_t[k]));
                dt_graph_free(&st);
                bytes = DT_MAX(bytes, 4.0 * mbmax * fl);
        }
        double bw = su->cs.bandwidth_gbs > 0 ? su->cs.bandwidth_gbs * 1e9 : 0;
        return su->cs.latency_us * 1e-6 + (bw > 0 ? bytes / bw : 0);
}

static void analyse(const dt_setup *su, pres *r)
{
        dt_schedule_kind kind = (dt_schedule_kind)su->cs.schedule;
        double busy = 0, top = -1;
        r->pipe_ms = 0;
        for (int s = 0; s < r->P; s++) {
                const double *v = r->tab + (size_t)s * V_N;
                r->pipe_ms = DT_MAX(r->pipe_ms, v[V_PIPE]);
                busy += v[V_BUSY];
                r->f += v[V_F] / r->P;
                r->b += v[V_B] / r->P;
                r->w += v[V_W] / r->P;
                if (v[V_BUSY] > top) {
                        top = v[V_BUSY];
                        r->slowest = s;
                }
        }
        /* in steady state: the step's wall time T less each stage's compute c_s (its actions and its
         * update), sum (T - c_s) / (P T); the fill and drain are paid once over the timed steps */
        double c = 0;
        for (int s = 0; s < r->P; s++) c += r->tab[(size_t)s * V_N + V_BUSY] + r->tab[(size_t)s * V_N + V_UPDATE];
        r->bubble_steady = r->steady_ms > 0 ? 1.0 - c / (r->P * r->steady_ms) : 0;
        /* idle = the slowest walk less the stage's compute, as the simulator counts it */
        r->bubble = r->pipe_ms > 0 ? 1.0 - busy / (r->P * r->pipe_ms) : 0;
        /* with chunks an action is a chunk's: f, b and w are a chunk's times, as the formula takes them */
        int V = dt_layout_chunks(&su->grid.L);
        r->theory = dt_schedule_bubble_theory_v(kind, r->P, V, r->m, r->f, r->b, r->w);
        r->theory_steady = dt_schedule_bubble_steady_v(kind, r->P, V, r->m, r->f, r->b, r->w);
        dt_schedule s;
        dt_stage_cost cost[DT_SCHEDULE_MAX_STAGES];
        char err[256];
        r->p2p_s = p2p_seconds(su, r->mbmax);
        /* each chunk at its own action times: a stage's mean would give zb-v's and v-half's stage 0
         * a first chunk as slow as its last, which holds the loss (at m = 8 on mlp-even8 its B was
         * 1.6 ms against the first chunk's 0.9) */
        for (int k = 0; k < r->P; k++)
                for (int c = 0; c < V; c++) {
                        const double *v = r->tab + (size_t)k * V_N + V_CH + 3 * c;
                        cost[dt_schedule_vstage(kind, r->P, V, k, c)] = (dt_stage_cost){ v[0] / 1e3, v[1] / 1e3, v[2] / 1e3 };
                }
        /* each message's own cost on its sender's and receiver's cores (the post, and a packed
         * message's copy; the unpack once it is there), the means over stages */
        double ns = 0, nr = 0, ts = 0, tr = 0;
        for (int k = 0; k < r->P; k++) {
                const double *v = r->tab + (size_t)k * V_N;
                ns += v[V_NSEND], nr += v[V_NRECV], ts += v[V_SENDP], tr += v[V_RACT] + v[V_RGRAD] - v[V_RWAIT];
        }
        r->send_s = ns > 0 ? ts / ns / 1e3 : 0;
        r->recv_s = nr > 0 ? DT_MAX(tr, 0) / nr / 1e3 : 0;
        r->sim_ok = dt_schedule_build_v(&s, kind, r->P, V, r->m, err, sizeof err) == 0;
        if (r->sim_ok) {
                dt_sim_link lk = { .p2p = r->p2p_s, .send = r->send_s, .recv = r->recv_s }, free_lk = { 0 };
                dt_schedule_sim fr;
                r->sim_ok = dt_schedule_simulate_link(&s, cost, &lk, &r->sim, err, sizeof err) == 0 &&
                            dt_schedule_simulate_link(&s, cost, &free_lk, &fr, err, sizeof err) == 0;
                r->sim_free = r->sim_ok ? fr.bubble : 0;
                /* the timed steps, at least two for a steady step, within what the play holds */
                int K = DT_MAX(2, DT_MIN(r->iters, DT_MIN(DT_SCHEDULE_MAX_STEPS, 65536 / r->m)));
                dt_schedule_steady sf;
                r->steady_ok = r->sim_ok && dt_schedule_simulate_steps(&s, cost, &lk, K, &r->steady, err, sizeof err) == 0 &&
                               dt_schedule_simulate_steps(&s, cost, &free_lk, K, &sf, err, sizeof err) == 0;
                r->steady_free = r->steady_ok ? sf.bubble : 0;
                dt_schedule_free(&s);
        }
        if (!r->sim_ok) dt_note("the schedule simulator failed: %s", err);
}

static void jset(json_t *o, const char *k, double x) { json_object_set_new(o, k, json_real(x)); }

static double mean_over_stages(const pres *r, int k)
{
        double x = 0;
        for (int s = 0; s < r->P; s++) x += r->tab[(size_t)s * V_N + k] / r->P;
        return x;
}

/* The report's opening: the run, its grid and schedule into m and, with f, the header lines. */
static void pipe_head(const dt_setup *su, const dt_bench_opts *o, const pres *r, json_t *m, FILE *f)
{
        const dt_graph *full = dt_setup_model_graph(su);
        const char *sched = dt_pipe_names[su->cs.schedule];
        json_object_set_new(m, "model", json_string(su->spec.name));
        json_object_set_new(m, "file", json_string(su->spec.file));
        json_object_set_new(m, "batch", json_integer(su->spec.train.batch));
        json_object_set_new(m, "local_batch", json_integer(su->spec.train.batch / r->D));
        json_object_set_new(m, "ranks", json_integer(su->size));
        json_object_set_new(m, "threads", json_integer(su->threads));
        json_object_set_new(m, "iters", json_integer(o->iters));
        json_object_set_new(m, "warmup", json_integer(o->warmup));
        json_object_set_new(m, "params", json_integer((json_int_t)full->nparams));
        jset(m, "flops_per_sample", full->flops);
        json_object_set_new(m, "blas_core", json_string(dt_blas_core_desc()));
        json_object_set_new(m, "strategy", json_string(dt_part_names[su->cs.strategy]));
        json_t *grid = json_object();
        json_object_set_new(grid, "data", json_integer(r->D));
        json_object_set_new(grid, "pipeline", json_integer(r->P));
        json_object_set_new(grid, "tensor", json_integer(su->grid.L.grid[DT_AXIS_TENSOR]));
        json_object_set_new(m, "grid", grid);
        json_object_set_new(m, "schedule", json_string(sched));
        json_object_set_new(m, "micro_batches", json_integer(r->m));
        json_object_set_new(m, "micro_batch_size", json_integer(r->mbmax));
        jset(m, "clip_norm", su->spec.train.clip_norm);
        if (!f) return;
        fprintf(f, "model %s (%s): batch %d (global), %d ranks x %d thread%s; strategy %s, data %d x pipeline "
                "%d, schedule %s, %d micro-batches of up to %d; means of %d steps after %d warm-up\n",
                su->spec.name, su->spec.file, su->spec.train.batch, su->size, su->threads,
                su->threads == 1 ? "" : "s", dt_part_names[su->cs.strategy], r->D, r->P, sched, r->m,
                r->mbmax, o->iters, o->warmup);
        fprintf(f, "%-5s %-26s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %8s %9s %8s\n", "stage", "layers", "params",
                "F ms/mb", "B ms/mb", "W ms/mb", "busy ms", "idle ms", "formula", "sim", "steady", "recv act",
                "recv grad", "sends", "allreduce", "norm");
}

/* Stage s's row: its layers, per-micro-batch times, idle time and communication waits. */
static void stage_row(const dt_setup *su, const pres *r, int s, json_t *stages, FILE *f)
{
        const dt_graph *full = dt_setup_model_graph(su);
        const double *v = r->tab + (size_t)s * V_N;
        const dt_layout *L = &su->grid.L;
        int V = dt_layout_chunks(L), nl = 0;
        int a = L->first[dt_schedule_vstage(L->sched, r->P, V, s, 0)];
        int z = L->first[dt_schedule_vstage(L->sched, r->P, V, s, V - 1) + 1] - 1;
        char layers[64] = "";
        for (int c = 0; c < V; c++) {   /* each chunk's first .. last */
                int vs = dt_schedule_vstage(L->sched, r->P, V, s, c), c0 = L->first[vs], c1 = L->first[vs + 1] - 1;
                size_t k = strlen(layers);
                nl += c1 - c0 + 1;
                snprintf(layers + k, sizeof layers - k, "%s%s%s%s", c ? "+" : "", full->layers[c0].name,
                         c1 > c0 ? ".." : "", c1 > c0 ? full->layers[c1].name : "");
        }
        double idle = r->pipe_ms - v[V_BUSY];
        /* the formula's idle for this stage: its bubble fraction of a walk whose work is this stage's */
        double fidle = r->theory < 1 ? r->theory / (1 - r->theory) * v[V_BUSY] : 0;
        json_t *e = json_object();
        json_object_set_new(e, "stage", json_integer(s));
        json_object_set_new(e, "first_layer", json_string(full->layers[a].name));
        json_object_set_new(e, "last_layer", json_string(full->layers[z].name));
        json_object_set_new(e, "layers", json_integer(nl));
        json_object_set_new(e, "chunks", json_string(layers));
        jset(e, "formula_idle_ms", fidle);
        json_object_set_new(e, "params", json_integer((json_int_t)v[V_PARAMS]));
        jset(e, "micro_batches", v[V_NMB]);
        jset(e, "fwd_ms", v[V_F]);
        jset(e, "bwd_ms", v[V_B]);
        jset(e, "wgt_ms", v[V_W]);
        jset(e, "data_ms", v[V_FEED]);
        jset(e, "loss_ms", v[V_LOSS]);
        jset(e, "busy_ms", v[V_BUSY]);
        jset(e, "idle_ms", idle);
        jset(e, "steady_idle_ms", r->steady_ms - v[V_BUSY] - v[V_UPDATE]);
        jset(e, "walk_ms", v[V_PIPE]);
        jset(e, "recv_act_ms", v[V_RACT]);
        jset(e, "recv_grad_ms", v[V_RGRAD]);
        jset(e, "send_wait_ms", v[V_SENDW]);
        jset(e, "send_post_ms", v[V_SENDP]);
        jset(e, "p2p_ms", v[V_RACT] + v[V_RGRAD] + v[V_SENDW] + v[V_SENDP]);
        jset(e, "allreduce_ms", v[V_DP]);
        jset(e, "norm_ms", v[V_NORM]);
        jset(e, "update_ms", v[V_UPDATE]);
        jset(e, "step_ms", v[V_STEP]);
        if (r->sim_ok) jset(e, "sim_idle_ms", 1e3 * r->sim.idle[s]);
        else json_object_set_new(e, "sim_idle_ms", json_null());
        if (r->steady_ok) jset(e, "sim_steady_idle_ms", 1e3 * r->steady.idle[s]);
        else json_object_set_new(e, "sim_steady_idle_ms", json_null());
        json_t *cm = json_array();      /* each chunk's F, B and W, as the simulator takes them */
        for (int c = 0; c < V; c++) {
                json_t *t = json_array();
                for (int k = 0; k < 3; k++) json_array_append_new(t, json_real(v[V_CH + 3 * c + k]));
                json_array_append_new(cm, t);
        }
        json_object_set_new(e, "chunk_ms", cm);
        json_array_append_new(stages, e);
        if (!f) return;
        char row[80];
        if (V == 1) snprintf(row, sizeof row, "%s .. %s (%d)", full->layers[a].name, full->layers[z].name, nl);
        else snprintf(row, sizeof row, "%s (%d)", layers, nl);
        fprintf(f, "%-5d %-26s %9.0f %8.3f %8.3f %8.3f %8.2f %8.2f %8.2f %8.2f %8.2f %8.3f %9.3f %8.3f %9.3f %8.3f\n", s,
                row, v[V_PARAMS], v[V_F], v[V_B], v[V_W], v[V_BUSY], idle, fidle, r->sim_ok ? 1e3 * r->sim.idle[s] : -1,
                r->steady_ok ? 1e3 * r->steady.idle[s] : -1, v[V_RACT], v[V_RGRAD], v[V_SENDW] + v[V_SENDP], v[V_DP],
                v[V_NORM]);
}

/* The pipeline as a whole: its walk, the bubble measured, in theory and simulated. */
static json_t *pipeline_json(const pres *r)
{
        json_t *pp = json_object();
        jset(pp, "walk_ms", r->pipe_ms);
        jset(pp, "bubble", r->bubble);
        jset(pp, "bubble_theory", r->theory);
        jset(pp, "bubble_steady", r->bubble_steady);
        jset(pp, "steady_step_ms", r->steady_ms);
        json_object_set_new(pp, "bubble_sim", r->sim_ok ? json_real(r->sim.bubble) : json_null());
        json_object_set_new(pp, "sim_walk_ms", r->sim_ok ? json_real(1e3 * r->sim.makespan) : json_null());
        json_object_set_new(pp, "bubble_sim_free", r->sim_ok ? json_real(r->sim_free) : json_null());
        jset(pp, "bubble_theory_steady", r->theory_steady);
        json_object_set_new(pp, "bubble_sim_steady", r->steady_ok ? json_real(r->steady.bubble) : json_null());
        json_object_set_new(pp, "bubble_sim_steady_free", r->steady_ok ? json_real(r->steady_free) : json_null());
        json_object_set_new(pp, "sim_steady_step_ms", r->steady_ok ? json_real(1e3 * r->steady.period) : json_null());
        json_object_set_new(pp, "bubble_sim_run", r->steady_ok ? json_real(r->steady.amortised) : json_null());
        json_object_set_new(pp, "sim_steps", json_integer(r->steady_ok ? r->steady.nsteps : 0));
        jset(pp, "sim_p2p_ms", 1e3 * r->p2p_s);
        jset(pp, "sim_send_ms", 1e3 * r->send_s);
        jset(pp, "sim_recv_ms", 1e3 * r->recv_s);
        jset(pp, "f_ms", r->f);
        jset(pp, "b_ms", r->b);
        jset(pp, "w_ms", r->w);
        json_object_set_new(pp, "waits_yield", json_boolean(dt_comm_yields()));
        json_object_set_new(pp, "slowest_stage", json_integer(r->slowest));
        return pp;
}

/* Communication per step, each kind's mean over stages (into c[6] too, in the order of ck). */
static json_t *comm_json(const pres *r, double c[6])
{
        static const struct { const char *key; int k; } ck[] = {
                { "recv_act_ms", V_RACT }, { "recv_grad_ms", V_RGRAD }, { "send_wait_ms", V_SENDW },
                { "send_post_ms", V_SENDP }, { "dp_allreduce_ms", V_DP }, { "norm_allreduce_ms", V_NORM },
        };
        json_t *cm = json_object();
        for (int k = 0; k < 6; k++) jset(cm, ck[k].key, c[k] = mean_over_stages(r, ck[k].k));
        jset(cm, "p2p_ms", c[0] + c[1] + c[2] + c[3]);
        return cm;
}

/* The table's closing lines: the pipeline's bubble, communication, the step against one rank's,
 * the slowest stage and memory. */
static void pipe_summary(const dt_setup *su, const pres *r, const double c[6], double sps, double sps1, FILE *f)
{
        const char *sched = dt_pipe_names[su->cs.schedule];
        int V = dt_layout_chunks(&su->grid.L), last, lc;
        dt_schedule_place(su->grid.L.sched, r->P, V, r->P * V - 1, &last, &lc);     /* zb-v: stage 0 scores */
        const double *s0 = r->tab, *sl = r->tab + (size_t)last * V_N, *hot = r->tab + (size_t)r->slowest * V_N;
        fprintf(f, "(stage 0's F includes feeding the data, %.3f ms per step; stage %d's B the loss, %.3f ms)\n",
                s0[V_FEED], last, sl[V_LOSS]);
        fprintf(f, "pipeline: %.3f ms per step (the slowest stage's walk); bubble %.1f%% measured, %.1f%% in theory "
                "(%s, %d stages, %d micro-batches)", r->pipe_ms, 100 * r->bubble, 100 * r->theory, sched, r->P, r->m);
        if (r->sim_ok)
                fprintf(f, ", %.1f%% simulated (%.3f ms predicted from the measured costs; %.1f%% with free "
                        "messages)", 100 * r->sim.bubble, 1e3 * r->sim.makespan, 100 * r->sim_free);
        if (r->steady_ok)
                fprintf(f, "\nsteps back to back (no barrier between them): bubble %.1f%% in steady state in theory, "
                        "%.1f%% simulated (%.3f ms a step; %.1f%% with free messages); %.1f%% over %d steps",
                        100 * r->theory_steady, 100 * r->steady.bubble, 1e3 * r->steady.period, 100 * r->steady_free,
                        100 * r->steady.amortised, r->steady.nsteps);
        fprintf(f, "\nsteady state measured: %.3f ms a step (%d steps back to back); bubble %.1f%% (each stage idle: "
                "the step less its F, B, W and update)", r->steady_ms, r->iters, 100 * r->bubble_steady);
        fprintf(f, "\ncommunication per step (mean over ranks): point to point %.3f ms (activation receives %.3f, "
                "gradient receives %.3f, send completion %.3f, posting %.3f; waits %s); gradient all-reduce over "
                "%d replica%s %.3f ms; gradient-norm all-reduce %.3f ms\n", c[0] + c[1] + c[2] + c[3], c[0], c[1], c[2],
                c[3], dt_comm_yields() ? "yield the core (ranks outnumber cores)" : "poll without yielding", r->D,
                r->D == 1 ? "" : "s", c[4], c[5]);
        fprintf(f, "step: %.3f ms (median, slowest rank), %.0f samples/s; update %.3f ms\n", r->step_ms, sps,
                mean_over_stages(r, V_UPDATE));
        if (r->one_ms > 0)
                fprintf(f, "one rank: %.3f ms, %.0f samples/s; speed-up %.2fx on %d ranks\n", r->one_ms, sps1,
                        sps / sps1, su->size);
        fprintf(f, "slowest stage: %d, busy %.3f ms of the %.3f ms walk (%.1f x F %.3f ms + B %.3f ms + W %.3f ms)\n",
                r->slowest, hot[V_BUSY], r->pipe_ms, hot[V_NMB], hot[V_F], hot[V_B], hot[V_W]);
        fprintf(f, "memory: peak RSS %.1f MiB (largest rank, the timed steps), planned %.1f MiB (worst rank %+.1f%%)\n\n",
                r->rss_mib, r->plan_mib, r->plan_err);
}

/* Builds the pipeline run's JSON object and, with f, prints its table (rank 0). */
static json_t *report(const dt_setup *su, const dt_bench_opts *o, const pres *r, FILE *f)
{
        double sps = r->step_ms > 0 ? su->spec.train.batch / (r->step_ms / 1e3) : 0;
        json_t *m = json_object(), *stages = json_array();
        pipe_head(su, o, r, m, f);
        for (int s = 0; s < r->P; s++) stage_row(su, r, s, stages, f);
        json_object_set_new(m, "stages", stages);
        json_object_set_new(m, "pipeline", pipeline_json(r));
        double c[6];
        json_object_set_new(m, "comm", comm_json(r, c));
        jset(m, "update_ms", mean_over_stages(r, V_UPDATE));
        jset(m, "step_ms", r->step_ms);
        jset(m, "samples_per_sec", sps);
        jset(m, "peak_rss_mib", r->rss_mib);
        jset(m, "planned_mib", r->plan_mib);
        jset(m, "planned_error_pct", r->plan_err);
        double sps1 = r->one_ms > 0 ? su->spec.train.batch / (r->one_ms / 1e3) : 0;
        if (r->one_ms > 0) {
                json_t *one = json_object();
                jset(one, "step_ms", r->one_ms);
                jset(one, "samples_per_sec", sps1);
                jset(one, "speedup", sps / sps1);
                json_object_set_new(m, "one_rank", one);
        } else {
                json_object_set_new(m, "one_rank", json_null());
        }
        if (f) pipe_summary(su, r, c, sps, sps1, f);
        return m;
}

/* ---- the command ---- */

int dt_bench_pipe(dt_setup *su, const char *path, const dt_bench_opts *o, json_t *all)
{
        pbench t = { .su = su };
        pres r = { .P = su->grid.L.grid[DT_AXIS_PIPE], .D = su->grid.L.grid[DT_AXIS_DATA], .iters = o->iters };
        int rc = 0;
        /* the one-rank figure first, before this rank opens its backend: world rank 0 alone, with
         * the threads each stage will have */
        if (o->one_rank) {
                int threads = dt_setup_threads(o->threads, su->cs.threads_per_rank, su->world.local_size);
                if (su->rank == 0) rc = dt_bench_one_rank(path, o, threads, &r.one_ms);
                if ((rc = bcast_rc_idle(&su->world, rc))) return rc;
        }
        if ((rc = prepare(&t, path, o))) {
                free_pbench(&t);
                return rc;
        }
        r.m = dt_setup_micro_batches(su);
        r.mbmax = (t.hi - t.lo + r.m - 1) / r.m;
        double *steps = dt_malloc((size_t)o->iters * sizeof *steps), v[V_N];
        for (int i = 0; i < o->warmup; i++) step(&t);
        dt_step_settle(&t.stp);
        memset(&t.pipe.tm, 0, sizeof t.pipe.tm);
        t.stp.t_feed = t.stp.t_loss = t.stp.t_sync = t.stp.t_norm = t.stp.t_update = 0;
        malloc_trim(0);         /* what rank 0's one-rank figure left in the heap */
        dt_rss_reset_peak();
        r.steady_ms = 1e3 * timed(&t, steps, o->iters);
        figures(&t, steps, o->iters, v);
        /* a stage's figures: the mean over its replicas, then every stage's row to every rank */
        dt_comm_allreduce(su->grid.data, v, V_N, MPI_DOUBLE, "bench figures");
        for (int k = 0; k < V_N; k++) v[k] /= su->grid.data->size;
        r.tab = dt_calloc((size_t)r.P * V_N, sizeof *r.tab);
        memcpy(r.tab + (size_t)su->grid.at.stage * V_N, v, sizeof v);
        dt_comm_allreduce(&su->grid.pipe_axis, r.tab, (long)r.P * V_N, MPI_DOUBLE, "bench figures");
        /* the job's step: each step's slowest rank, then the median */
        dt_comm_allreduce_op(&su->world, steps, o->iters, MPI_DOUBLE, MPI_MAX, "bench figures");
        r.step_ms = 1e3 * dt_median(steps, o->iters);
        /* the timed steps' peak (VmHWM, reset before them) against the run's plan for this rank */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double peak = dt_rss_peak() ? (double)dt_rss_peak() / 1048576.0 : ru.ru_maxrss / 1024.0;
        dt_mem_plan mp;
        size_t data = dt_bench_pool_bytes(&t.pl) + (size_t)r.mbmax * (size_t)su->rows * (sizeof(int32_t) + (t.tgt ? (size_t)su->C * sizeof(float) : 0));
        dt_setup_mem_plan(su, r.mbmax, su->grid.nslots, data, 0, &mp);
        double mine[3] = { mp.total / 1048576.0, peak, peak > 0 ? 100.0 * (mp.total / 1048576.0 - peak) / peak : 0 };
        double hi[3] = { mine[0], mine[1], fabs(mine[2]) };
        dt_comm_allreduce_op(&su->world, hi, 3, MPI_DOUBLE, MPI_MAX, "bench figures");
        /* the sign of the worst rank's error: a rank whose |error| is the largest reports it */
        double err = fabs(mine[2]) == hi[2] ? mine[2] : -1e300;
        dt_comm_allreduce_op(&su->world, &err, 1, MPI_DOUBLE, MPI_MAX, "bench figures");
        r.plan_mib = hi[0], r.rss_mib = hi[1], r.plan_err = err;
        if (su->rank == 0) {
                analyse(su, &r);
                json_array_append_new(all, report(su, o, &r, o->json ? NULL : stdout));
                fflush(stdout);
        }
        free(r.tab);
        free(steps);
        free_pbench(&t);
        return 0;
}
