/* data/cache.c - binary caches of data files that cannot be read at random: a gzip'd file
 * decompressed, a CSV file parsed into two .npy arrays. Built once (under an flock, into a
 * temporary file renamed into place), checked on every open against the source's size and mtime,
 * the payload's length and its CRC-32, and rebuilt when anything does not match; never trained on
 * unchecked. Errors go to msg as "FILE: what". */
#include "data/data_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "util/common.h"

#define MAGIC "DTCACHE1"
#define CHUNK ((size_t)1 << 20)

/* The header, little-endian u64 fields after the magic: source size, source mtime (ns), payload
 * length, payload CRC-32, then zeros to DT_CACHE_HEADER. */
typedef struct hdr {
        uint64_t src_size, src_mtime, len, crc;
} hdr;

static void put64(unsigned char *p, uint64_t v)
{
        for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
        return v;
}

static uint64_t fnv64(const char *s)
{
        uint64_t h = 0xcbf29ce484222325ull;
        for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
        return h;
}

static int default_dir(char *out, size_t outlen)
{
        const char *e = getenv("DTRAIN_CACHE_DIR");
        if (e && *e) return snprintf(out, outlen, "%s", e) < (int)outlen ? 0 : -1;
        e = getenv("XDG_CACHE_HOME");
        if (e && *e) return snprintf(out, outlen, "%s/dtrain", e) < (int)outlen ? 0 : -1;
        e = getenv("HOME");
        if (e && *e) return snprintf(out, outlen, "%s/.cache/dtrain", e) < (int)outlen ? 0 : -1;
        return snprintf(out, outlen, "/tmp/dtrain-cache-%ld", (long)getuid()) < (int)outlen ? 0 : -1;
}

/* pread/pwrite until done (EINTR and short transfers) */
static int full_pread(int fd, void *buf, size_t n, off_t off)
{
        unsigned char *b = buf;
        while (n) {
                ssize_t k = pread(fd, b, n, off);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) return -1;
                b += k;
                n -= (size_t)k;
                off += k;
        }
        return 0;
}

static int full_write(int fd, const void *buf, size_t n)
{
        const unsigned char *b = buf;
        while (n) {
                ssize_t k = write(fd, b, n);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) return -1;
                b += k;
                n -= (size_t)k;
        }
        return 0;
}

/* 0: the cache matches st and its payload's checksum; else -1 with why */
static int valid(const char *path, const struct stat *st, char *why, size_t wlen)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                snprintf(why, wlen, "%s", errno == ENOENT ? "not built yet" : strerror(errno));
                return -1;
        }
        int rc = -1;
        unsigned char h[DT_CACHE_HEADER];
        struct stat cs;
        unsigned char *buf = NULL;
        if (fstat(fd, &cs) < 0 || cs.st_size < DT_CACHE_HEADER || full_pread(fd, h, sizeof h, 0) < 0 ||
            memcmp(h, MAGIC, 8)) {
                snprintf(why, wlen, "not a dtrain cache file (bad or missing header)");
                goto out;
        }
        hdr x = { get64(h + 8), get64(h + 16), get64(h + 24), get64(h + 32) };
        uint64_t mt = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
        if (x.src_size != (uint64_t)st->st_size || x.src_mtime != mt) {
                snprintf(why, wlen, "the source changed since it was built");
                goto out;
        }
        if ((uint64_t)cs.st_size != DT_CACHE_HEADER + x.len) {
                snprintf(why, wlen, "size %lld, expected %llu (truncated or extended)", (long long)cs.st_size,
                         (unsigned long long)(DT_CACHE_HEADER + x.len));
                goto out;
        }
        buf = dt_malloc(CHUNK);
        uLong crc = crc32(0L, Z_NULL, 0);
        for (uint64_t off = 0; off < x.len;) {
                size_t k = (size_t)DT_MIN((uint64_t)CHUNK, x.len - off);
                if (full_pread(fd, buf, k, (off_t)(DT_CACHE_HEADER + off)) < 0) {
                        snprintf(why, wlen, "read error: %s", strerror(errno));
                        goto out;
                }
                crc = crc32(crc, buf, (uInt)k);
                off += k;
        }
        if ((uint64_t)crc != x.crc) {
                snprintf(why, wlen, "checksum mismatch (corrupt)");
                goto out;
        }
        rc = 0;
out:
        free(buf);
        close(fd);
        return rc;
}

struct dt_cache_sink {
        int fd;
        uLong crc;
        uint64_t len;
};

int dt_cache_put(dt_cache_sink *s, const void *buf, size_t n)
{
        if (full_write(s->fd, buf, n) < 0) return -1;
        for (size_t o = 0; o < n;) {    /* crc32 counts in uInt */
                size_t k = DT_MIN(n - o, (size_t)1 << 30);
                s->crc = crc32(s->crc, (const Bytef *)buf + o, (uInt)k);
                o += k;
        }
        s->len += n;
        return 0;
}

