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
#include "config.h"

typedef struct trainer {
        dt_model_spec spec;
        dt_graph g;
        dt_backend *be;
        dt_dataset train, test;
        int have_test;
        dt_moments mo;
        dt_train_state st;
        int rank, size;
        int classes, rows, C;       /* loss geometry: rows per sample, outputs per row */
        long *perm;
        int32_t *lab;
        float *tgt;
        /* device backends (train/device.h): host staging of the input batch, host copies for checkpoints */
        float *hin;
        dt_host_mirror mirror;
        char out[DT_PATH_MAX];
        dt_metrics metrics;
        int quiet, tty;
        /* data parallel */
        dt_cluster_spec cs;             /* effective: model's parallel: + --cluster file */
        dt_comm comm;
        dt_dp dp;
        dt_ssp *ssp;
        const long *cur_idx;            /* the global batch being computed */
        int cur_B;
        double ep[2];                   /* this rank's loss sum and correct count this epoch */
} trainer;

static volatile sig_atomic_t stop_signal;
static void on_signal(int s) { stop_signal = s; }

/* ---- set-up shared by run and check ---- */

static long mem_available(void)
{
        FILE *f = fopen("/proc/meminfo", "r");
        char line[256];
        long kb = -1;
        if (!f) return -1;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
        fclose(f);
        return kb < 0 ? -1 : kb / 1024;  /* MiB */
}

static int load_spec(trainer *t, const dt_run_opts *o)
{
        dt_diag d = { 0 };
        if (dt_model_spec_load(&t->spec, o->model, &d) < 0 || d.n) {
                if (t->rank == 0) dt_diag_print(&d, stderr);
                dt_diag_free(&d);
                return DT_EXIT_USAGE;
        }
        dt_train_spec *tr = &t->spec.train;
        if (o->epochs > 0) tr->epochs = (int)o->epochs;
        if (o->batch > 0) tr->batch = (int)o->batch;
        if (o->max_steps >= 0) tr->max_steps = o->max_steps;
        if (o->seed >= 0) tr->seed = (uint64_t)o->seed;

        if (dt_graph_build(&t->g, &t->spec, &d) < 0 || d.n) goto bad;
        /* the loss reads the last layer as rows x C: (C), or (T, C) for per-step labels (text) */
        const dt_shape *os = &t->g.layers[t->g.n - 1].out;
        char sb[64];
        if (os->n != 1 && os->n != 2) {
                dt_diag_add(&d, t->spec.file, t->spec.layers[t->g.n - 1].pos.line, t->spec.layers[t->g.n - 1].pos.col,
                            "the last layer's output %s must be flat (classes or targets), or (steps, classes) "
                            "for per-step labels, for loss '%s'",
                            dt_shape_str(os, sb, sizeof sb), dt_loss_names[t->spec.loss]);
                goto bad;
        }
        t->rows = os->n == 2 ? os->d[0] : 1;
        t->C = os->d[os->n - 1];
        if (t->spec.data.classes > 0 && t->spec.loss == DT_LOSS_SOFTMAX_XENT && t->spec.data.classes != t->C) {
                dt_diag_add(&d, t->spec.file, t->spec.layers[t->g.n - 1].pos.line, t->spec.layers[t->g.n - 1].pos.col,
                            "the last layer has %d outputs but the data has %d classes", t->C, t->spec.data.classes);
                goto bad;
        }
        /* refuse absurd plans before allocating anything */
        int maxb = DT_MAX(tr->batch, tr->eval_batch);
        size_t need = dt_graph_memory(&t->g, maxb, dt_optim_nmoments(&tr->opt));
        long avail = mem_available();
        if (need == SIZE_MAX || (avail > 0 && need / (1024 * 1024) > (size_t)avail)) {
                if (need == SIZE_MAX)
                        dt_diag_add(&d, t->spec.file, tr->batch_pos.line, tr->batch_pos.col,
                                    "planned memory overflows for batch %d; use a smaller batch or model", maxb);
                else
                        dt_diag_add(&d, t->spec.file, tr->batch_pos.line, tr->batch_pos.col,
                                    "planned memory %.1f GiB (batch %d) exceeds the %.1f GiB available on this machine",
                                    need / 1073741824.0, maxb, avail / 1024.0);
                goto bad;
        }
        return 0;
bad:
        if (t->rank == 0) dt_diag_print(&d, stderr);
        dt_diag_free(&d);
        return DT_EXIT_USAGE;
}

