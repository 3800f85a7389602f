/* train/setup.c - the shared start of run, check, bench and sample (see setup.h). */
#include "train/setup.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "util/common.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "train/device.h"
#include "train/ckpt_writer.h"
#include "train/elastic.h"
#include "backend/onednn.h"
#include "parallel/dp.h"
#include "plan/plan.h"
#include "parallel/place.h"
#include "util/datadir.h"
#include "spec/overrides.h"
#include "util/rss.h"
#include "plan/mem.h"

static long mem_available(void)
{
        FILE *f = fopen("/proc/meminfo", "r");
        char line[256];
        long kb = -1;
        if (!f) return -1;
        while (fgets(line, sizeof line, f))
                if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
        fclose(f);
        return kb < 0 ? -1 : kb / 1024;  /* MiB */
}

static int report(dt_setup *s, dt_diag *d)
{
        if (s->rank == 0) dt_diag_print(d, stderr);
        dt_diag_free(d);
        return DT_EXIT_USAGE;
}

/* the loss reads the last layer as rows x C: (C), or (T, C) for per-step labels (text) */
static int loss_geometry(dt_setup *s, dt_diag *d)
{
        const dt_layer_spec *last = &s->spec.layers[s->g.n - 1];
        const dt_shape *os = &s->g.layers[s->g.n - 1].out;
        char sb[64];
        if (os->n != 1 && os->n != 2) {
                dt_diag_add(d, s->spec.file, last->pos.line, last->pos.col,
                            "the last layer's output %s must be flat (classes or targets), or (steps, classes) "
                            "for per-step labels, for loss '%s'",
                            dt_shape_str(os, sb, sizeof sb), dt_loss_names[s->spec.loss]);
                return -1;
        }
        s->rows = os->n == 2 ? os->d[0] : 1;
        s->C = os->d[os->n - 1];
        if (s->spec.data.classes > 0 && s->spec.loss == DT_LOSS_SOFTMAX_XENT && s->spec.data.classes != s->C) {
                dt_diag_add(d, s->spec.file, last->pos.line, last->pos.col,
                            "the last layer has %d outputs but the data has %d classes", s->C, s->spec.data.classes);
                return -1;
        }
        return 0;
}

/* strategy: auto: rank 0 plans for this job (plan/plan.h; its timings differ from rank to rank, so
 * one rank decides) and every rank takes its layout, L; the cluster spec gets the keys that name it
 * (what check and plan.txt show and the spec's checks read). -1 when a memory_per_rank no layout
 * meets refused it (printed by rank 0). */
