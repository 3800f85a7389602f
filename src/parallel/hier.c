/* parallel/hier.c - the two-level bucket all-reduce of parallel/hier.h: reduce-scatter on the node,
 * all-reduce of each segment between its owners on the nodes, all-gather on the node; each bucket in
 * chunks (dt_hier_chunks), each chunk a small state machine of point-to-point messages that moves on
 * as soon as its step ends, so that a chunk's node steps run while the others cross.
 *
 * Segment s (of S = the fewest ranks on a node) of a bucket is owned by node rank s on every node.
 * Scatter: every rank sends segment s to its owner, which adds the node's parts in node rank order
 * (c0 + c1 + ..., whichever rank it is). Cross: the owners of s on the nodes sum it (2 nodes: they
 * swap it and both add, a + b == b + a bit for bit; more: libnbc's all-reduce on their
 * communicator). Gather: each owner sends its sum to the node's other ranks. So every byte crosses
 * the network once each way, all owners of a node cross at once, and the sums take the same bits
 * on every rank.
 *
 * Messages are matched by (bucket, phase) tags on the node's and the owners' own communicators;
 * a step's message cannot meet the step before's, whose receive completed before its sender could
 * finish that step. The owners' all-reduce (more than 2 nodes) is a collective: a bucket enters it
 * only after the bucket before it did, so every owner issues them in index order.
 *
 * The node step was MPI_Ireduce and MPI_Ibcast before: Open MPI 4.1's libnbc reduces 2 to 4 ranks
 * as a chain of 8 KiB fragments, one schedule round each, and a bucket piece of 8 MiB took 0.6-4 s
 * on 2 ranks of this 2-core machine, 4 ranks past any deadline. */
#include "parallel/hier.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/trace.h"

enum { IDLE, SCATTER, HELD, CROSS, GATHER, DONE };

/* ---- the costs ---- */

/* One message of n bytes on link l, with the handshake past its eager limit (the receiver's answer
 * crosses back, then the rest). */
static double msg(const dt_hier_link *l, double n)
{
        return l->alpha + n * l->beta + (l->eager > 0 && n > l->eager ? 2.0 * l->alpha : 0);
}

/* n bytes as messages of m bytes each, all sent at once on link l: one latency, the bytes back to
 * back, and the handshake where a message is past the eager limit (the first's answer, while the
 * others wait for theirs beside it). */
