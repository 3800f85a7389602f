/* train/train.c - the training loop: one global shuffle per epoch, each rank computing its slice
 * of every global batch, loss scaled by the global batch so slices add up, gradients summed over
 * ranks, optimizer on the flat buffers, evaluation after each epoch, atomic checkpoints. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
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
#include "train/ckpt_writer.h"
#include "train/metrics.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "spec/cluster_spec.h"
#include "train/device.h"
#include "train/setup.h"
#include "train/rundir.h"
#include "train/whole.h"
#include "train/progress.h"
#include "train/runlog.h"
#include "train/tbevents.h"
#include "train/finetune.h"
#include "train/stop.h"
#include "util/trace.h"
#include "parallel/agree.h"
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
        dt_ckpt_writer *ckw;            /* rank 0: commits checkpoints on its own thread */
        int quiet;
        long nsteps_epoch;              /* steps the last epoch (or its part) took */
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
        /* ---- what the run reports (runlog.c, progress.c, tbevents.c): rank 0 writes ---- */
        dt_progress prog;
        dt_tb tb;
        double win[2];                  /* this rank's loss sum and correct count since the last step line */
        long win_n;                     /* samples since the last step line (global) */
        double win_t;                   /* when the window began */
        double gnorm;                   /* the last step's gradient norm (before clipping) */
        double comm0;                   /* dp.t_comm_wait at the epoch's start */
        int keep;                       /* checkpoints kept besides the best */
        dt_freeze freeze;               /* train.freeze: layers kept fixed (finetune.c) */
        int trace;                      /* --trace is recording */
        /* data/loader.c: this rank's part of the coming global batches, prepared ahead */
        dt_loader *loader;
        const dt_batch *cur_batch;      /* the batch of the step being computed, or NULL */
        int check_all;                  /* `dtrain check`: every on-disk sample checked at load */
        const dt_run_opts *opts;        /* the command line, for the command that continues a stopped run */
        char resumed[DT_PATH_MAX];      /* the checkpoint directory this run continues, "" fresh */
        int nothing;                    /* resumed with no step left: nothing is written */
} trainer;

static long steps_per_epoch(const trainer *t);
static int nothing_to_do(const trainer *t);

/* A run checks on-disk samples for NaN/Inf at load up to this size; larger data is checked as its
 * batches are read, so a run over a dataset of many GiB starts at once. */
#define DT_SCAN_MAX ((unsigned long long)1 << 30)

/* ---- set-up shared by run and check (the model and backend part is train/setup.c) ---- */

static dt_setup_opts setup_opts(const dt_run_opts *o)
{
        return (dt_setup_opts){ .model = o->model, .cluster = o->cluster, .device = o->device, .conv = o->conv, .epochs = o->epochs,
                                .batch = o->batch, .max_steps = o->max_steps, .seed = o->seed, .threads = o->threads,
                                .collective_timeout = o->collective_timeout, .quiet = o->quiet, .sets = &o->sets };
}

/* The overrides of this run into out: with --resume, those the run recorded first (so the command
 * that continues a stopped run needs no --set), then the command line's, which win. */
