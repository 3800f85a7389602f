/* train/ckpt_commit.c - checkpoint commits: DIR/checkpoints/step-NNNNNNNN/{model,optim}.safetensors + state.json,
 * built in a temporary directory, fsync'd, renamed into place, then named by 'latest'. A crash
 * at any point leaves the previous committed checkpoint loadable; loading checks every byte.
 *
 * One commit (dt_ckpt_commit), and why its order is enough:
 *   1. write model, optim, state.json into .tmp-step-N-PID/ and the new contents of latest (and
 *      best, when this one is the best) into .tmp-latest-PID (.tmp-best-PID) beside them, each
 *      file's writeback started when it is written (sync_file_range: the disk works on all of
 *      them while the next is encoded, as git's core.fsyncMethod=batch does);
 *   2. fsync every one of those files, then the temporary directory;
 *   3. rename the temporary directory to step-N;
 *   4. fsync checkpoints/;
 *   5. rename the best temporary over best, then the latest one over latest;
 *   6. fsync checkpoints/ once for both; then delete what the policy no longer keeps.
 * A process crash (kill -9, OOM, a signal) keeps every call made before it, in order: before 3
 * only a temporary exists (cleaned up by the next commit); after 3 step-N is complete, because
 * 2 ran first; after 5 latest and best name a complete directory; old directories go only in 6,
 * and each is first renamed to a temporary, so no step-NNNNNNNN is ever seen half deleted.
 * A power failure keeps what was fsync'd and, of the rest, any subset POSIX likes: the files
 * and their names in step-N are durable before step-N's own name can be (2 before 3), and
 * step-N's name is durable before a pointer naming it can be (4 before 5) - the two places where
 * a reordering would leave a pointer at a missing or partial directory. The two pointer renames
 * share one fsync: either order of the two reaching the disk names a complete checkpoint, and the
 * previous checkpoint is only deleted after that fsync, so a pointer that did not reach the disk
 * still names a directory that is there.
 * When another commit follows at once (the writer has one queued), 6 is left to it: its own step
 * 4 fsyncs the same directory after this commit's renames, so it makes this commit's pointers
 * durable as well, and the deletions this commit deferred run only after that (the lag,
 * dt_ckpt_lag; the writer flushes it itself when the next commit fails or is given up before its
 * step 4). Until then the pointers on disk name this checkpoint or the one before, and both are
 * still there. A commit may be given up (a newer checkpoint superseded it) at any step before 5:
 * its temporaries go, and a step-N already renamed stays, named by nothing, until a cleanup.
 * Against the old code this drops the fsync between the two pointers and, back to back, the
 * pointers' own; the others were one fsync per file written and waited for in turn, now started
 * together and waited for once (about one journal commit on ext4): about three waits per
 * checkpoint where there were ten.
 * dtrain's train loop commits through ckpt_writer.c, on a thread of its own. */
#include "train/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/ckpt_int.h"
#include "train/safetensors.h"
#include "util/fault.h"

static int cmp_long_desc(const void *a, const void *b)
{
        long x = *(const long *)a, y = *(const long *)b;
        return (x < y) - (x > y);
}

/* The step of a "step-NNNNNNNN" name, -1 for anything else. */
static long step_of(const char *name)
{
        if (strncmp(name, "step-", 5) || !name[5] || name[5 + strspn(name + 5, "0123456789")]) return -1;
        return strtol(name + 5, NULL, 10);
}

/* Deletes everything in checkpoints/ but the committed step directory, the keep - 1 newest before
 * it and the best one: older (or abandoned) steps, stale temporaries of crashed runs, the old copy
 * of a replaced step. Steps newer than the committed one (left by an earlier run the user chose
 * to overwrite) go too, but never those in protect (a commit whose pointers are not durable yet:
 * its step and its best). A step directory is renamed to a temporary before its files go, so a
 * crash in the middle never leaves a partial step-NNNNNNNN (the next cleanup takes the rest).
 * Best effort: a leftover costs disk, never correctness. */