static int choose_layout(dt_setup *s, const dt_setup_opts *o, dt_layout *L)
{
        int len = 0;
        char *text = NULL;
        if (s->rank == 0) {
                int threads = dt_setup_threads(o->threads, s->cs.threads_per_rank, s->world.local_size);
                dt_cluster_spec cs = s->cs;
                if (!cs.ranks_per_node) cs.ranks_per_node = s->world.local_size;
                dt_planner *p = dt_planner_new(&s->g, &cs, threads, 1);
                size_t ps, mapped, data = dt_setup_data_bytes(s, &ps, &mapped);
                dt_planner_set_memory(p, (double)s->rss_base, (double)data, (double)ps, dt_setup_onednn(s));
                dt_setup_plan_data(s, p);
                dt_machine m;
                dt_machine_from(&m, &cs, s->size, threads);
                enum { MAXC = 512 };    /* as dtrain plan: the shard and recompute variants too */
                dt_candidate *c = dt_malloc(MAXC * sizeof *c);
                int n = dt_plan_search(p, &m, s->size, c, MAXC);
                if (n == 0)
                        dt_die(DT_EXIT_USAGE, "%s: no layout of this model runs on %d ranks",
                               s->elastic.how ? "elastic relaunch" : "strategy auto", s->size);
                if (!c[0].pr.fits && s->cs.memory_per_rank > 0) {     /* the limit is the user's: refuse */
                        char at[DT_PATH_MAX + 32], lay[1024];
                        dt_layout_str(p, &c[0].L, lay, sizeof lay);
                        fprintf(stderr, "%s: error: no layout of this model on %d ranks fits memory_per_rank %.1f MiB; "
                                "the smallest, %s, needs %.1f MiB per rank\n",
                                dt_pos_str(at, sizeof at, dt_cluster_spec_file_of(&s->cs, DT_CS_MEMORY),
                                           s->cs.memory_pos.line, s->cs.memory_pos.col),
                                s->size, s->cs.memory_per_rank / 1048576.0, lay, c[0].pr.mem / 1048576.0);
                }
                *L = c[0].L;
                char lay[1024], why[1024] = "the only layout";
                dt_layout_str(p, L, lay, sizeof lay);
                dt_plan_why(p, &c[0], n > 1 ? &c[1] : NULL, why, sizeof why);
                if (!c[0].pr.fits && !(s->cs.memory_per_rank > 0))
                        dt_note("strategy auto on %d ranks: %s; running it anyway, it may run out of memory", s->size, why);
                size_t cap = 0;
                FILE *f = open_memstream(&text, &cap);
                fprintf(f, "strategy auto on %d ranks: %s\nwhy: %s\npredicted: %.2f ms per step, %.0f samples/s\n",
                        s->size, lay, why, 1e3 * c[0].pr.step, s->spec.train.batch / c[0].pr.step);
                dt_plan_print_layers(p, &m, L, f);
                fprintf(f, "as a cluster spec:\n");
                dt_layout_yaml(p, L, f);
                fclose(f);
                len = (int)strlen(text) + 1;
                snprintf(s->plan_line, sizeof s->plan_line, "plan: %s (predicted %.2f ms per step)", lay,
                         1e3 * c[0].pr.step);
                if (!c[0].pr.fits && s->cs.memory_per_rank > 0) L->grid[0] = -1;      /* every rank refuses */
                free(c);
                dt_planner_free(p);
                /* the planner's measurements are freed: give their pages back, or the run would
                 * carry them through training (glibc keeps a freed heap top resident) */
                malloc_trim(0);
                /* their peak is the planner's, reported apart: the run's own starts here */
                s->plan_peak = dt_rss_peak();
                dt_rss_reset_peak();
        }
        dt_comm_bcast_idle(&s->world, L, (int)sizeof *L, MPI_BYTE, 0, "plan");
        if (L->grid[0] < 0) return -1;
        dt_comm_bcast(&s->world, &len, 1, MPI_INT, 0, "plan");
        if (s->rank != 0) text = dt_malloc((size_t)len);
        dt_comm_bcast(&s->world, text, len, MPI_CHAR, 0, "plan");
        s->plan_text = text;
        dt_layout_apply_graph(&s->g, L, &s->cs);
        return 0;
}

/* The effective cluster spec (the model's 'parallel:' keys, overridden key by key by --cluster),
 * checked, and the layout it asks for into L (strategy auto: the planner's). */
static int load_cluster(dt_setup *s, const dt_setup_opts *o, dt_layout *L, dt_diag *d)
{
        int planned = 0;
        dt_cluster_spec file;
        dt_cluster_spec_init(&file);
        if (o->cluster && dt_cluster_spec_load_sets(&file, o->cluster, o->sets, d) < 0) return -1;
        dt_cluster_spec_merge(&s->cs, &s->spec.parallel, &file);
        if (o->collective_timeout > 0) s->cs.collective_timeout = o->collective_timeout;
        dt_elastic_fit(&s->cs, &s->spec, s->g.n, s->size, &s->elastic);
        if (s->cs.strategy == DT_PART_AUTO && !(s->cs.bad & DT_CS_STRATEGY)) {
                if (choose_layout(s, o, L) < 0) {
                        if (s->elastic.how)     /* the documented refusal: nothing runs on the ranks left */
                                dt_diag_add(d, NULL, 0, 0, "elastic relaunch on %d ranks: the cluster spec's %s does "
                                            "not fit them, and no layout strategy auto plans fits memory_per_rank",
                                            s->size, s->elastic.from);
                        else
                                dt_diag_add(d, NULL, 0, 0, "strategy auto: nothing fits memory_per_rank");
                        return -1;
                }
                planned = 1;
        }
        if (dt_cluster_spec_validate(&s->cs, &s->spec, s->size, d) < 0 || d->n) return -1;
        s->cs.compression_warmup = dt_cluster_cx_warmup(&s->cs, &s->spec);
        dt_graph_set_recompute(&s->g, &s->cs.recompute);       /* the stages and shards copy the marks */
        if (s->cs.collective_timeout > 0) dt_comm_set_timeout(&s->world, s->cs.collective_timeout);
        if (!planned && dt_layout_from_spec(&s->cs, &s->g, s->size, L, d) < 0) return -1;
        if (s->elastic.how) {
                dt_elastic_done(&s->elastic, L->grid);
                if (s->rank == 0)
                        dt_note("elastic relaunch on %d ranks: the cluster spec's %s does not fit them; running %s (%s; "
                                "elastic: strict refuses instead)", s->size, s->elastic.from, s->elastic.to,
                                s->elastic.how == DT_ELASTIC_SHRUNK ? "its pipeline and tensor degrees kept, fewer "
                                "data-parallel replicas" : "re-planned as strategy auto");
        }
        return 0;
}

