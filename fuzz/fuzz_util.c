/* fuzz/fuzz_util.c - the scratch directory of a harness: one per process under $TMPDIR (or /tmp),
 * made on first use, removed at a normal exit; inputs become files there because the readers
 * under test take paths, as dtrain itself gives them. */
#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[1024];
static char path[2048];

static void fail(const char *what, const char *p)
{
        fprintf(stderr, "fuzz %s: %s '%s': %s\n", fuzz_name, what, p, strerror(errno));
        abort();
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb; (void)flag; (void)ftw;
        return remove(p);
}

static void rm_rf(const char *p)
{
        nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
        if (dir[0]) rm_rf(dir);
}

const char *fuzz_dir(void)
{
        if (dir[0]) return dir;
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = "/tmp";
        if (snprintf(dir, sizeof dir, "%s/dtrain-fuzz-%s.XXXXXX", t, fuzz_name) >= (int)sizeof dir) {
                errno = ENAMETOOLONG;
                fail("cannot make scratch directory", t);
        }
        if (!mkdtemp(dir)) fail("cannot make scratch directory", dir);
        atexit(cleanup);
        return dir;
}

const char *fuzz_path(const char *rel)
{
        if (snprintf(path, sizeof path, "%s/%s", fuzz_dir(), rel) >= (int)sizeof path) {
                errno = ENAMETOOLONG;
                fail("path too long", rel);
        }
        return path;
}

const char *fuzz_write(const char *rel, const void *data, size_t size)
{
        fuzz_path(rel);
        /* the directories on the way, each one below the scratch directory */
        for (char *s = path + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
                *s = 0;
                int bad = mkdir(path, 0700) && errno != EEXIST;
                *s = '/';
                if (bad) fail("cannot make directory for", path);
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) fail("cannot create", path);
        const char *p = data;
        while (size) {
                ssize_t k = write(fd, p, size);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) fail("cannot write", path);
                p += k;
                size -= (size_t)k;
        }
        if (close(fd)) fail("cannot close", path);
        return path;
}

void fuzz_remove(const char *rel)
{
        rm_rf(fuzz_path(rel));
}
