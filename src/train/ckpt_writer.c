/* train/ckpt_writer.c - the background checkpoint writer (see ckpt_writer.h): two snapshot slots,
 * one thread. A slot is FREE, FILLING (the training thread copies into it, unlocked), PENDING
 * (queued, oldest first) or WRITING (the thread commits it, unlocked). A submit takes a FREE slot,
 * else replaces the oldest PENDING one that dt_ckpt_droppable allows, else waits for a slot to
 * come free (the checkpoint being written always completes, DT_CKPT_GIVE_UP_MAX): so at most two
 * snapshots exist, none that the policy keeps is ever dropped, and the disk always holds the
 * oldest checkpoint a synchronous writer would have left by then or a newer one.
 * Commits run in step order, each one whole (ckpt.c), so the disk always holds the state of some
 * requested step; after a failure nothing more is written (latest stays the last good one). */
#include "train/ckpt_writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"
#include "util/fault.h"

enum { FREE, FILLING, PENDING, WRITING, UNUSED };       /* UNUSED: a slot the writer may not take */

/* Commits given up in a row at most. 0: the checkpoint being written always completes. Giving it
 * up (up to two in a row) saved waits on a slow disk, but under load it let a run be killed with
 * no checkpoint on disk at all where writing synchronously would have left one (CI, 2 busy cores:
 * steps 10, 20 and 30 given up, killed at 32); a run waits for the disk instead. */
#define DT_CKPT_GIVE_UP_MAX 0

typedef struct slot {
        int state;
        long seq;               /* submission order */
        float *buf;             /* params | buffers | m | v */
        size_t cap;             /* floats in buf */
        dt_ckpt_data d;         /* tensors pointing into buf */
        dt_st_tensor *xt;       /* the extras' names and shapes (their data at buf's end) */
} slot;

struct dt_ckpt_writer {
        char out[DT_PATH_MAX];
        dt_ckpt_policy pol;
        int sync;
        pthread_t th;
        int started;
        pthread_mutex_t mu;
        pthread_cond_t work;    /* the thread waits for a PENDING slot or the stop */
        pthread_cond_t done;    /* submitters and drainers wait for a slot to go FREE */
        slot s[2];
        long seq;
        int stop;
        int failed, reported;
        char err[DT_PATH_MAX + 256];
        int logs[4];
        int nlogs;
        int abandon;            /* set (atomically) when the checkpoint being written is superseded */
        int more;               /* (atomically) a checkpoint is queued behind the one being written */
        int gave_up;            /* commits given up in a row: at most DT_CKPT_GIVE_UP_MAX, so that
                                 * whatever the pattern of requests some commit completes */
        dt_ckpt_lag lag;        /* the writer's: a commit that left its last fsync to the next one */
        long written, coalesced;
};

int dt_ckpt_droppable(long pending, long next, long next_best, int newer, int keep)
{
        if (pending == next) return 1;          /* the same step again: the newer state wins */
        if (pending == next_best) return 0;     /* the current best is never lost */
        return newer >= (keep < 1 ? 1 : keep) - 1;
}

int dt_ckpt_sync_env(void)
{
        const char *e = getenv("DTRAIN_CKPT_SYNC");
        if (!e || !*e || !strcmp(e, "0")) return 0;
        return strcmp(e, "1") ? -1 : 1;
}

size_t dt_ckpt_snapshot_bytes(size_t nparams, size_t nbuffers, int nmoments)
{
        size_t n, b;
        if (!dt_mul_ok(nparams, (size_t)(1 + (nmoments > 0 ? nmoments : 0)), &n) || !dt_add_ok(n, nbuffers, &n) ||
            !dt_mul_ok(n, 2 * sizeof(float), &b))
                return SIZE_MAX;
        return b;
}

/* ---- the thread ---- */

