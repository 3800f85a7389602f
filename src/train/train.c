/* train/train.c - the training loop: one global shuffle per epoch, each rank computing its slice
 * of every global batch, loss scaled by the global batch so slices add up, gradients summed over
 * ranks, optimizer on the flat buffers, evaluation after each epoch, atomic checkpoints. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mpi.h>
#include "util/common.h"
#include "util/cpu_fix.h"
#include "util/fault.h"
#include "spec/model_spec.h"
#include "graph/graph.h"
#include "data/data.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "train/ckpt.h"
#include "train/metrics.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "spec/cluster_spec.h"
#include "train/device.h"
#include "train/setup.h"
#include "train/rundir.h"
#include "train/whole.h"
#include "bench/bench.h"
#include "util/fault.h"
#include "config.h"

typedef struct trainer {
        dt_setup su;                    /* spec, effective cluster spec, graph, world, backend, threads */
        dt_dataset train, test;
        int have_test;
        dt_moments mo;
        dt_train_state st;
        int classes;
        long *perm;
        int32_t *lab;
        float *tgt;
        /* device backends (train/device.h): host staging of the input batch, host copies for checkpoints */
        float *hin;
        dt_host_mirror mirror;
        char out[DT_PATH_MAX];
        dt_metrics metrics;
        int quiet, tty;
        double t0;                      /* the run's start, for metrics */
        /* data parallel */
        dt_dp dp;
        dt_ssp *ssp;
        const long *cur_idx;            /* the global batch being computed */
        int cur_B;
        double ep[2];                   /* this rank's loss sum and correct count this epoch */
        double *step_s;                 /* this epoch's step times (seconds), for the median */
        long nstep_s, capstep_s;
        int lock_fd;                    /* rank 0's lock on the run directory, -1 when not held */
        /* pipeline stages (strategy model | hybrid): this rank's stage walker and its hooks' data */
        dt_pipe pipe;
        const dt_dataset *cur_ds;       /* what the hooks read: the training or the test set */
        float loss_scale;               /* 1 / (global batch x rows) in training */
} trainer;

static volatile sig_atomic_t stop_signal;
static void on_signal(int s) { stop_signal = s; }

/* ---- set-up shared by run and check (the model and backend part is train/setup.c) ---- */

static dt_setup_opts setup_opts(const dt_run_opts *o)
{
        return (dt_setup_opts){ .model = o->model, .cluster = o->cluster, .device = o->device, .epochs = o->epochs,
                                .batch = o->batch, .max_steps = o->max_steps, .seed = o->seed, .threads = o->threads,
                                .collective_timeout = o->collective_timeout, .quiet = o->quiet };
}

/* The spec, graph and cluster spec, and the memory plan for the larger of the two batches. */
static int load_model(trainer *t, const dt_run_opts *o)
{
        dt_setup_opts so = setup_opts(o);
        int rc = dt_setup_model(&t->su, &so);
        if (rc) return rc;
        const dt_train_spec *tr = &t->su.spec.train;
        if ((rc = dt_setup_check_memory(&t->su, DT_MAX(tr->batch, tr->eval_batch), t->su.nslots))) return rc;
        return dt_setup_check_device(&t->su, &so);
}

static int load_source(trainer *t, dt_dataset *ds, const dt_source_spec *src, int classes)
{
        char msg[DT_PATH_MAX + 256] = "";
        if (dt_dataset_load(ds, src, &t->su.spec.data, &t->su.spec.input, classes, msg, sizeof msg) == 0) return 0;
        /* a missing file is reported at the key that named it */
        if (!strncmp(msg, "cannot find", 11)) {
                const dt_pos *p = strstr(msg, src->labels[0] ? src->labels : "\x01") ? &src->labels_pos : &src->images_pos;
                fprintf(stderr, "%s:%d:%d: error: %s\n", t->su.spec.file, p->line, p->col, msg);
        } else {
                dt_error("%s", msg);
        }
        return DT_EXIT_DATA;
}

/* The loss geometry against a dataset: labels per sample must be the rows the last layer outputs. */
static int check_rows(const trainer *t, const dt_dataset *ds, const dt_source_spec *src)
{
        const dt_layer_spec *last = &t->su.spec.layers[t->su.g.n - 1];
        char sb[64];
        const char *os = dt_shape_str(&t->su.g.layers[t->su.g.n - 1].out, sb, sizeof sb);
        if (ds->label && ds->label_rows != t->su.rows) {
                if (t->su.rows == 1)
                        dt_error("%s: the data has %d labels per sample (one per step) but the last layer '%s' "
                                 "outputs %s, one row; keep the steps (e.g. return_sequences: true) so it "
                                 "outputs (%d, classes)", src->images, ds->label_rows, last->name, os, ds->label_rows);
                else
                        dt_error("%s: the data has %d label%s per sample but the last layer '%s' outputs %s, "
                                 "%d steps of %d", src->images, ds->label_rows, ds->label_rows == 1 ? "" : "s",
                                 last->name, os, t->su.rows, t->su.C);
                return DT_EXIT_DATA;
        }
        if (ds->target && (long)ds->tdim != (long)t->su.rows * t->su.C) {
                dt_error("%s: targets have %d values per sample but the model outputs %s (%ld)", src->images,
                         ds->tdim, os, (long)t->su.rows * t->su.C);
                return DT_EXIT_DATA;
        }
        return 0;
}

