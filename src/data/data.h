/* data/data.h - datasets and the per-epoch global shuffle. IDX, .npy and CSV samples stay on disk
 * (read with pread and converted to normalised floats per batch; gzip'd files through a decompressed
 * cache file, CSV through a parsed one, data/cache.c); text and synthetic sources are in memory. Batches are slices
 * of one global permutation per epoch, so any number of ranks sees exactly the samples one rank
 * sees; augmentation (data/augment.c) is a pure function of (seed, epoch, sample index). */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stdint.h>
#include "layers/tensor.h"
#include "util/common.h"

/* ---- what a data source is: filled from the model spec's 'data:' by spec/model_spec.c ---- */

typedef enum { DT_FMT_IDX = 0, DT_FMT_CSV, DT_FMT_NPY, DT_FMT_SYNTHETIC, DT_FMT_TEXT, DT_FMT_COUNT } dt_data_format;
extern const char *const dt_format_names[];

/* idx 'sequence': how an image becomes a sample (rows: (H,W) = H steps of W features) */
typedef enum { DT_SEQ_NONE = 0, DT_SEQ_ROWS, DT_SEQ_COUNT } dt_sequence_kind;
extern const char *const dt_sequence_names[];

/* text 'part': which side of the holdout split a source reads */
typedef enum { DT_TEXT_TRAIN = 0, DT_TEXT_HOLDOUT, DT_TEXT_PART_COUNT } dt_text_part;
extern const char *const dt_text_part_names[];

typedef struct dt_source_spec {
        int present;
        dt_data_format format;
        /* idx: images + labels; npy: x + y (y optional for mse targets in x? no: y required);
         * csv: path, one sample per row, label column */
        /* Paths as resolved by dt_data_resolve when the file exists, else as written (the data
         * loader then fails with exit 3 at images_pos/labels_pos). */
        char images[DT_PATH_MAX];       /* idx images / npy x / csv file / text path */
        char labels[DT_PATH_MAX];       /* idx labels / npy y; empty for csv */
        dt_pos images_pos, labels_pos;
        int label_column;               /* csv: 0-based; -1 = last */
        int header;                     /* csv: first line is a header */
        long limit;                     /* use only the first N samples (0 = all) */
        /* idx / npy: several files forming one dataset, in order (images/x and labels/y given as
         * a list, or as a glob expanded and sorted when the data is loaded); NULL/0 = the one file
         * in images/labels. Owned by the model spec (malloc'd). */
        char **xfiles, **yfiles;
        int nxfiles, nyfiles;
        dt_sequence_kind sequence;      /* idx: DT_SEQ_ROWS reads (H,W) images as H steps */
        /* text: 'images' holds the path (a file, or a directory read whole); samples are windows
         * of seq_len byte ids, labels the next byte of each step; the last 'holdout' fraction of
         * the text is the holdout part; windows start every 'stride' bytes (1..seq_len, default
         * seq_len = non-overlapping; 0 in a hand-built spec also means seq_len) */
        int seq_len;
        int stride;
        double holdout;
        dt_text_part part;
        /* synthetic: n samples of the model's input shape, 'classes' gaussian blobs */
        long n;
        uint64_t seed;
        double noise;
        dt_pos pos;
} dt_source_spec;

#define DT_MAX_CHANNELS 64

/* Training-time augmentation of image samples (C,H,W) or (H,W); each draw is a pure function of
 * (seed, epoch, sample index), so ranks and resumed runs draw what one uninterrupted rank draws. */
typedef struct dt_augment {
        int crop;               /* random crop of the sample's own size after padding this many
                                 * pixels on each side (the padding is raw 0, normalised); 0 = off */
        int flip;               /* horizontal flip with probability 1/2 */
} dt_augment;

typedef struct dt_data_spec {
        dt_source_spec train, test;
        int classes;                    /* number of classes (softmax_cross_entropy); 0 = infer */
        double scale, mean, std;        /* x' = (x * scale - mean) / std; scale defaults 1/255 for idx */
        int scale_given;
        /* per-channel mean/std (lists in the spec): nmean/nstd values, 0 = the scalars above */
        double mean_c[DT_MAX_CHANNELS], std_c[DT_MAX_CHANNELS];
        int nmean, nstd;
        dt_augment augment;
        int prefetch;                   /* batches the loader thread prepares ahead; 0 = no thread */
        char cache_dir[DT_PATH_MAX];    /* decompressed caches of gzip'd sources; "" = default */
} dt_data_spec;