static int run_sets(const dt_run_opts *o, dt_sets *out)
{
        int rank, size;
        dt_comm_world_rank(&rank, &size);
        char dir[DT_PATH_MAX], name[DT_NAME_MAX];
        if (!o->resume) {
                dt_sets_merge(out, &o->sets);
                return 0;
        }
        if (strcmp(o->resume, "auto")) dt_sets_run_dir(o->resume, dir, sizeof dir);
        else if (o->out) snprintf(dir, sizeof dir, "%s", o->out);
        else if (!dt_setup_spec_name(o->model, &o->sets, name, sizeof name)) snprintf(dir, sizeof dir, "runs/%s", name);
        else return dt_sets_merge(out, &o->sets), 0;   /* the spec's errors: the load reports them */
        return dt_setup_run_sets(dir, &o->sets, out, "resume", rank != 0 ? 0 : o->quiet ? 1 : 2);
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

/* the first layer may constrain its input (an embedding takes token ids) */
static int check_first_input(void *ud, const float *x, long n, char *why, size_t len)
{
        const dt_layer *l0 = ud;
        return l0->ops->check_input(l0->cfg, &l0->in, x, n, why, len);
}

static int load_source(trainer *t, dt_dataset *ds, const dt_source_spec *src, int classes)
{
        char msg[DT_PATH_MAX + 256] = "";
        const dt_layer *l0 = &dt_setup_model_graph(&t->su)->layers[0];
        /* samples on disk are checked (NaN, token ids) once over the data-parallel ranks, each its part */
        dt_load_opts lo = { .part = t->su.data->rank, .parts = t->su.data->size, .dir = t->su.spec.dir,
                            .scan_max = t->check_all ? 0 : DT_SCAN_MAX,
                            .check = l0->ops->check_input ? check_first_input : NULL, .ud = (void *)l0 };
        if (dt_dataset_open(ds, src, &t->su.spec.data, &t->su.spec.input, classes, &lo, msg, sizeof msg) == 0) return 0;
        /* a missing file is reported at the key that named it */
        if (!strncmp(msg, "cannot find", 11)) {
                const dt_pos *p = strstr(msg, src->labels[0] ? src->labels : "\x01") ? &src->labels_pos : &src->images_pos;
                char at[DT_PATH_MAX + 64];
                fprintf(stderr, "%s: error: %s\n", dt_pos_str(at, sizeof at, t->su.spec.file, p->line, p->col), msg);
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
        if (dt_dataset_labelled(ds) && ds->label_rows != t->su.rows) {
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

static int load_data_here(trainer *t);

/* Every rank loads, checking its part of on-disk samples; all stop when one found a mistake. */
static int load_data(trainer *t)
{
        int rc = load_data_here(t);
        int any = rc;
        dt_comm_allreduce_op(&t->su.world, &any, 1, MPI_INT, MPI_MAX, "data verdict");
        return rc ? rc : any;
}

static int load_data_here(trainer *t)
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
        if (t->su.spec.loss == DT_LOSS_SOFTMAX_XENT && !dt_dataset_labelled(&t->train)) {
                dt_error("%s: softmax_cross_entropy needs class labels", t->su.spec.data.train.images);
                return DT_EXIT_DATA;
        }
        t->classes = t->train.classes;
        return 0;
}

static int load_data_cb(void *t) { return load_data(t); }

/* Every rank loads the data; a failure is printed once (parallel/agree.h). */
static int load_data_once(trainer *t)
{
        return dt_agree_run(load_data_cb, t);
}

static void free_trainer(trainer *t)
{
        if (t->ckw) {   /* drained by the caller; the logs it syncs close below */
                dt_on_fatal(NULL, NULL);
                dt_ckpt_writer_free(t->ckw);
                t->ckw = NULL;
        }
        if (t->lock_fd >= 0) close(t->lock_fd);
        dt_ssp_free(t->ssp);
        dt_freeze_free(&t->freeze, t->su.be);
        dt_dp_free(&t->dp);
        dt_pipe_free(&t->pipe);
        if (dt_device_is_remote(t->su.be)) {    /* device moments go back to their backend */
                if (t->mo.m) t->su.be->ops->free(t->su.be, t->mo.m);
                if (t->mo.v) t->su.be->ops->free(t->su.be, t->mo.v);
                t->mo.m = t->mo.v = NULL;
        }
        dt_mirror_free(&t->mirror);
        dt_loader_free(t->loader);
        free(t->hin);
        dt_dataset_free(&t->train);
        if (t->have_test) dt_dataset_free(&t->test);
        free(t->mo.blk);        /* the host moments' block; NULL with a device's */
        free(t->perm);
        free(t->step_s);
        free(t->lab);
        free(t->tgt);
        dt_metrics_close(&t->metrics);
        dt_tb_close(&t->tb);
        if (t->trace && dt_trace_close() < 0) dt_error("--trace: cannot write the trace: %s", strerror(errno));
        dt_setup_free(&t->su);
}

/* This rank's largest part of a global batch (the loader's slots hold that many samples). */
static int max_local(const trainer *t);

/* What the data holds on this rank: in-memory samples, labels and targets of both sets, the
 * epoch's permutation, the loader's slots and the staging of a device backend's input. */
static size_t data_bytes(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        size_t b = dt_dataset_bytes(&t->train) + (t->have_test ? dt_dataset_bytes(&t->test) : 0);
        b += (size_t)t->train.n * sizeof(long);
        if (t->train.n) b += dt_loader_bytes(&t->train, t->su.spec.data.prefetch, max_local(t));
        b += (size_t)DT_MAX(tr->batch, tr->eval_batch) * (size_t)t->su.rows * ((size_t)t->su.C * 4 + 4);
        return b;
}

static void print_mem(const trainer *t, FILE *f)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int nm = dt_optim_nmoments(&tr->opt);
        const dt_graph *g = dt_setup_model_graph(&t->su);
        size_t need = dt_graph_memory(g, DT_MAX(tr->batch, tr->eval_batch), nm), data = data_bytes(t);
        size_t snap = dt_setup_snapshot_bytes(&t->su);
        fprintf(f, "parameters: %zu (%.2f MiB), buffers: %zu; planned memory: %.1f MiB "
                "(weights, gradients, %d optimizer moment%s, activations for batch %d%s%s; data %.1f MiB%s)\n",
                g->nparams, g->nparams * 4.0 / 1048576.0, g->nbuffers, (need + snap + data) / 1048576.0, nm,
                nm == 1 ? "" : "s", DT_MAX(tr->batch, tr->eval_batch), t->su.split ? ", on one rank" : "",
                snap ? ", 2 checkpoint snapshots" : "", data / 1048576.0,
                t->train.disk ? ", samples read from disk per batch" : "");
}

int dt_cmd_check(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1, .check_all = 1 };
        int rc = dt_agree_rc(load_model(&t, o));
        if (!rc && t.su.rank != 0) {    /* the other ranks check the same and say nothing */
                rc = load_data_once(&t);
        } else if (!rc) {
                printf("model: %s (%s)\n", t.su.spec.name, t.su.spec.file);
                printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
                dt_graph_print_table(dt_setup_model_graph(&t.su), stdout);
                rc = load_data_once(&t);
                print_mem(&t, stdout);
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
static void data_range(void *ud, int B, int *lo, int *hi)
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

static int max_local(const trainer *t)
{
        int lo, hi;
        data_range((void *)t, t->su.spec.train.batch, &lo, &hi);
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
static int evaluate(trainer *t, const dt_dataset *ds, double *loss, double *acc, int cut)
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
        double tt = dt_trace_t();
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
                /* the run around it: for resume warnings, metrics time, which checkpoint is which */
                t->st.epochs = t->su.spec.train.epochs;
                dt_runlog_schedule(&t->su.spec.train, steps_per_epoch(t), t->st.schedule, sizeof t->st.schedule);
                t->st.elapsed = dt_now() - t->t0;
                /* a snapshot for the writer's thread (or, with DTRAIN_CKPT_SYNC=1, the commit);
                 * an error here is an earlier commit's, reported once */
                rc = dt_ckpt_writer_submit(t->ckw, hg, hmo, &t->st, err, sizeof err);
                if (rc < 0 && err[0]) dt_error("checkpoint: %s", err);
        }
        if (have) dt_whole_free(&w);
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "checkpoint agreement");  /* under the deadline */
        dt_trace_end("checkpoint", "save", NULL, tt);
        return rc;
}

/* --resume with checkpoints/latest missing: the newest step directory that loads whole, in
 * *dir ("" when none; err then holds why the newest one did not). The run is never started
 * fresh over a previous run's outputs (main.c's contract for a fresh run needs --force). */
static int newest_intact(trainer *t, dt_graph *hg, dt_moments *hmo, char *dir, size_t len, char *err, size_t errlen)
{
        long steps[64];
        int n = dt_ckpt_steps(t->out, steps, 64);
        char e[DT_PATH_MAX + 256];
        dir[0] = 0;
        for (int i = 0; i < n; i++) {
                if (snprintf(dir, len, "%s/checkpoints/step-%08ld", t->out, steps[i]) >= (int)len) continue;
                if (dt_ckpt_load(dir, hg, hmo, &t->st, t->su.spec.hash, e, sizeof e) == 0) return 1;
                if (i == 0) snprintf(err, errlen, "; the newest, %s, is not intact: %s", dir, e);
        }
        dir[0] = 0;
        return 0;
}

/* Loads the checkpoint --resume names (auto: the run directory's latest, or its newest intact
 * step directory when latest is missing) into the model, moments and state. Nothing is written
 * here: a refusal (exit 4) leaves the run directory as it was. */
static int resume(trainer *t, const char *how)
{
        char dir[DT_PATH_MAX], err[DT_PATH_MAX + 256];
        int found = 0;
        if (!strcmp(how, "auto")) {
                char ck[DT_PATH_MAX + 16];
                struct stat sb;
                snprintf(ck, sizeof ck, "%s/checkpoints", t->out);
                if (!stat(ck, &sb) && !S_ISDIR(sb.st_mode)) {
                        dt_error("--resume: %s is not a directory; the run in %s cannot be continued and nothing "
                                 "was changed (move it away, or --force starts over)", ck, t->out);
                        return DT_EXIT_CKPT;
                }
                int r = dt_ckpt_latest(t->out, dir, sizeof dir, err, sizeof err);
                if (r < 0) { dt_error("%s", err); return DT_EXIT_CKPT; }
                if (r == 0) {
                        char outs[256];
                        if (!dt_run_outputs(t->out, outs, sizeof outs)) {
                                if (t->su.rank == 0 && !t->quiet)
                                        printf("resume: no previous run in %s; starting fresh\n", t->out);
                                return 0;
                        }
                        found = -1;     /* latest is gone: the step directories are searched below */
                }
        } else if (dt_ckpt_resolve(how, dir, sizeof dir, err, sizeof err) < 0) {
                dt_error("--resume=%s: %s", how, err);
                return DT_EXIT_CKPT;
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
        if (found < 0) {
                char why[DT_PATH_MAX + 300] = "";
                if (!newest_intact(t, hg, hmo, dir, sizeof dir, why, sizeof why)) {
                        if (t->su.split) dt_whole_free(&w);
                        char outs[256];
                        dt_run_outputs(t->out, outs, sizeof outs);
                        dt_error("--resume: %s holds a previous run (%s) but %s/checkpoints/latest is missing and no "
                                 "step directory there is intact%s; nothing was changed (--force starts over)",
                                 t->out, outs, t->out, why);
                        return DT_EXIT_CKPT;
                }
                if (t->su.rank == 0)
                        dt_note("--resume: %s/checkpoints/latest is missing; continuing from the newest intact "
                                "checkpoint, %s", t->out, dir);
        } else if (dt_ckpt_load(dir, hg, hmo, &t->st, t->su.spec.hash, err, sizeof err) < 0) {
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
        snprintf(t->resumed, sizeof t->resumed, "%s", dir);
        if (t->su.rank == 0 && !t->quiet)
                printf("resume: %s (step %ld, epoch %ld, sample %ld of the epoch, written by %d rank%s)\n", dir,
                       t->st.step, t->st.epoch + 1, t->st.samples_in_epoch, t->st.nranks, t->st.nranks == 1 ? "" : "s");
        if (t->su.rank == 0) dt_runlog_resume_warnings(&t->st, &t->su.spec.train, steps_per_epoch(t));
        return 0;
}

/* ---- the run ---- */

/* Fine-tuning: --weights or train.init_from into the model before the first step, by tensor name
 * (finetune.c). Every rank reads the file; rank 0 reports. With splits the whole model is read and
 * each rank keeps its part, so every tensor must be there (strict). */
static int init_weights(trainer *t, const dt_run_opts *o)
{
        const dt_train_spec *tr = &t->su.spec.train;
        const char *path = o->weights ? o->weights : tr->init_from;
        if (!path || !path[0]) return 0;
        int strict = o->weights ? !o->non_strict : tr->init_strict;
        int verbose = t->su.rank != 0 ? 0 : t->quiet ? 1 : 2;
        int rc;
        if (t->su.split) {
                if (!strict) {
                        if (t->su.rank == 0)
                                dt_error("non-strict weights with pipeline stages or tensor splits: every tensor must "
                                         "come from the file; load strictly or train without the split");
                        return DT_EXIT_USAGE;
                }
                dt_whole w;
                dt_whole_alloc(&w, &t->su.full, t->mo.n);
                rc = dt_finetune_load(path, &w.g, 1, verbose);
                rc = dt_comm_agree(&t->su.world, rc, "fine-tuning weights");
                if (!rc) whole_take(t, &w);
                dt_whole_free(&w);
                return rc;
        }
        dt_graph *hg;
        dt_moments *hmo;
        dt_mirror_target(&t->mirror, &t->su.g, &t->mo, &hg, &hmo);
        if (hg != &t->su.g) {   /* a device: the host copy starts from the initialised weights */
                t->su.be->ops->to_host(t->su.be, hg->params, t->su.g.params, t->su.g.nparams);
                if (t->su.g.nbuffers) t->su.be->ops->to_host(t->su.be, hg->buffers, t->su.g.buffers, t->su.g.nbuffers);
        }
        rc = dt_finetune_load(path, hg, strict, verbose);
        rc = dt_comm_agree(&t->su.world, rc, "fine-tuning weights");
        if (!rc) dt_mirror_push(&t->mirror, &t->su.g, &t->mo);
        return rc;
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
        if ((rc = load_data_once(t))) return rc;
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
                dt_moments_alloc(&t->mo, g->nparams);
        }
        dt_mirror_init(&t->mirror, be, g, &t->mo);
        t->perm = dt_malloc((size_t)t->train.n * sizeof *t->perm);
        t->loader = dt_loader_new(&t->train, t->su.spec.data.prefetch, max_local(t), data_range, t);
        t->lab = dt_malloc((size_t)maxb * t->su.rows * sizeof *t->lab);
        t->tgt = dt_falloc((size_t)maxb * t->su.rows * t->su.C);
        dt_dp_init(&t->dp, t->su.data, &t->su.cs, g);
        if (t->su.cs.sync == DT_SYNC_SSP && t->su.size > 1) t->ssp = dt_ssp_new(&t->su.world, g, t->su.cs.staleness);
        t->st.seed = tr->seed;
        t->st.config_hash = t->su.spec.hash;
        t->st.best_test_loss = INFINITY;
        t->st.train_samples = t->train.n;
        t->st.batch = tr->batch;

        if (t->su.rank == 0 && dt_ckpt_sync_env() < 0) {
                dt_error("DTRAIN_CKPT_SYNC='%s': expected 1 (checkpoints written on the training thread) or 0",
                         getenv("DTRAIN_CKPT_SYNC"));
                rc = DT_EXIT_USAGE;
        }
        if (t->su.rank == 0 && !rc && dt_mkdir_p(t->out, 0777, NULL, 0) < 0) {
                dt_error("cannot create output directory '%s': %s", t->out, strerror(errno));
                rc = DT_EXIT_DATA;
        }
        if (t->su.rank == 0 && !rc) rc = dt_run_lock(t->out, &t->lock_fd);
        if (t->su.rank == 0 && !rc && !o->resume) rc = dt_run_fresh(t->out, o->force, t->quiet);   /* never lose a run */
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "output directory verdict");   /* every rank stops, none waits */
        if (rc) return rc;
        t->st.best_step = -1;
        t->keep = tr->keep_checkpoints;
        if (o->resume && (rc = resume(t, o->resume))) return rc;
        if ((t->nothing = nothing_to_do(t))) return 0;  /* before anything is opened for writing */
        /* the overrides this run applied, for a --resume, eval and predict to apply again; a fresh
         * run without any removes a record left by one that never wrote an output */
        rc = 0;
        if (t->su.rank == 0 && dt_sets_write(&o->sets, t->out) < 0) {
                dt_error("cannot write %s/%s: %s", t->out, DT_SETS_FILE, strerror(errno));
                rc = DT_EXIT_DATA;
        }
        if ((rc = dt_comm_agree(&t->su.world, rc, "overrides record"))) return rc;
        if (t->st.step == 0 && (rc = init_weights(t, o))) return rc;  /* fine-tuning: before any step */
        rc = dt_freeze_init(&t->freeze, &t->su.spec, dt_setup_model_graph(&t->su), g, be,
                            t->su.rank != 0 ? 0 : t->quiet ? 1 : 2);
        if ((rc = dt_comm_agree(&t->su.world, rc, "frozen layers"))) return rc;
        if (o->trace) {
                rc = dt_trace_open(o->trace, t->su.rank, t->su.size) ? DT_EXIT_DATA : 0;
                if (rc) dt_error("--trace %s: %s", o->trace, strerror(errno));
                if ((rc = dt_comm_agree(&t->su.world, rc, "trace file"))) return rc;
                t->trace = 1;
        }
        if (t->su.rank == 0 && dt_tb_open(&t->tb, t->out) < 0)   /* the run goes on without its curves */
                dt_error("cannot write TensorBoard events in %s: %s (the run goes on)", t->out, strerror(errno));
        if (t->su.rank == 0 && dt_metrics_open(&t->metrics, t->out, t->st.step > 0) < 0) {
                dt_error("cannot open %s/metrics.jsonl: %s", t->out, strerror(errno));
                return DT_EXIT_DATA;
        }
        /* what a dead run wrote past this checkpoint is dropped by the readers */
        if (t->su.rank == 0 && t->resumed[0])
                dt_metrics_resumed(&t->metrics, t->st.step, t->st.epoch, t->st.elapsed, t->resumed);
        if (t->su.rank == 0) {  /* the writer: a fatal error from here on still commits what was asked */
                dt_ckpt_policy pol = { .keep = t->keep };
                t->ckw = dt_ckpt_writer_new(t->out, &pol, dt_ckpt_sync_env() == 1);
                dt_ckpt_writer_add_log(t->ckw, t->metrics.f ? fileno(t->metrics.f) : -1);
                dt_on_fatal(dt_ckpt_writer_drain_on_fatal, t->ckw);
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
        if (t->su.placed)       /* parallel/place.c: a pipeline's stages together, other ranks round robin */
                printf("placement: ranks outnumber the cores; %s (rank 0 on %s; DTRAIN_BIND=0 leaves it to the "
                       "kernel)\n", t->su.pipelined ? "each pipeline's ranks share cores" : "the ranks share them round robin",
                       t->su.place);
        if (t->su.be->desc[0]) printf("device: %s%s\n", t->su.be->desc, t->su.be->deterministic ? ", deterministic" : "");
        dt_graph_print_table(dt_setup_model_graph(&t->su), stdout);
        print_mem(t, stdout);
        printf("data: train %ld samples, test %ld samples; %d epoch%s x %ld step%s of batch %d; optimizer %s lr %g\n",
               t->train.n, t->have_test ? t->test.n : 0L, tr->epochs, tr->epochs == 1 ? "" : "s", steps_per_epoch(t),
               steps_per_epoch(t) == 1 ? "" : "s", tr->batch, dt_opt_names[tr->opt.kind], tr->lr);
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

/* ---- run reports (runlog.c, progress.c): hooks of run_epoch and end_epoch ---- */

/* The optimizer steps the whole run takes (the --max-steps limit or every epoch's). */
static long run_steps(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        long all = t->st.step + (t->train.n - t->st.samples_in_epoch + tr->batch - 1) / tr->batch +
                   (long)(tr->epochs - t->st.epoch - 1) * steps_per_epoch(t);
        return tr->max_steps > 0 && tr->max_steps < all ? tr->max_steps : all;
}

/* The 1-based epoch a line reports: the finished one, or the one a stop cut short. */
static long ep_shown(const trainer *t)
{
        return t->st.samples_in_epoch ? t->st.epoch + 1 : t->st.epoch;
}

/* Every train.log_every steps: the window's loss and accuracy summed over the ranks (every rank
 * takes part), one step line in metrics.jsonl and the step scalars in TensorBoard. */
static void log_step(trainer *t)
{
        dt_comm_allreduce(&t->su.world, t->win, 2, MPI_DOUBLE, "step metrics");
        if (t->su.rank == 0 && t->win_n > 0) {
                double now = dt_now(), rows = (double)t->win_n * t->su.rows;
                double l = t->win[0] / rows, a = t->win[1] / rows, sps = t->win_n / (now - t->win_t);
                dt_metrics_step(&t->metrics, t->st.epoch + 1, t->st.step, l, a, t->st.lr, t->gnorm, sps, now - t->t0);
                dt_runlog_tb_step(&t->tb, t->st.step, l, a, t->st.lr, t->gnorm, sps);
        }
        t->win[0] = t->win[1] = 0;
        t->win_n = 0;
        t->win_t = dt_now();
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
        dt_loader_start(t->loader, t->perm, n, t->st.samples_in_epoch, tr->batch, tr->seed, t->st.epoch, 1);
        int r = 0;
        agreement ag = { .pending = 0 };
        while (t->st.samples_in_epoch < n) {
                long start = t->st.samples_in_epoch;
                int B = (int)DT_MIN((long)tr->batch, n - start);
                double ts0 = dt_now();
                t->cur_batch = dt_loader_next(t->loader);
                DT_ASSERT(t->cur_batch->start == start && t->cur_batch->B == B);
                train_step(t, t->perm + start, B);
                t->cur_batch = NULL;
                dt_loader_release(t->loader);
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
                int sig = dt_stop_signal();
                if (t->su.size > 1) {
                        /* the previous step's agreed flag, then this step's: at once on the last
                         * step of the epoch or of the run (nothing left pending), else overlapped */
                        int prev = agree_finish(t, &ag);
                        int end = last || (tr->max_steps > 0 && t->st.step >= tr->max_steps);
                        sig = t->st.step % agree_every == 0 || end ? agree(t, &ag, sig, end || prev) : 0;
                        if (prev) sig = prev;
                }
                if (tr->log_every > 0 && t->st.step % tr->log_every == 0) log_step(t);
                if (t->su.rank == 0) {
                        double now = dt_now();
                        dt_progress_info pi = {
                                .epoch = t->st.epoch + 1, .epochs = tr->epochs, .k = k + 1, .spe = espe,
                                .step = t->st.step, .total = run_steps(t),
                                .loss = t->su.pipelined ? NAN : t->ep[0] * t->su.data->size / ((double)*seen * t->su.rows),
                                .sps = *seen / (now - te0), .elapsed = now - t->t0, .epoch_elapsed = now - te0,
                        };
                        if (!t->quiet) dt_progress_step(&t->prog, &pi, now);
                }
                if (sig) { r = sig; break; }
                if (tr->max_steps > 0 && t->st.step >= tr->max_steps) { r = -1; break; }
                if (tr->checkpoint_every > 0 && t->st.step % tr->checkpoint_every == 0 && !last) {
                        /* a checkpoint is taken with nothing pending: its own collectives come after */
                        if ((r = agree_finish(t, &ag))) break;
                        if (save_ckpt(t) < 0) {
                                *rc = DT_EXIT_DATA;
                                break;
                        }
                }
        }
        if (!r) r = agree_finish(t, &ag);       /* nothing is pending here: the last step agreed at once */
        dt_loader_stop(t->loader);      /* the permutation may change from here */
        return r;
}

/* The epoch's lines: metrics.jsonl (train, and test when it was evaluated), TensorBoard and the
 * terminal. best: 1 when this epoch's checkpoint is the best so far. */
static void epoch_lines(trainer *t, double trl, double tra, double tl, double ta, double sps, double step_ms,
                        double comm_ms, int train_line, int test_line, int best)
{
        const dt_train_spec *tr = &t->su.spec.train;
        if (t->su.rank != 0) return;
        double lr = t->st.lr, now = dt_now() - t->t0;
        long ep = ep_shown(t);
        int partial = t->st.samples_in_epoch != 0;
        if (train_line) dt_metrics_write(&t->metrics, ep, t->st.step, "train", trl, tra, sps, now, lr, step_ms, partial);
        if (test_line) dt_metrics_write(&t->metrics, ep, t->st.step, "test", tl, ta, sps, now, lr, 0, partial);
        if (!test_line && t->have_test) return;    /* the epoch line waits for the test figures */
        dt_runlog_tb_epoch(&t->tb, t->st.step, trl, tra, tl, ta, lr, sps, step_ms, comm_ms);
        if (t->quiet) return;
        printf("epoch %ld/%d  step %ld  loss %.4f  train %.2f%%", ep, tr->epochs, t->st.step, trl, 100 * tra);
        if (t->have_test) printf("  test loss %.4f  test %.2f%%", tl, 100 * ta);
        printf("  %.0f samples/s  %.1fs%s%s\n", sps, now, best > 0 ? "  (best)" : "", partial ? "  (partial epoch)" : "");
        fflush(stdout);
}

/* What a stopped run's epoch still owes after its checkpoint (dt_cmd_run, once the commit is
 * done): the test set, unless a second signal came, and the epoch's lines. */
typedef struct stop_tail {
        int sig;                /* the stop signal; 0 for a run that was not stopped */
        int evaluate;           /* the test set is still to be evaluated */
        double trl, tra, sps, step_ms, comm_ms;
} stop_tail;

/* Rank 0, at once when the ranks agreed on a stop. */
static void announce_stop(const trainer *t, int sig, const char *during)
{
        if (t->su.rank != 0) return;
        if (!t->quiet) dt_progress_clear((dt_progress *)&t->prog);
        fflush(stdout);
        fprintf(stderr, "%s: stopping after step %ld (%s%s): writing checkpoint\n", dt_msg_prefix, t->st.step,
                dt_signal_name(sig), during);
        fflush(stderr);
}

/* After an epoch (or the part of one a stop left): replicas agree, the test set is evaluated, the
 * metrics lines and the checkpoint are written. On a stop (*stopped > 0, or a signal during the
 * evaluation, which cuts it short) the checkpoint comes first and the evaluation is left to
 * dt_cmd_run after the commit (*tail): under Slurm's --signal=USR1@T the kill follows T seconds
 * later, and an evaluation longer than that lost the epoch. */
static int end_epoch(trainer *t, long seen, double sps, int *stopped, stop_tail *tail)
{
        const dt_train_spec *tr = &t->su.spec.train;
        double tl = NAN, ta = NAN;
        long nsteps_epoch = t->nstep_s;
        t->nsteps_epoch = nsteps_epoch;
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
        double comm_ms = t->su.data->size > 1 && t->nsteps_epoch ? 1e3 * (t->dp.t_comm_wait - t->comm0) / (double)t->nsteps_epoch : NAN;
        double rows = (double)seen * t->su.rows;
        double trl = seen ? t->ep[0] / rows : NAN, tra = seen ? t->ep[1] / rows : NAN;
        int cut = 0;
        if (t->have_test && *stopped <= 0) {
                if (t->su.rank == 0 && !t->quiet) dt_progress_eval(&t->prog, ep_shown(t), tr->epochs, t->test.n);
                if ((cut = evaluate(t, &t->test, &tl, &ta, 1))) {
                        *stopped = cut;
                        announce_stop(t, cut, ", during the evaluation");
                }
        }
        if (t->su.rank == 0 && !t->quiet) dt_progress_clear(&t->prog);
        if (*stopped > 0) {
                /* the train line goes with the checkpoint (the commit fsyncs metrics.jsonl) */
                *tail = (stop_tail){ .sig = *stopped, .evaluate = t->have_test, .trl = trl, .tra = tra, .sps = sps,
                                     .step_ms = step_ms, .comm_ms = comm_ms };
                epoch_lines(t, trl, tra, tl, ta, sps, step_ms, comm_ms, 1, 0, 0);
                return save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
        }
        if (isfinite(tl) && tl < t->st.best_test_loss) t->st.best_test_loss = tl;
        int partial = t->st.samples_in_epoch != 0;
        /* only a whole epoch's figures compete for the best checkpoint */
        int best = partial ? 0 : dt_runlog_best(&t->st, tr->best_metric, t->have_test, tl, ta, trl);
        epoch_lines(t, trl, tra, tl, ta, sps, step_ms, comm_ms, 1, 1, best);
        return save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
}

/* Epochs until done, a signal or --max-steps. Returns an exit status; *stopped the signal (> 0),
 * with what its epoch still owes in *tail. */
static int run_epochs(trainer *t, int *stopped, stop_tail *tail)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int rc = 0;
        while (t->st.epoch < tr->epochs && !*stopped && !rc) {
                dt_shuffle(t->perm, t->train.n, tr->seed, t->st.epoch);
                double te0 = dt_now();
                long seen = 0;
                t->ep[0] = t->ep[1] = 0;
                t->comm0 = t->dp.t_comm_wait;
                *stopped = run_epoch(t, &seen, &rc);
                if (rc) break;
                if (*stopped > 0) announce_stop(t, *stopped, "");
                double el = dt_now() - te0;
                rc = end_epoch(t, seen, seen / (el > 0 ? el : 1e-9), stopped, tail);
        }
        return rc;
}

/* model.safetensors: the final weights, with a text model's vocabulary for `dtrain sample`. */
static int save_final(trainer *t)
{
        dt_whole ws, *w = &ws;
        int have = t->su.split && whole_gather(t, w);
        if (t->su.rank) return 0;
        dt_progress_clear(&t->prog);
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
        /* written while the checkpoint writer commits the last checkpoint: the two waits overlap */
        int rc = dt_model_save_meta(path, hg, meta, t->train.nvocab ? 1 : 0, err, sizeof err);
        if (have) dt_whole_free(w);
        if (rc < 0) {
                dt_error("%s", err);
                return DT_EXIT_DATA;
        }
        return 0;
}

/* Every rank, at the end of a run that got this far: rank 0 waits for its writer to commit every
 * checkpoint asked for; its verdict (or rc, save_final's) is everyone's exit status. */
static int finish_checkpoints(trainer *t, int rc, int final)
{
        char err[DT_PATH_MAX + 256];
        if (t->ckw && dt_ckpt_writer_drain(t->ckw, err, sizeof err) < 0) {
                if (err[0]) dt_error("checkpoint: %s", err);
                if (!rc) rc = DT_EXIT_DATA;
        }
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "checkpoint agreement");
        if (!rc && t->su.rank == 0 && !t->quiet) {
                long written = 0, coalesced = 0;
                if (t->ckw) dt_ckpt_writer_counts(t->ckw, &written, &coalesced);
                if (coalesced)  /* why a checkpoint_every step may have no directory of its own */
                        printf("checkpoints: %ld written, %ld replaced by a newer one while the previous was being "
                               "written\n", written, coalesced);
                if (final) printf("wrote %s/model.safetensors and checkpoint step %ld\n", t->out, t->st.step);
                if (t->st.best_step >= 0)       /* which is which: latest above, the best here */
                        printf("best checkpoint: step %ld (%s %.4g), %s/checkpoints/best\n", t->st.best_step,
                               t->st.best_metric, t->st.best_value, t->out);
        }
        return rc;
}

/* The command that continues this run, as the user typed it: the spec, the flags that shape the
 * run, --out and --resume. No --set: --resume applies those recorded in OUT/overrides.yaml. */
static void continue_cmd(const trainer *t, char *buf, size_t n)
{
        const dt_run_opts *o = t->opts;
        size_t k = 0;
        if (t->su.size > 1 && getenv("SLURM_STEP_ID")) k += (size_t)snprintf(buf, n, "srun ");
        else if (t->su.size > 1) k += (size_t)snprintf(buf, n, "mpirun -np %d ", t->su.size);
        const char *words[40];
        char vals[8][32];
        int nw = 0, nv = 0;
        words[nw++] = dt_argv0;
        words[nw++] = "run";
        words[nw++] = o->model;
        if (o->cluster) { words[nw++] = "--cluster"; words[nw++] = o->cluster; }
#define DT_FLAG(name, cond, fmt, val) \
        if (cond) { snprintf(vals[nv], sizeof vals[nv], fmt, val); words[nw++] = name; words[nw++] = vals[nv++]; }
        DT_FLAG("--epochs", o->epochs > 0, "%ld", o->epochs)
        DT_FLAG("--max-steps", o->max_steps > 0, "%ld", o->max_steps)
        DT_FLAG("--batch", o->batch > 0, "%ld", o->batch)
        DT_FLAG("--seed", o->seed >= 0, "%lld", o->seed)
        DT_FLAG("--threads", o->threads > 0, "%d", o->threads)
#undef DT_FLAG
        if (o->device) { words[nw++] = "--device"; words[nw++] = o->device; }
        if (o->conv) { words[nw++] = "--conv"; words[nw++] = o->conv; }
        words[nw++] = "--out";
        words[nw++] = t->out;
        words[nw++] = "--resume";
        for (int i = 0; i < nw && k < n; i++) {
                const char *w = words[i];       /* shell-quoted where a word needs it */
                int plain = w[0] && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == strlen(w);
                if (plain) {
                        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? " " : "", w);
                        continue;
                }
                k += (size_t)snprintf(buf + k, n - k, "%s'", i ? " " : "");    /* shell quoting: ' as '\'' */
                for (const char *c = w; *c && k < n; c++)
                        k += (size_t)snprintf(buf + k, n - k, *c == '\'' ? "'\\''" : "%c", *c);
                if (k < n) k += (size_t)snprintf(buf + k, n - k, "'");
        }
}

