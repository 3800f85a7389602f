/* spec/cluster_spec.c - dtrain-cluster(5): a cluster file's root, or the model's 'parallel:' value,
 * into a dt_cluster_spec. Bad values and one mapping's own mode conflicts are parse errors; what
 * needs the run (world size, batch) or both files (a key whose mode the other file sets) is
 * checked by dt_cluster_spec_validate (cluster_check.c). Every error goes to the dt_diag at
 * file:line:col. */
#include "spec/cluster_spec.h"
#include "spec/cluster_int.h"
#include "spec/model_spec.h"
#include "spec/overrides.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const dt_part_names[] = { "data", "model", "hybrid", "auto", NULL };
const char *const dt_sync_names[] = { "allreduce", "average", "ssp", NULL };
const char *const dt_comp_names[] = { "none", "fp16", "topk", "bf16", "powersgd", "threshold", "auto", NULL };
const char *const dt_hier_names[] = { "auto", "false", "true", NULL };
const char *const dt_elastic_names[] = { "replan", "strict", NULL };
static const char *const device_names[] = { "cpu", "cuda", "auto", NULL };
static const char *const comm_names[] = { "mpi", "nccl", NULL };
const char *const dt_pipe_names[] = { "gpipe", "1f1b", "zb-h1", "interleaved", "zb-v", "v-half",
                                       NULL };

#define RANKS_MAX 1048576L
#define THREADS_MAX 4096L
#define EVERY_MAX 1000000L
#define STALENESS_MAX 1000L
#define CHUNKS_MAX 65536L
#define MICRO_MAX 1048576L      /* the model's largest batch */
#define VSTAGES_MAX 4           /* parallel/schedule.h's DT_SCHEDULE_MAX_CHUNKS */
#define TIMEOUT_MAX 86400.0     /* a day */
#define CX_WARMUP_DEF 100       /* steps; see dtrain-cluster(5), Compression */

/* ---- the keys: one row each ----
 * A row says where a key is read (the top level or a section), its type and range, the field it
 * fills, its default, and the mode it belongs to; parsing, defaults, merging and the mode checks
 * all walk this table. Rows are in reading order (errors come out in it) and each section's rows
 * are contiguous. */

typedef enum {
        K_INT,          /* integer in [min, max] into an int */
        K_NUM,          /* number in [min, max] (ends per excl) into a double */
        K_BOOL,         /* true | false into an int */
        K_ENUM,         /* one of names, its index into an enum field */
        K_NAME,         /* one of names, the name itself into a char array */
        K_CUTS,         /* a layer name or a list of them into a dt_stage_cuts */
        K_SPLITS,       /* a mapping of layer name patterns to splits into a dt_split_rules */
        K_RECOMPUTE,    /* none | all | auto | a list of layer name patterns (cluster_recompute.c) */
        K_BYTES,        /* a size with its unit (300MiB, 2GiB, 512MB) into a double of bytes */
} key_kind;

typedef struct key {
        dt_cs_bits bit;                   /* DT_CS_* */
        const char *section;            /* NULL: the top level; else the sub-mapping's key */
        const char *name;
        key_kind kind;
        size_t off, size;               /* the field in dt_cluster_spec */
        double min, max;                /* K_INT, K_NUM */
        int excl;                       /* K_NUM: DT_YEXCL_* */
        const char *const *names;       /* K_ENUM, K_NAME */
        double def;                     /* default: the value, or the index of names (K_ENUM) */
        const char *sdef;               /* K_NAME's default; NULL = "" */
        size_t vpos;                    /* a dt_pos field for the VALUE's position; 0 = none */
        dt_cs_bits mode;                  /* the key applies only when the key with this bit ... */
        const char *want;               /* ... has this value (as written); mode 0 = always */
        const char *rule;               /* a default that no value written states ("(chosen)"), for
                                         * `dtrain keys`; NULL: the value above */
} key;

#define FIELD(f) .off = offsetof(dt_cluster_spec, f), .size = sizeof(((dt_cluster_spec *)0)->f)
#define VPOS(f) .vpos = offsetof(dt_cluster_spec, f)