typedef struct dt_disk dt_disk;

#define DT_MAP_PROBES 32

typedef struct dt_dataset {
        long n;                 /* samples */
        dt_shape shape;         /* one sample */
        size_t dim;             /* floats per sample */
        float *x;               /* (n, dim), normalised; NULL when the samples stay on disk */
        dt_disk *disk;          /* the samples on disk (data/disk.c), or NULL */
        int scanned;            /* on-disk samples were checked at load; else each batch checks its own */
        int (*check)(void *ud, const float *x, long n, char *why, size_t len);  /* dt_load_opts' */
        void *check_ud;
        dt_shape input;         /* the model's input shape (augmentation's geometry) */
        dt_augment aug;         /* training-time augmentation (dt_dataset_gather_train) */
        double scale, mean_c[DT_MAX_CHANNELS], std_c[DT_MAX_CHANNELS];  /* on-disk normalisation */
        size_t chan_size;       /* values per channel: channel of value j is j / chan_size */
        int nchan;
        float *lut;             /* byte data on disk: [nchan][256] normalised values, or NULL */
        int32_t *label;         /* (n, label_rows) class labels, or NULL (text: made from ids) */
        /* text: the part's byte ids; window k is ids[k * stride, + dim), its labels the ids one
         * further on, both made per batch (dt_dataset_labelled is then true) */
        unsigned char *ids;
        size_t nids, stride;
        int label_rows;         /* labels per sample: 1 for classifiers, T for per-step (text) */
        float *target;          /* (n, tdim) regression targets, or NULL */
        int tdim;
        int classes;            /* 1 + max label (or spec's classes); text: nvocab */
        /* text: the sorted distinct bytes of the whole text (both parts); byte vocab[i] has id i */
        unsigned char vocab[256];
        int nvocab;             /* 0 for every other format */
        /* what a read of the mapped caches makes resident here (dt_dataset_probe_map): the bytes
         * each probe mapped (0 for those that found theirs mapped), what was resident before the
         * probe, the probe's reads; map_probed -1 where smaps could not be read */
        int map_probed;
        double map_grain[DT_MAP_PROBES];
        size_t map_before;
        int map_probes;
} dt_dataset;

/* Loads a source for a model whose input shape is 'input' (the sample shape must match, or have
 * the same element count: IDX (28,28) feeds input (784) or (1,28,28)). Errors (missing file,
 * corrupt header, truncated data, label out of range) print "dtrain: error: FILE: what" via msg
 * and return -1: the caller exits 3. classes_needed is the model's class count for a
 * classification loss (labels must be integers below it), or 0 for a regression loss (the label
 * file then holds float targets). A missing file gives "cannot find data file 'REL' (looked in:
 * ...)" without a position: see dt_dataset_missing. */
int dt_dataset_load(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data,
                    const dt_shape *input, int classes_needed, char *msg, size_t msglen);
void dt_dataset_free(dt_dataset *ds);
/* Whether samples come with class labels (in memory, or made from a text's ids). */
int dt_dataset_labelled(const dt_dataset *ds);

/* How a run opens its data (dt_dataset_open): which part of on-disk samples this rank checks for
 * NaN/Inf at load (samples [n*part/parts, n*(part+1)/parts); the caller agrees on the verdict),
 * and up to what size (scan_max bytes of samples on disk; 0 = whatever the size): larger data is
 * checked as batches read it, so a run starts without reading the whole dataset. Then the spec's
 * directory (for globs), and an optional check of every sample's values (an embedding's token
 * ids) that returns -1 with why set, naming the sample by its 0-based index in x. */
typedef struct dt_load_opts {
        int part, parts;
        unsigned long long scan_max;
        const char *dir;
        int (*check)(void *ud, const float *x, long n, char *why, size_t len);
        void *ud;
} dt_load_opts;
int dt_dataset_open(dt_dataset *ds, const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input,
                    int classes_needed, const dt_load_opts *lo, char *msg, size_t msglen);