/* A stopped run, its checkpoint committed: the evaluation its epoch owes (a second signal skips
 * it, cutting it short at the next evaluation batch), then how to continue. Exit 75. */
static int after_stop(trainer *t, const stop_tail *tl0)
{
        const dt_train_spec *tr = &t->su.spec.train;
        if (tl0->evaluate) {
                double tl, ta;
                fflush(stdout);
                if (t->su.rank == 0 && dt_stop_count() < 2)
                        fprintf(stderr, "%s: evaluating the test set (%ld samples); another signal skips it\n",
                                dt_msg_prefix, t->test.n);
                int cut = evaluate(t, &t->test, &tl, &ta, 2);
                if (cut) {
                        if (t->su.rank == 0) fprintf(stderr, "%s: evaluation skipped (a second stop signal)\n", dt_msg_prefix);
                } else {
                        if (isfinite(tl) && tl < t->st.best_test_loss) t->st.best_test_loss = tl;
                        int partial = t->st.samples_in_epoch != 0;
                        int best = partial ? 0 : dt_runlog_best(&t->st, tr->best_metric, t->have_test, tl, ta, tl0->trl);
                        epoch_lines(t, tl0->trl, tl0->tra, tl, ta, tl0->sps, tl0->step_ms, tl0->comm_ms, 0, 1, best);
                        /* a whole epoch's checkpoint, committed before its test figures, may be the
                         * best: committed again, now named by checkpoints/best */
                        if (best > 0) {
                                int rc = save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
                                if ((rc = finish_checkpoints(t, rc, 0))) return rc;
                        }
                }
        }
        if (t->su.rank == 0) {
                char cmd[3 * DT_PATH_MAX];
                continue_cmd(t, cmd, sizeof cmd);
                fflush(stdout);
                fprintf(stderr, "%s: stopped by %s after step %ld; checkpoint committed in %s/checkpoints; "
                        "continue with:\n    %s\n", dt_msg_prefix, dt_signal_name(tl0->sig), t->st.step, t->out, cmd);
        }
        return DT_EXIT_SIGNAL;
}

