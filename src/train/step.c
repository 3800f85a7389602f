/* train/step.c - one training step and one evaluation: each rank computing its slice of every
 * global batch (or its pipeline stage), loss scaled by the global batch so slices add up, gradients
 * summed over ranks, clipped and checked, the optimizer on the flat buffers. */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mpi.h>
#include "config.h"

/* Exit 5 on a non-finite loss or gradient: the message, then what usually cures it. */
static _Noreturn void nonfinite_die(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void nonfinite_die(const trainer *t, const char *fmt, ...)
{
        char m[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        const dt_train_spec *tr = &t->su.spec.train;
        char clip[64] = "train.clip_norm, e.g. 1.0";
        if (tr->clip_norm > 0) snprintf(clip, sizeof clip, "a smaller train.clip_norm than %g", tr->clip_norm);
        dt_die(DT_EXIT_NUMERIC, "%s; a lower learning rate (train.optimizer.lr, now %g) or gradient clipping "
               "(%s) usually cures it, else check the data's scale", m, tr->lr, clip);
}

/* This rank's slice [lo, hi) of a global batch of B. */
static void slice(const trainer *t, int B, int *lo, int *hi)
{
        const dt_comm *d = t->su.data;       /* the data-parallel axis: the world, or one stage's replicas */
        *lo = (int)((long)B * d->rank / d->size);
        *hi = (int)((long)B * (d->rank + 1) / d->size);
}

/* The positions of a global batch of B this rank reads: its slice, or in reproducible mode the
 * chunks dt_repro_grads hands it (chunks*rank/size .. chunks*(rank+1)/size, B/chunks each). */
void dt_tr_data_range(void *ud, int B, int *lo, int *hi)
{
        const trainer *t = ud;
        const dt_comm *d = t->su.data;
        if (t->su.cs.reproducible && !t->su.pipelined) {
                int ch = t->su.cs.chunks, cs = B / ch;
                *lo = (int)((long)ch * d->rank / d->size) * cs;
                *hi = (int)((long)ch * (d->rank + 1) / d->size) * cs;
                if (d->rank == d->size - 1) *hi = B;
                return;
        }
        slice(t, B, lo, hi);
}

int dt_tr_max_local(const trainer *t)
{
        int lo, hi;
        dt_tr_data_range((void *)t, t->su.spec.train.batch, &lo, &hi);
        return DT_MAX(1, hi - lo);
}

static double loss_of(trainer *t, const float *out, int b, float scale, float *dout, long *correct)
{
        if (t->su.be->ops->loss)   /* device backend: out and dout are device memory */
                return t->su.be->ops->loss(t->su.be, t->su.spec.loss == DT_LOSS_SOFTMAX_XENT ? 0 : 1, out, t->lab,
                                        t->su.spec.loss == DT_LOSS_SOFTMAX_XENT ? NULL : t->tgt, b * t->su.rows, t->su.C,
                                        scale, dout, correct);
        if (t->su.spec.loss == DT_LOSS_SOFTMAX_XENT)
                return dt_loss_softmax_xent(out, t->lab, b * t->su.rows, t->su.C, scale, dout, correct);
        return dt_loss_mse(out, t->tgt, t->lab, b * t->su.rows, t->su.C, scale, dout, correct);
}

/* Samples idx[0..b) into the model's input (host staging on a device backend) and t->lab/t->tgt:
 * from the batch the loader prepared when the step's positions are in it, else read now (the same
 * bytes: evaluation, and training samples augmented for this epoch). */
static void fill_input(trainer *t, const dt_dataset *ds, const long *idx, int b, float *x)
{
        const dt_batch *cb = t->cur_batch;
        float *tg = ds->target ? t->tgt : NULL;
        long a = cb && ds == &t->train ? (long)(idx - t->cur_idx) : -1;
        if (cb && a >= cb->lo && a + b <= cb->hi) {
                size_t o = (size_t)(a - cb->lo), lr = (size_t)DT_MAX(1, ds->label_rows);
                memcpy(x, cb->x + o * ds->dim, (size_t)b * ds->dim * sizeof *x);
                if (dt_dataset_labelled(ds)) memcpy(t->lab, cb->y + o * lr, (size_t)b * lr * sizeof *t->lab);
                if (tg) memcpy(tg, cb->t + o * (size_t)ds->tdim, (size_t)b * (size_t)ds->tdim * sizeof *tg);
                return;
        }
        if (ds != &t->train) {
                dt_dataset_gather(ds, idx, b, x, t->lab, tg);
                return;
        }
        char msg[DT_PATH_MAX + 256];
        if (dt_dataset_gather_train(ds, idx, b, t->su.spec.train.seed, t->st.epoch, x, t->lab, tg, msg, sizeof msg))
                dt_die(DT_EXIT_DATA, "%s", msg);
}

static void gather(trainer *t, const dt_dataset *ds, const long *idx, int b)
{
        double tt = dt_trace_t();
        /* CPU backend: act[0] is host memory, gather straight into it */
        if (t->hin) {   /* device backend: gather on the host, then upload */
                fill_input(t, ds, idx, b, t->hin);
                t->su.be->ops->to_device(t->su.be, t->su.g.act[0], t->hin, (size_t)b * dt_shape_size(&t->su.g.input));
        } else {
                fill_input(t, ds, idx, b, t->su.g.act[0]);
        }
        dt_trace_end("data", "gather batch", NULL, tt);
}

static void name_nonfinite(const trainer *t, const float *grads, char *buf, size_t n)
{
        for (int i = 0; i < t->su.g.n; i++) {
                const dt_layer *l = &t->su.g.layers[i];
                for (int k = 0; k < l->np; k++)
                        if (l->ps[k].trainable && !isfinite(t->su.be->ops->sumsq(t->su.be, grads + l->off[k], l->len[k]))) {
                                snprintf(buf, n, "%s.%s (gradient)", l->name, l->ps[k].suffix);
                                return;
                        }
        }
        snprintf(buf, n, "gradient buffer");
}

/* Forward and backward of global-batch positions [lo, hi) in micro-batches, accumulating into
 * the gradients; the loss is scaled by the GLOBAL batch so that slices add up. The allreduce hook
 * rides on the last micro-batch's backward. */
static void grad_range(trainer *t, int lo, int hi, double stats[2], int hook)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int mb = t->su.cs.micro_batch > 0 ? t->su.cs.micro_batch : hi - lo;
        for (int a = lo; a < hi; a += mb) {
                int b = DT_MIN(mb, hi - a);
                gather(t, &t->train, t->cur_idx + a, b);
                dt_fwd_ctx c = { .training = 1, .seed = tr->seed, .step = t->st.step, .pos0 = a };
                dt_graph_forward(&t->su.g, &c, b);
                long corr = 0;
                double l = loss_of(t, t->su.g.act[t->su.g.n], b, 1.0f / (float)(t->cur_B * t->su.rows), t->su.g.dact[t->su.g.n], &corr);
                if (dt_fault_at(DT_FAULT_NAN_LOSS, t->st.step + 1)) l = NAN;
                if (!isfinite(l)) nonfinite_die(t, "non-finite loss (%g) at step %ld (tensor: loss)", l, t->st.step + 1);
                stats[0] += l;
                stats[1] += (double)corr;
                int last = a + b >= hi;
                dt_graph_hooks h = dt_dp_hooks(&t->dp);
                dt_graph_backward_h(&t->su.g, &c, b, hook && last ? &h : NULL);
        }
}

static void grad_chunk(void *ud, int lo, int hi, double stats[2])
{
        grad_range(ud, lo, hi, stats, 0);
}

/* Clip and apply one optimizer step for step index 'step' with gradient 'grads'. */
static void update(trainer *t, long step, float *grads)
{
        double tt = dt_trace_t();
        const dt_train_spec *tr = &t->su.spec.train;
        const dt_backend_ops *o = t->su.be->ops;
        if (dt_fault_at(DT_FAULT_NAN_GRAD, step + 1)) o->scale(t->su.be, 1, NAN, grads);
        dt_freeze_grads(&t->freeze, t->su.be, grads);  /* frozen layers count in neither norm nor step */
        double ss;
        if (t->su.tensor) {     /* shards once each, replicated tensors once per group */
                ss = dt_tp_sumsq(&t->su.sg, &t->su.g, grads);
                dt_comm_allreduce(&t->su.tp_axis, &ss, 1, MPI_DOUBLE, "gradient norm");
        } else {
                ss = o->sumsq(t->su.be, grads, t->su.g.nparams);
        }
        if (t->su.pipelined) dt_comm_allreduce(&t->su.pipe_axis, &ss, 1, MPI_DOUBLE, "gradient norm");
        double norm = sqrt(ss);         /* the whole model's, once, whatever the stages */
        if (!isfinite(norm)) {
                char name[160];
                name_nonfinite(t, grads, name, sizeof name);
                nonfinite_die(t, "non-finite gradient norm at step %ld (tensor: %s)", step + 1, name);
        }
        float clip = dt_clip_factor(norm, tr->clip_norm);
        if (clip != 1.0f) o->scale(t->su.be, t->su.g.nparams, clip, grads);
        long spe = (t->train.n + tr->batch - 1) / tr->batch;
        double lr = dt_sched_lr(&tr->sched, tr->lr, step, spe, spe * tr->epochs);
        o->optim_step(t->su.be, &tr->opt, (float)lr, step + 1, t->su.g.params, grads, t->mo.m, t->mo.v, t->su.g.nparams);
        dt_freeze_restore(&t->freeze, &t->su.g, t->su.be);     /* weight decay and momentum moved them too */
        t->st.lr = lr;
        t->gnorm = norm;
        dt_trace_end("optimizer", "update", NULL, tt);
}

static void ssp_apply(void *ud, long step, float *sum)
{
        update(ud, step, sum);
}

/* Replicas agree again: SSP applies every pushed step, averaging averages. Called before
 * evaluation, checkpoints and the end. */
void dt_tr_sync_replicas(trainer *t)
{
        if (t->su.data->size == 1) return;
        if (t->su.cs.sync == DT_SYNC_SSP) dt_ssp_apply(t->ssp, t->st.step - 1, ssp_apply, t);
        if (t->su.cs.sync == DT_SYNC_AVERAGE) {
                dt_dp_average(&t->dp, t->mo.m, t->mo.v);   /* buffers included */
        } else if (t->su.g.nbuffers) {
                /* running statistics (batch norm) saw only this rank's slices: their mean over
                 * ranks is what evaluation and the checkpoint use, the same on every rank */
                dt_dp_allreduce(&t->dp, t->su.g.buffers, t->su.g.nbuffers, "buffer averaging");   /* host or device */
                t->su.be->ops->scale(t->su.be, t->su.g.nbuffers, 1.0f / (float)t->su.data->size, t->su.g.buffers);
        }
}

/* ---- pipeline hooks (parallel/pipeline.h): stage 0 feeds, the last stage scores ---- */

static void pipe_feed(void *ud, long pos0, int b)
{
        trainer *t = ud;
        gather(t, t->cur_ds, t->cur_idx + pos0, b);
}

static void pipe_score(void *ud, long pos0, int b, int training, double stats[2])
{
        trainer *t = ud;
        const dt_dataset *ds = t->cur_ds;
        double tt = dt_trace_t();
        dt_dataset_gather(ds, t->cur_idx + pos0, b, NULL, t->lab, ds->target ? t->tgt : NULL);
        dt_trace_end("data", "gather labels", NULL, tt);
        long corr = 0;
        dt_graph *g = &t->su.g;
        double l = loss_of(t, g->act[g->n], b, training ? t->loss_scale : 0.0f, training ? g->dact[g->n] : NULL, &corr);
        if (training && dt_fault_at(DT_FAULT_NAN_LOSS, t->st.step + 1)) l = NAN;
        if (training && !isfinite(l))
                nonfinite_die(t, "non-finite loss (%g) at step %ld (tensor: loss)", l, t->st.step + 1);
        stats[0] += l;
        stats[1] += (double)corr;
}

/* One global batch idx[0..B): this rank's share of forward/backward, the synchronisation the
 * cluster spec asks for, and the update. */
void dt_tr_train_step(trainer *t, const long *idx, int B)
{
        const dt_backend_ops *o = t->su.be->ops;
        long step = t->st.step;
        double stats[2] = { 0, 0 };
        int lo, hi;
        t->cur_idx = idx;
        t->cur_B = B;
        dt_fault_step(step + 1);
        dt_comm_announce(&t->su.world, step);
        if (t->su.cs.sync == DT_SYNC_SSP && t->su.size > 1)   /* at most s steps of others' updates missing */
                dt_ssp_apply(t->ssp, step - t->su.cs.staleness - 1, ssp_apply, t);
        o->zero(t->su.be, t->su.g.grads, t->su.g.nparams);
        if (t->su.pipelined) {
                slice(t, B, &lo, &hi);
                t->cur_ds = &t->train;
                t->loss_scale = 1.0f / (float)(B * t->su.rows);
                dt_fwd_ctx c = { .training = 1, .seed = t->su.spec.train.seed, .step = step };
                dt_pipe_hooks h = { pipe_feed, pipe_score, t };
                if (hi > lo) dt_pipe_train(&t->pipe, &c, lo, hi, &h, stats);  /* a short last batch may leave a replica none */
                dt_dp_finish(&t->dp);   /* the stage's gradient summed over its replicas */
                update(t, step, t->su.g.grads);
        } else if (t->su.cs.reproducible) {
                dt_repro_grads(&t->dp, B, t->su.cs.chunks, grad_chunk, t, stats);
                /* stats came back summed over ranks: keep this rank's share for the epoch sums */
                if (t->su.rank) stats[0] = stats[1] = 0;
                update(t, step, t->su.g.grads);
        } else {
                slice(t, B, &lo, &hi);
                int overlap = t->su.data->size > 1 && t->su.cs.sync == DT_SYNC_ALLREDUCE;
                if (hi > lo) grad_range(t, lo, hi, stats, overlap);
                if (t->su.data->size == 1) {
                        update(t, step, t->su.g.grads);
                } else if (t->su.cs.sync == DT_SYNC_ALLREDUCE) {
                        dt_dp_finish(&t->dp);
                        update(t, step, t->su.g.grads);
                } else if (t->su.cs.sync == DT_SYNC_AVERAGE) {
                        /* the local gradient as if this slice were the whole batch */
                        o->scale(t->su.be, t->su.g.nparams, (float)t->su.data->size, t->su.g.grads);
                        update(t, step, t->su.g.grads);
                        if ((step + 1) % t->su.cs.average_every == 0) dt_dp_average(&t->dp, t->mo.m, t->mo.v);
                } else {
                        dt_ssp_push(t->ssp, step);
                        dt_ssp_apply(t->ssp, -1, ssp_apply, t);   /* whatever is complete */
                }
        }
        if (t->su.shard == 0) {         /* a tensor group scores its samples once */
                t->ep[0] += stats[0];
                t->ep[1] += stats[1];
                t->win[0] += stats[0];
                t->win[1] += stats[1];
        }
        t->win_n += B;
        t->st.step++;
}

/* Loss and accuracy on a dataset, split across ranks and reduced. */
/* The signal that cuts an evaluation short, agreed by every rank before each evaluation batch: 0
 * while fewer than 'count' stop signals came. One small allreduce per batch of eval_batch samples. */
static int eval_cut(trainer *t, int count)
{
        int s = dt_stop_count() >= count ? dt_stop_signal() : 0;
        if (t->su.size > 1) dt_comm_allreduce_op(&t->su.world, &s, 1, MPI_INT, MPI_MAX, "signal agreement");
        return s;
}

/* Loss and accuracy over ds. Cut short (NaN, the signal returned) once 'cut' stop signals came, so
 * a stop never waits for a whole test set: 1 when nothing is committed yet (the checkpoint comes
 * first), 2 after a stop's checkpoint (a second signal skips the rest); 0 never. */
int dt_tr_evaluate(trainer *t, const dt_dataset *ds, double *loss, double *acc, int cut)
{
        double tt = dt_trace_t();
        int eb = t->su.spec.train.eval_batch, sig = 0;
        double s[2] = { 0, 0 };
        long *idx = dt_malloc((size_t)eb * sizeof *idx);
        for (long start = 0; start < ds->n; start += eb) {
                if (cut && (sig = eval_cut(t, cut))) break;
                int B = (int)DT_MIN((long)eb, ds->n - start), lo, hi;
                slice(t, B, &lo, &hi);
                if (hi <= lo) continue;
                dt_fwd_ctx c = { .training = 0, .seed = t->su.spec.train.seed, .step = t->st.step, .pos0 = lo };
                if (t->su.pipelined) {  /* positions of the whole eval batch; the stages pass [lo, hi) on */
                        for (int i = 0; i < B; i++) idx[i] = start + i;
                        t->cur_ds = ds;
                        t->cur_idx = idx;
                        dt_pipe_hooks h = { pipe_feed, pipe_score, t };
                        dt_pipe_eval(&t->pipe, &c, lo, hi, &h, s);
                        continue;
                }
                for (int i = lo; i < hi; i++) idx[i - lo] = start + i;
                gather(t, ds, idx, hi - lo);
                dt_graph_forward(&t->su.g, &c, hi - lo);
                long corr = 0;
                s[0] += loss_of(t, t->su.g.act[t->su.g.n], hi - lo, 0.0f, NULL, &corr);
                s[1] += (double)corr;
        }
        free(idx);
        if (sig) {
                *loss = *acc = NAN;
                dt_trace_end("eval", "evaluate (cut short)", NULL, tt);
                return sig;
        }
        if (t->su.shard) s[0] = s[1] = 0;       /* a tensor group scores its samples once */
        dt_comm_allreduce(&t->su.world, s, 2, MPI_DOUBLE, "evaluation");  /* scores: last stages only */
        *loss = s[0] / ((double)ds->n * t->su.rows);
        *acc = s[1] / ((double)ds->n * t->su.rows);
        dt_trace_end("eval", "evaluate", NULL, tt);
        return 0;
}
