/* train/ckpt_find.c - finding checkpoints: the pointer files (latest, best), what a user's path
 * names (a checkpoint directory, a pointer, a checkpoints/ directory or a run directory), and the
 * step directories of a run newest first, for a resume whose 'latest' is gone. */
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/common.h"

/* Reads pointer file lp ("step-NNNNNNNN") into path, the directory it names beside it. 1 found,
 * 0 when lp does not exist, -1 with err when it is broken or names no directory. */
int dt_ckpt_pointer(const char *lp, char *path, size_t len, char *err, size_t errlen)
{
        int fd = open(lp, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT || errno == ENOTDIR) return 0;
                snprintf(err, errlen, "%s: cannot open: %s", lp, strerror(errno));
                return -1;
        }
        char buf[80];
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k < 0) {
                snprintf(err, errlen, "%s: read error: %s", lp, strerror(errno));
                return -1;
        }
        buf[k] = 0;
        if (k && buf[k - 1] == '\n') buf[--k] = 0;
        size_t digits = strspn(buf + (strncmp(buf, "step-", 5) ? 0 : 5), "0123456789");
        if (strncmp(buf, "step-", 5) || digits == 0 || buf[5 + digits]) {
                snprintf(err, errlen, "%s: invalid content '%.40s' (expected 'step-NNNNNNNN')", lp, buf);
                return -1;
        }
        const char *slash = strrchr(lp, '/');
        int dl = slash ? (int)(slash - lp) : 1;
        if (snprintf(path, len, "%.*s/%s", dl, slash ? lp : ".", buf) >= (int)len) {
                snprintf(err, errlen, "%s: path too long", lp);
                return -1;
        }
        struct stat st;
        if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s: names '%s', which is not a checkpoint directory", lp, buf);
                return -1;
        }
        return 1;
}

int dt_ckpt_latest(const char *outdir, char *path, size_t len, char *err, size_t errlen)
{
        return dt_ckpt_named(outdir, "latest", path, len, err, errlen);
}

int dt_ckpt_named(const char *outdir, const char *name, char *path, size_t len, char *err, size_t errlen)
{
        char lp[DT_PATH_MAX];
        if (snprintf(lp, sizeof lp, "%s/checkpoints/%s", outdir, name) >= (int)sizeof lp) {
                snprintf(err, errlen, "%s: path too long", outdir);
                return -1;
        }
        return dt_ckpt_pointer(lp, path, len, err, errlen);
}

static int has(const char *dir, const char *name, int want_dir)
{
        char p[DT_PATH_MAX + 64];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p || stat(p, &st)) return 0;
        return want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

int dt_ckpt_resolve(const char *arg, char *dir, size_t len, char *err, size_t errlen)
{
        struct stat st;
        char p[DT_PATH_MAX + 64];
        if (stat(arg, &st)) {
                snprintf(err, errlen, "%s: %s", arg, strerror(errno));
                return -1;
        }
        if (S_ISREG(st.st_mode)) {      /* checkpoints/latest or checkpoints/best */
                int r = dt_ckpt_pointer(arg, dir, len, err, errlen);
                if (r <= 0 && st.st_size > 80)
                        snprintf(err, errlen, "%s: a file that is not a checkpoint pointer (latest, best); a "
                                 "checkpoint is a directory (step-NNNNNNNN) or a pointer to one", arg);
                return r > 0 ? 0 : -1;
        }
        if (!S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "%s: neither a checkpoint directory nor a pointer to one", arg);
                return -1;
        }
        if (has(arg, "state.json", 0)) {        /* a checkpoint directory itself */
                if (snprintf(dir, len, "%s", arg) >= (int)len) goto toolong;
                return 0;
        }
        /* a checkpoints/ directory, or a run directory holding one: the latest */
        const char *ck = has(arg, "latest", 0) ? "" : has(arg, "checkpoints", 1) ? "/checkpoints" : NULL;
        if (ck) {
                if (snprintf(p, sizeof p, "%s%s/latest", arg, ck) >= (int)sizeof p) goto toolong;
                int r = dt_ckpt_pointer(p, dir, len, err, errlen);
                if (r == 0) snprintf(err, errlen, "%s%s: no 'latest' checkpoint pointer", arg, ck);
                return r > 0 ? 0 : -1;
        }
        snprintf(err, errlen, "%s: neither a run directory with checkpoints/latest, a checkpoints directory, a "
                 "checkpoint directory (no state.json) nor a pointer (latest, best)", arg);
        return -1;
toolong:
        snprintf(err, errlen, "%s: path too long", arg);
        return -1;
}

int dt_ckpt_weights_file(const char *arg, char *file, size_t len, char *err, size_t errlen)
{
        struct stat st;
        /* a weights file is taken as it is; a pointer is a small text file, never a safetensors */
        if (!stat(arg, &st) && S_ISREG(st.st_mode) && st.st_size > 80) {
                if (snprintf(file, len, "%s", arg) >= (int)len) goto toolong;
                return 0;
        }
        if (stat(arg, &st)) {   /* the reader reports a missing file in its words */
                if (snprintf(file, len, "%s", arg) >= (int)len) goto toolong;
                return 0;
        }
        char dir[DT_PATH_MAX];
        if (dt_ckpt_resolve(arg, dir, sizeof dir, err, errlen) < 0) return -1;
        if (snprintf(file, len, "%s/model.safetensors", dir) >= (int)len) goto toolong;
        return 0;
toolong:
        snprintf(err, errlen, "%s: path too long", arg);
        return -1;
}

static int cmp_desc(const void *a, const void *b)
{
        long x = *(const long *)a, y = *(const long *)b;
        return (x < y) - (x > y);
}

int dt_ckpt_steps(const char *outdir, long *steps, int max)
{
        char p[DT_PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/checkpoints", outdir);
        DIR *d = opendir(p);
        if (!d) return 0;
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < max) {
                const char *s = e->d_name;
                if (strncmp(s, "step-", 5) || !s[5] || strspn(s + 5, "0123456789") != strlen(s + 5) ||
                    strlen(s + 5) > 12)
                        continue;
                if (has(p, s, 1)) steps[n++] = strtol(s + 5, NULL, 10);
        }
        closedir(d);
        qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
        return n;
}
