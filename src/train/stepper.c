/* train/stepper.c - one training step, shared by run and bench (see stepper.h). */
#include "train/stepper.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "util/common.h"
#include "util/fault.h"
#include "util/trace.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "parallel/comm.h"
#include "plan/mem.h"

_Noreturn void dt_step_nonfinite(const dt_setup *su, const char *fmt, ...)
{
        char m[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        const dt_train_spec *tr = &su->spec.train;
        char clip[64] = "train.clip_norm, e.g. 1.0";
        if (tr->clip_norm > 0) snprintf(clip, sizeof clip, "a smaller train.clip_norm than %g", tr->clip_norm);
        dt_die(DT_EXIT_NUMERIC, "%s; a lower learning rate (train.optimizer.lr, now %g) or gradient clipping "
               "(%s) usually cures it, else check the data's scale", m, tr->lr, clip);
}

double dt_step_loss(const dt_setup *su, const float *out, const int32_t *lab, const float *tgt, int b, float scale,
                    float *dout, long *correct)
{
        int xent = su->spec.loss == DT_LOSS_SOFTMAX_XENT;
        if (su->be->ops->loss)  /* device backend: out and dout are device memory */
                return su->be->ops->loss(su->be, xent ? 0 : 1, out, lab, xent ? NULL : tgt, b * su->rows, su->C, scale,
                                         dout, correct);
        if (xent) return dt_loss_softmax_xent_be(su->be, out, lab, b * su->rows, su->C, scale, dout, correct);
        return dt_loss_mse(out, tgt, lab, b * su->rows, su->C, scale, dout, correct);
}

/* the training loss of the last layer's outputs, checked: a non-finite one ends the job */
static double train_loss(dt_stepper *s, int b, long *corr)
{
        dt_graph *g = &s->su->g;
        double l = dt_step_loss(s->su, g->act[g->n], s->lab, s->tgt, b, s->loss_scale, g->dact[g->n], corr);
        if (dt_fault_at(DT_FAULT_NAN_LOSS, s->step + 1)) l = NAN;
        if (!isfinite(l)) dt_step_nonfinite(s->su, "non-finite loss (%g) at step %ld (tensor: loss)", l, s->step + 1);
        return l;
}

/* How many walks of micro-batches the replica with the largest slice of B takes (every rank of a
 * shard-3 data axis walks as often), and how many this rank's slice [lo, hi) takes. */
static void walks(const dt_stepper *s, int B, int lo, int hi, int *all, int *mine)
{
        const dt_setup *su = s->su;
        int R = dt_grid_replicas(&su->grid), most = (B + R - 1) / R, mb = su->cs.micro_batch;
        *all = most <= 0 ? 0 : mb > 0 ? (most + mb - 1) / mb : 1;
        *mine = hi <= lo ? 0 : mb > 0 ? (hi - lo + mb - 1) / mb : 1;
}

/* Forward and backward of global-batch positions [lo, hi) in micro-batches, accumulating into
 * the gradients; the loss is scaled by the GLOBAL batch so that slices add up. The all-reduce
 * hook rides on the last micro-batch's backward, or with 'each' (shard 3 bounded: FSDP's and ZeRO-3's
 * way with accumulation) on every micro-batch's, each summed into this rank's parts before the next
 * (the last by the caller, unless idle walks follow: 'more'). */
static void grad_range(dt_stepper *s, int lo, int hi, double stats[2], int hook, int each, int more)
{
        dt_setup *su = s->su;
        int mb = su->cs.micro_batch > 0 ? su->cs.micro_batch : hi - lo;
        for (int a = lo; a < hi; a += mb) {
                int b = DT_MIN(mb, hi - a);
                s->fill(s->ud, a, b, 1, 1);
                dt_fwd_ctx c = { .training = 1, .seed = su->spec.train.seed, .step = s->step, .pos0 = a };
                dt_graph_forward(&su->g, &c, b);
                long corr = 0;
                stats[0] += train_loss(s, b, &corr);
                stats[1] += (double)corr;
                int last = a + b >= hi;
                dt_graph_hooks h = dt_dp_hooks(s->dp);
                dt_graph_backward_h(&su->g, &c, b, hook && (last || each) ? &h : NULL);
                if (each && (!last || more)) dt_dp_finish(s->dp);
        }
}

/* Shard 3 gathers each layer's parameters as the walks reach it, so every rank of the data axis
 * walks as often as the one with the largest slice (dt_grid_slice's are at most one sample apart):
 * the walks this rank's slice [lo, hi) leaves short are walked idle, with 'each' summing each one's
 * (zero) gradient as its peers sum their micro-batches' (the last by the caller). */
static void walk_idle(dt_stepper *s, int B, int lo, int hi, int each)
{
        int all, mine;
        walks(s, B, lo, hi, &all, &mine);
        dt_graph_hooks h = dt_dp_hooks(s->dp);
        for (int k = mine; k < all; k++) {
                dt_shard_walk_idle(&s->dp->sh, 1, each ? &h : NULL);
                if (each && k + 1 < all) dt_dp_finish(s->dp);
        }
}

static void grad_chunk(void *ud, int lo, int hi, double stats[2])
{
        grad_range(ud, lo, hi, stats, 0, 0, 0);
}

static void name_nonfinite(const dt_stepper *s, const float *grads, char *buf, size_t n)
{
        const dt_graph *g = &s->su->g;
        const dt_shard *sh = &s->dp->sh;
        size_t bad = sh->stage >= 2 ? dt_shard_first_nonfinite(sh, grads) : SIZE_MAX;   /* only its parts here */
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                for (int k = 0; k < l->np; k++) {
                        if (!l->ps[k].trainable) continue;
                        int hit = sh->stage >= 2 ? bad >= l->off[k] && bad < l->off[k] + l->len[k]
                                                 : !isfinite(s->su->be->ops->sumsq(s->su->be, grads + l->off[k], l->len[k]));
                        if (hit) {
                                snprintf(buf, n, "%s.%s (gradient)", l->name, l->ps[k].suffix);
                                return;
                        }
                }
        }
        snprintf(buf, n, sh->stage >= 2 ? "another rank's part of the gradient (shard 2 or 3)" : "gradient buffer");
}

