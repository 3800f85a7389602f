/* train/safetensors.c - safetensors files (F32 only): the writer lays tensors out contiguously in
 * the order given, pads the JSON header to 8 bytes and records a crc32 of the data section; the
 * reader validates everything the header claims before handing out a single pointer. Errors
 * read "FILE: <check>: detail". */
#include "train/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "util/common.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian: this file assumes a little-endian host"
#endif

/* As the reference implementation: a larger header is not a real file. */
#define MAX_HEADER ((uint64_t)100 << 20)

/* zlib's crc32 takes a uInt length */
static uLong crc_update(uLong crc, const void *p, size_t n)
{
        const unsigned char *b = p;
        while (n) {
                uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
                crc = crc32(crc, b, k);
                b += k;
                n -= k;
        }
        return crc;
}

/* ---- writing ---- */

/* Starts the kernel writing fd's dirty pages back without waiting for them (git's batch fsync
 * does the same): the fsync that follows finds them written or in flight, and the files of one
 * checkpoint go to the disk together instead of one fsync's wait after another. A hint only: a
 * file system without it is synced by the fsync alone. */
void dt_st_writeback_start(int fd)
{
        (void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

/* The header of tensors t laid out contiguously, with the data's crc32 (fixed width: the header's
 * length does not depend on it), padded to 8 bytes; *data_len the data section's bytes. NULL with
 * err on a bad shape or a name used twice. */
static char *header(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta, uLong crc,
                    size_t *padded_len, size_t *data_len, char *err, size_t errlen)
{
        json_t *root = json_object(), *md = json_object();
        char *hdr = NULL;
        size_t off = 0;
        for (int i = 0; i < nmeta; i++)
                json_object_set_new(md, meta[i].key, json_string(meta[i].value));
        for (int i = 0; i < nt; i++) {
                size_t bytes, end, n = 1;
                for (int d = 0; d < t[i].shape.n; d++) {
                        if (t[i].shape.d[d] < 0 || !dt_mul_ok(n, (size_t)t[i].shape.d[d], &n)) n = SIZE_MAX;
                }
                if (n != t[i].n || !dt_mul_ok(t[i].n, sizeof(float), &bytes) || !dt_add_ok(off, bytes, &end)) {
                        snprintf(err, errlen, "%s: tensor '%s': shape does not match its %zu elements", path,
                                 t[i].name, t[i].n);
                        goto out;
                }
                if (json_object_get(root, t[i].name) || !strcmp(t[i].name, "__metadata__")) {
                        snprintf(err, errlen, "%s: tensor name '%s' is used twice", path, t[i].name);
                        goto out;
                }
                json_t *shape = json_array();
                for (int d = 0; d < t[i].shape.n; d++)
                        json_array_append_new(shape, json_integer(t[i].shape.d[d]));
                json_t *e = json_object();
                json_object_set_new(e, "dtype", json_string("F32"));
                json_object_set_new(e, "shape", shape);
                json_object_set_new(e, "data_offsets",
                                    json_pack("[II]", (json_int_t)off, (json_int_t)end));
                json_object_set_new(root, t[i].name, e);
                off = end;
        }
        char crcs[16];
        snprintf(crcs, sizeof crcs, "%08lx", (unsigned long)crc);
        json_object_set_new(md, "crc32", json_string(crcs));
        json_object_set_new(root, "__metadata__", md);
        md = NULL;
        hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!hdr) {
                snprintf(err, errlen, "%s: cannot encode the header (invalid UTF-8 in a name?)", path);
                goto out;
        }
        size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;       /* data starts 8-aligned */
        hdr = dt_realloc(hdr, padded);
        memset(hdr + hl, ' ', padded - hl);
        *padded_len = padded;
        *data_len = off;
out:
        json_decref(md);
        json_decref(root);
        return hdr;
}

static void len8_of(size_t padded, unsigned char len8[8])
{
        for (int i = 0; i < 8; i++)
                len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
}

int dt_st_write_start(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                      int *fdp, uint32_t *file_crc, char *err, size_t errlen)
{
        uLong crc = crc32(0L, Z_NULL, 0);
        for (int i = 0; i < nt; i++)
                if (t[i].data) crc = crc_update(crc, t[i].data, t[i].n * sizeof(float));
        size_t padded, off;
        char *hdr = header(path, t, nt, meta, nmeta, crc, &padded, &off, err, errlen);
        if (!hdr) return -1;
        int rc = -1;
        unsigned char len8[8];
        len8_of(padded, len8);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
                goto out;
        }
        int bad = dt_write_full(fd, len8, 8) || dt_write_full(fd, hdr, padded);
        for (int i = 0; i < nt && !bad; i++)
                bad = dt_write_full(fd, t[i].data, t[i].n * sizeof(float));
        if (bad) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                goto out;
        }
        dt_st_writeback_start(fd);
        if (file_crc) {         /* the whole file's: the head's, then the data's appended to it */
                uLong head = crc_update(crc_update(crc32(0L, Z_NULL, 0), len8, 8), hdr, padded);
                *file_crc = (uint32_t)crc32_combine(head, crc, (z_off_t)off);
        }
        *fdp = fd;
        fd = -1;
        rc = 0;
