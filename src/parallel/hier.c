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
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/trace.h"

enum { IDLE, REDUCE, LEADERS, BCAST, DONE };

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

void dt_hier_init(dt_hier *h, dt_comm *data, int mode, int nb)
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
        h->on = mode == 2 || (h->nodes > 1 && h->most > 1);
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
