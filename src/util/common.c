/* util/common.c - diagnostics list, messages, checked allocation, mkdir -p; no state beyond the
 * message prefix. */
#include "util/common.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <mpi.h>

char dt_msg_prefix[64] = "dtrain";
const char *dt_argv0 = "dtrain";

char *dt_vstrfmt(const char *fmt, va_list ap)
{
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0) n = 0;
        char *s = dt_malloc((size_t)n + 1);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        return s;
}

static char **argpos;   /* [k]: what line DT_ARG_LINE + k names */
static int nargpos;

int dt_argpos_add(const char *name)
{
        argpos = dt_realloc(argpos, (size_t)(nargpos + 1) * sizeof *argpos);
        argpos[nargpos] = dt_strdup(name);
        return DT_ARG_LINE + nargpos++;
}

const char *dt_argpos_name(int line)
{
        long k = (long)line - 1 - DT_ARG_LINE;
        return k >= 0 && k < nargpos ? argpos[k] : NULL;
}

const char *dt_pos_str(char *buf, size_t len, const char *file, int line, int col)
{
        const char *a = dt_argpos_name(line);
        if (a) snprintf(buf, len, "%s", a);
        else snprintf(buf, len, "%s:%d:%d", file ? file : "", line, col);
        return buf;
}

const char *dt_line_str(char *buf, size_t len, int line)
{
        const char *a = dt_argpos_name(line);
        if (a) snprintf(buf, len, "%s", a);
        else snprintf(buf, len, "line %d", line);
        return buf;
}

void dt_diag_add(dt_diag *d, const char *file, int line, int col, const char *fmt, ...)
{
        const char *a = dt_argpos_name(line);
        if (a) {
                file = a;
                line = col = 0;
        }
        if (d->n == d->cap) {
                d->cap = d->cap ? 2 * d->cap : 16;
                d->msgs = dt_realloc(d->msgs, (size_t)d->cap * sizeof *d->msgs);
        }
        dt_diag_msg *m = &d->msgs[d->n++];
        m->file = file ? dt_strdup(file) : NULL;
        m->line = line;
        m->col = col;
        va_list ap;
        va_start(ap, fmt);
        m->text = dt_vstrfmt(fmt, ap);
        va_end(ap);
}

/* a name dt_argpos_add registered: an argument, not a file */
static int is_arg(const char *name)
{
        for (int k = 0; name && k < nargpos; k++)
                if (!strcmp(argpos[k], name)) return 1;
        return 0;
}

static int msg_cmp(const void *a, const void *b)
{
        const dt_diag_msg *x = a, *y = b;
        int c = strcmp(x->file ? x->file : "", y->file ? y->file : "");
        if (c) return c;
        if (x->line != y->line) return x->line < y->line ? -1 : 1;
        if (x->col != y->col) return x->col < y->col ? -1 : 1;
        return 0;
}

void dt_diag_print(const dt_diag *d, FILE *f)
{
        if (d->n == 0) return;
        /* stable order: sort a copy of the index (qsort is not stable; ties keep insertion order) */
        dt_diag_msg *m = dt_malloc((size_t)d->n * sizeof *m);
        memcpy(m, d->msgs, (size_t)d->n * sizeof *m);
        for (int i = 1; i < d->n; i++)  /* insertion sort: stable, n is small */
                for (int j = i; j > 0 && msg_cmp(&m[j - 1], &m[j]) > 0; j--) {
                        dt_diag_msg t = m[j]; m[j] = m[j - 1]; m[j - 1] = t;
                }
        int nfiles = 0, nargs = 0;
        for (int i = 0; i < d->n; i++) {
                if (m[i].file && m[i].line > 0)
                        fprintf(f, "%s:%d:%d: error: %s\n", m[i].file, m[i].line, m[i].col, m[i].text);
                else if (m[i].file)
                        fprintf(f, "%s: error: %s\n", m[i].file, m[i].text);
                else
                        fprintf(f, "%s: error: %s\n", dt_msg_prefix, m[i].text);
                if (i == 0 || strcmp(m[i].file ? m[i].file : "", m[i - 1].file ? m[i - 1].file : ""))
                        *(is_arg(m[i].file) ? &nargs : &nfiles) += 1;
        }
        char where[96] = "";
        if (nfiles || !nargs) snprintf(where, sizeof where, "%d file%s", nfiles, nfiles == 1 ? "" : "s");
        if (nargs)
                snprintf(where + strlen(where), sizeof where - strlen(where), "%s%d --set argument%s",
                         nfiles ? " and " : "", nargs, nargs == 1 ? "" : "s");
        fprintf(f, "%s: %d error%s in %s; nothing was run\n", dt_msg_prefix, d->n, d->n == 1 ? "" : "s", where);
        free(m);
}

void dt_diag_free(dt_diag *d)
{
        for (int i = 0; i < d->n; i++) {
                free(d->msgs[i].file);
                free(d->msgs[i].text);
        }
        free(d->msgs);
        memset(d, 0, sizeof *d);
}

/* "dtrain: KIND: message" on stderr, in one write where it fits: stderr is unbuffered, and under
 * mpirun the line goes through a pipe that mpirun's own abort banner also writes to; written in
 * three pieces, the banner once landed between a rank's fatal message and its newline */