static const key keys[] = {
        { DT_CS_RANKS, NULL, "ranks", K_INT, FIELD(ranks), .min = 0, .max = RANKS_MAX, VPOS(ranks_pos) },
        { DT_CS_THREADS, NULL, "threads_per_rank", K_INT, FIELD(threads_per_rank), .min = 0, .max = THREADS_MAX },
        { DT_CS_DEVICE, NULL, "device", K_NAME, FIELD(device), .names = device_names,
          .rule = "(the model's device)" },
        { DT_CS_CONV, NULL, "conv", K_ENUM, FIELD(conv), .names = dt_conv_algo_names, .def = DT_CONV_AUTO },
        { DT_CS_LATENCY, "network", "latency_us", K_NUM, FIELD(latency_us), .min = 0.0, .max = 1e5, .def = 1.0 },
        { DT_CS_BANDWIDTH, "network", "bandwidth_gbs", K_NUM, FIELD(bandwidth_gbs), .min = 0.0, .max = 1e5,
          .excl = DT_YEXCL_MIN, .def = 10.0 },
        { DT_CS_ILAT, "network", "intra_latency_us", K_NUM, FIELD(intra_latency_us), .min = 0.0, .max = 1e5 },
        { DT_CS_IBW, "network", "intra_bandwidth_gbs", K_NUM, FIELD(intra_bandwidth_gbs), .min = 0.0, .max = 1e5 },
        { DT_CS_EAGER, "network", "eager_kb", K_NUM, FIELD(eager_kb), .min = 0.0, .max = 1e6, .def = 64.0 },
        { DT_CS_SENDUS, "network", "send_overhead_us", K_NUM, FIELD(send_overhead_us), .min = 0.0, .max = 1e5 },
        { DT_CS_SENDBW, "network", "send_overhead_gbs", K_NUM, FIELD(send_overhead_gbs), .min = 0.0, .max = 1e5 },
        { DT_CS_CORES, NULL, "cores_per_node", K_INT, FIELD(cores_per_node), .min = 0, .max = THREADS_MAX },
        { DT_CS_RPN, NULL, "ranks_per_node", K_INT, FIELD(ranks_per_node), .min = 0, .max = RANKS_MAX },
        { DT_CS_TIMEOUT, NULL, "collective_timeout", K_NUM, FIELD(collective_timeout), .min = 0.0,
          .max = TIMEOUT_MAX, .excl = DT_YEXCL_MIN, .def = 300.0 },
        { DT_CS_MEMORY, NULL, "memory_per_rank", K_BYTES, FIELD(memory_per_rank), VPOS(memory_pos),
          .rule = "(available memory / ranks per node)" },
        { DT_CS_ELASTIC, NULL, "elastic", K_ENUM, FIELD(elastic), .names = dt_elastic_names, .def = 0 },
        { DT_CS_SNAPSHOTS, NULL, "checkpoint_snapshots", K_INT, FIELD(checkpoint_snapshots), .min = 1, .max = 2,
          .def = 1 },
        { DT_CS_STRATEGY, "partition", "strategy", K_ENUM, FIELD(strategy), .names = dt_part_names,
          .def = DT_PART_DATA, VPOS(strategy_pos) },
        { DT_CS_SYNC, "partition", "sync", K_ENUM, FIELD(sync), .names = dt_sync_names, .def = DT_SYNC_ALLREDUCE },
        { DT_CS_BUCKET, "partition", "bucket_mb", K_NUM, FIELD(bucket_mb), .min = 0.0, .max = 1024.0,
          .excl = DT_YEXCL_MIN, .def = 1.0 },
        { DT_CS_EVERY, "partition", "average_every", K_INT, FIELD(average_every), .min = 1, .max = EVERY_MAX,
          .def = 1, .mode = DT_CS_SYNC, .want = "average" },
        { DT_CS_STALENESS, "partition", "staleness", K_INT, FIELD(staleness), .min = 0, .max = STALENESS_MAX,
          .def = 2, .mode = DT_CS_SYNC, .want = "ssp" },
        { DT_CS_COMPRESSION, "partition", "compression", K_ENUM, FIELD(compression), .names = dt_comp_names,
          .def = DT_COMP_NONE, .mode = DT_CS_SYNC, .want = "allreduce" },
        { DT_CS_TOPK, "partition", "topk_ratio", K_NUM, FIELD(topk_ratio), .min = 0.0, .max = 1.0,
          .excl = DT_YEXCL_MIN, .def = 0.2, .mode = DT_CS_COMPRESSION, .want = "topk" },
        { DT_CS_PSGD_RANK, "partition", "powersgd_rank", K_INT, FIELD(powersgd_rank), .min = 1, .max = 64,
          .def = 4, .mode = DT_CS_COMPRESSION, .want = "powersgd" },
        { DT_CS_CX_WARMUP, "partition", "compression_warmup", K_INT, FIELD(compression_warmup), .min = 0,
          .max = 1000000000, .def = CX_WARMUP_DEF, .mode = DT_CS_COMPRESSION, .want = "topk or powersgd" },
        { DT_CS_THRESHOLD, "partition", "threshold", K_NUM, FIELD(threshold), .min = 0.0, .max = 1.0,
          .def = 1e-3, .mode = DT_CS_COMPRESSION, .want = "threshold" },
        { DT_CS_THR_MIN, "partition", "threshold_min_density", K_NUM, FIELD(threshold_min_density), .min = 0.0,
          .max = 127.0, .def = 0.5, .mode = DT_CS_COMPRESSION, .want = "threshold" },
        { DT_CS_THR_MAX, "partition", "threshold_max_density", K_NUM, FIELD(threshold_max_density), .min = 0.0,
          .max = 127.0, .def = 2.0, .mode = DT_CS_COMPRESSION, .want = "threshold" },
        { DT_CS_REPRO, "partition", "reproducible", K_BOOL, FIELD(reproducible) },
        { DT_CS_CHUNKS, "partition", "chunks", K_INT, FIELD(chunks), .min = 1, .max = CHUNKS_MAX, .def = 16,
          .mode = DT_CS_REPRO, .want = "true" },
        { DT_CS_MICRO, "partition", "micro_batch", K_INT, FIELD(micro_batch), .min = 0, .max = MICRO_MAX },
        { DT_CS_SHARD, "partition", "shard", K_INT, FIELD(shard), .min = 0, .max = 3 },
        { DT_CS_HIER, "partition", "hierarchical", K_ENUM, FIELD(hierarchical), .names = dt_hier_names, .def = 0,
          .mode = DT_CS_SYNC, .want = "allreduce" },
        { DT_CS_COMM, "partition", "comm", K_NAME, FIELD(comm), .names = comm_names, .sdef = "mpi" },
        { DT_CS_GDATA, "partition", "data", K_INT, FIELD(grid_data), .min = 1, .max = RANKS_MAX,
          .rule = "(chosen by the strategy)" },
        { DT_CS_GPIPE, "partition", "pipeline", K_INT, FIELD(grid_pipeline), .min = 1, .max = DT_MAX_STAGES,
          .rule = "(chosen by the strategy)" },
        { DT_CS_GTENSOR, "partition", "tensor", K_INT, FIELD(grid_tensor), .min = 1, .max = RANKS_MAX,
          .rule = "(chosen by the strategy)" },
        { DT_CS_STAGES, "partition", "stages", K_CUTS, FIELD(cuts), .rule = "(balanced by cost)" },
        { DT_CS_MICROS, "partition", "micro_batches", K_INT, FIELD(micro_batches), .min = 1, .max = MICRO_MAX,
          .rule = "(twice the stages)" },
        { DT_CS_SCHEDULE, "partition", "schedule", K_ENUM, FIELD(schedule), .names = dt_pipe_names,
          .def = DT_PIPE_1F1B },
        { DT_CS_VSTAGES, "partition", "virtual_stages", K_INT, FIELD(virtual_stages), .min = 1,
          .max = VSTAGES_MAX, .rule = "(2 for interleaved, zb-v, v-half, else 1)" },
        { DT_CS_SPLITS, "partition", "splits", K_SPLITS, FIELD(splits), .rule = "(automatic)" },
        { DT_CS_RECOMPUTE, "partition", "recompute", K_RECOMPUTE, FIELD(recompute), .rule = "none" },
};
#define NKEYS (sizeof keys / sizeof keys[0])
_Static_assert(NKEYS == DT_CS_NKEYS, "one row in keys[] per DT_CS_* bit");
_Static_assert(offsetof(dt_cluster_spec, file) == 0, "vpos 0 means none: no dt_pos at offset 0");

