/* util/fault.c - DTRAIN_FAULT: parsing and injection of test faults at a chosen rank and step.
 * Inert unless the variable is set; the hooks in train.c, ckpt.c and comm.c are one call each,
 * and every effect a fault has is made here. The value is a list of faults,
 *
 *     KIND[@KEY=VALUE][,KEY=VALUE...][;KIND...]
 *
 * where ',', ';' and blanks all separate items: an item with '=' and no '@' belongs to the fault
 * before it, any other item starts a new one (so "nan_grad@rank=1,step=5,kill@rank=0,step=9" is
 * two faults). Keys: rank (default every rank), step (default 1), code (exit), secs (slow, ckpt_slow), sig
 * (signal). */
#include "util/fault.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mpi.h>
#include "util/common.h"

static const char *const kind_names[DT_FAULT_NKINDS] = {
        [DT_FAULT_EXIT] = "exit", [DT_FAULT_KILL] = "kill", [DT_FAULT_HANG] = "hang",
        [DT_FAULT_SLOW] = "slow", [DT_FAULT_NAN_GRAD] = "nan_grad", [DT_FAULT_NAN_LOSS] = "nan_loss",
        [DT_FAULT_IO_ERROR] = "io_error", [DT_FAULT_CKPT_KILL] = "ckpt_kill_mid_write",
        [DT_FAULT_SIGNAL] = "signal", [DT_FAULT_MPI_ERROR] = "mpi_error", [DT_FAULT_CKPT_SLOW] = "ckpt_slow",
};

enum { K_RANK = 1, K_STEP = 2, K_CODE = 4, K_SECS = 8, K_SIG = 16 };
static const char *const key_names[] = { "rank", "step", "code", "secs", "sig" };

/* the keys each kind takes besides rank and step */
static int kind_keys(dt_fault_kind k)
{
        return K_RANK | K_STEP | (k == DT_FAULT_EXIT ? K_CODE : 0) | (k == DT_FAULT_SLOW || k == DT_FAULT_CKPT_SLOW ? K_SECS : 0) |
               (k == DT_FAULT_SIGNAL ? K_SIG : 0);
}

static const struct { const char *name; int sig; } signals[] = {
        { "TERM", SIGTERM }, { "INT", SIGINT }, { "USR1", SIGUSR1 },
};

/* ---- parsing ---- */

static int parse_long(const char *s, long lo, long hi, long *out)
{
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < lo || v > hi) return -1;
        *out = v;
        return 0;
}

static int set_key(dt_fault *f, int *seen, const char *key, const char *val, char *err, size_t errlen)
{
        int k = -1;
        for (int i = 0; i < (int)(sizeof key_names / sizeof *key_names); i++)
                if (!strcmp(key, key_names[i])) k = i;
        const char *kind = kind_names[f->kind];
        if (k < 0 || !(kind_keys(f->kind) & (1 << k))) {
                snprintf(err, errlen, "%s takes no key '%s' (it takes rank, step%s)", kind, key,
                         f->kind == DT_FAULT_EXIT ? ", code" :
                         f->kind == DT_FAULT_SLOW || f->kind == DT_FAULT_CKPT_SLOW ? ", secs" :
                         f->kind == DT_FAULT_SIGNAL ? ", sig" : "");
                return -1;
        }
        if (*seen & (1 << k)) {
                snprintf(err, errlen, "%s: '%s' given twice", kind, key);
                return -1;
        }
        *seen |= 1 << k;
        long v;
        switch (1 << k) {
        case K_RANK:
                if (!strcmp(val, "*") || !strcmp(val, "any")) {
                        f->rank = -1;
                } else if (parse_long(val, 0, INT_MAX, &v)) {
                        snprintf(err, errlen, "%s: rank '%s' is not a rank number (0, 1, ...) or '*'", kind, val);
                        return -1;
                } else {
                        f->rank = (int)v;
                }
                break;
        case K_STEP:
                if (parse_long(val, 1, LONG_MAX / 2, &v)) {
                        snprintf(err, errlen, "%s: step '%s' is not a step number (1, 2, ...)", kind, val);
                        return -1;
                }
                f->step = v;
                break;
        case K_CODE:
                if (parse_long(val, 0, 255, &v)) {
                        snprintf(err, errlen, "%s: code '%s' is not an exit status (0 to 255)", kind, val);
                        return -1;
                }
                f->code = (int)v;
                break;
        case K_SECS: {
                char *end;
                errno = 0;
                double d = strtod(val, &end);
                if (errno || end == val || *end || !isfinite(d) || d < 0 || d > 86400) {
                        snprintf(err, errlen, "%s: secs '%s' is not a number of seconds (0 to 86400)", kind, val);
                        return -1;
                }
                f->secs = d;
                break;
        }
        case K_SIG: {
                const char *s = strncmp(val, "SIG", 3) ? val : val + 3;
                f->sig = 0;
                for (size_t i = 0; i < sizeof signals / sizeof *signals; i++)
                        if (!strcmp(s, signals[i].name)) f->sig = signals[i].sig;
                if (!f->sig) {
                        snprintf(err, errlen, "%s: sig '%s' is not one dtrain stops on (TERM, INT, USR1)", kind, val);
                        return -1;
                }
                break;
        }
        }
        return 0;
}

