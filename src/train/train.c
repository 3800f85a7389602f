/* train/train.c - `dtrain run`: one global shuffle per epoch, the epoch's steps (step.c), the
 * ranks agreeing on a stop signal, the metrics and checkpoint after each epoch, and a stop that
 * commits its checkpoint before the evaluation. */
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

/* The optimizer steps the whole run takes (the --max-steps limit or every epoch's). */
static long run_steps(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        long all = t->st.step + (t->train.n - t->st.samples_in_epoch + tr->batch - 1) / tr->batch +
                   (long)(tr->epochs - t->st.epoch - 1) * dt_tr_steps_per_epoch(t);
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
        dt_tr_settle(t);        /* the line's gradient norm: the stages' sum, completed */
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
                dt_tr_train_step(t, t->perm + start, B);
                t->cur_batch = NULL;
                dt_loader_release(t->loader);
                if (t->nstep_s == t->capstep_s) {
                        t->capstep_s = t->capstep_s ? 2 * t->capstep_s : 1024;
                        t->step_s = realloc(t->step_s, (size_t)t->capstep_s * sizeof *t->step_s);
                        if (!t->step_s) dt_die(DT_EXIT_RUNTIME, "out of memory");
                }
                t->step_s[t->nstep_s++] = dt_now() - ts0;
                if (t->su.rank == 0) dt_restart_write(&t->restart, t->metrics.f, t->st.step, dt_restart_clock());
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
                                .loss = dt_grid_pipelined(&t->su.grid) ? NAN
                                                                       : t->ep[0] * dt_grid_replicas(&t->su.grid) / ((double)*seen * t->su.rows),
                                .sps = *seen / (now - te0), .elapsed = now - t->t0, .epoch_elapsed = now - te0,
                        };
                        if (!t->quiet) dt_progress_step(&t->prog, &pi, now);
                }
                if (sig) { r = sig; break; }
                if (tr->max_steps > 0 && t->st.step >= tr->max_steps) { r = -1; break; }
                if (tr->checkpoint_every > 0 && t->st.step % tr->checkpoint_every == 0 && !last) {
                        /* a checkpoint is taken with nothing pending: its own collectives come after */
                        if ((r = agree_finish(t, &ag))) break;
                        if (dt_tr_save_ckpt(t) < 0) {
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
static void announce_stop(trainer *t, int sig, const char *during)
{
        if (t->su.rank != 0) return;
        if (!t->quiet) dt_progress_clear(&t->prog);
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
                step_ms = 1e3 * dt_median(t->step_s + skip, (int)(t->nstep_s - skip));
        }
        t->nstep_s = 0;
        if (t->su.size > 1)     /* the slowest rank's: ranks of a pipeline finish their steps at different times */
                dt_comm_allreduce_op(&t->su.world, &step_ms, 1, MPI_DOUBLE, MPI_MAX, "step time");
        dt_tr_sync_replicas(t);
        dt_comm_allreduce(&t->su.world, t->ep, 2, MPI_DOUBLE, "epoch statistics");
        dt_tr_mem_gather(t);    /* the epoch lines carry every rank's memory */
        double comm_ms = dt_grid_replicas(&t->su.grid) > 1 && t->nsteps_epoch ? 1e3 * (t->dp.t_comm_wait - t->comm0) / (double)t->nsteps_epoch : NAN;
        double rows = (double)seen * t->su.rows;
        double trl = seen ? t->ep[0] / rows : NAN, tra = seen ? t->ep[1] / rows : NAN;
        int cut = 0;
        if (t->have_test && *stopped <= 0) {
                if (t->su.rank == 0 && !t->quiet) dt_progress_eval(&t->prog, ep_shown(t), tr->epochs, t->test.n);
                if ((cut = dt_tr_evaluate(t, &t->test, &tl, &ta, 1))) {
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
                return dt_tr_save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
        }
        if (isfinite(tl) && tl < t->st.best_test_loss) t->st.best_test_loss = tl;
        int partial = t->st.samples_in_epoch != 0;
        /* only a whole epoch's figures compete for the best checkpoint */
        int best = partial ? 0 : dt_runlog_best(&t->st, tr->best_metric, t->have_test, tl, ta, trl);
        epoch_lines(t, trl, tra, tl, ta, sps, step_ms, comm_ms, 1, 1, best);
        return dt_tr_save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
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
                int cut = dt_tr_evaluate(t, &t->test, &tl, &ta, 2);
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
                                int rc = dt_tr_save_ckpt(t) < 0 ? DT_EXIT_DATA : 0;
                                if ((rc = dt_tr_finish_checkpoints(t, rc, 0))) return rc;
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

int dt_cmd_run(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1 };
        dt_run_opts ro = *o;    /* the same, with the recorded overrides in front of --set's */
        memset(&ro.sets, 0, sizeof ro.sets);
        int rc = dt_tr_run_sets(o, &ro.sets);
        o = &ro;
        t.quiet = o->quiet;
        t.opts = o;
        if (!rc) rc = dt_agree_rc(dt_tr_load_model(&t, o));     /* every rank parsed the same spec: one message */
        if (!rc) rc = dt_tr_prepare(&t, o);
        if (rc) goto done;
        if (t.nothing) goto done;
        if (t.su.rank == 0 && !o->quiet) dt_tr_banner(&t);
        dt_stop_install();

        t.t0 = dt_now() - t.st.elapsed;        /* metrics time goes on over a resume */
        if (t.su.rank == 0) dt_progress_init(&t.prog, dt_progress_mode_for(stdout, o->quiet), stdout, o->progress_s,
                                             o->progress_steps, dt_now(), t.st.step);
        t.win_t = dt_now();
        int stopped = 0;
        stop_tail tail = { 0 };
        if ((rc = run_epochs(&t, &stopped, &tail))) goto done;
        if (dt_grid_pipelined(&t.su.grid) && !o->quiet) dt_pipe_report(&t.pipe, t.su.rank == 0 ? stdout : NULL);
        if ((rc = dt_tr_finish_checkpoints(&t, dt_tr_save_final(&t), 1))) goto done;
        dt_tr_mem_report(&t, o->quiet ? NULL : stdout);
        if (stopped > 0) rc = after_stop(&t, &tail);
done:
        if (t.ckw) {    /* an error path: what was asked is still committed (or its failure told) */
                char err[DT_PATH_MAX + 256];
                if (dt_ckpt_writer_drain(t.ckw, err, sizeof err) < 0) {
                        if (err[0]) dt_error("checkpoint: %s", err);
                        if (!rc) rc = DT_EXIT_DATA;
                }
        }
        dt_tr_free_trainer(&t);
        dt_sets_free(&ro.sets);
        return rc;
}
