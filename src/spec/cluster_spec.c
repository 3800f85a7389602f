/* spec/cluster_spec.c - dtrain-cluster(5): a cluster file's root, or the model's 'parallel:' value,
 * into a dt_cluster_spec. Bad values and one mapping's own mode conflicts are parse errors; what
 * needs the run (world size, batch) or both files (a key whose mode the other file sets) is
 * checked by dt_cluster_spec_validate. Every error goes to the dt_diag at file:line:col. */
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const dt_part_names[] = { "data", "model", "hybrid", "auto", NULL };
const char *const dt_sync_names[] = { "allreduce", "average", "ssp", NULL };
const char *const dt_comp_names[] = { "none", "fp16", "topk", NULL };
static const char *const device_names[] = { "cpu", "cuda", "auto", NULL };
static const char *const comm_names[] = { "mpi", "nccl", NULL };

#define RANKS_MAX 1048576L
#define THREADS_MAX 4096L
#define EVERY_MAX 1000000L
#define STALENESS_MAX 1000L
#define CHUNKS_MAX 65536L
#define MICRO_MAX 1048576L      /* the model's largest batch */
#define TIMEOUT_MAX 86400.0     /* a day */

/* A key that only means something in one mode: 'bit' applies only when the key 'gkey' (bit gbit)
 * has the value 'want'. */
static const struct dep {
        unsigned bit;
        const char *key;
        unsigned gbit;
        const char *gkey, *want;
} deps[] = {
        { DT_CS_EVERY, "average_every", DT_CS_SYNC, "sync", "average" },
        { DT_CS_STALENESS, "staleness", DT_CS_SYNC, "sync", "ssp" },
        { DT_CS_COMPRESSION, "compression", DT_CS_SYNC, "sync", "allreduce" },
        { DT_CS_TOPK, "topk_ratio", DT_CS_COMPRESSION, "compression", "topk" },
        { DT_CS_CHUNKS, "chunks", DT_CS_REPRO, "reproducible", "true" },
};

static int bitno(unsigned bit)
{
        int i = 0;
        while (bit > 1) {
                bit >>= 1;
                i++;
        }
        return i;
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
static const char *mode_value(const dt_cluster_spec *c, unsigned gbit)
{
        switch (gbit) {
        case DT_CS_SYNC: return dt_sync_names[c->sync];
        case DT_CS_COMPRESSION: return dt_comp_names[c->compression];
        default: return c->reproducible ? "true" : "false";
        }
}

/* Why reproducible mode cannot run with c's sync or compression (NULL when it can); *gbit names
 * the key in the way. Compression is only looked at under allreduce, where it applies. */
static const char *repro_conflict(const dt_cluster_spec *c, unsigned *gbit)
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
        return NULL;
}

/* ---- parsing ---- */

typedef struct cctx {
        dt_cluster_spec *c;
        dt_ydoc *y;
        dt_diag *d;
        unsigned given;         /* keys given in this mapping */
        int rc;
} cctx;

/* The key node (not the value) of key in m, so mode errors point at the key itself. */
static yaml_node_t *key_node(const dt_ymap *m, const char *key)
{
        if (!m->node) return NULL;
        yaml_node_pair_t *b = m->node->data.mapping.pairs.start, *e = m->node->data.mapping.pairs.top;
        for (yaml_node_pair_t *p = b; p < e; p++) {
                yaml_node_t *k = yaml_document_get_node(&m->y->doc, p->key);
                if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
                        return k;
        }
        return NULL;
}

/* Books a getter's result r for key: 1 marks it given and records where, -1 marks it bad.
 * Returns 1 when the value should be stored. */
static int took(cctx *p, const dt_ymap *m, const char *key, unsigned bit, int r)
{
        if (r < 0) {
                p->rc = -1;
                p->c->bad |= bit;
                return 0;
        }
        if (r == 0) return 0;
        p->given |= bit;
        p->c->set |= bit;
        p->c->bad &= ~bit;
        p->c->key_pos[bitno(bit)] = pos_of(key_node(m, key));
        return 1;
}

static void get_int(cctx *p, dt_ymap *m, const char *key, unsigned bit, int *field, long min, long max)
{
        long v;
        if (took(p, m, key, bit, dt_ymap_int(m, key, &v, 0, min, max, 0))) *field = (int)v;
}

