/* train/rundir.c - the run directory's lock (see rundir.h). */
#include "train/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
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
