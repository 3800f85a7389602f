/* tests/unit/test_cluster.c - Check tests of the cluster spec (dtrain-cluster(5)): defaults, every
 * key, mode conflicts within a mapping and across files, merge, validate, the model's 'parallel:'
 * section and the key list. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

/* ---- helpers ---- */

/* The i-th message as "file:line:col: text". */
static const char *msg(const dt_diag *d, int i, char *buf, size_t len)
{
        ck_assert_int_lt(i, d->n);
        snprintf(buf, len, "%s:%d:%d: %s", d->msgs[i].file ? d->msgs[i].file : "", d->msgs[i].line,
                 d->msgs[i].col, d->msgs[i].text);
        return buf;
}

/* Parses text as a cluster file named c.yaml; returns parse's result. */
static int parse_text(dt_cluster_spec *c, const char *text, dt_diag *d)
{
        dt_ydoc y;
        dt_cluster_spec_init(c);
        int rc = dt_ydoc_load_string(&y, "c.yaml", text, d);
        if (rc == 0) rc = dt_cluster_spec_parse(c, &y, dt_ydoc_root(&y), d);
        dt_ydoc_free(&y);
        return rc;
}

static char tmpdir[256];

static void make_tmpdir(void)
{
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/dtrain-test-cluster.XXXXXX", t && *t ? t : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        ck_assert_int_eq(system(cmd), 0);
}

/* Writes text to tmpdir/name and returns the path (a static buffer per name used here). */
static const char *write_file(const char *name, const char *text)
{
        static char mpath[512], cpath[512];
        char *path = name[0] == 'm' ? mpath : cpath;
        snprintf(path, 512, "%s/%s", tmpdir, name);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        fclose(f);
        return path;
}

/* A valid model, lines 1-6; 'parallel:' text may follow. */
#define MODEL "name: t\ninput: [4]\nlayers:\n  - {type: fc, units: 3}\n" \
              "data:\n  train: {format: synthetic, n: 10}\n"

/* ---- defaults and every key ---- */