static void say(const char *kind, const char *fmt, va_list ap)
{
        char buf[4096];
        va_list aq;
        va_copy(aq, ap);
        int n = snprintf(buf, sizeof buf, "%s: %s: ", dt_msg_prefix, kind);
        int m = n >= 0 && (size_t)n < sizeof buf ? vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, aq) : -1;
        va_end(aq);
        if (m >= 0 && (size_t)n + (size_t)m + 1 < sizeof buf) {
                buf[n + m] = '\n';
                fwrite(buf, 1, (size_t)n + (size_t)m + 1, stderr);
                return;
        }
        fprintf(stderr, "%s: %s: ", dt_msg_prefix, kind);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
}

void dt_error(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        say("error", fmt, ap);
        va_end(ap);
}

void dt_note(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        say("note", fmt, ap);
        va_end(ap);
}

static void (*fatal_fn)(void *);
static void *fatal_arg;

void dt_on_fatal(void (*fn)(void *), void *arg)
{
        fatal_fn = fn;
        fatal_arg = arg;
}

_Noreturn void dt_die(int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        say("fatal", fmt, ap);
        va_end(ap);
        fflush(stderr);
        /* taken once: a second fatal error (inside it, or on another thread) ends the job at once */
        void (*fn)(void *) = __atomic_exchange_n(&fatal_fn, NULL, __ATOMIC_SEQ_CST);
        if (fn) fn(fatal_arg);
        int inited = 0, fin = 0, size = 1;
        MPI_Initialized(&inited);
        MPI_Finalized(&fin);
        if (inited && !fin) {
                MPI_Comm_size(MPI_COMM_WORLD, &size);
                if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
                MPI_Finalize();
        }
        exit(code);
}

void *dt_malloc(size_t n)
{
        void *p = malloc(n ? n : 1);
        if (!p) dt_die(DT_EXIT_RUNTIME, "out of memory allocating %zu bytes", n);
        return p;
}

void *dt_calloc(size_t n, size_t size)
{
        void *p = calloc(n ? n : 1, size ? size : 1);
        if (!p) dt_die(DT_EXIT_RUNTIME, "out of memory allocating %zu x %zu bytes", n, size);
        return p;
}

void *dt_realloc(void *p, size_t n)
{
        void *q = realloc(p, n ? n : 1);
        if (!q) dt_die(DT_EXIT_RUNTIME, "out of memory allocating %zu bytes", n);
        return q;
}

char *dt_strdup(const char *s)
{
        size_t n = strlen(s) + 1;
        char *p = dt_malloc(n);
        memcpy(p, s, n);
        return p;
}

float *dt_falloc(size_t n)
{
        size_t bytes;
        if (!dt_mul_ok(n ? n : 1, sizeof(float), &bytes))
                dt_die(DT_EXIT_RUNTIME, "allocation of %zu floats overflows", n);
        bytes = (bytes + 63) & ~(size_t)63;
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes))
                dt_die(DT_EXIT_RUNTIME, "out of memory allocating %zu bytes", bytes);
        memset(p, 0, bytes);
        return p;
}

int dt_mul_ok(size_t a, size_t b, size_t *out)
{
        return !__builtin_mul_overflow(a, b, out);
}

int dt_add_ok(size_t a, size_t b, size_t *out)
{
        return !__builtin_add_overflow(a, b, out);
}

int dt_mkdir_p(const char *path, mode_t mode, char *failed, size_t len)
{
        char buf[DT_PATH_MAX];
        if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf || !*path) {
                if (failed) snprintf(failed, len, "%s", path);
                errno = *path ? ENAMETOOLONG : ENOENT;
                return -1;
        }
        /* each prefix that ends before a '/', then the whole path */
        for (char *p = buf + 1;; p++) {
                if (*p != '/' && *p) continue;
                char c = *p;
                *p = 0;
                if (mkdir(buf, mode) && errno != EEXIST) {
                        int e = errno;
                        if (failed) snprintf(failed, len, "%s", buf);
                        errno = e;
                        return -1;
                }
                *p = c;
                if (!c) return 0;
        }
}

double dt_now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dt_thread_cpu(void)
{
        struct timespec ts;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return dt_now();
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

_Noreturn void dt_assert_fail(const char *expr, const char *file, int line)
{
        fprintf(stderr, "%s: internal error: %s:%d: assertion '%s' failed\n", dt_msg_prefix, file, line, expr);
        abort();
}

void dt_json_str(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
                else if (c < 0x20) fprintf(f, "\\u%04x", c);
                else fputc(c, f);
        }
        fputc('"', f);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb; (void)flag; (void)ftw;
        return remove(path) && errno != ENOENT ? -1 : 0;
}

int dt_rm_rf(const char *path)
{
        return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int dt_write_full(int fd, const void *p, size_t n)
{
        const char *b = p;
        while (n) {
                ssize_t k = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
                if (k < 0) {
                        if (errno == EINTR) continue;
                        return -1;
                }
                b += k;
                n -= (size_t)k;
        }
        return 0;
}
