/* train/ckpt.c - checkpoints: DIR/checkpoints/step-NNNNNNNN/{model,optim}.safetensors + state.json,
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

#include "train/safetensors.h"
#include "util/fault.h"

#define CK_MODEL "model.safetensors"
#define CK_OPTIM "optim.safetensors"
#define CK_STATE "state.json"
/* 2^40 steps or samples: beyond any run, and epochs x steps per epoch stays inside a long */
#define DT_CKPT_MAX_COUNT (1L << 40)
#define TMP_PREFIX ".tmp-"

/* ---- file system helpers ---- */

/* out = dir/name; -1 when it does not fit */
static int join(char *out, size_t len, const char *dir, const char *name)
{
        int k = snprintf(out, len, "%s/%s", dir, name);
        return k < 0 || (size_t)k >= len ? -1 : 0;
}

static int fsync_dir(const char *dir)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) return -1;
        int rc = fsync(fd);
        close(fd);
        return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb; (void)flag; (void)ftw;
        return remove(path);
}

/* rm -rf, without following links */
static int rm_rf(const char *path)
{
        return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdir_p(const char *path, char *err, size_t errlen)
{
        char failed[DT_PATH_MAX];
        if (strlen(path) >= DT_PATH_MAX) {
                snprintf(err, errlen, "%s: path too long", path);
                return -1;
        }
        if (dt_mkdir_p(path, 0755, failed, sizeof failed)) {
                snprintf(err, errlen, "cannot create directory '%s': %s", failed, strerror(errno));
                return -1;
        }
        struct stat st;
        if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "'%s' is not a directory", path);
                return -1;
        }
        return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
        const char *b = p;
        while (n) {
                ssize_t k = write(fd, b, n);
                if (k < 0) {
                        if (errno == EINTR) continue;
                        return -1;
                }
                b += k;
                n -= (size_t)k;
        }
        return 0;
}

/* writes and fsyncs path (not atomically) */
static int write_sync(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
                return -1;
        }
        if (write_all(fd, data, len) || fsync(fd)) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                close(fd);
                return -1;
        }
        if (close(fd)) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                return -1;
        }
        return 0;
}

/* dir and base of path ("." when it has no slash) */
static void split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
        const char *s = strrchr(path, '/');
        if (!s) {
                snprintf(dir, dirlen, ".");
                *base = path;
        } else {
                snprintf(dir, dirlen, "%.*s", s == path ? 1 : (int)(s - path), path);
                *base = s + 1;
        }
}

int dt_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
        char dir[DT_PATH_MAX], tmp[DT_PATH_MAX];
        const char *base;
        split_path(path, dir, sizeof dir, &base);
        if (snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld", dir, base, (long)getpid()) >= (int)sizeof tmp) {
                snprintf(err, errlen, "%s: path too long", path);
                return -1;
        }
        if (write_sync(tmp, data, len, err, errlen)) {
                unlink(tmp);
                return -1;
        }
        if (rename(tmp, path)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
                unlink(tmp);
                return -1;
        }
        if (fsync_dir(dir)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", dir, strerror(errno));
                return -1;
        }
        return 0;
}

static int file_crc(const char *path, uint32_t *out)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        static unsigned char buf[1 << 16];
        uLong crc = crc32(0L, Z_NULL, 0);
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) != 0) {
                if (k < 0) {
                        if (errno == EINTR) continue;
                        close(fd);
                        return -1;
                }
                crc = crc32(crc, buf, (uInt)k);
        }
        close(fd);
        *out = (uint32_t)crc;
        return 0;
}

/* ---- the tensors of a graph, by PyTorch name ---- */

enum { SET_MODEL, SET_OPTIM };
static const char *const moment_suffix[2] = {"exp_avg", "exp_avg_sq"};

/* Every tensor of one file: params and buffers (SET_MODEL), or each trainable param's moments
 * (SET_OPTIM), pointing at their place in the flat buffers. */
