/* data/datafind.c - where a data file is: the spec's directory, $DTRAIN_DATA_PATH, the system's
 * datasets, the current directory; and, when it is nowhere, the nearest name that exists. */
#include "data/data_int.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"
#include "util/yaml_util.h"

/* ---- finding files ---- */

/* a readable regular file, or with dirs a readable directory too */
int dt_data_readable(const char *path, int dirs)
{
        struct stat st;
        return stat(path, &st) == 0 && (S_ISREG(st.st_mode) || (dirs && S_ISDIR(st.st_mode))) &&
               access(path, R_OK) == 0;
}

static int try_in(const char *dir, size_t dirlen, const char *rel, char *out, size_t outlen, int dirs)
{
        if (!dirlen) return -1;
        int k = snprintf(out, outlen, "%.*s/%s", (int)dirlen, dir, rel);
        if (k < 0 || (size_t)k >= outlen) return -1;
        return dt_data_readable(out, dirs) ? 0 : -1;
}

static int resolve(const char *dir, const char *rel, char *out, size_t outlen, int dirs)
{
        if (!rel || !*rel || !outlen) return -1;
        if (rel[0] == '/') {
                if (strlen(rel) >= outlen || !dt_data_readable(rel, dirs)) return -1;
                strcpy(out, rel);
                return 0;
        }
        if (!dir || !*dir) dir = ".";
        if (!try_in(dir, strlen(dir), rel, out, outlen, dirs)) return 0;
        const char *env = getenv("DTRAIN_DATA_PATH");
        for (const char *p = env; p && *p;) {
                size_t n = strcspn(p, ":");
                if (!try_in(p, n, rel, out, outlen, dirs)) return 0;  /* empty entries are skipped */
                p += n;
                if (*p == ':') p++;
        }
        if (!try_in(SYSTEM_DATA_DIR, strlen(SYSTEM_DATA_DIR), rel, out, outlen, dirs)) return 0;
        if (outlen) out[0] = 0;
        return -1;
}

int dt_data_resolve(const char *dir, const char *rel, char *out, size_t outlen)
{
        return resolve(dir, rel, out, outlen, 0);
}

int dt_data_resolve_any(const char *dir, const char *rel, char *out, size_t outlen)
{
        return resolve(dir, rel, out, outlen, 1);
}

/* The entry of directory dir nearest to name by edit distance (dt_did_you_mean), into out. */
static int near_entry(const char *dir, const char *name, char *out, size_t outlen)
{
        DIR *d = opendir(dir);
        if (!d) return -1;
        enum { MAXE = 4096 };
        char **names = dt_malloc(MAXE * sizeof *names);
        int n = 0;
        for (struct dirent *e; n < MAXE && (e = readdir(d));)
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = dt_strdup(e->d_name);
        closedir(d);
        const char *s = dt_did_you_mean(name, (const char *const *)names, n);
        int rc = s && strlen(s) < outlen ? (strcpy(out, s), 0) : -1;
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        return rc;
}

/* A path near rel under base that exists: each component of rel that does not exist there is
 * replaced by the nearest entry of its directory ("fashion-mnst/train-imags-idx3-ubyte.gz" ->
 * "fashion-mnist/train-images-idx3-ubyte.gz"). out gets the corrected rel; -1 when a component
 * has no near entry or nothing needed correcting. */