static int bitno(dt_cs_bits bit)
{
        int i = 0;
        while (bit > 1) {
                bit >>= 1;
                i++;
        }
        return i;
}

static const key *key_of(dt_cs_bits bit)
{
        for (size_t i = 0; i < NKEYS; i++)
                if (keys[i].bit == bit) return &keys[i];
        DT_ASSERT(0);
        return NULL;
}

const char *dt_cs_key_name(dt_cs_bits bit)
{
        return key_of(bit)->name;
}

/* Enum and int fields are read and written through memcpy: the enums are int-sized (asserted). */
_Static_assert(sizeof(dt_part_strategy) == sizeof(int) && sizeof(dt_sync_kind) == sizeof(int) &&
               sizeof(dt_comp_kind) == sizeof(int) && sizeof(dt_pipe_schedule) == sizeof(int),
               "enum fields are ints");

static void put_int(dt_cluster_spec *c, const key *k, int v)
{
        DT_ASSERT(k->size == sizeof v);
        memcpy((char *)c + k->off, &v, sizeof v);
}

static int get_int(const dt_cluster_spec *c, const key *k)
{
        int v;
        DT_ASSERT(k->size == sizeof v);
        memcpy(&v, (const char *)c + k->off, sizeof v);
        return v;
}

static dt_pos pos_of(const yaml_node_t *n)
{
        dt_pos p = { 0, 0 };
        if (n) {
                p.line = (int)n->start_mark.line + 1;
                p.col = (int)n->start_mark.column + 1;
        }
        return p;
}

/* The value of a mode key, as the user writes it. */
static const char *mode_value(const dt_cluster_spec *c, dt_cs_bits gbit)
{
        const key *k = key_of(gbit);
        switch (k->kind) {
        case K_ENUM: return k->names[get_int(c, k)];
        case K_BOOL: return get_int(c, k) ? "true" : "false";
        case K_NAME: return (const char *)c + k->off;
        default: DT_ASSERT(0);
        }
        return "";
}

/* Why reproducible mode cannot run with c's sync or compression (NULL when it can); *gbit names
 * the key in the way. Compression is only looked at under allreduce, where it applies. */