static int collect(const dt_graph *g, const dt_moments *mo, int set, dt_st_tensor **out, int *nout,
                   char *err, size_t errlen)
{
        int cap = 16, n = 0;
        dt_st_tensor *t = dt_malloc((size_t)cap * sizeof *t);
        for (int li = 0; li < g->n; li++) {
                const dt_layer *l = &g->layers[li];
                for (int i = 0; i < l->np; i++) {
                        const dt_param_spec *ps = &l->ps[i];
                        size_t want = 1;
                        for (int d = 0; d < ps->shape.n; d++)
                                if (ps->shape.d[d] < 0 || !dt_mul_ok(want, (size_t)ps->shape.d[d], &want))
                                        want = SIZE_MAX;
                        if (want != l->len[i]) {
                                snprintf(err, errlen, "tensor '%s.%s' holds %zu of its %zu values (sharded "
                                         "parameters cannot be checkpointed yet)", l->name, ps->suffix,
                                         l->len[i], want);
                                free(t);
                                return -1;
                        }
                        int nm = set == SET_MODEL ? 1 : ps->trainable ? mo->n : 0;
                        for (int k = 0; k < nm; k++) {
                                if (n == cap) t = dt_realloc(t, (size_t)(cap *= 2) * sizeof *t);
                                dt_st_tensor *x = &t[n++];
                                int w;
                                if (set == SET_MODEL)
                                        w = snprintf(x->name, sizeof x->name, "%s.%s", l->name, ps->suffix);
                                else
                                        w = snprintf(x->name, sizeof x->name, "%s.%s.%s", l->name, ps->suffix,
                                                     moment_suffix[k]);
                                if (w >= (int)sizeof x->name) {
                                        snprintf(err, errlen, "tensor name '%s.%s' is too long", l->name, ps->suffix);
                                        free(t);
                                        return -1;
                                }
                                x->shape = ps->shape;
                                x->n = l->len[i];
                                if (set == SET_OPTIM)
                                        x->data = (k ? mo->v : mo->m) + l->off[i];
                                else
                                        x->data = (ps->trainable ? g->params : g->buffers) + l->off[i];
                        }
                }
        }
        *out = t;
        *nout = n;
        return 0;
}

/* ---- save ---- */

/* state.json's own checksum: crc32 of the compact, order-preserving serialisation of every other
 * field. Covering the state as the crcs cover the tensors means an edited step or cursor is caught
 * like a flipped weight; whitespace may change, meaning may not. */
static int state_crc(json_t *o, uint32_t *out)
{
        char *c = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!c) return -1;
        *out = (uint32_t)crc32(0L, (const Bytef *)c, (uInt)strlen(c));
        free(c);
        return 0;
}

static char *state_json(const dt_train_state *st, int nmoments, uint32_t mcrc, uint32_t ocrc)
{
        char seed[32], hash[32], mc[16], oc[16], sc[16];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)st->seed);
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)st->config_hash);
        snprintf(mc, sizeof mc, "%08lx", (unsigned long)mcrc);
        snprintf(oc, sizeof oc, "%08lx", (unsigned long)ocrc);
        json_t *o = json_object();
        json_object_set_new(o, "format", json_integer(DT_CKPT_FORMAT));
        json_object_set_new(o, "step", json_integer(st->step));
        json_object_set_new(o, "epoch", json_integer(st->epoch));
        json_object_set_new(o, "step_in_epoch", json_integer(st->step_in_epoch));
        json_object_set_new(o, "samples_in_epoch", json_integer(st->samples_in_epoch));
        json_object_set_new(o, "train_samples", json_integer(st->train_samples));
        json_object_set_new(o, "batch", json_integer(st->batch));
        json_t *since = json_object();
        json_object_set_new(since, "step", json_integer(st->since.step));
        json_object_set_new(since, "epoch", json_integer(st->since.epoch));
        json_object_set_new(since, "step_in_epoch", json_integer(st->since.step_in_epoch));
        json_object_set_new(since, "samples_in_epoch", json_integer(st->since.samples_in_epoch));
        json_object_set_new(o, "batch_since", since);
        json_object_set_new(o, "seed", json_string(seed));
        json_object_set_new(o, "config_hash", json_string(hash));
        /* JSON has no infinities: a loss never measured is null */
        json_object_set_new(o, "lr", isfinite(st->lr) ? json_real(st->lr) : json_null());
        json_object_set_new(o, "best_test_loss",
                            isfinite(st->best_test_loss) ? json_real(st->best_test_loss) : json_null());
        json_object_set_new(o, "nranks", json_integer(st->nranks));
        /* which checkpoint is which: this one is the newest; the best so far may be another */
        if (st->best_step >= 0 && st->best_metric[0]) {
                json_t *b = json_object();
                json_object_set_new(b, "step", json_integer(st->best_step));
                json_object_set_new(b, "metric", json_string(st->best_metric));
                json_object_set_new(b, "value", isfinite(st->best_value) ? json_real(st->best_value) : json_null());
                char bn[32];
                snprintf(bn, sizeof bn, "step-%08ld", st->best_step);
                json_object_set_new(b, "dir", json_string(bn));
                json_object_set_new(o, "best", b);
                json_object_set_new(o, "is_best", json_boolean(st->best_step == st->step));
        }
        if (st->epochs > 0) json_object_set_new(o, "epochs", json_integer(st->epochs));
        if (st->schedule[0]) json_object_set_new(o, "schedule", json_string(st->schedule));
        json_object_set_new(o, "elapsed", json_real(isfinite(st->elapsed) && st->elapsed > 0 ? st->elapsed : 0.0));
        json_object_set_new(o, "nmoments", json_integer(nmoments));
        json_object_set_new(o, "model_crc32", json_string(mc));
        json_object_set_new(o, "optim_crc32", json_string(oc));
        uint32_t crc;
        char *s = NULL;
        if (!state_crc(o, &crc)) {
                snprintf(sc, sizeof sc, "%08lx", (unsigned long)crc);
                json_object_set_new(o, "state_crc32", json_string(sc));
                s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        }
        json_decref(o);
        if (s) {        /* a text file ends with a newline */
                size_t n = strlen(s);
                s = dt_realloc(s, n + 2);
                memcpy(s + n, "\n", 2);
        }
        return s;
}

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
                                rm_rf(q);
                        else
                                rm_rf(p);
                }
                free(gone[i]);
        }
        free(gone);
}

