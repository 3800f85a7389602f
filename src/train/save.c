/* train/save.c - a run's checkpoints: committed by the background writer (a model in parts streamed
 * from its holders, ckpt_stream.c, or with a compressor's state gathered whole and cut back),
 * resumed (latest, the newest intact, or a path), fine-tuning weights before the first step, and
 * the final model.safetensors. */
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
#include "train/ckpt_stream.h"

/* The moments laid out as g's flat buffers (the checkpoint's): t->mo itself, unless the data axis
 * shards them (partition.shard): then every replica's parts are gathered into new buffers on data
 * rank 0 (NULL elsewhere), which moments_done frees. Every rank of the data axis calls it. */
static dt_moments moments_whole(trainer *t)
{
        dt_moments w = t->mo;
        dt_shard *sh = &t->dp.sh;
        if (!sh->stage) return w;
        w.blk = NULL;
        float **to[2] = { &w.m, &w.v };
        const float *mine[2] = { t->mo.m, t->mo.v };
        for (int k = 0; k < t->mo.n; k++) {
                *to[k] = t->su.grid.data->rank == 0 ? dt_falloc(t->su.g.nparams) : NULL;
                dt_shard_gather(sh, mine[k], *to[k]);
        }
        return w;
}

static void moments_done(trainer *t, dt_moments *w)
{
        if (!t->dp.sh.stage) return;
        free(w->m);
        free(w->v);
}

/* 1 when this rank holds the whole model after the call (it must then dt_whole_free it); 0 also
 * when every rank's graph is the whole model (rank 0's own is then what is written). mo: the
 * moments as g's buffers (moments_whole). */
static int whole_gather(trainer *t, dt_whole *w, const dt_moments *mo)
{
        dt_setup *su = &t->su;
        if (!dt_grid_parts(&su->grid)) return 0;
        float *mine[4] = { su->g.params, su->g.buffers, mo->m, mo->v };
        if (su->rank == 0) dt_whole_alloc(w, &su->grid.full, mo->n);
        return dt_grid_gather(&su->grid, &su->g, 2 + mo->n, mine, su->rank == 0 ? w->buf : NULL);
}

/* Where a whole model read from a file goes: a host copy w of the whole (returns 1: this rank holds
 * a part, read_done cuts it from w), else the rank's own graph (on a device, its host mirror).
 * With shard 1 and 2 the moments (this rank's parts) are read through *laid, new buffers laid out as
 * g's that read_done cuts and frees. */
static int read_target(trainer *t, dt_whole *w, dt_graph **hg, dt_moments **hmo, dt_moments *laid)
{
        *laid = (dt_moments){ 0 };
        if (t->dp.sh.stage) {
                laid->n = t->mo.n;
                if (laid->n >= 1) laid->m = dt_falloc(t->su.g.nparams);
                if (laid->n >= 2) laid->v = dt_falloc(t->su.g.nparams);
        }
        if (!dt_grid_parts(&t->su.grid)) {
                dt_mirror_target(&t->mirror, &t->su.g, &t->mo, hg, hmo);
                if (t->dp.sh.stage) *hmo = laid;
                return 0;
        }
        dt_whole_alloc(w, &t->su.grid.full, t->mo.n);
        *hg = &w->g;
        *hmo = &w->mo;
        return 1;
}

/* After read_target: when ok, this rank's part cut from w (part), or the mirror uploaded; w freed. */
static void read_done(trainer *t, dt_whole *w, int part, int ok, dt_moments *laid)
{
        float *mine[4] = { t->su.g.params, t->su.g.buffers, laid->m ? laid->m : t->mo.m, laid->v ? laid->v : t->mo.v };
        if (part && ok) dt_grid_take(&t->su.grid, &t->su.g, 2 + t->mo.n, w->buf, mine);
        if (part) dt_whole_free(w);
        else if (ok) dt_mirror_push(&t->mirror, &t->su.g, &t->mo);
        if (ok && laid->m) dt_shard_take(&t->dp.sh, laid->m, t->mo.m);
        if (ok && laid->v) dt_shard_take(&t->dp.sh, laid->v, t->mo.v);
        free(laid->m);
        free(laid->v);
}

/* A checkpoint of a run in parts, streamed to rank 0's writer by the parts' holders (ckpt_stream.c). */
static int save_streamed(trainer *t)
{
        char err[DT_PATH_MAX + 256];
        t->st.nranks = t->su.size;
        t->st.epochs = t->su.spec.train.epochs;
        dt_runlog_schedule(&t->su.spec.train, dt_tr_steps_per_epoch(t), t->st.schedule, sizeof t->st.schedule);
        t->st.elapsed = dt_now() - t->t0;
        int rc = dt_ckpt_stream_save(t, err, sizeof err);
        if (rc < 0 && t->su.rank == 0 && err[0]) dt_error("checkpoint: %s", err);
        return rc;
}

