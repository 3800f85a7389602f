/* train/ckpt_fs.c - the file-system steps of a checkpoint: paths, fsync of files and directories,
 * removal, whole writes, atomic small files, a file's crc32. */
#include "train/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/ckpt_int.h"
#include "train/safetensors.h"
#include "util/fault.h"

/* ---- file system helpers ---- */

/* out = dir/name; -1 when it does not fit */
int dt_ck_join(char *out, size_t len, const char *dir, const char *name)
{
        int k = snprintf(out, len, "%s/%s", dir, name);
        return k < 0 || (size_t)k >= len ? -1 : 0;
}

int dt_ck_fsync_dir(const char *dir)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) return -1;
        int rc = fsync(fd);
        close(fd);
        return rc;
}


int dt_ck_mkdir_p(const char *path, char *err, size_t errlen)
{
        char failed[DT_PATH_MAX];
        if (strlen(path) >= DT_PATH_MAX) {
                snprintf(err, errlen, "%s: path too long", path);
                return -1;
        }
        if (dt_mkdir_p(path, 0755, failed, sizeof failed)) {
                snprintf(err, errlen, "cannot create directory '%s': %s", failed, strerror(errno));
                return -1;
        }
        struct stat st;
        if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "'%s' is not a directory", path);
                return -1;
        }
        return 0;
}

/* writes and fsyncs path (not atomically) */
int dt_ck_write_sync(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
                return -1;
        }
        if (dt_write_full(fd, data, len)) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                close(fd);
                return -1;
        }
        return dt_st_sync_close(fd, path, err, errlen);
}

/* dir and base of path ("." when it has no slash) */
void dt_ck_split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
        const char *s = strrchr(path, '/');
        if (!s) {
                snprintf(dir, dirlen, ".");
                *base = path;
        } else {
                snprintf(dir, dirlen, "%.*s", s == path ? 1 : (int)(s - path), path);
                *base = s + 1;
        }
}

int dt_ck_file_crc(const char *path, uint32_t *out)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        static unsigned char buf[1 << 16];
        uLong crc = crc32(0L, Z_NULL, 0);
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) != 0) {
                if (k < 0) {
                        if (errno == EINTR) continue;
                        close(fd);
                        return -1;
                }
                crc = crc32(crc, buf, (uInt)k);
        }
        close(fd);
        *out = (uint32_t)crc;
        return 0;
}


int dt_ckpt_crc_range(const char *path, size_t lo, size_t hi, uint32_t *out)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        unsigned char *buf = dt_malloc((size_t)1 << 16);
        uLong crc = crc32(0L, Z_NULL, 0);
        while (lo < hi) {
                ssize_t k = pread(fd, buf, DT_MIN((size_t)1 << 16, hi - lo), (off_t)lo);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) {
                        free(buf);
                        close(fd);
                        return -1;
                }
                crc = crc32(crc, buf, (uInt)k);
                lo += (size_t)k;
        }
        free(buf);
        close(fd);
        *out = (uint32_t)crc;
        return 0;
}
