/* parallel/hier.c - the two-level bucket all-reduce of parallel/hier.h: reduce on the node, all-reduce
 * between the nodes' leaders, broadcast on the node; each bucket a small state machine.
 *
 * MPI wants the collectives on one communicator issued in the same order by every member. The
 * reduces start in bucket order; a bucket enters the leaders' all-reduce or the broadcast only
 * after the bucket before it did, so each communicator sees the buckets in index order on every
 * rank, whichever of them completes first here. The reduce and the broadcast use two duplicates
 * of the node's communicator: a leader broadcasts bucket 0 while the others still reduce bucket 3. */
#include "parallel/hier.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/trace.h"

enum { IDLE, REDUCE, LEADERS, BCAST, DONE };

/* ---- the costs ---- */

/* One message of n bytes on link l, with the handshake past its eager limit (the receiver's answer
 * crosses back, then the rest). */
static double msg(const dt_hier_link *l, double n)
{
        return l->alpha + n * l->beta + (l->eager > 0 && n > l->eager ? 2.0 * l->alpha : 0);
}

/* A round of messages from axis rank v + d to v for the v that take part ('step' apart, below
 * 'to'): on shared memory when every pair is on one node, else on the network, a node's link
 * carrying all that leave it at once. */
static double round_cost(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, int d, int step,
                         int to, double n)
{
        int cross = 0, most = 0, node = -1, here = 0;
        for (int v = 0; v < to && v + d < D; v += step) {
                if (v / local == (v + d) / local) continue;
                cross = 1;
                here = v / local == node ? here + 1 : 1;
                node = v / local;
                most = here > most ? here : most;
        }
        return cross ? msg(inter, most * n) : msg(intra, n);
}

/* libnbc's in-place all-reduce (Open MPI 4.1, nbc_iallreduce.c: binomial for every size when the
 * buffer is MPI_IN_PLACE, as dp.c's buckets are): v + d sends to v for v a multiple of 2d, each
 * receiver adding, then the binomial broadcast back, v sending to v + d for v < d. Its network
 * rounds carry the whole buffer one way at a time: across 2 nodes, n out and then n back. */
static double binomial(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n)
{
        double t = 0;
        for (int d = 1; d < D; d *= 2)
                t += round_cost(intra, inter, local, D, d, 2 * d, D, n) + n * (d < local ? intra : inter)->gamma;
        for (int d = 1; d < D; d *= 2)
                t += round_cost(intra, inter, local, D, d, 1, d, n);
        return t;
}

void dt_hier_cost(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n, double *flat,
                  double *two)
{
        local = local < 1 ? 1 : local > D ? D : local;
        int nodes = (D + local - 1) / local;
        *flat = binomial(intra, inter, local, D, n);
        /* the node's binomial reduce, the leaders' all-reduce (libnbc's binomial among them: across
         * 2 nodes n one way, then n back), the node's binomial broadcast, one after the other */
        double red = 0, bc = 0;
        for (int d = 1; d < local; d *= 2) {
                red += msg(intra, n) + n * intra->gamma;
                bc += msg(intra, n);
        }
        *two = red + binomial(inter, inter, 1, nodes, n) + bc;
}

void dt_hier_links(const dt_cluster_spec *cs, dt_hier_link *intra, dt_hier_link *inter)
{
        dt_cluster_spec d;
        if (!cs) {
                dt_cluster_spec_init(&d);
                cs = &d;
        }
        const double copy = 1.0 / 8e9;
        *intra = (dt_hier_link){ .alpha = cs->intra_latency_us > 0 ? cs->intra_latency_us * 1e-6 : 4e-6,
                                 .beta = cs->intra_bandwidth_gbs > 0 ? 1.0 / (cs->intra_bandwidth_gbs * 1e9) : copy,
                                 .gamma = 2.4 * copy };
        *inter = (dt_hier_link){ .alpha = cs->latency_us * 1e-6, .beta = 1.0 / (cs->bandwidth_gbs * 1e9),
                                 .gamma = 2.4 * copy, .eager = cs->eager_kb * 1024.0 };
}

int dt_hier_choose(int mode, int nodes, int local, const dt_hier_link *intra, const dt_hier_link *inter, int D,
                   const double *bytes, int nb)
{
        if (mode == 2) return 1;
        if (mode == 1 || nodes < 2 || local < 2) return 0;
        double flat = 0, two = 0;
        for (int j = 0; j < nb; j++) {
                double f, t;
                dt_hier_cost(intra, inter, local, D, bytes[j], &f, &t);
                flat += f;
                two += t;
        }
        return two <= flat * (1 + 1e-9);
}

/* ---- the path ---- */

/* The node of this rank, as the lowest data-axis rank on it (or the test's fake split). */
static int node_color(const dt_comm *data)
{
        const char *e = getenv("DTRAIN_HIER_RANKS_PER_NODE");
        if (e && *e) {
                char *end;
                errno = 0;
                long k = strtol(e, &end, 10);
                if (errno || *end || k < 1 || k > 1 << 20)
                        dt_die(2, "DTRAIN_HIER_RANKS_PER_NODE=%s: expected a positive integer (ranks per node)", e);
                return data->rank / (int)k;
        }
        MPI_Comm node;
        MPI_Comm_split_type(data->comm, MPI_COMM_TYPE_SHARED, data->rank, MPI_INFO_NULL, &node);
        int c = data->rank;
        MPI_Allreduce(MPI_IN_PLACE, &c, 1, MPI_INT, MPI_MIN, node);
        MPI_Comm_free(&node);
        return c;
}