out:
        if (fd >= 0) close(fd);
        free(hdr);
        return rc;
}

/* The data of every piece in order, from fill, after room for the header; 0, or -1 with err (every
 * piece is still asked for). */
static int stream_data(int fd, const char *path, off_t at, const dt_st_tensor *t, int nt, dt_st_fill fill, void *ud,
                       uLong *crc, char *err, size_t errlen)
{
        /* the largest piece, in pages calloc leaves untouched until fill writes them: a model of
         * small tensors does not make 4 MiB resident on the writer */
        size_t most = 1;
        for (int i = 0; i < nt; i++) most = DT_MAX(most, DT_MIN(DT_ST_CHUNK, t[i].n));
        float *buf = dt_calloc(most, sizeof *buf);
        int bad = lseek(fd, at, SEEK_SET) != at;
        for (int i = 0; i < nt; i++)
                for (size_t o = 0; o < t[i].n; o += DT_ST_CHUNK) {
                        size_t n = DT_MIN(DT_ST_CHUNK, t[i].n - o);
                        fill(ud, &t[i], o, n, buf);
                        if (bad) continue;
                        *crc = crc_update(*crc, buf, n * sizeof *buf);
                        bad = dt_write_full(fd, buf, n * sizeof *buf);
                }
        free(buf);
        if (bad) snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return bad ? -1 : 0;
}

int dt_st_write_stream(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                       dt_st_fill fill, void *ud, int *fdp, uint32_t *file_crc, char *err, size_t errlen)
{
        size_t padded, off, p2, o2;
        uLong crc = crc32(0L, Z_NULL, 0);
        char *hdr = header(path, t, nt, meta, nmeta, crc, &padded, &off, err, errlen);
        int fd = hdr ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
        if (hdr && fd < 0) snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        char e2[256];
        int rc = stream_data(fd, path, (off_t)(8 + padded), t, nt, fill, ud, &crc, fd < 0 ? e2 : err, fd < 0 ? sizeof e2 : errlen);
        if (fd < 0 || rc) goto out;
        free(hdr);
        rc = -1;
        hdr = header(path, t, nt, meta, nmeta, crc, &p2, &o2, err, errlen);
        DT_ASSERT(!hdr || (p2 == padded && o2 == off));        /* the crc entry is fixed-width */
        unsigned char len8[8];
        len8_of(padded, len8);
        if (!hdr) goto out;
        if (pwrite(fd, len8, 8, 0) != 8 || pwrite(fd, hdr, padded, 8) != (ssize_t)padded) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                goto out;
        }
        dt_st_writeback_start(fd);
        if (file_crc) {
                uLong head = crc_update(crc_update(crc32(0L, Z_NULL, 0), len8, 8), hdr, padded);
                *file_crc = (uint32_t)crc32_combine(head, crc, (z_off_t)off);
        }
        *fdp = fd;
        fd = -1;
        rc = 0;