static int tp_counted(void *ud, int i, int k)
{
        const dt_setup *su = ud;
        return dt_tp_counted(&su->grid.sg, &su->g, i, k);
}

/* This rank's part of the whole model's squared gradient norm (tensor shards once, replicated
 * tensors once per group). On the host it is summed per block in one fixed order (parallel/shard.h),
 * the same bits at every shard stage; bench's one rank, which has no buckets, and device backends
 * take one sum per buffer or tensor. */
static double grad_sumsq(dt_stepper *s, const float *grads)
{
        dt_setup *su = s->su;
        dt_grid *gr = &su->grid;
        if (!s->dp->sh.g || !dt_backend_supports(su->be, DT_CAP_HOST_MEMORY)) return dt_grid_sumsq(gr, &su->g, grads);
        int split = gr->L.grid[DT_AXIS_TENSOR] > 1;
        double ss = dt_shard_sumsq(&s->dp->sh, grads, split ? tp_counted : NULL, su);
        if (split) dt_comm_allreduce(&gr->tp_axis, &ss, 1, MPI_DOUBLE, "gradient norm");
        return ss;
}

/* Ends the job on a non-finite norm, naming the first non-finite tensor of this rank's part. */
static _Noreturn void grad_nonfinite(const dt_stepper *s, long step, const float *grads)
{
        char name[160];
        name_nonfinite(s, grads, name, sizeof name);
        dt_step_nonfinite(s->su, "non-finite gradient norm at step %ld (tensor: %s)", step + 1, name);
}

/* How a step meets the stages' norm: it waits for it before the update (NORM_WAIT: one stage, or
 * a pipeline soon after a step that clipped); the update needs none (NORM_OVERLAP: no clipping);
 * the step is taken unclipped and validated at the next (NORM_SPECULATE). */
enum { NORM_WAIT, NORM_OVERLAP, NORM_SPECULATE };

static int norm_mode(const dt_stepper *s)
{
        const dt_setup *su = s->su;
        double clip = su->spec.train.clip_norm;
        if (!dt_grid_pipelined(&su->grid)) return NORM_WAIT;
        if (clip == 0) return NORM_OVERLAP;
        int calm = !s->clip_seen || s->calm >= DT_MAX(s->hold, 1);
        return dt_mem_speculates(su->grid.L.grid[DT_AXIS_PIPE], clip, s->dp->sh.stage) && calm ? NORM_SPECULATE : NORM_WAIT;
}

/* A settled step's clipping into the count that norm_mode reads (the same on every rank: the norm is) */
static void count_clip(dt_stepper *s, int clipped, int rolled_back)
{
        if (rolled_back) s->hold = DT_MIN(2 * DT_MAX(s->hold, 1), 256);
        s->clip_seen |= clipped;
        s->calm = clipped ? 0 : s->calm + 1;
}

