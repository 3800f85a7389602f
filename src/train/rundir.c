/* train/rundir.c - the run directory's lock (see rundir.h). */
#include "train/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"

/* One run per directory: two runs into the same --out would delete each other's checkpoint
 * temporaries and interleave metrics. flock is released by the kernel when the process dies, so a
 * crashed run never leaves a stale lock. The file names the holder for the message. */
int dt_run_lock(const char *dir, int *lock_fd)
{
        char p[DT_PATH_MAX + 16];
        if (snprintf(p, sizeof p, "%s/.lock", dir) >= (int)sizeof p) {
                dt_error("%s: path too long", dir);
                return DT_EXIT_DATA;
        }
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
                dt_error("cannot create %s: %s", p, strerror(errno));
                return DT_EXIT_DATA;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                char who[64] = "";
                ssize_t k = pread(fd, who, sizeof who - 1, 0);
                who[k > 0 ? k : 0] = 0;
                who[strcspn(who, "\n")] = 0;
                dt_error("%s is in use by another dtrain run%s%s; wait for it to finish or choose another --out",
                         dir, who[0] ? ", " : "", who);
                close(fd);
                return DT_EXIT_USAGE;
        }
        char who[64];
        int n = snprintf(who, sizeof who, "pid %ld\n", (long)getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, who, (size_t)n, 0) != n) { /* only the message needs it */ }
        *lock_fd = fd;
        return 0;
}

/* What a run writes into its directory (train.c, ckpt.c, tbevents.c). Not overrides.yaml: a run
 * writes it before any of these, so alone it is a run that never trained, which a fresh run
 * replaces (and --resume starts fresh from) without --force. */
static int is_output(const char *name)
{
        return !strcmp(name, "checkpoints") || !strcmp(name, "metrics.jsonl") ||
               !strcmp(name, "model.safetensors") || !strcmp(name, "plan.txt") ||
               !strncmp(name, "events.out.tfevents.", 20);
}

int dt_run_outputs(const char *dir, char *found, size_t len)
{
        DIR *d = opendir(dir);
        if (len) found[0] = 0;
        if (!d) return 0;
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!is_output(e->d_name)) continue;
                size_t k = strlen(found);
                if (++n <= 3 && k < len) snprintf(found + k, len - k, "%s%.60s", k ? ", " : "", e->d_name);
        }
        closedir(d);
        if (n > 3) {
                size_t k = strlen(found);
                if (k < len) snprintf(found + k, len - k, ", ...");
        }
        return n;
}

int dt_run_fresh(const char *dir, int force, int quiet)
{
        char found[256];
        if (!dt_run_outputs(dir, found, sizeof found)) return 0;      /* unreadable: reported by what writes */
        if (!force) {
                dt_error("%s holds a previous run (%s); --resume continues it, --force or another --out starts over",
                         dir, found);
                return DT_EXIT_USAGE;
        }
        DIR *d = opendir(dir);
        if (!d) return 0;
        char p[DT_PATH_MAX + 300];
        int rc = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!is_output(e->d_name)) continue;
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                if (dt_rm_rf(p) && errno != ENOENT) {
                        dt_error("--force: cannot remove %s: %s", p, strerror(errno));
                        rc = DT_EXIT_DATA;
                }
        }
        closedir(d);
        if (!rc && !quiet) dt_note("--force: removed the previous run's outputs in %s", dir);
        return rc;
}
