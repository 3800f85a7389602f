/* data/dfile.c - data files read front to back, plain or gzip'd (gzip members one after another
 * are one stream, as gzip -d reads them). zlib's gzread stops checking once its caller has the
 * bytes it asked for and skips whatever follows the last member; here every member's CRC and
 * length are checked, a file that ends inside a member is truncated, and any byte after the last
 * member is an error. Errors go to msg as "FILE: what". */
#include "data/data_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* bytes of the file read at once */
#define IN_CHUNK ((size_t)1 << 20)
/* inflate counts in uInt */
#define MAX_OUT ((size_t)1 << 30)

struct dt_dfile {
        FILE *f;
        char *path;
        int gz;                 /* a gzip stream; else the bytes are the data */
        int ended;              /* the data has ended (after the last gzip member) */
        int failed;             /* an error was reported: every later read fails */
        int raw_eof;            /* the file has no more bytes to give */
        z_stream z;             /* next_in/avail_in: the file's bytes read but not yet used */
        unsigned char *in;
        unsigned long long used;        /* file bytes used, for offsets in messages */
};

static int fail(dt_dfile *f, char *msg, size_t msglen, const char *fmt, const char *what)
{
        snprintf(msg, msglen, fmt, f->path, what);
        f->failed = 1;
        return -1;
}

/* Keeps the unused bytes and reads more after them, up to a full buffer. */
static int refill(dt_dfile *f, char *msg, size_t msglen)
{
        if (f->raw_eof) return 0;
        memmove(f->in, f->z.next_in, f->z.avail_in);
        f->z.next_in = f->in;
        size_t want = IN_CHUNK - f->z.avail_in;
        size_t k = fread(f->in + f->z.avail_in, 1, want, f->f);
        f->z.avail_in += (uInt)k;
        if (k < want) {
                if (ferror(f->f)) return fail(f, msg, msglen, "%s: read error: %s", strerror(errno));
                f->raw_eof = 1;
        }
        return 0;
}

static int gz_magic(const dt_dfile *f)
{
        return f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f && f->z.next_in[1] == 0x8b;
}

dt_dfile *dt_dfile_open(const char *path, char *msg, size_t msglen)
{
        return dt_dfile_open_at(path, 0, msg, msglen);
}

dt_dfile *dt_dfile_open_at(const char *path, long long offset, char *msg, size_t msglen)
{
        FILE *fp = fopen(path, "rb");
        if (!fp) {
                snprintf(msg, msglen, "%s: cannot open: %s", path, strerror(errno));
                return NULL;
        }
        if (offset && fseeko(fp, (off_t)offset, SEEK_SET) != 0) {
                snprintf(msg, msglen, "%s: cannot seek: %s", path, strerror(errno));
                fclose(fp);
                return NULL;
        }
        dt_dfile *f = dt_calloc(1, sizeof *f);
        f->f = fp;
        f->used = (unsigned long long)offset;
        f->path = dt_strdup(path);
        f->in = dt_malloc(IN_CHUNK);
        f->z.next_in = f->in;
        if (refill(f, msg, msglen) < 0) {
                dt_dfile_close(f);
                return NULL;
        }
        if (gz_magic(f)) {
                Bytef *next = f->z.next_in;
                uInt avail = f->z.avail_in;
                if (inflateInit2(&f->z, 15 + 16) != Z_OK) {     /* 16: gzip wrapper only */
                        snprintf(msg, msglen, "%s: out of memory for the gzip decoder", path);
                        dt_dfile_close(f);
                        return NULL;
                }
                f->z.next_in = next;
                f->z.avail_in = avail;
                f->gz = 1;
        }
        return f;
}

int dt_dfile_is_gz(const dt_dfile *f)
{
        return f->gz;
}

long long dt_dfile_offset(const dt_dfile *f)
{
        return (long long)f->used;
}

void dt_dfile_close(dt_dfile *f)
{
        if (!f) return;
        if (f->gz) inflateEnd(&f->z);
        fclose(f->f);
        free(f->in);
        free(f->path);
        free(f);
}

/* After a member's trailer: another member, the end of the file, or bytes that are not gzip. */
static int next_member(dt_dfile *f, char *msg, size_t msglen)
{
        if (f->z.avail_in < 2 && refill(f, msg, msglen) < 0) return -1;
        if (!f->z.avail_in) {
                f->ended = 1;
                return 0;
        }
        if (!gz_magic(f)) {
                snprintf(msg, msglen, "%s: trailing data after the gzip stream (at byte %llu of the file)",
                         f->path, f->used);
                f->failed = 1;
                return -1;
        }
        inflateReset(&f->z);
        return 0;
}