/* A resumed run with no step left (every epoch done, or --max-steps reached): nothing is written. */
static int nothing_to_do(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        if (!t->opts->resume || t->st.step == 0) return 0;
        int done = t->st.epoch >= tr->epochs, at_max = tr->max_steps > 0 && t->st.step >= tr->max_steps;
        if (!done && !at_max) return 0;
        if (t->su.rank == 0 && !t->quiet) {
                if (done)
                        printf("nothing to do: %s is complete (%d epoch%s, step %ld); --epochs N continues it "
                               "further\n", t->out, tr->epochs, tr->epochs == 1 ? "" : "s", t->st.step);
                else
                        printf("nothing to do: %s is at step %ld, the --max-steps limit; a larger --max-steps "
                               "continues it\n", t->out, t->st.step);
        }
        return 1;
}

int dt_cmd_run(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1 };
        dt_run_opts ro = *o;    /* the same, with the recorded overrides in front of --set's */
        memset(&ro.sets, 0, sizeof ro.sets);
        int rc = run_sets(o, &ro.sets);
        o = &ro;
        t.quiet = o->quiet;
        t.opts = o;
        if (!rc) rc = dt_agree_rc(load_model(&t, o));     /* every rank parsed the same spec: one message */
        if (!rc) rc = prepare(&t, o);
        if (rc) goto done;
        if (t.nothing) goto done;
        if (t.su.rank == 0 && !o->quiet) banner(&t);
        dt_stop_install();

        t.t0 = dt_now() - t.st.elapsed;        /* metrics time goes on over a resume */
        if (t.su.rank == 0) dt_progress_init(&t.prog, dt_progress_mode_for(stdout, o->quiet), stdout, o->progress_s,
                                             o->progress_steps, dt_now(), t.st.step);
        t.win_t = dt_now();
        int stopped = 0;
        stop_tail tail = { 0 };
        if ((rc = run_epochs(&t, &stopped, &tail))) goto done;
        if (t.su.pipelined && !o->quiet) dt_pipe_report(&t.pipe, t.su.rank == 0 ? stdout : NULL);
        if ((rc = finish_checkpoints(&t, save_final(&t), 1))) goto done;
        if (stopped > 0) rc = after_stop(&t, &tail);
done:
        if (t.ckw) {    /* an error path: what was asked is still committed (or its failure told) */
                char err[DT_PATH_MAX + 256];
                if (dt_ckpt_writer_drain(t.ckw, err, sizeof err) < 0) {
                        if (err[0]) dt_error("checkpoint: %s", err);
                        if (!rc) rc = DT_EXIT_DATA;
                }
        }
        free_trainer(&t);
        dt_sets_free(&ro.sets);
        return rc;
}
