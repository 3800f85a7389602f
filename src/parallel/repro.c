/* parallel/repro.c - the reproducible gradient sum: chunk gradients added over a fixed binary tree
 * on chunk indices, so 1, 2, 4 ... ranks produce bitwise the same sum. A rank owns chunks
 * [C r / P, C (r+1) / P); it computes the sums of the maximal tree nodes inside its range (the
 * same recursion one rank would run), all-gathers them, and every rank finishes the tree. */
#include "parallel/dp.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

typedef dt_repro_node node;

typedef struct tree {
        dt_dp *dp;
        dt_grad_fn fn;
        void *ud;
        int B, chunks;
        double *stats;
        float *tmp;             /* one buffer per recursion depth, ntmp of them, after sums */
        int ntmp;
        /* gathered nodes */
        node *nodes;
        int nnodes;
        float *sums;            /* nnodes x nparams */
} tree;

static float *tmp_at(tree *t, int depth)
{
        DT_ASSERT(depth < t->ntmp);
        return t->tmp + (size_t)depth * t->dp->g->nparams;
}

static void add(float *a, const float *b, size_t n)
{
        for (size_t i = 0; i < n; i++) a[i] += b[i];
}

/* out = sum over chunks [lo, hi), computed by this rank */
static void local_sum(tree *t, int lo, int hi, float *out, int depth)
{
        dt_graph *g = t->dp->g;
        if (hi - lo == 1) {
                memset(g->grads, 0, g->nparams * sizeof *g->grads);
                int per = t->B / t->chunks;
                t->fn(t->ud, lo * per, (lo + 1) * per, t->stats);
                memcpy(out, g->grads, g->nparams * sizeof *out);
                return;
        }
        int mid = lo + (hi - lo) / 2;
        local_sum(t, lo, mid, out, depth + 1);
        float *r = tmp_at(t, depth);
        local_sum(t, mid, hi, r, depth + 1);
        add(out, r, g->nparams);
}

/* maximal tree nodes inside [a, b) */
static void cover(int lo, int hi, int a, int b, node *out, int *n)
{
        if (hi <= a || lo >= b) return;
        if (a <= lo && hi <= b) {
                out[(*n)++] = (node){ lo, hi };
                return;
        }
        int mid = lo + (hi - lo) / 2;
        cover(lo, mid, a, b, out, n);
        cover(mid, hi, a, b, out, n);
}

int dt_repro_cover(int chunks, int size, int rank, dt_repro_node *out)
{
        int a = (int)((long)chunks * rank / size), b = (int)((long)chunks * (rank + 1) / size), k = 0;
        cover(0, chunks, a, b, out, &k);
        DT_ASSERT(k <= DT_REPRO_MAX_NODES);
        return k;
}

long dt_repro_nodes(int chunks, int size)
{
        node tmp[DT_REPRO_MAX_NODES];
        long n = 0;
        for (int r = 0; r < size; r++) n += dt_repro_cover(chunks, size, r, tmp);
        return n;
}

/* The partial sums local_sum takes below depth d over [lo, hi): one per depth it splits at */
static int local_depth(int lo, int hi, int d)
{
        if (hi - lo == 1) return 0;
        int mid = lo + (hi - lo) / 2;
        return DT_MAX(d + 1, DT_MAX(local_depth(lo, mid, d + 1), local_depth(mid, hi, d + 1)));
}

/* and finish's above the gathered nodes (a cover of [0, chunks)) */
static int finish_depth(const node *nd, int nn, int lo, int hi, int d)
{
        for (int k = 0; k < nn; k++)
                if (nd[k].lo == lo && nd[k].hi == hi) return 0;
        int mid = lo + (hi - lo) / 2;
        return DT_MAX(d + 1, DT_MAX(finish_depth(nd, nn, lo, mid, d + 1), finish_depth(nd, nn, mid, hi, d + 1)));
}