static long gz_read(dt_dfile *f, unsigned char *buf, size_t n, char *msg, size_t msglen)
{
        f->z.next_out = buf;
        f->z.avail_out = (uInt)n;
        while (f->z.avail_out && !f->ended) {
                if (!f->z.avail_in && refill(f, msg, msglen) < 0) return -1;
                uInt in0 = f->z.avail_in, out0 = f->z.avail_out;
                int r = inflate(&f->z, Z_NO_FLUSH);
                f->used += in0 - f->z.avail_in;
                if (r == Z_STREAM_END) {        /* the trailer's CRC and length matched */
                        if (next_member(f, msg, msglen) < 0) return -1;
                } else if (r == Z_OK || r == Z_BUF_ERROR) {
                        /* no progress with nothing left to give: the file stops inside a member */
                        if (in0 == f->z.avail_in && out0 == f->z.avail_out && !f->z.avail_in && f->raw_eof) {
                                snprintf(msg, msglen, "%s: truncated gzip stream: the file ends inside it "
                                         "(after %llu bytes)", f->path, f->used);
                                f->failed = 1;
                                return -1;
                        }
                } else if (r == Z_MEM_ERROR) {
                        return fail(f, msg, msglen, "%s: %s while decompressing", "out of memory");
                } else {
                        /* Z_DATA_ERROR: zlib says why ("incorrect data check" for a bad CRC) */
                        return fail(f, msg, msglen, "%s: corrupt gzip stream: %s",
                                    r == Z_NEED_DICT ? "it needs a preset dictionary"
                                                     : f->z.msg ? f->z.msg : "invalid data");
                }
        }
        return (long)(n - f->z.avail_out);
}

static long plain_read(dt_dfile *f, unsigned char *buf, size_t n, char *msg, size_t msglen)
{
        size_t got = 0;
        while (got < n) {
                if (!f->z.avail_in) {
                        if (refill(f, msg, msglen) < 0) return -1;
                        if (!f->z.avail_in) break;
                }
                size_t k = DT_MIN(n - got, (size_t)f->z.avail_in);
                memcpy(buf + got, f->z.next_in, k);
                f->z.next_in += k;
                f->z.avail_in -= (uInt)k;
                f->used += k;
                got += k;
        }
        return (long)got;
}

long dt_dfile_read(dt_dfile *f, void *buf, size_t n, char *msg, size_t msglen)
{
        unsigned char *b = buf;
        size_t got = 0;
        if (f->failed) {
                snprintf(msg, msglen, "%s: read after an error", f->path);
                return -1;
        }
        while (got < n) {
                size_t want = DT_MIN(n - got, MAX_OUT);
                long k = f->gz ? gz_read(f, b + got, want, msg, msglen) : plain_read(f, b + got, want, msg, msglen);
                if (k < 0) return -1;
                got += (size_t)k;
                if ((size_t)k < want) break;
        }
        return (long)got;
}

/* First allocation for a read; the buffer then doubles as data keeps arriving. */
#define FIRST_CHUNK ((size_t)64 << 20)

int dt_dfile_read_exact(dt_dfile *f, size_t bytes, void **out, char *msg, size_t msglen)
{
        size_t cap = bytes < FIRST_CHUNK ? bytes : FIRST_CHUNK;
        unsigned char *buf = dt_malloc(cap ? cap : 1);
        size_t got = 0;
        while (got < bytes) {
                if (got == cap) {
                        cap = cap > bytes / 2 ? bytes : 2 * cap;
                        buf = dt_realloc(buf, cap);
                }
                long k = dt_dfile_read(f, buf + got, cap - got, msg, msglen);
                if (k < 0) {
                        free(buf);
                        return -1;
                }
                got += (size_t)k;
                if (got < cap) break;
        }
        if (got < bytes) {
                snprintf(msg, msglen, "%s: truncated: expected %zu bytes of data, got %zu", f->path, bytes, got);
                free(buf);
                return -1;
        }
        *out = buf;
        return 0;
}

int dt_dfile_end(dt_dfile *f, const char *what, char *msg, size_t msglen)
{
        unsigned char b;
        long k = dt_dfile_read(f, &b, 1, msg, msglen);
        if (k < 0) return -1;
        if (k > 0) {
                snprintf(msg, msglen, "%s: trailing data: the file goes on after the %s", f->path, what);
                return -1;
        }
        return 0;
}
