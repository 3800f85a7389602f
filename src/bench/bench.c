/* bench/bench.c - `dtrain bench [MODEL.yaml ...]`: builds each model as `run` does, feeds it random
 * in-memory samples and times (medians over --iters after --warmup) each layer's forward and
 * backward, the data gather, the loss and the update, then whole training steps. Under mpirun it
 * also times the gradient sync: a raw MPI_Allreduce of the gradient's size, dtrain's bucketed
 * allreduce alone, backward alone and the overlapped backward + sync. Rank 0 prints a table, or
 * with --json one JSON array (one object per model) and nothing else on stdout. A cluster spec
 * with pipeline stages hands the model to bench_pipe.c once it is set up. */
#include "bench/bench.h"
#include "util/datadir.h"
#include "util/cpu.h"
#include "train/kernels.h"
#include "bench/bench_int.h"
#include "bench/bench_data.h"
#include "plan/mem.h"
#include "util/rss.h"
#include "optim/moments.h"
#include "parallel/compress.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <jansson.h>
#include <mpi.h>
#include "util/common.h"
#include "util/stats.h"
#include "backend/peak.h"
#include "util/cpu_fix.h"
#include "spec/model_spec.h"
#include "spec/cluster_spec.h"
#include "graph/graph.h"
#include "layers/loss.h"
#include "optim/optim.h"
#include "parallel/comm.h"
#include "parallel/dp.h"
#include "parallel/compress.h"
#include "train/setup.h"
#include "train/stepper.h"

/* ---- one model's set-up ---- */

typedef struct bench {
        dt_setup su;                    /* spec, cluster spec, graph, world, backend, threads, loss geometry */
        dt_dp dp;
        int have_dp;
        int B, b, lo;                   /* global batch; this rank's slice [lo, lo + b) */
        dt_bench_pool pl;               /* random samples to gather from */
        int32_t *lab;                   /* (b, rows) */
        float *tgt;                     /* mse targets: (b, rows, C) */
        dt_moments mo;                  /* optimizer moments, in one block */
        float *m, *v;                   /* mo's */
        long step;
        dt_bench_data data;             /* the model's own training data, when it opens (bench_data.c) */
        dt_ssp *ssp;                    /* sync: ssp over ranks */
        dt_stepper stp;                 /* the step a run takes (train/stepper.h) */
} bench;

static void free_bench(bench *t)
{
        if (t->ssp) dt_ssp_free(t->ssp);
        if (t->have_dp) dt_dp_free(&t->dp);
        dt_bench_pool_free(&t->pl);
        dt_bench_data_close(&t->data);
        free(t->lab); free(t->tgt); free(t->mo.blk);
        dt_setup_free(&t->su);
}

static void gather(bench *t)
{
        if (t->data.have) {
                dt_bench_data_feed(&t->data, t->su.be, t->su.g.act[0], t->lab, t->tgt);
                return;
        }
        dt_bench_pool_draw(&t->pl, t->su.be, t->b, t->su.g.act[0], t->lab, t->tgt);
}

static dt_fwd_ctx ctx_of(const bench *t)
{
        return (dt_fwd_ctx){ .training = 1, .seed = t->su.spec.train.seed, .step = t->step, .pos0 = t->lo };
}

/* the loss is scaled by the global batch, as in a run, so rank slices add up */
static void loss(bench *t)
{
        float scale = 1.0f / (float)((long)t->B * t->su.rows);
        dt_step_loss(&t->su, t->su.g.act[t->su.g.n], t->lab, t->tgt, t->b, scale, t->su.g.dact[t->su.g.n], NULL);
}

/* a run's update: the whole model's norm, clipping, one optimizer step */
static void update(bench *t)
{
        dt_step_update(&t->stp, t->step, t->su.g.grads);
}

/* The stepper's data: this rank's slice at once (the training data's batch, or random samples);
 * a micro-batch of the cluster spec's draws random samples. */
static void fill(void *ud, long pos0, int b, int inputs, int labels)
{
        bench *t = ud;
        (void)pos0;
        (void)inputs;
        (void)labels;
        if (t->data.have && b == t->b) {
                dt_bench_data_feed(&t->data, t->su.be, t->su.g.act[0], t->lab, t->tgt);
                return;
        }
        if (!t->pl.n)
                dt_bench_pool_make(&t->pl, &t->su, t->b, t->su.spec.train.seed * 2654435761u + (uint64_t)t->su.rank + 1, 1, 1);
        dt_bench_pool_draw(&t->pl, t->su.be, b, t->su.g.act[0], t->lab, t->tgt);
}

/* One whole training step, the run's (train/stepper.h); returns its seconds. */
static double full_step(bench *t)
{
        double t0 = dt_now(), stats[2] = { 0, 0 };
        dt_step_run(&t->stp, t->step, t->B, stats);
        t->step++;
        return dt_now() - t0;
}

static double step_of(void *ud)
{
        return full_step(ud);
}

/* Forward, loss and zeroed gradients: what comes before a backward being timed. */
static void prepare_backward(bench *t)
{
        t->su.be->ops->zero(t->su.be, t->su.g.grads, t->su.g.nparams);
        gather(t);
        dt_fwd_ctx c = ctx_of(t);
        dt_graph_forward(&t->su.g, &c, t->b);
        loss(t);
}

static void draw_layer(void *ud, int i)
{
        bench *t = ud;
        dt_graph_init_layer(&t->su.g, i, t->su.spec.train.seed);
}