static void get_num(cctx *p, dt_ymap *m, const char *key, unsigned bit, double *field, double min,
                    double max, int excl)
{
        double v;
        if (took(p, m, key, bit, dt_ymap_num_excl(m, key, &v, 0.0, min, max, excl, 0))) *field = v;
}

static int get_enum(cctx *p, dt_ymap *m, const char *key, unsigned bit, const char *const *names, int *idx)
{
        return took(p, m, key, bit, dt_ymap_enum(m, key, names, idx, 0, 0));
}

/* One mapping's own conflicts: a key given together with the mode key that rules it out. */
static void check_modes(cctx *p, const dt_ymap *m)
{
        const dt_cluster_spec *c = p->c;
        for (size_t i = 0; i < sizeof deps / sizeof deps[0]; i++) {
                const struct dep *q = &deps[i];
                if (!(p->given & q->bit) || !(p->given & q->gbit)) continue;
                const char *have = mode_value(c, q->gbit);
                if (!strcmp(have, q->want)) continue;
                dt_yerr(p->d, p->y, key_node(m, q->key), "key '%s' applies only to %s: %s, not %s", q->key,
                        q->gkey, q->want, have);
                p->rc = -1;
        }
        unsigned g;
        const char *why = c->reproducible ? repro_conflict(c, &g) : NULL;
        if ((p->given & DT_CS_REPRO) && why && (p->given & g)) {
                dt_yerr(p->d, p->y, key_node(m, "reproducible"), "%s", why);
                p->rc = -1;
        }
}

static void parse_network(cctx *p, dt_ymap *top, const char *ctx)
{
        char sub[32];
        snprintf(sub, sizeof sub, "%s.network", ctx);
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, dt_ymap_get(top, "network"), sub, p->d) < 0) p->rc = -1;
        /* asked even when absent or not a mapping, so every key is known (and listed) */
        get_num(p, &m, "latency_us", DT_CS_LATENCY, &p->c->latency_us, 0.0, 1e5, 0);
        get_num(p, &m, "bandwidth_gbs", DT_CS_BANDWIDTH, &p->c->bandwidth_gbs, 0.0, 1e5, DT_YEXCL_MIN);
        dt_ymap_close(&m);
}

static void parse_partition(cctx *p, dt_ymap *top, const char *ctx)
{
        dt_cluster_spec *c = p->c;
        char sub[32];
        snprintf(sub, sizeof sub, "%s.partition", ctx);
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, dt_ymap_get(top, "partition"), sub, p->d) < 0) p->rc = -1;
        int k;
        if (get_enum(p, &m, "strategy", DT_CS_STRATEGY, dt_part_names, &k)) {
                c->strategy = (dt_part_strategy)k;
                c->strategy_pos = pos_of(dt_ymap_get(&m, "strategy"));
        }
        if (get_enum(p, &m, "sync", DT_CS_SYNC, dt_sync_names, &k)) c->sync = (dt_sync_kind)k;
        get_num(p, &m, "bucket_mb", DT_CS_BUCKET, &c->bucket_mb, 0.0, 1024.0, DT_YEXCL_MIN);
        get_int(p, &m, "average_every", DT_CS_EVERY, &c->average_every, 1, EVERY_MAX);
        get_int(p, &m, "staleness", DT_CS_STALENESS, &c->staleness, 0, STALENESS_MAX);
        if (get_enum(p, &m, "compression", DT_CS_COMPRESSION, dt_comp_names, &k)) c->compression = (dt_comp_kind)k;
        get_num(p, &m, "topk_ratio", DT_CS_TOPK, &c->topk_ratio, 0.0, 1.0, DT_YEXCL_MIN);
        int b;
        if (took(p, &m, "reproducible", DT_CS_REPRO, dt_ymap_bool(&m, "reproducible", &b, 0, 0)))
                c->reproducible = b;
        get_int(p, &m, "chunks", DT_CS_CHUNKS, &c->chunks, 1, CHUNKS_MAX);
        get_int(p, &m, "micro_batch", DT_CS_MICRO, &c->micro_batch, 0, MICRO_MAX);
        if (get_enum(p, &m, "comm", DT_CS_COMM, comm_names, &k)) strcpy(c->comm, comm_names[k]);
        check_modes(p, &m);
        dt_ymap_close(&m);
}