static const char *repro_conflict(const dt_cluster_spec *c, dt_cs_bits *gbit)
{
        *gbit = DT_CS_SYNC;
        if (c->sync == DT_SYNC_AVERAGE)
                return "'reproducible: true' needs sync: allreduce; averaging parameters every k steps "
                       "gives results that depend on the number of ranks";
        if (c->sync == DT_SYNC_SSP)
                return "'reproducible: true' needs sync: allreduce; under ssp the order in which "
                       "updates arrive depends on timing";
        *gbit = DT_CS_COMPRESSION;
        if (c->compression == DT_COMP_FP16)
                return "'reproducible: true' needs compression: none; fp16 rounds each partial sum, "
                       "so the result depends on how the batch is split over ranks";
        if (c->compression == DT_COMP_TOPK)
                return "'reproducible: true' needs compression: none; topk keeps different entries "
                       "depending on how the batch is split over ranks";
        if (c->compression != DT_COMP_NONE && c->compression != DT_COMP_AUTO)  /* auto: none here */
                return "'reproducible: true' needs compression: none; bf16, powersgd and threshold "
                       "compress each rank's own gradient, so the result depends on how the batch "
                       "is split over ranks";
        return NULL;
}

/* ---- parsing ---- */

typedef struct cctx {
        dt_cluster_spec *c;
        dt_ydoc *y;
        dt_diag *d;
        dt_cs_bits given;         /* keys given in this mapping */
        int rc;
} cctx;

/* Books a getter's result r for row k: 1 marks it given and records where, -1 marks it bad.
 * Returns 1 when the value should be stored. */
static int took(cctx *p, const dt_ymap *m, const key *k, int r)
{
        if (r < 0) {
                p->rc = -1;
                p->c->bad |= k->bit;
                return 0;
        }
        if (r == 0) return 0;
        p->given |= k->bit;
        p->c->set |= k->bit;
        p->c->bad &= ~k->bit;
        p->c->key_pos[bitno(k->bit)] = pos_of(dt_ymap_key_node(m, k->name));
        return 1;
}

/* A layer name or a list of 1..DT_MAX_STAGES-1 of them. 1 read, 0 absent, -1 bad (reported). */
static int read_cuts(cctx *p, dt_ymap *m, const char *key, dt_stage_cuts *out)
{
        yaml_node_t *v = dt_ymap_get(m, key);
        if (!v) return 0;
        dt_stage_cuts cu = { 0 };
        yaml_node_t *items[DT_MAX_STAGES];
        int n = 0;
        if (v->type == YAML_SEQUENCE_NODE) {
                for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                        if (n == DT_MAX_STAGES - 1) {
                                dt_pos at = pos_of(v);
                                dt_diag_add(p->d, p->y->file, at.line, at.col, "'%s' names more than %d cuts", key,
                                            DT_MAX_STAGES - 1);
                                return -1;
                        }
                        items[n++] = yaml_document_get_node(&p->y->doc, *it);
                }
        } else {
                items[n++] = v;
        }
        if (n == 0) {
                dt_pos at = pos_of(v);
                dt_diag_add(p->d, p->y->file, at.line, at.col, "'%s' is an empty list", key);
                return -1;
        }
        for (int i = 0; i < n; i++) {
                yaml_node_t *x = items[i];
                dt_pos at = pos_of(x ? x : v);
                if (!x || x->type != YAML_SCALAR_NODE || x->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
                    x->data.scalar.length == 0 || x->data.scalar.length >= sizeof cu.name[0]) {
                        dt_diag_add(p->d, p->y->file, at.line, at.col,
                                    "'%s' must be a layer name or a list of layer names (the first layer of "
                                    "each stage after the first)", key);
                        return -1;
                }
                snprintf(cu.name[i], sizeof cu.name[0], "%s", (const char *)x->data.scalar.value);
                cu.pos[i] = at;
        }
        cu.n = n;
        *out = cu;
        return 1;
}

static const char *kind_of(const yaml_node_t *n);
/* the splits a user names (pass is the plan's own: the layers between a column and a row layer) */
static const struct { const char *name; dt_split how; } split_names[] = {
        { "none", DT_SPLIT_NONE }, { "column", DT_SPLIT_COLUMN }, { "row", DT_SPLIT_ROW },
        { "channel", DT_SPLIT_CHANNEL }, { "hidden", DT_SPLIT_HIDDEN }, { "heads", DT_SPLIT_HEADS }, { NULL, 0 },
};

