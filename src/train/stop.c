/* train/stop.c - counted stop signals (see stop.h). */
#include "train/stop.h"

#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t first, count;

static void on_signal(int s)
{
        if (!first) first = s;
        if (count < 1000) count++;
        if (count >= 2) {       /* from the third on, the default action: the process ends at once */
                struct sigaction dfl = { 0 };
                dfl.sa_handler = SIG_DFL;
                sigaction(SIGINT, &dfl, NULL);
                sigaction(SIGTERM, &dfl, NULL);
                sigaction(SIGUSR1, &dfl, NULL);
        }
}

void dt_stop_install(void)
{
        struct sigaction sa = { 0 };
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGUSR1, &sa, NULL);
}

int dt_stop_signal(void) { return first; }
int dt_stop_count(void) { return count; }

const char *dt_signal_name(int sig)
{
        static const struct { int sig; const char *name; } names[] = {
                { SIGINT, "SIGINT" }, { SIGTERM, "SIGTERM" }, { SIGUSR1, "SIGUSR1" }, { SIGUSR2, "SIGUSR2" },
                { SIGHUP, "SIGHUP" }, { SIGQUIT, "SIGQUIT" }, { SIGKILL, "SIGKILL" }, { SIGSTOP, "SIGSTOP" },
                { SIGCONT, "SIGCONT" }, { SIGSEGV, "SIGSEGV" }, { SIGABRT, "SIGABRT" }, { SIGPIPE, "SIGPIPE" },
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                if (names[i].sig == sig) return names[i].name;
        static char buf[24];
        snprintf(buf, sizeof buf, "signal %d", sig);
        return buf;
}
