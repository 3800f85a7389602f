/* util/trace.c - the trace recorder (see trace.h): events kept in a growing array, written as
 * {"traceEvents":[...]} at the end; names are copied, so callers may pass temporaries. */
#include "util/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/common.h"

int dt_trace_on;

typedef struct ev {
        const char *cat;        /* a string literal */
        char name[56];
        double ts, dur;         /* microseconds; dur < 0: an instant event */
} ev;

static struct {
        char path[DT_PATH_MAX];
        int rank, size;
        ev *e;
        size_t n, cap;
        int full;               /* the cap was reached: later events are dropped, and said so */
        double base;            /* clock at open: timestamps start near 0 */
} T;

/* 4 M events (~300 MiB) at most: a long run traced by mistake must not eat the memory */
#define TRACE_MAX_EVENTS (4u << 20)

static double clock_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

void dt_trace_path(const char *path, int rank, int size, char *out, unsigned long n)
{
        if (size <= 1) {
                snprintf(out, n, "%s", path);
                return;
        }
        const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
        if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1))
                snprintf(out, n, "%s.rank%d", path, rank);
        else
                snprintf(out, n, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
}

int dt_trace_open(const char *path, int rank, int size)
{
        memset(&T, 0, sizeof T);
        dt_trace_path(path, rank, size, T.path, sizeof T.path);
        FILE *f = fopen(T.path, "w");   /* created now: a bad path stops the run before it trains */
        if (!f) return -1;
        fclose(f);
        T.rank = rank;
        T.size = size;
        T.base = clock_us();
        dt_trace_on = 1;
        return 0;
}

double dt_trace_t(void)
{
        return dt_trace_on ? clock_us() - T.base : 0;
}

static ev *slot(void)
{
        if (T.n == T.cap) {
                if (T.cap >= TRACE_MAX_EVENTS) {
                        T.full = 1;
                        return NULL;
                }
                T.cap = T.cap ? 2 * T.cap : 4096;
                T.e = dt_realloc(T.e, T.cap * sizeof *T.e);
        }
        return &T.e[T.n++];
}

static void name_into(ev *e, const char *name, const char *name2)
{
        if (name2) snprintf(e->name, sizeof e->name, "%s %s", name, name2);
        else snprintf(e->name, sizeof e->name, "%s", name);
}

void dt_trace_end(const char *cat, const char *name, const char *name2, double t0)
{
        if (!dt_trace_on) return;
        double now = clock_us() - T.base;
        ev *e = slot();
        if (!e) return;
        e->cat = cat;
        name_into(e, name, name2);
        e->ts = t0;
        e->dur = now - t0;
}

void dt_trace_mark(const char *cat, const char *name)
{
        if (!dt_trace_on) return;
        ev *e = slot();
        if (!e) return;
        e->cat = cat;
        name_into(e, name, NULL);
        e->ts = clock_us() - T.base;
        e->dur = -1;
}


int dt_trace_close(void)
{
        if (!dt_trace_on) return 0;
        dt_trace_on = 0;
        FILE *f = fopen(T.path, "w");
        if (!f) {
                free(T.e);
                return -1;
        }
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"dtrain\",\"rank\":%d,\"ranks\":%d,"
                "\"truncated\":%s},\n\"traceEvents\":[\n", T.rank, T.size, T.full ? "true" : "false");
        fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n",
                T.rank, T.rank);
        fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n",
                T.rank, T.rank);
        fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"train\"}}", T.rank);
        for (size_t i = 0; i < T.n; i++) {
                const ev *e = &T.e[i];
                fputs(",\n{\"name\":", f);
                dt_json_str(f, e->name);
                fprintf(f, ",\"cat\":\"%s\",", e->cat);
                if (e->dur >= 0)
                        fprintf(f, "\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":0}", e->ts, e->dur, T.rank);
                else
                        fprintf(f, "\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,\"tid\":0}", e->ts, T.rank);
        }
        fputs("\n]}\n", f);
        free(T.e);
        T.e = NULL;
        int bad = ferror(f);
        if (fclose(f) || bad) return -1;
        return 0;
}