/* This rank's state before a speculated step (the gradient it takes included), into spec */
static void snapshot(dt_stepper *s, const float *grads, double lr)
{
        dt_backend *be = s->su->be;
        const dt_graph *g = &s->su->g;
        size_t n = g->nparams;
        if (!s->spec.params) {  /* counted by plan/mem.c where dt_mem_speculates */
                s->spec.params = be->ops->alloc(be, n);
                s->spec.grads = be->ops->alloc(be, n);
                if (s->m) s->spec.m = be->ops->alloc(be, n);
                if (s->v) s->spec.v = be->ops->alloc(be, n);
                if (g->nbuffers) s->spec.buffers = be->ops->alloc(be, g->nbuffers);
        }
        be->ops->copy(be, s->spec.params, g->params, n);
        be->ops->copy(be, s->spec.grads, grads, n);
        if (s->m) be->ops->copy(be, s->spec.m, s->m, n);
        if (s->v) be->ops->copy(be, s->spec.v, s->v, n);
        /* the walk's running statistics: a walk again after a rollback starts from them */
        if (g->nbuffers) be->ops->copy(be, s->spec.buffers, g->buffers, g->nbuffers);
        s->spec.lr = lr;
}

/* The optimizer step of every parameter (no shard) from grads, clipped by clip: a step's update and
 * a rolled-back step's retaking share it, so both apply the same bits */
static void step_whole(dt_stepper *s, float *grads, float clip, double lr, long step)
{
        dt_setup *su = s->su;
        dt_backend *be = su->be;
        if (clip != 1.0f) be->ops->scale(be, su->g.nparams, clip, grads);
        be->ops->optim_step(be, &su->spec.train.opt, (float)lr, step + 1, su->g.params, grads, s->m, s->v,
                            su->g.nparams);
}

/* The speculated step undone and taken again, clipped by clip: as a step that waited takes it */
static void rollback(dt_stepper *s, float clip)
{
        double tt = dt_trace_t();
        dt_setup *su = s->su;
        dt_backend *be = su->be;
        dt_graph *g = &su->g;
        size_t n = g->nparams;
        be->ops->copy(be, g->params, s->spec.params, n);
        if (s->m) be->ops->copy(be, s->m, s->spec.m, n);
        if (s->v) be->ops->copy(be, s->v, s->spec.v, n);
        if (g->nbuffers) be->ops->copy(be, g->buffers, s->spec.buffers, g->nbuffers);
        step_whole(s, s->spec.grads, clip, s->spec.lr, s->norm_step);
        if (s->freeze) dt_freeze_restore(s->freeze, g, be);
        dt_trace_end("optimizer", "rollback", NULL, tt);
}

void dt_step_free(dt_stepper *s)
{
        float *p[] = { s->spec.params, s->spec.grads, s->spec.m, s->spec.v, s->spec.buffers };
        for (size_t k = 0; k < sizeof p / sizeof *p; k++)
                if (p[k]) s->su->be->ops->free(s->su->be, p[k]);
        memset(&s->spec, 0, sizeof s->spec);
}

int dt_step_settle(dt_stepper *s)
{
        if (!s->norm_pending) return 0;
        double t0 = dt_now();
        dt_grid_sum_stages_wait(&s->su->grid, &s->norm_req, "gradient norm");
        s->norm_pending = 0;
        s->t_norm += dt_now() - t0;
        s->gnorm = sqrt(s->norm_ss);
        /* every stage's part was finite (each checked its own): their sum overflowed */
        if (!isfinite(s->gnorm))
                dt_step_nonfinite(s->su, "non-finite gradient norm at step %ld (tensor: the stages' sum)",
                                  s->norm_step + 1);
        float clip = dt_clip_factor(s->gnorm, s->su->spec.train.clip_norm);
        int redo = s->speculated && clip != 1.0f;
        count_clip(s, clip != 1.0f, redo);
        s->speculated = 0;
        if (redo) {
                double t1 = dt_now();
                rollback(s, clip);
                s->t_update += dt_now() - t1;
        }
        return redo;
}

