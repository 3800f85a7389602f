/* parallel/layout.c - the layout, plain and placed on the world (see layout.h). */
#include "parallel/layout.h"

#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "util/common.h"
#include "data/data.h"

/* ---- the rank formula ---- */

int dt_layout_rank(const int grid[3], dt_grid_pos p)
{
        return (p.replica * grid[DT_AXIS_PIPE] + p.stage) * grid[DT_AXIS_TENSOR] + p.shard;
}

dt_grid_pos dt_layout_pos(const int grid[3], int rank)
{
        int P = grid[DT_AXIS_PIPE], T = grid[DT_AXIS_TENSOR];
        return (dt_grid_pos){ .replica = rank / (T * P), .stage = rank / T % P, .shard = rank % T };
}

int dt_layout_stride(const int grid[3], int axis)
{
        dt_grid_pos a = { 0, 0, 0 }, b = a;
        if (axis == DT_AXIS_DATA) b.replica = 1;
        else if (axis == DT_AXIS_PIPE) b.stage = 1;
        else b.shard = 1;
        return dt_layout_rank(grid, b) - dt_layout_rank(grid, a);
}

/* ---- the plain layout from a cluster spec ---- */

int dt_layout_cut(dt_layout *L, const dt_cluster_spec *cs, const dt_graph *g, dt_diag *d)
{
        dt_stage_plan sp;
        if (dt_stage_plan_make(cs, g, dt_layout_pieces(L), &sp, d) < 0) return -1;
        memcpy(L->first, sp.first, sizeof L->first);
        return 0;
}

int dt_layout_splits(dt_layout *L, const dt_cluster_spec *cs, const dt_graph *g, dt_diag *d)
{
        int T = L->grid[DT_AXIS_TENSOR], before = d->n;
        memset(L->split, 0, sizeof L->split);
        memset(L->gather, 0, sizeof L->gather);
        if (T <= 1) return 0;
        if (g->n > DT_LAYOUT_MAX_LAYERS) {
                dt_pos at = dt_cluster_spec_pos_of(cs, DT_CS_GTENSOR);
                dt_diag_add(d, dt_cluster_spec_file_of(cs, DT_CS_GTENSOR), at.line, at.col, "tensor %d splits the "
                            "layers of a model of at most %d layers, this one has %d; use tensor: 1 (pipeline "
                            "stages and data parallelism take any model)", T, DT_LAYOUT_MAX_LAYERS, g->n);
                return -1;
        }
        for (int s = 0; s < dt_layout_pieces(L); s++) {
                dt_graph sg;
                dt_tp_plan pl;
                dt_graph_range(g, L->first[s], L->first[s + 1], &sg);
                dt_tp_plan_make(cs, &sg, T, &pl, d);
                for (int i = 0; i < sg.n; i++) {
                        L->split[sg.layers[i].index] = (signed char)pl.pl[i].split;
                        L->gather[sg.layers[i].index] = (signed char)pl.pl[i].gather;
                }
                dt_tp_plan_free(&pl);
                dt_graph_free(&sg);
        }
        return d->n > before ? -1 : 0;
}

int dt_layout_from_spec(const dt_cluster_spec *cs, const dt_graph *g, int size, dt_layout *L, dt_diag *d)
{
        memset(L, 0, sizeof *L);
        if (dt_cluster_grid(cs, size, g->n, L->grid, d) < 0) return -1;
        int P = L->grid[DT_AXIS_PIPE];
        L->micro = P == 1 ? 1 : cs->micro_batches > 0 ? cs->micro_batches : 2 * P;
        L->sched = (dt_schedule_kind)cs->schedule;
        L->chunks = P > 1 ? dt_cluster_virtual_stages(cs) : 1;
        /* every stage's splits are checked on every rank, so all ranks stop together and rank 0
         * reports them */
        if (dt_layout_cut(L, cs, g, d) < 0) return -1;
        return dt_layout_splits(L, cs, g, d);
}

int dt_layout_micro(const dt_layout *L, int batch)
{
        if (L->grid[DT_AXIS_PIPE] == 1) return 1;      /* no stages: the whole slice at once */
        int slice = batch / L->grid[DT_AXIS_DATA];      /* the smallest replica slice */
        return L->micro < slice ? L->micro : slice > 0 ? slice : 1;
}

