/* spec/cluster_check.c - the cluster spec against the job: the data x pipeline x tensor grid a
 * world size and a model allow (dt_cluster_grid), the settings each kind of partitioning cannot
 * honour, the batch against the replicas, reproducible mode's chunks, and what only the run
 * knows (dt_cluster_spec_validate_run). Each error at the key that caused it (cluster_int.h). */
#include "spec/cluster_spec.h"
#include "spec/cluster_int.h"

#include <limits.h>
#include <string.h>
#include "spec/model_spec.h"

static const char *strategy_of(const dt_cluster_spec *c)
{
        return dt_part_names[c->strategy];
}

int dt_cluster_grid(const dt_cluster_spec *c, int world_size, int nlayers, int grid[3], dt_diag *d)
{
        static const dt_cs_bits bits[3] = { DT_CS_GDATA, DT_CS_GPIPE, DT_CS_GTENSOR };
        static const char *const names[3] = { "data", "pipeline", "tensor" };
        int before = d->n;
        int g[3] = { c->grid_data, c->grid_pipeline, c->grid_tensor };
        if (c->strategy == DT_PART_AUTO) {
                dt_cs_err_at(d, c, DT_CS_STRATEGY, c->strategy_pos,
                       "strategy 'auto' is chosen by the planner, which needs the model: dtrain run, check "
                       "and plan choose the layout");
                return -1;
        }
        if (c->strategy == DT_PART_DATA) {
                for (int a = 0; a < 3; a++)
                        if ((c->set & bits[a]) && g[a] != (a ? 1 : world_size))
                                dt_cs_err_at(d, c, bits[a], dt_cs_kpos(c, bits[a]), "key '%s' %d applies to strategy model or "
                                       "hybrid; strategy data uses every rank as a data-parallel replica",
                                       names[a], g[a]);
                static const dt_cs_bits pipe_bits[3] = { DT_CS_STAGES, DT_CS_MICROS, DT_CS_SCHEDULE };
                for (int a = 0; a < 3; a++)
                        if (c->set & pipe_bits[a])
                                dt_cs_err_at(d, c, pipe_bits[a], dt_cs_kpos(c, pipe_bits[a]), "key '%s' applies to pipeline "
                                       "stages (strategy model or hybrid), not strategy data",
                                       dt_cs_key_name(pipe_bits[a]));
                if (c->set & DT_CS_SPLITS)
                        dt_cs_err_at(d, c, DT_CS_SPLITS, dt_cs_kpos(c, DT_CS_SPLITS), "key 'splits' applies to layers split "
                               "across a tensor group (strategy model or hybrid with tensor > 1), not strategy data");
                grid[0] = world_size;
                grid[1] = grid[2] = 1;
                return d->n > before ? -1 : 0;
        }
        if (!g[2]) g[2] = 1;
        int rest = world_size / g[2] > 0 ? world_size / g[2] : 1;      /* ranks per tensor shard */
        if (c->strategy == DT_PART_MODEL) {
                if (!g[0]) g[0] = 1;
                if (!g[1]) g[1] = rest / g[0] > 0 ? rest / g[0] : 1;
        } else {        /* hybrid: fill in what was not given */
                if (!g[0] && !g[1]) {
                        int p = 1;
                        for (int f = 2; f <= rest && f <= nlayers && p == 1; f++)
                                if (rest % f == 0) p = f;
                        g[1] = p;
                }
                if (!g[0]) g[0] = rest / g[1] > 0 ? rest / g[1] : 1;
                if (!g[1]) g[1] = rest / g[0] > 0 ? rest / g[0] : 1;
        }
        if (d->n == before && g[0] * g[1] * g[2] != world_size) {
                dt_cs_bits at = (c->set & DT_CS_GPIPE) ? DT_CS_GPIPE : (c->set & DT_CS_GDATA) ? DT_CS_GDATA :
                              (c->set & DT_CS_GTENSOR) ? DT_CS_GTENSOR : DT_CS_STRATEGY;
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "the grid data %d x pipeline %d x tensor %d = %d ranks, but the job "
                       "has %d (mpirun -np / srun -n)", g[0], g[1], g[2], g[0] * g[1] * g[2], world_size);
        }
        if (d->n == before && nlayers > 0 && g[1] > nlayers) {
                dt_cs_bits at = (c->set & DT_CS_GPIPE) ? DT_CS_GPIPE : DT_CS_STRATEGY;
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "%d pipeline stages but the model has %d layers; a stage holds "
                       "at least one", g[1], nlayers);
        }
        if (d->n == before && g[1] == 1 && (c->set & DT_CS_STAGES))
                /* a cut with one stage would be silently ignored */
                dt_cs_err_at(d, c, DT_CS_STAGES, dt_cs_kpos(c, DT_CS_STAGES), "key 'stages' cuts the model into pipeline "
                       "stages, but there is 1 stage here (partition.pipeline%s); give pipeline: %d for %d cut%s, "
                       "or leave 'stages' out", (c->set & DT_CS_GPIPE) ? " 1" : " chosen as 1", c->cuts.n + 1,
                       c->cuts.n, c->cuts.n == 1 ? "" : "s");
        if (d->n == before && g[2] == 1 && (c->set & DT_CS_SPLITS))
                dt_cs_err_at(d, c, DT_CS_SPLITS, dt_cs_kpos(c, DT_CS_SPLITS), "key 'splits' applies to a tensor degree above 1 "
                       "(partition.tensor), which is 1 here");
        memcpy(grid, g, sizeof g);
        return d->n > before ? -1 : 0;
}