int dt_setup_model(dt_setup *s, const dt_setup_opts *o)
{
        dt_diag d = { 0 };
        s->size = 1;
        if (!o->single) {
                dt_comm_world(&s->world, 0);
                s->rank = s->world.rank;
                s->size = s->world.size;
        }
        s->rss_base = dt_rss_now();
        s->loaded = 1;
        char bundled[DT_PATH_MAX];      /* a spec not found as given: the installed models */
        const char *model = dt_spec_path(o->model, bundled, sizeof bundled, s->rank == 0);
        /* the cluster spec's overrides go to the cluster file when there is one, which wins anyway */
        if (dt_model_spec_load_sets(&s->spec, model, o->sets, o->cluster != NULL, &d) < 0 || d.n)
                return report(s, &d);
        dt_train_spec *tr = &s->spec.train;
        if (o->epochs > 0) tr->epochs = (int)o->epochs;
        if (o->batch > 0) tr->batch = (int)o->batch;
        if (o->max_steps >= 0) tr->max_steps = o->max_steps;
        if (o->seed >= 0) tr->seed = (uint64_t)o->seed;
        if (dt_graph_build(&s->g, &s->spec, &d) < 0 || d.n) return report(s, &d);
        if (loss_geometry(s, &d)) return report(s, &d);
        /* until the cluster spec says otherwise (and for single): every rank a whole replica */
        s->grid = (dt_grid){ .L = { .grid = { s->size, 1, 1 }, .micro = 1 }, .at = { s->rank, 0, 0 },
                             .rank = s->rank, .data = &s->world, .nslots = 1 };
        if (o->single) return 0;
        dt_layout L;
        if (load_cluster(s, o, &L, &d)) return report(s, &d);
        dt_grid_make(&s->grid, &L, &s->world, &s->g, s->spec.train.batch);
        return 0;
}

int dt_setup_spec_name(const char *model, const dt_sets *sets, char *name, size_t len)
{
        char bundled[DT_PATH_MAX];
        dt_model_spec spec;
        dt_diag d = { 0 };
        int rc = dt_model_spec_load_sets(&spec, dt_spec_path(model, bundled, sizeof bundled, 0), sets, 1, &d);
        dt_diag_free(&d);
        if (rc < 0) return -1;
        snprintf(name, len, "%s", spec.name);
        dt_model_spec_free(&spec);
        return 0;
}

int dt_setup_run_sets(const char *dir, const dt_sets *cli, dt_sets *out, const char *cmd, int say)
{
        dt_sets rec = { 0 };
        int r = dt_sets_read(&rec, dir, say > 0);
        if (r < 0) {
                dt_sets_free(&rec);
                return DT_EXIT_USAGE;
        }
        if (r > 0 && rec.n && say > 1) {
                char list[512];
                dt_note("%s: applying the --set overrides recorded in %s/%s: %s", cmd, dir, DT_SETS_FILE,
                        dt_sets_str(&rec, list, sizeof list));
        }
        dt_sets_merge(out, &rec);
        if (cli) dt_sets_merge(out, cli);
        dt_sets_free(&rec);
        return 0;
}