static int near_path(const char *base, const char *rel, int dirs, char *out, size_t outlen)
{
        char cur[DT_PATH_MAX], fixed[DT_PATH_MAX] = "", comp[256], best[256];
        int changed = 0;
        snprintf(cur, sizeof cur, "%s", *base ? base : "/");
        for (const char *p = rel; *p;) {
                size_t n = strcspn(p, "/");
                if (n >= sizeof comp) return -1;
                memcpy(comp, p, n);
                comp[n] = 0;
                p += n;
                while (*p == '/') p++;
                if (!n || !strcmp(comp, ".") || !strcmp(comp, "..")) {
                        if (n && strlen(cur) + n + 2 < sizeof cur) strcat(strcat(cur, "/"), comp);
                        if (n && strlen(fixed) + n + 2 < sizeof fixed) strcat(strcat(fixed, comp), "/");
                        continue;
                }
                char next[2 * DT_PATH_MAX];
                snprintf(next, sizeof next, "%s/%s", cur, comp);
                struct stat st;
                if (stat(next, &st)) {
                        if (near_entry(cur, comp, best, sizeof best)) return -1;
                        snprintf(comp, sizeof comp, "%s", best);
                        changed = 1;
                }
                if (strlen(cur) + strlen(comp) + 2 >= sizeof cur || strlen(fixed) + strlen(comp) + 2 >= sizeof fixed)
                        return -1;
                strcat(strcat(cur, "/"), comp);
                strcat(strcat(fixed, comp), *p ? "/" : "");
        }
        size_t k = strlen(fixed);
        if (!changed || !dt_data_readable(cur, dirs) || k >= outlen) return -1;
        memcpy(out, fixed, k + 1);
        return 0;
}

/* A file near a missing one, in the places a relative path is looked for (dir: the spec's). */
static int suggest(const char *dir, const char *path, int dirs, char *out, size_t outlen)
{
        if (path[0] == '/') {
                if (outlen < 2 || near_path("", path + 1, dirs, out + 1, outlen - 1)) return -1;
                out[0] = '/';
                return 0;
        }
        if (dir && *dir && !near_path(dir, path, dirs, out, outlen)) return 0;
        const char *env = getenv("DTRAIN_DATA_PATH");
        for (const char *p = env; p && *p;) {
                size_t n = strcspn(p, ":");
                char d[DT_PATH_MAX];
                if (n && n < sizeof d) {
                        memcpy(d, p, n);
                        d[n] = 0;
                        if (!near_path(d, path, dirs, out, outlen)) return 0;
                }
                p += n;
                if (*p == ':') p++;
        }
        if (!near_path(SYSTEM_DATA_DIR, path, dirs, out, outlen)) return 0;
        return near_path(".", path, dirs, out, outlen);
}

/* The spec already resolved paths it could find; a relative path left as written gets one more
 * search from the working directory, so hand-made specs (tests) work too. Not found: the places
 * looked in and, when one is near, the file the user may have meant. */
int dt_data_locate(const char *path, const char *dir, char *out, size_t outlen, int dirs, char *msg, size_t msglen)
{
        if (!resolve(".", path, out, outlen, dirs)) return 0;
        char near[DT_PATH_MAX], hint[DT_PATH_MAX + 32] = "";
        if (!suggest(dir, path, dirs, near, sizeof near)) snprintf(hint, sizeof hint, "; did you mean '%s'?", near);
        if (path[0] == '/') {
                snprintf(msg, msglen, "cannot find data file '%s' (%s)%s", path,
                         access(path, F_OK) ? strerror(errno) : dirs ? "not a readable file or directory"
                                                                 : "not a readable file", hint);
        } else {
                const char *env = getenv("DTRAIN_DATA_PATH");
                char cwd[DT_PATH_MAX];
                if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
                snprintf(msg, msglen, "cannot find data file '%s' (looked in: the model file's directory%s%s, "
                         "$DTRAIN_DATA_PATH%s%s, %s, the current directory %s)%s", path, dir && *dir ? " " : "",
                         dir && *dir ? dir : "", env && *env ? "=" : " (unset)", env && *env ? env : "",
                         SYSTEM_DATA_DIR, cwd, hint);
        }
        return -1;
}

int dt_dataset_missing(const dt_source_spec *src)
{
        char buf[DT_PATH_MAX];
        if (src->format == DT_FMT_SYNTHETIC) return 0;
        if (resolve(".", src->images, buf, sizeof buf, src->format == DT_FMT_TEXT)) return 1;
        if (src->format != DT_FMT_CSV && src->format != DT_FMT_TEXT &&
            dt_data_resolve(".", src->labels, buf, sizeof buf))
                return 2;
        return 0;
}