static int load_data(trainer *t)
{
        int classes = t->su.spec.loss == DT_LOSS_SOFTMAX_XENT ? (t->su.spec.data.classes ? t->su.spec.data.classes : t->su.C) : 0;
        int rc = load_source(t, &t->train, &t->su.spec.data.train, classes);
        if (rc) return rc;
        if ((rc = check_rows(t, &t->train, &t->su.spec.data.train))) return rc;
        if (t->su.spec.data.test.present) {
                if ((rc = load_source(t, &t->test, &t->su.spec.data.test, classes))) return rc;
                t->have_test = 1;
                if ((rc = check_rows(t, &t->test, &t->su.spec.data.test))) return rc;
                /* ids must mean the same bytes in both sources */
                if (t->train.nvocab != t->test.nvocab ||
                    memcmp(t->train.vocab, t->test.vocab, (size_t)t->train.nvocab)) {
                        dt_error("%s: the test text's vocabulary (%d distinct bytes) differs from the training "
                                 "text's (%d); give both sources the same path (part: train / holdout)",
                                 t->su.spec.data.test.images, t->test.nvocab, t->train.nvocab);
                        return DT_EXIT_DATA;
                }
        }
        if (t->su.spec.loss == DT_LOSS_SOFTMAX_XENT && !t->train.label) {
                dt_error("%s: softmax_cross_entropy needs class labels", t->su.spec.data.train.images);
                return DT_EXIT_DATA;
        }
        /* the first layer may constrain its input (an embedding takes token ids) */
        const dt_layer *l0 = &dt_setup_model_graph(&t->su)->layers[0];
        const dt_dataset *sets[2] = { &t->train, t->have_test ? &t->test : NULL };
        const dt_source_spec *srcs[2] = { &t->su.spec.data.train, &t->su.spec.data.test };
        for (int k = 0; k < 2 && l0->ops->check_input; k++) {
                char why[256];
                if (sets[k] && l0->ops->check_input(l0->cfg, &l0->in, sets[k]->x, sets[k]->n, why, sizeof why) < 0) {
                        dt_error("%s: %s", srcs[k]->images[0] ? srcs[k]->images : dt_format_names[srcs[k]->format], why);
                        return DT_EXIT_DATA;
                }
        }
        t->classes = t->train.classes;
        return 0;
}

static void free_trainer(trainer *t)
{
        if (t->lock_fd >= 0) close(t->lock_fd);
        dt_ssp_free(t->ssp);
        dt_dp_free(&t->dp);
        dt_pipe_free(&t->pipe);
        if (dt_device_is_remote(t->su.be)) {    /* device moments go back to their backend */
                if (t->mo.m) t->su.be->ops->free(t->su.be, t->mo.m);
                if (t->mo.v) t->su.be->ops->free(t->su.be, t->mo.v);
                t->mo.m = t->mo.v = NULL;
        }
        dt_mirror_free(&t->mirror);
        free(t->hin);
        dt_dataset_free(&t->train);
        if (t->have_test) dt_dataset_free(&t->test);
        free(t->mo.m);
        free(t->mo.v);
        free(t->perm);
        free(t->step_s);
        free(t->lab);
        free(t->tgt);
        dt_metrics_close(&t->metrics);
        dt_setup_free(&t->su);
}

static void print_mem(const trainer *t, FILE *f)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int nm = dt_optim_nmoments(&tr->opt);
        const dt_graph *g = dt_setup_model_graph(&t->su);
        size_t need = dt_graph_memory(g, DT_MAX(tr->batch, tr->eval_batch), nm);
        fprintf(f, "parameters: %zu (%.2f MiB), buffers: %zu; planned memory: %.1f MiB "
                "(weights, gradients, %d optimizer moment%s, activations for batch %d%s)\n",
                g->nparams, g->nparams * 4.0 / 1048576.0, g->nbuffers, need / 1048576.0, nm,
                nm == 1 ? "" : "s", DT_MAX(tr->batch, tr->eval_batch), t->su.split ? ", on one rank" : "");
}

