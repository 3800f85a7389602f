/* train/load.c - what run and check load first: the spec and graph (train/setup.c), the memory
 * plan, the data of every rank (each checking its part of on-disk samples), and the trainer's end. */
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

dt_setup_opts dt_tr_setup_opts(const dt_run_opts *o)
{
        return (dt_setup_opts){ .model = o->model, .cluster = o->cluster, .device = o->device, .conv = o->conv, .epochs = o->epochs,
                                .batch = o->batch, .max_steps = o->max_steps, .seed = o->seed, .threads = o->threads,
                                .collective_timeout = o->collective_timeout, .quiet = o->quiet, .sets = &o->sets };
}

/* The overrides of this run into out: with --resume, those the run recorded first (so the command
 * that continues a stopped run needs no --set), then the command line's, which win. */
int dt_tr_run_sets(const dt_run_opts *o, dt_sets *out)
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

/* The spec, graph and cluster spec, and the device the specs ask for (the memory plan waits for
 * the data: dt_tr_check_memory). */
int dt_tr_load_model(trainer *t, const dt_run_opts *o)
{
        dt_setup_opts so = dt_tr_setup_opts(o);
        int rc = dt_setup_model(&t->su, &so);
        if (rc) return rc;
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
        dt_load_opts lo = { .part = t->su.grid.data->rank, .parts = t->su.grid.data->size, .dir = t->su.spec.dir,
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
int dt_tr_load_data_once(trainer *t)
{
        return dt_agree_run(load_data_cb, t);
}

void dt_tr_free_trainer(trainer *t)
{
        dt_step_settle(&t->stp);        /* no request left in flight for MPI_Finalize */
        dt_step_free(&t->stp);
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
        free(t->mem_ranks);
        free(t->step_s);
        free(t->lab);
        free(t->tgt);
        dt_metrics_close(&t->metrics);
        dt_tb_close(&t->tb);
        if (t->trace && dt_trace_close() < 0) dt_error("--trace: cannot write the trace: %s", strerror(errno));
        dt_setup_free(&t->su);
}