static int read_splits(cctx *p, dt_ymap *m, const char *key, dt_split_rules *out)
{
        yaml_node_t *v = dt_ymap_get(m, key);
        if (!v) return 0;
        dt_pos at = pos_of(v);
        if (v->type != YAML_MAPPING_NODE) {
                dt_diag_add(p->d, p->y->file, at.line, at.col, "'%s' must be a mapping of layer names (or glob "
                            "patterns) to none, column, row, channel, hidden or heads, got %s", key, kind_of(v));
                return -1;
        }
        if (v->data.mapping.pairs.start == v->data.mapping.pairs.top) {
                /* {} could mean "split nothing" or "the automatic splits", which are opposites */
                dt_diag_add(p->d, p->y->file, at.line, at.col, "'%s' is an empty mapping; name the layers to "
                            "split (e.g. {fc1: column, fc2: row}), map them to none to keep them whole, or leave "
                            "'%s' out for the automatic splits", key, key);
                return -1;
        }
        dt_split_rules r = { 0 };
        int rc = 1;
        for (yaml_node_pair_t *pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
                yaml_node_t *k = yaml_document_get_node(&p->y->doc, pr->key);
                yaml_node_t *x = yaml_document_get_node(&p->y->doc, pr->value);
                dt_pos kp = pos_of(k ? k : v);
                if (r.n == DT_MAX_SPLITS) {
                        dt_diag_add(p->d, p->y->file, kp.line, kp.col, "'%s' has more than %d entries", key,
                                    DT_MAX_SPLITS);
                        return -1;
                }
                if (!k || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
                    k->data.scalar.length >= sizeof r.pattern[0]) {
                        dt_diag_add(p->d, p->y->file, kp.line, kp.col, "'%s': each key must be a layer name or a "
                                    "glob pattern of at most %zu characters", key, sizeof r.pattern[0] - 1);
                        rc = -1;
                        continue;
                }
                int dup = 0;
                for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < pr && !dup; q++) {
                        yaml_node_t *f = yaml_document_get_node(&p->y->doc, q->key);
                        if (f && f->type == YAML_SCALAR_NODE && !strcmp((const char *)f->data.scalar.value,
                                                                        (const char *)k->data.scalar.value)) {
                                /* as in any mapping: the first would win without a word */
                                char at[160];
                                dt_diag_add(p->d, p->y->file, kp.line, kp.col, "duplicate key '%s' in '%s' (first "
                                            "at %s)", (const char *)k->data.scalar.value, key,
                                            dt_line_str(at, sizeof at, (int)f->start_mark.line + 1));
                                dup = 1;
                        }
                }
                if (dup) {
                        rc = -1;
                        continue;
                }
                const char *val = x && x->type == YAML_SCALAR_NODE ? (const char *)x->data.scalar.value : NULL;
                int how = -1;
                for (int i = 0; val && split_names[i].name; i++)
                        if (!strcmp(val, split_names[i].name)) how = (int)split_names[i].how;
                if (how < 0) {
                        dt_pos vp = pos_of(x ? x : k);
                        dt_diag_add(p->d, p->y->file, vp.line, vp.col, "'%s: %s': expected none, column, row, "
                                    "channel, hidden or heads, got '%s'", key, (const char *)k->data.scalar.value,
                                    val ? val : "a collection");
                        rc = -1;
                        continue;
                }
                snprintf(r.pattern[r.n], sizeof r.pattern[0], "%s", (const char *)k->data.scalar.value);
                r.how[r.n] = how;
                r.pos[r.n++] = kp;
        }
        if (rc > 0) *out = r;
        return rc;
}

/* A size: a number and one of the units below (binary KiB..TiB, decimal kB..TB, B), or a plain
 * number of bytes; at least 1 MiB (nothing runs in less) and at most 1 PiB. 1 when read, 0
 * absent, -1 after reporting. */
static int read_bytes(cctx *p, dt_ymap *m, const char *key, double *out)
{
        static const struct { const char *unit; double mult; } units[] = {
                { "", 1 }, { "B", 1 }, { "KiB", 1024.0 }, { "MiB", 1048576.0 }, { "GiB", 1073741824.0 },
                { "TiB", 1099511627776.0 }, { "kB", 1e3 }, { "KB", 1e3 }, { "MB", 1e6 }, { "GB", 1e9 }, { "TB", 1e12 },
        };
        yaml_node_t *v = dt_ymap_get(m, key);
        if (!v) return 0;
        const char *s = dt_ynode_str(v);
        char *end = NULL;
        double x = NAN;
        if (s && *s && !isspace((unsigned char)*s)) {
                errno = 0;
                x = strtod(s, &end);
                if (errno || end == s || !isfinite(x)) x = NAN;
        }
        while (end && *end == ' ') end++;
        for (size_t i = 0; end && !isnan(x) && i < sizeof units / sizeof *units; i++)
                if (!strcmp(end, units[i].unit)) {
                        x *= units[i].mult;
                        if (x >= 1048576.0 && x <= 1125899906842624.0) {
                                *out = x;
                                return 1;
                        }
                        dt_yerr(p->d, m->y, v, "'%s' must be between 1MiB and 1PiB, got '%s'", key, s);
                        return -1;
                }
        dt_yerr(p->d, m->y, v, "'%s' must be a size with its unit, such as 300MiB, 2GiB or 512MB, got '%s'", key,
                s ? s : "a collection");
        return -1;
}

/* Reads row k's key from m into p->c; absent keys leave the field as it is. */
/* A strategy named after what it does ('pipeline', 'tensor', 'ddp') is not one of the values, but
 * says which value runs it: name that one instead of the whole list. 1 when it answered. */
