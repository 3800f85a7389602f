/* plan/cxmodel.c - the gradient compressors in the planner's step (plan.h): for one bucket summed
 * over the data axis, each method's collectives as parallel/dp.c and compress*.c issue them, the
 * bytes of this rank's messages (what dtrain bench reports as the bucket's bytes), and the encode
 * and decode time on the rank's core; and compression: auto's choice among them. */
#include "plan/plan.h"
#include "plan/planner.h"
#include "parallel/compress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "util/common.h"

/* Encode + decode, seconds per gradient entry on one core: CPU time over 4M entries, best of 5, on
 * the 2-vCPU AVX-512 Xeon these were measured on (shared, +-50%): bf16 1.4-3.3 ns, threshold
 * 4.7 ns (its branch-free encode; 11 with the branches); fp16's casts as bf16's; topk's selection
 * and scatter about twice threshold's; powersgd per entry of a factored matrix: the residual,
 * three rank-r products (6 r flops at ~20 GFLOP/s) and the decode's pass. */
#define NS 1e-9
#define ENC_BF16 (2.0 * NS)
#define ENC_THRESHOLD (5.0 * NS)
#define ENC_TOPK (10.0 * NS)
#define ENC_PSGD(r) ((2.0 + 0.3 * (r)) * NS)

static const dt_link *flat(const dt_data_sum *dl, int D)
{
        return dt_net_link(dl->m, D, dl->stride > 0 ? dl->stride : 1);
}

/* What leaves a node for one collective of n bytes (dt_net_node_bytes) */
static double node(const dt_data_sum *dl, int D, int kind, double n)
{
        return dt_net_node_bytes(dl->m, D, dl->stride > 0 ? dl->stride : 1, kind, n);
}

/* An all-gather of n bytes in all, or an all-to-all of n bytes from each rank: its messages' time,
 * or the node link's where a node's ranks all cross at once and load it more (dt_net_node_bytes:
 * on 2 nodes of 2, 4/3 of a rank's bytes; bf16 then sends what the two-level fp32 sum does, and
 * measured no faster on the wide MLP). */
static double gather(const dt_data_sum *dl, int D, int kind, double n)
{
        const dt_link *l = flat(dl, D);
        double t = dt_net_allgather(l, D, n), busy = (D - 1) * l->alpha + node(dl, D, kind, n) * l->beta;
        return t > busy ? t : busy;
}

double dt_plan_cx_sum(const dt_data_sum *dl, int D, const dt_cluster_spec *cs, int method, const dt_cx_bucket *b,
                      double *wire, double *link)
{
        double n = b->floats, t = 0, lk = 0;
        *wire = 0;
        if (link) *link = 0;
        if (D <= 1 || n <= 0) return 0;
        if (method == DT_COMP_THRESHOLD && cs->threshold == 0) method = DT_COMP_NONE;  /* tau 0: the fp32 sum */
        switch (method) {
        case DT_COMP_FP16:      /* the all-reduce of halves, summed by a user operation */
                *wire = 2 * n;
                lk = node(dl, D, DT_NET_RING, 2 * n);
                t = dt_net_allreduce(flat(dl, D), D, 2 * n) + n * ENC_BF16;
                break;
        case DT_COMP_BF16:      /* all-to-all of the bf16 copy, the fp32 sum, all-gather of the sums */
                *wire = 2 * n;
                lk = node(dl, D, DT_NET_ALLTOALL, 2 * n) + node(dl, D, DT_NET_GATHER, 2 * n);
                t = gather(dl, D, DT_NET_ALLTOALL, 2 * n) + gather(dl, D, DT_NET_GATHER, 2 * n) + n * ENC_BF16;
                break;
        case DT_COMP_TOPK: {    /* (index, value) pairs of every rank, all-gathered */
                double k = b->tk;
                *wire = 8 * k;
                lk = node(dl, D, DT_NET_GATHER, 8 * k * D);
                t = gather(dl, D, DT_NET_GATHER, 8 * k * D) + n * ENC_TOPK;
                break;
        }
        case DT_COMP_THRESHOLD: {
                /* tau holds the density inside its range: its geometric middle is the guess */
                double dens = sqrt(cs->threshold_min_density * cs->threshold_max_density), units = dens * n * D;
                t = gather(dl, D, DT_NET_GATHER, 8.0 * D) + n * ENC_THRESHOLD;  /* the unit counts */
                *wire = 8;
                lk = node(dl, D, DT_NET_GATHER, 8.0 * D);
                if (4 * units > 2 * n) {        /* the int8 (beyond 127 ranks int16) all-reduce */
                        double e = D <= 127 ? 1 : 2;
                        *wire += e * n;
                        lk += node(dl, D, DT_NET_RING, e * n);
                        t += dt_net_allreduce(flat(dl, D), D, e * n);
                        break;
                }
                *wire += 4 * dens * n;
                lk += node(dl, D, DT_NET_GATHER, 4 * units);
                t += gather(dl, D, DT_NET_GATHER, 4 * units);
                break;
        }
        case DT_COMP_POWERSGD:  /* P all-reduced, then Q with the dense rest */
                *wire = 4 * (b->p + b->qd);
                lk = node(dl, D, DT_NET_RING, 4 * b->p) + node(dl, D, DT_NET_RING, 4 * b->qd);
                t = b->p > 0 ? dt_net_allreduce(flat(dl, D), D, 4 * b->p) : 0;
                t = t + dt_net_allreduce(flat(dl, D), D, 4 * b->qd) + b->mat * ENC_PSGD(cs->powersgd_rank);
                break;
        default: {
                double f, two;
                int hier = 0;
                *wire = 4 * n;
                t = dt_net_allreduce_data2(dl, D, 4 * n, &f, &two, &hier);
                lk = node(dl, D, hier ? DT_NET_TWO_LEVEL : DT_NET_RING, 4 * n);
                break;
        }
        }
        if (link) *link = lk;
        return t;
}

