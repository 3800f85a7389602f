/* train/safetensors.h - safetensors files: 8-byte little-endian header length, a JSON header
 * {"name": {"dtype":"F32","shape":[...],"data_offsets":[b,e]}, "__metadata__": {...}}, then the
 * raw little-endian data. Written whole and fsync'd (or handed back open for a batch of files to be
 * fsync'd together); read with every field validated. */
#ifndef DT_SAFETENSORS_H
#define DT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "layers/tensor.h"

typedef struct dt_st_tensor {
        char name[128];
        dt_shape shape;
        float *data;            /* write: caller's; read: points into the file's blob */
        size_t n;               /* elements */
        char dtype[8];          /* read: "F32", or with dt_st_read_any another safetensors dtype */
} dt_st_tensor;

typedef struct dt_st_meta { const char *key, *value; } dt_st_meta;

/* Writes path (not atomically: the checkpoint code writes into a temporary directory) and fsyncs
 * it. A "crc32" metadata entry over the data section is added. Returns 0, or -1 with err. */
int dt_st_write(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                char *err, size_t errlen);
/* The same without the wait: writes path, starts its writeback (dt_st_writeback_start) and hands
 * the open descriptor back in *fd for the caller to fsync and close; *file_crc (when not NULL)
 * gets the crc32 of the whole file as written, so nothing needs reading back. */
int dt_st_write_start(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                      int *fd, uint32_t *file_crc, char *err, size_t errlen);
/* Streaming: the data come from fill, tensor by tensor in order, in pieces of at most DT_ST_CHUNK
 * floats (fill(ud, t, off, n, out): elements [off, off + n) of tensor t into out), so no tensor is
 * held whole; t's data pointers are not read. The header, whose crc32 entry is fixed-width, is
 * written last into the room kept for it. Every piece is asked for even after a write error (the
 * ranks that feed fill must not be left waiting); the error is returned at the end. */
#define DT_ST_CHUNK ((size_t)1 << 20)
typedef void (*dt_st_fill)(void *ud, const dt_st_tensor *t, size_t off, size_t n, float *out);
int dt_st_write_stream(const char *path, const dt_st_tensor *t, int nt, const dt_st_meta *meta, int nmeta,
                       dt_st_fill fill, void *ud, int *fd, uint32_t *file_crc, char *err, size_t errlen);
/* fsync and close a written file's fd: 0, or -1 with the path and errno's text in err (fd closed). */
int dt_st_sync_close(int fd, const char *path, char *err, size_t errlen);
/* sync_file_range(SYNC_FILE_RANGE_WRITE) over the whole file: writeback begins, nothing waits. */
void dt_st_writeback_start(int fd);

typedef struct dt_st_file {
        int nt;
        dt_st_tensor *t;
        void *blob;             /* whole file */
        size_t size;
        int nmeta;
        char **meta_key, **meta_val;
        int mapped;             /* blob is the file mapped (dt_st_read_mapped), not a copy */
} dt_st_file;

/* Reads and validates: file size, header length within the file, JSON syntax, dtype F32 only,
 * shapes non-negative with product matching the byte range, offsets in range, sorted, contiguous
 * and non-overlapping, the crc32 metadata when present. err names the check that failed. */
int dt_st_read(const char *path, dt_st_file *f, char *err, size_t errlen);
/* The same with the file mapped rather than read: its crc32 is checked piece by piece, each piece's
 * pages handed back after, so only the pages a caller then reads become resident (a sharded resume
 * takes its parts of each tensor). F32 files of dtrain's own layout (aligned data) only. */
int dt_st_read_mapped(const char *path, dt_st_file *f, char *err, size_t errlen);
/* The same mapped, without the data's crc32: for a caller that checks the whole file's crc itself
 * (a checkpoint's, recorded in state.json, which several ranks sum together). */
int dt_st_read_layout(const char *path, dt_st_file *f, char *err, size_t errlen);
/* A mapped file's pages inside [p, p + bytes) handed back (read again from the file if touched). */
void dt_st_forget(const dt_st_file *f, const void *p, size_t bytes);
/* The same for files written by others (PyTorch's state_dict saved with safetensors): any dtype of
 * the format (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL) is accepted; a tensor's data then points
 * at its raw bytes and its dtype says how to read them (dt_st_to_float). */
int dt_st_read_any(const char *path, dt_st_file *f, char *err, size_t errlen);
/* Converts a read tensor's values (F32, F64, F16 or BF16) to float into out; -1 for other dtypes. */
int dt_st_to_float(const dt_st_tensor *t, float *out);
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name);
const char *dt_st_meta_get(const dt_st_file *f, const char *key);
void dt_st_free(dt_st_file *f);

#endif