/* Bytes a dataset holds in memory besides batches: in-memory samples, labels, targets. */
size_t dt_dataset_bytes(const dt_dataset *ds);
/* Bytes of its samples' decompressed caches mapped into memory (resident once a run has read them). */
size_t dt_dataset_mapped(const dt_dataset *ds);
/* Measures what one read maps: the caches' resident bytes (smaps) before and after each of 32 reads
 * of samples spread over them. The kernel maps more than the sample: the 64 KiB around the fault
 * (fault_around_bytes) or the whole folio the page cache holds it in, which the page cache's
 * history decides (a cold cache's read of the whole file for its checksum makes large folios:
 * lenet's first batch then mapped all 45 MiB of Fashion-MNIST, a warm one 29 MiB), and folios of
 * several sizes lie side by side. Call it where the samples will be read, before a plan uses
 * dt_dataset_mapped_reads. */
void dt_dataset_probe_map(dt_dataset *ds);
/* Of the mapped bytes, what 'reads' more samples read at random places leave resident: what is
 * resident after the probe, and of the rest the mean over the probes of 1 - exp(-reads g_j / bytes).
 * A probe lands on a folio with a chance in proportion to its size, as a read does, so its g_j
 * is a draw from the sizes the reads will meet: a large folio is mapped after few reads, a small
 * one after many, which one mean grain would blur (it planned mlp on 4 ranks up to +10%).
 * Unprobed (or where smaps cannot be read): the whole, as an epoch on one rank maps it. */
size_t dt_dataset_mapped_reads(const dt_dataset *ds, double reads);

/* perm[0..n) = permutation of 0..n-1 for this epoch, a pure function of (seed, epoch). */
void dt_shuffle(long *perm, long n, uint64_t seed, long epoch);

/* Copies samples idx[0..B) into x (B, dim) and their labels/targets into y (B, label_rows) and
 * t (B, tdim) (any may be NULL). On-disk samples are read and converted here; a read error or a
 * value that is not finite dies (exit 3) naming the file and sample. */
void dt_dataset_gather(const dt_dataset *ds, const long *idx, int B, float *x, int32_t *y, float *t);
/* The same, failing with msg instead of dying (the loader thread reports on the main thread). */
int dt_dataset_gather_msg(const dt_dataset *ds, const long *idx, int B, float *x, int32_t *y, float *t,
                          char *msg, size_t msglen);
/* A training gather: the same, then the dataset's augmentation drawn for (seed, epoch, idx[b]). */
int dt_dataset_gather_train(const dt_dataset *ds, const long *idx, int B, uint64_t seed, long epoch, float *x,
                            int32_t *y, float *t, char *msg, size_t msglen);

/* ---- augmentation (data/augment.c) ---- */

/* Applies a to one sample x of shape 'in' ((C,H,W) or (H,W)) in place: the draw for (seed, epoch,
 * index); fill[c] is channel c's padding value; tmp holds dt_shape_size(in) floats. */
void dt_augment_sample(const dt_augment *a, const dt_shape *in, const float *fill, uint64_t seed, long epoch,
                       long index, float *x, float *tmp);
/* 0 when a fits input; else -1 with why ("needs an image input (C,H,W) or (H,W), got ..."). */
int dt_augment_check(const dt_augment *a, const dt_shape *input, char *why, size_t len);

/* ---- the loader thread (data/loader.c) ---- */

/* Prepares the batches of an epoch ahead of the step that needs them (gather, convert, normalise,
 * augment) into a bounded ring of 'depth' slots. What each step needs from its global batch of B is
 * the positions [lo, hi) that range() returns (this rank's slice). With depth 0 there is no thread:
 * dt_loader_next prepares the batch itself, the same bytes. */
typedef void (*dt_loader_range)(void *ud, int B, int *lo, int *hi);
typedef struct dt_batch {
        long start;             /* the global batch's first position in the epoch */
        int B;                  /* its size */
        int lo, hi;             /* the positions this batch holds */
        float *x;               /* (hi - lo, dim) */
        int32_t *y;             /* (hi - lo, label_rows) or NULL */
        float *t;               /* (hi - lo, tdim) or NULL */
        double seconds;         /* spent preparing it */
} dt_batch;
typedef struct dt_loader dt_loader;
dt_loader *dt_loader_new(const dt_dataset *ds, int depth, int max_local, dt_loader_range range, void *ud);
/* The same reading only some parts of each sample (a pipeline's first stage needs the inputs, its
 * last the labels, the others nothing): a batch's x, or y and t, are NULL for a part not read. */
enum { DT_LOAD_INPUTS = 1, DT_LOAD_LABELS = 2 };
dt_loader *dt_loader_new_parts(const dt_dataset *ds, int depth, int max_local, int parts, dt_loader_range range,
                               void *ud);