static double streamed(const dt_hier_link *l, double n, double m)
{
        return l->alpha + n * l->beta + (l->eager > 0 && m > l->eager ? 2.0 * l->alpha : 0);
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

/* libnbc's in-place binomial all-reduce (Open MPI 4.1, nbc_iallreduce.c, its algorithm 2, and its
 * own choice for a buffer in place): v + d sends to v for v a multiple of 2d, each receiver adding,
 * then the binomial broadcast back, v sending to v + d for v < d. Across 2 nodes of 2 it carries
 * the bucket one way, then twice the other (tc counted 8.40 and 4.25 MB for 4 MB). */
static double binomial(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n)
{
        double t = 0;
        for (int d = 1; d < D; d *= 2)
                t += round_cost(intra, inter, local, D, d, 2 * d, D, n) + n * (d < local ? intra : inter)->gamma;
        for (int d = 1; d < D; d *= 2)
                t += round_cost(intra, inter, local, D, d, 1, d, n);
        return t;
}

/* libnbc's ring (its algorithm 1, which main.c asks for unless the user chose another): D - 1
 * rounds of reduce-scatter and D - 1 of all-gather, every rank sending a D-th of the bucket to the
 * next at once, each node's last rank across its link (both ways at once: 1.5 buckets each way
 * over 2 nodes of 2, tc counted 6.32 and 6.33 MB for 4 MB). */
static double ring(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n)
{
        const dt_hier_link *l = local < D ? inter : intra;
        return 2.0 * (D - 1) * msg(l, n / D) + (D - 1) * (n / D) * l->gamma;
}

/* The flat path's algorithm: the ring unless OMPI_MCA_coll_libnbc_iallreduce_algorithm names
 * another (0, libnbc's own choice, and 2 are the binomial tree for a buffer in place; 3 and 4,
 * never measured here, are predicted as the ring). */
static int flat_binomial(void)
{
        const char *e = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
        return e && (!strcmp(e, "0") || !strcmp(e, "2") || !strcmp(e, "ignore") || !strcmp(e, "binomial"));
}

void dt_hier_cost(const dt_hier_link *intra, const dt_hier_link *inter, int local, int D, double n, double *flat,
                  double *two)
{
        local = local < 1 ? 1 : local > D ? D : local;
        int nodes = (D + local - 1) / local, fewest = D - (nodes - 1) * local;
        *flat = flat_binomial() ? binomial(intra, inter, local, D, n) : ring(intra, inter, local, D, n);
        /* the node's reduce-scatter: an owner receives its segment from the node's other ranks at
         * once and adds them; each segment's all-reduce between the nodes: with 2, every owner of a
         * node sends its segment at once and both ways at once (a link carries the bucket once each
         * way, full duplex), with more libnbc's binomial tree over the nodes, each round carrying a
         * node's segments together; the node's all-gather */
        int S = fewest < local ? fewest : local, C = dt_hier_chunks(inter, nodes, S, n);
        double part = n / C / S, in = (local - 1) * part;
        double scatter = local > 1 ? msg(intra, in) + in * intra->gamma : 0;
        double cross = nodes == 2 ? streamed(inter, n, part) + part * inter->gamma
                     : nodes > 2 ? binomial(inter, inter, 1, nodes, n) : 0;
        *two = scatter + cross + (local > 1 ? msg(intra, in) : 0);
}

int dt_hier_chunks(const dt_hier_link *inter, int nodes, int S, double n)
{
        /* Open MPI's eager limit counts its 64-byte match header too */
        double eager = (inter->eager > 0 ? inter->eager : 65536) - 64;
        if (nodes != 2 || S < 1 || eager <= 0) return 1;
        double c = ceil(n / S / eager);
        return c < 1 ? 1 : c > 64 ? 64 : (int)c;
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

/* Segment s of n floats among S owners: [seg(n, s, S), seg(n, s + 1, S)). */
static int seg(int n, int s, int S)
{
        return (int)((long)n * s / S);
}

static int seg_max(int n, int S)
{
        return (n + S - 1) / S;
}

/* An owner's receive slots for a bucket of n floats: one per other rank of its node (the cross
 * reuses the first). */
static size_t slots(const dt_hier *h, int n)
{
        int k = h->node.size > 2 ? h->node.size - 1 : 1;
        return (size_t)k * (size_t)seg_max(n, h->owners);
}

void dt_hier_init(dt_hier *h, dt_comm *data, int mode, const dt_cluster_spec *cs, const double *bytes, int nb)
{
        memset(h, 0, sizeof *h);
        h->nodes = h->most = h->owners = 1;
        if (data->size == 1 || mode == 1) return;
        int color = node_color(data);
        dt_comm_split(data, color, data->rank, &h->node);
        int t[3] = { h->node.rank == 0, h->node.size, -h->node.size };
        dt_comm_allreduce(data, &t[0], 1, MPI_INT, "node count");
        dt_comm_allreduce_op(data, &t[1], 2, MPI_INT, MPI_MAX, "node count");
        h->nodes = t[0];
        h->most = t[1];
        h->owners = -t[2];
        dt_hier_link intra, inter;
        dt_hier_links(cs, &intra, &inter);
        h->on = dt_hier_choose(mode, h->nodes, h->most, &intra, &inter, data->size, bytes, nb);
        if (!h->on) {
                dt_comm_free(&h->node);
                return;
        }
        dt_comm_split(data, h->node.rank, data->rank, &h->peers);
        h->nbuckets = nb;
        h->first = dt_malloc((size_t)(nb + 1) * sizeof *h->first);
        h->first[0] = 0;
        for (int j = 0; j < nb; j++) h->first[j + 1] = h->first[j] + dt_hier_chunks(&inter, h->nodes, h->owners, bytes[j]);
        int nc = h->nb = h->first[nb];
        h->nreq = 2 * h->most + 2;
        h->phase = dt_calloc((size_t)nc, sizeof *h->phase);
        h->req = dt_malloc((size_t)nc * (size_t)h->nreq * sizeof *h->req);
        for (int k = 0; k < nc * h->nreq; k++) h->req[k] = MPI_REQUEST_NULL;
        h->buf = dt_calloc((size_t)nc, sizeof *h->buf);
        h->len = dt_calloc((size_t)nc, sizeof *h->len);
        h->off = dt_calloc((size_t)nc + 1, sizeof *h->off);
        int own = h->node.rank < h->owners;
        for (int j = 0; j < nb; j++) {
                int c = h->first[j + 1] - h->first[j], most = (int)(bytes[j] / sizeof(float));
                for (int k = h->first[j]; k < h->first[j + 1]; k++)
                        h->off[k + 1] = h->off[k] + (own ? slots(h, (most + c - 1) / c) : 0);
        }
        if (h->off[nc]) h->tmp = dt_falloc(h->off[nc]);
        if (data->rank == 0)
                dt_note("gradient allreduce: two-level, %d node%s (up to %d ranks each): node reduce-scatter, "
                        "%d segment%s across the nodes at once, node all-gather; %d bucket%s in %d chunk%s", h->nodes,
                        h->nodes == 1 ? "" : "s", h->most, h->owners, h->owners == 1 ? "" : "s", nb, nb == 1 ? "" : "s",
                        nc, nc == 1 ? "" : "s");
}

void dt_hier_free(dt_hier *h)
{
        if (h->on) {
                dt_comm_free(&h->peers);
                dt_comm_free(&h->node);
        }
        free(h->first);
        free(h->phase);
        free(h->req);
        free(h->buf);
        free(h->len);
        free(h->tmp);
        free(h->off);
        memset(h, 0, sizeof *h);
}

/* x = c0 + c1 + ... + c(L-1) over the node's ranks in order, x holding this rank's part c(me) and
 * t's slots (stride apart, rank q at slot q - (q > me)) the others'. */
static void node_sum(float *x, const float *t, size_t stride, int L, int me, int n)
{
        float *acc = x;
        if (me > 0) {   /* c0 + ... + c(me-1) in slot 0, then x = that + c(me) */
                acc = (float *)t;
                for (int q = 1; q < me; q++)
                        for (int i = 0; i < n; i++) acc[i] += t[(size_t)q * stride + i];
                for (int i = 0; i < n; i++) x[i] = acc[i] + x[i];
        }
        for (int q = me + 1; q < L; q++)
                for (int i = 0; i < n; i++) x[i] += t[(size_t)(q - 1) * stride + i];
}

static int tag(int j, int phase)
{
        return j * 4 + phase;
}

static void issue(dt_hier *h, int j, int phase)
{
        float *x = h->buf[j], *t = h->tmp + h->off[j];
        int n = h->len[j], L = h->node.size, me = h->node.rank, S = h->owners, k = 0;
        int lo = seg(n, me, S), cnt = seg(n, me + 1, S) - lo;
        size_t stride = (size_t)seg_max(n, S);
        MPI_Request *r = h->req + (size_t)j * (size_t)h->nreq;
        MPI_Comm nc = h->node.comm;
        h->phase[j] = (unsigned char)phase;
        if (phase == SCATTER) {
                for (int s = 0; s < S; s++)
                        if (s != me) MPI_Isend(x + seg(n, s, S), seg(n, s + 1, S) - seg(n, s, S), MPI_FLOAT, s,
                                               tag(j, phase), nc, &r[k++]);
                for (int q = 0; q < L && me < S; q++)
                        if (q != me) MPI_Irecv(t + (size_t)(q - (q > me)) * stride, cnt, MPI_FLOAT, q, tag(j, phase), nc,
                                               &r[k++]);
                dt_trace_mark("comm", "node reduce-scatter issued (gradient bucket)");
        } else if (phase == CROSS && h->peers.size == 2) {
                int peer = 1 - h->peers.rank;
                MPI_Isend(x + lo, cnt, MPI_FLOAT, peer, tag(j, phase), h->peers.comm, &r[k++]);
                MPI_Irecv(t, cnt, MPI_FLOAT, peer, tag(j, phase), h->peers.comm, &r[k++]);
                dt_trace_mark("comm", "segment exchange between nodes issued (gradient bucket)");
        } else if (phase == CROSS) {
                MPI_Iallreduce(MPI_IN_PLACE, x + lo, cnt, MPI_FLOAT, MPI_SUM, h->peers.comm, &r[k++]);
                dt_trace_mark("comm", "segment allreduce between nodes issued (gradient bucket)");
        } else if (phase == GATHER) {
                for (int q = 0; q < L && me < S; q++)
                        if (q != me) MPI_Isend(x + lo, cnt, MPI_FLOAT, q, tag(j, phase), nc, &r[k++]);
                for (int s = 0; s < S; s++)
                        if (s != me) MPI_Irecv(x + seg(n, s, S), seg(n, s + 1, S) - seg(n, s, S), MPI_FLOAT, s,
                                               tag(j, phase), nc, &r[k++]);
        }
        DT_ASSERT(k <= h->nreq);
        for (; k < h->nreq; k++) r[k] = MPI_REQUEST_NULL;
}

/* What phase ph's messages leave for this rank to do: the node's sum of its segment, the other
 * node's added. */
static void complete(dt_hier *h, int j, int ph)
{
        int n = h->len[j], me = h->node.rank, S = h->owners;
        if (me >= S) return;
        float *x = h->buf[j] + seg(n, me, S), *t = h->tmp + h->off[j];
        int cnt = seg(n, me + 1, S) - seg(n, me, S);
        if (ph == SCATTER) node_sum(x, t, (size_t)seg_max(n, S), h->node.size, me, cnt);
        else if (ph == CROSS && h->peers.size == 2)
                for (int i = 0; i < cnt; i++) x[i] += t[i];
}

static const char *what_of(int ph)
{
        return ph == SCATTER ? "gradient reduce-scatter on the node" : ph == CROSS ? "gradient allreduce between nodes"
                                                                                 : "gradient all-gather on the node";
}

/* Moves chunk j on when its phase is complete; a chunk enters the cross only after the chunk before
 * it did, and is HELD, its scatter summed, until then. */
static void advance(dt_hier *h, int j)
{
        int ph = h->phase[j];
        if (ph == IDLE || ph == DONE) return;
        if (ph != HELD) {
                int done;
                MPI_Testall(h->nreq, h->req + (size_t)j * (size_t)h->nreq, &done, MPI_STATUSES_IGNORE);
                if (!done) return;
                complete(h, j, ph);
        }
        int next = ph == SCATTER || ph == HELD ? CROSS : ph + 1;
        if (next == CROSS && (h->node.rank >= h->owners || h->nodes == 1)) next = GATHER;
        if (next == GATHER && h->node.size == 1) next = DONE;
        if (next == CROSS && j > 0 && h->phase[j - 1] < CROSS) {
                h->phase[j] = HELD;
                return;
        }
        if (next == DONE) h->phase[j] = DONE;
        else issue(h, j, next);
}

void dt_hier_start(dt_hier *h, int b, float *x, int n)
{
        DT_ASSERT(h->on && b >= 0 && b < h->nbuckets);
        int c = h->first[b + 1] - h->first[b];
        for (int k = 0; k < c; k++) {
                int j = h->first[b] + k, lo = (int)((long)n * k / c), hi = (int)((long)n * (k + 1) / c);
                DT_ASSERT(h->phase[j] == IDLE && (j == 0 || h->phase[j - 1] != IDLE));
                DT_ASSERT(h->off[j + 1] == h->off[j] || slots(h, hi - lo) <= h->off[j + 1] - h->off[j]);
                h->buf[j] = x + lo;
                h->len[j] = hi - lo;
                issue(h, j, SCATTER);
        }
        dt_hier_progress(h);
}

void dt_hier_progress(dt_hier *h)
{
        for (int j = 0; j < h->nb && h->phase[j] != IDLE; j++) advance(h, j);
}

void dt_hier_finish(dt_hier *h)
{
        /* every chunk moves on as soon as its step ends: a chunk's scatter and gather on the node
         * while the chunks around it cross */
        for (;;) {
                int lo = 0, hi = 0;
                dt_hier_progress(h);
                while (lo < h->nb && h->phase[lo] == DONE) lo++;
                for (hi = lo; hi < h->nb && h->phase[hi] != IDLE; hi++) continue;
                if (lo == hi) break;
                MPI_Request *r = h->req + (size_t)lo * (size_t)h->nreq;
                dt_comm_wait_any(&h->node, (hi - lo) * h->nreq, r, what_of(h->phase[lo]));
        }
        for (int j = 0; j < h->nb; j++) h->phase[j] = IDLE;
}