static int strategy_alias(cctx *p, dt_ymap *m, const key *k)
{
        static const struct { const char *say, *run; } alias[] = {
                { "pipeline", "model (with pipeline: N stages, or hybrid for data x pipeline)" },
                { "pp", "model (with pipeline: N stages, or hybrid for data x pipeline)" },
                { "gpipe", "model (with schedule: gpipe)" },
                { "tensor", "model with tensor: N (Megatron-style splits)" },
                { "tp", "model with tensor: N (Megatron-style splits)" },
                { "megatron", "model with tensor: N (Megatron-style splits)" },
                { "ddp", "data" }, { "dp", "data" }, { "data_parallel", "data" }, { "allreduce", "data (sync: allreduce)" },
                { "model_parallel", "model" }, { "planner", "auto" }, { "plan", "auto" },
        };
        yaml_node_t *v = dt_ymap_get(m, k->name);
        const char *s = v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
        if (!s) return 0;
        for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
                if (!strcasecmp(s, alias[i].say)) {
                        dt_yerr(p->d, m->y, v, "unknown strategy '%s'; what runs it is strategy: %s", s, alias[i].run);
                        took(p, m, k, -1);
                        return 1;
                }
        return 0;
}

/* The defaults handed to the getters are the row's (what dt_cluster_spec_init stores), so `dtrain
 * keys` lists them; a value is stored only when the key was given. */
static void read_key(cctx *p, dt_ymap *m, const key *k)
{
        dt_cluster_spec *c = p->c;
        long l;
        double x;
        int i, sdef = 0;
        if (k->kind == K_NAME && k->sdef)
                while (strcmp(k->names[sdef], k->sdef)) sdef++;
        if (k->kind == K_CUTS) dt_ykey_describe("name|list", NULL);
        if (k->kind == K_SPLITS) dt_ykey_describe("mapping", NULL);
        if (k->kind == K_RECOMPUTE) dt_ykey_describe("none|all|auto|list", NULL);
        if (k->kind == K_BYTES) dt_ykey_describe("size", NULL);
        if (k->rule) dt_ykey_describe(NULL, k->rule);
        switch (k->kind) {
        case K_INT:
                if (took(p, m, k, dt_ymap_int(m, k->name, &l, (long)k->def, (long)k->min, (long)k->max, 0)))
                        put_int(c, k, (int)l);
                break;
        case K_NUM:
                if (took(p, m, k, dt_ymap_num_excl(m, k->name, &x, k->def, k->min, k->max, k->excl, 0))) {
                        DT_ASSERT(k->size == sizeof x);
                        memcpy((char *)c + k->off, &x, sizeof x);
                }
                break;
        case K_BOOL:
                if (took(p, m, k, dt_ymap_bool(m, k->name, &i, (int)k->def, 0))) put_int(c, k, i);
                break;
        case K_ENUM:
                if (k->bit == DT_CS_STRATEGY && strategy_alias(p, m, k)) break;
                if (took(p, m, k, dt_ymap_enum(m, k->name, k->names, &i, (int)k->def, 0))) put_int(c, k, i);
                break;
        case K_NAME:
                if (took(p, m, k, dt_ymap_enum(m, k->name, k->names, &i, sdef, 0))) {
                        DT_ASSERT(strlen(k->names[i]) < k->size);
                        strcpy((char *)c + k->off, k->names[i]);
                }
                break;
        case K_CUTS:
                took(p, m, k, read_cuts(p, m, k->name, &c->cuts));
                break;
        case K_SPLITS:
                took(p, m, k, read_splits(p, m, k->name, &c->splits));
                break;
        case K_RECOMPUTE: {
                yaml_node_t *v = dt_ymap_get(m, k->name);
                if (v) took(p, m, k, dt_cs_read_recompute(p->y, v, &c->recompute, p->d));
                break;
        }
        case K_BYTES:
                if (took(p, m, k, read_bytes(p, m, k->name, &x))) {
                        DT_ASSERT(k->size == sizeof x);
                        memcpy((char *)c + k->off, &x, sizeof x);
                }
                break;
        }
        if (k->vpos && (p->given & k->bit)) {
                dt_pos at = pos_of(dt_ymap_get(m, k->name));
                memcpy((char *)c + k->vpos, &at, sizeof at);
        }
}

/* Whether a key's 'want' ("topk", or "topk or powersgd") names the mode's value have. */
static int wants(const char *want, const char *have)
{
        size_t n = strlen(have);
        for (const char *w = want; w; w = strstr(w, " or ")) {
                if (w != want) w += 4;
                if (!strncmp(w, have, n) && (w[n] == 0 || w[n] == ' ')) return 1;
        }
        return 0;
}