/* single: this process alone, without the world or a cluster spec (the one-rank comparison). With
 * pipeline stages only the model is set up: bench_pipe.c does the rest. */
static int setup(bench *t, const char *path, const dt_bench_opts *o, int single)
{
        dt_setup_opts so = { .model = path, .cluster = o->cluster, .device = "cpu", .conv = o->conv, .batch = o->batch,
                             .max_steps = -1, .seed = -1, .threads = o->threads, .quiet = 1, .single = single,
                             .sets = &o->sets };
        int rc = dt_setup_model(&t->su, &so);  /* the cluster spec also checks batch >= ranks */
        if (rc || dt_grid_parts(&t->su.grid)) return rc;    /* stages or tensor shards: bench_pipe.c */
        t->B = t->su.spec.train.batch;
        int hi;
        dt_grid_slice(&t->su.grid, t->B, &t->lo, &hi);     /* every rank a whole replica */
        t->b = hi - t->lo;
        int nm = dt_optim_nmoments(&t->su.spec.train.opt);
        if ((rc = dt_setup_check_memory(&t->su, t->b, 1)) || (rc = dt_setup_backend(&t->su, &so))) return rc;
        /* as a run holds them (train/prepare.c): shard 3's parameters and gradient in pages of
         * which a rank keeps its parts, drawn layer by layer once the parts are known */
        t->su.g.paged = t->su.size > 1 && t->su.cs.shard == 3;
        if (dt_graph_alloc(&t->su.g, t->su.be, t->b) < 0) dt_die(DT_EXIT_RUNTIME, "layer setup failed");
        if (!t->su.g.paged) dt_graph_init_params(&t->su.g, t->su.spec.train.seed);
        char why[DT_PATH_MAX + 256];
        if (dt_bench_data_open(&t->data, &t->su, t->B, t->lo, t->b, why, sizeof why) != 0) {
                if (t->su.rank == 0 && !single) dt_note("%s: random samples instead of the training data: %s", path, why);
                dt_bench_pool_make(&t->pl, &t->su, t->b, t->su.spec.train.seed * 2654435761u + (uint64_t)t->su.rank + 1, 1, 1);
        }
        t->lab = dt_malloc((size_t)t->b * t->su.rows * sizeof *t->lab);
        if (t->su.spec.loss == DT_LOSS_MSE) t->tgt = dt_falloc((size_t)t->b * t->su.rows * t->su.C);
        if (t->su.size > 1) {
                t->su.cs.compression_warmup = 0;        /* bench times the compressed step */
                dt_dp_init(&t->dp, &t->su.world, &t->su.cs, &t->su.g);
                t->have_dp = 1;
                dt_shard_bound_grads(&t->dp.sh, 1);
                if (t->su.g.paged && !dt_shard_init_params(&t->dp.sh, draw_layer, t))
                        dt_graph_init_params(&t->su.g, t->su.spec.train.seed);
                if (t->su.cs.sync == DT_SYNC_SSP) t->ssp = dt_ssp_new(&t->su.world, &t->su.g, t->su.cs.staleness);
        }
        /* the moments of this rank's parts (shard 1 to 3), as the run's */
        size_t nmo = t->have_dp ? dt_shard_len(&t->dp.sh) : t->su.g.nparams;
        t->mo.n = nm;           /* laid out as the run's: no 4K aliasing between the update's streams */
        dt_moments_alloc(&t->mo, nmo);
        t->m = t->mo.m, t->v = t->mo.v;
        if (t->m) memset(t->m, 0, nmo * sizeof *t->m);
        if (t->v) memset(t->v, 0, nmo * sizeof *t->v);
        /* the learning rate's schedule is the run's, over an unknown length: any point of it
         * costs the same */
        t->stp = (dt_stepper){ .su = &t->su, .dp = &t->dp, .ssp = t->ssp, .m = t->m, .v = t->v, .lab = t->lab,
                               .tgt = t->tgt, .fill = fill, .ud = t, .spe = 1, .total = 1L << 40 };
        return 0;
}

/* ---- measurements ---- */

typedef struct peaks {
        int threads;            /* measured with; 0 = not yet */
        double sgemm, fma1;     /* this rank: SGEMM with 'threads', FMA loop on one thread */
        double sgemm_all;       /* SGEMM summed over ranks (measured at once) */
        double bw;              /* this rank's triad GB/s with 'threads', all ranks measuring at once */
} peaks;

typedef struct result {
        double *fwd, *bwd;      /* per layer, ms */
        double *rec;            /* per layer, ms remaking its output in backward (partition.recompute) */
        double data, loss, update, step;        /* ms */
        double raw, sync, bwd_alone, overlapped, wait;  /* ms, under MPI */
        double gather;          /* ms per step: partition.shard's parameter all-gather, slowest rank */
        double rss_mib;
        double reads;           /* samples this rank read before the peak was taken (dataset caches) */
        double peaks_rss;       /* bytes the peak measurements left resident (OpenBLAS's buffers
                                 * after a 1024 x 1024 SGEMM): the plan's fixed part, here */
} result;

static void measure_peaks(peaks *p, dt_comm *c, dt_backend *be, int threads)
{
        if (p->threads == threads) return;
        p->threads = threads;
        p->sgemm = dt_peak_sgemm_gflops();
        p->fma1 = dt_peak_fma_gflops();
        p->sgemm_all = p->sgemm;
        dt_comm_allreduce(c, &p->sgemm_all, 1, MPI_DOUBLE, "peak measurement");
        if (c->size > 1) MPI_Barrier(c->comm);  /* every rank's triad at once: they share the memory system */
        p->bw = dt_peak_triad_gbs(be);
}