int dt_cmd_check(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1 };
        int rc = load_model(&t, o);
        if (!rc && t.su.rank != 0) {    /* the other ranks check the same and say nothing */
                rc = load_data(&t);
        } else if (!rc) {
                printf("model: %s (%s)\n", t.su.spec.name, t.su.spec.file);
                printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
                dt_graph_print_table(dt_setup_model_graph(&t.su), stdout);
                print_mem(&t, stdout);
                rc = load_data(&t);
                if (!rc)
                        printf("data: train %ld samples%s", t.train.n, t.have_test ? "" : "\n");
                if (!rc && t.have_test) printf(", test %ld samples\n", t.test.n);
                if (!rc && (t.su.size > 1 || t.su.cs.strategy != DT_PART_DATA) && t.su.rank == 0)
                        dt_setup_print_plan(&t.su, stdout);
                if (!rc) printf("ok: %s is valid\n", t.su.spec.file);
        }
        free_trainer(&t);
        return rc;
}

/* ---- one step ---- */

/* This rank's slice [lo, hi) of a global batch of B. */
static void slice(const trainer *t, int B, int *lo, int *hi)
{
        const dt_comm *d = t->su.data;       /* the data-parallel axis: the world, or one stage's replicas */
        *lo = (int)((long)B * d->rank / d->size);
        *hi = (int)((long)B * (d->rank + 1) / d->size);
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

static void gather(trainer *t, const dt_dataset *ds, const long *idx, int b)
{
        /* CPU backend: act[0] is host memory, gather straight into it */
        if (t->hin) {   /* device backend: gather on the host, then upload */
                dt_dataset_gather(ds, idx, b, t->hin, t->lab, ds->target ? t->tgt : NULL);
                t->su.be->ops->to_device(t->su.be, t->su.g.act[0], t->hin, (size_t)b * dt_shape_size(&t->su.g.input));
                return;
        }
        dt_dataset_gather(ds, idx, b, t->su.g.act[0], t->lab, ds->target ? t->tgt : NULL);
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
                if (!isfinite(l))
                        dt_die(DT_EXIT_NUMERIC, "non-finite loss (%g) at step %ld (tensor: loss)", l, t->st.step + 1);
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
        const dt_train_spec *tr = &t->su.spec.train;
        const dt_backend_ops *o = t->su.be->ops;
        if (dt_fault_at(DT_FAULT_NAN_GRAD, step + 1)) o->scale(t->su.be, 1, NAN, grads);
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
                dt_die(DT_EXIT_NUMERIC, "non-finite gradient norm at step %ld (tensor: %s)", step + 1, name);
        }
        float clip = dt_clip_factor(norm, tr->clip_norm);
        if (clip != 1.0f) o->scale(t->su.be, t->su.g.nparams, clip, grads);
        long spe = (t->train.n + tr->batch - 1) / tr->batch;
        double lr = dt_sched_lr(&tr->sched, tr->lr, step, spe, spe * tr->epochs);
        o->optim_step(t->su.be, &tr->opt, (float)lr, step + 1, t->su.g.params, grads, t->mo.m, t->mo.v, t->su.g.nparams);
        t->st.lr = lr;
}

static void ssp_apply(void *ud, long step, float *sum)
{
        update(ud, step, sum);
}

/* Replicas agree again: SSP applies every pushed step, averaging averages. Called before
 * evaluation, checkpoints and the end. */
static void sync_replicas(trainer *t)
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
        dt_dataset_gather(ds, t->cur_idx + pos0, b, NULL, t->lab, ds->target ? t->tgt : NULL);
        long corr = 0;
        dt_graph *g = &t->su.g;
        double l = loss_of(t, g->act[g->n], b, training ? t->loss_scale : 0.0f, training ? g->dact[g->n] : NULL, &corr);
        if (training && dt_fault_at(DT_FAULT_NAN_LOSS, t->st.step + 1)) l = NAN;
        if (training && !isfinite(l))
                dt_die(DT_EXIT_NUMERIC, "non-finite loss (%g) at step %ld (tensor: loss)", l, t->st.step + 1);
        stats[0] += l;
        stats[1] += (double)corr;
}

/* One global batch idx[0..B): this rank's share of forward/backward, the synchronisation the
 * cluster spec asks for, and the update. */
static void train_step(trainer *t, const long *idx, int B)
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
        }
        t->st.step++;
}