int dt_ckpt_collect(const dt_graph *g, const dt_moments *mo, const dt_train_state *st, dt_ckpt_data *d,
                    char *err, size_t errlen)
{
        static const dt_moments none = {0};
        if (!mo) mo = &none;
        memset(d, 0, sizeof *d);
        if (collect(g, mo, SET_MODEL, &d->mt, &d->nm, err, errlen)) return -1;
        if (collect(g, mo, SET_OPTIM, &d->ot, &d->no, err, errlen)) {
                dt_ckpt_data_free(d);
                return -1;
        }
        d->nmoments = mo->n;
        d->st = *st;
        return 0;
}

void dt_ckpt_data_free(dt_ckpt_data *d)
{
        free(d->mt);
        free(d->ot);
        d->mt = d->ot = NULL;
        d->nm = d->no = 0;
}

int dt_ckpt_save(const char *outdir, const dt_graph *g, const dt_moments *mo,
                 const dt_train_state *st, char *err, size_t errlen)
{
        const dt_ckpt_policy one = { .keep = 1 };
        return dt_ckpt_save_keep(outdir, g, mo, st, &one, err, errlen);
}

int dt_ckpt_save_keep(const char *outdir, const dt_graph *g, const dt_moments *mo,
                      const dt_train_state *st, const dt_ckpt_policy *pol, char *err, size_t errlen)
{
        dt_ckpt_data d;
        if (dt_ckpt_collect(g, mo, st, &d, err, errlen)) return -1;
        int rc = dt_ckpt_commit(outdir, &d, pol, NULL, err, errlen);
        dt_ckpt_data_free(&d);
        return rc;
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
        if (write_all(fd, data, len)) {
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
        return mkdir_p(path, err, errlen);
}

int dt_ckpt_commit(const char *outdir, const dt_ckpt_data *d, const dt_ckpt_policy *pol,
                   const dt_ckpt_commit_opts *o, char *err, size_t errlen)
{
        const int *logs = o ? o->logs : NULL;
        int nlogs = o ? o->nlogs : 0;
        char ckroot[DT_PATH_MAX], name[64], tmp[DT_PATH_MAX], final[DT_PATH_MAX], line[80];
        const dt_train_state *st = &d->st;
        /* the batch: model, optim, state.json, the temporaries of latest and (when this one is the
         * best) best */
        enum { F_MODEL, F_OPTIM, F_STATE, F_LATEST, F_BEST, NF };
        bfile f[NF];
        int rc = -1, made_tmp = 0, best = st->best_step == st->step && st->best_metric[0];
        char *js = NULL;
        for (int i = 0; i < NF; i++) f[i].fd = -1;
        snprintf(name, sizeof name, "step-%08ld", st->step);
        snprintf(line, sizeof line, "%s\n", name);
        if (snprintf(ckroot, sizeof ckroot, "%s/checkpoints", outdir) >= (int)sizeof ckroot ||
            snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld", ckroot, name, (long)getpid()) >= (int)sizeof tmp ||
            snprintf(final, sizeof final, "%s/%s", ckroot, name) >= (int)sizeof final ||
            join(f[F_MODEL].path, DT_PATH_MAX, tmp, CK_MODEL) || join(f[F_OPTIM].path, DT_PATH_MAX, tmp, CK_OPTIM) ||
            join(f[F_STATE].path, DT_PATH_MAX, tmp, CK_STATE) ||
            snprintf(f[F_LATEST].path, DT_PATH_MAX, "%s/" TMP_PREFIX "latest-%ld", ckroot, (long)getpid()) >= DT_PATH_MAX ||
            snprintf(f[F_BEST].path, DT_PATH_MAX, "%s/" TMP_PREFIX "best-%ld", ckroot, (long)getpid()) >= DT_PATH_MAX) {
                snprintf(err, errlen, "%s: path too long", outdir);
                return -1;
        }
        if (ensure_dir(ckroot, err, errlen)) return -1;

        /* 1. write everything, each file's writeback started as soon as it is written */
        rm_rf(tmp);     /* a crashed run of ours with the same pid */
        if (mkdir(tmp, 0755)) {
                snprintf(err, errlen, "cannot create directory '%s': %s", tmp, strerror(errno));
                goto out;
        }
        made_tmp = 1;
        const dt_st_meta meta[] = { {"format", "pt"} };
        uint32_t mcrc, ocrc;
        if (dt_st_write_start(f[F_MODEL].path, d->mt, d->nm, meta, 1, &f[F_MODEL].fd, &mcrc, err, errlen)) goto out;
        if (dt_fault_io(st->step, f[F_MODEL].path, err, errlen)) goto out;
        dt_fault_at(DT_FAULT_CKPT_KILL, st->step);
        if (dt_st_write_start(f[F_OPTIM].path, d->ot, d->no, meta, 1, &f[F_OPTIM].fd, &ocrc, err, errlen)) goto out;
        js = state_json(st, d->nmoments, mcrc, ocrc);
        if (!js) {
                snprintf(err, errlen, "%s: cannot encode the training state", f[F_STATE].path);
                goto out;
        }
        if (write_start(&f[F_STATE], js, strlen(js), err, errlen)) goto out;
        if (write_start(&f[F_LATEST], line, strlen(line), err, errlen)) goto out;
        if (best && write_start(&f[F_BEST], line, strlen(line), err, errlen)) goto out;
        for (int i = 0; i < nlogs; i++) dt_st_writeback_start(logs[i]);

        /* 2. wait for all of it: the first fsync finds the others' writeback under way; the
         * directory's fsync makes its three names durable with their contents. A newer
         * checkpoint may supersede this one at any step until the pointers move (given_up). */
        int r = given_up(o) ? 1 : sync_batch(f, NF, o, err, errlen);
        if (r) {
                rc = r;
                goto out;
        }
        for (int i = 0; i < nlogs; i++) fsync(logs[i]);         /* logs: best effort (dtrain(1)) */
        if (fsync_dir(tmp)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", tmp, strerror(errno));
                goto out;
        }
        if (given_up(o)) {
                rc = 1;
                goto out;
        }

        /* 3. the step directory into place. Same step saved again (a rerun into the same
         * directory): swap the directories atomically so 'latest' never names a missing one; the
         * old copy (now at tmp) goes in the cleanup. */
        struct stat sb;
        if (!lstat(final, &sb)) {
                if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE)) {
                        /* file system without exchange: move the old one aside first */
                        char old[DT_PATH_MAX], oname[96];
                        snprintf(oname, sizeof oname, TMP_PREFIX "old-%s-%ld", name, (long)getpid());
                        if (join(old, sizeof old, ckroot, oname)) goto toolong;
                        rm_rf(old);
                        if (rename(final, old) || rename(tmp, final)) {
                                snprintf(err, errlen, "%s: cannot replace: %s", final, strerror(errno));
                                goto out;
                        }
                }
        } else if (rename(tmp, final)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", final, strerror(errno));
                goto out;
        }
        made_tmp = 0;
        /* 4. the step directory's name is durable before any pointer can name it */
        if (fsync_dir(ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", ckroot, strerror(errno));
                goto out;
        }
        const long none[2] = { -1, -1 }, mine[2] = { st->step, st->best_metric[0] ? st->best_step : -1 };
        /* that fsync made an open lag's pointers durable too: its cleanup may run, once this
         * commit's own pointer temporaries are renamed (cleanup takes every temporary) */
        dt_ckpt_lag *lag = o ? o->lag : NULL;
        if (given_up(o)) {      /* step-N stays, named by nothing: the next commit's cleanup takes it */
                if (lag && lag->open) {
                        unlink(f[F_LATEST].path);
                        unlink(f[F_BEST].path);
                        cleanup(ckroot, lag->step, pol ? pol->keep : 1, lag->best, mine);
                        lag->open = 0;
                }
                rc = 1;
                goto out;
        }
        /* 5. the pointers, best first: a crash between the two leaves best on the new step and
         * latest on the previous one, both whole; one fsync of the directory for both */
        char p[DT_PATH_MAX];
        if (best) {
                if (join(p, sizeof p, ckroot, "best")) goto toolong;
                if (rename(f[F_BEST].path, p)) {
                        snprintf(err, errlen, "%s: cannot rename into place: %s", p, strerror(errno));
                        goto out;
                }
        }
        if (join(p, sizeof p, ckroot, "latest")) goto toolong;
        if (rename(f[F_LATEST].path, p)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", p, strerror(errno));
                goto out;
        }
        if (lag && lag->open) {
                cleanup(ckroot, lag->step, pol ? pol->keep : 1, lag->best, mine);
                lag->open = 0;
        }
        /* 6. the pointers durable, then the old checkpoints go; or, when another commit follows at
         * once, both left to its step 4 */
        if (lag && o->more && __atomic_load_n(o->more, __ATOMIC_ACQUIRE)) {
                *lag = (dt_ckpt_lag){ .open = 1, .step = st->step, .best = mine[1] };
                rc = 0;
                goto out;
        }
        if (fsync_dir(ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", ckroot, strerror(errno));
                goto out;
        }
        cleanup(ckroot, st->step, pol ? pol->keep : 1, mine[1], none);
        rc = 0;
        goto out;
toolong:
        snprintf(err, errlen, "%s: path too long", outdir);
out:
        for (int i = 0; i < NF; i++)
                if (f[i].fd >= 0) close(f[i].fd);
        if (rc) {
                unlink(f[F_LATEST].path);
                unlink(f[F_BEST].path);
        }
        if (made_tmp) rm_rf(tmp);
        free(js);
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
        if (fsync_dir(ckroot)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", ckroot, strerror(errno));
                return -1;
        }
        const long none[2] = { -1, -1 };
        cleanup(ckroot, lag->step, pol ? pol->keep : 1, lag->best, none);
        lag->open = 0;
        return 0;
}

/* ---- latest ---- */

int dt_ckpt_latest(const char *outdir, char *path, size_t len, char *err, size_t errlen)
{
        return dt_ckpt_named(outdir, "latest", path, len, err, errlen);
}

int dt_ckpt_named(const char *outdir, const char *name, char *path, size_t len, char *err, size_t errlen)
{
        char lp[DT_PATH_MAX];
        if (snprintf(lp, sizeof lp, "%s/checkpoints/%s", outdir, name) >= (int)sizeof lp) {
                snprintf(err, errlen, "%s: path too long", outdir);
                return -1;
        }
        return dt_ckpt_pointer(lp, path, len, err, errlen);
}

/* ---- load ---- */

static int get_int(json_t *o, const char *key, long min, long max, long *out, const char *file,
                   char *err, size_t errlen)
{
        json_t *v = json_object_get(o, key);
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
                snprintf(err, errlen, "%s: field '%s': %s", file, key,
                         !v ? "missing" : json_is_integer(v) ? "out of range" : "not an integer");
                return -1;
        }
        *out = (long)json_integer_value(v);
        return 0;
}

