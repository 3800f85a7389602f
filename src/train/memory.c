/* train/memory.c - a run's memory: this rank's plan (plan/mem.h's terms for this trainer's graph,
 * batch, data and checkpoints), the refusal of a plan over the limit before any buffer is made, and
 * every rank's planned against measured peak (VmHWM) for the epoch lines and the run's end. */
#include "train/trainer.h"

#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include "util/rss.h"
#include "train/ckpt_stream.h"

int dt_tr_act_batch(const trainer *t)
{
        const dt_setup *su = &t->su;
        const dt_cluster_spec *cs = &su->cs;
        /* a pipeline's slots hold one micro-batch each: its steps and evaluations run no more */
        int b = dt_layout_act_batch(&su->grid.L, su->spec.train.batch, dt_tr_max_local(t));
        /* reproducible mode runs its chunks one at a time, B / chunks samples each */
        if (cs->reproducible && !dt_grid_pipelined(&su->grid) && cs->chunks > 0) b = DT_MIN(b, su->spec.train.batch / cs->chunks);
        if (cs->micro_batch > 0 && !dt_grid_pipelined(&su->grid)) b = DT_MIN(b, cs->micro_batch);
        return DT_MAX(1, b);
}

/* What the data holds on this rank: in-memory samples, labels and targets of both sets, the
 * epoch's permutation, the loader's slots and the labels of one batch. */
static size_t data_bytes(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        size_t b = dt_dataset_bytes(&t->train);
        if (t->have_test) b += dt_dataset_bytes(&t->test);
        b += (size_t)t->train.n * sizeof(long);
        if (t->train.n) b += dt_loader_bytes(&t->train, t->su.spec.data.prefetch, dt_tr_max_local(t));
        /* a stage that feeds no inputs (a pipeline's later stages, zb-v's middle ranks) never
         * writes its slots' input floats: they stay unresident */
        if (t->train.n && !(dt_grid_load_parts(&t->su.grid) & DT_LOAD_INPUTS))
                b -= (size_t)DT_MAX(1, t->su.spec.data.prefetch) * (size_t)DT_MAX(1, dt_tr_max_local(t)) *
                     t->train.dim * sizeof(float);
        b += (size_t)DT_MAX(tr->batch, tr->eval_batch) * (size_t)t->su.rows * ((size_t)t->su.C * 4 + 4);
        return b;
}

/* the steps the run asks for (its epochs, or --max-steps / train.max_steps when fewer) */
static long run_steps(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        long all = dt_tr_steps_per_epoch(t) * tr->epochs;
        return tr->max_steps > 0 && tr->max_steps < all ? tr->max_steps : all;
}

/* Checkpoint snapshots rank 0 may hold at once: none when they are written synchronously
 * (DTRAIN_CKPT_SYNC=1), one when the run asks for one checkpoint or checkpoint_snapshots is 1 (the
 * default), else two (ckpt_writer.c makes the second only while the first is still being written:
 * the plan is the most it can take). */
static int snapshots(const trainer *t)
{
        const dt_train_spec *tr = &t->su.spec.train;
        /* a streamed checkpoint (partition.shard) goes from the owners to the file piece by piece */
        if (t->su.rank != 0 || dt_ckpt_sync_env() == 1 || dt_ckpt_stream_on(t)) return 0;
        long spe = dt_tr_steps_per_epoch(t), steps = run_steps(t);
        long n = spe > 0 ? (steps + spe - 1) / spe : 1;
        if (tr->checkpoint_every > 0) n += steps / tr->checkpoint_every;
        return n > 1 && t->su.cs.checkpoint_snapshots != 1 ? 2 : 1;
}

/* The training set's cache pages this rank reads: its slice of every batch of the run and of the
 * loader's batches ahead, at random places, each mapping what the probe measured (data.h). Counted
 * whole, mlp at shard 3 on 4 ranks planned +18.7% after 30 steps, lstm, gru and rnn +15-16%. */
static size_t train_mapped(const trainer *t)
{
        double k = (double)(run_steps(t) + DT_MAX(0, t->su.spec.data.prefetch)) * dt_tr_max_local(t);
        return dt_dataset_mapped_reads(&t->train, k);
}

/* The test set's cache pages this rank reads: a replica reads one contiguous slice of each
 * evaluation batch (B / replicas samples, rounded up), and the kernel maps the pages around each
 * fault (64 KiB by default), one neighbourhood more per batch. At 4 ranks the whole 7.5 MiB of
 * Fashion-MNIST's test images planned every rank 5 MiB above its peak (mlp +7%). */