START_TEST(test_defaults)
{
        dt_cluster_spec c;
        dt_cluster_spec_init(&c);
        ck_assert_uint_eq(c.set, 0);
        ck_assert_int_eq(c.ranks, 0);
        ck_assert_int_eq(c.threads_per_rank, 0);
        ck_assert_str_eq(c.device, "");
        ck_assert_double_eq(c.latency_us, 1.0);
        ck_assert_double_eq(c.bandwidth_gbs, 10.0);
        ck_assert_int_eq(c.strategy, DT_PART_DATA);
        ck_assert_int_eq(c.sync, DT_SYNC_ALLREDUCE);
        ck_assert_double_eq(c.bucket_mb, 1.0);
        ck_assert_int_eq(c.average_every, 1);
        ck_assert_int_eq(c.staleness, 2);
        ck_assert_int_eq(c.compression, DT_COMP_NONE);
        ck_assert_double_eq(c.topk_ratio, 0.2);
        ck_assert_int_eq(c.compression_warmup, 100);
        ck_assert_int_eq(c.reproducible, 0);
        ck_assert_int_eq(c.chunks, 16);
        ck_assert_int_eq(c.micro_batch, 0);
        ck_assert_double_eq(c.collective_timeout, 300.0);
        ck_assert_str_eq(c.comm, "mpi");
        ck_assert_str_eq(dt_part_names[DT_PART_HYBRID], "hybrid");
        ck_assert_str_eq(dt_sync_names[DT_SYNC_SSP], "ssp");
        ck_assert_str_eq(dt_comp_names[DT_COMP_TOPK], "topk");
        ck_assert_ptr_null(dt_part_names[DT_PART_COUNT]);
        ck_assert_ptr_null(dt_sync_names[DT_SYNC_COUNT]);
        ck_assert_ptr_null(dt_comp_names[DT_COMP_COUNT]);

        /* an empty mapping sets nothing */
        dt_diag d = { 0 };
        ck_assert_int_eq(parse_text(&c, "{}\n", &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_uint_eq(c.set, 0);
        ck_assert_str_eq(c.file, "c.yaml");
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_every_key)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        const char *text =
                "ranks: 4\n"                                            /* 1 */
                "threads_per_rank: 2\n"
                "device: cuda\n"
                "network: {latency_us: 2.5, bandwidth_gbs: 25}\n"
                "collective_timeout: 60\n"                              /* 5 */
                "partition:\n"
                "  strategy: auto\n"
                "  sync: allreduce\n"
                "  bucket_mb: 0.5\n"
                "  compression: topk\n"                                 /* 10 */
                "  topk_ratio: 0.1\n"
                "  micro_batch: 8\n"
                "  comm: nccl\n";
        ck_assert_int_eq(parse_text(&c, text, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_int_eq(c.ranks, 4);
        ck_assert_int_eq(c.ranks_pos.line, 1);
        ck_assert_int_eq(c.ranks_pos.col, 8);
        ck_assert_int_eq(c.threads_per_rank, 2);
        ck_assert_str_eq(c.device, "cuda");
        ck_assert_double_eq(c.latency_us, 2.5);
        ck_assert_double_eq(c.bandwidth_gbs, 25.0);
        ck_assert_double_eq(c.collective_timeout, 60.0);
        ck_assert_int_eq(c.strategy, DT_PART_AUTO);
        ck_assert_int_eq(c.strategy_pos.line, 7);
        ck_assert_int_eq(c.strategy_pos.col, 13);
        ck_assert_int_eq(c.sync, DT_SYNC_ALLREDUCE);
        ck_assert_double_eq(c.bucket_mb, 0.5);
        ck_assert_int_eq(c.compression, DT_COMP_TOPK);
        ck_assert_double_eq(c.topk_ratio, 0.1);
        ck_assert_int_eq(c.compression_warmup, 100);
        ck_assert_int_eq(c.micro_batch, 8);
        ck_assert_str_eq(c.comm, "nccl");
        unsigned want = DT_CS_RANKS | DT_CS_THREADS | DT_CS_DEVICE | DT_CS_LATENCY | DT_CS_BANDWIDTH |
                        DT_CS_TIMEOUT | DT_CS_STRATEGY | DT_CS_SYNC | DT_CS_BUCKET | DT_CS_COMPRESSION |
                        DT_CS_TOPK | DT_CS_MICRO | DT_CS_COMM;
        ck_assert_uint_eq(c.set, want);
        ck_assert_uint_eq(c.bad, 0);
        /* key positions are the key nodes: topk_ratio is bit 11 */
        ck_assert_int_eq(c.key_pos[11].line, 11);
        ck_assert_int_eq(c.key_pos[11].col, 3);
        /* the other modes' keys */
        ck_assert_int_eq(parse_text(&c, "partition: {sync: ssp, staleness: 0}\n", &d), 0);
        ck_assert_int_eq(c.sync, DT_SYNC_SSP);
        ck_assert_int_eq(c.staleness, 0);
        ck_assert_int_eq(parse_text(&c, "partition: {sync: average, average_every: 8}\n", &d), 0);
        ck_assert_int_eq(c.average_every, 8);
        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: yes, chunks: 32}\n", &d), 0);
        ck_assert_int_eq(c.reproducible, 1);
        ck_assert_int_eq(c.chunks, 32);
        ck_assert_int_eq(d.n, 0);
        dt_diag_free(&d);
}
END_TEST

/* ---- errors within one mapping ---- */

/* memory_per_rank: binary and decimal units, plain bytes; the value's position; bad units and
 * sizes out of range at file:line:col */
START_TEST(test_memory_units)
{
        static const struct { const char *v; double bytes; } ok[] = {
                { "300MiB", 300.0 * 1048576 }, { "2GiB", 2.0 * 1073741824 }, { "512MB", 512e6 },
                { "1.5GiB", 1.5 * 1073741824 }, { "4194304", 4194304 }, { "8 MiB", 8.0 * 1048576 }, { "1TB", 1e12 },
        };
        dt_cluster_spec c;
        char text[128];
        for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
                dt_diag d = { 0 };
                snprintf(text, sizeof text, "memory_per_rank: %s\n", ok[i].v);
                ck_assert_int_eq(parse_text(&c, text, &d), 0);
                ck_assert_double_eq(c.memory_per_rank, ok[i].bytes);
                ck_assert_int_eq(c.memory_pos.line, 1);
                ck_assert_int_eq(c.memory_pos.col, 18);
                ck_assert(c.set & DT_CS_MEMORY);
                dt_diag_free(&d);
        }
        static const char *const bad[] = { "300 parsecs", "MiB", "-5MiB", "512KiB", "2PB", "[1, 2]", "300mib", "nan" };
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
                dt_diag d = { 0 };
                snprintf(text, sizeof text, "memory_per_rank: %s\n", bad[i]);
                ck_assert_int_eq(parse_text(&c, text, &d), -1);
                ck_assert_int_eq(d.n, 1);
                ck_assert_int_eq(d.msgs[0].line, 1);
                ck_assert_int_eq(d.msgs[0].col, 18);
                ck_assert_ptr_nonnull(strstr(d.msgs[0].text, "'memory_per_rank' must be"));
                ck_assert(c.bad & DT_CS_MEMORY);
                dt_diag_free(&d);
        }
        dt_cluster_spec_init(&c);
        ck_assert_double_eq(c.memory_per_rank, 0);
        ck_assert_int_eq(c.checkpoint_snapshots, 1);
        dt_diag d = { 0 };
        ck_assert_int_eq(parse_text(&c, "checkpoint_snapshots: 2\n", &d), 0);
        ck_assert_int_eq(c.checkpoint_snapshots, 2);
        ck_assert_int_eq(parse_text(&c, "checkpoint_snapshots: 3\n", &d), -1);
        ck_assert_int_eq(d.msgs[0].col, 23);
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_value_errors)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        char b[512];
        const char *text =
                "ranks: four\n"
                "collective_timeout: .nan\n"
                "network: {latency_us: .inf}\n"
                "partition:\n"
                "  bucket_mb: 0\n"
                "  chunks: 0\n"
                "  sync: allreduse\n"
                "  strategy: [data]\n"
                "  stalenes: 3\n";
        ck_assert_int_eq(parse_text(&c, text, &d), -1);
        ck_assert_int_eq(d.n, 8);
        /* in the order the keys are read */
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:8: 'ranks' must be an integer in [0, 1048576], got 'four'");
        ck_assert_str_eq(msg(&d, 1, b, sizeof b),
                         "c.yaml:3:23: 'latency_us' must be a number in [0, 100000], got '.inf'");
        ck_assert_str_eq(msg(&d, 2, b, sizeof b),
                         "c.yaml:2:21: 'collective_timeout' must be a number in (0, 86400], got '.nan'");
        ck_assert_str_eq(msg(&d, 3, b, sizeof b),
                         "c.yaml:8:13: 'strategy' must be one of data, model, hybrid, auto; got a sequence");
        ck_assert_str_eq(msg(&d, 4, b, sizeof b),
                         "c.yaml:7:9: unknown value 'allreduse' for 'sync'; did you mean 'allreduce'?");
        ck_assert_str_eq(msg(&d, 5, b, sizeof b), "c.yaml:5:14: 'bucket_mb' must be a number in (0, 1024], got '0'");
        ck_assert_str_eq(msg(&d, 6, b, sizeof b), "c.yaml:6:11: 'chunks' must be an integer in [1, 65536], got '0'");
        ck_assert_str_eq(msg(&d, 7, b, sizeof b),
                         "c.yaml:9:3: unknown key 'stalenes' in 'cluster.partition'; did you mean 'staleness'?");
        /* bad keys are neither set nor used by the mode checks */
        unsigned bad = DT_CS_RANKS | DT_CS_TIMEOUT | DT_CS_LATENCY | DT_CS_BUCKET | DT_CS_CHUNKS | DT_CS_SYNC |
                       DT_CS_STRATEGY;
        ck_assert_uint_eq(c.bad, bad);
        ck_assert_uint_eq(c.set, 0);
        ck_assert_int_eq(c.ranks, 0);
        ck_assert_int_eq(c.chunks, 16);
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "network: fast\npartition: [1]\n", &d), -1);
        ck_assert_int_eq(d.n, 2);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:10: expected a mapping for 'cluster.network', got a scalar");
        ck_assert_str_eq(msg(&d, 1, b, sizeof b),
                         "c.yaml:2:12: expected a mapping for 'cluster.partition', got a sequence");
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_mode_conflicts)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        char b[512];
        ck_assert_int_eq(parse_text(&c, "partition:\n  sync: allreduce\n  staleness: 3\n  average_every: 2\n", &d), -1);
        ck_assert_int_eq(d.n, 2);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:4:3: key 'average_every' applies only to sync: average, not allreduce");
        ck_assert_str_eq(msg(&d, 1, b, sizeof b), "c.yaml:3:3: key 'staleness' applies only to sync: ssp, not allreduce");
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "partition: {sync: ssp, compression: fp16}\n", &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:24: key 'compression' applies only to sync: allreduce, not ssp");
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "partition: {compression: fp16, topk_ratio: 0.5}\n", &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:32: key 'topk_ratio' applies only to compression: topk, not fp16");
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: false, chunks: 4}\n", &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:34: key 'chunks' applies only to reproducible: true, not false");
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: true, compression: topk}\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), "c.yaml:1:13: 'reproducible: true' needs compression: none; topk"));
        dt_diag_free(&d);

        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: true, sync: average}\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), "'reproducible: true' needs sync: allreduce; averaging"));
        dt_diag_free(&d);

        /* a mode key with a bad value does not cascade */
        ck_assert_int_eq(parse_text(&c, "partition: {sync: sp, staleness: 3}\n", &d), -1);
        ck_assert_int_eq(d.n, 1);
        dt_model_spec m;
        memset(&m, 0, sizeof m);
        m.train.batch = 64;
        dt_diag_free(&d);
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 1, &d), 0);
        dt_diag_free(&d);

        /* fine: compression none under allreduce with reproducible */
        ck_assert_int_eq(parse_text(&c, "partition: {reproducible: true, compression: none, sync: allreduce}\n", &d), 0);
        ck_assert_int_eq(d.n, 0);
        dt_diag_free(&d);
}
END_TEST