/* medians over iters of each column of s (iters rows of ncol), in ms */
static void medians(double *s, int iters, int ncol, double *out)
{
        double *col = dt_malloc((size_t)iters * sizeof *col);
        for (int j = 0; j < ncol; j++) {
                for (int i = 0; i < iters; i++) col[i] = s[(size_t)i * ncol + j];
                out[j] = 1e3 * dt_median(col, iters);
        }
        free(col);
}

/* Per layer: the graph's forward and backward walked by hand with a clock around each layer, and
 * under recomputation the clock of each layer's forward run again before a backward reads it.
 * Columns: fwd[0..n), bwd[0..n), data, loss, update, rec[0..n). */
static void time_layers(bench *t, int iters, result *r)
{
        int n = t->su.g.n, ncol = 3 * n + 3;
        dt_graph *g = &t->su.g;
        double *s = dt_malloc((size_t)iters * ncol * sizeof *s), *med = dt_malloc((size_t)ncol * sizeof *med);
        for (int it = 0; it < iters; it++) {
                double *row = s + (size_t)it * ncol, t0 = dt_now();
                t->su.be->ops->zero(t->su.be, t->su.g.grads, t->su.g.nparams);
                gather(t);
                row[2 * n] = dt_now() - t0;
                dt_fwd_ctx c = ctx_of(t);
                dt_graph_walk_begin(g, 0);
                for (int i = 0; i < n; i++) {
                        t0 = dt_now();
                        dt_graph_layer_forward(g, i, &c, t->b);
                        row[i] = dt_now() - t0;
                }
                t0 = dt_now();
                loss(t);
                row[2 * n + 1] = dt_now() - t0;
                dt_graph_walk_begin(g, 1);
                for (int i = n - 1; i >= 0; i--) {
                        dt_graph_recompute_for(g, i, &c, t->b);
                        t0 = dt_now();
                        dt_graph_layer_backward(g, i, &c, t->b, 0);
                        row[n + i] = dt_now() - t0;
                }
                for (int i = 0; i < n; i++) row[2 * n + 3 + i] = dt_graph_recompute_seconds(g, i, 1);
                t0 = dt_now();
                update(t);
                row[2 * n + 2] = dt_now() - t0;
                t->step++;
        }
        medians(s, iters, ncol, med);
        memcpy(r->fwd, med, (size_t)n * sizeof *med);
        memcpy(r->bwd, med + n, (size_t)n * sizeof *med);
        memcpy(r->rec, med + 2 * n + 3, (size_t)n * sizeof *med);
        r->data = med[2 * n];
        r->loss = med[2 * n + 1];
        r->update = med[2 * n + 2];
        free(s);
        free(med);
}

static double max_over_ranks(dt_comm *c, double x)
{
        dt_comm_allreduce_op(c, &x, 1, MPI_DOUBLE, MPI_MAX, "bench figures");
        return x;
}

/* Whole steps; under MPI the slowest rank's median (the allreduce keeps ranks in step anyway). */
static void time_steps(bench *t, int iters, result *r)
{
        double *s = dt_malloc((size_t)iters * sizeof *s), g0 = t->dp.sh.t_gather;
        for (int it = 0; it < iters; it++) s[it] = full_step(t);
        r->step = max_over_ranks(&t->su.world, 1e3 * dt_median(s, iters));
        r->gather = max_over_ranks(&t->su.world, 1e3 * (t->dp.sh.t_gather - g0) / (iters > 0 ? iters : 1));
        free(s);
}

/* A barrier that waits as dtrain's sums do (parallel/comm.c: testing, yielding the core where ranks
 * outnumber cores). MPI_Barrier spins without yielding: the ranks whose sum ended first then held
 * the cores of 2 emulated nodes x 2 ranks on 2 cores from the ranks still summing, until a
 * scheduler tick (4 ms) took them off, and that was timed as the slower ranks' sum. */
static void barrier(dt_comm *c)
{
        MPI_Request r;
        MPI_Ibarrier(c->comm, &r);
        dt_comm_wait(c, 1, &r, "bench barrier");
}

/* Under MPI: (a) raw MPI_Allreduce of the gradient's size vs dtrain's buckets alone; (b) backward
 * alone vs backward with the bucket hook + finish. Every timed region starts at a barrier, so a
 * rank's lateness is not counted as communication. Columns: raw, sync, bwd, overlapped, and the
 * wait in dt_dp_finish after the overlapped backward (the sync left exposed, less noisy than the
 * difference of two backward times). */