void dt_hier_init(dt_hier *h, dt_comm *data, int mode, const dt_cluster_spec *cs, const double *bytes, int nb)
{
        memset(h, 0, sizeof *h);
        h->nodes = h->most = 1;
        if (data->size == 1 || mode == 1) return;
        int color = node_color(data);
        dt_comm_split(data, color, data->rank, &h->node_red);
        int t[2] = { h->node_red.rank == 0, h->node_red.size };
        dt_comm_allreduce(data, &t[0], 1, MPI_INT, "node count");
        dt_comm_allreduce_op(data, &t[1], 1, MPI_INT, MPI_MAX, "node count");
        h->nodes = t[0];
        h->most = t[1];
        dt_hier_link intra, inter;
        dt_hier_links(cs, &intra, &inter);
        h->on = dt_hier_choose(mode, h->nodes, h->most, &intra, &inter, data->size, bytes, nb);
        if (!h->on) {
                dt_comm_free(&h->node_red);
                return;
        }
        if (data->rank == 0)
                dt_note("gradient allreduce: two-level, %d node%s (up to %d ranks each): node reduce, leaders' "
                        "allreduce, node broadcast", h->nodes, h->nodes == 1 ? "" : "s", h->most);
        dt_comm_split(data, color, data->rank, &h->node_bc);
        dt_comm_split(data, h->node_red.rank, data->rank, &h->leaders);
        h->nb = nb;
        h->phase = dt_calloc((size_t)nb, sizeof *h->phase);
        h->req = dt_malloc((size_t)nb * sizeof *h->req);
        for (int j = 0; j < nb; j++) h->req[j] = MPI_REQUEST_NULL;
        h->buf = dt_calloc((size_t)nb, sizeof *h->buf);
        h->len = dt_calloc((size_t)nb, sizeof *h->len);
}

void dt_hier_free(dt_hier *h)
{
        if (h->on) {
                dt_comm_free(&h->leaders);
                dt_comm_free(&h->node_bc);
                dt_comm_free(&h->node_red);
        }
        free(h->phase);
        free(h->req);
        free(h->buf);
        free(h->len);
        memset(h, 0, sizeof *h);
}

static void issue(dt_hier *h, int j, int phase)
{
        float *x = h->buf[j];
        int n = h->len[j], lead = h->node_red.rank == 0;
        h->phase[j] = (unsigned char)phase;
        h->req[j] = MPI_REQUEST_NULL;
        if (phase == REDUCE) {
                MPI_Ireduce(lead ? MPI_IN_PLACE : x, lead ? x : NULL, n, MPI_FLOAT, MPI_SUM, 0, h->node_red.comm,
                            &h->req[j]);
                dt_trace_mark("comm", "node reduce issued (gradient bucket)");
        } else if (phase == LEADERS) {
                MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, h->leaders.comm, &h->req[j]);
                dt_trace_mark("comm", "leaders' allreduce issued (gradient bucket)");
        } else if (phase == BCAST) {
                MPI_Ibcast(x, n, MPI_FLOAT, 0, h->node_bc.comm, &h->req[j]);
        }
}

static dt_comm *comm_of(dt_hier *h, int phase)
{
        return phase == REDUCE ? &h->node_red : phase == LEADERS ? &h->leaders : &h->node_bc;
}

/* Moves bucket j on when its phase is complete (waiting for it when wait) and the bucket before
 * it has entered the next phase already. */
static void advance(dt_hier *h, int j, int wait)
{
        int ph = h->phase[j];
        if (ph == IDLE || ph == DONE) return;
        if (h->req[j] != MPI_REQUEST_NULL) {
                if (wait) {
                        dt_comm_wait(comm_of(h, ph), 1, &h->req[j], ph == REDUCE ? "gradient reduce on the node"
                                     : ph == LEADERS ? "gradient allreduce between nodes" : "gradient broadcast on the node");
                } else {
                        int done;
                        MPI_Test(&h->req[j], &done, MPI_STATUS_IGNORE);
                        if (!done) return;
                }
        }
        int next = ph + 1;
        if (next == LEADERS && (h->node_red.rank != 0 || h->nodes == 1)) next = BCAST;
        if (next == BCAST && h->node_bc.size == 1) next = DONE;
        if (next != DONE && j > 0 && h->phase[j - 1] < next) return;
        if (next == DONE) h->phase[j] = DONE;
        else issue(h, j, next);
}

void dt_hier_start(dt_hier *h, int j, float *x, int n)
{
        DT_ASSERT(h->on && j >= 0 && j < h->nb && h->phase[j] == IDLE);
        DT_ASSERT(j == 0 || h->phase[j - 1] != IDLE);
        h->buf[j] = x;
        h->len[j] = n;
        issue(h, j, REDUCE);
        dt_hier_progress(h);
}

void dt_hier_progress(dt_hier *h)
{
        for (int j = 0; j < h->nb && h->phase[j] != IDLE; j++) advance(h, j, 0);
}

void dt_hier_finish(dt_hier *h)
{
        /* in index order: the bucket before is always through, so advance never holds one back */
        for (int j = 0; j < h->nb && h->phase[j] != IDLE; j++)
                while (h->phase[j] != DONE) advance(h, j, 1);
        for (int j = 0; j < h->nb; j++) {
                h->phase[j] = IDLE;
                h->req[j] = MPI_REQUEST_NULL;
        }
}