static void commit(dt_ckpt_writer *w, slot *s)
{
        char err[sizeof w->err];
        dt_fault_ckpt_slow(s->d.st.step);
        dt_ckpt_commit_opts o = { .logs = w->logs, .nlogs = w->nlogs, .abandon = &w->abandon, .more = &w->more,
                                  .lag = &w->lag };
        int rc = dt_ckpt_commit(w->out, &s->d, &w->pol, &o, err, sizeof err);
        pthread_mutex_lock(&w->mu);
        if (rc < 0 && !w->failed) {
                w->failed = 1;
                snprintf(w->err, sizeof w->err, "%s", err);
        }
        if (!rc) w->written++;
        if (rc == 1) w->coalesced++;
        w->gave_up = rc == 1 ? w->gave_up + 1 : 0;
        pthread_mutex_unlock(&w->mu);
}

/* the oldest PENDING slot, or NULL */
static slot *oldest_pending(dt_ckpt_writer *w)
{
        slot *o = NULL;
        for (int i = 0; i < 2; i++)
                if (w->s[i].state == PENDING && (!o || w->s[i].seq < o->seq)) o = &w->s[i];
        return o;
}

static void *run(void *arg)
{
        dt_ckpt_writer *w = arg;
        pthread_mutex_lock(&w->mu);
        for (;;) {
                slot *s;
                while (!(s = oldest_pending(w)) && !w->stop)
                        pthread_cond_wait(&w->work, &w->mu);
                if (!s) break;          /* stopped with nothing left */
                s->state = WRITING;
                __atomic_store_n(&w->abandon, 0, __ATOMIC_RELEASE);
                __atomic_store_n(&w->more, oldest_pending(w) != NULL, __ATOMIC_RELEASE);
                int skip = w->failed;   /* after a failure the last good checkpoint stays the latest */
                pthread_mutex_unlock(&w->mu);
                if (!skip) commit(w, s);
                pthread_mutex_lock(&w->mu);
                if (w->lag.open && !oldest_pending(w)) {
                        /* nothing follows after all (or this one failed or was given up before
                         * its directory fsync): the last fsync is this thread's own */
                        char err[sizeof w->err];
                        pthread_mutex_unlock(&w->mu);
                        int rc = dt_ckpt_flush(w->out, &w->pol, &w->lag, err, sizeof err);
                        pthread_mutex_lock(&w->mu);
                        if (rc && !w->failed) {
                                w->failed = 1;
                                snprintf(w->err, sizeof w->err, "%s", err);
                        }
                }
                dt_ckpt_data_free(&s->d);
                s->state = FREE;
                pthread_cond_broadcast(&w->done);
        }
        pthread_mutex_unlock(&w->mu);
        return NULL;
}

dt_ckpt_writer *dt_ckpt_writer_new(const char *outdir, const dt_ckpt_policy *pol, int sync)
{
        dt_ckpt_writer *w = dt_calloc(1, sizeof *w);
        snprintf(w->out, sizeof w->out, "%s", outdir);
        w->pol = pol ? *pol : (dt_ckpt_policy){ .keep = 1 };
        w->sync = sync;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->work, NULL);
        pthread_cond_init(&w->done, NULL);
        if (sync) return w;
        /* the stop signals are the training thread's business: the writer's calls are not
         * interrupted, and the handler always runs where the loop reads its flag */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int e = pthread_create(&w->th, NULL, run, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e) {        /* no thread: commit on the caller's, as with DTRAIN_CKPT_SYNC=1 */
                dt_note("checkpoints are written synchronously: cannot start their thread: %s", strerror(e));
                w->sync = 1;
        } else {
                w->started = 1;
        }
        return w;
}

void dt_ckpt_writer_set_snapshots(dt_ckpt_writer *w, int n)
{
        pthread_mutex_lock(&w->mu);
        if (w->s[1].state == FREE || w->s[1].state == UNUSED) w->s[1].state = n < 2 ? UNUSED : FREE;
        pthread_mutex_unlock(&w->mu);
}

void dt_ckpt_writer_add_log(dt_ckpt_writer *w, int fd)
{
        if (fd >= 0 && w->nlogs < (int)(sizeof w->logs / sizeof *w->logs)) w->logs[w->nlogs++] = fd;
}

/* the failure for the caller, once; -1 */
static int take_error(dt_ckpt_writer *w, char *err, size_t errlen)
{
        snprintf(err, errlen, "%s", w->reported ? "" : w->err);
        w->reported = 1;
        return -1;
}

/* ---- submit ---- */