out:
        if (fd >= 0) close(fd);
        free(hdr);
        return rc;
}

int dt_st_write(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                char *err, size_t errlen)
{
        int fd;
        if (dt_st_write_start(path, t, nt, meta, nmeta, &fd, NULL, err, errlen)) return -1;
        return dt_st_sync_close(fd, path, err, errlen);
}

int dt_st_sync_close(int fd, const char *path, char *err, size_t errlen)
{
        if (fsync(fd)) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                close(fd);
                return -1;
        }
        if (close(fd)) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                return -1;
        }
        return 0;
}

/* ---- reading ---- */

typedef struct span { size_t b, e; int i; } span;

static int span_cmp(const void *a, const void *b)
{
        const span *x = a, *y = b;
        if (x->b != y->b) return x->b < y->b ? -1 : 1;
        if (x->e != y->e) return x->e < y->e ? -1 : 1;
        return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -1;
}

static int map_read;     /* dt_st_read_mapped is reading */
static int no_data_crc;  /* dt_st_read_layout is reading: the caller sums the whole file */

static int read_file(const char *path, dt_st_file *f, char *err, size_t errlen)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
                close(fd);
                return fail(err, errlen, "%s: not a regular file", path);
        }
        f->size = (size_t)st.st_size;
        if (map_read && f->size) {
                void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
                int e = errno;
                close(fd);
                if (m == MAP_FAILED) return fail(err, errlen, "%s: cannot map: %s", path, strerror(e));
                f->blob = m;
                f->mapped = 1;
                return 0;
        }
        /* 8 spare bytes let the reader realign a data section that a foreign writer left unaligned */
        f->blob = dt_malloc(f->size + 8);
        size_t got = 0;
        while (got < f->size) {
                ssize_t k = read(fd, (char *)f->blob + got, f->size - got);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) {
                        int e = errno;
                        close(fd);
                        return fail(err, errlen, "%s: read error: %s", path, k ? strerror(e) : "file shrank");
                }
                got += (size_t)k;
        }
        close(fd);
        return 0;
}

static int any_dtype;   /* dt_st_read_any is reading */

/* The data section's crc32; a mapped file's pages handed back behind the sum, piece by piece. */
static uLong data_crc(const dt_st_file *f, const unsigned char *data, size_t ds)
{
        uLong crc = crc32(0L, Z_NULL, 0);
        if (!f->mapped) return crc_update(crc, data, ds);
        long ps = sysconf(_SC_PAGESIZE);
        size_t piece = (size_t)16 << 20;
        for (size_t o = 0; o < ds; o += piece) {
                size_t n = DT_MIN(piece, ds - o);
                crc = crc_update(crc, data + o, n);
                uintptr_t a = ((uintptr_t)(data + o) + (uintptr_t)ps - 1) & ~(uintptr_t)(ps - 1);
                uintptr_t e = (uintptr_t)(data + o + n) & ~(uintptr_t)(ps - 1);
                if (a < e) (void)madvise((void *)a, e - a, MADV_DONTNEED);
        }
        return crc;
}

static const struct { const char *name; size_t size; } dtypes[] = {
        { "F32", 4 }, { "F64", 8 }, { "F16", 2 }, { "BF16", 2 }, { "I64", 8 }, { "I32", 4 }, { "I16", 2 },
        { "I8", 1 }, { "U8", 1 }, { "BOOL", 1 }, { "U16", 2 }, { "U32", 4 }, { "U64", 8 },
};