void dt_step_update(dt_stepper *s, long step, float *grads)
{
        dt_step_settle(s);      /* the previous step's (dt_step_run's pipeline has): one at a time */
        double tt = dt_trace_t(), t0 = dt_now();
        dt_setup *su = s->su;
        const dt_train_spec *tr = &su->spec.train;
        const dt_backend_ops *o = su->be->ops;
        dt_shard *sh = &s->dp->sh;      /* shard 1 and 2: only this rank's parts are updated */
        int sharded = sh->stage > 0, mode = norm_mode(s);
        if (dt_fault_at(DT_FAULT_NAN_GRAD, step + 1)) o->scale(su->be, 1, NAN, grads);
        if (s->freeze) {        /* frozen: in neither norm nor step */
                if (sharded) for (int i = 0; i < s->freeze->n; i++) {
                        if (!s->freeze->r[i].buffer) dt_shard_zero(sh, grads, s->freeze->r[i].off, s->freeze->r[i].len);
                } else dt_freeze_grads(s->freeze, su->be, grads);
        }
        double ss = grad_sumsq(s, grads);
        double t1 = dt_now();
        if (mode != NORM_WAIT) {        /* this stage's part checked here; the sum completes later */
                if (!isfinite(ss)) grad_nonfinite(s, step, grads);
                s->norm_ss = ss;
                s->norm_step = step;
                dt_grid_sum_stages_start(&su->grid, &s->norm_ss, &s->norm_req);
                s->norm_pending = 1;
                s->speculated = mode == NORM_SPECULATE;
        } else {        /* every stage's; it is also where the stages that finished their walk first wait */
                dt_grid_sum_stages(&su->grid, &ss, "gradient norm");
        }
        double t2 = dt_now();
        double norm = sqrt(ss);         /* the whole model's, once, whatever the stages */
        if (mode == NORM_WAIT && !isfinite(norm)) grad_nonfinite(s, step, grads);
        float clip = mode == NORM_WAIT ? dt_clip_factor(norm, tr->clip_norm) : 1.0f;
        double lr = dt_sched_lr(&tr->sched, tr->lr, step, s->spe, s->total);
        if (mode == NORM_SPECULATE) snapshot(s, grads, lr);
        if (sharded) {
                if (clip != 1.0f) dt_shard_scale(sh, clip, grads);
                dt_shard_optim(sh, &tr->opt, (float)lr, step + 1, grads, s->m, s->v);
                dt_shard_gather_params(sh);     /* every rank's parts, before frozen layers are put back */
        } else {
                step_whole(s, grads, clip, lr, step);
        }
        if (s->freeze) dt_freeze_restore(s->freeze, &su->g, su->be);   /* weight decay and momentum moved them */
        dt_shard_release(sh);   /* shard 3: the other parts are stale now; gathered again when needed */
        s->lr = lr;
        if (mode == NORM_WAIT) {
                s->gnorm = norm;
                count_clip(s, clip != 1.0f, 0);
        }
        double t3 = dt_now();
        s->t_norm += t2 - t1;
        s->t_update += (t1 - t0) + (t3 - t2);
        dt_trace_end("optimizer", "update", NULL, tt);
}

static void ssp_apply(void *ud, long step, float *sum)
{
        dt_step_update(ud, step, sum);
}

void dt_step_sync_replicas(dt_stepper *s, long step)
{
        dt_setup *su = s->su;
        if (dt_grid_replicas(&su->grid) == 1) return;
        if (su->cs.sync == DT_SYNC_SSP) dt_ssp_apply(s->ssp, step, ssp_apply, s);
        if (su->cs.sync == DT_SYNC_AVERAGE) {
                dt_dp_average(s->dp, s->m, s->v);       /* buffers included */
        } else if (su->g.nbuffers) {
                /* running statistics (batch norm) saw only this rank's slices: their mean over
                 * ranks is what evaluation and the checkpoint use, the same on every rank */
                dt_dp_allreduce(s->dp, su->g.buffers, su->g.nbuffers, "buffer averaging");   /* host or device */
                su->be->ops->scale(su->be, su->g.nbuffers, 1.0f / (float)dt_grid_replicas(&su->grid), su->g.buffers);
        }
}

/* ---- pipeline hooks (parallel/pipeline.h): stage 0 feeds, the last stage scores ---- */

static void pipe_feed(void *ud, long pos0, int b)
{
        dt_stepper *s = ud;
        double t0 = dt_now();
        s->fill(s->ud, pos0, b, 1, 0);
        s->t_feed += dt_now() - t0;
}

static void pipe_score(void *ud, long pos0, int b, int training, double stats[2])
{
        dt_stepper *s = ud;
        double t0 = dt_now();
        s->fill(s->ud, pos0, b, 0, 1);
        long corr = 0;
        dt_graph *g = &s->su->g;
        stats[0] += training ? train_loss(s, b, &corr)
                             : dt_step_loss(s->su, g->act[g->n], s->lab, s->tgt, b, 0.0f, NULL, &corr);
        stats[1] += (double)corr;
        s->t_loss += dt_now() - t0;
}

dt_pipe_hooks dt_step_pipe_hooks(dt_stepper *s)
{
        return (dt_pipe_hooks){ pipe_feed, pipe_score, s, NULL };
}