void dt_plan_cx_layer(const dt_layer *l, const dt_cluster_spec *cs, dt_cx_bucket *b)
{
        int r = cs->powersgd_rank;
        memset(b, 0, sizeof *b);
        for (int k = 0; k < l->np; k++) {
                if (!l->ps[k].trainable) continue;
                size_t n = l->len[k], rows, cols;
                b->floats += (double)n;
                b->tk += (double)dt_topk_keep(&l->ps[k], n, cs->topk_ratio);
                if (dt_powersgd_factors(&l->ps[k], n, r, &rows, &cols)) {
                        b->p += (double)(rows * (size_t)r);
                        b->qd += (double)(cols * (size_t)r);
                        b->mat += (double)n;
                } else {
                        b->qd += (double)n;
                }
        }
}

void dt_plan_cx_add(dt_cx_bucket *a, const dt_cx_bucket *b)
{
        a->floats += b->floats;
        a->p += b->p;
        a->qd += b->qd;
        a->mat += b->mat;
        a->tk += b->tk;
}

const char *dt_plan_cx_plain(const dt_cluster_spec *cs, int D, int device)
{
        if (D <= 1) return "one data-parallel rank has no gradient sum to compress";
        if (device) return "the device backend sums gradients uncompressed";
        if (cs->sync != DT_SYNC_ALLREDUCE) return "only sync: allreduce compresses";
        if (cs->reproducible) return "reproducible: true sums uncompressed chunks";
        if (cs->shard >= 2) return "shard 2 and 3 reduce-scatter uncompressed";
        if (cs->hierarchical == 2) return "hierarchical: true sums uncompressed";
        return NULL;
}

/* The methods auto picks from, least change to the gradient first: those that ended within 0.3
 * points of uncompressed at their defaults on mlp, lenet and cnn (4 ranks; bench/compression.sh).
 * powersgd at rank 4 lost 0.6 on mlp and topk at 1% 2.1 (at 20% it sends nearly the fp32 sum's
 * bytes on 4 ranks); fp16 may overflow. */
static const dt_comp_kind auto_methods[] = { DT_COMP_NONE, DT_COMP_BF16, DT_COMP_THRESHOLD };
#define NAUTO ((int)(sizeof auto_methods / sizeof *auto_methods))

int dt_plan_compression(dt_planner *p, const dt_machine *m, const dt_layout *L, char *why, size_t n)
{
        const char *plain = dt_plan_cx_plain(&p->cs, L->grid[DT_AXIS_DATA], 0);
        if (plain) {
                snprintf(why, n, "none: %s", plain);
                return DT_COMP_NONE;
        }
        int D = L->grid[DT_AXIS_DATA];
        const dt_link *l = dt_net_link(m, D, dt_layout_stride(L->grid, DT_AXIS_DATA));
        if (l != &m->inter) {   /* dtrain bench, 2 ranks, mlp: MPI_Allreduce 0.19 ms, bf16's sum 0.44 */
                snprintf(why, n, "none: the %d ranks sum over one node's shared memory, where encoding costs "
                         "more than the bytes it saves", D);
                return DT_COMP_NONE;
        }
        dt_prediction pr[NAUTO];
        dt_comp_kind keep = p->cs.compression;
        int fast = 0, pick = 0;
        for (int k = 0; k < NAUTO; k++) {
                p->cs.compression = auto_methods[k];
                if (dt_plan_predict(p, m, L, &pr[k]) < 0) pr[k].step = INFINITY;
                if (pr[k].step < pr[fast].step) fast = k;
        }
        p->cs.compression = keep;
        /* the least change whose step ties the fastest: compression must be worth it */
        while (pick < fast && !dt_plan_tie(&pr[pick], &pr[fast])) pick++;
        char link[64];
        snprintf(link, sizeof link, "the network (%.3g Gbit/s)", 8e-9 / l->beta);
        const dt_prediction *a = &pr[pick], *z = &pr[0];
        if (pick == 0)
                snprintf(why, n, "none: the %d ranks sum over %s and compressing saves too little "
                         "(%.2f ms a step uncompressed, %.2f with %s)", D, link, 1e3 * z->step,
                         1e3 * pr[fast ? fast : 1].step, dt_comp_names[auto_methods[fast ? fast : 1]]);
        else
                snprintf(why, n, "%s: the %d ranks sum over %s; it sends %.3g MB a step instead of %.3g: "
                         "%.2f ms a step predicted against %.2f uncompressed", dt_comp_names[auto_methods[pick]], D,
                         link, a->bytes_dp / 1e6, z->bytes_dp / 1e6, 1e3 * a->step, 1e3 * z->step);
        return auto_methods[pick];
}
