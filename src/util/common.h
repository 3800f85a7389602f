/* util/common.h - shared basics: exit codes, diagnostics list, checked allocation and arithmetic. */
#ifndef DT_COMMON_H
#define DT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/types.h>

/* Exit status contract (man dtrain(1), EXIT STATUS). */
enum {
        DT_EXIT_OK = 0,
        DT_EXIT_RUNTIME = 1,  /* runtime failure (internal, MPI, device) */
        DT_EXIT_USAGE = 2,    /* bad usage, spec or flags */
        DT_EXIT_DATA = 3,     /* data or I/O error */
        DT_EXIT_CKPT = 4,     /* invalid or incompatible checkpoint */
        DT_EXIT_NUMERIC = 5,  /* NaN/Inf in loss or gradients */
        DT_EXIT_PEER = 6,     /* peer failure or collective timeout */
        DT_EXIT_SIGNAL = 75,  /* stopped by a signal after writing a checkpoint */
};

#define DT_PATH_MAX 4096
#define DT_NAME_MAX 64

/* ---- diagnostics: user mistakes collected, printed at once by main ---- */
typedef struct dt_pos { int line, col; } dt_pos; /* 1-based source position; 0 = unknown */

typedef struct dt_diag_msg {
        char *file;   /* may be NULL */
        int line;     /* 1-based; 0 = none */
        int col;      /* 1-based; 0 = none */
        char *text;   /* "unknown key 'x'; did you mean 'y'?" (no "error:" prefix) */
} dt_diag_msg;

typedef struct dt_diag {
        dt_diag_msg *msgs;
        int n, cap;
} dt_diag;

/* Adds a message. A position at or past DT_ARG_LINE names a command-line argument (--set) rather
 * than a line of file: it is reported as that argument alone ("--set KEY=VALUE: error: ..."). */
void dt_diag_add(dt_diag *d, const char *file, int line, int col, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

/* Nodes a command-line argument put into a spec carry 0-based line DT_ARG_LINE + k in their marks
 * (a spec file is at most 4 MiB, so no line of one gets there), which every later message about
 * them (1-based, DT_ARG_LINE + k + 1) turns back into the argument's name. */
#define DT_ARG_LINE (1 << 30)
/* Registers what messages at the returned 0-based mark line name (the name is copied). */
int dt_argpos_add(const char *name);
/* The name a 1-based line stands for, or NULL for a line of a file. */
const char *dt_argpos_name(int line);
/* "file:line:col" or, for a line dt_argpos_add gave, the argument's name; in buf. */
const char *dt_pos_str(char *buf, size_t len, const char *file, int line, int col);
/* "line N" or, for a line dt_argpos_add gave, the argument's name ("first at ..." in messages). */
const char *dt_line_str(char *buf, size_t len, int line);
/* Prints "file:line:col: error: text" lines sorted by file, line, col, then a summary line
 * "dtrain: N errors in M files; nothing was run" when n > 0. */
void dt_diag_print(const dt_diag *d, FILE *f);
void dt_diag_free(dt_diag *d);

/* s as a JSON string: quotes, backslashes and control characters escaped */
void dt_json_str(FILE *f, const char *s);

/* ---- messages: "dtrain: error: ..." (prefix names the rank under MPI) ---- */
extern char dt_msg_prefix[64];  /* "dtrain" or "dtrain[rank 3/8]" */
extern const char *dt_argv0;    /* how the user invoked dtrain (main's argv[0]), for commands we print */
void dt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PREFIX: fatal: ..." and ends the job with code (MPI_Abort when size > 1). */
_Noreturn void dt_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One function dt_die calls after its message and before ending the job (the checkpoint writer
 * finishing what was requested); NULL removes it. Called at most once. */
void dt_on_fatal(void (*fn)(void *), void *arg);

/* ---- allocation: out of memory is fatal (exit 1) with the size asked ---- */
void *dt_malloc(size_t n);
void *dt_calloc(size_t n, size_t size);
void *dt_realloc(void *p, size_t n);
char *dt_strdup(const char *s);
/* vsnprintf into a new string of the right size (dt_malloc). */
char *dt_vstrfmt(const char *fmt, va_list ap);
/* 64-byte aligned, for SIMD kernels; free with free(). */
float *dt_falloc(size_t n);

/* ---- checked arithmetic: return 0 on overflow ---- */
int dt_mul_ok(size_t a, size_t b, size_t *out);
int dt_add_ok(size_t a, size_t b, size_t *out);

/* ---- files ---- */
/* mkdir -p: makes path and each missing parent with mode (less the umask); parts that exist are
 * fine, and whether path itself ends up a directory is the caller's to check. Returns 0, or -1
 * with errno set and, when failed is not NULL, the prefix that could not be made in failed
 * (ENAMETOOLONG with path itself when path does not fit DT_PATH_MAX). */
int dt_mkdir_p(const char *path, mode_t mode, char *failed, size_t len);
/* rm -rf: path and, for a directory, everything under it, without following links; an entry
 * that is gone already is fine. 0, or -1 with errno set (ENOENT: path itself was not there). */
int dt_rm_rf(const char *path);
/* Writes all n bytes of p to fd (short writes and EINTR retried; at most 1 GiB a call). 0, or -1
 * with errno set. */
int dt_write_full(int fd, const void *p, size_t n);

/* Wall clock in seconds (monotonic). */
double dt_now(void);
/* This thread's CPU seconds (dt_now where the clock is missing): a measurement that the machine's
 * other work preempts is not slower by it. */
double dt_thread_cpu(void);

#define DT_ASSERT(x) do { if (!(x)) dt_assert_fail(#x, __FILE__, __LINE__); } while (0)
_Noreturn void dt_assert_fail(const char *expr, const char *file, int line);

#define DT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