int dt_tr_save_ckpt(trainer *t)
{
        char err[DT_PATH_MAX + 256];
        int rc = 0;
        double tt = dt_trace_t();
        dt_tr_sync_replicas(t);   /* every rank holds the same state: any rank count can resume it */
        if (dt_ckpt_stream_on(t)) {
                rc = save_streamed(t);
                dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "checkpoint agreement");
                dt_trace_end("checkpoint", "save", NULL, tt);
                return rc;
        }
        dt_shard_gather_all(&t->dp.sh);
        dt_whole w;
        dt_moments mw = moments_whole(t);
        int have = whole_gather(t, &w, &mw);
        dt_ckpt_extra cx;
        dt_tr_cx_gather(t, &cx);
        if (t->su.rank == 0) {
                t->st.nranks = t->su.size;
                const dt_graph *hg;     /* host copies on a device backend, the graph itself on cpu */
                dt_moments *hmo;
                if (have) {
                        hg = &w.g;
                        hmo = &w.mo;
                } else {
                        dt_mirror_pull(&t->mirror, &t->su.g, &mw, &hg, &hmo);
                }
                /* the run around it: for resume warnings, metrics time, which checkpoint is which */
                t->st.epochs = t->su.spec.train.epochs;
                dt_runlog_schedule(&t->su.spec.train, dt_tr_steps_per_epoch(t), t->st.schedule, sizeof t->st.schedule);
                t->st.elapsed = dt_now() - t->t0;
                /* a snapshot for the writer's thread (or, with DTRAIN_CKPT_SYNC=1, the commit);
                 * an error here is an earlier commit's, reported once */
                rc = dt_ckpt_writer_submit_x(t->ckw, hg, hmo, &cx, &t->st, err, sizeof err);
                if (rc < 0 && err[0]) dt_error("checkpoint: %s", err);
        }
        if (have) dt_whole_free(&w);
        dt_ckpt_extra_free(&cx);
        moments_done(t, &mw);
        dt_shard_release(&t->dp.sh);
        dt_comm_bcast(&t->su.world, &rc, 1, MPI_INT, 0, "checkpoint agreement");  /* under the deadline */
        dt_trace_end("checkpoint", "save", NULL, tt);
        return rc;
}

/* --resume with checkpoints/latest missing: the newest step directory that loads whole, in
 * *dir ("" when none; err then holds why the newest one did not). The run is never started
 * fresh over a previous run's outputs (main.c's contract for a fresh run needs --force). */
static int newest_intact(trainer *t, dt_graph *hg, dt_moments *hmo, dt_ckpt_extra *x, char *dir, size_t len,
                         char *err, size_t errlen)
{
        long steps[64];
        int n = dt_ckpt_steps(t->out, steps, 64);
        char e[DT_PATH_MAX + 256];
        dir[0] = 0;
        for (int i = 0; i < n; i++) {
                if (snprintf(dir, len, "%s/checkpoints/step-%08ld", t->out, steps[i]) >= (int)len) continue;
                int rc = hg ? dt_ckpt_load_x(dir, hg, hmo, &t->st, x, t->su.spec.hash, e, sizeof e)
                            : dt_ckpt_stream_load(t, dir, e, sizeof e);
                if (rc == 0) return 1;
                if (i == 0) snprintf(err, errlen, "; the newest, %s, is not intact: %s", dir, e);
        }
        dir[0] = 0;
        return 0;
}

/* Loads the checkpoint --resume names (auto: the run directory's latest, or its newest intact
 * step directory when latest is missing) into the model, moments and state. Nothing is written
 * here: a refusal (exit 4) leaves the run directory as it was. */