/* ---- merge and validate ---- */

START_TEST(test_merge)
{
        dt_cluster_spec base, over, eff;
        dt_diag d = { 0 };
        dt_ydoc y;
        dt_cluster_spec_init(&base);
        ck_assert_int_eq(dt_ydoc_load_string(&y, "model.yaml", "parallel:\n  ranks: 2\n  partition: {sync: ssp, staleness: 4, bucket_mb: 2}\n", &d), 0);
        yaml_node_t *root = dt_ydoc_root(&y);
        yaml_node_t *pv = yaml_document_get_node(&y.doc, root->data.mapping.pairs.start->value);
        ck_assert_int_eq(dt_cluster_spec_parse(&base, &y, pv, &d), 0);
        dt_ydoc_free(&y);
        ck_assert_int_eq(parse_text(&over, "partition: {staleness: 1, micro_batch: 4}\n", &d), 0);
        ck_assert_int_eq(d.n, 0);

        dt_cluster_spec_merge(&eff, &base, &over);
        ck_assert_int_eq(eff.ranks, 2);
        ck_assert_int_eq(eff.sync, DT_SYNC_SSP);
        ck_assert_int_eq(eff.staleness, 1);
        ck_assert_double_eq(eff.bucket_mb, 2.0);
        ck_assert_int_eq(eff.micro_batch, 4);
        ck_assert_double_eq(eff.collective_timeout, 300.0);
        ck_assert_uint_eq(eff.set, DT_CS_RANKS | DT_CS_SYNC | DT_CS_STALENESS | DT_CS_BUCKET | DT_CS_MICRO);
        ck_assert_str_eq(eff.file, "c.yaml");
        ck_assert_str_eq(eff.alt_file, "model.yaml");
        ck_assert_uint_eq(eff.alt_set, DT_CS_RANKS | DT_CS_SYNC | DT_CS_BUCKET);
        ck_assert_int_eq(eff.key_pos[9].line, 1);      /* staleness, from c.yaml */
        ck_assert_int_eq(eff.ranks_pos.line, 2);       /* from model.yaml */

        /* ranks is reported in the file it came from */
        char b[512];
        dt_model_spec m;
        memset(&m, 0, sizeof m);
        m.train.batch = 64;
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 3, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b),
                         "model.yaml:2:10: 'ranks' is 2 but the job has 3 MPI ranks (mpirun -np / srun -n)");
        dt_diag_free(&d);
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 2, &d), 0);

        /* nothing given in the file: everything stays the model's */
        dt_cluster_spec none;
        dt_cluster_spec_init(&none);
        dt_cluster_spec_merge(&eff, &base, &none);
        ck_assert_str_eq(eff.file, "model.yaml");
        ck_assert_uint_eq(eff.alt_set, 0);
        ck_assert_int_eq(eff.staleness, 4);

        /* in place, either way round */
        dt_cluster_spec a = base;
        dt_cluster_spec_merge(&a, &a, &over);
        ck_assert_int_eq(a.staleness, 1);
        ck_assert_int_eq(a.ranks, 2);
        dt_cluster_spec o2 = over;
        dt_cluster_spec_merge(&o2, &base, &o2);
        ck_assert_int_eq(o2.staleness, 1);
        ck_assert_int_eq(o2.ranks, 2);
        dt_diag_free(&d);
}
END_TEST