/* Settings a pipeline cannot honour, at their keys. */
/* Tensor groups split layers: every rank of a group must see the same samples in the same step. */
static void check_tensor(const dt_cluster_spec *c, dt_diag *d)
{
        if (c->sync != DT_SYNC_ALLREDUCE)
                dt_cs_err_at(d, c, DT_CS_SYNC, dt_cs_kpos(c, DT_CS_SYNC), "sync '%s' does not combine with tensor-parallel "
                       "layers (tensor > 1); use sync: allreduce", dt_sync_names[c->sync]);
        if (c->reproducible)
                dt_cs_err_at(d, c, DT_CS_REPRO, dt_cs_kpos(c, DT_CS_REPRO), "'reproducible: true' does not combine with "
                       "tensor-parallel layers (tensor > 1)");
}

int dt_cluster_virtual_stages(const dt_cluster_spec *c)
{
        if ((c->set & DT_CS_VSTAGES) && c->virtual_stages >= 1) return c->virtual_stages;
        return c->schedule == DT_PIPE_INTERLEAVED || c->schedule == DT_PIPE_ZBV || c->schedule == DT_PIPE_VHALF ? 2 : 1;
}

/* partition.virtual_stages against the schedule and the grid, at the key (or at schedule when it was
 * not given). */
static void check_vstages(const dt_cluster_spec *c, const int grid[3], int nlayers, dt_diag *d)
{
        int v = dt_cluster_virtual_stages(c), given = (c->set & DT_CS_VSTAGES) != 0;
        if (c->bad & (DT_CS_VSTAGES | DT_CS_SCHEDULE)) return;
        dt_cs_bits at = given ? DT_CS_VSTAGES : DT_CS_SCHEDULE;
        const char *sched = dt_pipe_names[c->schedule];
        if (v > 1 && grid[1] == 1)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "virtual_stages %d (schedule %s) needs pipeline stages; "
                             "the grid has pipeline 1", v, sched);
        else if ((c->schedule == DT_PIPE_ZBV || c->schedule == DT_PIPE_VHALF) && v != 2)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "schedule %s runs virtual_stages 2 (a V of two chunks per "
                             "stage), got %d", sched, v);
        else if (c->schedule == DT_PIPE_INTERLEAVED && v < 2)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "schedule interleaved needs virtual_stages 2 to 4, got %d "
                             "(one chunk per stage is schedule 1f1b)", v);
        else if (v > 1 && c->schedule != DT_PIPE_INTERLEAVED && c->schedule != DT_PIPE_ZBV &&
                 c->schedule != DT_PIPE_VHALF)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "virtual_stages %d needs schedule interleaved, zb-v or v-half, "
                             "not %s", v, sched);
        else if (v > 1 && nlayers > 0 && grid[1] * v > nlayers)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "pipeline %d x virtual_stages %d = %d pieces, but the model "
                             "has %d layers; each piece needs at least one", grid[1], v, grid[1] * v, nlayers);
        else if (v > 1 && grid[1] * v > DT_MAX_STAGES)
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "pipeline %d x virtual_stages %d = %d pieces; at most %d",
                             grid[1], v, grid[1] * v, DT_MAX_STAGES);
}