static void time_comm(bench *t, int warmup, int iters, result *r)
{
        size_t n = t->su.g.nparams;
        DT_ASSERT(n <= INT_MAX);
        float *buf = dt_falloc(n);
        memset(buf, 0, n * sizeof *buf);        /* zeros stay zeros, however often summed */
        double *s = dt_malloc((size_t)iters * 5 * sizeof *s), med[5];
        dt_graph_hooks hooks = dt_dp_hooks(&t->dp);
        for (int it = 0; it < warmup + iters; it++) {
                double x[5], t0, t1;
                barrier(&t->su.world);
                t0 = dt_now();
                MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, t->su.world.comm);
                x[0] = dt_now() - t0;
                t->su.be->ops->zero(t->su.be, t->su.g.grads, n);
                barrier(&t->su.world);
                t0 = dt_now();
                dt_dp_finish(&t->dp);           /* no hook ran: starts every bucket, then waits */
                x[1] = dt_now() - t0;
                dt_fwd_ctx c = ctx_of(t);
                prepare_backward(t);
                barrier(&t->su.world);
                t0 = dt_now();
                dt_graph_backward(&t->su.g, &c, t->b);
                x[2] = dt_now() - t0;
                prepare_backward(t);
                barrier(&t->su.world);
                t0 = dt_now();
                dt_graph_backward_h(&t->su.g, &c, t->b, &hooks);
                t1 = dt_now();
                dt_dp_finish(&t->dp);
                x[3] = dt_now() - t0;
                x[4] = dt_now() - t1;
                if (it >= warmup) memcpy(s + (size_t)(it - warmup) * 5, x, sizeof x);
        }
        medians(s, iters, 5, med);
        dt_comm_allreduce_op(&t->su.world, med, 5, MPI_DOUBLE, MPI_MAX, "bench figures");
        r->raw = med[0];
        r->sync = med[1];
        r->bwd_alone = med[2];
        r->overlapped = med[3];
        r->wait = med[4];
        free(s);
        free(buf);
}

/* ---- report ---- */

static double layer_flops(const dt_layer *l)
{
        return l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0;
}

static int has_weights(const dt_layer *l)
{
        for (int k = 0; k < l->np; k++)
                if (l->ps[k].trainable) return 1;
        return 0;
}

static double gflops(double flops, double ms) { return ms > 0 ? flops / (ms * 1e6) : 0; }

/* Backward FLOPs of layer i for b samples: the input gradient (as many as forward) unless it is
 * the first layer, whose dx nobody wants, plus the weight gradient (as many again) when it has
 * weights. Counting 2 x forward for the first layer regardless doubled fc1's figure (issue 15). A
 * layer's own count where it has one: a first LSTM's backward carries dh through the steps, 43% of
 * its work at H 128 on 28 inputs, which this rule left out. */
static double bwd_flops(const dt_layer *l, int i, int b)
{
        if (l->ops->bwd_flops) return l->ops->bwd_flops(l->cfg, &l->in, &l->out, i > 0) * b;
        return layer_flops(l) * b * ((i > 0) + has_weights(l));
}

/* Memory-bound layers: bytes one forward or backward of b samples moves (0: compute-bound) */
static double layer_bytes(const dt_layer *l, int i, int b, int backward)
{
        if (!l->ops->traffic || (backward && i == 0)) return 0;
        return l->ops->traffic(l->cfg, &l->in, &l->out, backward) * b;
}

/* The update's traffic: the norm reads the gradient once, the optimizer reads parameters,
 * gradients and moments and writes parameters and moments (clipping's rescale not counted). */
static double update_bytes(const bench *t)
{
        int nm = dt_optim_nmoments(&t->su.spec.train.opt);
        /* partition.shard: the optimizer streams this rank's parts only (the all-gather is extra) */
        size_t n = t->dp.sh.stage ? t->dp.sh.n : t->su.g.nparams;
        return sizeof(float) * (double)n * (1 + 3 + 2 * nm);
}

/* The report's opening: the run and the machine's peaks into m and, with f, the header lines. */
static void report_head(const bench *t, const dt_bench_opts *o, const peaks *p, json_t *m, FILE *f)
{
        const dt_graph *g = &t->su.g;
        json_object_set_new(m, "model", json_string(t->su.spec.name));
        json_object_set_new(m, "file", json_string(t->su.spec.file));
        json_object_set_new(m, "batch", json_integer(t->B));
        json_object_set_new(m, "local_batch", json_integer(t->b));
        json_object_set_new(m, "ranks", json_integer(t->su.size));
        json_object_set_new(m, "threads", json_integer(t->su.threads));
        json_object_set_new(m, "iters", json_integer(o->iters));
        json_object_set_new(m, "warmup", json_integer(o->warmup));
        json_object_set_new(m, "params", json_integer((json_int_t)g->nparams));
        json_object_set_new(m, "flops_per_sample", json_real(g->flops));
        json_object_set_new(m, "blas_core", json_string(dt_blas_core_desc()));
        json_object_set_new(m, "sgemm_gflops", json_real(p->sgemm));
        json_object_set_new(m, "sgemm_gflops_all_ranks", json_real(p->sgemm_all));
        json_object_set_new(m, "fma_gflops_per_thread", json_real(p->fma1));
        json_object_set_new(m, "fma_gflops", json_real(p->fma1 * t->su.threads));
        json_object_set_new(m, "triad_gbs", json_real(p->bw));
        char kd[512];
        json_object_set_new(m, "cpu_kernels", json_string(dt_kernels_desc(kd, sizeof kd)));
        if (!f) return;
        fprintf(f, "model %s (%s): batch %d%s, %d rank%s x %d thread%s, median of %d after %d warm-up\n",
                t->su.spec.name, t->su.spec.file, t->B, t->su.size > 1 ? " (global)" : "", t->su.size,
                t->su.size == 1 ? "" : "s", t->su.threads, t->su.threads == 1 ? "" : "s", o->iters, o->warmup);
        fprintf(f, "machine: SGEMM 1024^3 %.1f GFLOP/s (%d thread%s), FMA loop %.1f GFLOP/s/thread x %d = %.1f; "
                "OpenBLAS core %s\n", p->sgemm, t->su.threads, t->su.threads == 1 ? "" : "s", p->fma1, t->su.threads,
                p->fma1 * t->su.threads, dt_blas_core_desc());
        fprintf(f, "machine: CPU kernels %s; FMA loop %s\n", kd, dt_isa_name((dt_isa)dt_kfam_isa(&dt_peak_kfam)));
        fprintf(f, "machine: memory bandwidth (triad, 3 x %.0f MiB, %d thread%s%s) %.1f GB/s\n",
                dt_peak_triad_bytes() / 3.0 / 1048576.0, t->su.threads, t->su.threads == 1 ? "" : "s",
                t->su.size > 1 ? ", every rank at once" : "", p->bw);
        fprintf(f, "%-14s %-12s %-14s %9s %9s %7s %9s %9s %8s %s%s\n", "layer", "type", "output", "fwd ms", "bwd ms",
                "share", "fwd GF/s", "bwd GF/s", "GB/s", "of peak", g->rc ? "  recompute ms" : "");
}