/* the decompressed bytes of a gzip'd file */
static int gunzip_fill(void *ud, dt_cache_sink *s, char *msg, size_t msglen)
{
        const char *src = ud;
        dt_dfile *f = dt_dfile_open(src, msg, msglen);
        if (!f) return -1;
        unsigned char *buf = dt_malloc(CHUNK);
        int rc = -1;
        for (;;) {
                long k = dt_dfile_read(f, buf, CHUNK, msg, msglen);     /* checks every gzip member */
                if (k < 0) goto out;
                if (k == 0) break;
                if (dt_cache_put(s, buf, (size_t)k) < 0) {
                        snprintf(msg, msglen, "%s: cannot write its cache: %s", src, strerror(errno));
                        goto out;
                }
        }
        rc = 0;
out:
        free(buf);
        dt_dfile_close(f);
        return rc;
}

/* Fills a temporary file beside out and renames it into place. */
static int build(const struct stat *st, const char *out, dt_cache_fill fill, void *ud, char *msg, size_t msglen)
{
        char tmp[DT_PATH_MAX + 32];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                snprintf(msg, msglen, "%s: cannot create the cache file: %s", tmp, strerror(errno));
                return -1;
        }
        int rc = -1;
        unsigned char h[DT_CACHE_HEADER] = { 0 };
        if (full_write(fd, h, sizeof h) < 0) goto werr;         /* the header last, once the data is in */
        dt_cache_sink sink = { .fd = fd, .crc = crc32(0L, Z_NULL, 0), .len = 0 };
        if (fill(ud, &sink, msg, msglen) < 0) goto out;
        uLong crc = sink.crc;
        uint64_t len = sink.len;
        memcpy(h, MAGIC, 8);
        put64(h + 8, (uint64_t)st->st_size);
        put64(h + 16, (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec);
        put64(h + 24, len);
        put64(h + 32, (uint64_t)crc);
        if (pwrite(fd, h, sizeof h, 0) != (ssize_t)sizeof h || fsync(fd) < 0) goto werr;
        if (close(fd) < 0) { fd = -1; goto werr; }
        fd = -1;
        if (rename(tmp, out) < 0) goto werr;
        rc = 0;
        goto out;
werr:
        snprintf(msg, msglen, "%s: cannot write the cache file: %s", tmp, strerror(errno));
out:
        if (fd >= 0) close(fd);
        if (rc) unlink(tmp);
        return rc;
}

int dt_cache_get(const char *src, const char *cache_dir, char *out, size_t outlen, long long *offset,
                 char *msg, size_t msglen)
{
        return dt_cache_get_built(src, "", cache_dir, gunzip_fill, (void *)src, out, outlen, offset, msg, msglen);
}

int dt_cache_get_built(const char *src, const char *tag, const char *cache_dir, dt_cache_fill fill, void *ud,
                       char *out, size_t outlen, long long *offset, char *msg, size_t msglen)
{
        char dir[DT_PATH_MAX], real[PATH_MAX], why[256];
        struct stat st;
        if (stat(src, &st) < 0 || !realpath(src, real)) {
                snprintf(msg, msglen, "%s: cannot open: %s", src, strerror(errno));
                return -1;
        }
        if (cache_dir && *cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
        else if (default_dir(dir, sizeof dir)) {
                snprintf(msg, msglen, "%s: the cache directory's path is too long", src);
                return -1;
        }
        if (dt_mkdir_p(dir, 0777, NULL, 0) < 0) {
                snprintf(msg, msglen, "%s: cannot create the cache directory '%s' for it: %s (set "
                         "$DTRAIN_CACHE_DIR or data.cache)", src, dir, strerror(errno));
                return -1;
        }
        const char *base = strrchr(real, '/');
        base = base ? base + 1 : real;
        /* the tag (how a CSV is read) is part of the name: other settings, another cache */
        uint64_t h = fnv64(real);
        for (const char *t = tag; t && *t; t++) h = (h ^ (unsigned char)*t) * 0x100000001b3ull;
        if (snprintf(out, outlen, "%s/%.200s-%016llx.dtcache", dir, base, (unsigned long long)h) >= (int)outlen) {
                snprintf(msg, msglen, "%s: the cache file's path is too long", src);
                return -1;
        }
        *offset = DT_CACHE_HEADER;
        if (valid(out, &st, why, sizeof why) == 0) return 0;
        /* one builder per cache file on this node; the others wait and find it valid */
        char lock[DT_PATH_MAX + 8];
        snprintf(lock, sizeof lock, "%s.lock", out);
        int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lfd < 0) {
                snprintf(msg, msglen, "%s: cannot create the cache lock: %s", lock, strerror(errno));
                return -1;
        }
        while (flock(lfd, LOCK_EX) < 0 && errno == EINTR) {}
        int rc = 0;
        if (valid(out, &st, why, sizeof why) != 0) {
                if (strcmp(why, "not built yet"))
                        dt_note("cache %s: %s; rebuilding it from %s", out, why, src);
                rc = build(&st, out, fill, ud, msg, msglen);
                if (!rc && valid(out, &st, why, sizeof why) != 0) {
                        snprintf(msg, msglen, "%s: the cache file just written does not check: %s", out, why);
                        rc = -1;
                }
        }
        flock(lfd, LOCK_UN);
        close(lfd);
        return rc;
}
