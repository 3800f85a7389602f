/* data/data_int.h - internal to data/: the format readers' headers, finding a source's files, samples
 * on disk and the decompressed cache, text sources, plain-or-gzip'd files. The rest of dtrain uses
 * data/data.h. */
#ifndef DT_DATA_INT_H
#define DT_DATA_INT_H

#include "data/data.h"

/* Larger arrays are refused before anything is allocated: such a header is corrupt. */
#define DT_DATA_MAX_BYTES ((size_t)1 << 36)

/* Just the headers: a's dims, count and dtype (no data), the data's size in bytes and whether its
 * bytes need swapping to host order; f is left at the first data byte. */
typedef struct dt_dfile dt_dfile;
int dt_idx_header(dt_dfile *f, const char *path, dt_array *a, int *swap, size_t *nbytes, char *msg, size_t msglen);
int dt_npy_header(dt_dfile *f, const char *path, dt_array *a, int *swap, size_t *nbytes, char *msg, size_t msglen);
void dt_swap_bytes(void *data, size_t count, size_t esize);

/* ---- finding a source's files (data/datafind.c, data/filelist.c) ---- */

#define SYSTEM_DATA_DIR "/usr/share/datasets"
/* path found (out) from the spec's directory dir, $DTRAIN_DATA_PATH, SYSTEM_DATA_DIR and the
 * working directory; dirs: a directory will do. 0, or -1 with msg naming the places looked in
 * and the nearest existing name. */
int dt_data_locate(const char *path, const char *dir, char *out, size_t outlen, int dirs, char *msg, size_t msglen);
/* a readable regular file, or with dirs a readable directory too */
int dt_data_readable(const char *path, int dirs);
typedef struct dt_flist {
        char **v;
        int n, cap;
} dt_flist;
void dt_flist_free(dt_flist *l);
/* The files of one side (x or y) of a source: one, a list, or a glob, each located. 0 or -1 (msg). */
int dt_data_file_list(const char *one, char *const *many, int nmany, const char *dir, dt_flist *out, char *msg,
                      size_t msglen);
/* The labels (or targets) of every y file as one array; file i must hold counts[i] samples. */
int dt_data_read_ys(const dt_flist *xl, const dt_flist *yl, dt_data_format fmt, const long *counts, dt_array *y,
                    char *msg, size_t msglen);

/* ---- data on disk (data/disk.c) and the decompressed cache (data/cache.c) ---- */

/* Opens the x files of a source (idx or npy, one or several shards, gzip'd ones through the cache)
 * for reading samples at random; *n gets the total samples, dims the per-sample dims of the first
 * shard (every shard must agree), ndims their count. */
int dt_disk_open(dt_disk **out, const char *const *paths, int npaths, dt_data_format fmt, const char *cache_dir,
                 long *n, size_t *dims, int *ndims, char *msg, size_t msglen);
/* One .npy array at 'offset' of file (a CSV cache), named 'name' in messages; *end gets the offset
 * after it. */
int dt_disk_open_at(dt_disk **out, const char *name, const char *file, long long offset, long *n, size_t *dims,
                    int *ndims, long long *end, char *msg, size_t msglen);
void dt_disk_close(dt_disk *d);
/* Samples shard by shard (for the load-time scan): the shard holding global sample i, and its path. */
const char *dt_disk_path(const dt_disk *d, long i);
/* Samples left in the shard of sample i from i on; dt_disk_read reads the raw elements of samples
 * [i, i + k) (k <= dt_disk_run(d, i)) into buf, in host byte order. */
long dt_disk_run(const dt_disk *d, long i);
int dt_disk_read(const dt_disk *d, long i, long k, void *buf, char *msg, size_t msglen);
dt_dtype dt_disk_dtype(const dt_disk *d);
/* Bytes of the decompressed caches mapped whole: resident as batches read them (a run reads them all). */
size_t dt_disk_mapped(const dt_disk *d);
/* Bytes resident in the caches' mappings (/proc/self/smaps) in *before, then in grain[j] the bytes
 * each of 'probes' reads of samples spread over them made resident; -1 where smaps cannot be read. */