/* Layer i's row: its times, share of the step (total ms), FLOP or byte rate against its peak. */
static void layer_row(const bench *t, const peaks *p, const result *r, int i, double total, json_t *layers, FILE *f)
{
        const dt_layer *l = &t->su.g.layers[i];
        char sb[64];
        double fl = layer_flops(l) * t->b, bfl = bwd_flops(l, i, t->b);
        double share = total > 0 ? (r->fwd[i] + r->bwd[i] + r->rec[i]) / total : 0;
        /* memory-bound layers against the triad, the others against the SGEMM peak */
        /* a pair (graph/pairs.c) runs forward in its first layer's row, backward in its second's: no
         * rate for either alone */
        const unsigned char *pair = t->su.g.pair && (t->su.g.pair[i] || (i > 0 && t->su.g.pair[i - 1])) ? t->su.g.pair : NULL;
        int mem = l->ops->traffic != NULL && !pair;
        double by = layer_bytes(l, i, t->b, 0) + layer_bytes(l, i, t->b, 1), ms = r->fwd[i] + r->bwd[i];
        double gbs = mem ? gflops(by, ms) : 0;
        double frac = pair ? 0 : mem ? (p->bw > 0 ? gbs / p->bw : 0) : (p->sgemm > 0 ? gflops(fl + bfl, ms) / p->sgemm : 0);
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(l->name));
        json_object_set_new(e, "type", json_string(l->ops->name));
        json_object_set_new(e, "output", json_string(dt_shape_str(&l->out, sb, sizeof sb)));
        json_object_set_new(e, "flops_per_sample", json_real(layer_flops(l)));
        json_object_set_new(e, "fwd_ms", json_real(r->fwd[i]));
        json_object_set_new(e, "bwd_ms", json_real(r->bwd[i]));
        json_object_set_new(e, "share", json_real(share));
        json_object_set_new(e, "fwd_gflops", json_real(pair ? 0 : gflops(fl, r->fwd[i])));
        json_object_set_new(e, "bwd_gflops", json_real(pair ? 0 : gflops(bfl, r->bwd[i])));
        json_object_set_new(e, "memory_bound", json_boolean(l->ops->traffic != NULL));
        json_object_set_new(e, "fwd_gbs", json_real(mem ? gflops(layer_bytes(l, i, t->b, 0), r->fwd[i]) : 0));
        json_object_set_new(e, "bwd_gbs", json_real(mem ? gflops(layer_bytes(l, i, t->b, 1), r->bwd[i]) : 0));
        json_object_set_new(e, "peak_fraction", json_real(frac));
        if (t->su.g.rc) json_object_set_new(e, "recompute_ms", json_real(r->rec[i]));
        if (pair) json_object_set_new(e, "paired_with", json_string(pair[i] ? l[1].name : l[-1].name));
        /* a layer with several ways (conv: im2col or oneDNN) says which one it took */
        const char *detail = NULL, *impl = l->ops->impl ? l->ops->impl(l, &detail) : NULL;
        char type[32];
        snprintf(type, sizeof type, "%s%s%s", l->ops->name, impl ? "/" : "", impl ? impl : "");
        if (impl) json_object_set_new(e, "impl", json_string(impl));
        if (detail) json_object_set_new(e, "impl_detail", json_string(detail));
        json_array_append_new(layers, e);
        if (!f) return;
        fprintf(f, "%-14s %-12s %-14s %9.3f %9.3f %6.1f%% ", l->name, type, sb, r->fwd[i], r->bwd[i], 100 * share);
        if (pair) fprintf(f, "%9s %9s ", "", "");
        else fprintf(f, "%9.2f %9.2f ", gflops(fl, r->fwd[i]), gflops(bfl, r->bwd[i]));
        int rc = t->su.g.rc != NULL;   /* a last column: the rows before it padded to one width */
        if (pair) fprintf(f, "%s %s's row%s", pair[i] ? "with" : "in", pair[i] ? l[1].name : l[-1].name, rc ? "  " : "");
        else if (mem) fprintf(f, "%8.2f %5.1f%% BW%s", gbs, 100 * frac, rc ? "  " : "");
        else if (fl > 0) fprintf(f, "%8s %5.1f%% SGEMM", "", 100 * frac);
        else if (rc) fprintf(f, "%8s %14s", "", "");
        /* the overhead: its forward run again, against the forward itself */
        if (rc && dt_graph_recomputed(&t->su.g, i))
                fprintf(f, " %9.3f (%3.0f%%)", r->rec[i], r->fwd[i] > 0 ? 100 * r->rec[i] / r->fwd[i] : 0);
        fputc('\n', f);
}