/* A pipeline stage's walk of the step s->step and its gradient summed over its replicas */
static void pipe_walk(dt_stepper *s, int B, double stats[2])
{
        dt_setup *su = s->su;
        int lo, hi;
        dt_grid_slice(&su->grid, B, &lo, &hi);
        dt_fwd_ctx c = { .training = 1, .seed = su->spec.train.seed, .step = s->step };
        dt_pipe_hooks h = dt_step_pipe_hooks(s);
        /* the data axis's all-reduce of each layer starts when its last backward is done */
        dt_graph_hooks gh = dt_dp_hooks(s->dp);
        if (dt_grid_replicas(&su->grid) > 1 && su->cs.sync == DT_SYNC_ALLREDUCE) h.grads_done = &gh;
        if (hi > lo) dt_pipe_train(s->pipe, &c, lo, hi, &h, stats);  /* a short last batch may leave a replica none */
        double t0 = dt_now();
        dt_dp_finish(s->dp);    /* the stage's gradient summed over its replicas */
        if (dt_grid_replicas(&su->grid) > 1) s->t_sync += dt_now() - t0;
}

void dt_step_run(dt_stepper *s, long step, int B, double stats[2])
{
        dt_setup *su = s->su;
        const dt_backend_ops *o = su->be->ops;
        int lo, hi;
        s->step = step;
        s->dp->step = step;
        s->B = B;
        s->loss_scale = 1.0f / (float)((long)B * su->rows);
        dt_fault_step(step + 1);
        dt_comm_announce(&su->world, step);
        if (su->cs.sync == DT_SYNC_SSP && su->size > 1)    /* at most s steps of others' updates missing */
                dt_ssp_apply(s->ssp, step - su->cs.staleness - 1, ssp_apply, s);
        dt_shard *sh = &s->dp->sh;
        if (!dt_shard_zero_grads(sh)) o->zero(su->be, su->g.grads, su->g.nparams);
        /* shard 3: the walks that are not one plain forward and backward per micro-batch gather
         * every layer's parameters for the step */
        if (dt_grid_pipelined(&su->grid) || su->cs.reproducible || !dt_shard_per_layer(sh)) dt_shard_gather_all(sh);
        double t0;
        if (dt_grid_pipelined(&su->grid)) {
                double kept[2] = { stats[0], stats[1] };
                pipe_walk(s, B, stats);
                /* the last step's norm: when it called for clipping that step was taken again,
                 * clipped, and this walk, which saw it unclipped, is walked again */
                if (dt_step_settle(s)) {
                        stats[0] = kept[0];
                        stats[1] = kept[1];
                        o->zero(su->be, su->g.grads, su->g.nparams);    /* no shard: dt_mem_speculates */
                        pipe_walk(s, B, stats);
                }
                dt_step_update(s, step, su->g.grads);
        } else if (su->cs.reproducible) {
                dt_repro_grads(s->dp, B, su->cs.chunks, grad_chunk, s, stats);
                dt_shard_keep(&s->dp->sh);      /* shard 2: its parts of the sum */
                dt_step_update(s, step, su->g.grads);
        } else {
                dt_grid_slice(&su->grid, B, &lo, &hi);
                int overlap = dt_grid_replicas(&su->grid) > 1 && su->cs.sync == DT_SYNC_ALLREDUCE, all, mine;
                int each = overlap && dt_shard_sums_each(sh);
                walks(s, B, lo, hi, &all, &mine);
                if (hi > lo) grad_range(s, lo, hi, stats, overlap, each, mine < all);
                walk_idle(s, B, lo, hi, each);
                if (dt_grid_replicas(&su->grid) == 1) {
                        dt_step_update(s, step, su->g.grads);
                } else if (su->cs.sync == DT_SYNC_ALLREDUCE) {
                        t0 = dt_now();
                        dt_dp_finish(s->dp);
                        s->t_sync += dt_now() - t0;
                        dt_step_update(s, step, su->g.grads);
                } else if (su->cs.sync == DT_SYNC_AVERAGE) {
                        /* the local gradient as if this slice were the whole batch */
                        o->scale(su->be, su->g.nparams, (float)dt_grid_replicas(&su->grid), su->g.grads);
                        dt_step_update(s, step, su->g.grads);
                        if ((step + 1) % su->cs.average_every == 0) dt_dp_average(s->dp, s->m, s->v);
                } else {
                        dt_ssp_push(s->ssp, step);
                        dt_ssp_apply(s->ssp, -1, ssp_apply, s);   /* whatever is complete */
                }
        }
}
