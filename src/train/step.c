/* train/step.c - a run's step and evaluation: the trainer's data for the shared step (stepper.c:
 * the loader's batch, labels for a pipeline's last stage), the run's loss sums, the positions each
 * rank reads, and the evaluation of a set split across ranks and reduced. */
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

/* The positions of a global batch of B this rank reads: its slice, or in reproducible mode the
 * chunks dt_repro_grads hands it (chunks*rank/size .. chunks*(rank+1)/size, B/chunks each). */
void dt_tr_data_range(void *ud, int B, int *lo, int *hi)
{
        const trainer *t = ud;
        const dt_comm *d = t->su.grid.data;
        if (t->su.cs.reproducible && !dt_grid_pipelined(&t->su.grid)) {
                int ch = t->su.cs.chunks, cs = B / ch;
                *lo = (int)((long)ch * d->rank / d->size) * cs;
                *hi = (int)((long)ch * (d->rank + 1) / d->size) * cs;
                if (d->rank == d->size - 1) *hi = B;
                return;
        }
        dt_grid_slice(&t->su.grid, B, lo, hi);
}

int dt_tr_max_local(const trainer *t)
{
        int lo, hi;
        dt_tr_data_range((void *)t, t->su.spec.train.batch, &lo, &hi);
        return DT_MAX(1, hi - lo);
}

/* Samples idx[0..b) into the model's input (host staging on a device backend) and t->lab/t->tgt:
 * from the batch the loader prepared when the step's positions are in it, else read now (the same
 * bytes: evaluation, and training samples augmented for this epoch). */
static void fill_input(trainer *t, const dt_dataset *ds, const long *idx, int b, float *x, int labels)
{
        const dt_batch *cb = t->cur_batch;
        float *tg = labels && ds->target ? t->tgt : NULL;
        int32_t *lab = labels && dt_dataset_labelled(ds) ? t->lab : NULL;
        long a = cb && ds == &t->train ? (long)(idx - t->cur_idx) : -1;
        /* the loader read what this rank needs (a pipeline's stages: inputs or labels, not both) */
        if (cb && a >= cb->lo && a + b <= cb->hi && (!x || cb->x) && (!lab || cb->y) && (!tg || cb->t)) {
                size_t o = (size_t)(a - cb->lo), lr = (size_t)DT_MAX(1, ds->label_rows);
                if (x) memcpy(x, cb->x + o * ds->dim, (size_t)b * ds->dim * sizeof *x);
                if (lab) memcpy(lab, cb->y + o * lr, (size_t)b * lr * sizeof *lab);
                if (tg) memcpy(tg, cb->t + o * (size_t)ds->tdim, (size_t)b * (size_t)ds->tdim * sizeof *tg);
                return;
        }
        if (ds != &t->train) {
                dt_dataset_gather(ds, idx, b, x, lab, tg);
                return;
        }
        char msg[DT_PATH_MAX + 256];
        if (dt_dataset_gather_train(ds, idx, b, t->su.spec.train.seed, t->st.epoch, x, lab, tg, msg, sizeof msg))
                dt_die(DT_EXIT_DATA, "%s", msg);
}

static void gather(trainer *t, const dt_dataset *ds, const long *idx, int b, int labels)
{
        double tt = dt_trace_t();
        /* CPU backend: act[0] is host memory, gather straight into it */
        if (t->hin) {   /* device backend: gather on the host, then upload */
                fill_input(t, ds, idx, b, t->hin, labels);
                t->su.be->ops->to_device(t->su.be, t->su.g.act[0], t->hin, (size_t)b * dt_shape_size(&t->su.g.input));
        } else {
                fill_input(t, ds, idx, b, t->su.g.act[0], labels);
        }
        dt_trace_end("data", "gather batch", NULL, tt);
}

/* The stepper's data (stepper.h): positions of the step's global batch, from the set t->cur_ds:
 * the loader's batch when it holds them (it reads only what this rank needs), else the set. */
static void fill(void *ud, long pos0, int b, int inputs, int labels)
{
        trainer *t = ud;
        const long *idx = t->cur_idx + pos0;
        if (inputs) {
                gather(t, t->cur_ds, idx, b, labels);
                return;
        }
        if (!labels) return;
        double tt = dt_trace_t();
        fill_input(t, t->cur_ds, idx, b, NULL, 1);
        dt_trace_end("data", "gather labels", NULL, tt);
}

void dt_tr_stepper_init(trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        long spe = dt_tr_steps_per_epoch(t);
        t->stp = (dt_stepper){ .su = &t->su, .dp = &t->dp, .pipe = &t->pipe, .ssp = t->ssp, .m = t->mo.m, .v = t->mo.v,
                               .freeze = &t->freeze, .lab = t->lab, .tgt = t->tgt, .fill = fill, .ud = t,
                               .spe = spe, .total = spe * tr->epochs };
}