int dt_disk_map_grain(const dt_disk *d, int probes, size_t *before, double *grain);
long dt_disk_local(const dt_disk *d, long i);   /* sample i's index in its own file */
size_t dt_disk_per(const dt_disk *d);   /* elements per sample */

/* The cache of a gzip'd file: decompressed once into DIR/NAME-HASH.dtcache (a 64-byte header with
 * the source's size and mtime, the payload's length and CRC-32, then the payload), checked on every
 * open (size, then checksum) and rebuilt when it does not match; built under an flock by one
 * process, written to a temporary file and renamed, so ranks on one node share it. cache_dir ""
 * or NULL: $DTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/dtrain, else ~/.cache/dtrain. On success out
 * holds the cache file and *offset where its payload starts. */
int dt_cache_get(const char *src, const char *cache_dir, char *out, size_t outlen, long long *offset,
                 char *msg, size_t msglen);
#define DT_CACHE_HEADER 64
/* The same for any payload: fill writes it through dt_cache_put; tag names what the payload
 * depends on besides the source (how a CSV is parsed), so other settings get another cache. */
typedef struct dt_cache_sink dt_cache_sink;
typedef int (*dt_cache_fill)(void *ud, dt_cache_sink *s, char *msg, size_t msglen);
int dt_cache_put(dt_cache_sink *s, const void *buf, size_t n);
int dt_cache_get_built(const char *src, const char *tag, const char *cache_dir, dt_cache_fill fill, void *ud,
                       char *out, size_t outlen, long long *offset, char *msg, size_t msglen);
/* A CSV source's cache: its features as a float32 .npy array (n, columns - 1) and then its labels
 * as a float64 .npy array (n), parsed once by dt_csv_read; out and *offset as for dt_cache_get. */
int dt_csv_cache(const char *path, int label_column, int header, long limit, const char *cache_dir, char *out,
                 size_t outlen, long long *offset, char *msg, size_t msglen);
/* Text: the bytes of path, a regular file or every regular file under a directory (recursively,
 * symbolic links skipped) concatenated in strcmp order of their paths. *buf is malloc'd. */
int dt_text_read(const char *path, unsigned char **buf, size_t *len, char *msg, size_t msglen);
/* Fills ds from a text source (already located at path): windows of src->seq_len byte ids as
 * floats starting every src->stride bytes (0 = seq_len, non-overlapping), next-byte labels per
 * step (label_rows = seq_len), the vocabulary of the whole text. */
int dt_text_load(dt_dataset *ds, const char *path, const dt_source_spec *src, const dt_data_spec *data,
                 const dt_shape *input, int classes_needed, char *msg, size_t msglen);

/* A data file read front to back, plain or gzip'd (data/dfile.c). Every gzip error is reported,
 * where zlib's gzread would not: a bad CRC or length in a member's trailer, a file that ends inside
 * a member, bytes after the last member. Errors go to msg as "FILE: what". */
dt_dfile *dt_dfile_open(const char *path, char *msg, size_t msglen);
/* The same from byte 'offset' (a cache file's payload). */
dt_dfile *dt_dfile_open_at(const char *path, long long offset, char *msg, size_t msglen);
int dt_dfile_is_gz(const dt_dfile *f);
/* File bytes used so far: for a plain file, the offset of the next byte of data. */
long long dt_dfile_offset(const dt_dfile *f);
void dt_dfile_close(dt_dfile *f);
/* Up to n bytes; fewer only at the end of the data. -1 on error. */
long dt_dfile_read(dt_dfile *f, void *buf, size_t n, char *msg, size_t msglen);
/* Exactly 'bytes' into a new buffer, growing it only as data arrives (a header that lies about
 * its size costs no memory); "truncated" error otherwise. */
int dt_dfile_read_exact(dt_dfile *f, size_t bytes, void **out, char *msg, size_t msglen);
/* Reads on to the end, which checks the last gzip trailer: any data left is an error, "trailing
 * data: the file goes on after the WHAT". */
int dt_dfile_end(dt_dfile *f, const char *what, char *msg, size_t msglen);

#endif