/* Loss and accuracy on a dataset, split across ranks and reduced. */
static void evaluate(trainer *t, const dt_dataset *ds, double *loss, double *acc)
{
        int eb = t->su.spec.train.eval_batch;
        double s[2] = { 0, 0 };
        long *idx = dt_malloc((size_t)eb * sizeof *idx);
        for (long start = 0; start < ds->n; start += eb) {
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
        if (t->su.shard) s[0] = s[1] = 0;       /* a tensor group scores its samples once */
        dt_comm_allreduce(&t->su.world, s, 2, MPI_DOUBLE, "evaluation");  /* scores: last stages only */
        *loss = s[0] / ((double)ds->n * t->su.rows);
        *acc = s[1] / ((double)ds->n * t->su.rows);
}

/* ---- checkpoints ---- */

/* 1 when this rank holds the whole model after the call (it must then dt_whole_free it): each
 * tensor group puts its stage back together on its member 0, then the pipeline's stages go to its
 * stage 0 (world rank 0 for replica 0). */
static int whole_gather(trainer *t, dt_whole *w)
{
        dt_setup *su = &t->su;
        if (su->data->rank != 0) return 0;      /* replica 0 speaks for all */
        float *mine[4] = { su->g.params, su->g.buffers, t->mo.m, t->mo.v };
        float *stage[4] = { 0 };
        int K = 2 + t->mo.n;
        if (su->rank == 0) dt_whole_alloc(w, &su->full, t->mo.n);
        if (su->tensor && !su->pipelined) {     /* one stage: the group's whole is the model's */
                for (int k = 0; k < K; k++)
                        dt_tp_gather(&su->tp_axis, &su->sg, &su->g, k != 1, mine[k], su->rank == 0 ? w->buf[k] : NULL);
                return su->rank == 0;
        }
        if (su->tensor) {
                for (int k = 0; k < K; k++) {
                        size_t n = k == 1 ? su->sg.nbuffers : su->sg.nparams;
                        if (su->shard == 0) stage[k] = dt_falloc(n ? n : 1);
                        dt_tp_gather(&su->tp_axis, &su->sg, &su->g, k != 1, mine[k], stage[k]);
                }
                if (su->shard != 0) return 0;
                memcpy(mine, stage, sizeof mine);
        }
        if (su->pipelined) {
                dt_pipe_gather(&t->pipe, &su->plan, &su->full, t->mo.n, mine, w->buf);
        } else if (su->rank == 0) {     /* one stage: the group's whole is the model */
                for (int k = 0; k < K; k++) {
                        size_t n = k == 1 ? su->full.nbuffers : su->full.nparams;
                        if (n) memcpy(w->buf[k], mine[k], n * sizeof(float));
                }
        }
        for (int k = 0; k < 4; k++) free(stage[k]);
        return su->rank == 0;
}

/* The reverse: this rank's part of the whole model w (every rank holds it). */
static void whole_take(trainer *t, const dt_whole *w)
{
        dt_setup *su = &t->su;
        const dt_graph *sg = dt_setup_stage_graph(su);
        float *mine[4] = { su->g.params, su->g.buffers, t->mo.m, t->mo.v };
        size_t base[4] = { sg->param_base, sg->buffer_base, sg->param_base, sg->param_base };
        size_t n[4] = { sg->nparams, sg->nbuffers, sg->nparams, sg->nparams };
        for (int k = 0; k < 2 + t->mo.n; k++) {
                if (!n[k]) continue;
                if (su->tensor) dt_tp_take(sg, &su->g, k != 1, w->buf[k] + base[k], mine[k]);
                else memcpy(mine[k], w->buf[k] + base[k], n[k] * sizeof(float));
        }
}

static int save_ckpt(trainer *t)
{
        char err[DT_PATH_MAX + 256];
        int rc = 0;
        sync_replicas(t);   /* every rank holds the same state: any rank count can resume it */
        dt_whole w;
        int have = t->su.split && whole_gather(t, &w);
        if (t->su.rank == 0) {
                t->st.nranks = t->su.size;
                const dt_graph *hg;     /* host copies on a device backend, the graph itself on cpu */
                dt_moments *hmo;
                if (have) {
                        hg = &w.g;
                        hmo = &w.mo;
                } else {
                        dt_mirror_pull(&t->mirror, &t->su.g, &t->mo, &hg, &hmo);
                }
                rc = dt_ckpt_save(t->out, hg, hmo, &t->st, err, sizeof err);
                if (rc < 0) dt_error("checkpoint: %s", err);
        }
        if (have) dt_whole_free(&w);
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "checkpoint agreement");  /* under the deadline */
        return rc;
}