int dt_tr_resume(trainer *t, const char *how)
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
        dt_graph *hg = NULL;    /* host copies on a device backend (uploaded below), the graph itself on cpu */
        dt_moments *hmo = NULL, laid = { 0 };
        dt_whole w;
        dt_ckpt_extra cx = { 0 };       /* the compressor's state (ckpt_cx.c); a streamed load keeps none */
        /* a run in parts maps the files and each rank takes its parts (ckpt_stream.c): hg NULL */
        int stream = dt_ckpt_stream_on(t), part = stream ? 0 : read_target(t, &w, &hg, &hmo, &laid);
        if (found < 0) {
                char why[DT_PATH_MAX + 300] = "";
                if (!newest_intact(t, hg, hmo, &cx, dir, sizeof dir, why, sizeof why)) {
                        if (!stream) read_done(t, &w, part, 0, &laid);
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
        } else if ((stream ? dt_ckpt_stream_load(t, dir, err, sizeof err)
                           : dt_ckpt_load_x(dir, hg, hmo, &t->st, &cx, t->su.spec.hash, err, sizeof err)) < 0) {
                if (!stream) read_done(t, &w, part, 0, &laid);
                dt_error("%s", err);
                return DT_EXIT_CKPT;
        }
        if (!stream) read_done(t, &w, part, 1, &laid);
        dt_tr_cx_restore(t, &cx, dir);
        dt_ckpt_extra_free(&cx);
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
        if (t->su.rank == 0) dt_runlog_resume_warnings(&t->st, &t->su.spec.train, dt_tr_steps_per_epoch(t));
        return 0;
}

/* Fine-tuning: --weights or train.init_from into the model before the first step, by tensor name
 * (finetune.c). Every rank reads the file; rank 0 reports. With splits the whole model is read and
 * each rank keeps its part, so every tensor must be there (strict). */
int dt_tr_init_weights(trainer *t, const dt_run_opts *o)
{
        const dt_train_spec *tr = &t->su.spec.train;
        const char *path = o->weights ? o->weights : tr->init_from;
        if (!path || !path[0]) return 0;
        int strict = o->weights ? !o->non_strict : tr->init_strict;
        int verbose = t->su.rank != 0 ? 0 : t->quiet ? 1 : 2;
        int rc;
        if (dt_grid_parts(&t->su.grid)) {
                if (!strict) {
                        if (t->su.rank == 0)
                                dt_error("non-strict weights with pipeline stages or tensor splits: every tensor must "
                                         "come from the file; load strictly or train without the split");
                        return DT_EXIT_USAGE;
                }
                dt_whole w;
                dt_graph *hg;
                dt_moments *hmo, laid;
                read_target(t, &w, &hg, &hmo, &laid);
                rc = dt_finetune_load(path, hg, 1, verbose);
                rc = dt_comm_agree(&t->su.world, rc, "fine-tuning weights");
                read_done(t, &w, 1, !rc, &laid);
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

/* model.safetensors: the final weights, with a text model's vocabulary for `dtrain sample`. */
int dt_tr_save_final(trainer *t)
{
        char path[DT_PATH_MAX + 32], err[DT_PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/model.safetensors", t->out);
        char vocab[2 * 256 + 1];
        for (int i = 0; i < t->train.nvocab; i++)
                snprintf(vocab + 2 * i, 3, "%02x", t->train.vocab[i]);
        vocab[2 * t->train.nvocab] = 0;
        const dt_st_meta meta[] = { { "vocab", vocab } };
        if (dt_ckpt_stream_on(t)) {     /* from the parts' holders, piece by piece (ckpt_stream.c) */
                if (t->su.rank == 0) dt_progress_clear(&t->prog);
                if (!dt_ckpt_stream_final(t, path, meta, t->train.nvocab ? 1 : 0, err, sizeof err)) return 0;
                if (t->su.rank == 0) dt_error("%s", err);
                return t->su.rank == 0 ? DT_EXIT_DATA : 0;
        }
        dt_whole ws, *w = &ws;
        const dt_moments none = { 0 };  /* the final file holds no moments: shard 1 and 2 gather none */
        dt_shard_gather_all(&t->dp.sh);
        int have = whole_gather(t, w, t->dp.sh.stage ? &none : &t->mo);
        if (t->su.rank) {
                dt_shard_release(&t->dp.sh);
                return 0;
        }
        dt_progress_clear(&t->prog);
        const dt_graph *hg;
        dt_moments *hmo;
        dt_mirror_pull(&t->mirror, &t->su.g, &t->mo, &hg, &hmo);      /* host copies on a device backend */
        if (have) hg = &w->g;
        /* written while the checkpoint writer commits the last checkpoint: the two waits overlap */
        int rc = dt_model_save_meta(path, hg, meta, t->train.nvocab ? 1 : 0, err, sizeof err);
        if (have) dt_whole_free(w);
        dt_shard_release(&t->dp.sh);
        if (rc < 0) {
                dt_error("%s", err);
                return DT_EXIT_DATA;
        }
        return 0;
}

/* Every rank, at the end of a run that got this far: rank 0 waits for its writer to commit every
 * checkpoint asked for; its verdict (or rc, save_final's) is everyone's exit status. */
int dt_tr_finish_checkpoints(trainer *t, int rc, int final)
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