int dt_setup_reader_sets(const char *model, const char *weights, const char *resume, const char *out,
                         const dt_sets *cli, dt_sets *all, const char *cmd)
{
        char dir[DT_PATH_MAX], name[DT_NAME_MAX];
        struct stat sb;
        if (resume) {
                dt_sets_run_dir(resume, dir, sizeof dir);
        } else if (out) {
                snprintf(dir, sizeof dir, "%s", out);
        } else if (weights) {   /* RUN/model.safetensors, RUN/checkpoints/X/model.safetensors, or a directory */
                snprintf(dir, sizeof dir, "%s", weights);
                char *sl = strrchr(dir, '/');
                if (stat(weights, &sb) || !S_ISDIR(sb.st_mode)) {
                        if (sl) *sl = 0;
                        else snprintf(dir, sizeof dir, ".");
                }
                char run[DT_PATH_MAX];
                dt_sets_run_dir(dir, run, sizeof run);
                snprintf(dir, sizeof dir, "%s", run);
        } else if (!dt_setup_spec_name(model, cli, name, sizeof name)) {
                snprintf(dir, sizeof dir, "runs/%s", name);
        } else {
                dt_sets_merge(all, cli);        /* the spec's errors: the load reports them */
                return 0;
        }
        return dt_setup_run_sets(dir, cli, all, cmd, 2);
}

int dt_setup_micro_batches(const dt_setup *s)
{
        return dt_layout_micro(&s->grid.L, s->spec.train.batch);
}

size_t dt_setup_data_bytes(const dt_setup *s, size_t *per_sample, size_t *mapped)
{
        const dt_train_spec *tr = &s->spec.train;
        const dt_data_spec *ds = &s->spec.data;
        const dt_source_spec *src[2] = { &ds->train, ds->test.present ? &ds->test : NULL };
        int classes = s->spec.loss == DT_LOSS_SOFTMAX_XENT ? (ds->classes ? ds->classes : s->C) : 0;
        /* a batch's labels and targets (train/memory.c's data_bytes) */
        size_t b = (size_t)DT_MAX(tr->batch, tr->eval_batch) * (size_t)s->rows * ((size_t)s->C * 4 + 4);
        *per_sample = *mapped = 0;
        for (int k = 0; k < 2 && src[k]; k++) {
                dt_dataset d;
                char msg[DT_PATH_MAX + 256];
                /* headers and caches only: no sample is checked here */
                dt_load_opts lo = { .part = 0, .parts = 1, .dir = s->spec.dir, .scan_max = 1 };
                memset(&d, 0, sizeof d);
                if (dt_dataset_open(&d, src[k], ds, &s->spec.input, classes, &lo, msg, sizeof msg)) continue;
                b += dt_dataset_bytes(&d);
                *mapped += dt_dataset_mapped(&d);
                if (!k) {       /* the permutation, and the loader's slots: per sample of a replica's slice */
                        size_t one = dt_loader_bytes(&d, s->spec.data.prefetch, 1), two = dt_loader_bytes(&d, s->spec.data.prefetch, 2);
                        b += (size_t)d.n * sizeof(long) + 2 * one - two;
                        *per_sample = two - one;
                }
                dt_dataset_free(&d);
        }
        return b;
}

void dt_setup_plan_data(const dt_setup *s, struct dt_planner *p)
{
        const dt_model_spec *sp = &s->spec;
        int classes = sp->loss == DT_LOSS_SOFTMAX_XENT ? (sp->data.classes ? sp->data.classes : s->C) : 0;
        dt_load_opts lo = { .part = 0, .parts = 1, .dir = sp->dir, .scan_max = 1 };   /* as the run opens it */
        dt_dataset d;
        char msg[DT_PATH_MAX + 256];
        memset(&d, 0, sizeof d);
        int ok = dt_dataset_open(&d, &sp->data.train, &sp->data, &sp->input, classes, &lo, msg, sizeof msg) == 0;
        dt_planner_time_data(p, ok ? &d : NULL);
        if (ok) dt_dataset_free(&d);
}