static size_t test_mapped(const trainer *t)
{
        size_t m = dt_dataset_mapped(&t->test);
        long n = t->test.n, eb = DT_MAX(1, t->su.spec.train.eval_batch), R = dt_grid_replicas(&t->su.grid);
        if (R <= 1 || n <= 0 || !m) return m;
        long batches = (n + eb - 1) / eb, per = DT_MIN(n, batches * ((DT_MIN(eb, n) + R - 1) / R));
        return DT_MIN(m, (size_t)((double)m * (double)per / (double)n) + (size_t)batches * 65536);
}

_Static_assert(DT_ST_CHUNK == DT_MEM_STREAM_PIECE, "the planner's pieces are the writer's");

void dt_tr_mem_plan(const trainer *t, dt_mem_plan *p)
{
        const dt_setup *su = &t->su;
        const dt_graph *m = dt_setup_model_graph(su);
        int nm = dt_optim_nmoments(&su->spec.train.opt);
        dt_mem_in in = { .g = &su->g, .batch = dt_tr_act_batch(t), .nslots = su->grid.nslots, .nmoments = nm,
                         .dp = dt_grid_replicas(&su->grid),
                         .snapshot_floats = m->nparams * (size_t)(1 + nm) + m->nbuffers, .snapshots = snapshots(t),
                         .data = data_bytes(t), .fixed = su->rss_base ? su->rss_base : dt_mem_fixed_model(1),
                         .floor = su->rss_setup_peak,
                         .onednn = dt_setup_onednn(su), .threads = su->threads, .msg_bufs = su->grid.msg_bufs,
                         /* the decompressed caches, mapped: the run's reads of the training set, an
                          * evaluation the replica's slice of each evaluation batch (dt_tr_evaluate) */
                         .mapped = train_mapped(t) + (t->have_test ? test_mapped(t) : 0) };
        if (su->grid.L.grid[DT_AXIS_TENSOR] > 1 && dt_grid_parts(&su->grid)) in.init_floats = dt_tp_init_floats(&su->grid.sg, dt_backend_supports(su->be, DT_CAP_HOST_MEMORY));
        /* the caches are mapped on every rank, but read only where the inputs are fed */
        if (!(dt_grid_load_parts(&su->grid) & DT_LOAD_INPUTS)) in.mapped = 0;
        /* partition.shard: plan/mem.h's stages. A checkpoint that is not streamed (a compressor's
         * state) gathers the moments whole on the data axis's rank 0. */
        int zs = dt_grid_replicas(&su->grid) > 1 ? su->cs.shard : 0;
        in.shard = zs;
        in.mixed = su->grid.L.grid[DT_AXIS_PIPE] > 1 || su->grid.L.grid[DT_AXIS_TENSOR] > 1;
        in.speculate = dt_mem_speculates(su->grid.L.grid[DT_AXIS_PIPE], su->spec.train.clip_norm, zs);
        if (dt_ckpt_stream_on(t))
                in.stream_floats = dt_mem_stream_floats(m, su->rank == 0, dt_mem_stream_sends(su->rank == 0, su->grid.data->rank,
                                                                                              zs, nm, in.mixed));
        in.bucket_mb = su->cs.bucket_mb;
        in.sum_esz = !su->be || !strcmp(su->be->ops->name, "cpu") ? dt_dp_sum_esz(&su->cs, zs) : 0;
        dt_mem_set_walk(&in, &su->cs, dt_grid_pipelined(&su->grid), dt_tr_max_local(t), dt_grid_replicas(&su->grid),
                        su->grid.data->rank);
        dt_mem_plan_of(&in, p);
        /* a streamed checkpoint's pieces (train/ckpt_stream.c): rank 0 holds the writer's piece and
         * one sender's runs of it, every other rank its own runs of a piece, at most a piece */
        if (zs && su->grid.data->rank == 0 && !dt_ckpt_stream_on(t)) {
                double w = 4.0 * nm * (double)su->g.nparams;
                p->snapshots += w;
                p->total += w;
                p->need += w;
        }
        /* a run in parts whose checkpoints are not streamed (a compressor's state): rank 0 also
         * gathers the whole model (parameters, buffers, moments) for each checkpoint and the final
         * weights (train/whole.c) */
        if (dt_grid_parts(&su->grid) && su->rank == 0 && !dt_ckpt_stream_on(t)) {
                double w = 4.0 * (double)in.snapshot_floats;
                p->snapshots += w;
                p->total += w;
                p->need += w;
        }
}

double dt_tr_mem_limit(const trainer *t)
{
        if (t->su.cs.memory_per_rank > 0) return t->su.cs.memory_per_rank;
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        FILE *f = fopen("/proc/meminfo", "r");
        double avail = pages > 0 && psz > 0 ? (double)pages * psz : 0;
        char line[256];
        long kb;
        while (f && fgets(line, sizeof line, f))
                if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) avail = 1024.0 * kb;
        if (f) fclose(f);
        int local = t->su.world.size > 0 && t->su.world.local_size > 0 ? t->su.world.local_size : 1;
        return avail > 0 ? avail / local : 0;
}