static int new_fault(dt_fault *f, const char *name, char *err, size_t errlen)
{
        memset(f, 0, sizeof *f);
        int k = -1;
        for (int i = 0; i < DT_FAULT_NKINDS; i++)
                if (!strcmp(name, kind_names[i])) k = i;
        if (k < 0) {
                size_t n = (size_t)snprintf(err, errlen, "unknown fault '%s' (known: ", name);
                for (int i = 0; i < DT_FAULT_NKINDS && n < errlen; i++)
                        n += (size_t)snprintf(err + n, errlen - n, "%s%s", i ? ", " : "", kind_names[i]);
                if (n < errlen) snprintf(err + n, errlen - n, ")");
                return -1;
        }
        f->kind = (dt_fault_kind)k;
        f->rank = -1;
        f->step = 1;
        f->code = 1;
        f->secs = 1.0;
        f->sig = SIGUSR1;
        return 0;
}

int dt_fault_parse(const char *spec, dt_fault *f, int max, char *err, size_t errlen)
{
        if (!spec) return 0;
        char buf[1024];
        if (strlen(spec) >= sizeof buf) {
                snprintf(err, errlen, "the value is longer than %zu bytes", sizeof buf - 1);
                return -1;
        }
        strcpy(buf, spec);
        int n = 0, seen = 0;
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",; \t\n", &save); tok; tok = strtok_r(NULL, ",; \t\n", &save)) {
                char *at = strchr(tok, '@'), *kv = tok;
                if (at || !strchr(tok, '=')) {          /* a new fault: KIND or KIND@KEY=VALUE */
                        if (at) *at = 0;
                        if (n == max) {
                                snprintf(err, errlen, "more than %d faults", max);
                                return -1;
                        }
                        if (new_fault(&f[n], tok, err, errlen)) return -1;
                        n++;
                        seen = 0;
                        if (!at) continue;
                        kv = at + 1;
                } else if (n == 0) {
                        snprintf(err, errlen, "'%s' comes before any fault name (KIND@%s)", tok, tok);
                        return -1;
                }
                char *eq = strchr(kv, '=');
                if (!eq || eq == kv || !eq[1] || strchr(eq + 1, '=') || strchr(eq + 1, '@')) {
                        snprintf(err, errlen, "%s: '%s' is not KEY=VALUE", kind_names[f[n - 1].kind], kv);
                        return -1;
                }
                *eq = 0;
                if (set_key(&f[n - 1], &seen, kv, eq + 1, err, errlen)) return -1;
        }
        return n;
}

/* ---- this process's faults ---- */

static dt_fault faults[DT_FAULT_MAX];
static int nfaults;
static int me = -1;     /* this rank, found at the first hook (MPI is up by then) */

int dt_fault_init(const char *spec)
{
        char err[512];
        int n = dt_fault_parse(spec, faults, DT_FAULT_MAX, err, sizeof err);
        if (n < 0) {
                dt_error("DTRAIN_FAULT='%s': %s; the syntax is KIND[@rank=R][,step=S][;KIND...] (dtrain(1), "
                         "ENVIRONMENT)", spec, err);
                nfaults = 0;
                return DT_EXIT_USAGE;
        }
        nfaults = n;
        return 0;
}