int dt_setup_onednn(const dt_setup *s)
{
        const char *why;
        int conv = s->be ? s->be->conv : s->cs.conv, any = 0;
        if (s->be && strcmp(s->be->ops->name, "cpu")) return 0;
        for (int i = 0; i < s->g.n; i++) any |= !strcmp(s->g.layers[i].ops->name, "conv");
        /* asked only with convolutions: the answer loads libdnnl (~4 MiB resident) */
        return any && conv != DT_CONV_IM2COL && dt_onednn_available(&why);
}

void dt_setup_mem_plan(const dt_setup *s, int batch, int nslots, size_t data, size_t mapped, dt_mem_plan *p)
{
        dt_mem_in in = { .g = &s->g, .batch = batch, .nslots = nslots, .nmoments = dt_optim_nmoments(&s->spec.train.opt),
                         .dp = dt_grid_replicas(&s->grid), .data = data, .mapped = mapped,
                         .fixed = s->rss_base ? s->rss_base : dt_mem_fixed_model(1),
                         .onednn = dt_setup_onednn(s), .threads = s->threads, .msg_bufs = s->grid.msg_bufs,
                         .shard = dt_grid_replicas(&s->grid) < 2 ? 0 : s->cs.shard,
                         .bucket_mb = s->cs.bucket_mb,
                         .mixed = s->grid.L.grid[DT_AXIS_PIPE] > 1 || s->grid.L.grid[DT_AXIS_TENSOR] > 1 };
        in.sum_esz = !s->be || !strcmp(s->be->ops->name, "cpu") ? dt_dp_sum_esz(&s->cs, in.shard) : 0;
        in.speculate = dt_mem_speculates(s->grid.L.grid[DT_AXIS_PIPE], s->spec.train.clip_norm, in.shard);
        int R = DT_MAX(1, in.dp);
        dt_mem_set_walk(&in, &s->cs, s->grid.L.grid[DT_AXIS_PIPE] > 1, (s->spec.train.batch + R - 1) / R, R, -1);
        dt_mem_plan_of(&in, p);
}

int dt_setup_check_memory(dt_setup *s, int batch, int nslots)
{
        const dt_train_spec *tr = &s->spec.train;
        dt_diag d = { 0 };
        dt_mem_plan p;
        dt_setup_mem_plan(s, batch, nslots, 0, 0, &p);
        int local = s->world.local_size > 0 ? s->world.local_size : 1;
        double avail = s->cs.memory_per_rank > 0 ? s->cs.memory_per_rank : mem_available() * 1048576.0 / local;
        char terms[512];
        dt_mem_plan_str(&p, terms, sizeof terms);
        if (avail > 0 && p.need > avail)
                dt_diag_add(&d, s->spec.file, tr->batch_pos.line, tr->batch_pos.col,
                            "planned memory %.1f MiB per rank (batch %d: %s) exceeds the %.1f MiB %s",
                            p.need / 1048576.0, batch, terms, avail / 1048576.0,
                            s->cs.memory_per_rank > 0 ? "of memory_per_rank" : "available to each rank here");
        return d.n ? report(s, &d) : 0;
}

int dt_env_threads(void)
{
        const char *e = getenv("OPENBLAS_NUM_THREADS");
        if (!e || !*e) return 0;
        char *end;
        errno = 0;
        long v = strtol(e, &end, 10);
        return !errno && !*end && v > 0 && v <= 4096 ? (int)v : 0;
}

int dt_setup_threads(int flag, int cluster, int local_size)
{
        if (flag > 0) return flag;
        if (cluster > 0) return cluster;
        int env = dt_env_threads();
        if (env > 0) return env;
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        return (int)DT_MAX(1, nc / DT_MAX(1, local_size));
}

static const char *device_of(const dt_setup *s, const dt_setup_opts *o)
{
        /* --device, then the cluster spec's device, then the model's */
        return o->device ? o->device : s->cs.device[0] ? s->cs.device : s->spec.device;
}

static int check_caps(dt_setup *s, const char *kind, unsigned caps)
{
        dt_diag d = { 0 };
        return dt_graph_check_backend(&s->g, kind, caps, &d) < 0 ? report(s, &d) : 0;
}

/* Model splits (stages, shards) run on the cpu backend only: said the same by check and run, at
 * the key that asked for the device (--device has no position: it names itself). */