/* a 64-bit unsigned stored as a string of digits in base 10 or 16 (exactly 'digits' long when nonzero) */
static int get_u64(json_t *o, const char *key, int base, size_t digits, uint64_t *out, const char *file,
                   char *err, size_t errlen)
{
        json_t *v = json_object_get(o, key);
        const char *s = json_string_value(v);
        const char *set = base == 10 ? "0123456789" : "0123456789abcdefABCDEF";
        int ok = s && *s && !s[strspn(s, set)] && (!digits || strlen(s) == digits);
        unsigned long long x = 0;
        if (ok) {
                errno = 0;
                x = strtoull(s, NULL, base);
                ok = !errno;
        }
        if (!ok) {
                snprintf(err, errlen, "%s: field '%s': %s", file, key,
                         !v ? "missing" : !s ? "not a string" : "not a valid number");
                return -1;
        }
        *out = x;
        return 0;
}

static int get_real(json_t *o, const char *key, double *out, const char *file, char *err, size_t errlen)
{
        json_t *v = json_object_get(o, key);
        if (json_is_null(v)) {
                *out = INFINITY;
                return 0;
        }
        if (!json_is_number(v)) {
                snprintf(err, errlen, "%s: field '%s': %s", file, key, !v ? "missing" : "not a number");
                return -1;
        }
        *out = json_number_value(v);
        return 0;
}