static void check_pipeline(const dt_cluster_spec *c, dt_diag *d)
{
        if (c->sync != DT_SYNC_ALLREDUCE)
                dt_cs_err_at(d, c, DT_CS_SYNC, dt_cs_kpos(c, DT_CS_SYNC), "sync '%s' does not combine with pipeline stages "
                       "(strategy %s); use sync: allreduce", dt_sync_names[c->sync], strategy_of(c));
        if (c->reproducible)
                dt_cs_err_at(d, c, DT_CS_REPRO, dt_cs_kpos(c, DT_CS_REPRO), "'reproducible: true' does not combine with "
                       "pipeline stages (strategy %s)", strategy_of(c));
        if (c->micro_batch)
                dt_cs_err_at(d, c, DT_CS_MICRO, dt_cs_kpos(c, DT_CS_MICRO), "micro_batch (gradient accumulation, samples "
                       "per pass) does not combine with pipeline stages; set micro_batches (how many "
                       "micro-batches the pipeline splits each replica's slice into)");
}

/* Sharded data parallelism runs on the all-reduce's buckets: what it cannot honour, at 'shard'. */
static void check_shard(const dt_cluster_spec *c, dt_diag *d)
{
        dt_pos at = dt_cs_kpos(c, DT_CS_SHARD);
        if (!c->shard || (c->bad & DT_CS_SHARD)) return;
        if (c->sync != DT_SYNC_ALLREDUCE)
                dt_cs_err_at(d, c, DT_CS_SHARD, at, "shard %d needs sync: allreduce (the shards are parts of the "
                       "all-reduce's buckets), not %s", c->shard, dt_sync_names[c->sync]);
        else if (c->shard >= 2 && c->compression != DT_COMP_NONE && c->compression != DT_COMP_AUTO)
                dt_cs_err_at(d, c, DT_CS_SHARD, at, "shard %d reduce-scatters the gradient uncompressed; use "
                       "compression: none, or shard: 1 (the compressed all-reduce, moments sharded)", c->shard);
}

/* The two-level all-reduce sums plain float buckets: what it cannot honour, at 'hierarchical'. */
static void check_hier(const dt_cluster_spec *c, dt_diag *d)
{
        dt_pos at = dt_cs_kpos(c, DT_CS_HIER);
        if (c->hierarchical != 2 || (c->bad & DT_CS_HIER)) return;
        if (c->compression != DT_COMP_NONE && c->compression != DT_COMP_AUTO)  /* auto: none here */
                dt_cs_err_at(d, c, DT_CS_HIER, at, "'hierarchical: true' sums uncompressed buckets; use compression: "
                       "none, or hierarchical: auto (the flat compressed all-reduce)");
        else if (c->shard >= 2)
                dt_cs_err_at(d, c, DT_CS_HIER, at, "'hierarchical: true' does not combine with shard %d (its "
                       "reduce-scatter is flat); use shard: 1 or 0, or hierarchical: auto", c->shard);
}

/* threshold's target density range must be a range. */
static void check_threshold(const dt_cluster_spec *c, dt_diag *d)
{
        if (c->compression != DT_COMP_THRESHOLD || (c->bad & (DT_CS_THR_MIN | DT_CS_THR_MAX))) return;
        if (c->threshold_min_density > c->threshold_max_density) {
                dt_cs_bits at = (c->set & DT_CS_THR_MIN) ? DT_CS_THR_MIN : DT_CS_THR_MAX;
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "threshold_min_density (%g) is above "
                       "threshold_max_density (%g); the target range needs min <= max",
                       c->threshold_min_density, c->threshold_max_density);
        }
}