static size_t dtype_size(const char *d)
{
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
                if (!strcmp(dtypes[i].name, d)) return dtypes[i].size;
        return 0;
}

static int parse_entry(const char *path, const char *name, json_t *e, dt_st_tensor *t, span *sp,
                       char *err, size_t errlen)
{
        if (!json_is_object(e))
                return fail(err, errlen, "%s: header JSON: entry '%s' is not an object", path, name);
        if (strlen(name) >= sizeof t->name)
                return fail(err, errlen, "%s: header JSON: tensor name '%.40s...' is too long", path, name);
        strcpy(t->name, name);
        json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
               *of = json_object_get(e, "data_offsets");
        if (!dt || !sh || !of)
                return fail(err, errlen, "%s: header JSON: tensor '%s' lacks '%s'", path, name,
                            !dt ? "dtype" : !sh ? "shape" : "data_offsets");
        if (!json_is_string(dt))
                return fail(err, errlen, "%s: dtype: tensor '%s': dtype is not a string", path, name);
        size_t esize = sizeof(float);
        if (any_dtype && !(esize = dtype_size(json_string_value(dt))))
                return fail(err, errlen, "%s: dtype: tensor '%s' has dtype '%s', not a safetensors dtype",
                            path, name, json_string_value(dt));
        if (!any_dtype && strcmp(json_string_value(dt), "F32"))
                return fail(err, errlen, "%s: dtype: tensor '%s' has dtype '%s'; only F32 is supported",
                            path, name, json_string_value(dt));
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
        if (!json_is_array(sh) || json_array_size(sh) > DT_MAX_DIMS)
                return fail(err, errlen, "%s: shape: tensor '%s': shape must be a list of at most %d sizes",
                            path, name, DT_MAX_DIMS);
        size_t n = 1;
        t->shape.n = (int)json_array_size(sh);
        for (int d = 0; d < t->shape.n; d++) {
                json_t *v = json_array_get(sh, (size_t)d);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX)
                        return fail(err, errlen, "%s: shape: tensor '%s': dimension %d is not a size", path,
                                    name, d);
                t->shape.d[d] = (int)json_integer_value(v);
                if (!dt_mul_ok(n, (size_t)t->shape.d[d], &n))
                        return fail(err, errlen, "%s: shape: tensor '%s': size overflows", path, name);
        }
        t->n = n;
        json_t *b = json_array_get(of, 0), *en = json_array_get(of, 1);
        if (!json_is_array(of) || json_array_size(of) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
            json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
                return fail(err, errlen, "%s: data_offsets: tensor '%s': expected [begin, end] with "
                            "0 <= begin <= end", path, name);
        sp->b = (size_t)json_integer_value(b);
        sp->e = (size_t)json_integer_value(en);
        size_t bytes;
        if (!dt_mul_ok(n, esize, &bytes) || bytes != sp->e - sp->b)
                return fail(err, errlen, "%s: shape: tensor '%s' has %zu elements (%zu bytes) but its "
                            "data_offsets span %zu bytes", path, name, n, n * esize, sp->e - sp->b);
        return 0;
}

/* __metadata__: string values only */
static int read_meta(const char *path, json_t *val, dt_st_file *f, char *err, size_t errlen)
{
        if (!json_is_object(val)) {
                fail(err, errlen, "%s: __metadata__: not an object", path);
                return -1;
        }
        size_t nm = json_object_size(val);
        f->meta_key = dt_realloc(f->meta_key, (nm ? nm : 1) * sizeof(char *));
        f->meta_val = dt_realloc(f->meta_val, (nm ? nm : 1) * sizeof(char *));
        const char *mk;
        json_t *mv;
        json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                        fail(err, errlen, "%s: __metadata__: value of '%s' is not a string", path, mk);
                        return -1;
                }
                f->meta_key[f->nmeta] = dt_strdup(mk);
                f->meta_val[f->nmeta++] = dt_strdup(json_string_value(mv));
        }
        return 0;
}