static void cleanup(const char *ckroot, long committed, int keep, long best, const long protect[2])
{
        DIR *d = opendir(ckroot);
        if (!d) return;
        struct dirent *e;
        char p[DT_PATH_MAX], q[DT_PATH_MAX];
        long *steps = NULL;
        size_t n = 0, cap = 0;
        while ((e = readdir(d))) {
                long s = step_of(e->d_name);
                if (s < 0 || s > committed) continue;
                if (n == cap) steps = dt_realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
                steps[n++] = s;
        }
        qsort(steps, n, sizeof *steps, cmp_long_desc);
        long oldest_kept = n ? steps[DT_MIN(n, (size_t)(keep < 1 ? 1 : keep)) - 1] : committed;
        free(steps);
        /* the names first: the directory is not changed while it is read */
        char **gone = NULL;
        size_t ng = 0, capg = 0;
        rewinddir(d);
        while ((e = readdir(d))) {
                long s = step_of(e->d_name);
                int step = s >= 0 && (s > committed || s < oldest_kept) && s != best && s != protect[0] &&
                           s != protect[1];
                int tmp = !strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX));
                if (!step && !tmp) continue;
                if (ng == capg) gone = dt_realloc(gone, (capg = capg ? 2 * capg : 8) * sizeof *gone);
                gone[ng++] = dt_strdup(e->d_name);
        }
        closedir(d);
        for (size_t i = 0; i < ng; i++) {
                if (snprintf(p, sizeof p, "%s/%s", ckroot, gone[i]) < (int)sizeof p) {
                        if (step_of(gone[i]) >= 0 &&
                            snprintf(q, sizeof q, "%s/" TMP_PREFIX "gone-%s-%ld", ckroot, gone[i], (long)getpid()) <
                            (int)sizeof q && !rename(p, q))
                                dt_rm_rf(q);
                        else
                                dt_rm_rf(p);
                }
                free(gone[i]);
        }
        free(gone);
}



/* One file of the batch: written, its writeback started, still open for its fsync. */
typedef struct bfile {
        int fd;
        char path[DT_PATH_MAX];
} bfile;

/* writes data to path and starts its writeback; the descriptor goes into f */
static int write_start(bfile *f, const void *data, size_t len, char *err, size_t errlen)
{
        int fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                snprintf(err, errlen, "%s: cannot create: %s", f->path, strerror(errno));
                return -1;
        }
        if (dt_write_full(fd, data, len)) {
                snprintf(err, errlen, "%s: write failed: %s", f->path, strerror(errno));
                close(fd);
                return -1;
        }
        dt_st_writeback_start(fd);
        f->fd = fd;
        return 0;
}

/* a newer checkpoint has superseded this one (dt_ckpt_commit_opts.abandon) */
static int given_up(const dt_ckpt_commit_opts *o)
{
        return o && o->abandon && __atomic_load_n(o->abandon, __ATOMIC_ACQUIRE);
}

/* the batch's fsyncs: every file, whatever fails, so that none is left open; the first failure
 * is the message. 1 when given up between two fsyncs (the rest closed unsynced). */
static int sync_batch(bfile *f, int n, const dt_ckpt_commit_opts *o, char *err, size_t errlen)
{
        int rc = 0;
        for (int i = 0; i < n; i++) {
                if (f[i].fd < 0) continue;
                if (!rc && given_up(o)) rc = 1;
                int bad = rc == 1 ? 0 : fsync(f[i].fd);
                int e = errno;
                if (close(f[i].fd)) bad = 1, e = errno;
                f[i].fd = -1;
                if (bad && !rc) {
                        snprintf(err, errlen, "%s: write failed: %s", f[i].path, strerror(e));
                        rc = -1;
                }
        }
        return rc;
}

/* checkpoints/ itself: one mkdir when it is there (the common case), mkdir -p when not */
static int ensure_dir(const char *path, char *err, size_t errlen)
{
        struct stat sb;
        if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) return 0;
        return dt_ck_mkdir_p(path, err, errlen);
}

/* One commit's paths and open files, shared by its steps. */
enum { F_MODEL, F_OPTIM, F_STATE, F_LATEST, F_BEST, NF };
typedef struct commit {
        const dt_ckpt_data *d;
        const dt_ckpt_commit_opts *o;
        char ckroot[DT_PATH_MAX], name[64], tmp[DT_PATH_MAX], final[DT_PATH_MAX], line[80];
        /* the batch: model, optim, state.json, the temporaries of latest and (when this one is the
         * best) best */
        bfile f[NF];
        int best, made_tmp;
        char *js;
} commit;

/* the paths; -1 when one does not fit */
static int paths(commit *c, const char *outdir)
{
        const dt_train_state *st = &c->d->st;
        bfile *f = c->f;
        snprintf(c->name, sizeof c->name, "step-%08ld", st->step);
        snprintf(c->line, sizeof c->line, "%s\n", c->name);
        if (snprintf(c->ckroot, sizeof c->ckroot, "%s/checkpoints", outdir) >= (int)sizeof c->ckroot ||
            snprintf(c->tmp, sizeof c->tmp, "%s/" TMP_PREFIX "%s-%ld", c->ckroot, c->name, (long)getpid()) >= (int)sizeof c->tmp ||
            snprintf(c->final, sizeof c->final, "%s/%s", c->ckroot, c->name) >= (int)sizeof c->final ||
            dt_ck_join(f[F_MODEL].path, DT_PATH_MAX, c->tmp, CK_MODEL) || dt_ck_join(f[F_OPTIM].path, DT_PATH_MAX, c->tmp, CK_OPTIM) ||
            dt_ck_join(f[F_STATE].path, DT_PATH_MAX, c->tmp, CK_STATE) ||
            snprintf(f[F_LATEST].path, DT_PATH_MAX, "%s/" TMP_PREFIX "latest-%ld", c->ckroot, (long)getpid()) >= DT_PATH_MAX ||
            snprintf(f[F_BEST].path, DT_PATH_MAX, "%s/" TMP_PREFIX "best-%ld", c->ckroot, (long)getpid()) >= DT_PATH_MAX)
                return -1;
        return 0;
}

