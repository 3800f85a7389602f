/* data/disk.c - samples left on disk: the x arrays of an idx or npy source (one file, or several
 * shards forming one dataset) opened for random access with pread. Only the header is parsed at
 * open; a batch reads just its samples, so a rank's memory does not grow with the dataset (the
 * page cache is the kernel's, shared and reclaimable). gzip'd files are read through their
 * decompressed cache (data/cache.c), which is mapped instead: a sample is then a copy, not a system
 * call (a pread per sample cost a 64-sample batch ~0.1 ms, 3% of a LeNet step on a core that a
 * second rank needs). Only dtrain's own cache is mapped: it is written beside and renamed into
 * place, never truncated, whereas a user's file cut short under a mapping would end the process
 * with SIGBUS instead of the read error below. Errors go to msg as "FILE: what". */
#include "data/data_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shard {
        int fd;
        char *path;             /* as the user named it, for messages */
        long long base;         /* file offset of element 0 */
        long long end;          /* file offset after the array */
        long n;                 /* samples */
        int swap;
        const unsigned char *map;       /* the decompressed cache, mapped whole (NULL: pread) */
        size_t maplen;
} shard;

struct dt_disk {
        shard *s;
        int ns;
        long *first;            /* [ns + 1]: global index of each shard's first sample */
        dt_dtype dtype;
        size_t per;             /* elements per sample */
        size_t esize;
};

/* path: the user's file (messages); file and off: where its array's header is, which must be the
 * last thing in the file when exact (a CSV cache holds its labels after it) */
static int open_shard(shard *sh, const char *path, const char *file0, long long off0, int exact, dt_data_format fmt,
                      const char *cache_dir, dt_array *a, char *msg, size_t msglen)
{
        memset(sh, 0, sizeof *sh);
        sh->fd = -1;
        char cpath[DT_PATH_MAX];
        const char *file = file0;
        long long off = off0;
        dt_dfile *f = dt_dfile_open_at(file, off, msg, msglen);
        if (!f) return -1;
        if (dt_dfile_is_gz(f)) {        /* not seekable: read through the decompressed cache */
                dt_dfile_close(f);
                if (dt_cache_get(path, cache_dir, cpath, sizeof cpath, &off, msg, msglen)) return -1;
                file = cpath;
                if (!(f = dt_dfile_open_at(cpath, off, msg, msglen))) return -1;
        }
        int rc = -1;
        size_t bytes;
        /* messages name the user's file, whatever was opened */
        if ((fmt == DT_FMT_IDX ? dt_idx_header(f, path, a, &sh->swap, &bytes, msg, msglen)
                               : dt_npy_header(f, path, a, &sh->swap, &bytes, msg, msglen)))
                goto out;
        sh->base = dt_dfile_offset(f);
        sh->fd = open(file, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (sh->fd < 0 || fstat(sh->fd, &st) < 0) {
                snprintf(msg, msglen, "%s: cannot open: %s", file, strerror(errno));
                goto out;
        }
        unsigned long long have = (unsigned long long)st.st_size - (unsigned long long)sh->base;
        if ((long long)st.st_size < sh->base || have < bytes) {
                snprintf(msg, msglen, "%s: truncated: expected %zu bytes of data, got %llu", path, bytes,
                         (long long)st.st_size < sh->base ? 0ull : have);
                goto out;
        }
        sh->end = sh->base + (long long)bytes;
        if (exact && have > bytes) {
                snprintf(msg, msglen, "%s: trailing data: the file goes on after the %s", path,
                         fmt == DT_FMT_IDX ? "IDX array its header describes" : "array its .npy header describes");
                goto out;
        }
        if (a->ndim < 1 || a->dims[0] == 0) {
                snprintf(msg, msglen, "%s: no samples", path);
                goto out;
        }
        sh->n = (long)a->dims[0];
        sh->path = dt_strdup(path);
        if (file != file0 && st.st_size > 0) {  /* our cache: map it (a failed map keeps pread) */
                void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, sh->fd, 0);
                if (m != MAP_FAILED) {
                        sh->map = m;
                        sh->maplen = (size_t)st.st_size;
                }
        }
        rc = 0;
out:
        dt_dfile_close(f);
        if (rc && sh->fd >= 0) close(sh->fd);
        if (rc) sh->fd = -1;
        return rc;
}

static int disk_open(dt_disk **out, const char *const *paths, const char *const *files, const long long *offsets,
                     int npaths, dt_data_format fmt, const char *cache_dir, long *n, size_t *dims, int *ndims, char *msg,
                     size_t msglen)
{
        dt_disk *d = dt_calloc(1, sizeof *d);
        d->s = dt_calloc((size_t)npaths, sizeof *d->s);
        d->first = dt_calloc((size_t)npaths + 1, sizeof *d->first);
        for (int i = 0; i < npaths; i++) {
                dt_array a;
                if (open_shard(&d->s[i], paths[i], files ? files[i] : paths[i], files ? offsets[i] : 0, !files, fmt,
                               cache_dir, &a, msg, msglen))
                        goto fail;
                d->ns++;
                size_t per = a.count / a.dims[0];
                if (i == 0) {
                        d->dtype = a.dtype;
                        d->per = per;
                        d->esize = dt_dtype_size[a.dtype];
                        *ndims = a.ndim - 1;
                        for (int k = 1; k < a.ndim; k++) dims[k - 1] = a.dims[k];
                } else if (a.dtype != d->dtype || per != d->per) {
                        snprintf(msg, msglen, "%s: shard %d holds %zu values per sample of another type or size "
                                 "than the first shard %s (%zu values per sample): the shards of one dataset "
                                 "must agree", paths[i], i + 1, per, paths[0], d->per);
                        goto fail;
                }
                if ((long)((unsigned long)d->first[i] + (unsigned long)d->s[i].n) < d->first[i]) {
                        snprintf(msg, msglen, "%s: too many samples", paths[i]);
                        goto fail;
                }
                d->first[i + 1] = d->first[i] + d->s[i].n;
        }
        *n = d->first[d->ns];
        *out = d;
        return 0;
fail:
        dt_disk_close(d);
        return -1;
}