/* The effective cluster spec: the model's 'parallel:' keys, overridden key by key by --cluster. */
static int load_cluster(trainer *t, const dt_run_opts *o)
{
        dt_diag d = { 0 };
        dt_cluster_spec file;
        dt_cluster_spec_init(&file);
        if (o->cluster && dt_cluster_spec_load(&file, o->cluster, &d) < 0) goto bad;
        dt_cluster_spec_merge(&t->cs, &t->spec.parallel, &file);
        if (o->collective_timeout > 0) t->cs.collective_timeout = o->collective_timeout;
        if (dt_cluster_spec_validate(&t->cs, &t->spec, t->size, &d) < 0 || d.n) goto bad;
        return 0;
bad:
        if (t->rank == 0) dt_diag_print(&d, stderr);
        dt_diag_free(&d);
        return DT_EXIT_USAGE;
}

static int load_source(trainer *t, dt_dataset *ds, const dt_source_spec *src, int classes)
{
        char msg[DT_PATH_MAX + 256] = "";
        if (dt_dataset_load(ds, src, &t->spec.data, &t->spec.input, classes, msg, sizeof msg) == 0) return 0;
        /* a missing file is reported at the key that named it */
        if (!strncmp(msg, "cannot find", 11)) {
                const dt_pos *p = strstr(msg, src->labels[0] ? src->labels : "\x01") ? &src->labels_pos : &src->images_pos;
                fprintf(stderr, "%s:%d:%d: error: %s\n", t->spec.file, p->line, p->col, msg);
        } else {
                dt_error("%s", msg);
        }
        return DT_EXIT_DATA;
}

/* The loss geometry against a dataset: labels per sample must be the rows the last layer outputs. */
static int check_rows(const trainer *t, const dt_dataset *ds, const dt_source_spec *src)
{
        const dt_layer_spec *last = &t->spec.layers[t->g.n - 1];
        char sb[64];
        const char *os = dt_shape_str(&t->g.layers[t->g.n - 1].out, sb, sizeof sb);
        if (ds->label && ds->label_rows != t->rows) {
                if (t->rows == 1)
                        dt_error("%s: the data has %d labels per sample (one per step) but the last layer '%s' "
                                 "outputs %s, one row; keep the steps (e.g. return_sequences: true) so it "
                                 "outputs (%d, classes)", src->images, ds->label_rows, last->name, os, ds->label_rows);
                else
                        dt_error("%s: the data has %d label%s per sample but the last layer '%s' outputs %s, "
                                 "%d steps of %d", src->images, ds->label_rows, ds->label_rows == 1 ? "" : "s",
                                 last->name, os, t->rows, t->C);
                return DT_EXIT_DATA;
        }
        if (ds->target && (long)ds->tdim != (long)t->rows * t->C) {
                dt_error("%s: targets have %d values per sample but the model outputs %s (%ld)", src->images,
                         ds->tdim, os, (long)t->rows * t->C);
                return DT_EXIT_DATA;
        }
        return 0;
}

static int load_data(trainer *t)
{
        int classes = t->spec.loss == DT_LOSS_SOFTMAX_XENT ? (t->spec.data.classes ? t->spec.data.classes : t->C) : 0;
        int rc = load_source(t, &t->train, &t->spec.data.train, classes);
        if (rc) return rc;
        if ((rc = check_rows(t, &t->train, &t->spec.data.train))) return rc;
        if (t->spec.data.test.present) {
                if ((rc = load_source(t, &t->test, &t->spec.data.test, classes))) return rc;
                t->have_test = 1;
                if ((rc = check_rows(t, &t->test, &t->spec.data.test))) return rc;
                /* ids must mean the same bytes in both sources */
                if (t->train.nvocab != t->test.nvocab ||
                    memcmp(t->train.vocab, t->test.vocab, (size_t)t->train.nvocab)) {
                        dt_error("%s: the test text's vocabulary (%d distinct bytes) differs from the training "
                                 "text's (%d); give both sources the same path (part: train / holdout)",
                                 t->spec.data.test.images, t->test.nvocab, t->train.nvocab);
                        return DT_EXIT_DATA;
                }
        }
        if (t->spec.loss == DT_LOSS_SOFTMAX_XENT && !t->train.label) {
                dt_error("%s: softmax_cross_entropy needs class labels", t->spec.data.train.images);
                return DT_EXIT_DATA;
        }
        /* the first layer may constrain its input (an embedding takes token ids) */
        const dt_layer *l0 = &t->g.layers[0];
        const dt_dataset *sets[2] = { &t->train, t->have_test ? &t->test : NULL };
        const dt_source_spec *srcs[2] = { &t->spec.data.train, &t->spec.data.test };
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
        dt_ssp_free(t->ssp);
        dt_dp_free(&t->dp);
        dt_comm_free(&t->comm);
        if (dt_device_is_remote(t->be)) {       /* device moments go back to their backend */
                if (t->mo.m) t->be->ops->free(t->be, t->mo.m);
                if (t->mo.v) t->be->ops->free(t->be, t->mo.v);
                t->mo.m = t->mo.v = NULL;
        }
        dt_mirror_free(&t->mirror);
        free(t->hin);
        dt_graph_free(&t->g);
        if (t->be) dt_backend_free(t->be);
        dt_dataset_free(&t->train);
        if (t->have_test) dt_dataset_free(&t->test);
        free(t->mo.m);
        free(t->mo.v);
        free(t->perm);
        free(t->lab);
        free(t->tgt);
        dt_metrics_close(&t->metrics);
        dt_model_spec_free(&t->spec);
}