/* one safetensors file of d, from its tensors' data or streamed from d->fill */
static int put(const dt_ckpt_data *d, const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int *fd,
               uint32_t *crc, char *err, size_t errlen)
{
        if (d->fill) return dt_st_write_stream(path, t, nt, meta, 1, d->fill, d->fill_ud, fd, crc, err, errlen);
        return dt_st_write_start(path, t, nt, meta, 1, fd, crc, err, errlen);
}

/* 1. write everything, each file's writeback started as soon as it is written */
static int write_all_files(commit *c, char *err, size_t errlen)
{
        const dt_ckpt_data *d = c->d;
        const dt_train_state *st = &d->st;
        bfile *f = c->f;
        dt_rm_rf(c->tmp);    /* a crashed run of ours with the same pid */
        if (mkdir(c->tmp, 0755)) {
                snprintf(err, errlen, "cannot create directory '%s': %s", c->tmp, strerror(errno));
                return -1;
        }
        c->made_tmp = 1;
        const dt_st_meta meta[] = { {"format", "pt"} };
        uint32_t mcrc, ocrc;
        if (put(d, f[F_MODEL].path, d->mt, d->nm, meta, &f[F_MODEL].fd, &mcrc, err, errlen)) return -1;
        if (dt_fault_io(st->step, f[F_MODEL].path, err, errlen)) return -1;
        dt_fault_at(DT_FAULT_CKPT_KILL, st->step);
        if (put(d, f[F_OPTIM].path, d->ot, d->no, meta, &f[F_OPTIM].fd, &ocrc, err, errlen)) return -1;
        c->js = dt_ck_state_json(st, d->nmoments, mcrc, ocrc);
        if (!c->js) {
                snprintf(err, errlen, "%s: cannot encode the training state", f[F_STATE].path);
                return -1;
        }
        if (write_start(&f[F_STATE], c->js, strlen(c->js), err, errlen)) return -1;
        if (write_start(&f[F_LATEST], c->line, strlen(c->line), err, errlen)) return -1;
        if (c->best && write_start(&f[F_BEST], c->line, strlen(c->line), err, errlen)) return -1;
        for (int i = 0; c->o && i < c->o->nlogs; i++) dt_st_writeback_start(c->o->logs[i]);
        return 0;
}

/* 2. wait for all of it: the first fsync finds the others' writeback under way; the directory's
 * fsync makes its three names durable with their contents. A newer checkpoint may supersede this
 * one at any step until the pointers move (given_up). 0, 1 given up, -1 failed. */
static int sync_all(commit *c, char *err, size_t errlen)
{
        int r = given_up(c->o) ? 1 : sync_batch(c->f, NF, c->o, err, errlen);
        if (r) return r;
        for (int i = 0; c->o && i < c->o->nlogs; i++) fsync(c->o->logs[i]);   /* logs: best effort (dtrain(1)) */
        if (dt_ck_fsync_dir(c->tmp)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", c->tmp, strerror(errno));
                return -1;
        }
        return given_up(c->o) ? 1 : 0;
}

/* 3. the step directory into place. Same step saved again (a rerun into the same directory): swap
 * the directories atomically so 'latest' never names a missing one; the old copy (now at tmp)
 * goes in the cleanup. 4. the step directory's name is durable before any pointer can name it. */