static int read_state(const char *path, dt_train_state *st, int *nmoments, uint32_t *mcrc, uint32_t *ocrc,
                      uint32_t *scrc, uint32_t *want_scrc, char *err, size_t errlen)
{
        json_error_t je;
        json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!o) {
                snprintf(err, errlen, "%s: JSON: %s at line %d column %d", path, je.text, je.line, je.column);
                return -1;
        }
        int rc = -1;
        long fmt, v;
        uint64_t u;
        if (!json_is_object(o)) {
                snprintf(err, errlen, "%s: JSON: not an object", path);
                goto out;
        }
        if (get_int(o, "format", 0, LONG_MAX, &fmt, path, err, errlen)) goto out;
        if (fmt != DT_CKPT_FORMAT) {
                snprintf(err, errlen, "%s: format version %ld, this dtrain reads version %d", path, fmt,
                         DT_CKPT_FORMAT);
                goto out;
        }
        /* every count is bounded far below where step + 1 or epoch x steps could overflow */
        json_t *since = json_object_get(o, "batch_since");
        if (!json_is_object(since)) {
                snprintf(err, errlen, "%s: field 'batch_since': %s", path, since ? "not an object" : "missing");
                goto out;
        }
        if (get_int(o, "step", 0, DT_CKPT_MAX_COUNT, &st->step, path, err, errlen) ||
            get_int(o, "epoch", 0, INT32_MAX, &st->epoch, path, err, errlen) ||
            get_int(o, "step_in_epoch", 0, DT_CKPT_MAX_COUNT, &st->step_in_epoch, path, err, errlen) ||
            get_int(o, "samples_in_epoch", 0, DT_CKPT_MAX_COUNT, &st->samples_in_epoch, path, err, errlen) ||
            get_int(o, "train_samples", 1, DT_CKPT_MAX_COUNT, &st->train_samples, path, err, errlen) ||
            get_int(o, "batch", 1, INT32_MAX, &st->batch, path, err, errlen) ||
            get_int(since, "step", 0, DT_CKPT_MAX_COUNT, &st->since.step, path, err, errlen) ||
            get_int(since, "epoch", 0, INT32_MAX, &st->since.epoch, path, err, errlen) ||
            get_int(since, "step_in_epoch", 0, DT_CKPT_MAX_COUNT, &st->since.step_in_epoch, path, err, errlen) ||
            get_int(since, "samples_in_epoch", 0, DT_CKPT_MAX_COUNT, &st->since.samples_in_epoch, path, err, errlen) ||
            get_u64(o, "seed", 10, 0, &st->seed, path, err, errlen) ||
            get_u64(o, "config_hash", 16, 16, &st->config_hash, path, err, errlen) ||
            get_real(o, "lr", &st->lr, path, err, errlen) ||
            get_real(o, "best_test_loss", &st->best_test_loss, path, err, errlen) ||
            get_int(o, "nranks", 1, INT32_MAX, &v, path, err, errlen))
                goto out;
        st->nranks = (int)v;
        st->best_step = -1;     /* the optional fields: written since best checkpoints were kept */
        json_t *b = json_object_get(o, "best");
        if (json_is_object(b)) {
                const char *m = json_string_value(json_object_get(b, "metric"));
                if (get_int(b, "step", 0, DT_CKPT_MAX_COUNT, &st->best_step, path, err, errlen) ||
                    get_real(b, "value", &st->best_value, path, err, errlen) || !m) {
                        if (!m) snprintf(err, errlen, "%s: field 'best.metric': missing", path);
                        goto out;
                }
                snprintf(st->best_metric, sizeof st->best_metric, "%s", m);
        }
        json_t *ep = json_object_get(o, "epochs");
        if (json_is_integer(ep)) st->epochs = (long)json_integer_value(ep);
        const char *sch = json_string_value(json_object_get(o, "schedule"));
        if (sch) snprintf(st->schedule, sizeof st->schedule, "%s", sch);
        json_t *el = json_object_get(o, "elapsed");
        if (json_is_number(el) && json_number_value(el) >= 0) st->elapsed = json_number_value(el);
        if (get_int(o, "nmoments", 0, 2, &v, path, err, errlen)) goto out;
        *nmoments = (int)v;
        if (get_u64(o, "model_crc32", 16, 8, &u, path, err, errlen)) goto out;
        *mcrc = (uint32_t)u;
        if (get_u64(o, "optim_crc32", 16, 8, &u, path, err, errlen)) goto out;
        *ocrc = (uint32_t)u;
        if (get_u64(o, "state_crc32", 16, 8, &u, path, err, errlen)) goto out;
        /* verdict kept for the caller: a mismatch of meaning (hash, moments) says more than a crc */
        json_object_del(o, "state_crc32");
        if (state_crc(o, scrc)) *scrc = ~(uint32_t)u;
        *want_scrc = (uint32_t)u;
        if (!isnan(st->lr) && (st->lr < 0 || isinf(st->lr))) {
                snprintf(err, errlen, "%s: field 'lr': not a finite learning rate", path);
                goto out;
        }
        rc = 0;