/* First hook: learn the rank, and refuse a fault aimed at a rank the job does not have, which
 * would otherwise be silently inert. */
static void setup(void)
{
        int inited = 0, fin = 0, size = 1;
        me = 0;
        MPI_Initialized(&inited);
        MPI_Finalized(&fin);
        if (inited && !fin) {
                MPI_Comm_rank(MPI_COMM_WORLD, &me);
                MPI_Comm_size(MPI_COMM_WORLD, &size);
        }
        for (int i = 0; i < nfaults; i++)
                if (faults[i].rank >= size)
                        dt_die(DT_EXIT_USAGE, "DTRAIN_FAULT: %s@rank=%d names a rank this job does not have "
                               "(%d rank%s)", kind_names[faults[i].kind], faults[i].rank, size, size == 1 ? "" : "s");
}

static int aimed_here(const dt_fault *f, long step)
{
        if (me < 0) setup();
        return step >= f->step && (f->rank < 0 || f->rank == me);
}

/* says so on stderr, so that a test's log (and a user who left the variable set) sees it */
static void fire(dt_fault *f, long step)
{
        f->fired = 1;
        dt_note("DTRAIN_FAULT: %s at step %ld", kind_names[f->kind], step);
        fflush(stderr);
}

/* the first due fault of kind at step on this rank, marked fired; NULL when none */
static dt_fault *due(dt_fault_kind kind, long step)
{
        for (int i = 0; i < nfaults; i++) {
                dt_fault *f = &faults[i];
                if (f->kind != kind || f->fired || !aimed_here(f, step)) continue;
                fire(f, step);
                return f;
        }
        return NULL;
}

static void sleep_s(double s)
{
        struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

void dt_fault_step(long step)
{
        if (!nfaults) return;
        if (me < 0) setup();    /* at the first step, whatever the faults' kinds */
        dt_fault *f;
        if ((f = due(DT_FAULT_EXIT, step))) _exit(f->code);
        if (due(DT_FAULT_KILL, step)) kill(getpid(), SIGKILL);
        if ((f = due(DT_FAULT_SIGNAL, step))) raise(f->sig);
        /* a straggler: slow in every step from its first, announced once */
        for (int i = 0; i < nfaults; i++) {
                f = &faults[i];
                if (f->kind != DT_FAULT_SLOW || !aimed_here(f, step)) continue;
                if (!f->fired) fire(f, step);
                sleep_s(f->secs);
        }
        if (due(DT_FAULT_MPI_ERROR, step)) {
                /* a count of -1 fails MPI's argument check before anything is sent, so no peer is
                 * left half-way; the error handler ends the job */
                int x = 0;
                MPI_Allreduce(MPI_IN_PLACE, &x, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                dt_die(DT_EXIT_RUNTIME, "DTRAIN_FAULT: mpi_error: MPI accepted an invalid call "
                       "(is mpi_param_check off?)");
        }
}

int dt_fault_at(dt_fault_kind kind, long step)
{
        if (!nfaults || !due(kind, step)) return 0;
        if (kind == DT_FAULT_HANG)
                for (;;) pause();       /* signals are taken and ignored: only SIGKILL ends it */
        if (kind == DT_FAULT_CKPT_KILL) kill(getpid(), SIGKILL);
        return 1;
}

int dt_fault_io(long step, const char *path, char *err, size_t errlen)
{
        if (!dt_fault_at(DT_FAULT_IO_ERROR, step)) return 0;
        snprintf(err, errlen, "%s: write failed: %s (DTRAIN_FAULT io_error)", path, strerror(ENOSPC));
        return -1;
}

void dt_fault_ckpt_slow(long step)
{
        if (!nfaults) return;
        /* kinds never change after parsing and only this thread touches a ckpt_slow fault */
        for (int i = 0; i < nfaults; i++) {
                dt_fault *f = &faults[i];
                if (f->kind != DT_FAULT_CKPT_SLOW || !aimed_here(f, step)) continue;
                if (!f->fired) fire(f, step);
                sleep_s(f->secs);
        }
}