/* The data section must be exactly the tensors, back to back; sorts sp by offset. */
static int check_spans(const char *path, const dt_st_file *f, span *sp, size_t ds, char *err, size_t errlen)
{
        for (int i = 0; i < f->nt; i++)
                if (sp[i].e > ds) {
                        fail(err, errlen, "%s: truncated: tensor '%s' needs bytes [%zu, %zu) of a data "
                             "section of %zu bytes", path, f->t[i].name, sp[i].b, sp[i].e, ds);
                        return -1;
                }
        qsort(sp, (size_t)f->nt, sizeof *sp, span_cmp);
        size_t at = 0;
        for (int k = 0; k < f->nt; k++) {
                if (sp[k].b < at) {
                        fail(err, errlen, "%s: data_offsets: tensors '%s' and '%s' overlap", path,
                             f->t[sp[k - 1].i].name, f->t[sp[k].i].name);
                        return -1;
                }
                if (sp[k].b > at) {
                        fail(err, errlen, "%s: data_offsets: %zu unused bytes before tensor '%s'", path,
                             sp[k].b - at, f->t[sp[k].i].name);
                        return -1;
                }
                at = sp[k].e;
        }
        if (at != ds) {
                fail(err, errlen, "%s: data_offsets: the tensors cover %zu bytes but the data section has %zu",
                     path, at, ds);
                return -1;
        }
        return 0;
}