int dt_layout_act_batch(const dt_layout *L, int batch, int slice)
{
        int m = dt_layout_micro(L, batch);
        /* micro-batch j is [S j / m, S (j + 1) / m): none longer than ceil(S / m) */
        return slice > 0 ? (slice + m - 1) / m : 1;
}

int dt_layout_chunks(const dt_layout *L)
{
        return L->chunks > 1 ? L->chunks : 1;
}

int dt_layout_pieces(const dt_layout *L)
{
        return L->grid[DT_AXIS_PIPE] * dt_layout_chunks(L);
}

/* ---- rank graphs ---- */

void dt_layout_stage_graph(const dt_layout *L, const dt_graph *full, int s, dt_graph *sg)
{
        int P = L->grid[DT_AXIS_PIPE], V = dt_layout_chunks(L);
        if (V == 1) {
                dt_graph_range(full, L->first[s], L->first[s + 1], sg);
        } else {
                int first[DT_SCHEDULE_MAX_CHUNKS], last[DT_SCHEDULE_MAX_CHUNKS];
                for (int c = 0; c < V; c++) {
                        int vs = dt_schedule_vstage(L->sched, P, V, s, c);
                        first[c] = L->first[vs];
                        last[c] = L->first[vs + 1];
                }
                dt_graph_chunks(full, V, first, last, sg);
        }
        dt_pipe_stage_graph(sg, L->sched, P, V, s);
}

void dt_layout_tp_plan(const dt_layout *L, const dt_graph *sg, dt_tp_plan *pl)
{
        int T = L->grid[DT_AXIS_TENSOR];
        pl->n = sg->n;
        pl->t = T;
        pl->pl = dt_calloc((size_t)(sg->n ? sg->n : 1), sizeof *pl->pl);
        for (int i = 0; i < sg->n && T > 1; i++) {
                pl->pl[i].split = (dt_split)L->split[sg->layers[i].index];
                pl->pl[i].gather = L->gather[sg->layers[i].index];
        }
}

void dt_layout_shard_graph(const dt_layout *L, const dt_graph *sg, const dt_tp *tp, dt_graph *lg)
{
        dt_tp_plan pl;
        dt_layout_tp_plan(L, sg, &pl);
        dt_tp_graph(sg, &pl, tp, lg);
        dt_tp_plan_free(&pl);
}

/* ---- the layout placed on the world ---- */

void dt_grid_make(dt_grid *gr, const dt_layout *L, dt_comm *world, dt_graph *g, int batch)
{
        int P = L->grid[DT_AXIS_PIPE], T = L->grid[DT_AXIS_TENSOR];
        memset(gr, 0, sizeof *gr);
        gr->L = *L;
        gr->rank = world->rank;
        gr->at = dt_layout_pos(L->grid, gr->rank);
        gr->data = world;
        gr->nslots = 1;
        if (P == 1 && T == 1) return;   /* every rank holds the whole model */
        dt_grid_pos at = gr->at;
        gr->plan.nstages = P;
        gr->plan.nchunks = dt_layout_chunks(L);
        gr->plan.kind = L->sched;
        memcpy(gr->plan.first, L->first, sizeof gr->plan.first);
        /* the axes: the ranks of one pipeline (same replica and shard), of one stage's replicas (same
         * stage and shard), of one tensor group (consecutive ranks) */
        dt_comm_split(world, dt_grid_pipeline(gr), at.stage, &gr->pipe_axis);
        dt_comm_split(world, at.stage * T + at.shard, at.replica, &gr->data_axis);
        gr->data = &gr->data_axis;
        gr->parts = 1;
        gr->full = *g;
        dt_layout_stage_graph(L, &gr->full, at.stage, g);
        if (P > 1) gr->nslots = dt_pipe_graph_slots(g, L->sched, P, at.stage, dt_layout_micro(L, batch));
        /* a chain's messages on the host go without copies (a device run's staging buffers are host
         * memory, beside what its plan limits) */
        if (P > 1) gr->msg_bufs = dt_pipe_message_bufs(L->sched, P, dt_layout_chunks(L), at.stage, dt_layout_micro(L, batch),
                                                       dt_pipe_one_tensor(g));
        if (T > 1) {
                gr->sg = *g;
                memset(g, 0, sizeof *g);
                dt_comm_split(world, gr->rank / T, at.shard, &gr->tp_axis);
                dt_tp_init(&gr->tp, &gr->tp_axis);
                dt_layout_shard_graph(L, &gr->sg, &gr->tp, g);
        }
}

