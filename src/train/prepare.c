/* train/prepare.c - a run made ready: backend, data, buffers, the synchronisation the cluster spec
 * asks for, the output directory (locked, never a previous run's outputs overwritten), the
 * checkpoint to resume, the metrics and checkpoint writers; and the banner. */
#include "train/trainer.h"
#include "train/kernels.h"

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

static int nothing_to_do(const trainer *t);

/* dt_shard_init_params's layer draw: the grid's (a tensor split's cut from the unsplit layer) */
struct draw { const dt_grid *gr; dt_graph *g; uint64_t seed; };

static void draw_layer(void *ud, int i)
{
        struct draw *d = ud;
        dt_grid_init_layer(d->gr, d->g, i, d->seed);
}

/* The graph's buffers, the pipeline walker, the initial weights, the moments, the loader and the
 * sync objects, and the state a fresh run starts from. */
static void buffers(trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        dt_graph *g = &t->su.g;
        dt_backend *be = t->su.be;
        int maxb = DT_MAX(tr->batch, tr->eval_batch);
        dt_grid *gr = &t->su.grid;
        /* shard 3: only this rank's parts of the parameters and gradients stay resident */
        g->paged = t->su.cs.shard == 3 && dt_grid_replicas(gr) > 1 && !dt_device_is_remote(be);
        /* activations for one training forward: the evaluation runs in pieces of that size */
        if (dt_graph_alloc_slots(g, be, dt_tr_act_batch(t), gr->nslots) < 0) dt_die(DT_EXIT_RUNTIME, "layer setup failed");
        if (dt_grid_pipelined(gr)) dt_pipe_init(&t->pipe, &gr->pipe_axis, g, gr->L.sched, dt_setup_micro_batches(&t->su));
        /* shard 3 draws its parameters after its parts are known, layer by layer; the others
         * draw them here, before dt_dp_init */
        int drawn_parts = g->paged;
        if (!drawn_parts) dt_grid_init_params(gr, g, tr->seed);
        t->mo.n = dt_optim_nmoments(&tr->opt);
        dt_dp_init(&t->dp, gr->data, &t->su.cs, g);    /* first: it says how much of the moments is this rank's */
        dt_shard_bound_grads(&t->dp.sh, gr->L.grid[DT_AXIS_PIPE] <= 1);
        struct draw d = { gr, g, tr->seed };
        if (drawn_parts && !dt_shard_init_params(&t->dp.sh, draw_layer, &d)) dt_grid_init_params(gr, g, tr->seed);
        if (dt_device_is_remote(be)) {  /* moments live beside the parameters; host copies for checkpoints */
                if (t->mo.n >= 1) t->mo.m = be->ops->alloc(be, g->nparams);
                if (t->mo.n >= 2) t->mo.v = be->ops->alloc(be, g->nparams);
                t->hin = dt_falloc((size_t)maxb * dt_shape_size(&g->input));
        } else {
                dt_moments_alloc(&t->mo, dt_shard_len(&t->dp.sh));     /* shard 1 and 2: its parts */
        }
        dt_mirror_init(&t->mirror, be, g, &t->mo);
        t->perm = dt_malloc((size_t)t->train.n * sizeof *t->perm);
        /* a pipeline's first stage reads the inputs, its last the labels, the others nothing */
        t->loader = dt_loader_new_parts(&t->train, t->su.spec.data.prefetch, dt_tr_max_local(t), dt_grid_load_parts(gr),
                                        dt_tr_data_range, t);
        t->lab = dt_malloc((size_t)maxb * t->su.rows * sizeof *t->lab);
        t->tgt = dt_falloc((size_t)maxb * t->su.rows * t->su.C);
        if (t->su.cs.sync == DT_SYNC_SSP && t->su.size > 1) t->ssp = dt_ssp_new(&t->su.world, g, t->su.cs.staleness);
        t->st.seed = tr->seed;
        t->st.config_hash = t->su.spec.hash;
        t->st.best_test_loss = INFINITY;
        t->st.train_samples = t->train.n;
        t->st.batch = tr->batch;
}

/* The output directory (locked; a previous run's outputs never overwritten by a fresh run), the
 * checkpoint to resume, the overrides' record, fine-tuning weights, frozen layers and the trace.
 * Returns an exit status every rank agrees on. */
static int run_dir(trainer *t, const dt_run_opts *o)
{
        const dt_train_spec *tr = &t->su.spec.train;
        dt_graph *g = &t->su.g;
        dt_backend *be = t->su.be;
        int rc = 0;
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
        if (o->resume && (rc = dt_tr_resume(t, o->resume))) return rc;
        if ((t->nothing = nothing_to_do(t))) return 0;  /* before anything is opened for writing */
        /* the overrides this run applied, for a --resume, eval and predict to apply again; a fresh
         * run without any removes a record left by one that never wrote an output */
        rc = 0;
        if (t->su.rank == 0 && dt_sets_write(&o->sets, t->out) < 0) {
                dt_error("cannot write %s/%s: %s", t->out, DT_SETS_FILE, strerror(errno));
                rc = DT_EXIT_DATA;
        }
        if ((rc = dt_comm_agree(&t->su.world, rc, "overrides record"))) return rc;
        if (t->st.step == 0 && (rc = dt_tr_init_weights(t, o))) return rc;  /* fine-tuning: before any step */
        dt_shard_release(&t->dp.sh);    /* shard 3: what a whole model read left of the others' parts */
        rc = dt_freeze_init(&t->freeze, &t->su.spec, dt_setup_model_graph(&t->su), g, be,
                            t->su.rank != 0 ? 0 : t->quiet ? 1 : 2);
        if ((rc = dt_comm_agree(&t->su.world, rc, "frozen layers"))) return rc;
        if (o->trace) {
                rc = dt_trace_open(o->trace, t->su.rank, t->su.size) ? DT_EXIT_DATA : 0;
                if (rc) dt_error("--trace %s: %s", o->trace, strerror(errno));
                if ((rc = dt_comm_agree(&t->su.world, rc, "trace file"))) return rc;
                t->trace = 1;
        }
        return 0;
}