out:
        json_decref(o);
        return rc;
}

/* The tensors of a read file against those the graph expects: names, shapes, nothing more,
 * nothing less. 'where' names the other side in a shape message ("checkpoint", "file"). */
static int check_tensors(const char *path, const dt_st_file *f, const dt_st_tensor *want, int nw,
                         const char *where, char *err, size_t errlen)
{
        for (int i = 0; i < nw; i++) {
                const dt_st_tensor *t = dt_st_find(f, want[i].name);
                if (!t) {
                        snprintf(err, errlen, "%s: missing tensor '%s'", path, want[i].name);
                        return -1;
                }
                if (!dt_shape_eq(&t->shape, &want[i].shape)) {
                        char a[96], b[96];
                        snprintf(err, errlen, "%s: shape: tensor '%s' is %s in the %s but %s in the model",
                                 path, want[i].name, dt_shape_str(&t->shape, a, sizeof a), where,
                                 dt_shape_str(&want[i].shape, b, sizeof b));
                        return -1;
                }
        }
        for (int k = 0; k < f->nt; k++) {
                int found = 0;
                for (int i = 0; i < nw && !found; i++)
                        found = !strcmp(f->t[k].name, want[i].name);
                if (!found) {
                        snprintf(err, errlen, "%s: unexpected tensor '%s' (not in the model)", path, f->t[k].name);
                        return -1;
                }
        }
        return 0;
}