void dt_loader_free(dt_loader *L);
/* Starts an epoch: batches of 'batch' from position 'start' of perm[0..n) (which stays valid and
 * unchanged until dt_loader_stop), augmented for (seed, epoch) when augment. */
void dt_loader_start(dt_loader *L, const long *perm, long n, long start, int batch, uint64_t seed, long epoch,
                     int augment);
/* The next batch in order, waited for; dies (exit 3) on a data error. Valid until dt_loader_release. */
const dt_batch *dt_loader_next(dt_loader *L);
void dt_loader_release(dt_loader *L);
/* Stops producing (the thread idles) so perm may change. */
void dt_loader_stop(dt_loader *L);
/* Seconds the consumer waited in dt_loader_next, and seconds spent preparing, since the last call. */
void dt_loader_times(dt_loader *L, double *waited, double *prepared);
/* Bytes the loader's slots hold (the memory plan). */
size_t dt_loader_bytes(const dt_dataset *ds, int depth, int max_local);

/* Resolves a data path: as is if absolute; else relative to dir, then each entry of
 * $DTRAIN_DATA_PATH (colon-separated), then /usr/share/datasets. Returns 0 and fills out when found. */
int dt_data_resolve(const char *dir, const char *rel, char *out, size_t outlen);
/* The same search, accepting a readable directory as well as a regular file (text sources). */
int dt_data_resolve_any(const char *dir, const char *rel, char *out, size_t outlen);

/* Which file of src cannot be found (1: images / x / csv file, 2: labels / y; 0: both present),
 * so the caller of a failed dt_dataset_load can prefix the spec position (images_pos or
 * labels_pos) to its "cannot find data file" message. */
int dt_dataset_missing(const dt_source_spec *src);

/* Generates the gaussian-blob dataset of a synthetic source, drawing the samples from stream
 * 'stream' (the class centres depend on src->seed alone): dt_dataset_load uses stream 0 for the
 * train source and 1 for the test source, so a train and a test source with the same seed share
 * their blobs but not their samples. */
void dt_dataset_synthetic_stream(dt_dataset *ds, const dt_source_spec *src, const dt_shape *input,
                                 int classes, uint64_t stream);

/* ---- one file into an array: the whole-file readers (predict's input, tests, fuzzing) ---- */

/* A file's array in its own element type (host byte order), before conversion to float. */
typedef enum {
        DT_DTYPE_U8 = 0, DT_DTYPE_I8, DT_DTYPE_I16, DT_DTYPE_I32, DT_DTYPE_I64, DT_DTYPE_F32,
        DT_DTYPE_F64, DT_DTYPE_COUNT
} dt_dtype;
extern const size_t dt_dtype_size[DT_DTYPE_COUNT];

#define DT_ARRAY_MAXDIMS 8

typedef struct dt_array {
        int ndim;
        size_t dims[DT_ARRAY_MAXDIMS];
        size_t count;           /* product of dims */
        dt_dtype dtype;
        void *data;             /* count elements */
} dt_array;

/* Element i as a double (exact for every integer type but the largest int64 values). */
double dt_array_get(const dt_array *a, size_t i);
void dt_array_free(dt_array *a);

/* Readers: plain or gzip'd files (dt_dfile), which must hold exactly what their header says.
 * Errors go to msg as "FILE: what". */
int dt_idx_read(const char *path, dt_array *a, char *msg, size_t msglen);
int dt_npy_read(const char *path, dt_array *a, char *msg, size_t msglen);
/* One sample per row: x (n, columns-1) as F32, y (n) as F64; at most limit rows when limit > 0. */
int dt_csv_read(const char *path, int label_column, int header, long limit, dt_array *x,
                dt_array *y, char *msg, size_t msglen);

/* xoshiro256** seeded through splitmix64: the data module's deterministic generator. */
typedef struct dt_data_rng { uint64_t s[4]; } dt_data_rng;
void dt_data_rng_seed(dt_data_rng *r, uint64_t a, uint64_t b);
uint64_t dt_data_rng_next(dt_data_rng *r);
uint64_t dt_data_rng_below(dt_data_rng *r, uint64_t n);        /* uniform in [0, n), unbiased */
double dt_data_rng_normal(dt_data_rng *r);                      /* N(0, 1) */

#endif