void dt_grid_free(dt_grid *gr)
{
        if (gr->L.grid[DT_AXIS_TENSOR] > 1 && gr->parts) dt_graph_free(&gr->sg);
        if (gr->parts) dt_graph_free(&gr->full);
        dt_tp_free(&gr->tp);
        dt_comm_free(&gr->tp_axis);
        dt_comm_free(&gr->pipe_axis);
        dt_comm_free(&gr->data_axis);
        gr->parts = 0;
}

int dt_grid_parts(const dt_grid *gr)
{
        return gr->parts;
}

const dt_graph *dt_grid_model(const dt_grid *gr, const dt_graph *g)
{
        return gr->parts ? &gr->full : g;
}

const dt_graph *dt_grid_stage(const dt_grid *gr, const dt_graph *g)
{
        return gr->L.grid[DT_AXIS_TENSOR] > 1 ? &gr->sg : g;
}

void dt_grid_init_params(const dt_grid *gr, dt_graph *g, uint64_t seed)
{
        if (gr->L.grid[DT_AXIS_TENSOR] > 1) dt_tp_init_params(&gr->sg, g, seed);
        else dt_graph_init_params(g, seed);
}

void dt_grid_init_layer(const dt_grid *gr, dt_graph *g, int i, uint64_t seed)
{
        if (gr->L.grid[DT_AXIS_TENSOR] > 1) dt_tp_init_layer(&gr->sg, g, i, seed);
        else dt_graph_init_layer(g, i, seed);
}

int dt_grid_pipeline(const dt_grid *gr)
{
        return gr->at.replica * gr->L.grid[DT_AXIS_TENSOR] + gr->at.shard;
}

int dt_grid_pipelined(const dt_grid *gr)
{
        return gr->L.grid[DT_AXIS_PIPE] > 1;
}

int dt_grid_replicas(const dt_grid *gr)
{
        return gr->data->size > 1 ? gr->data->size : 1;
}

void dt_grid_slice(const dt_grid *gr, int B, int *lo, int *hi)
{
        int size = dt_grid_replicas(gr), rank = size > 1 ? gr->data->rank : 0;
        *lo = (int)((long)B * rank / size);
        *hi = (int)((long)B * (rank + 1) / size);
}

int dt_grid_feeds(const dt_grid *gr)
{
        return gr->at.stage == 0;
}

int dt_grid_scores(const dt_grid *gr)
{
        int P = gr->L.grid[DT_AXIS_PIPE], V = dt_layout_chunks(&gr->L), st, c;
        dt_schedule_place(gr->L.sched, P, V, P * V - 1, &st, &c);     /* zb-v: stage 0 */
        return gr->at.stage == st;
}

int dt_grid_counts(const dt_grid *gr)
{
        return gr->at.shard == 0;
}

int dt_grid_load_parts(const dt_grid *gr)
{
        return (dt_grid_feeds(gr) ? DT_LOAD_INPUTS : 0) | (dt_grid_scores(gr) ? DT_LOAD_LABELS : 0);
}

/* ---- the grid operations ---- */

double dt_grid_sumsq(dt_grid *gr, const dt_graph *g, const float *grads)
{
        if (gr->L.grid[DT_AXIS_TENSOR] == 1) return g->be->ops->sumsq(g->be, grads, g->nparams);
        double ss = dt_tp_sumsq(&gr->sg, g, grads);     /* shards once each, replicated tensors on member 0 */
        dt_comm_allreduce(&gr->tp_axis, &ss, 1, MPI_DOUBLE, "gradient norm");
        return ss;
}

void dt_grid_sum_stages(dt_grid *gr, double *x, const char *what)
{
        if (dt_grid_pipelined(gr)) dt_comm_allreduce(&gr->pipe_axis, x, 1, MPI_DOUBLE, what);
}