/* Validates one checkpoint file: structure, the crc recorded in state.json, the tensors. */
static int check_file(const char *path, dt_st_file *f, const dt_st_tensor *want, int nw, uint32_t crc,
                      char *err, size_t errlen)
{
        if (dt_st_read(path, f, err, errlen)) return -1;
        uint32_t got = 0;
        if (file_crc(path, &got)) {
                snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
                return -1;
        }
        if (got != crc) {
                snprintf(err, errlen, "%s: crc32: the file checksums to %08lx but state.json records %08lx",
                         path, (unsigned long)got, (unsigned long)crc);
                return -1;
        }
        return check_tensors(path, f, want, nw, "checkpoint", err, errlen);
}

int dt_ckpt_load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st,
                 uint64_t expect_hash, char *err, size_t errlen)
{
        char mp[DT_PATH_MAX], op[DT_PATH_MAX], sp[DT_PATH_MAX];
        if (snprintf(mp, sizeof mp, "%s/" CK_MODEL, ckdir) >= (int)sizeof mp ||
            snprintf(op, sizeof op, "%s/" CK_OPTIM, ckdir) >= (int)sizeof op ||
            snprintf(sp, sizeof sp, "%s/" CK_STATE, ckdir) >= (int)sizeof sp) {
                snprintf(err, errlen, "%s: path too long", ckdir);
                return -1;
        }
        static dt_moments none = {0};
        if (!mo) mo = &none;
        const char *files[3] = {sp, mp, op};
        for (int i = 0; i < 3; i++)
                if (access(files[i], R_OK)) {
                        snprintf(err, errlen, "%s: missing from the checkpoint (%s)", files[i], strerror(errno));
                        return -1;
                }

        dt_train_state s;
        memset(&s, 0, sizeof s);
        int nmoments = 0, rc = -1, nm = 0, no = 0;
        uint32_t mcrc = 0, ocrc = 0, scrc = 0, want_scrc = 0;
        dt_st_tensor *mt = NULL, *ot = NULL;
        dt_st_file mf = {0}, of = {0};
        if (read_state(sp, &s, &nmoments, &mcrc, &ocrc, &scrc, &want_scrc, err, errlen)) goto out;
        if (s.config_hash != expect_hash) {
                snprintf(err, errlen, "%s: incompatible checkpoint: config hash %016llx differs from the "
                         "model's %016llx", sp, (unsigned long long)s.config_hash, (unsigned long long)expect_hash);
                goto out;
        }
        if (nmoments != mo->n) {
                snprintf(err, errlen, "%s: incompatible checkpoint: it holds %d optimizer moment buffer%s, "
                         "the optimizer needs %d", sp, nmoments, nmoments == 1 ? "" : "s", mo->n);
                goto out;
        }
        if (scrc != want_scrc) {
                snprintf(err, errlen, "%s: crc32: the fields checksum to %08lx but state_crc32 records %08lx "
                         "(the file was edited or damaged)", sp, (unsigned long)scrc, (unsigned long)want_scrc);
                goto out;
        }
        if (collect(g, mo, SET_MODEL, &mt, &nm, err, errlen) || collect(g, mo, SET_OPTIM, &ot, &no, err, errlen))
                goto out;
        if (check_file(mp, &mf, mt, nm, mcrc, err, errlen) || check_file(op, &of, ot, no, ocrc, err, errlen))
                goto out;

        /* everything checked: only now overwrite the model */
        for (int i = 0; i < nm; i++)
                memcpy(mt[i].data, dt_st_find(&mf, mt[i].name)->data, mt[i].n * sizeof(float));
        for (int i = 0; i < no; i++)
                memcpy(ot[i].data, dt_st_find(&of, ot[i].name)->data, ot[i].n * sizeof(float));
        *st = s;
        rc = 0;
out:
        dt_st_free(&mf);
        dt_st_free(&of);
        free(mt);
        free(ot);
        return rc;
}

int dt_ckpt_read_state(const char *ckdir, dt_train_state *st, char *err, size_t errlen)
{
        char sp[DT_PATH_MAX];
        if (snprintf(sp, sizeof sp, "%s/" CK_STATE, ckdir) >= (int)sizeof sp) {
                snprintf(err, errlen, "%s: path too long", ckdir);
                return -1;
        }
        int nmoments;
        uint32_t mcrc, ocrc, scrc, want;
        memset(st, 0, sizeof *st);
        if (read_state(sp, st, &nmoments, &mcrc, &ocrc, &scrc, &want, err, errlen)) return -1;
        if (scrc != want) {
                snprintf(err, errlen, "%s: crc32: the fields checksum to %08lx but state_crc32 records %08lx "
                         "(the file was edited or damaged)", sp, (unsigned long)scrc, (unsigned long)want);
                return -1;
        }
        return 0;
}

