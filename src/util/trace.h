/* util/trace.h - a timeline of one process in Chrome's trace-event format (JSON, loadable in
 * Perfetto or chrome://tracing): complete events ("ph":"X") for spans, instant events for marks,
 * the rank as the process id. Recording is off until dt_trace_open; then each span costs a clock
 * read and a slot in memory, and the file is written once by dt_trace_close. */
#ifndef DT_TRACE_H
#define DT_TRACE_H

extern int dt_trace_on;

/* Starts recording for 'rank' of 'size' into path (written at dt_trace_close). 0, or -1 with errno
 * when path cannot be created (checked now, so a bad path fails before training). */
int dt_trace_open(const char *path, int rank, int size);
/* Microseconds on the trace's clock; 0 when recording is off (so callers need no branch). */
double dt_trace_t(void);
/* A span [t0, now) in category cat ("forward", "backward", "optimizer", "data", "comm", "wait",
 * "eval", "checkpoint", "step", "shard"), named name (and name2 after a space when not NULL). */
void dt_trace_end(const char *cat, const char *name, const char *name2, double t0);
/* A mark at now (e.g. a nonblocking collective issued). */
void dt_trace_mark(const char *cat, const char *name);
/* Writes the file and stops recording. 0, or -1 with errno. */
int dt_trace_close(void);
/* The file name rank r of size n writes for path: path itself for one rank, else .rankR inserted
 * before the extension (trace.json -> trace.rank1.json). */
void dt_trace_path(const char *path, int rank, int size, char *out, unsigned long n);

#endif