/* Under the lock: a slot for a checkpoint 'st', marked FILLING; waits while none can be had. */
static slot *take_slot(dt_ckpt_writer *w, const dt_train_state *st)
{
        for (;;) {
                for (int i = 0; i < 2; i++)
                        if (w->s[i].state == FREE) {
                                w->s[i].state = FILLING;
                                return &w->s[i];
                        }
                /* the queued ones, oldest first; 'newer': queued checkpoints between it and the new
                 * one (commits run in order, so the one being written is older than both) */
                slot *a = &w->s[0], *b = &w->s[1];
                if (b->state == PENDING && (a->state != PENDING || b->seq < a->seq)) a = &w->s[1], b = &w->s[0];
                long best = st->best_metric[0] ? st->best_step : -1;
                for (int k = 0; k < 2; k++) {
                        slot *p = k ? b : a;
                        if (p->state != PENDING) continue;
                        int newer = !k && b->state == PENDING;
                        if (dt_ckpt_droppable(p->d.st.step, st->step, best, newer, w->pol.keep)) {
                                dt_ckpt_data_free(&p->d);
                                p->state = FILLING;
                                w->coalesced++;
                                return p;
                        }
                }
                /* none: the one being written goes too when the new one's commit would delete it
                 * (the writer gives it up at its next step and frees the slot) */
                for (int i = 0; i < 2; i++) {
                        slot *q = &w->s[i];
                        int newer = w->s[1 - i].state == PENDING;
                        if (q->state == WRITING && w->gave_up < DT_CKPT_GIVE_UP_MAX &&
                            dt_ckpt_droppable(q->d.st.step, st->step, best, newer, w->pol.keep))
                                __atomic_store_n(&w->abandon, 1, __ATOMIC_RELEASE);
                }
                pthread_cond_wait(&w->done, &w->mu);
                if (w->failed) return NULL;
        }
}

int dt_ckpt_writer_submit(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_train_state *st,
                          char *err, size_t errlen)
{
        return dt_ckpt_writer_submit_x(w, g, mo, NULL, st, err, errlen);
}

/* Collects and commits on the calling thread (the synchronous writer, and a streamed checkpoint
 * whose pieces come from fill as the file is written). */
static int commit_now(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_ckpt_extra *x,
                      const dt_train_state *st, dt_st_fill fill, void *ud, char *err, size_t errlen)
{
        dt_ckpt_data d;
        if (dt_ckpt_collect(g, mo, x, st, &d, err, errlen)) return -1;
        d.fill = fill;
        d.fill_ud = ud;
        dt_fault_ckpt_slow(st->step);
        dt_ckpt_commit_opts o = { .logs = w->logs, .nlogs = w->nlogs };
        int rc = dt_ckpt_commit(w->out, &d, &w->pol, &o, w->err, sizeof w->err);
        dt_ckpt_data_free(&d);
        if (rc) {
                w->failed = 1;
                return take_error(w, err, errlen);
        }
        w->written++;
        return 0;
}