/* Replicas agree again: SSP applies every pushed step, averaging averages. Called before
 * evaluation, checkpoints and the end. */
void dt_tr_sync_replicas(trainer *t)
{
        dt_tr_settle(t);
        t->stp.lr = t->st.lr;   /* an SSP update moves the learning rate as a step does */
        t->stp.gnorm = t->gnorm;
        dt_step_sync_replicas(&t->stp, t->st.step - 1);
        t->st.lr = t->stp.lr;
        t->gnorm = t->stp.gnorm;
}

void dt_tr_settle(trainer *t)
{
        dt_step_settle(&t->stp);
        t->gnorm = t->stp.gnorm;
}

/* One global batch idx[0..B): the stepper's step (stepper.h), then the run's sums. */
void dt_tr_train_step(trainer *t, const long *idx, int B)
{
        double stats[2] = { 0, 0 };
        t->cur_idx = idx;
        t->cur_ds = &t->train;
        t->stp.lr = t->st.lr;
        t->stp.gnorm = t->gnorm;
        dt_step_run(&t->stp, t->st.step, B, stats);
        t->st.lr = t->stp.lr;
        t->gnorm = t->stp.gnorm;
        /* reproducible mode: the sums came back over every rank; rank 0 keeps them for the epoch */
        if (t->su.cs.reproducible && !dt_grid_pipelined(&t->su.grid) && t->su.rank) stats[0] = stats[1] = 0;
        if (dt_grid_counts(&t->su.grid)) {      /* a tensor group scores its samples once */
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
        int eb = t->su.spec.train.eval_batch, sig = 0, piece = t->su.g.max_batch;
        double s[2] = { 0, 0 };
        long *idx = dt_malloc((size_t)eb * sizeof *idx);
        dt_shard *sh = &t->dp.sh;       /* shard 3: per layer as in training, or all for a pipeline */
        if (dt_grid_pipelined(&t->su.grid) || !dt_shard_per_layer(sh)) dt_shard_gather_all(sh);
        for (long start = 0; start < ds->n; start += eb) {
                if (cut && (sig = eval_cut(t, cut))) break;
                int B = (int)DT_MIN((long)eb, ds->n - start), lo, hi;
                dt_grid_slice(&t->su.grid, B, &lo, &hi);
                /* forward only, in pieces no larger than a training forward (what the activations
                 * hold): an evaluation sample's outputs do not depend on the piece it is in */
                for (int a = lo; a < hi; a += piece) {
                        int b = DT_MIN(piece, hi - a);
                        dt_fwd_ctx c = { .training = 0, .seed = t->su.spec.train.seed, .step = t->st.step, .pos0 = a };
                        if (dt_grid_pipelined(&t->su.grid)) {   /* the whole eval batch's positions: the
                                                                 * stages pass [a, a + b) on */
                                for (int i = 0; i < B; i++) idx[i] = start + i;
                                t->cur_ds = ds;
                                t->cur_idx = idx;
                                dt_pipe_hooks h = dt_step_pipe_hooks(&t->stp);
                                dt_pipe_eval(&t->pipe, &c, a, a + b, &h, s);
                                continue;
                        }
                        for (int i = a; i < a + b; i++) idx[i - a] = start + i;
                        gather(t, ds, idx, b, 1);
                        dt_graph_forward(&t->su.g, &c, b);
                        long corr = 0;
                        s[0] += dt_step_loss(&t->su, t->su.g.act[t->su.g.n], t->lab, t->tgt, b, 0.0f, NULL, &corr);
                        s[1] += (double)corr;
                }
                /* the pieces the largest slice has (slices are at most one sample apart) */
                int R = dt_grid_replicas(&t->su.grid), most = (B + R - 1) / R;
                for (int k = hi > lo ? (hi - lo + piece - 1) / piece : 0; k < (most + piece - 1) / piece; k++)
                        dt_shard_walk_idle(sh, 0, NULL);
        }
        dt_shard_release(sh);
        free(idx);
        if (sig) {
                *loss = *acc = NAN;
                dt_trace_end("eval", "evaluate (cut short)", NULL, tt);
                return sig;
        }
        if (!dt_grid_counts(&t->su.grid)) s[0] = s[1] = 0;      /* a tensor group scores its samples once */
        dt_comm_allreduce(&t->su.world, s, 2, MPI_DOUBLE, "evaluation");  /* scores: last stages only */
        *loss = s[0] / ((double)ds->n * t->su.rows);
        *acc = s[1] / ((double)ds->n * t->su.rows);
        dt_trace_end("eval", "evaluate", NULL, tt);
        return 0;
}