void dt_disk_close(dt_disk *d)
{
        if (!d) return;
        for (int i = 0; i < d->ns; i++) {
                if (d->s[i].fd >= 0) close(d->s[i].fd);
                if (d->s[i].map) munmap((void *)d->s[i].map, d->s[i].maplen);
                free(d->s[i].path);
        }
        free(d->s);
        free(d->first);
        free(d);
}

static int shard_of(const dt_disk *d, long i)
{
        int lo = 0, hi = d->ns - 1;     /* the last shard whose first sample is <= i */
        while (lo < hi) {
                int mid = (lo + hi + 1) / 2;
                if (d->first[mid] <= i) lo = mid;
                else hi = mid - 1;
        }
        return lo;
}

const char *dt_disk_path(const dt_disk *d, long i)
{
        return d->s[shard_of(d, i)].path;
}

long dt_disk_run(const dt_disk *d, long i)
{
        int k = shard_of(d, i);
        return d->first[k + 1] - i;
}

int dt_disk_open(dt_disk **out, const char *const *paths, int npaths, dt_data_format fmt, const char *cache_dir,
                 long *n, size_t *dims, int *ndims, char *msg, size_t msglen)
{
        return disk_open(out, paths, NULL, NULL, npaths, fmt, cache_dir, n, dims, ndims, msg, msglen);
}

int dt_disk_open_at(dt_disk **out, const char *name, const char *file, long long offset, long *n, size_t *dims,
                    int *ndims, long long *end, char *msg, size_t msglen)
{
        int rc = disk_open(out, &name, &file, &offset, 1, DT_FMT_NPY, NULL, n, dims, ndims, msg, msglen);
        if (!rc) *end = (*out)->s[0].end;
        return rc;
}

long dt_disk_local(const dt_disk *d, long i)
{
        return i - d->first[shard_of(d, i)];
}

dt_dtype dt_disk_dtype(const dt_disk *d) { return d->dtype; }
size_t dt_disk_per(const dt_disk *d) { return d->per; }

void dt_swap_bytes(void *data, size_t count, size_t esize)
{
        unsigned char *p = data;
        if (esize < 2) return;
        for (size_t i = 0; i < count; i++, p += esize)
                for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
                        unsigned char t = p[a];
                        p[a] = p[b];
                        p[b] = t;
                }
}

int dt_disk_read(const dt_disk *d, long i, long k, void *buf, char *msg, size_t msglen)
{
        int s = shard_of(d, i);
        const shard *sh = &d->s[s];
        DT_ASSERT(i >= 0 && k >= 0 && i + k <= d->first[s + 1]);
        size_t n = (size_t)k * d->per * d->esize;
        off_t off = (off_t)(sh->base + (long long)((size_t)(i - d->first[s]) * d->per * d->esize));
        unsigned char *b = buf;
        if (sh->map) {          /* within the array: open_shard checked the file holds it */
                memcpy(b, sh->map + off, n);
                n = 0;
        }
        while (n) {
                ssize_t r = pread(sh->fd, b, n, off);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) {
                        snprintf(msg, msglen, "%s: read error at sample %ld: %s", sh->path, i,
                                 r < 0 ? strerror(errno) : "the file was truncated after it was opened");
                        return -1;
                }
                b += r;
                n -= (size_t)r;
                off += r;
        }
        if (sh->swap) dt_swap_bytes(buf, (size_t)k * d->per, d->esize);
        return 0;
}

size_t dt_disk_mapped(const dt_disk *d)
{
        size_t b = 0;
        for (int i = 0; d && i < d->ns; i++)
                if (d->s[i].map) b += d->s[i].maplen;
        return b;
}

/* Resident bytes of the caches' mappings, from /proc/self/smaps; < 0 where it cannot be read. */
static long long maps_rss(const dt_disk *d)
{
        FILE *f = fopen("/proc/self/smaps", "r");
        if (!f) return -1;
        char line[512];
        long long rss = 0;
        int in = 0, seen = 0;
        while (fgets(line, sizeof line, f)) {
                unsigned long a, e;
                unsigned long long kb;
                if (sscanf(line, "%lx-%lx ", &a, &e) == 2) {            /* a mapping's first line */
                        in = 0;
                        for (int i = 0; i < d->ns; i++) {
                                uintptr_t m = (uintptr_t)d->s[i].map;
                                if (m && a < m + d->s[i].maplen && m < e) in = 1;
                        }
                } else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) {
                        rss += (long long)kb * 1024, seen = 1;
                }
        }
        fclose(f);
        return seen ? rss : -1;
}

int dt_disk_map_grain(const dt_disk *d, int probes, size_t *before, double *grain)
{
        long n = d->first[d->ns];
        long long was = maps_rss(d);
        if (was < 0 || n < 1 || probes < 1) return -1;
        *before = (size_t)was;
        volatile unsigned char sink = 0;
        for (int j = 0; j < probes; j++) {
                long i = (long)(((double)j + 0.5) * (double)n / probes);
                int s = shard_of(d, i);
                const shard *sh = &d->s[s];
                if (sh->map) sink ^= sh->map[sh->base + (long long)((size_t)(i - d->first[s]) * d->per * d->esize)];
                long long now = maps_rss(d);
                if (now < 0) return -1;
                grain[j] = (double)DT_MAX(0, now - was);
                was = now;
        }
        (void)sink;
        return 0;
}