static int resume(trainer *t, const char *how)
{
        char dir[DT_PATH_MAX], err[DT_PATH_MAX + 256];
        if (!strcmp(how, "auto")) {
                int r = dt_ckpt_latest(t->out, dir, sizeof dir, err, sizeof err);
                if (r < 0) { dt_error("%s", err); return DT_EXIT_CKPT; }
                if (r == 0) {
                        if (t->su.rank == 0 && !t->quiet) printf("resume: no checkpoint in %s/checkpoints; starting fresh\n", t->out);
                        return 0;
                }
        } else {
                snprintf(dir, sizeof dir, "%s", how);
        }
        dt_graph *hg;   /* host copies on a device backend (uploaded below), the graph itself on cpu */
        dt_moments *hmo;
        dt_whole w;
        if (t->su.split) {      /* the whole model is read, this rank's part kept */
                dt_whole_alloc(&w, &t->su.full, t->mo.n);
                hg = &w.g;
                hmo = &w.mo;
        } else {
                dt_mirror_target(&t->mirror, &t->su.g, &t->mo, &hg, &hmo);
        }
        if (dt_ckpt_load(dir, hg, hmo, &t->st, t->su.spec.hash, err, sizeof err) < 0) {
                if (t->su.split) dt_whole_free(&w);
                dt_error("%s", err);
                return DT_EXIT_CKPT;
        }
        if (t->su.split) {
                whole_take(t, &w);
                dt_whole_free(&w);
        } else {
                dt_mirror_push(&t->mirror, &t->su.g, &t->mo);
        }
        if (dt_ckpt_check_position(&t->st, t->train.n, dir, err, sizeof err) < 0) {
                dt_error("%s", err);
                return DT_EXIT_CKPT;
        }
        if (t->st.batch != t->su.spec.train.batch) {       /* the steps from here are of the new batch */
                t->st.since.step = t->st.step;
                t->st.since.epoch = t->st.epoch;
                t->st.since.step_in_epoch = t->st.step_in_epoch;
                t->st.since.samples_in_epoch = t->st.samples_in_epoch;
                t->st.batch = t->su.spec.train.batch;
        }
        if (t->st.seed != t->su.spec.train.seed) {
                dt_error("%s: checkpoint was trained with seed %llu but the run asks for %llu", dir,
                         (unsigned long long)t->st.seed, (unsigned long long)t->su.spec.train.seed);
                return DT_EXIT_CKPT;
        }
        if (t->su.rank == 0 && !t->quiet)
                printf("resume: %s (step %ld, epoch %ld, sample %ld of the epoch, written by %d rank%s)\n", dir,
                       t->st.step, t->st.epoch + 1, t->st.samples_in_epoch, t->st.nranks, t->st.nranks == 1 ? "" : "s");
        return 0;
}

/* ---- the run ---- */

static void progress(const trainer *t, long k, long spe, double loss, double sps)
{
        int w = 30, fill = (int)(w * k / (spe ? spe : 1));
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[w] = 0;
        char ls[32] = "-";      /* rank 0 of a pipeline is stage 0: the loss lives on the last stage */
        if (!t->su.pipelined) snprintf(ls, sizeof ls, "%.4f", loss);
        printf("\repoch %ld/%d [%s] %ld/%ld loss %s %.0f samples/s ", t->st.epoch + 1,
               t->su.spec.train.epochs, bar, k, spe, ls, sps);
        fflush(stdout);
}

/* Everything a run holds besides the model: the backend, data, buffers, the synchronisation the
 * cluster spec asks for, the output directory (locked), the checkpoint to resume, the metrics. */