/* The rows of the step's parts outside the layers: data, loss, and the update's byte rate. */
static void extra_rows(const peaks *p, const result *r, double total, double ugbs, FILE *f)
{
        const char *extra[3] = { "(data)", "(loss)", "(update)" };
        const double ems[3] = { r->data, r->loss, r->update };
        for (int k = 0; k < 3; k++) {
                fprintf(f, "%-14s %-12s %-14s %9.3f %9s %6.1f%%", extra[k], "", "", ems[k], "",
                        total > 0 ? 100 * ems[k] / total : 0);
                if (k == 2) fprintf(f, " %9s %9s %8.2f %5.1f%% BW", "", "", ugbs, p->bw > 0 ? 100 * ugbs / p->bw : 0);
                fputc('\n', f);
        }
}

/* bf16, powersgd, threshold: per bucket, the bytes of this rank's message in the last step
 * against the fp32 bucket's, and the encode/decode time per step, into a's "compression" and,
 * with f, one line per bucket. */
static void report_compress(const bench *t, json_t *a, FILE *f)
{
        const dt_cx *c = t->dp.cx;
        if (!c || !c->steps) return;
        json_t *arr = json_array();
        if (f) fprintf(f, "compression %s (this rank's messages, last step; encode+decode per step):\n",
                       dt_comp_names[t->su.cs.compression]);
        for (int j = 0; j < c->nb; j++) {
                double fp32 = (double)t->dp.b[j].len * sizeof(float), ms = 1e3 * c->bucket_encode[j] / (double)c->steps;
                json_t *e = json_object();
                json_object_set_new(e, "fp32_bytes", json_integer((json_int_t)fp32));
                json_object_set_new(e, "bytes", json_integer(c->bucket_sent[j]));
                json_object_set_new(e, "encode_ms", json_real(ms));
                json_array_append_new(arr, e);
                if (f) fprintf(f, "  bucket %d: %ld of %.0f bytes (%.1f%%), %.3f ms\n", j, c->bucket_sent[j], fp32,
                               fp32 > 0 ? 100.0 * (double)c->bucket_sent[j] / fp32 : 0, ms);
        }
        json_object_set_new(a, "compression", arr);
}

/* More than one rank: the gradient all-reduce, MPI's against dtrain's buckets, and how much of it
 * backward hid, into m's "allreduce" (null on one rank) and, with f, two lines. */
