/* util/datadir.c - where the bundled files are (see datadir.h). */
#include "util/datadir.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef DT_PKGDATADIR
#define DT_PKGDATADIR "/usr/local/share/dtrain"
#endif

const char *dt_bundled(const char *rel, char *out, size_t n)
{
        if (!access(rel, R_OK)) {
                snprintf(out, n, "%s", rel);
                return out;
        }
        char exe[4096];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k > 0) {
                exe[k] = 0;
                char *slash = strrchr(exe, '/');
                if (slash) {
                        *slash = 0;
                        if (snprintf(out, n, "%s/../share/dtrain/%s", exe, rel) < (int)n && !access(out, R_OK)) return out;
                }
        }
        if (snprintf(out, n, "%s/%s", DT_PKGDATADIR, rel) < (int)n && !access(out, R_OK)) return out;
        return NULL;
}