static int check(void *ud)
{
        trainer *t = ud;
        const dt_train_spec *tr = &t->su.spec.train;
        double limit = dt_tr_mem_limit(t);
        dt_tr_mem_plan(t, &t->mem);
        if (limit <= 0 || t->mem.need <= limit) return 0;
        char terms[512], at[DT_PATH_MAX + 32];
        dt_mem_plan_str(&t->mem, terms, sizeof terms);
        const dt_pos *p = t->su.cs.memory_per_rank > 0 ? &t->su.cs.memory_pos : &tr->batch_pos;
        const char *file = t->su.cs.memory_per_rank > 0 ? dt_cluster_spec_file_of(&t->su.cs, DT_CS_MEMORY) : t->su.spec.file;
        fprintf(stderr, "%s: error: rank %d needs %.1f MiB%s but %s %.1f MiB (%s); use more ranks, a smaller batch "
                "or strategy: auto\n", dt_pos_str(at, sizeof at, file, p->line, p->col), t->su.rank,
                t->mem.need / 1048576.0, t->mem.mapped > 0 ? " besides the dataset caches mapped from disk" : "", t->su.cs.memory_per_rank > 0 ? "memory_per_rank is" : "the machine has",
                limit / 1048576.0, terms);
        return DT_EXIT_USAGE;
}

int dt_tr_check_memory(trainer *t)
{
        /* the fixed part is what the process holds before the model's buffers and beyond the data
         * the plan counts: what loading the data left (a CSV parse's buffers) is fixed too. The heap
         * that setup freed (the graph's build, the profile) goes back first: glibc keeps it resident,
         * so it would count here and again when training's temporaries (the all-reduces' in flight)
         * reuse it; mlp-even on 2 ranks measured +10% over its plan with it kept. What setup peaked
         * at stays the plan's floor: blobs-csv's CSV parse made its ranks' peaks (-20% and -32%
         * against the plan without it) */
        t->su.rss_setup_peak = dt_rss_peak();
        malloc_trim(0);
        size_t now = dt_rss_now(), held = dt_dataset_bytes(&t->train) + (t->have_test ? dt_dataset_bytes(&t->test) : 0);
        if (now > held && now - held > t->su.rss_base) t->su.rss_base = now - held;
        /* after the fixed part is taken, which the probe's pages would otherwise join */
        if (dt_grid_load_parts(&t->su.grid) & DT_LOAD_INPUTS) dt_dataset_probe_map(&t->train);
        return dt_agree_run(check, t);
}

void dt_tr_print_mem(const trainer *t, FILE *f)
{
        const dt_graph *g = dt_setup_model_graph(&t->su);
        dt_mem_plan p;
        char terms[512];
        dt_tr_mem_plan(t, &p);
        dt_mem_plan_str(&p, terms, sizeof terms);
        fprintf(f, "parameters: %zu (%.2f MiB), buffers: %zu; planned memory per rank: %.1f MiB (rank %d%s: %s; "
                "activations for %d samples%s)\n", g->nparams, g->nparams * 4.0 / 1048576.0, g->nbuffers,
                p.total / 1048576.0, t->su.rank, dt_grid_parts(&t->su.grid) ? ", its part of the model" : "", terms,
                dt_tr_act_batch(t), t->train.disk ? "; samples read from disk per batch" : "");
}

void dt_tr_mem_gather(trainer *t)
{
        double mine[2] = { t->mem.total, (double)dt_rss_peak() }, *all = NULL;
        int n = t->su.size;
        if (t->su.rank == 0) {
                free(t->mem_ranks);
                t->mem_ranks = all = dt_malloc((size_t)n * 2 * sizeof *all);
        }
        if (n > 1) MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, t->su.world.comm);
        else memcpy(all, mine, sizeof mine);
        if (t->su.rank == 0) dt_metrics_memory(&t->metrics, n, all);
}

void dt_tr_mem_report(trainer *t, FILE *f)
{
        dt_tr_mem_gather(t);
        if (t->su.rank != 0 || !f) return;
        for (int r = 0; r < t->su.size; r++) {
                double pl = t->mem_ranks[2 * r], me = t->mem_ranks[2 * r + 1];
                fprintf(f, "memory: rank %d planned %.1f MiB, measured peak %.1f MiB (RSS high-water mark), %+.1f%%\n",
                        r, pl / 1048576.0, me / 1048576.0, me > 0 ? 100.0 * (pl - me) / me : NAN);
        }
        if (t->su.plan_peak)
                fprintf(f, "memory: rank 0's strategy auto planning peaked at %.1f MiB before training (its layer "
                        "measurements; the peaks above are training's)\n", t->su.plan_peak / 1048576.0);
}