static int prepare(trainer *t, const dt_run_opts *o)
{
        dt_setup_opts so = setup_opts(o);
        const dt_train_spec *tr = &t->su.spec.train;
        int rc;
        /* cuda (or auto with a GPU) opens before any data is read */
        if ((rc = dt_setup_backend(&t->su, &so))) return rc;
        if (o->out) snprintf(t->out, sizeof t->out, "%s", o->out);
        else snprintf(t->out, sizeof t->out, "runs/%s", t->su.spec.name);
        if ((rc = load_data(t))) return rc;
        dt_graph *g = &t->su.g;
        dt_backend *be = t->su.be;
        int maxb = DT_MAX(tr->batch, tr->eval_batch);
        if (dt_graph_alloc_slots(g, be, maxb, t->su.nslots) < 0) dt_die(DT_EXIT_RUNTIME, "layer setup failed");
        if (t->su.pipelined)
                dt_pipe_init(&t->pipe, &t->su.pipe_axis, g, (dt_schedule_kind)t->su.cs.schedule,
                             dt_setup_micro_batches(&t->su));
        if (t->su.tensor) dt_tp_init_params(&t->su.sg, g, tr->seed);
        else dt_graph_init_params(g, tr->seed);
        t->mo.n = dt_optim_nmoments(&tr->opt);
        if (dt_device_is_remote(be)) {  /* moments live beside the parameters; host copies for checkpoints */
                if (t->mo.n >= 1) t->mo.m = be->ops->alloc(be, g->nparams);
                if (t->mo.n >= 2) t->mo.v = be->ops->alloc(be, g->nparams);
                t->hin = dt_falloc((size_t)maxb * dt_shape_size(&g->input));
        } else {
                if (t->mo.n >= 1) t->mo.m = dt_falloc(g->nparams);
                if (t->mo.n >= 2) t->mo.v = dt_falloc(g->nparams);
        }
        dt_mirror_init(&t->mirror, be, g, &t->mo);
        t->perm = dt_malloc((size_t)t->train.n * sizeof *t->perm);
        t->lab = dt_malloc((size_t)maxb * t->su.rows * sizeof *t->lab);
        t->tgt = dt_falloc((size_t)maxb * t->su.rows * t->su.C);
        dt_dp_init(&t->dp, t->su.data, &t->su.cs, g);
        if (t->su.cs.sync == DT_SYNC_SSP && t->su.size > 1) t->ssp = dt_ssp_new(&t->su.world, g, t->su.cs.staleness);
        t->st.seed = tr->seed;
        t->st.config_hash = t->su.spec.hash;
        t->st.best_test_loss = INFINITY;
        t->st.train_samples = t->train.n;
        t->st.batch = tr->batch;

        if (t->su.rank == 0 && dt_mkdir_p(t->out, 0777, NULL, 0) < 0) {
                dt_error("cannot create output directory '%s': %s", t->out, strerror(errno));
                rc = DT_EXIT_DATA;
        }
        if (t->su.rank == 0 && !rc) rc = dt_run_lock(t->out, &t->lock_fd);
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "output directory verdict");   /* every rank stops, none waits */
        if (rc) return rc;
        if (o->resume && (rc = resume(t, o->resume))) return rc;
        if (t->su.rank == 0 && dt_metrics_open(&t->metrics, t->out, t->st.step > 0) < 0) {
                dt_error("cannot open %s/metrics.jsonl: %s", t->out, strerror(errno));
                return DT_EXIT_DATA;
        }
        if (t->su.rank == 0 && t->su.plan_text) {      /* strategy auto: the planner's report */
                char path[DT_PATH_MAX + 16];
                snprintf(path, sizeof path, "%s/plan.txt", t->out);
                FILE *f = fopen(path, "w");
                if (!f || fputs(t->su.plan_text, f) < 0 || fclose(f) != 0)
                        dt_error("cannot write %s: %s (the run goes on)", path, strerror(errno));
                if (!t->quiet) printf("%s; the full plan is in %s\n", t->su.plan_line, path);
        }
        return 0;
}

static long steps_per_epoch(const trainer *t)
{
        return (t->train.n + t->su.spec.train.batch - 1) / t->su.spec.train.batch;
}

static void banner(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int th = t->su.threads;
        printf("dtrain %s: model %s (%s), %d rank%s, %s backend, %d thread%s per rank\n", PACKAGE_VERSION,
               t->su.spec.name, t->su.spec.file, t->su.size, t->su.size == 1 ? "" : "s", t->su.be->ops->name, th,
               th == 1 ? "" : "s");
        printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
        if (t->su.be->desc[0]) printf("device: %s%s\n", t->su.be->desc, t->su.be->deterministic ? ", deterministic" : "");
        dt_graph_print_table(dt_setup_model_graph(&t->su), stdout);
        print_mem(t, stdout);
        printf("data: train %ld samples, test %ld samples; %d epochs x %ld steps of batch %d; optimizer %s lr %g\n",
               t->train.n, t->have_test ? t->test.n : 0L, tr->epochs, steps_per_epoch(t), tr->batch,
               dt_opt_names[tr->opt.kind], tr->lr);
        if (t->su.split) {
                dt_setup_print_plan(&t->su, stdout);
        } else if (t->su.size > 1) {
                const dt_cluster_spec *cs = &t->su.cs;
                printf("parallel: %d ranks, data parallel, sync %s%s%s, %d bucket%s\n", t->su.size,
                       dt_sync_names[cs->sync], cs->compression ? ", compression " : "",
                       cs->compression ? dt_comp_names[cs->compression] : "", t->dp.nb, t->dp.nb == 1 ? "" : "s");
        }
        fflush(stdout);
}

/* ---- signal agreement (issue 12) ----
 * Ranks agree on a stop signal with an allreduce of the flag. A blocking one after every step was a
 * second rendezvous per step beside the gradient sync (on busy cores each costs the slower rank's
 * lateness): the run scaled 1.55-1.71x on 2 ranks where the step alone scaled 1.97x. Now the
 * allreduce of step k's flag is started after step k and completed after step k + 1, progressed
 * meanwhile by the gradient sync's polling, so every rank still sees the same agreed value after
 * the same step (one step after the signal), and the last step of an epoch agrees at once. */
typedef struct agreement {
        MPI_Request r;
        int send, recv, pending;
} agreement;