static void comm_init(trainer *t)
{
        MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &t->size);
        if (t->size > 1)
                snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", t->rank, t->size);
}

static void print_mem(const trainer *t, FILE *f)
{
        const dt_train_spec *tr = &t->spec.train;
        int nm = dt_optim_nmoments(&tr->opt);
        size_t need = dt_graph_memory(&t->g, DT_MAX(tr->batch, tr->eval_batch), nm);
        fprintf(f, "parameters: %zu (%.2f MiB), buffers: %zu; planned memory: %.1f MiB "
                "(weights, gradients, %d optimizer moment%s, activations for batch %d)\n",
                t->g.nparams, t->g.nparams * 4.0 / 1048576.0, t->g.nbuffers, need / 1048576.0, nm,
                nm == 1 ? "" : "s", DT_MAX(tr->batch, tr->eval_batch));
}

int dt_cmd_check(const dt_run_opts *o)
{
        trainer t = { 0 };
        comm_init(&t);
        int rc = load_spec(&t, o);
        if (!rc) rc = load_cluster(&t, o);
        if (!rc) {
                printf("model: %s (%s)\n", t.spec.name, t.spec.file);
                printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
                dt_graph_print_table(&t.g, stdout);
                print_mem(&t, stdout);
                rc = load_data(&t);
                if (!rc)
                        printf("data: train %ld samples%s", t.train.n, t.have_test ? "" : "\n");
                if (!rc && t.have_test) printf(", test %ld samples\n", t.test.n);
                if (!rc && t.size > 1)
                        printf("parallel: %d ranks, %s, sync %s\n", t.size, dt_part_names[t.cs.strategy], dt_sync_names[t.cs.sync]);
                if (!rc) printf("ok: %s is valid\n", t.spec.file);
        }
        free_trainer(&t);
        return rc;
}

/* ---- one step ---- */

/* This rank's slice [lo, hi) of a global batch of B. */
static void slice(const trainer *t, int B, int *lo, int *hi)
{
        *lo = (int)((long)B * t->rank / t->size);
        *hi = (int)((long)B * (t->rank + 1) / t->size);
}

static double loss_of(trainer *t, const float *out, int b, float scale, float *dout, long *correct)
{
        if (t->be->ops->loss)   /* device backend: out and dout are device memory */
                return t->be->ops->loss(t->be, t->spec.loss == DT_LOSS_SOFTMAX_XENT ? 0 : 1, out, t->lab,
                                        t->spec.loss == DT_LOSS_SOFTMAX_XENT ? NULL : t->tgt, b * t->rows, t->C,
                                        scale, dout, correct);
        if (t->spec.loss == DT_LOSS_SOFTMAX_XENT)
                return dt_loss_softmax_xent(out, t->lab, b * t->rows, t->C, scale, dout, correct);
        return dt_loss_mse(out, t->tgt, t->lab, b * t->rows, t->C, scale, dout, correct);
}