/* ---- position ---- */

static long ceil_div(long a, long b) { return (a + b - 1) / b; }

int dt_ckpt_check_position(const dt_train_state *st, long n, const char *path, char *err, size_t errlen)
{
        if (st->train_samples != n) {
                snprintf(err, errlen, "%s: the checkpoint's data cursor is over a training set of %ld samples but "
                         "the data has %ld; resume with the data it was trained on", path, st->train_samples, n);
                return -1;
        }
        /* replay: from 'since', steps of 'batch' run each epoch's permutation to its end */
        const long B = st->batch, spe = ceil_div(n, B);
        long steps = 0, want_sie = 0;
        const char *bad = NULL;
        if (st->samples_in_epoch >= n || st->since.samples_in_epoch >= n)
                bad = "samples_in_epoch is not inside the training set";
        else if (st->epoch < st->since.epoch)
                bad = "epoch is before batch_since.epoch";
        else if (st->epoch == st->since.epoch) {
                long d = st->samples_in_epoch - st->since.samples_in_epoch;
                if (d < 0 || d % B) bad = "samples_in_epoch is not a whole number of batches after batch_since";
                steps = d / B;
                want_sie = st->since.step_in_epoch + steps;
        } else {
                if (st->samples_in_epoch % B) bad = "samples_in_epoch is not a whole number of batches";
                long first = ceil_div(n - st->since.samples_in_epoch, B);
                long full = st->epoch - st->since.epoch - 1;
                /* full < 2^31 and spe <= 2^40: the product fits in a long */
                steps = first + full * spe + st->samples_in_epoch / B;
                want_sie = st->samples_in_epoch / B;
        }
        if (!bad && st->step != st->since.step + steps) bad = "step does not match epoch and samples_in_epoch";
        if (!bad && st->step_in_epoch != want_sie) bad = "step_in_epoch does not match samples_in_epoch";
        if (!bad && (st->since.step > st->step || st->since.step_in_epoch > st->since.step))
                bad = "batch_since is after the position";
        if (bad) {
                snprintf(err, errlen, "%s: inconsistent position: %s (step %ld, epoch %ld, step_in_epoch %ld, "
                         "samples_in_epoch %ld of %ld, batch %ld)", path, bad, st->step, st->epoch,
                         st->step_in_epoch, st->samples_in_epoch, n, B);
                return -1;
        }
        return 0;
}

/* ---- final weights ---- */

int dt_model_save(const char *path, const dt_graph *g, char *err, size_t errlen)
{
        return dt_model_save_meta(path, g, NULL, 0, err, errlen);
}

int dt_model_save_meta(const char *path, const dt_graph *g, const dt_st_meta *extra, int nextra,
                       char *err, size_t errlen)
{
        char dir[DT_PATH_MAX], tmp[DT_PATH_MAX];
        const char *base;
        dt_st_tensor *t;
        int n;
        dt_moments none = {0};
        split_path(path, dir, sizeof dir, &base);
        if (snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld", dir, base, (long)getpid()) >= (int)sizeof tmp) {
                snprintf(err, errlen, "%s: path too long", path);
                return -1;
        }
        if (nextra < 0) nextra = 0;
        if (collect(g, &none, SET_MODEL, &t, &n, err, errlen)) return -1;
        dt_st_meta *meta = dt_malloc((size_t)(nextra + 1) * sizeof *meta);
        meta[0] = (dt_st_meta){ "format", "pt" };
        for (int i = 0; i < nextra; i++) meta[i + 1] = extra[i];
        int rc = dt_st_write(tmp, t, n, meta, nextra + 1, err, errlen);
        free(meta);
        free(t);
        if (rc) {
                unlink(tmp);
                return -1;
        }
        if (rename(tmp, path)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
                unlink(tmp);
                return -1;
        }
        if (fsync_dir(dir)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", dir, strerror(errno));
                return -1;
        }
        return 0;
}

int dt_model_load(const char *path, dt_graph *g, dt_st_file *f, char *err, size_t errlen)
{
        dt_st_tensor *want = NULL;
        int nw = 0;
        dt_moments none = {0};
        memset(f, 0, sizeof *f);
        if (access(path, R_OK)) {
                snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
                return -1;
        }
        if (collect(g, &none, SET_MODEL, &want, &nw, err, errlen)) return -1;
        int rc = -1;
        if (dt_st_read(path, f, err, errlen) || check_tensors(path, f, want, nw, "file", err, errlen))
                goto out;
        /* everything checked: only now overwrite the model */
        for (int i = 0; i < nw; i++)
                memcpy(want[i].data, dt_st_find(f, want[i].name)->data, want[i].n * sizeof(float));
        rc = 0;
out:
        free(want);
        if (rc) dt_st_free(f);
        return rc;
}