int dt_cluster_spec_validate(const dt_cluster_spec *c, const struct dt_model_spec *m, int world_size, dt_diag *d)
{
        int before = d->n;
        if ((c->set & DT_CS_RANKS) && c->ranks != 0 && c->ranks != world_size)
                dt_cs_err_at(d, c, DT_CS_RANKS, c->ranks_pos,
                       "'ranks' is %d but the job has %d MPI rank%s (mpirun -np / srun -n)", c->ranks,
                       world_size, world_size == 1 ? "" : "s");
        dt_cs_check_modes_merged(c, d);
        check_shard(c, d);
        check_hier(c, d);
        check_threshold(c, d);
        int grid[3] = { world_size, 1, 1 };
        if (dt_cluster_grid(c, world_size, m ? m->nlayers : DT_MAX_STAGES, grid, d) == 0) {
                if (grid[1] > 1) check_pipeline(c, d);
                else if (grid[2] > 1) check_tensor(c, d);
                check_vstages(c, grid, m ? m->nlayers : 0, d);
                dt_cs_check_recompute(c, m, grid[1], d);
        }
        int batch = m ? m->train.batch : 0;
        if (m && batch < grid[0]) {
                /* data parallel splits the global batch; an empty slice would stall the sums */
                if (grid[0] == world_size)
                        dt_diag_add(d, m->file[0] ? m->file : NULL, m->train.batch_pos.line, m->train.batch_pos.col,
                                    "batch %d is smaller than the number of ranks (%d); each rank needs at least "
                                    "one sample", batch, world_size);
                else
                        dt_diag_add(d, m->file[0] ? m->file : NULL, m->train.batch_pos.line, m->train.batch_pos.col,
                                    "batch %d is smaller than the number of data-parallel replicas (%d); each "
                                    "replica needs at least one sample", batch, grid[0]);
        }
        if (c->reproducible && !(c->bad & DT_CS_CHUNKS)) {
                /* the sum is taken chunk by chunk in a fixed order whatever the rank count, so the
                 * chunks must be fixed by the batch alone and every rank must own at least one */
                dt_cs_bits at = (c->set & DT_CS_CHUNKS) ? DT_CS_CHUNKS : DT_CS_REPRO;
                const char *dflt = (c->set & DT_CS_CHUNKS) ? "" : " (the default)";
                if (m && batch % c->chunks)
                        dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "batch %d is not a multiple of chunks %d%s", batch,
                               c->chunks, dflt);
                if (c->chunks < world_size)
                        dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "chunks (%d) must be at least the number of ranks (%d)%s",
                               c->chunks, world_size, dflt);
        }
        return d->n > before ? -1 : 0;
}

int dt_cluster_spec_validate_run(const dt_cluster_spec *c, const dt_cluster_run *r, dt_diag *d)
{
        int before = d->n;
        if (c->reproducible && !(c->bad & DT_CS_CHUNKS) &&
            (double)r->repro_nodes * (double)r->nparams > (double)INT_MAX) {
                dt_cs_bits at = (c->set & DT_CS_CHUNKS) ? DT_CS_CHUNKS : DT_CS_REPRO;
                dt_cs_err_at(d, c, at, dt_cs_kpos(c, at), "reproducible mode: %zu parameters x %ld tree nodes exceed one MPI "
                       "message; use fewer chunks than %d%s", r->nparams, r->repro_nodes, c->chunks,
                       (c->set & DT_CS_CHUNKS) ? "" : " (the default)");
        }
        if (r->device_sync && !strcmp(c->comm, "nccl") && !r->nccl)
                dt_cs_err_at(d, c, DT_CS_COMM, dt_cs_kpos(c, DT_CS_COMM),
                       "comm: nccl was asked but this dtrain was built without NCCL");
        if (c->shard && r->device)
                dt_cs_err_at(d, c, DT_CS_SHARD, dt_cs_kpos(c, DT_CS_SHARD), "shard %d is not built for device "
                       "backends yet (the sharded update runs host loops); use shard: 0 or device: cpu", c->shard);
        if (c->hierarchical == 2 && r->device)
                dt_cs_err_at(d, c, DT_CS_HIER, dt_cs_kpos(c, DT_CS_HIER), "'hierarchical: true' is not built for device "
                       "backends (their all-reduce is NCCL's or staged as one message); use hierarchical: auto or device: cpu");
        if (r->no_onednn)
                dt_cs_err_at(d, c, DT_CS_CONV, dt_cs_kpos(c, DT_CS_CONV), "conv: onednn cannot run here: %s; use conv: auto "
                       "or im2col", r->no_onednn);
        return d->n > before ? -1 : 0;
}

/* Sparse sums delay most of each matrix's entries; while the learning rate still ramps up the
 * weights move fastest and what is delayed there is not won back (cnn, 4 ranks, 2 epochs of 20000
 * images, 200 of warm-up in the learning rate: 86.92% after 100 dense steps, 87.13% after 200,
 * against 87.28% uncompressed). powersgd meets its target after 100 and keeps its own default. */
int dt_cluster_cx_warmup(const dt_cluster_spec *c, const struct dt_model_spec *m)
{
        if (c->compression != DT_COMP_TOPK || (c->set & DT_CS_CX_WARMUP) || !m) return c->compression_warmup;
        long lr = m->train.sched.warmup_steps;
        return lr > c->compression_warmup && lr <= INT_MAX ? (int)lr : c->compression_warmup;
}