START_TEST(test_validate)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        char b[512];
        dt_model_spec m;
        memset(&m, 0, sizeof m);
        strcpy(m.file, "m.yaml");
        m.train.batch = 100;
        m.train.batch_pos = (dt_pos){ 9, 10 };

        ck_assert_int_eq(parse_text(&c, "ranks: 4\npartition: {strategy: hybrid, tensor: 3}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 2, &d), -1);
        ck_assert_int_eq(d.n, 2);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:1:8: 'ranks' is 4 but the job has 2 MPI ranks (mpirun -np / srun -n)");
        ck_assert_str_eq(msg(&d, 1, b, sizeof b), "c.yaml:2:31: the grid data 1 x pipeline 1 x tensor 3 = 3 ranks, "
                         "but the job has 2 (mpirun -np / srun -n)");
        dt_diag_free(&d);

        /* reproducible: chunks must divide the batch and cover every rank */
        ck_assert_int_eq(parse_text(&c, "partition:\n  reproducible: true\n  chunks: 16\n", &d), 0);
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 1, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:3:3: batch 100 is not a multiple of chunks 16");
        dt_diag_free(&d);
        m.train.batch = 64;
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 16, &d), 0);
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 32, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:3:3: chunks (16) must be at least the number of ranks (32)");
        dt_diag_free(&d);
        /* the default chunks, reported at 'reproducible' */
        ck_assert_int_eq(parse_text(&c, "partition:\n  reproducible: true\n", &d), 0);
        m.train.batch = 24;
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 1, &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "c.yaml:2:3: batch 24 is not a multiple of chunks 16 (the default)");
        dt_diag_free(&d);
        /* without a model only the rank checks run */
        ck_assert_int_eq(dt_cluster_spec_validate(&c, NULL, 1, &d), 0);

        /* every rank needs a sample */
        ck_assert_int_eq(parse_text(&c, "{}\n", &d), 0);
        m.train.batch = 4;
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 8, &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b),
                         "m.yaml:9:10: batch 4 is smaller than the number of ranks (8); each rank needs at least one sample");
        dt_diag_free(&d);

        /* ssp, average and compression are fine with any world size */
        m.train.batch = 64;
        ck_assert_int_eq(parse_text(&c, "partition: {sync: ssp, staleness: 0}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_spec_validate(&c, &m, 7, &d), 0);
        ck_assert_int_eq(d.n, 0);
}
END_TEST

/* A key whose mode is set in the other file (or left at its default) is validate's to report,
 * in the file the key came from. */
START_TEST(test_modes_across_files)
{
        make_tmpdir();
        dt_diag d = { 0 };
        char b[DT_PATH_MAX + 256], want[DT_PATH_MAX + 256];
        dt_model_spec m;
        const char *mp = write_file("m.yaml", MODEL "parallel:\n  partition: {staleness: 3}\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), 0);  /* sync may still come from the cluster */
        dt_cluster_spec file, eff;
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "partition: {sync: ssp}\n"), &d), 0);
        dt_cluster_spec_merge(&eff, &m.parallel, &file);
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 2, &d), 0);

        /* the cluster file picks allreduce: the model's staleness no longer applies */
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "partition: {sync: allreduce}\n"), &d), 0);
        dt_cluster_spec_merge(&eff, &m.parallel, &file);
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 2, &d), -1);
        ck_assert_int_eq(d.n, 1);
        snprintf(want, sizeof want, "%s:8:15: key 'staleness' applies only to sync: ssp, not allreduce", mp);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), want);
        dt_diag_free(&d);

        /* no cluster file: sync is the default */
        dt_cluster_spec_init(&file);
        dt_cluster_spec_merge(&eff, &m.parallel, &file);
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 1, &d), -1);
        snprintf(want, sizeof want, "%s:8:15: key 'staleness' applies only to sync: ssp, not allreduce (the default)", mp);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), want);
        dt_diag_free(&d);

        /* reproducible in one file, fp16 in the other */
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "partition:\n  reproducible: true\n"), &d), 0);
        dt_model_spec_free(&m);
        mp = write_file("m.yaml", MODEL "parallel:\n  partition: {compression: fp16}\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), 0);
        dt_cluster_spec_merge(&eff, &m.parallel, &file);
        ck_assert_int_eq(dt_cluster_spec_validate(&eff, &m, 1, &d), -1);
        ck_assert_int_eq(d.n, 1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), "c.yaml:2:3: 'reproducible: true' needs compression: none; fp16"));
        dt_diag_free(&d);
        dt_model_spec_free(&m);

        /* a file that is not there, or not a mapping */
        ck_assert_int_eq(dt_cluster_spec_load(&file, "/nonexistent/c.yaml", &d), -1);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), "/nonexistent/c.yaml:0:0: cannot open: No such file or directory");
        dt_diag_free(&d);
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "# nothing\n"), &d), -1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), "empty document; expected a cluster spec mapping"));
        dt_diag_free(&d);
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "4\n"), &d), -1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), ":1:1: expected a cluster spec mapping at the top level, got a scalar"));
        dt_diag_free(&d);
        ck_assert_int_eq(dt_cluster_spec_load(&file, write_file("c.yaml", "ranks: [\n"), &d), -1);
        ck_assert_ptr_nonnull(strstr(msg(&d, 0, b, sizeof b), "YAML syntax"));
        dt_diag_free(&d);
        remove_tmpdir();
}
END_TEST