static void report_allreduce(const bench *t, const result *r, json_t *m, FILE *f)
{
        if (t->su.size == 1) {
                json_object_set_new(m, "allreduce", json_null());
                return;
        }
        double bytes = (double)t->su.g.nparams * sizeof(float);
        double hidden = r->sync > 0 ? (r->bwd_alone + r->sync - r->overlapped) / r->sync : 0;
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        json_t *a = json_object();
        json_object_set_new(a, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(a, "buckets", json_integer(t->dp.nb));
        json_object_set_new(a, "mpi_ms", json_real(r->raw));
        json_object_set_new(a, "mpi_gbs", json_real(gflops(bytes, r->raw)));
        json_object_set_new(a, "dtrain_ms", json_real(r->sync));
        json_object_set_new(a, "dtrain_gbs", json_real(gflops(bytes, r->sync)));
        json_object_set_new(a, "ratio", json_real(r->sync > 0 ? r->raw / r->sync : 0));
        json_object_set_new(a, "backward_ms", json_real(r->bwd_alone));
        json_object_set_new(a, "overlapped_ms", json_real(r->overlapped));
        json_object_set_new(a, "hidden", json_real(hidden));
        json_object_set_new(a, "exposed_ms", json_real(r->wait));
        json_object_set_new(a, "ranks_on_machine", json_integer(t->su.machine_ranks));
        json_object_set_new(a, "waits_yield", json_boolean(dt_comm_yields()));
        json_object_set_new(m, "allreduce", a);
        if (!f) return;
        fprintf(f, "allreduce of %.2f MiB over %d ranks: MPI_Allreduce %.3f ms (%.2f GB/s), dtrain %d "
                "bucket%s %.3f ms (%.2f GB/s, %.2fx)\n", bytes / 1048576.0, t->su.size, r->raw,
                gflops(bytes, r->raw), t->dp.nb, t->dp.nb == 1 ? "" : "s", r->sync,
                gflops(bytes, r->sync), r->sync > 0 ? r->raw / r->sync : 0);
        fprintf(f, "overlap: backward %.3f ms + sync %.3f ms alone, %.3f ms overlapped: %.0f%% of the "
                "sync hidden; %.3f ms waited after backward\n", r->bwd_alone, r->sync, r->overlapped,
                100 * hidden, r->wait);
        fprintf(f, "waits: %s (%d ranks on this machine's %ld cores, %d thread%s each)\n",
                dt_comm_yields() ? "yield the core between polls" : "poll without yielding", t->su.machine_ranks,
                sysconf(_SC_NPROCESSORS_ONLN), t->su.threads, t->su.threads == 1 ? "" : "s");
        report_compress(t, a, f);
        if (t->su.cs.sync != DT_SYNC_ALLREDUCE || t->su.cs.reproducible)
                fprintf(f, "note: the spec's sync is %s%s; bench times the allreduce path\n",
                        dt_sync_names[t->su.cs.sync], t->su.cs.reproducible ? " (reproducible)" : "");
}

/* partition.shard: what the data axis shards and the collectives it adds, into m's "shard" (null
 * when nothing is sharded) and, with f, one line. At shard 2 the figures above are the buckets'
 * reduce-scatters; the all-gather of the updated parameters is inside every step's update. */
static void report_shard(const bench *t, const result *r, json_t *m, FILE *f)
{
        const dt_shard *sh = &t->dp.sh;
        if (!sh->stage) {
                json_object_set_new(m, "shard", json_null());
                return;
        }
        double in = (double)sh->gather_bytes, mib = 1048576.0;
        json_t *a = json_object();
        json_object_set_new(a, "stage", json_integer(sh->stage));
        json_object_set_new(a, "owned_floats", json_integer((json_int_t)sh->n));
        json_object_set_new(a, "gradient", json_string(sh->stage >= 2 ? "reduce-scatter" : "allreduce"));
        /* shard 3: gathered before each layer's forward and backward, the waits timed (the rest hides
         * behind the layers before it) */
        json_object_set_new(a, "gather", json_string(sh->stage == 3 ? "per layer" : "after the update"));
        json_object_set_new(a, "gather_bytes_in", json_integer((json_int_t)sh->gather_bytes));
        json_object_set_new(a, "gather_ms", json_real(r->gather));
        json_object_set_new(a, "gather_gbs", json_real(gflops(in, r->gather)));
        json_object_set_new(m, "shard", a);
        if (!f) return;
        fprintf(f, "shard %d over %d ranks: %.2f of %.2f MiB of each moment here, gradient %s in %d bucket%s "
                "(above); parameters all-gathered %s: %.2f MiB in, %.3f ms%s per step (%.2f GB/s)\n",
                sh->stage, sh->D, sh->n * 4.0 / mib, t->su.g.nparams * 4.0 / mib,
                sh->stage >= 2 ? "reduce-scattered" : "all-reduced", sh->nb, sh->nb == 1 ? "" : "s",
                sh->stage == 3 ? "before each layer's forward and backward, the next one's meanwhile" : "after the update",
                in / mib, r->gather, sh->stage == 3 ? " waited" : "", gflops(in, r->gather));
}

/* Builds the model's JSON object and, without --json, prints its table (rank 0). */
static json_t *report(const bench *t, const dt_bench_opts *o, const peaks *p, const result *r, FILE *f)
{
        const dt_graph *g = &t->su.g;
        double total = r->data + r->loss + r->update, sps = t->B / (r->step / 1e3);
        double rec = 0;
        for (int i = 0; i < g->n; i++) total += r->fwd[i] + r->bwd[i] + r->rec[i], rec += r->rec[i];
        double step_flops = 0;          /* per sample: forward + backward as bwd_flops counts it */
        for (int i = 0; i < g->n; i++) step_flops += layer_flops(&g->layers[i]) + bwd_flops(&g->layers[i], i, 1);
        double achieved = step_flops * sps / 1e9;
        dt_mem_plan mp;         /* the run's plan (plan/mem.h) for this batch and data, no snapshots */
        dt_setup_mem_plan(&t->su, t->b, 1, dt_bench_data_bytes(&t->data), t->data.have ? dt_dataset_mapped_reads(&t->data.ds, r->reads) : 0, &mp);
        mp.fixed += r->peaks_rss;
        mp.total += r->peaks_rss;
        double planned = mp.total / 1048576.0;
        json_t *m = json_object(), *layers = json_array();
        report_head(t, o, p, m, f);
        for (int i = 0; i < g->n; i++) layer_row(t, p, r, i, total, layers, f);
        double ugbs = gflops(update_bytes(t), r->update);
        if (f) extra_rows(p, r, total, ugbs, f);
        json_object_set_new(m, "layers", layers);
        json_object_set_new(m, "data_ms", json_real(r->data));
        json_object_set_new(m, "loss_ms", json_real(r->loss));
        json_object_set_new(m, "update_ms", json_real(r->update));
        json_object_set_new(m, "update_gbs", json_real(ugbs));
        json_object_set_new(m, "step_ms", json_real(r->step));
        json_object_set_new(m, "samples_per_sec", json_real(sps));
        json_object_set_new(m, "gflops", json_real(achieved));
        json_object_set_new(m, "step_flops_per_sample", json_real(step_flops));
        json_object_set_new(m, "peak_fraction", json_real(p->sgemm_all > 0 ? achieved / p->sgemm_all : 0));
        json_object_set_new(m, "peak_rss_mib", json_real(r->rss_mib));
        json_object_set_new(m, "planned_mib", json_real(planned));
        if (g->rc) json_object_set_new(m, "recompute_ms", json_real(rec));
        if (t->data.have)
                json_object_set_new(m, "data", dt_bench_data_report(&t->data, r->data, r->step, NULL));
        if (f) {
                fprintf(f, "step: %.3f ms, %.0f samples/s, %.2f GFLOP/s (forward + backward), %.1f%% of SGEMM peak%s\n",
                        r->step, sps, achieved, p->sgemm_all > 0 ? 100 * achieved / p->sgemm_all : 0,
                        t->su.size > 1 ? " (all ranks)" : "");
                if (t->data.have) json_decref(dt_bench_data_report(&t->data, r->data, r->step, f));
                char terms[512];
                dt_mem_plan_str(&mp, terms, sizeof terms);
                fprintf(f, "memory: peak RSS %.1f MiB%s, planned %.1f MiB (%+.1f%%; %s)\n", r->rss_mib,
                        t->su.size > 1 ? " (largest rank)" : "", planned,
                        r->rss_mib > 0 ? 100 * (planned - r->rss_mib) / r->rss_mib : 0.0, terms);
                if (g->rc)
                        fprintf(f, "recompute: %.3f ms per step remaking outputs in backward (%.1f%% of the layers' "
                                "time)\n", rec, total > 0 ? 100 * rec / total : 0);
        }
        report_allreduce(t, r, m, f);
        report_shard(t, r, m, f);
        if (f) fputc('\n', f);
        return m;
}

/* ---- the command ---- */

int dt_bench_one_rank(const char *path, const dt_bench_opts *o, int threads, double *step_ms)
{
        bench t = { 0 };
        dt_bench_opts one = *o;
        one.threads = threads;
        int rc = setup(&t, path, &one, 1);
        if (!rc) {
                double *s = dt_malloc((size_t)o->iters * sizeof *s);
                for (int i = 0; i < o->warmup; i++) full_step(&t);
                for (int i = 0; i < o->iters; i++) s[i] = full_step(&t);
                *step_ms = 1e3 * dt_median(s, o->iters);
                free(s);
        }
        free_bench(&t);
        return rc;
}

static int bench_model(const char *path, const dt_bench_opts *o, peaks *p, json_t *all)
{
        bench t = { 0 };
        result r = { 0 };
        int rc = setup(&t, path, o, 0);
        if (!rc && dt_grid_parts(&t.su.grid)) rc = dt_bench_pipe(&t.su, path, o, all);     /* bench_pipe.c: stages, shards */
        if (rc || dt_grid_parts(&t.su.grid)) { free_bench(&t); return rc; }
        size_t rss0 = dt_rss_now();
        measure_peaks(p, &t.su.world, t.su.be, t.su.threads);
        r.peaks_rss = dt_rss_now() > rss0 ? (double)(dt_rss_now() - rss0) : 0;
        r.fwd = dt_calloc((size_t)t.su.g.n, sizeof *r.fwd);
        r.bwd = dt_calloc((size_t)t.su.g.n, sizeof *r.bwd);
        r.rec = dt_calloc((size_t)t.su.g.n, sizeof *r.rec);
        for (int i = 0; i < o->warmup; i++) full_step(&t);
        time_layers(&t, o->iters, &r);
        /* the steps' peak, which the plan describes: the layers timed one by one hold every
         * gradient at shard 3 (a step hands the others' parts back), and the comparisons after
         * the steps hold more (the whole gradient's MPI_Allreduce: mlp-4096 at shard 3 on 4
         * ranks peaked at 457 MiB against the steps' 277) */
        full_step(&t);
        dt_rss_reset_peak();
        time_steps(&t, o->iters, &r);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double peak = dt_rss_peak() ? (double)dt_rss_peak() / 1048576.0 : ru.ru_maxrss / 1024.0;
        r.rss_mib = max_over_ranks(&t.su.world, peak);
        r.reads = t.data.have ? (double)(t.data.fed + t.data.prefetch) * t.data.b : 0;
        if (t.data.have) dt_bench_data_compare(&t.data, o->iters, step_of, &t);
        if (t.su.size > 1) time_comm(&t, o->warmup ? 1 : 0, o->iters, &r);
        if (t.su.rank == 0) {
                json_t *m = report(&t, o, p, &r, o->json ? NULL : stdout);
                json_array_append_new(all, m);
                fflush(stdout);
        }
        free(r.fwd);
        free(r.bwd);
        free(r.rec);
        free_bench(&t);
        return 0;
}

int dt_cmd_bench(const dt_bench_opts *o)
{
        static const char *const bundled[] = { "models/mlp.yaml", "models/lenet.yaml", "models/cnn.yaml",
                                               "models/lstm.yaml" };
        const char *paths[4];
        char found[4][4096];
        int n = 0, rank = 0, size = 1, rc = 0;
        dt_comm_world_rank(&rank, &size);
        if (size > 1) snprintf(dt_msg_prefix, sizeof dt_msg_prefix, "dtrain[rank %d/%d]", rank, size);
        if (o->network) return dt_bench_network(o);
        if (o->nmodels == 0) {
                for (int i = 0; i < 4; i++) {  /* here (a source tree), else the installed copies */
                        if (dt_bundled(bundled[i], found[n], sizeof found[n])) paths[n] = found[n], n++;
                        else if (rank == 0) dt_note("%s not found; skipped", bundled[i]);
                }
                if (n == 0) {
                        if (rank == 0)
                                dt_error("no model given, and the bundled models/*.yaml are neither here nor "
                                         "installed beside dtrain (%s); name a MODEL.yaml", "share/dtrain/models");
                        return DT_EXIT_USAGE;
                }
        }
        peaks p = { 0 };
        json_t *all = json_array();
        int count = o->nmodels ? o->nmodels : n;
        for (int i = 0; i < count && !rc; i++)
                rc = bench_model(o->nmodels ? o->models[i] : paths[i], o, &p, all);
        if (!rc && rank == 0 && o->json) {
                json_dumpf(all, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
                fputc('\n', stdout);
        }
        json_decref(all);
        return rc;
}