/* One mapping's own conflicts: a key given together with the mode key that rules it out. */
static void check_modes(cctx *p)
{
        const dt_cluster_spec *c = p->c;
        const char *file = p->y->file;
        for (size_t i = 0; i < NKEYS; i++) {
                const key *k = &keys[i];
                if (!k->mode || !(p->given & k->bit) || !(p->given & k->mode)) continue;
                const char *have = mode_value(c, k->mode);
                if (wants(k->want, have)) continue;
                dt_pos at = c->key_pos[bitno(k->bit)];
                dt_diag_add(p->d, file, at.line, at.col, "key '%s' applies only to %s: %s, not %s", k->name,
                            key_of(k->mode)->name, k->want, have);
                p->rc = -1;
        }
        dt_cs_bits g;
        const char *why = c->reproducible ? repro_conflict(c, &g) : NULL;
        if ((p->given & DT_CS_REPRO) && why && (p->given & g)) {
                dt_pos at = c->key_pos[bitno(DT_CS_REPRO)];
                dt_diag_add(p->d, file, at.line, at.col, "%s", why);
                p->rc = -1;
        }
}

int dt_cluster_spec_parse(dt_cluster_spec *c, dt_ydoc *y, yaml_node_t *node, dt_diag *d)
{
        cctx p = { .c = c, .y = y, .d = d, .given = 0, .rc = 0 };
        int before = d->n;
        /* the same keys read from a cluster file's root or from the model's 'parallel:' */
        const char *ctx = node && node == dt_ydoc_root(y) ? "cluster" : "parallel";
        if (y->file) snprintf(c->file, sizeof c->file, "%s", y->file);
        dt_ymap top, sub;
        if (dt_ymap_open(&top, y, node, ctx, d) < 0) {
                p.rc = -1;
                if (node && !top.node) return -1;     /* not a mapping */
        }
        /* sections are opened as their rows come, and asked for even when absent or not a
         * mapping, so every key is known (and listed) */
        const char *open = NULL;        /* the section 'sub' reads */
        char subctx[32];
        for (size_t i = 0; i < NKEYS; i++) {
                const key *k = &keys[i];
                if (k->section != open && (!k->section || !open || strcmp(k->section, open))) {
                        if (open) dt_ymap_close(&sub);
                        open = k->section;
                        if (open) {
                                snprintf(subctx, sizeof subctx, "%s.%s", ctx, open);
                                dt_ykey_describe("mapping", "-");
                                if (dt_ymap_open(&sub, y, dt_ymap_get(&top, open), subctx, d) < 0) p.rc = -1;
                        }
                }
                read_key(&p, open ? &sub : &top, k);
        }
        check_modes(&p);
        if (open) dt_ymap_close(&sub);
        dt_ymap_close(&top);
        return p.rc < 0 || d->n > before ? -1 : 0;
}

static const char *kind_of(const yaml_node_t *n)
{
        if (n->type == YAML_MAPPING_NODE) return "a mapping";
        if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
        return "a scalar";
}

int dt_cluster_spec_top_keys(const char **out, int max)
{
        int n = 0;
        for (size_t i = 0; i < NKEYS; i++) {
                const char *k = keys[i].section ? keys[i].section : keys[i].name;
                int seen = 0;
                for (int j = 0; j < n && !seen; j++) seen = !strcmp(out[j], k);
                if (!seen && n < max) out[n++] = k;
        }
        return n;
}

int dt_cluster_spec_load(dt_cluster_spec *c, const char *path, dt_diag *d)
{
        return dt_cluster_spec_load_sets(c, path, NULL, d);
}

int dt_cluster_spec_load_sets(dt_cluster_spec *c, const char *path, const dt_sets *sets, dt_diag *d)
{
        dt_cluster_spec_init(c);
        if (strlen(path) >= DT_PATH_MAX) {
                dt_diag_add(d, NULL, 0, 0, "cluster spec path is longer than %d bytes", DT_PATH_MAX - 1);
                return -1;
        }
        strcpy(c->file, path);
        int before = d->n;
        dt_ydoc y;
        int rc = dt_ydoc_load(&y, path, d);
        if (rc == 0 && sets) dt_sets_apply(sets, &y, DT_SETS_CLUSTER, d);
        if (rc == 0) {
                yaml_node_t *root = dt_ydoc_root(&y);
                if (!root || (root->type == YAML_SCALAR_NODE &&
                              root->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                              (!root->data.scalar.length ||
                               !strcmp((const char *)root->data.scalar.value, "~")))) {
                        dt_diag_add(d, y.file, 0, 0, "empty document; expected a cluster spec mapping");
                        rc = -1;
                } else if (root->type != YAML_MAPPING_NODE) {
                        dt_yerr(d, &y, root, "expected a cluster spec mapping at the top level, got %s",
                                kind_of(root));
                        rc = -1;
                } else {
                        rc = dt_cluster_spec_parse(c, &y, root, d);
                }
        }
        dt_ydoc_free(&y);
        return rc < 0 || d->n > before ? -1 : 0;
}

/* ---- defaults, merge ---- */