static int place(commit *c, char *err, size_t errlen)
{
        struct stat sb;
        if (!lstat(c->final, &sb)) {
                if (renameat2(AT_FDCWD, c->tmp, AT_FDCWD, c->final, RENAME_EXCHANGE)) {
                        /* file system without exchange: move the old one aside first */
                        char old[DT_PATH_MAX], oname[96];
                        snprintf(oname, sizeof oname, TMP_PREFIX "old-%s-%ld", c->name, (long)getpid());
                        if (dt_ck_join(old, sizeof old, c->ckroot, oname)) {
                                snprintf(err, errlen, "%s: path too long", c->ckroot);
                                return -1;
                        }
                        dt_rm_rf(old);
                        if (rename(c->final, old) || rename(c->tmp, c->final)) {
                                snprintf(err, errlen, "%s: cannot replace: %s", c->final, strerror(errno));
                                return -1;
                        }
                }
        } else if (rename(c->tmp, c->final)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", c->final, strerror(errno));
                return -1;
        }
        c->made_tmp = 0;
        if (dt_ck_fsync_dir(c->ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", c->ckroot, strerror(errno));
                return -1;
        }
        return 0;
}

/* 5. the pointers, best first: a crash between the two leaves best on the new step and latest on
 * the previous one, both whole; one fsync of the directory for both */
static int pointers(commit *c, char *err, size_t errlen)
{
        char p[DT_PATH_MAX];
        const char *names[2] = { "best", "latest" };
        const int files[2] = { F_BEST, F_LATEST };
        for (int k = c->best ? 0 : 1; k < 2; k++) {
                if (dt_ck_join(p, sizeof p, c->ckroot, names[k])) {
                        snprintf(err, errlen, "%s: path too long", c->ckroot);
                        return -1;
                }
                if (rename(c->f[files[k]].path, p)) {
                        snprintf(err, errlen, "%s: cannot rename into place: %s", p, strerror(errno));
                        return -1;
                }
        }
        return 0;
}

int dt_ckpt_commit(const char *outdir, const dt_ckpt_data *d, const dt_ckpt_policy *pol,
                   const dt_ckpt_commit_opts *o, char *err, size_t errlen)
{
        const dt_train_state *st = &d->st;
        commit c = { .d = d, .o = o, .best = st->best_step == st->step && st->best_metric[0] };
        int rc = -1, keep = pol ? pol->keep : 1;
        for (int i = 0; i < NF; i++) c.f[i].fd = -1;
        if (paths(&c, outdir)) {
                snprintf(err, errlen, "%s: path too long", outdir);
                return -1;
        }
        if (ensure_dir(c.ckroot, err, errlen)) return -1;
        if (write_all_files(&c, err, errlen)) goto out;
        if ((rc = sync_all(&c, err, errlen))) goto out;
        rc = -1;
        if (place(&c, err, errlen)) goto out;
        const long none[2] = { -1, -1 }, mine[2] = { st->step, st->best_metric[0] ? st->best_step : -1 };
        /* that fsync made an open lag's pointers durable too: its cleanup may run, once this
         * commit's own pointer temporaries are renamed (cleanup takes every temporary) */
        dt_ckpt_lag *lag = o ? o->lag : NULL;
        if (given_up(o)) {      /* step-N stays, named by nothing: the next commit's cleanup takes it */
                if (lag && lag->open) {
                        unlink(c.f[F_LATEST].path);
                        unlink(c.f[F_BEST].path);
                        cleanup(c.ckroot, lag->step, keep, lag->best, mine);
                        lag->open = 0;
                }
                rc = 1;
                goto out;
        }
        if (pointers(&c, err, errlen)) goto out;
        if (lag && lag->open) {
                cleanup(c.ckroot, lag->step, keep, lag->best, mine);
                lag->open = 0;
        }
        /* 6. the pointers durable, then the old checkpoints go; or, when another commit follows at
         * once, both left to its step 4 */
        if (lag && o->more && __atomic_load_n(o->more, __ATOMIC_ACQUIRE)) {
                *lag = (dt_ckpt_lag){ .open = 1, .step = st->step, .best = mine[1] };
                rc = 0;
                goto out;
        }
        if (dt_ck_fsync_dir(c.ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", c.ckroot, strerror(errno));
                goto out;
        }
        cleanup(c.ckroot, st->step, keep, mine[1], none);
        rc = 0;
out:
        for (int i = 0; i < NF; i++)
                if (c.f[i].fd >= 0) close(c.f[i].fd);
        if (rc) {
                unlink(c.f[F_LATEST].path);
                unlink(c.f[F_BEST].path);
        }
        if (c.made_tmp) dt_rm_rf(c.tmp);
        free(c.js);
        return rc;
}

int dt_ckpt_flush(const char *outdir, const dt_ckpt_policy *pol, dt_ckpt_lag *lag, char *err, size_t errlen)
{
        if (!lag || !lag->open) return 0;
        char ckroot[DT_PATH_MAX];
        if (snprintf(ckroot, sizeof ckroot, "%s/checkpoints", outdir) >= (int)sizeof ckroot) {
                snprintf(err, errlen, "%s: path too long", outdir);
                return -1;
        }
        if (dt_ck_fsync_dir(ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", ckroot, strerror(errno));
                return -1;
        }
        const long none[2] = { -1, -1 };
        cleanup(ckroot, lag->step, pol ? pol->keep : 1, lag->best, none);
        lag->open = 0;
        return 0;
}

