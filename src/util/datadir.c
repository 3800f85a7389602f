/* util/datadir.c - where the bundled files are (see datadir.h). */
#include "util/datadir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/common.h"

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

const char *dt_spec_path(const char *path, char *out, size_t n, int note)
{
        if (!path || !*path || path[0] == '/' || !access(path, F_OK) || errno != ENOENT) return path;
        /* "lenet.yaml" is models/lenet.yaml, "models/lenet.yaml" itself; "./x.yaml" or "dir/x.yaml"
         * name a place of the user's */
        char rel[DT_PATH_MAX], found[DT_PATH_MAX];
        if (!strchr(path, '/')) {
                if (snprintf(rel, sizeof rel, "models/%s", path) >= (int)sizeof rel) return path;
        } else if (!strncmp(path, "models/", 7) && !strstr(path, "..")) {
                snprintf(rel, sizeof rel, "%s", path);
        } else {
                return path;
        }
        if (!dt_bundled(rel, found, sizeof found)) return path;
        char real[PATH_MAX];
        snprintf(out, n, "%s", realpath(found, real) ? real : found);
        if (note) dt_note("%s: not found here; using the bundled %s", path, out);
        return out;
}