/* the agreed flag of the pending allreduce (0 when none is pending) */
static int agree_finish(trainer *t, agreement *a)
{
        if (!a->pending) return 0;
        dt_comm_wait(&t->su.world, 1, &a->r, "signal agreement");
        a->pending = 0;
        return a->recv;
}

/* this step's flag: agreed at once (now) or started for the next call (returns 0 then) */
static int agree(trainer *t, agreement *a, int sig, int now)
{
        if (now) {
                dt_comm_allreduce_op(&t->su.world, &sig, 1, MPI_INT, MPI_MAX, "signal agreement");
                return sig;
        }
        a->send = sig;
        MPI_Iallreduce(&a->send, &a->recv, 1, MPI_INT, MPI_MAX, t->su.world.comm, &a->r);
        a->pending = 1;
        return 0;
}

/* The rest of the current epoch from the data cursor, which counts samples, so a resume may change
 * the batch mid-epoch. Returns 0, a signal number, or -1 at --max-steps; *rc on a failed checkpoint. */
static int run_epoch(trainer *t, long *seen, int *rc)
{
        const dt_train_spec *tr = &t->su.spec.train;
        const long n = t->train.n;
        double te0 = dt_now();
        /* ranks agree on a signal every step; under SSP every s + 1 steps, which the staleness
         * bound allows anyway */
        int agree_every = t->su.cs.sync == DT_SYNC_SSP ? t->su.cs.staleness + 1 : 1;
        long espe = t->st.step_in_epoch + (n - t->st.samples_in_epoch + tr->batch - 1) / tr->batch;
        agreement ag = { .pending = 0 };
        while (t->st.samples_in_epoch < n) {
                long start = t->st.samples_in_epoch;
                int B = (int)DT_MIN((long)tr->batch, n - start);
                double ts0 = dt_now();
                train_step(t, t->perm + start, B);
                if (t->nstep_s == t->capstep_s) {
                        t->capstep_s = t->capstep_s ? 2 * t->capstep_s : 1024;
                        t->step_s = realloc(t->step_s, (size_t)t->capstep_s * sizeof *t->step_s);
                        if (!t->step_s) dt_die(DT_EXIT_RUNTIME, "out of memory");
                }
                t->step_s[t->nstep_s++] = dt_now() - ts0;
                *seen += B;
                t->st.samples_in_epoch = start + B;
                long k = t->st.step_in_epoch++;
                int last = t->st.samples_in_epoch == n;
                int sig = stop_signal;
                if (t->su.size > 1) {
                        /* the previous step's agreed flag, then this step's: at once on the last
                         * step of the epoch or of the run (nothing left pending), else overlapped */
                        int prev = agree_finish(t, &ag);
                        int end = last || (tr->max_steps > 0 && t->st.step >= tr->max_steps);
                        sig = t->st.step % agree_every == 0 || end ? agree(t, &ag, sig, end || prev) : 0;
                        if (prev) sig = prev;
                }
                if (t->tty && (k % 10 == 0 || last))
                        progress(t, k + 1, espe, t->ep[0] * t->su.data->size / ((double)*seen * t->su.rows),
                                 *seen / (dt_now() - te0));
                if (sig) return sig;
                if (tr->max_steps > 0 && t->st.step >= tr->max_steps) return -1;
                if (tr->checkpoint_every > 0 && t->st.step % tr->checkpoint_every == 0 && !last) {
                        /* a checkpoint is taken with nothing pending: its own collectives come after */
                        if ((sig = agree_finish(t, &ag))) return sig;
                        if (save_ckpt(t) < 0) {
                                *rc = DT_EXIT_DATA;
                                return 0;
                        }
                }
        }
        return agree_finish(t, &ag);    /* nothing is pending here: the last step agreed at once */
}

/* After an epoch (or the part of one a stop left): replicas agree, the test set is evaluated, the
 * metrics line and the checkpoint are written. */