int dt_cluster_spec_parse(dt_cluster_spec *c, dt_ydoc *y, yaml_node_t *node, dt_diag *d)
{
        cctx p = { .c = c, .y = y, .d = d, .given = 0, .rc = 0 };
        int before = d->n;
        /* the same keys read from a cluster file's root or from the model's 'parallel:' */
        const char *ctx = node && node == dt_ydoc_root(y) ? "cluster" : "parallel";
        if (y->file) snprintf(c->file, sizeof c->file, "%s", y->file);
        dt_ymap m;
        if (dt_ymap_open(&m, y, node, ctx, d) < 0) {
                p.rc = -1;
                if (node && !m.node) return -1;     /* not a mapping */
        }
        get_int(&p, &m, "ranks", DT_CS_RANKS, &c->ranks, 0, RANKS_MAX);
        if (p.given & DT_CS_RANKS) c->ranks_pos = pos_of(dt_ymap_get(&m, "ranks"));
        get_int(&p, &m, "threads_per_rank", DT_CS_THREADS, &c->threads_per_rank, 0, THREADS_MAX);
        int k;
        if (get_enum(&p, &m, "device", DT_CS_DEVICE, device_names, &k)) strcpy(c->device, device_names[k]);
        parse_network(&p, &m, ctx);
        get_num(&p, &m, "collective_timeout", DT_CS_TIMEOUT, &c->collective_timeout, 0.0, TIMEOUT_MAX,
                DT_YEXCL_MIN);
        parse_partition(&p, &m, ctx);
        dt_ymap_close(&m);
        return p.rc < 0 || d->n > before ? -1 : 0;
}

static const char *kind_of(const yaml_node_t *n)
{
        if (n->type == YAML_MAPPING_NODE) return "a mapping";
        if (n->type == YAML_SEQUENCE_NODE) return "a sequence";
        return "a scalar";
}

int dt_cluster_spec_load(dt_cluster_spec *c, const char *path, dt_diag *d)
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
        c->latency_us = 1.0;
        c->bandwidth_gbs = 10.0;
        c->strategy = DT_PART_DATA;
        c->sync = DT_SYNC_ALLREDUCE;
        c->bucket_mb = 1.0;
        c->average_every = 1;
        c->staleness = 2;
        c->compression = DT_COMP_NONE;
        c->topk_ratio = 0.01;
        c->chunks = 16;
        c->collective_timeout = 300.0;
        strcpy(c->comm, "mpi");
}