/* ---- the model's 'parallel:' ---- */

START_TEST(test_parallel_section)
{
        make_tmpdir();
        dt_diag d = { 0 };
        char b[DT_PATH_MAX + 256], want[DT_PATH_MAX + 256];
        dt_model_spec m;

        /* absent: defaults, nothing set, the model's file */
        const char *mp = write_file("m.yaml", MODEL);
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), 0);
        ck_assert_uint_eq(m.parallel.set, 0);
        ck_assert_int_eq(m.parallel.chunks, 16);
        ck_assert_str_eq(m.parallel.comm, "mpi");
        ck_assert_str_eq(m.parallel.file, mp);
        uint64_t h = m.hash;
        dt_model_spec_free(&m);

        mp = write_file("m.yaml", MODEL "parallel:\n  ranks: 2\n  network: {bandwidth_gbs: 100}\n"
                                        "  partition:\n    sync: average\n    average_every: 4\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), 0);
        ck_assert_int_eq(d.n, 0);
        ck_assert_int_eq(m.parallel.ranks, 2);
        ck_assert_int_eq(m.parallel.ranks_pos.line, 8);
        ck_assert_double_eq(m.parallel.bandwidth_gbs, 100.0);
        ck_assert_int_eq(m.parallel.sync, DT_SYNC_AVERAGE);
        ck_assert_int_eq(m.parallel.average_every, 4);
        ck_assert_str_eq(m.parallel.file, mp);
        ck_assert(m.hash == h);        /* how to run in parallel is not the model */
        dt_model_spec_free(&m);

        /* errors say 'parallel' and point into the model */
        mp = write_file("m.yaml", MODEL "parallel:\n  rank: 2\n  partition: {sync: ssp, average_every: 2}\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), -1);
        ck_assert_int_eq(d.n, 2);
        snprintf(want, sizeof want, "%s:9:26: key 'average_every' applies only to sync: average, not ssp", mp);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), want);
        snprintf(want, sizeof want, "%s:8:3: unknown key 'rank' in 'parallel'; did you mean 'ranks'?", mp);
        ck_assert_str_eq(msg(&d, 1, b, sizeof b), want);
        dt_diag_free(&d);

        mp = write_file("m.yaml", MODEL "parallel: 4\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), -1);
        snprintf(want, sizeof want, "%s:7:11: expected a mapping for 'parallel', got a scalar", mp);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), want);
        dt_diag_free(&d);

        mp = write_file("m.yaml", MODEL "parallel:\n  partition:\n    bucket_mb: 2048\n");
        ck_assert_int_eq(dt_model_spec_load(&m, mp, &d), -1);
        snprintf(want, sizeof want, "%s:9:16: 'bucket_mb' must be a number in (0, 1024], got '2048'", mp);
        ck_assert_str_eq(msg(&d, 0, b, sizeof b), want);
        dt_diag_free(&d);
        remove_tmpdir();
}
END_TEST