static int end_epoch(trainer *t, long seen, double sps)
{
        const dt_train_spec *tr = &t->su.spec.train;
        double tl = NAN, ta = NAN;
        if (t->st.samples_in_epoch == t->train.n) {
                t->st.epoch++;
                t->st.step_in_epoch = 0;
                t->st.samples_in_epoch = 0;
        }
        /* the median step, the first two (warm-up) left out when there are more */
        double step_ms = 0;
        if (t->nstep_s > 0) {
                long skip = t->nstep_s > 4 ? 2 : 0;
                step_ms = 1e3 * dt_bench_median(t->step_s + skip, (int)(t->nstep_s - skip));
        }
        t->nstep_s = 0;
        if (t->su.size > 1)     /* the slowest rank's: ranks of a pipeline finish their steps at different times */
                dt_comm_allreduce_op(&t->su.world, &step_ms, 1, MPI_DOUBLE, MPI_MAX, "step time");
        sync_replicas(t);
        dt_comm_allreduce(&t->su.world, t->ep, 2, MPI_DOUBLE, "epoch statistics");
        if (t->have_test) evaluate(t, &t->test, &tl, &ta);
        if (isfinite(tl) && tl < t->st.best_test_loss) t->st.best_test_loss = tl;
        if (t->su.rank == 0) {
                double lr = t->st.lr, now = dt_now() - t->t0, rows = (double)seen * t->su.rows;
                double trl = seen ? t->ep[0] / rows : NAN, tra = seen ? t->ep[1] / rows : NAN;
                long ep = t->st.samples_in_epoch ? t->st.epoch + 1 : t->st.epoch;
                dt_metrics_write(&t->metrics, ep, t->st.step, "train", trl, tra, sps, now, lr, step_ms);
                if (t->have_test) dt_metrics_write(&t->metrics, ep, t->st.step, "test", tl, ta, sps, now, lr, 0);
                if (!t->quiet) {
                        printf("epoch %ld/%d  step %ld  loss %.4f  train %.2f%%", ep, tr->epochs, t->st.step, trl, 100 * tra);
                        if (t->have_test) printf("  test loss %.4f  test %.2f%%", tl, 100 * ta);
                        printf("  %.0f samples/s  %.1fs\n", sps, now);
                        fflush(stdout);
                }
        }
        return save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
}

/* Epochs until done, a signal or --max-steps. Returns an exit status; *stopped the signal (> 0). */
static int run_epochs(trainer *t, int *stopped)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int rc = 0;
        if (t->st.epoch >= tr->epochs && t->su.rank == 0 && !t->quiet)
                printf("training already complete at step %ld\n", t->st.step);
        if (tr->max_steps > 0 && t->st.step >= tr->max_steps) *stopped = -1;   /* resumed at the limit */
        while (t->st.epoch < tr->epochs && !*stopped && !rc) {
                dt_shuffle(t->perm, t->train.n, tr->seed, t->st.epoch);
                double te0 = dt_now();
                long seen = 0;
                t->ep[0] = t->ep[1] = 0;
                *stopped = run_epoch(t, &seen, &rc);
                if (t->tty) printf("\r%*s\r", 100, "");
                if (rc) break;
                double el = dt_now() - te0;
                rc = end_epoch(t, seen, seen / (el > 0 ? el : 1e-9));
        }
        return rc;
}

/* model.safetensors: the final weights, with a text model's vocabulary for `dtrain sample`. */
static int save_final(trainer *t)
{
        dt_whole ws, *w = &ws;
        int have = t->su.split && whole_gather(t, w);
        if (t->su.rank) return 0;
        char path[DT_PATH_MAX + 32], err[DT_PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/model.safetensors", t->out);
        char vocab[2 * 256 + 1];
        for (int i = 0; i < t->train.nvocab; i++)
                snprintf(vocab + 2 * i, 3, "%02x", t->train.vocab[i]);
        vocab[2 * t->train.nvocab] = 0;
        const dt_st_meta meta[] = { { "vocab", vocab } };
        const dt_graph *hg;
        dt_moments *hmo;
        dt_mirror_pull(&t->mirror, &t->su.g, &t->mo, &hg, &hmo);      /* host copies on a device backend */
        if (have) hg = &w->g;
        int rc = dt_model_save_meta(path, hg, meta, t->train.nvocab ? 1 : 0, err, sizeof err);
        if (have) dt_whole_free(w);
        if (rc < 0) {
                dt_error("%s", err);
                return DT_EXIT_DATA;
        }
        if (!t->quiet) printf("wrote %s and checkpoint step %ld\n", path, t->st.step);
        return 0;
}

int dt_cmd_run(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1 };
        t.quiet = o->quiet;
        int rc = load_model(&t, o);
        t.tty = isatty(STDOUT_FILENO) && !o->quiet && t.su.rank == 0;
        if (!rc) rc = prepare(&t, o);
        if (rc) goto done;
        if (t.su.rank == 0 && !o->quiet) banner(&t);

        struct sigaction sa = { 0 };
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGUSR1, &sa, NULL);

        t.t0 = dt_now();
        int stopped = 0;
        if ((rc = run_epochs(&t, &stopped))) goto done;
        if (t.su.pipelined && !o->quiet) dt_pipe_report(&t.pipe, t.su.rank == 0 ? stdout : NULL);
        if ((rc = save_final(&t))) goto done;
        if (stopped > 0) {
                if (t.su.rank == 0) dt_note("stopped by signal %d after writing checkpoint step %ld", stopped, t.st.step);
                rc = DT_EXIT_SIGNAL;
        }
done:
        free_trainer(&t);
        return rc;
}