void dt_cluster_spec_merge(dt_cluster_spec *dst, const dt_cluster_spec *base, const dt_cluster_spec *over)
{
        dt_cluster_spec r = *base;      /* a copy: dst may be base or over */
        unsigned o = over->set;
        if (o & DT_CS_RANKS) {
                r.ranks = over->ranks;
                r.ranks_pos = over->ranks_pos;
        }
        if (o & DT_CS_THREADS) r.threads_per_rank = over->threads_per_rank;
        if (o & DT_CS_DEVICE) memcpy(r.device, over->device, sizeof r.device);
        if (o & DT_CS_LATENCY) r.latency_us = over->latency_us;
        if (o & DT_CS_BANDWIDTH) r.bandwidth_gbs = over->bandwidth_gbs;
        if (o & DT_CS_STRATEGY) {
                r.strategy = over->strategy;
                r.strategy_pos = over->strategy_pos;
        }
        if (o & DT_CS_SYNC) r.sync = over->sync;
        if (o & DT_CS_BUCKET) r.bucket_mb = over->bucket_mb;
        if (o & DT_CS_EVERY) r.average_every = over->average_every;
        if (o & DT_CS_STALENESS) r.staleness = over->staleness;
        if (o & DT_CS_COMPRESSION) r.compression = over->compression;
        if (o & DT_CS_TOPK) r.topk_ratio = over->topk_ratio;
        if (o & DT_CS_REPRO) r.reproducible = over->reproducible;
        if (o & DT_CS_CHUNKS) r.chunks = over->chunks;
        if (o & DT_CS_MICRO) r.micro_batch = over->micro_batch;
        if (o & DT_CS_TIMEOUT) r.collective_timeout = over->collective_timeout;
        if (o & DT_CS_COMM) memcpy(r.comm, over->comm, sizeof r.comm);
        for (int i = 0; i < DT_CS_NKEYS; i++)
                if (o & (1u << i)) r.key_pos[i] = over->key_pos[i];
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

/* ---- validation ---- */

static const char *file_of(const dt_cluster_spec *c, unsigned bit)
{
        return (c->alt_set & bit) ? c->alt_file : c->file;
}

static void err_at(dt_diag *d, const dt_cluster_spec *c, unsigned bit, dt_pos at, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

static void err_at(dt_diag *d, const dt_cluster_spec *c, unsigned bit, dt_pos at, const char *fmt, ...)
{
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        dt_diag_add(d, file_of(c, bit), at.line, at.col, "%s", text);
}

static dt_pos kpos(const dt_cluster_spec *c, unsigned bit)
{
        return c->key_pos[bitno(bit)];
}

/* Both keys given in the same mapping: a conflict between them was a parse error already. */
static int same_mapping(const dt_cluster_spec *c, unsigned a, unsigned b)
{
        return (c->set & a) && (c->set & b) && !(c->alt_set & a) == !(c->alt_set & b);
}

/* Keys whose mode was set in the other file, or left at its default. */
static void check_modes_merged(const dt_cluster_spec *c, dt_diag *d)
{
        for (size_t i = 0; i < sizeof deps / sizeof deps[0]; i++) {
                const struct dep *q = &deps[i];
                if (!(c->set & q->bit) || (c->bad & q->gbit) || same_mapping(c, q->bit, q->gbit)) continue;
                const char *have = mode_value(c, q->gbit);
                if (!strcmp(have, q->want)) continue;
                err_at(d, c, q->bit, kpos(c, q->bit), "key '%s' applies only to %s: %s, not %s%s", q->key,
                       q->gkey, q->want, have, (c->set & q->gbit) ? "" : " (the default)");
        }
        unsigned g;
        const char *why = c->reproducible ? repro_conflict(c, &g) : NULL;
        if ((c->set & DT_CS_REPRO) && why && !(c->bad & g) && !same_mapping(c, DT_CS_REPRO, g))
                err_at(d, c, DT_CS_REPRO, kpos(c, DT_CS_REPRO), "%s", why);
}

int dt_cluster_spec_validate(const dt_cluster_spec *c, const struct dt_model_spec *m, int world_size, dt_diag *d)
{
        int before = d->n;
        if ((c->set & DT_CS_RANKS) && c->ranks != 0 && c->ranks != world_size)
                err_at(d, c, DT_CS_RANKS, c->ranks_pos,
                       "'ranks' is %d but the job has %d MPI rank%s (mpirun -np / srun -n)", c->ranks,
                       world_size, world_size == 1 ? "" : "s");
        if (c->strategy != DT_PART_DATA)
                err_at(d, c, DT_CS_STRATEGY, c->strategy_pos,
                       "strategy '%s' is not supported by this version; use 'data'", dt_part_names[c->strategy]);
        check_modes_merged(c, d);
        int batch = m ? m->train.batch : 0;
        if (m && batch < world_size) {
                /* data parallel splits the global batch; an empty slice would stall the sums */
                dt_diag_add(d, m->file[0] ? m->file : NULL, m->train.batch_pos.line, m->train.batch_pos.col,
                            "batch %d is smaller than the number of ranks (%d); each rank needs at least "
                            "one sample", batch, world_size);
        }
        if (c->reproducible && !(c->bad & DT_CS_CHUNKS)) {
                /* the sum is taken chunk by chunk in a fixed order whatever the rank count, so the
                 * chunks must be fixed by the batch alone and every rank must own at least one */
                unsigned at = (c->set & DT_CS_CHUNKS) ? DT_CS_CHUNKS : DT_CS_REPRO;
                const char *dflt = (c->set & DT_CS_CHUNKS) ? "" : " (the default)";
                if (m && batch % c->chunks)
                        err_at(d, c, at, kpos(c, at), "batch %d is not a multiple of chunks %d%s", batch,
                               c->chunks, dflt);
                if (c->chunks < world_size)
                        err_at(d, c, at, kpos(c, at), "chunks (%d) must be at least the number of ranks (%d)%s",
                               c->chunks, world_size, dflt);
        }
        return d->n > before ? -1 : 0;
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
        dt_ykeys_end(f);
}