static int refuse_split(dt_setup *s, const dt_setup_opts *o, const char *device)
{
        const char *what = dt_grid_pipelined(&s->grid) ? "pipeline stages" : "tensor-parallel layers";
        const char *strategy = dt_part_names[s->cs.strategy];
        if (o->device) {
                if (s->rank == 0)
                        dt_error("%s (strategy %s) run on the cpu backend in this version, not %s; use --device cpu",
                                 what, strategy, device);
                return DT_EXIT_USAGE;
        }
        dt_diag d = { 0 };
        const char *file = s->spec.file;
        dt_pos at = s->spec.device_pos;
        if (s->cs.device[0]) {
                file = dt_cluster_spec_file_of(&s->cs, DT_CS_DEVICE);
                at = dt_cluster_spec_pos_of(&s->cs, DT_CS_DEVICE);
        }
        dt_diag_add(&d, file, at.line, at.col, "%s (strategy %s) run on the cpu backend in this version, not %s; "
                    "use device: cpu", what, strategy, device);
        return report(s, &d);
}

/* The cpu backend's convolutions: --conv, then the cluster spec's conv. */
static int conv_of(const dt_setup *s, const dt_setup_opts *o)
{
        for (int k = 0; o->conv && dt_conv_algo_names[k]; k++)
                if (!strcmp(o->conv, dt_conv_algo_names[k])) return k;
        return s->cs.conv;
}

/* conv: onednn where oneDNN cannot run: an error at the flag or at the key (exit 2), else 0. Only
 * for a run on the cpu backend ('auto' may end there); device backends have their own. */
static int check_conv(dt_setup *s, const dt_setup_opts *o, const char *device)
{
        const char *why;
        if (!strcmp(device, "cuda") || conv_of(s, o) != DT_CONV_ONEDNN || dt_onednn_available(&why)) return 0;
        if (o->conv) {
                if (s->rank == 0) dt_error("--conv onednn: %s; use --conv auto or im2col", why);
                return DT_EXIT_USAGE;
        }
        dt_cluster_run run = { .no_onednn = why };
        dt_diag d = { 0 };
        return dt_cluster_spec_validate_run(&s->cs, &run, &d) < 0 || d.n ? report(s, &d) : 0;
}

int dt_setup_check_device(dt_setup *s, const dt_setup_opts *o)
{
        const char *device = device_of(s, o);
        int rc;
        if ((rc = check_conv(s, o, device))) return rc;
        if (!strcmp(device, "auto")) return 0;  /* falls back to the cpu, which runs every layer */
        if (dt_grid_parts(&s->grid) && strcmp(device, "cpu")) return refuse_split(s, o, device);   /* what the run would say */
        return check_caps(s, device, dt_backend_caps_of(device));
}

/* compression: auto becomes a method here, once the layout and the backend are known: rank 0
 * asks the planner (plan/cxmodel.c; layer costs from FLOPs, no profiling) and every rank takes its
 * answer; the line saying why is kept for the banner. */
static void choose_compression(dt_setup *s, const dt_setup_opts *o)
{
        if (s->cs.compression != DT_COMP_AUTO) return;
        int device = s->be && !dt_backend_supports(s->be, DT_CAP_HOST_MEMORY);
        const char *plain = dt_plan_cx_plain(&s->cs, s->grid.L.grid[DT_AXIS_DATA], device);
        int method = DT_COMP_NONE;
        char why[sizeof s->cx_line - 32];
        if (plain) {
                snprintf(why, sizeof why, "none: %s", plain);
        } else if (s->rank == 0) {
                int threads = dt_setup_threads(o->threads, s->cs.threads_per_rank, s->world.local_size);
                dt_cluster_spec cs = s->cs;
                if (!cs.ranks_per_node) cs.ranks_per_node = s->world.local_size;
                dt_planner *p = dt_planner_new(dt_grid_model(&s->grid, &s->g), &cs, threads, 0);
                dt_machine m;
                dt_machine_from(&m, &cs, s->size, threads);
                method = dt_plan_compression(p, &m, &s->grid.L, why, sizeof why);
                dt_planner_free(p);
        }
        if (!plain) dt_comm_bcast(&s->world, &method, 1, MPI_INT, 0, "compression auto");
        s->cs.compression = (dt_comp_kind)method;
        s->cs.compression_warmup = dt_cluster_cx_warmup(&s->cs, &s->spec);
        if (s->rank == 0) snprintf(s->cx_line, sizeof s->cx_line, "compression auto: %s", why);
}

