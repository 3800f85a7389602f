/* train/ckpt_state.c - state.json: the run's position and settings, written with its own crc32 and
 * read back with every field range-checked; and the check of a loaded position against the data. */
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

/* ---- save ---- */

/* state.json's own checksum: crc32 of the compact, order-preserving serialisation of every other
 * field. Covering the state as the crcs cover the tensors means an edited step or cursor is caught
 * like a flipped weight; whitespace may change, meaning may not. */
int dt_ck_state_crc(json_t *o, uint32_t *out)
{
        char *c = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!c) return -1;
        *out = (uint32_t)crc32(0L, (const Bytef *)c, (uInt)strlen(c));
        free(c);
        return 0;
}

char *dt_ck_state_json(const dt_train_state *st, int nmoments, uint32_t mcrc, uint32_t ocrc)
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
        if (!dt_ck_state_crc(o, &crc)) {
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

int dt_ck_read_state(const char *path, dt_train_state *st, int *nmoments, uint32_t *mcrc, uint32_t *ocrc,
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
        if (dt_ck_state_crc(o, scrc)) *scrc = ~(uint32_t)u;
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
        if (dt_ck_read_state(sp, st, &nmoments, &mcrc, &ocrc, &scrc, &want, err, errlen)) return -1;
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