/* ---- key lists ---- */

static int count_lines(const char *s, const char *needle, int *found)
{
        int n = 0;
        *found = 0;
        for (const char *p = s; *p; p++) {
                if (p == s || p[-1] == '\n') {
                        n++;
                        size_t k = strlen(needle);
                        if (!strncmp(p, needle, k) && p[k] == '\n') *found = 1;
                }
        }
        return n;
}

START_TEST(test_list_keys)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_cluster_spec_list_keys(f);
        fclose(f);
        int found;
        ck_assert_int_eq(count_lines(buf, "cluster.partition.staleness", &found), 46);
        ck_assert(found);
        count_lines(buf, "cluster.network.latency_us", &found);
        ck_assert(found);
        count_lines(buf, "cluster.network.eager_kb", &found);
        ck_assert(found);
        count_lines(buf, "cluster.ranks", &found);
        ck_assert(found);
        count_lines(buf, "cluster.conv", &found);
        ck_assert(found);
        count_lines(buf, "cluster.partition.recompute", &found);
        ck_assert(found);
        count_lines(buf, "cluster.memory_per_rank", &found);
        ck_assert(found);
        free(buf);
        ck_assert_ptr_null(dt_ymap_key_hook);

        /* the model's key list has the same keys under 'parallel' */
        buf = NULL;
        f = open_memstream(&buf, &len);
        dt_model_spec_list_keys(f, NULL, 0);
        fclose(f);
        count_lines(buf, "parallel.partition.topk_ratio", &found);
        ck_assert(found);
        count_lines(buf, "parallel.collective_timeout", &found);
        ck_assert(found);
        count_lines(buf, "model.parallel", &found);
        ck_assert(found);
        free(buf);
}
END_TEST