/* Rank 0's writers: TensorBoard, metrics.jsonl (with a resume's marker), the checkpoint writer,
 * strategy auto's plan.txt. */
static int writers(trainer *t)
{
        if (t->su.rank == 0 && dt_tb_open(&t->tb, t->out) < 0)   /* the run goes on without its curves */
                dt_error("cannot write TensorBoard events in %s: %s (the run goes on)", t->out, strerror(errno));
        if (t->su.rank == 0 && dt_metrics_open(&t->metrics, t->out, t->st.step > 0) < 0) {
                dt_error("cannot open %s/metrics.jsonl: %s", t->out, strerror(errno));
                return DT_EXIT_DATA;
        }
        /* what a dead run wrote past this checkpoint is dropped by the readers */
        if (t->su.rank == 0 && t->resumed[0])
                dt_metrics_resumed(&t->metrics, t->st.step, t->st.epoch, t->st.elapsed, t->resumed);
        if (t->su.rank == 0) {  /* an elastic launcher's relaunch (train/restart.h) */
                char msg[700];
                if (dt_restart_from_env(&t->restart, t->st.step, msg, sizeof msg) < 0) {
                        dt_error("%s", msg);
                        return DT_EXIT_USAGE;
                }
                const dt_elastic *e = &t->su.elastic;
                if (e->how)
                        dt_restart_layout(&t->restart, e->how == DT_ELASTIC_SHRUNK ? "fewer replicas" : "re-planned",
                                          e->from, e->to);
        }
        if (t->su.rank == 0) {  /* the writer: a fatal error from here on still commits what was asked */
                dt_ckpt_policy pol = { .keep = t->keep };
                t->ckw = dt_ckpt_writer_new(t->out, &pol, dt_ckpt_sync_env() == 1);
                dt_ckpt_writer_set_snapshots(t->ckw, t->su.cs.checkpoint_snapshots);
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

/* Everything a run holds besides the model: the backend, data, buffers, the synchronisation the
 * cluster spec asks for, the output directory (locked), the checkpoint to resume, the metrics. */
int dt_tr_prepare(trainer *t, const dt_run_opts *o)
{
        dt_setup_opts so = dt_tr_setup_opts(o);
        int rc;
        /* cuda (or auto with a GPU) opens before any data is read */
        if ((rc = dt_setup_backend(&t->su, &so))) return rc;
        if (o->out) snprintf(t->out, sizeof t->out, "%s", o->out);
        else snprintf(t->out, sizeof t->out, "runs/%s", t->su.spec.name);
        if ((rc = dt_tr_load_data_once(t))) return rc;
        if ((rc = dt_tr_check_memory(t))) return rc;
        buffers(t);
        if ((rc = run_dir(t, o)) || t->nothing || (rc = writers(t))) return rc;
        dt_tr_stepper_init(t);
        return 0;
}


long dt_tr_steps_per_epoch(const trainer *t)
{
        return (t->train.n + t->su.spec.train.batch - 1) / t->su.spec.train.batch;
}

void dt_tr_banner(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        int th = t->su.threads;
        printf("dtrain %s: model %s (%s), %d rank%s, %s backend, %d thread%s per rank\n", PACKAGE_VERSION,
               t->su.spec.name, t->su.spec.file, t->su.size, t->su.size == 1 ? "" : "s", t->su.be->ops->name, th,
               th == 1 ? "" : "s");
        printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
        char kd[512];
        printf("CPU kernels: %s\n", dt_kernels_desc(kd, sizeof kd));
        if (t->su.placed)       /* parallel/place.c: a pipeline's stages together, other ranks round robin */
                printf("placement: ranks outnumber the cores; %s (rank 0 on %s; DTRAIN_BIND=0 leaves it to the "
                       "kernel)\n",
                       dt_grid_pipelined(&t->su.grid) ? "each pipeline's ranks share cores" : "the ranks share them round robin",
                       t->su.place);
        if (t->su.be->desc[0]) printf("device: %s%s\n", t->su.be->desc, t->su.be->deterministic ? ", deterministic" : "");
        dt_graph_print_table(dt_setup_model_graph(&t->su), stdout);
        dt_tr_print_mem(t, stdout);
        printf("data: train %ld samples, test %ld samples; %d epoch%s x %ld step%s of batch %d; optimizer %s lr %g\n",
               t->train.n, t->have_test ? t->test.n : 0L, tr->epochs, tr->epochs == 1 ? "" : "s", dt_tr_steps_per_epoch(t),
               dt_tr_steps_per_epoch(t) == 1 ? "" : "s", tr->batch, dt_opt_names[tr->opt.kind], tr->lr);
        if (dt_grid_parts(&t->su.grid)) {
                dt_setup_print_plan(&t->su, stdout);
        } else if (t->su.size > 1) {
                const dt_cluster_spec *cs = &t->su.cs;
                printf("parallel: %d ranks, data parallel, sync %s%s%s, %d bucket%s\n", t->su.size,
                       dt_sync_names[cs->sync], cs->compression ? ", compression " : "",
                       cs->compression ? dt_comp_names[cs->compression] : "", t->dp.nb, t->dp.nb == 1 ? "" : "s");
        }
        if (t->su.cx_line[0]) printf("%s\n", t->su.cx_line);
        fflush(stdout);
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