int dt_st_read(const char *path, dt_st_file *f, char *err, size_t errlen)
{
        memset(f, 0, sizeof *f);
        json_t *root = NULL;
        span *sp = NULL;
        int rc = -1;
        if (read_file(path, f, err, errlen)) goto out;
        if (f->size < 8) {
                fail(err, errlen, "%s: truncated: %zu bytes, less than the 8-byte header length", path, f->size);
                goto out;
        }
        const unsigned char *p = f->blob;
        uint64_t hl = 0;
        for (int i = 0; i < 8; i++)
                hl |= (uint64_t)p[i] << (8 * i);
        if (hl > MAX_HEADER) {
                fail(err, errlen, "%s: header length: %llu bytes is over the 100 MB limit (corrupt file)",
                     path, (unsigned long long)hl);
                goto out;
        }
        if (hl > f->size - 8) {
                fail(err, errlen, "%s: header length: %llu bytes but only %zu bytes follow (truncated file?)",
                     path, (unsigned long long)hl, f->size - 8);
                goto out;
        }
        json_error_t je;
        root = json_loadb((const char *)p + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
        if (!root) {
                fail(err, errlen, "%s: header JSON: %s at line %d column %d (byte %d of the header)", path,
                     je.text, je.line, je.column, je.position);
                goto out;
        }
        if (!json_is_object(root)) {
                fail(err, errlen, "%s: header JSON: not an object", path);
                goto out;
        }
        size_t ds = f->size - 8 - (size_t)hl, ne = json_object_size(root);
        f->t = dt_calloc(ne ? ne : 1, sizeof *f->t);
        f->meta_key = dt_calloc(1, sizeof(char *));
        f->meta_val = dt_calloc(1, sizeof(char *));
        sp = dt_calloc(ne ? ne : 1, sizeof *sp);
        const char *key;
        json_t *val;
        json_object_foreach(root, key, val) {
                if (!strcmp(key, "__metadata__")) {
                        if (read_meta(path, val, f, err, errlen)) goto out;
                        continue;
                }
                if (parse_entry(path, key, val, &f->t[f->nt], &sp[f->nt], err, errlen)) goto out;
                sp[f->nt].i = f->nt;
                f->nt++;
        }

        if (check_spans(path, f, sp, ds, err, errlen)) goto out;

        unsigned char *data = (unsigned char *)f->blob + 8 + hl;
        const char *want = no_data_crc ? NULL : dt_st_meta_get(f, "crc32");
        if (want) {
                char got[16];
                snprintf(got, sizeof got, "%08lx", (unsigned long)data_crc(f, data, ds));
                if (strcmp(got, want)) {
                        fail(err, errlen, "%s: crc32: the data checksums to %s but the header says %s (corrupt file)",
                             path, got, want);
                        goto out;
                }
        }
        if ((8 + hl) % sizeof(float) && f->mapped) {
                fail(err, errlen, "%s: data section not aligned to 4 bytes (not a dtrain checkpoint)", path);
                goto out;
        }
        if ((8 + hl) % sizeof(float)) { /* a foreign writer's unaligned data: move it to 8-alignment */
                unsigned char *aligned = (unsigned char *)f->blob + ((8 + hl + 7) & ~(uint64_t)7);
                memmove(aligned, data, ds);
                data = aligned;
        }
        for (int k = 0; k < f->nt; k++)
                f->t[sp[k].i].data = (float *)(void *)(data + sp[k].b);
        rc = 0;
out:
        json_decref(root);
        free(sp);
        if (rc) dt_st_free(f);
        return rc;
}

int dt_st_read_mapped(const char *path, dt_st_file *f, char *err, size_t errlen)
{
        map_read = 1;
        int rc = dt_st_read(path, f, err, errlen);
        map_read = 0;
        return rc;
}

int dt_st_read_layout(const char *path, dt_st_file *f, char *err, size_t errlen)
{
        no_data_crc = 1;
        int rc = dt_st_read_mapped(path, f, err, errlen);
        no_data_crc = 0;
        return rc;
}

void dt_st_forget(const dt_st_file *f, const void *p, size_t bytes)
{
        if (!f->mapped) return;
        uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t a = ((uintptr_t)p + ps - 1) & ~(ps - 1), e = ((uintptr_t)p + bytes) & ~(ps - 1);
        if (a < e) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

int dt_st_read_any(const char *path, dt_st_file *f, char *err, size_t errlen)
{
        any_dtype = 1;
        int rc = dt_st_read(path, f, err, errlen);
        any_dtype = 0;
        return rc;
}

int dt_st_to_float(const dt_st_tensor *t, float *out)
{
        const unsigned char *b = (const unsigned char *)t->data;
        if (!strcmp(t->dtype, "F32")) {
                memcpy(out, b, t->n * sizeof(float));
        } else if (!strcmp(t->dtype, "F64")) {
                for (size_t i = 0; i < t->n; i++) {
                        double v;
                        memcpy(&v, b + 8 * i, 8);
                        out[i] = (float)v;
                }
        } else if (!strcmp(t->dtype, "BF16")) {   /* the high half of a float */
                for (size_t i = 0; i < t->n; i++) {
                        uint32_t u = (uint32_t)(b[2 * i] | b[2 * i + 1] << 8) << 16;
                        memcpy(&out[i], &u, 4);
                }
        } else if (!strcmp(t->dtype, "F16")) {
                for (size_t i = 0; i < t->n; i++) {
                        _Float16 h;
                        memcpy(&h, b + 2 * i, 2);
                        out[i] = (float)h;
                }
        } else {
                return -1;
        }
        return 0;
}

const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name)
{
        for (int i = 0; i < f->nt; i++)
                if (!strcmp(f->t[i].name, name)) return &f->t[i];
        return NULL;
}

const char *dt_st_meta_get(const dt_st_file *f, const char *key)
{
        for (int i = 0; i < f->nmeta; i++)
                if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
        return NULL;
}

void dt_st_free(dt_st_file *f)
{
        for (int i = 0; i < f->nmeta; i++) {
                free(f->meta_key[i]);
                free(f->meta_val[i]);
        }
        free(f->meta_key);
        free(f->meta_val);
        free(f->t);
        if (f->mapped) munmap(f->blob, f->size);
        else free(f->blob);
        memset(f, 0, sizeof *f);
}
