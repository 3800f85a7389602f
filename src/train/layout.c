/* train/layout.c - what `dtrain check` and the run's banner say about the process grid: for each
 * pipeline stage its layers and tensor splits, and for each rank of one data replica (the others
 * hold the same) its parameters, memory and the floats it moves per step by kind. The figures are
 * computed from the rank graphs the run builds (parallel/layout.h), for every rank, on any one
 * rank. */
#include "train/setup.h"

#include <string.h>
#include "util/common.h"
#include "optim/optim.h"

/* Floats this rank's layers move per step for a slice of b samples, by kind: [0] tensor all-reduce,
 * [1] tensor all-gather (what arrives whole). Forward and backward together. */
static void tensor_traffic(const dt_graph *lg, long b, double out[2])
{
        for (int i = 0; i < lg->n; i++) {
                dt_tp_coll c[3];
                int n = dt_tp_layer_colls(&lg->layers[i], b, i > 0 || lg->input_grad, c);
                for (int k = 0; k < n; k++) out[c[k].gather] += c[k].floats * c[k].repeat;
        }
}

static void stage_line(const dt_setup *s, const dt_graph *sg, const dt_tp_plan *pl, int st, FILE *f)
{
        char split[512] = "";
        if (s->grid.L.grid[DT_AXIS_TENSOR] > 1) dt_tp_plan_str(pl, sg, split, sizeof split);
        /* a cut through a branched graph: every tensor that crosses into the stage */
        char recv[512] = "";
        if (sg->nx) {
                const dt_graph *full = dt_setup_model_graph(s);
                size_t k = 0;
                for (int j = 0; j <= sg->nx && k < sizeof recv; j++) {
                        int t = j < sg->nx ? sg->x_id[j] : sg->first;
                        k += (size_t)snprintf(recv + k, sizeof recv - k, "%s%s", j ? ", " : "; receives ",
                                              t ? full->layers[t - 1].name : "input");
                }
        }
        if (sg->nchunks > 1) {  /* virtual stages: each chunk's layers, in model order */
                fprintf(f, "  stage %d: ", st);
                for (int c = 0; c < sg->nchunks; c++) {
                        const dt_graph_chunk *ch = &sg->chunk[c];
                        fprintf(f, "%s%s", c ? " + " : "", sg->layers[ch->lo].name);
                        if (ch->hi - ch->lo > 1) fprintf(f, " .. %s", sg->layers[ch->hi - 1].name);
                }
                fprintf(f, " (%d layer%s in %d chunks)%s%s%s\n", sg->n, sg->n == 1 ? "" : "s", sg->nchunks, recv,
                        split[0] ? "; tensor splits: " : "", split);
                return;
        }
        fprintf(f, "  stage %d: %s .. %s (%d layer%s)%s%s%s\n", st, sg->layers[0].name, sg->layers[sg->n - 1].name,
                sg->n, sg->n == 1 ? "" : "s", recv, split[0] ? "; tensor splits: " : "", split);
}

void dt_setup_print_plan(const dt_setup *s, FILE *f)
{
        const dt_train_spec *tr = &s->spec.train;
        const dt_layout *L = &s->grid.L;
        int D = L->grid[0], P = L->grid[1], T = L->grid[2], nm = dt_optim_nmoments(&tr->opt);
        int batch = DT_MAX(tr->batch, tr->eval_batch), m = dt_setup_micro_batches(s);
        const dt_graph *full = dt_setup_model_graph(s);
        fprintf(f, "parallel: %d rank%s, strategy %s, grid data %d x pipeline %d x tensor %d", s->size,
                s->size == 1 ? "" : "s", dt_part_names[s->cs.strategy], D, P, T);
        if (P == 1 && T == 1) {
                fprintf(f, ", sync %s\n", dt_sync_names[s->cs.sync]);
                return;
        }
        long slice = (tr->batch + D - 1) / D;
        if (P > 1)
                fprintf(f, ", schedule %s, %d micro-batches of about %ld samples per step\n",
                        dt_pipe_names[L->sched], m, (slice + m - 1) / m);
        else
                fprintf(f, ", sync %s\n", dt_sync_names[s->cs.sync]);
        if (D > 1) fprintf(f, "per rank of replica 0 (replicas 1..%d hold the same); floats moved per step:\n", D - 1);
        else fprintf(f, "per rank; floats moved per step:\n");
        fprintf(f, "%-5s %-5s %-5s %12s %15s %11s %14s %14s %9s\n", "rank", "stage", "shard", "params",
                "param+mom MiB", "memory MiB", "tp-reduce MiB", "tp-gather MiB", "p2p MiB");
        const double MiB = 4.0 / 1048576.0;
        for (int st = 0; st < P; st++) {
                dt_graph sg;
                dt_layout_stage_graph(L, full, st, &sg);
                int slots = P > 1 ? dt_pipe_graph_slots(&sg, L->sched, P, st, m) : 1;
                dt_tp_plan pl;
                dt_layout_tp_plan(L, &sg, &pl);
                stage_line(s, &sg, &pl, st, f);
                for (int r = 0; r < T; r++) {
                        dt_graph lg;
                        dt_tp tp = { .size = T, .rank = r };    /* shapes only: no collective runs */
                        if (T > 1) dt_layout_shard_graph(L, &sg, &tp, &lg);
                        const dt_graph *g = T > 1 ? &lg : &sg;
                        /* a pipeline's slots hold a micro-batch each (train/memory.c's act batch) */
                        size_t mem = dt_graph_memory_slots(g, P > 1 ? dt_layout_act_batch(L, tr->batch, slice) : batch,
                                                           nm, slots);
                        double tt[2] = { 0, 0 }, p2p = 0;
                        tensor_traffic(g, slice, tt);
                        /* activations forward and their gradients back across each cut: every tensor
                         * that crosses it (a branched graph's shortcuts beside act[0]) */
                        if (st > 0) {
                                p2p += 2.0 * slice * dt_shape_size(&sg.input);
                                for (int k = 0; k < sg.nx; k++) p2p += 2.0 * slice * dt_shape_size(&sg.x_shape[k]);
                        }
                        for (int k = 0; st < P - 1 && k < sg.nout; k++)
                                p2p += 2.0 * slice * dt_shape_size(dt_graph_tensor_shape(&sg, sg.out_t[k]));
                        fprintf(f, "%-5d %-5d %-5d %12zu %15.2f %11.1f %14.3f %14.3f %9.3f\n",
                                dt_layout_rank(L->grid, (dt_grid_pos){ 0, st, r }), st, r,
                                g->nparams, g->nparams * (1.0 + nm) * MiB, mem / 1048576.0, tt[0] * MiB,
                                tt[1] * MiB, p2p * MiB);
                        if (T > 1) dt_graph_free(&lg);
                }
                dt_tp_plan_free(&pl);
                dt_graph_free(&sg);
        }
        if (D > 1) fprintf(f, "data parallel: each rank's gradient (its params above) all-reduced over %d replicas "
                           "per step\n", D);
}