/* topk's warm-up follows the learning rate's when compression_warmup is not given (cnn: 86.92%
 * after 100 dense steps, 87.13% after its 200 warm-up steps, 87.28% uncompressed) */
START_TEST(test_topk_warmup)
{
        dt_cluster_spec c;
        dt_diag d = { 0 };
        dt_model_spec m;
        memset(&m, 0, sizeof m);
        m.train.sched.warmup_steps = 200;
        ck_assert_int_eq(parse_text(&c, "partition: {compression: topk}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, &m), 200);
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, NULL), 100);
        m.train.sched.warmup_steps = 50;        /* a shorter ramp keeps the default */
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, &m), 100);
        m.train.sched.warmup_steps = 200;
        ck_assert_int_eq(parse_text(&c, "partition: {compression: topk, compression_warmup: 100}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, &m), 100);   /* given: kept */
        ck_assert_int_eq(parse_text(&c, "partition: {compression: topk, compression_warmup: 0}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, &m), 0);
        ck_assert_int_eq(parse_text(&c, "partition: {compression: powersgd}\n", &d), 0);
        ck_assert_int_eq(dt_cluster_cx_warmup(&c, &m), 100);   /* powersgd keeps its default */
        ck_assert_int_eq(d.n, 0);
}
END_TEST

static Suite *cluster_suite(void)
{
        Suite *s = suite_create("cluster");
        TCase *p = tcase_create("parse");
        tcase_add_test(p, test_defaults);
        tcase_add_test(p, test_every_key);
        tcase_add_test(p, test_memory_units);
        tcase_add_test(p, test_value_errors);
        tcase_add_test(p, test_mode_conflicts);
        tcase_add_test(p, test_parallel_section);
        tcase_add_test(p, test_list_keys);
        suite_add_tcase(s, p);
        TCase *v = tcase_create("merge_validate");
        tcase_add_test(v, test_merge);
        tcase_add_test(v, test_validate);
        tcase_add_test(v, test_modes_across_files);
        tcase_add_test(v, test_topk_warmup);
        suite_add_tcase(s, v);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(cluster_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