int dt_repro_buffers(int chunks, int size, int rank)
{
        if (chunks < 1 || size < 1) return 0;
        node *all = dt_malloc((size_t)size * DT_REPRO_MAX_NODES * sizeof *all);
        int n = 0, most = 0;
        for (int r = 0; r < size; r++) n += dt_repro_cover(chunks, size, r, all + n);
        for (int r = 0; r < size; r++) {
                node mine[DT_REPRO_MAX_NODES];
                int k = dt_repro_cover(chunks, size, r, mine), depth = finish_depth(all, n, 0, chunks, 0);
                for (int i = 0; i < k; i++) depth = DT_MAX(depth, local_depth(mine[i].lo, mine[i].hi, 0));
                if (rank < 0 || rank == r) most = DT_MAX(most, depth);
        }
        free(all);
        return n + most;
}

/* out = sum over [lo, hi) from the gathered node sums, finishing the tree above them */
static void finish(tree *t, int lo, int hi, float *out, int depth)
{
        size_t n = t->dp->g->nparams;
        for (int k = 0; k < t->nnodes; k++)
                if (t->nodes[k].lo == lo && t->nodes[k].hi == hi) {
                        memcpy(out, t->sums + (size_t)k * n, n * sizeof *out);
                        return;
                }
        DT_ASSERT(hi - lo > 1);
        int mid = lo + (hi - lo) / 2;
        finish(t, lo, mid, out, depth + 1);
        float *r = tmp_at(t, depth);
        finish(t, mid, hi, r, depth + 1);
        add(out, r, n);
}

void dt_repro_grads(dt_dp *dp, int B, int chunks, dt_grad_fn fn, void *ud, double stats[2])
{
        dt_comm *c = dp->comm;
        size_t n = dp->g->nparams;
        tree t = { .dp = dp, .fn = fn, .ud = ud, .B = B, .chunks = chunks, .stats = stats };
        DT_ASSERT(B % chunks == 0 && chunks >= c->size);
        /* every rank's nodes, in rank order (a pure function of rank, size and chunks); that they
         * fit one MPI message is dt_cluster_spec_validate_run's to check */
        t.nodes = dt_malloc((size_t)c->size * DT_REPRO_MAX_NODES * sizeof *t.nodes);
        int *cnt = dt_malloc((size_t)c->size * sizeof *cnt), *displ = dt_malloc((size_t)c->size * sizeof *displ);
        int mine = 0, myfirst = 0;
        DT_ASSERT((double)dt_repro_nodes(chunks, c->size) * (double)n <= (double)INT_MAX);   /* an MPI count */
        for (int r = 0; r < c->size; r++) {
                int k = dt_repro_cover(chunks, c->size, r, t.nodes + t.nnodes);
                if (r == c->rank) { mine = k; myfirst = t.nnodes; }
                cnt[r] = (int)((size_t)k * n);
                displ[r] = (int)((size_t)t.nnodes * n);
                t.nnodes += k;
        }
        /* the sums and the partial sums in one buffer kept from step to step: allocated and freed
         * every step, these gradient-sized blocks (five of mlp-even's 24 MiB on 2 ranks) landed
         * wherever the heap's holes were that step, and in 1 of 4 runs it grew by one or two of
         * them after a few steps (rank 0 peaked 232-280 MiB against 208 and a plan of 215) */
        t.ntmp = dt_repro_buffers(chunks, c->size, c->rank) - t.nnodes;
        size_t need = (size_t)(t.nnodes + t.ntmp) * n;
        if (dp->repro_cap < need) {
                free(dp->repro);
                dp->repro = dt_falloc(need);
                dp->repro_cap = need;
        }
        t.sums = dp->repro;
        t.tmp = dp->repro + (size_t)t.nnodes * n;
        for (int k = 0; k < mine; k++) {
                node nd = t.nodes[myfirst + k];
                local_sum(&t, nd.lo, nd.hi, t.sums + (size_t)(myfirst + k) * n, 0);
        }
        if (c->size > 1) {
                MPI_Request r;
                MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.sums, cnt, displ, MPI_FLOAT, c->comm, &r);
                dt_comm_wait(c, 1, &r, "reproducible gradient gather");
                dt_comm_allreduce(c, stats, 2, MPI_DOUBLE, "loss reduction");
        }
        finish(&t, 0, chunks, dp->g->grads, 0);
        free(t.nodes);
        free(cnt);
        free(displ);
}