static void gather(trainer *t, const dt_dataset *ds, const long *idx, int b)
{
        /* CPU backend: act[0] is host memory, gather straight into it */
        if (t->hin) {   /* device backend: gather on the host, then upload */
                dt_dataset_gather(ds, idx, b, t->hin, t->lab, ds->target ? t->tgt : NULL);
                t->be->ops->to_device(t->be, t->g.act[0], t->hin, (size_t)b * dt_shape_size(&t->g.input));
                return;
        }
        dt_dataset_gather(ds, idx, b, t->g.act[0], t->lab, ds->target ? t->tgt : NULL);
}

static void name_nonfinite(const trainer *t, const float *grads, char *buf, size_t n)
{
        for (int i = 0; i < t->g.n; i++) {
                const dt_layer *l = &t->g.layers[i];
                for (int k = 0; k < l->np; k++)
                        if (l->ps[k].trainable && !isfinite(t->be->ops->sumsq(t->be, grads + l->off[k], l->len[k]))) {
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
        const dt_train_spec *tr = &t->spec.train;
        int mb = t->cs.micro_batch > 0 ? t->cs.micro_batch : hi - lo;
        for (int a = lo; a < hi; a += mb) {
                int b = DT_MIN(mb, hi - a);
                gather(t, &t->train, t->cur_idx + a, b);
                dt_fwd_ctx c = { .training = 1, .seed = tr->seed, .step = t->st.step, .pos0 = a };
                dt_graph_forward(&t->g, &c, b);
                long corr = 0;
                double l = loss_of(t, t->g.act[t->g.n], b, 1.0f / (float)(t->cur_B * t->rows), t->g.dact[t->g.n], &corr);
                if (dt_fault_at(DT_FAULT_NAN_LOSS, t->st.step + 1)) l = NAN;
                if (!isfinite(l))
                        dt_die(DT_EXIT_NUMERIC, "non-finite loss (%g) at step %ld (tensor: loss)", l, t->st.step + 1);
                stats[0] += l;
                stats[1] += (double)corr;
                int last = a + b >= hi;
                dt_graph_backward_cb(&t->g, &c, b, hook && last ? dt_dp_layer_done : NULL, &t->dp);
        }
}

static void grad_chunk(void *ud, int lo, int hi, double stats[2])
{
        grad_range(ud, lo, hi, stats, 0);
}

/* Clip and apply one optimizer step for step index 'step' with gradient 'grads'. */
static void update(trainer *t, long step, float *grads)
{
        const dt_train_spec *tr = &t->spec.train;
        const dt_backend_ops *o = t->be->ops;
        if (dt_fault_at(DT_FAULT_NAN_GRAD, step + 1)) o->scale(t->be, 1, NAN, grads);
        double norm = sqrt(o->sumsq(t->be, grads, t->g.nparams));
        if (!isfinite(norm)) {
                char name[160];
                name_nonfinite(t, grads, name, sizeof name);
                dt_die(DT_EXIT_NUMERIC, "non-finite gradient norm at step %ld (tensor: %s)", step + 1, name);
        }
        float clip = dt_clip_factor(norm, tr->clip_norm);
        if (clip != 1.0f) o->scale(t->be, t->g.nparams, clip, grads);
        long spe = (t->train.n + tr->batch - 1) / tr->batch;
        double lr = dt_sched_lr(&tr->sched, tr->lr, step, spe, spe * tr->epochs);
        o->optim_step(t->be, &tr->opt, (float)lr, step + 1, t->g.params, grads, t->mo.m, t->mo.v, t->g.nparams);
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
        if (t->size == 1) return;
        if (t->cs.sync == DT_SYNC_SSP) dt_ssp_apply(t->ssp, t->st.step - 1, ssp_apply, t);
        if (t->cs.sync == DT_SYNC_AVERAGE) {
                dt_dp_average(&t->dp, t->mo.m, t->mo.v);   /* buffers included */
        } else if (t->g.nbuffers) {
                /* running statistics (batch norm) saw only this rank's slices: their mean over
                 * ranks is what evaluation and the checkpoint use, the same on every rank */
                dt_dp_allreduce(&t->dp, t->g.buffers, t->g.nbuffers, "buffer averaging");   /* host or device */
                t->be->ops->scale(t->be, t->g.nbuffers, 1.0f / (float)t->size, t->g.buffers);
        }
}

/* One global batch idx[0..B): this rank's share of forward/backward, the synchronisation the
 * cluster spec asks for, and the update. */
static void train_step(trainer *t, const long *idx, int B)
{
        const dt_backend_ops *o = t->be->ops;
        long step = t->st.step;
        double stats[2] = { 0, 0 };
        int lo, hi;
        t->cur_idx = idx;
        t->cur_B = B;
        dt_fault_step(step + 1);
        dt_comm_announce(&t->comm, step);
        if (t->cs.sync == DT_SYNC_SSP && t->size > 1)   /* at most s steps of others' updates missing */
                dt_ssp_apply(t->ssp, step - t->cs.staleness - 1, ssp_apply, t);
        o->zero(t->be, t->g.grads, t->g.nparams);
        if (t->cs.reproducible) {
                dt_repro_grads(&t->dp, B, t->cs.chunks, grad_chunk, t, stats);
                /* stats came back summed over ranks: keep this rank's share for the epoch sums */
                if (t->rank) stats[0] = stats[1] = 0;
                update(t, step, t->g.grads);
        } else {
                slice(t, B, &lo, &hi);
                int overlap = t->size > 1 && t->cs.sync == DT_SYNC_ALLREDUCE;
                if (hi > lo) grad_range(t, lo, hi, stats, overlap);
                if (t->size == 1) {
                        update(t, step, t->g.grads);
                } else if (t->cs.sync == DT_SYNC_ALLREDUCE) {
                        dt_dp_finish(&t->dp);
                        update(t, step, t->g.grads);
                } else if (t->cs.sync == DT_SYNC_AVERAGE) {
                        /* the local gradient as if this slice were the whole batch */
                        o->scale(t->be, t->g.nparams, (float)t->size, t->g.grads);
                        update(t, step, t->g.grads);
                        if ((step + 1) % t->cs.average_every == 0) dt_dp_average(&t->dp, t->mo.m, t->mo.v);
                } else {
                        dt_ssp_push(t->ssp, step);
                        dt_ssp_apply(t->ssp, -1, ssp_apply, t);   /* whatever is complete */
                }
        }
        t->ep[0] += stats[0];
        t->ep[1] += stats[1];
        t->st.step++;
}

/* Loss and accuracy on a dataset, split across ranks and reduced. */
static void evaluate(trainer *t, const dt_dataset *ds, double *loss, double *acc)
{
        int eb = t->spec.train.eval_batch;
        double s[2] = { 0, 0 };
        long *idx = dt_malloc((size_t)eb * sizeof *idx);
        for (long start = 0; start < ds->n; start += eb) {
                int B = (int)DT_MIN((long)eb, ds->n - start), lo, hi;
                slice(t, B, &lo, &hi);
                if (hi <= lo) continue;
                for (int i = lo; i < hi; i++) idx[i - lo] = start + i;
                gather(t, ds, idx, hi - lo);
                dt_fwd_ctx c = { .training = 0, .seed = t->spec.train.seed, .step = t->st.step, .pos0 = lo };
                dt_graph_forward(&t->g, &c, hi - lo);
                long corr = 0;
                s[0] += loss_of(t, t->g.act[t->g.n], hi - lo, 0.0f, NULL, &corr);
                s[1] += (double)corr;
        }
        free(idx);
        dt_comm_allreduce(&t->comm, s, 2, MPI_DOUBLE, "evaluation");
        *loss = s[0] / ((double)ds->n * t->rows);
        *acc = s[1] / ((double)ds->n * t->rows);
}

/* ---- checkpoints ---- */

static int save_ckpt(trainer *t)
{
        char err[DT_PATH_MAX + 256];
        int rc = 0;
        sync_replicas(t);   /* every rank holds the same state: any rank count can resume it */
        if (t->rank == 0) {
                t->st.nranks = t->size;
                const dt_graph *hg;     /* host copies on a device backend, the graph itself on cpu */
                dt_moments *hmo;
                dt_mirror_pull(&t->mirror, &t->g, &t->mo, &hg, &hmo);
                rc = dt_ckpt_save(t->out, hg, hmo, &t->st, err, sizeof err);
                if (rc < 0) dt_error("checkpoint: %s", err);
        }
        dt_comm_bcast(&t->comm, &rc, 1, MPI_INT, 0, "checkpoint agreement");     /* under the deadline */
        return rc;
}

static int resume(trainer *t, const char *how)
{
        char dir[DT_PATH_MAX], err[DT_PATH_MAX + 256];
        if (!strcmp(how, "auto")) {
                int r = dt_ckpt_latest(t->out, dir, sizeof dir, err, sizeof err);
                if (r < 0) { dt_error("%s", err); return DT_EXIT_CKPT; }
                if (r == 0) {
                        if (t->rank == 0 && !t->quiet) printf("resume: no checkpoint in %s/checkpoints; starting fresh\n", t->out);
                        return 0;
                }
        } else {
                snprintf(dir, sizeof dir, "%s", how);
        }
        dt_graph *hg;   /* host copies on a device backend (uploaded below), the graph itself on cpu */
        dt_moments *hmo;
        dt_mirror_target(&t->mirror, &t->g, &t->mo, &hg, &hmo);
        if (dt_ckpt_load(dir, hg, hmo, &t->st, t->spec.hash, err, sizeof err) < 0) {
                dt_error("%s", err);
                return DT_EXIT_CKPT;
        }
        dt_mirror_push(&t->mirror, &t->g, &t->mo);
        if (t->st.seed != t->spec.train.seed) {
                dt_error("%s: checkpoint was trained with seed %llu but the run asks for %llu", dir,
                         (unsigned long long)t->st.seed, (unsigned long long)t->spec.train.seed);
                return DT_EXIT_CKPT;
        }
        if (t->rank == 0 && !t->quiet)
                printf("resume: %s (step %ld, epoch %ld, batch %ld of the epoch, written by %d rank%s)\n", dir,
                       t->st.step, t->st.epoch + 1, t->st.step_in_epoch, t->st.nranks, t->st.nranks == 1 ? "" : "s");
        return 0;
}

static int mkdir_p(const char *path)
{
        char buf[DT_PATH_MAX];
        snprintf(buf, sizeof buf, "%s", path);
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/') continue;
                *p = 0;
                if (mkdir(buf, 0777) < 0 && errno != EEXIST) return -1;
                *p = '/';
        }
        return mkdir(buf, 0777) < 0 && errno != EEXIST ? -1 : 0;
}

/* ---- the run ---- */

static void progress(const trainer *t, long k, long spe, double loss, double sps)
{
        int w = 30, fill = (int)(w * k / (spe ? spe : 1));
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[w] = 0;
        printf("\repoch %ld/%d [%s] %ld/%ld loss %.4f %.0f samples/s ", t->st.epoch + 1,
               t->spec.train.epochs, bar, k, spe, loss, sps);
        fflush(stdout);
}

int dt_cmd_run(const dt_run_opts *o)
{
        trainer t = { 0 };
        comm_init(&t);
        t.quiet = o->quiet;
        t.tty = isatty(STDOUT_FILENO) && !o->quiet && t.rank == 0;
        int rc;
        if ((rc = load_spec(&t, o))) goto done;
        if ((rc = load_cluster(&t, o))) goto done;
        dt_comm_init(&t.comm, t.cs.collective_timeout);
        const dt_train_spec *tr = &t.spec.train;
        /* cuda (or auto with a GPU) opens here, before any data is read; the cpu backend is made
         * below with its thread count. --device, then the cluster spec's device, then the model's. */
        const char *device = o->device ? o->device : t.cs.device[0] ? t.cs.device : t.spec.device;
        if (strcmp(device, "cpu") &&
            (rc = dt_device_open(device, o->device ? "--device" : t.cs.device[0] ? "the cluster spec" : t.spec.file,
                                 t.comm.local_rank, t.spec.deterministic, t.rank, o->quiet, &t.be)))
                goto done;
        if ((rc = dt_device_check_cluster(t.be, &t.cs, t.size))) goto done;
        if (o->out) snprintf(t.out, sizeof t.out, "%s", o->out);
        else snprintf(t.out, sizeof t.out, "runs/%s", t.spec.name);
        if ((rc = load_data(&t))) goto done;

        /* --threads, then the cluster spec, then OPENBLAS_NUM_THREADS, then the node's cores
         * shared among the ranks on it */
        int threads = o->threads;
        const char *envt = getenv("OPENBLAS_NUM_THREADS");
        if (threads <= 0) threads = t.cs.threads_per_rank;
        if (threads <= 0 && envt && atoi(envt) > 0) threads = atoi(envt);
        if (threads <= 0) {
                long nc = sysconf(_SC_NPROCESSORS_ONLN);
                threads = (int)DT_MAX(1, nc / t.comm.local_size);
        }
        if (!t.be) t.be = dt_backend_cpu_new(threads);
        int maxb = DT_MAX(tr->batch, tr->eval_batch);
        if (dt_graph_alloc(&t.g, t.be, maxb) < 0) dt_die(DT_EXIT_RUNTIME, "layer setup failed");
        dt_graph_init_params(&t.g, tr->seed);
        t.mo.n = dt_optim_nmoments(&tr->opt);
        if (dt_device_is_remote(t.be)) {        /* moments live beside the parameters; host copies for checkpoints */
                if (t.mo.n >= 1) t.mo.m = t.be->ops->alloc(t.be, t.g.nparams);
                if (t.mo.n >= 2) t.mo.v = t.be->ops->alloc(t.be, t.g.nparams);
                t.hin = dt_falloc((size_t)maxb * dt_shape_size(&t.g.input));
        } else {
                if (t.mo.n >= 1) t.mo.m = dt_falloc(t.g.nparams);
                if (t.mo.n >= 2) t.mo.v = dt_falloc(t.g.nparams);
        }
        dt_mirror_init(&t.mirror, t.be, &t.g, &t.mo);
        t.perm = dt_malloc((size_t)t.train.n * sizeof *t.perm);
        t.lab = dt_malloc((size_t)maxb * t.rows * sizeof *t.lab);
        t.tgt = dt_falloc((size_t)maxb * t.rows * t.C);
        dt_dp_init(&t.dp, &t.comm, &t.cs, &t.g);
        if (t.cs.sync == DT_SYNC_SSP && t.size > 1) t.ssp = dt_ssp_new(&t.comm, &t.g, t.cs.staleness);
        t.st.seed = tr->seed;
        t.st.config_hash = t.spec.hash;
        t.st.best_test_loss = INFINITY;

        if (t.rank == 0 && mkdir_p(t.out) < 0) {
                dt_error("cannot create output directory '%s': %s", t.out, strerror(errno));
                rc = DT_EXIT_DATA;
                goto done;
        }
        if (o->resume && (rc = resume(&t, o->resume))) goto done;
        if (t.rank == 0 && dt_metrics_open(&t.metrics, t.out, t.st.step > 0) < 0) {
                dt_error("cannot open %s/metrics.jsonl: %s", t.out, strerror(errno));
                rc = DT_EXIT_DATA;
                goto done;
        }

        long spe = (t.train.n + tr->batch - 1) / tr->batch;
        if (t.rank == 0 && !o->quiet) {
                printf("dtrain %s: model %s (%s), %d rank%s, %s backend, %d thread%s per rank\n", PACKAGE_VERSION,
                       t.spec.name, t.spec.file, t.size, t.size == 1 ? "" : "s", t.be->ops->name, threads,
                       threads == 1 ? "" : "s");
                printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
                if (t.be->desc[0]) printf("device: %s%s\n", t.be->desc, t.be->deterministic ? ", deterministic" : "");
                dt_graph_print_table(&t.g, stdout);
                print_mem(&t, stdout);
                printf("data: train %ld samples, test %ld samples; %d epochs x %ld steps of batch %d; optimizer %s lr %g\n",
                       t.train.n, t.have_test ? t.test.n : 0L, tr->epochs, spe, tr->batch, dt_opt_names[tr->opt.kind], tr->lr);
                if (t.size > 1)
                        printf("parallel: %d ranks, data parallel, sync %s%s%s, %d bucket%s\n", t.size,
                               dt_sync_names[t.cs.sync], t.cs.compression ? ", compression " : "",
                               t.cs.compression ? dt_comp_names[t.cs.compression] : "", t.dp.nb, t.dp.nb == 1 ? "" : "s");
                fflush(stdout);
        }

        struct sigaction sa = { 0 };
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGUSR1, &sa, NULL);

        double t0 = dt_now();
        int stopped = 0;
        if (t.st.epoch >= tr->epochs && t.rank == 0 && !o->quiet)
                printf("training already complete at step %ld\n", t.st.step);
        if (tr->max_steps > 0 && t.st.step >= tr->max_steps) stopped = -1;  /* resumed at the limit */
        while (t.st.epoch < tr->epochs && !stopped) {
                dt_shuffle(t.perm, t.train.n, tr->seed, t.st.epoch);
                double te0 = dt_now();
                long seen = 0;
                t.ep[0] = t.ep[1] = 0;
                /* ranks agree on a signal every step; under SSP every s + 1 steps, which the
                 * staleness bound allows anyway */
                int agree = t.cs.sync == DT_SYNC_SSP ? t.cs.staleness + 1 : 1;
                for (long k = t.st.step_in_epoch; k < spe; k++) {
                        long start = k * tr->batch;
                        int B = (int)DT_MIN((long)tr->batch, t.train.n - start);
                        train_step(&t, t.perm + start, B);
                        seen += B;
                        t.st.step_in_epoch = k + 1;
                        int sig = stop_signal;
                        if (t.size > 1 && (t.st.step % agree == 0 || k + 1 == spe))
                                dt_comm_allreduce_op(&t.comm, &sig, 1, MPI_INT, MPI_MAX, "signal agreement");
                        if (t.tty && (k % 10 == 0 || k + 1 == spe))
                                progress(&t, k + 1, spe, t.ep[0] * t.size / ((double)seen * t.rows), seen / (dt_now() - te0));
                        int at_max = tr->max_steps > 0 && t.st.step >= tr->max_steps;
                        if (sig || at_max) { stopped = sig ? sig : -1; break; }
                        if (tr->checkpoint_every > 0 && t.st.step % tr->checkpoint_every == 0 && k + 1 < spe)
                                if (save_ckpt(&t) < 0) { rc = DT_EXIT_DATA; goto done; }
                }
                if (t.tty) printf("\r%*s\r", 100, "");
                double el = dt_now() - te0;
                double sps = seen / (el > 0 ? el : 1e-9);
                double tl = NAN, ta = NAN;
                if (t.st.step_in_epoch == spe) {
                        t.st.epoch++;
                        t.st.step_in_epoch = 0;
                }
                sync_replicas(&t);
                dt_comm_allreduce(&t.comm, t.ep, 2, MPI_DOUBLE, "epoch statistics");
                if (t.have_test) evaluate(&t, &t.test, &tl, &ta);
                if (isfinite(tl) && tl < t.st.best_test_loss) t.st.best_test_loss = tl;
                if (t.rank == 0) {
                        double lr = t.st.lr;
                        double trl = seen ? t.ep[0] / ((double)seen * t.rows) : NAN;
                        double tra = seen ? t.ep[1] / ((double)seen * t.rows) : NAN;
                        long ep = t.st.step_in_epoch ? t.st.epoch + 1 : t.st.epoch;
                        dt_metrics_write(&t.metrics, ep, t.st.step, "train", trl, tra, sps, dt_now() - t0, lr);
                        if (t.have_test) dt_metrics_write(&t.metrics, ep, t.st.step, "test", tl, ta, sps, dt_now() - t0, lr);
                        if (!o->quiet) {
                                printf("epoch %ld/%d  step %ld  loss %.4f  train %.2f%%", ep, tr->epochs, t.st.step, trl, 100 * tra);
                                if (t.have_test) printf("  test loss %.4f  test %.2f%%", tl, 100 * ta);
                                printf("  %.0f samples/s  %.1fs\n", sps, dt_now() - t0);
                                fflush(stdout);
                        }
                }
                if (save_ckpt(&t) < 0) { rc = DT_EXIT_DATA; goto done; }
        }
        if (t.rank == 0) {
                char path[DT_PATH_MAX + 32], err[DT_PATH_MAX + 256];
                snprintf(path, sizeof path, "%s/model.safetensors", t.out);
                /* a text model carries its vocabulary: `dtrain sample` maps ids back to bytes */
                char vocab[2 * 256 + 1];
                for (int i = 0; i < t.train.nvocab; i++)
                        snprintf(vocab + 2 * i, 3, "%02x", t.train.vocab[i]);
                vocab[2 * t.train.nvocab] = 0;
                const dt_st_meta meta[] = { { "vocab", vocab } };
                const dt_graph *hg;
                dt_moments *hmo;
                dt_mirror_pull(&t.mirror, &t.g, &t.mo, &hg, &hmo);     /* host copies on a device backend */
                if (dt_model_save_meta(path, hg, meta, t.train.nvocab ? 1 : 0, err, sizeof err) < 0) {
                        dt_error("%s", err);
                        rc = DT_EXIT_DATA;
                        goto done;
                }
                if (!o->quiet) printf("wrote %s and checkpoint step %ld\n", path, t.st.step);
        }
        if (stopped > 0) {
                if (t.rank == 0) dt_note("stopped by signal %d after writing checkpoint step %ld", stopped, t.st.step);
                rc = DT_EXIT_SIGNAL;
        }
done:
        free_trainer(&t);
        return rc;
}
