/* util/rss.c - resident memory from /proc/self/status (see rss.h). */
#include "util/rss.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static size_t status_kb(const char *key)
{
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        size_t n = strlen(key), kb = 0;
        if (!f) return 0;
        while (fgets(line, sizeof line, f))
                if (!strncmp(line, key, n) && sscanf(line + n, " %zu", &kb) == 1) break;
        fclose(f);
        return kb * 1024;
}

size_t dt_rss_now(void) { return status_kb("VmRSS:"); }

size_t dt_rss_peak(void)
{
        size_t b = status_kb("VmHWM:");
        if (b) return b;
        struct rusage ru;
        return getrusage(RUSAGE_SELF, &ru) ? 0 : (size_t)ru.ru_maxrss * 1024;
}

int dt_rss_reset_peak(void)
{
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (!f) return -1;
        int ok = fputs("5", f) >= 0;
        return fclose(f) == 0 && ok ? 0 : -1;
}
