/* train/stop.h - the stop signals of a run (SIGINT, SIGTERM, SIGUSR1), counted: the first asks the
 * run to stop after the step in flight and commit a checkpoint, the second to skip what is left
 * after the commit (the evaluation), a third ends the process at once (the default action), so a
 * user is never stuck behind a long evaluation. */
#ifndef DT_STOP_H
#define DT_STOP_H

/* Installs the handlers (once per process). */
void dt_stop_install(void);
/* The first stop signal's number, 0 while none came. */
int dt_stop_signal(void);
/* How many stop signals came. */
int dt_stop_count(void);
/* "SIGINT", "SIGTERM", "SIGUSR1", ... ("signal N" for others; a static buffer for those). */
const char *dt_signal_name(int sig);

#endif