int dt_ckpt_writer_submit_x(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_ckpt_extra *x,
                            const dt_train_state *st, char *err, size_t errlen)
{
        static const dt_moments none = {0};
        if (!mo) mo = &none;
        if (w->sync) {
                if (w->failed) return take_error(w, err, errlen);
                return commit_now(w, g, mo, x, st, NULL, NULL, err, errlen);
        }
        size_t np = g->nparams, nb = g->nbuffers, need = np * (size_t)(1 + mo->n) + nb, nx = 0;
        for (int i = 0; x && i < x->n; i++) nx += x->t[i].n;
        need += nx;
        pthread_mutex_lock(&w->mu);
        slot *s = w->failed ? NULL : take_slot(w, st);
        if (!s) {
                int rc = take_error(w, err, errlen);
                pthread_mutex_unlock(&w->mu);
                return rc;
        }
        pthread_mutex_unlock(&w->mu);

        /* the copy, unlocked: the thread never touches a FILLING slot */
        if (s->cap < need) {
                free(s->buf);
                s->buf = dt_falloc(need);
                s->cap = need;
        }
        float *p = s->buf;
        dt_graph view = *g;     /* the same tensors, their data in the snapshot */
        dt_moments mv = { .n = mo->n };
        view.params = p;
        if (np) memcpy(p, g->params, np * sizeof *p);
        view.buffers = p + np;
        if (nb) memcpy(view.buffers, g->buffers, nb * sizeof *p);
        if (mo->n >= 1) {
                mv.m = p + np + nb;
                memcpy(mv.m, mo->m, np * sizeof *p);
        }
        if (mo->n >= 2) {
                mv.v = p + 2 * np + nb;
                memcpy(mv.v, mo->v, np * sizeof *p);
        }
        dt_ckpt_extra xv = { 0 };     /* the extras' names and shapes, their data in the snapshot */
        if (x && x->n) {
                float *q = p + need - nx;
                s->xt = dt_realloc(s->xt, (size_t)x->n * sizeof *s->xt);
                xv = (dt_ckpt_extra){ .n = x->n, .t = s->xt };
                for (int i = 0; i < x->n; i++) {
                        s->xt[i] = x->t[i];
                        s->xt[i].data = q;
                        memcpy(q, x->t[i].data, x->t[i].n * sizeof *q);
                        q += x->t[i].n;
                }
        }
        int rc = dt_ckpt_collect(&view, &mv, &xv, st, &s->d, err, errlen);

        pthread_mutex_lock(&w->mu);
        if (rc) {
                s->state = FREE;
        } else {
                s->state = PENDING;
                s->seq = ++w->seq;
                __atomic_store_n(&w->more, 1, __ATOMIC_RELEASE);
                pthread_cond_signal(&w->work);
        }
        pthread_mutex_unlock(&w->mu);
        return rc;
}

int dt_ckpt_writer_stream(dt_ckpt_writer *w, const dt_graph *g, const dt_moments *mo, const dt_train_state *st,
                          dt_st_fill fill, void *ud, char *err, size_t errlen)
{
        if (dt_ckpt_writer_drain(w, err, errlen) < 0) return -1;        /* in order, after the queued */
        return commit_now(w, g, mo, NULL, st, fill, ud, err, errlen);
}

/* ---- drain and the end ---- */

/* queued or being written (a FILLING slot is the submitting thread's: a fatal error in the middle
 * of a copy must not wait for it) */
static int busy(const dt_ckpt_writer *w)
{
        for (int i = 0; i < 2; i++)
                if (w->s[i].state == PENDING || w->s[i].state == WRITING) return 1;
        return 0;
}

int dt_ckpt_writer_drain(dt_ckpt_writer *w, char *err, size_t errlen)
{
        if (!w) return 0;
        pthread_mutex_lock(&w->mu);
        while (busy(w))
                pthread_cond_wait(&w->done, &w->mu);
        int rc = 0;
        if (w->failed) rc = take_error(w, err, errlen);
        pthread_mutex_unlock(&w->mu);
        return rc;
}

void dt_ckpt_writer_drain_on_fatal(void *arg)
{
        dt_ckpt_writer *w = arg;
        if (!w || (w->started && pthread_equal(pthread_self(), w->th))) return;
        char err[sizeof w->err];
        if (dt_ckpt_writer_drain(w, err, sizeof err) && err[0]) dt_error("checkpoint: %s", err);
}

void dt_ckpt_writer_counts(dt_ckpt_writer *w, long *written, long *coalesced)
{
        pthread_mutex_lock(&w->mu);
        *written = w->written;
        *coalesced = w->coalesced;
        pthread_mutex_unlock(&w->mu);
}

void dt_ckpt_writer_free(dt_ckpt_writer *w)
{
        if (!w) return;
        char err[sizeof w->err];
        dt_ckpt_writer_drain(w, err, sizeof err);
        if (w->started) {
                pthread_mutex_lock(&w->mu);
                w->stop = 1;
                pthread_cond_signal(&w->work);
                pthread_mutex_unlock(&w->mu);
                pthread_join(w->th, NULL);
        }
        for (int i = 0; i < 2; i++) {
                dt_ckpt_data_free(&w->s[i].d);
                free(w->s[i].buf);
                free(w->s[i].xt);
        }
        pthread_cond_destroy(&w->work);
        pthread_cond_destroy(&w->done);
        pthread_mutex_destroy(&w->mu);
        free(w);
}