void dt_grid_sum_stages_start(dt_grid *gr, double *x, MPI_Request *r)
{
        *r = MPI_REQUEST_NULL;
        if (dt_grid_pipelined(gr)) dt_comm_iallreduce(&gr->pipe_axis, x, 1, MPI_DOUBLE, r);
}

void dt_grid_sum_stages_wait(dt_grid *gr, MPI_Request *r, const char *what)
{
        if (*r != MPI_REQUEST_NULL) dt_comm_wait(&gr->pipe_axis, 1, r, what);
}

static void sizes(const dt_graph *g, size_t n[4])
{
        n[0] = n[2] = n[3] = g->nparams;
        n[1] = g->nbuffers;
}

int dt_grid_gather(dt_grid *gr, const dt_graph *g, int K, float *const mine[4], float *const all[4])
{
        int T = gr->L.grid[DT_AXIS_TENSOR], root = gr->rank == 0;
        size_t n[4];
        if (gr->data->rank != 0) return 0;      /* replica 0 speaks for all */
        if (!gr->parts || (T > 1 && !dt_grid_pipelined(gr))) {
                if (T > 1)      /* one stage: the group's whole is the model's */
                        for (int k = 0; k < K; k++)
                                dt_tp_gather(&gr->tp_axis, &gr->sg, g, k != 1, mine[k], root ? all[k] : NULL);
                sizes(g, n);
                for (int k = 0; k < K && T == 1 && root; k++)
                        if (n[k]) memcpy(all[k], mine[k], n[k] * sizeof(float));
                return root;
        }
        float *part[4] = { mine[0], mine[1], K > 2 ? mine[2] : NULL, K > 3 ? mine[3] : NULL }, *stage[4] = { 0 };
        if (T > 1) {    /* the stage put together on the group's member 0, which sends it on */
                sizes(&gr->sg, n);
                for (int k = 0; k < K; k++) {
                        if (gr->at.shard == 0) stage[k] = dt_falloc(n[k] ? n[k] : 1);
                        dt_tp_gather(&gr->tp_axis, &gr->sg, g, k != 1, mine[k], stage[k]);
                }
                if (gr->at.shard != 0) return 0;
                memcpy(part, stage, sizeof part);
        }
        dt_pipe_gather(&gr->pipe_axis, &gr->plan, &gr->full, K - 2, part, all);
        for (int k = 0; k < 4; k++) free(stage[k]);
        return root;
}

/* The stage sg's whole slice k of the model's whole buffer all (k 1: buffers, else parameters):
 * its chunks' slices one after another, as dt_graph_chunks lays them out. */
static void stage_from_whole(const dt_graph *sg, int k, const float *all, float *out)
{
        for (int c = 0; c < sg->nchunks; c++) {
                const dt_graph_chunk *ch = &sg->chunk[c];
                size_t base = k == 1 ? ch->buffer_base : ch->param_base, at = k == 1 ? ch->buffer_at : ch->param_at;
                size_t n = k == 1 ? ch->nbuffers : ch->nparams;
                if (n) memcpy(out + at, all + base, n * sizeof(float));
        }
}

void dt_grid_take(const dt_grid *gr, const dt_graph *g, int K, float *const all[4], float *const mine[4])
{
        const dt_graph *sg = dt_grid_stage(gr, g);
        size_t base[4] = { sg->param_base, sg->buffer_base, sg->param_base, sg->param_base }, n[4];
        sizes(sg, n);
        for (int k = 0; k < K; k++) {
                if (!n[k]) continue;
                const float *whole = all[k] + base[k];
                float *tmp = NULL;
                if (sg->nchunks > 1) {  /* the chunks' slices are apart in the model */
                        whole = tmp = gr->L.grid[DT_AXIS_TENSOR] > 1 ? dt_falloc(n[k]) : mine[k];
                        stage_from_whole(sg, k, all[k], tmp);
                        if (tmp == mine[k]) continue;
                }
                if (gr->L.grid[DT_AXIS_TENSOR] > 1) dt_tp_take(sg, g, k != 1, whole, mine[k]);
                else memcpy(mine[k], whole, n[k] * sizeof(float));
                free(tmp);
        }
}