/* Whether waits yield (parallel/comm.c): where the ranks on this machine outnumber its cores (not
 * MPI's node's ranks: 2 emulated nodes of 2 ranks on 2 cores spun, and the flat gradient sum took
 * 60 ms against 20 yielding), unless DTRAIN_WAIT_YIELD says
 * otherwise (0 for ranks under a CPU quota each, tests/tools/cpu-cap.sh, where a spin costs only the
 * rank's own share and a yield delays the message by a scheduler tick). */
static int set_yield(dt_setup *s)
{
        int here = s->machine_ranks = dt_comm_machine_size(&s->world);  /* collective: before any return */
        const char *e = getenv("DTRAIN_WAIT_YIELD");
        if (e && *e) {
                if (strcmp(e, "0") && strcmp(e, "1")) {
                        if (s->world.rank == 0)
                                fprintf(stderr, "dtrain: DTRAIN_WAIT_YIELD is '%s'; expected 0 or 1\n", e);
                        return 2;
                }
                dt_comm_set_yield(*e == '1');
                return 0;
        }
        dt_comm_set_yield((long)here * s->threads > sysconf(_SC_NPROCESSORS_ONLN));
        return 0;
}

int dt_setup_backend(dt_setup *s, const dt_setup_opts *o)
{
        const char *device = device_of(s, o);
        int rc;
        if (strcmp(device, "cpu") &&
            (rc = dt_device_open(device, o->device ? "--device" : s->cs.device[0] ? "the cluster spec" : s->spec.file,
                                 &s->world, s->spec.deterministic, o->quiet, &s->be)))
                return rc;
        choose_compression(s, o);
        if ((rc = dt_device_check_cluster(s->be, &s->cs, s->size))) return rc;
        if (dt_grid_parts(&s->grid) && s->be) return refuse_split(s, o, s->be->ops->name);
        s->threads = dt_setup_threads(o->threads, s->cs.threads_per_rank, s->world.local_size);
        if ((rc = set_yield(s))) return rc;
        if (s->size > 1)        /* a pipeline's ranks together, in stage order */
                s->placed = dt_place_rank(&s->world, dt_grid_pipeline(&s->grid), s->grid.at.stage, s->threads, s->place,
                                          sizeof s->place);
        if (!s->be) s->be = dt_backend_cpu_new(s->threads);
        if ((rc = check_caps(s, s->be->ops->name, s->be->ops->caps))) return rc;
        /* the cpu backend's convolutions (device backends have their own) */
        if (dt_backend_supports(s->be, DT_CAP_HOST_MEMORY)) {
                if ((rc = check_conv(s, o, "cpu"))) return rc;
                s->be->conv = conv_of(s, o);
        }
        /* the cluster settings that need the graph and the backend */
        dt_cluster_run run = {
                .nparams = s->g.nparams,
                .repro_nodes = s->cs.reproducible ? dt_repro_nodes(s->cs.chunks, s->size) : 0,
                .device_sync = s->size > 1 && !dt_backend_supports(s->be, DT_CAP_HOST_MEMORY),
                .device = !dt_backend_supports(s->be, DT_CAP_HOST_MEMORY),
                .nccl = dt_backend_supports(s->be, DT_CAP_NCCL),
        };
        dt_diag d = { 0 };
        return dt_cluster_spec_validate_run(&s->cs, &run, &d) < 0 || d.n ? report(s, &d) : 0;
}

void dt_setup_free(dt_setup *s)
{
        dt_graph_free(&s->g);   /* before the backend its buffers live on */
        dt_grid_free(&s->grid);
        if (s->be) dt_backend_free(s->be);
        s->be = NULL;
        if (s->loaded) dt_model_spec_free(&s->spec);
        free(s->plan_text);
        s->plan_text = NULL;
        dt_comm_free(&s->world);
        s->loaded = 0;
}