void dt_cluster_spec_init(dt_cluster_spec *c)
{
        memset(c, 0, sizeof *c);
        for (size_t i = 0; i < NKEYS; i++) {
                const key *k = &keys[i];
                switch (k->kind) {
                case K_NUM: {
                        double x = k->def;
                        DT_ASSERT(k->size == sizeof x);
                        memcpy((char *)c + k->off, &x, sizeof x);
                        break;
                }
                case K_NAME:
                        DT_ASSERT(!k->sdef || strlen(k->sdef) < k->size);
                        if (k->sdef) strcpy((char *)c + k->off, k->sdef);
                        break;
                case K_CUTS:
                case K_SPLITS:
                case K_RECOMPUTE:
                case K_BYTES:
                        memset((char *)c + k->off, 0, k->size);
                        break;
                default:
                        put_int(c, k, (int)k->def);
                        break;
                }
        }
}

void dt_cluster_spec_merge(dt_cluster_spec *dst, const dt_cluster_spec *base, const dt_cluster_spec *over)
{
        dt_cluster_spec r = *base;      /* a copy: dst may be base or over */
        dt_cs_bits o = over->set;
        for (size_t i = 0; i < NKEYS; i++) {
                const key *k = &keys[i];
                if (!(o & k->bit)) continue;
                memcpy((char *)&r + k->off, (const char *)over + k->off, k->size);
                if (k->vpos) memcpy((char *)&r + k->vpos, (const char *)over + k->vpos, sizeof(dt_pos));
                r.key_pos[bitno(k->bit)] = over->key_pos[bitno(k->bit)];
        }
        r.set = base->set | o;
        r.bad = (base->bad & ~o) | over->bad;
        r.alt_set = 0;
        r.alt_file[0] = 0;
        if (o) {
                /* positions of the keys still from base point into base's file */
                r.alt_set = base->set & ~o;
                if (r.alt_set) memcpy(r.alt_file, base->file, sizeof r.alt_file);
                memcpy(r.file, over->file, sizeof r.file);
        }
        *dst = r;
}

/* ---- where a key was written, for the checks (cluster_check.c) ---- */

static const char *file_of(const dt_cluster_spec *c, dt_cs_bits bit)
{
        return (c->alt_set & bit) ? c->alt_file : c->file;
}

const char *dt_cluster_spec_file_of(const dt_cluster_spec *c, dt_cs_bits bit)
{
        return file_of(c, bit);
}

dt_pos dt_cluster_spec_pos_of(const dt_cluster_spec *c, dt_cs_bits bit)
{
        dt_pos none = { 0, 0 };
        return (c->set & bit) ? dt_cs_kpos(c, bit) : none;
}

void dt_cs_err_at(dt_diag *d, const dt_cluster_spec *c, dt_cs_bits bit, dt_pos at, const char *fmt, ...)
{
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        dt_diag_add(d, file_of(c, bit), at.line, at.col, "%s", text);
}

dt_pos dt_cs_kpos(const dt_cluster_spec *c, dt_cs_bits bit)
{
        return c->key_pos[bitno(bit)];
}

/* Both keys given in the same mapping: a conflict between them was a parse error already. */
static int same_mapping(const dt_cluster_spec *c, dt_cs_bits a, dt_cs_bits b)
{
        return (c->set & a) && (c->set & b) && !(c->alt_set & a) == !(c->alt_set & b);
}

/* Keys whose mode was set in the other file, or left at its default. */
void dt_cs_check_modes_merged(const dt_cluster_spec *c, dt_diag *d)
{
        for (size_t i = 0; i < NKEYS; i++) {
                const key *k = &keys[i];
                if (!k->mode || !(c->set & k->bit) || (c->bad & k->mode) || same_mapping(c, k->bit, k->mode))
                        continue;
                const char *have = mode_value(c, k->mode);
                if (wants(k->want, have)) continue;
                dt_cs_err_at(d, c, k->bit, dt_cs_kpos(c, k->bit), "key '%s' applies only to %s: %s, not %s%s", k->name,
                       key_of(k->mode)->name, k->want, have, (c->set & k->mode) ? "" : " (the default)");
        }
        dt_cs_bits g;
        const char *why = c->reproducible ? repro_conflict(c, &g) : NULL;
        if ((c->set & DT_CS_REPRO) && why && !(c->bad & g) && !same_mapping(c, DT_CS_REPRO, g))
                dt_cs_err_at(d, c, DT_CS_REPRO, dt_cs_kpos(c, DT_CS_REPRO), "%s", why);
}

/* ---- key listing ---- */

void dt_cluster_spec_list_keys(FILE *f)
{
        /* the parser asks for every key whether or not it is present, sections included */
        dt_ykeys_begin(NULL);
        dt_diag d = { 0 };
        dt_ydoc y;
        dt_cluster_spec c;
        dt_cluster_spec_init(&c);
        if (dt_ydoc_load_string(&y, "<keys>", "{}\n", &d) == 0)
                dt_cluster_spec_parse(&c, &y, dt_ydoc_root(&y), &d);
        dt_ydoc_free(&y);
        dt_diag_free(&d);
        dt_ykeys_end(f, NULL, 0);
}
