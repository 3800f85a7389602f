/* parallel/pipeline.c - the stage cut, and one stage's walk through its schedule (see pipeline.h).
 * Sends are nonblocking, waited for (and their buffer reused) only once the receiver surely has
 * it, dt_pipe_send_release's point, else at the end of the step, as the schedule's contract asks
 * (a send waited for early could block on a receive its peer posts later); receives block under
 * the collective deadline. On a backend with host memory a message of one tensor has no staging
 * copy (dt_pipe_direct proves which may go so): activations go from the slot's output and into
 * the next slot's input, output gradients into dact, input gradients from the pool buffer their
 * B wrote them into; messages of several tensors and device memory go through a host copy. Micro-batch j of a slice [lo, hi) of S samples is
 * [lo + S j / m, lo + S (j + 1) / m), on every stage alike.
 * gpipe, 1f1b and interleaved run B as the whole backward (their W follows at once, and the input
 * gradient is sent after both); zb-h1 and zb-v run the graph's input pass at B and its weight pass
 * at W, in the slot of W's micro-batch, whose output gradients the graph keeps per slot (keep_dact).
 * With chunks (virtual stages) every action names its chunk: the graph walks that chunk's layers
 * (dt_graph_use_chunk), its messages carry that chunk's tensors to and from the stages holding the
 * neighbouring virtual stages, the stage itself included (a zb-v turn: MPI to itself). */
#include "parallel/pipeline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

enum { TAG_ACT = 0, TAG_GRAD = 1 };
_Static_assert(DT_ACT_RECV_GRAD < DT_PIPE_NACT, "dt_pipe_times.act has a slot for every action kind");

/* ---- the cut ---- */

/* A layer's weight in the balance: forward FLOPs (backward is about twice, the same ratio for all)
 * plus a floor for the memory-bound layers that have few FLOPs but move their output. */
static double layer_cost(const dt_layer *l)
{
        double f = l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) : 0;
        return f + 4.0 * (double)dt_shape_size(&l->out);
}

/* Contiguous split of n costs into k parts minimising the largest part (dynamic programme over
 * prefix sums; n and k are small). */
static void balance(const double *cost, int n, int k, int *first)
{
        double *pre = dt_calloc((size_t)n + 1, sizeof *pre);
        for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
        /* best[j][i]: the least largest part splitting the first i layers into j parts */
        double *best = dt_malloc((size_t)(k + 1) * (size_t)(n + 1) * sizeof *best);
        int *cut = dt_calloc((size_t)(k + 1) * (size_t)(n + 1), sizeof *cut);
#define B(j, i) best[(size_t)(j) * (size_t)(n + 1) + (size_t)(i)]
#define C(j, i) cut[(size_t)(j) * (size_t)(n + 1) + (size_t)(i)]
        for (int i = 0; i <= n; i++) B(1, i) = pre[i];
        for (int j = 2; j <= k; j++)
                for (int i = j; i <= n; i++) {
                        B(j, i) = 1e300;
                        for (int c = j - 1; c < i; c++) {       /* the last part is [c, i) */
                                double v = B(j - 1, c) > pre[i] - pre[c] ? B(j - 1, c) : pre[i] - pre[c];
                                if (v < B(j, i)) {
                                        B(j, i) = v;
                                        C(j, i) = c;
                                }
                        }
                }
        first[k] = n;
        for (int j = k, i = n; j >= 1; j--) {
                first[j - 1] = j == 1 ? 0 : C(j, i);
                i = first[j - 1];
        }
#undef B
#undef C
        free(pre);
        free(best);
        free(cut);
}

int dt_stage_plan_make(const dt_cluster_spec *cs, const dt_graph *full, int nstages, dt_stage_plan *p,
                       dt_diag *d)
{
        memset(p, 0, sizeof *p);
        p->nstages = nstages;
        const dt_stage_cuts *cu = &cs->cuts;
        if (cu->n == 0 || nstages == 1) {
                double *cost = dt_malloc((size_t)full->n * sizeof *cost);
                for (int i = 0; i < full->n; i++) cost[i] = layer_cost(&full->layers[i]);
                balance(cost, full->n, nstages, p->first);
                free(cost);
                return 0;
        }
        const char *file = cs->alt_set & DT_CS_STAGES ? cs->alt_file : cs->file;
        int v = dt_cluster_virtual_stages(cs);
        if (cu->n != nstages - 1 && v > 1) {
                dt_diag_add(d, file, cu->pos[0].line, cu->pos[0].col, "'stages' names %d cut%s for %d virtual "
                            "stages (pipeline %d x virtual_stages %d); give %d (the first layer of each piece "
                            "after the first)", cu->n, cu->n == 1 ? "" : "s", nstages, nstages / v, v, nstages - 1);
                return -1;
        }
        if (cu->n != nstages - 1) {
                dt_diag_add(d, file, cu->pos[0].line, cu->pos[0].col, "'stages' names %d cut%s for %d pipeline "
                            "stages; give %d (the first layer of each stage after the first)", cu->n,
                            cu->n == 1 ? "" : "s", nstages, nstages - 1);
                return -1;
        }
        p->first[0] = 0;
        for (int s = 0; s < cu->n; s++) {
                int at = -1;
                for (int i = 0; i < full->n && at < 0; i++)
                        if (!strcmp(full->layers[i].name, cu->name[s])) at = i;
                if (at < 0) {
                        dt_diag_add(d, file, cu->pos[s].line, cu->pos[s].col, "no layer named '%s' to start stage "
                                    "%d", cu->name[s], s + 1);
                        return -1;
                }
                if (at <= p->first[s]) {
                        dt_diag_add(d, file, cu->pos[s].line, cu->pos[s].col, "stage %d would start at layer '%s', "
                                    "not after stage %d's first layer '%s': name the cuts in layer order",
                                    s + 1, cu->name[s], s, full->layers[p->first[s]].name);
                        return -1;
                }
                p->first[s + 1] = at;
        }
        p->first[nstages] = full->n;
        return 0;
}

/* ---- running a stage ---- */

int dt_pipe_slots(dt_schedule_kind kind, int nstages, int nchunks, int stage, int micro)
{
        dt_schedule s;
        char err[160];
        if (dt_schedule_build_v(&s, kind, nstages, nchunks, micro, err, sizeof err) < 0)
                dt_die(DT_EXIT_RUNTIME, "pipeline schedule: %s", err);
        int n = s.stage[stage].nslots;
        dt_schedule_free(&s);
        return n > 0 ? n : 1;
}

int dt_pipe_graph_slots(dt_graph *g, dt_schedule_kind kind, int nstages, int stage, int micro)
{
        int v = g->nchunks > 1 ? g->nchunks : 1;
        if (v == 1) return dt_pipe_slots(kind, nstages, 1, stage, micro);
        dt_schedule s;
        char err[160];
        if (dt_schedule_build_v(&s, kind, nstages, v, micro, err, sizeof err) < 0)
                dt_die(DT_EXIT_RUNTIME, "pipeline schedule: %s", err);
        for (int c = 0; c < v; c++) g->chunk[c].nslots = 1;
        const dt_stage_actions *me = &s.stage[stage];
        for (int i = 0; i < me->n; i++)
                if (me->a[i].slot >= 0)
                        g->chunk[me->a[i].chunk].nslots = DT_MAX(g->chunk[me->a[i].chunk].nslots, me->a[i].slot + 1);
        int n = me->nslots > 0 ? me->nslots : 1;
        dt_schedule_free(&s);
        return n;
}

/* The schedules whose B and W are apart (zb-h1 and the V's): W's may wait past other B's. */
static int split_kind(dt_schedule_kind k)
{
        return k == DT_SCHEDULE_ZB_H1 || dt_schedule_is_v(k);
}

void dt_pipe_stage_graph(dt_graph *g, dt_schedule_kind kind, int nstages, int nchunks, int stage)
{
        g->input_grad = (nchunks > 1 ? dt_schedule_vstage(kind, nstages, nchunks, stage, 0) : stage) > 0;
        g->x_grad = nchunks > 1;
        g->keep_dact = split_kind(kind) && nstages * nchunks > 1;
}

void dt_pipe_init(dt_pipe *p, dt_comm *axis, dt_graph *g, dt_schedule_kind kind, int micro)
{
        /* a W deferred past another B would read that B's output gradients */
        DT_ASSERT(!split_kind(kind) || g->keep_dact);
        memset(p, 0, sizeof *p);
        p->axis = axis;
        p->g = g;
        p->stage = axis->rank;
        p->nstages = axis->size;
        p->kind = kind;
        p->micro = micro;
        p->sched = dt_calloc((size_t)micro + 1, sizeof *p->sched);
        p->rel = dt_calloc((size_t)micro + 1, sizeof *p->rel);
        p->direct = dt_calloc((size_t)micro + 1, sizeof *p->direct);
        const char *ck = getenv("DTRAIN_PIPE_CHECK");
        p->check = ck && !strcmp(ck, "1");
        p->nin_t = g->nx + 1;
        p->in_t = dt_malloc((size_t)p->nin_t * sizeof *p->in_t);
        for (int k = 0; k < g->nx; k++) p->in_t[k] = g->n + 1 + k;
        p->in_t[g->nx] = 0;             /* the tensor made just before the cut: the largest id */
        p->nout_t = g->nout;
        p->out_t = g->out_t;
        p->nchunks = g->nchunks > 1 ? g->nchunks : 1;
        for (int c = 0; c < p->nchunks; c++) {
                struct dt_pipe_chunk *ch = &p->ch[c];
                ch->vs = dt_schedule_vstage(kind, p->nstages, p->nchunks, p->stage, c);
                if (p->nchunks == 1) {
                        ch->nin_t = p->nin_t, ch->in_t = p->in_t, ch->nout_t = p->nout_t, ch->out_t = p->out_t;
                } else {
                        ch->nin_t = g->chunk[c].nin, ch->in_t = g->chunk[c].in_t;
                        ch->nout_t = g->chunk[c].nout, ch->out_t = g->chunk[c].out_t;
                }
                for (int k = 0; k < ch->nin_t; k++) ch->in_per += dt_shape_size(dt_graph_tensor_shape(g, ch->in_t[k]));
                for (int k = 0; k < ch->nout_t; k++) ch->out_per += dt_shape_size(dt_graph_tensor_shape(g, ch->out_t[k]));
                /* the largest message's, for the buffers: what the piece receives and sends (the
                 * model's input and loss output are no message) */
                int recv, send;
                dt_pipe_piece_talks(g, c, &recv, &send);
                if (recv) p->in_per = DT_MAX(p->in_per, ch->in_per);
                if (send) p->out_per = DT_MAX(p->out_per, ch->out_per);
        }
}

void dt_pipe_free(dt_pipe *p)
{
        if (!p->sched) return;
        for (int m = 0; m <= p->micro; m++)
                if (p->sched[m].stage) dt_schedule_free(&p->sched[m]);
        for (int m = 0; m <= p->micro; m++) free(p->rel[m]), free(p->direct[m]);
        free(p->sched);
        free(p->rel);
        free(p->direct);
        free(p->sck);
        free(p->ssum);
        free(p->in_t);
        free(p->sreq);
        free(p->sbuf);
        for (int i = 0; i < p->npool; i++) free(p->pool[i].p);
        free(p->pool);
        memset(p, 0, sizeof *p);
}

static const dt_schedule *schedule_for(dt_pipe *p, int m)
{
        if (!p->sched[m].stage) {
                char err[160];
                if (dt_schedule_build_v(&p->sched[m], p->kind, p->nstages, p->nchunks, m, err, sizeof err) < 0)
                        dt_die(DT_EXIT_RUNTIME, "pipeline schedule: %s", err);
                p->rel[m] = dt_malloc(((size_t)p->sched[m].stage[p->stage].n + 1) * sizeof *p->rel[m]);
                dt_pipe_send_release(&p->sched[m], p->stage, p->rel[m]);
                p->direct[m] = dt_malloc((size_t)p->sched[m].stage[p->stage].n + 1);
                dt_pipe_direct(&p->sched[m], p->stage, p->rel[m], p->direct[m]);
        }
        return &p->sched[m];
}

/* A host buffer for a message of n floats: one from the pool when it is large enough, else a new
 * one with room for the largest micro-batch. Messages are a micro-batch's activations or
 * gradients (megabytes for a convolution stage), sent and received every micro-batch: allocated
 * afresh each time, they were unmapped and faulted in again every step. */
static dt_pipe_buf buf_get(dt_pipe *p, size_t n)
{
        for (int i = p->npool - 1; i >= 0; i--)
                if (p->pool[i].cap >= n) {
                        dt_pipe_buf b = p->pool[i];
                        p->pool[i] = p->pool[--p->npool];
                        return b;
                }
        size_t per = p->in_per > p->out_per ? p->in_per : p->out_per, most = (size_t)p->g->max_batch * per;
        dt_pipe_buf b = { NULL, n > most ? n : most };
        b.p = dt_falloc(b.cap ? b.cap : 1);
        return b;
}

static void buf_put(dt_pipe *p, dt_pipe_buf b)
{
        if (p->npool == p->cappool) {
                p->cappool = p->cappool ? 2 * p->cappool : 8;
                p->pool = dt_realloc(p->pool, (size_t)p->cappool * sizeof *p->pool);
        }
        p->pool[p->npool++] = b;
}

/* A checksum of n floats' bits (DTRAIN_PIPE_CHECK): what a buffer in flight must still hold. */
static uint64_t sum_bits(const float *x, size_t n)
{
        uint64_t h = 1469598103934665603u;
        const uint32_t *u = (const uint32_t *)(const void *)x;
        for (size_t i = 0; i < n; i++) h = (h ^ u[i]) * 1099511628211u;
        return h;
}

/* Under DTRAIN_PIPE_CHECK, dies when send k's buffer changed since it was posted (something wrote
 * it while MPI may still have been reading it), then forgets it. */
static void check_send(dt_pipe *p, int k)
{
        if (!p->check || !p->sck[k].p) return;
        if (sum_bits(p->sck[k].p, p->sck[k].cap) != p->ssum[k])
                dt_die(DT_EXIT_RUNTIME, "pipeline: a send's buffer (%zu floats at %p) was written while in flight",
                       p->sck[k].cap, (void *)p->sck[k].p);
        p->sck[k].p = NULL;
}

/* Posts n floats at h to peer as one message; buf: the pool buffer h lies in, given back once the
 * send is done ({ NULL }: h is a layer's tensor, left alone until then). */
static int post(dt_pipe *p, float *h, size_t n, dt_pipe_buf buf, int peer, int tag)
{
        if (p->nsend == p->capsend) {
                p->capsend = p->capsend ? 2 * p->capsend : 16;
                p->sreq = dt_realloc(p->sreq, (size_t)p->capsend * sizeof *p->sreq);
                p->sbuf = dt_realloc(p->sbuf, (size_t)p->capsend * sizeof *p->sbuf);
                p->sck = dt_realloc(p->sck, (size_t)p->capsend * sizeof *p->sck);
                p->ssum = dt_realloc(p->ssum, (size_t)p->capsend * sizeof *p->ssum);
        }
        DT_ASSERT(n <= INT32_MAX);
        MPI_Isend(h, (int)n, MPI_FLOAT, peer, tag, p->axis->comm, &p->sreq[p->nsend]);
        p->sbuf[p->nsend] = buf;
        p->sck[p->nsend] = (dt_pipe_buf){ p->check ? h : NULL, n };
        if (p->check) p->ssum[p->nsend] = sum_bits(h, n);
        return p->nsend++;
}

/* The tensor a message of t[0..nt) in set may go straight from or into: its one tensor's buffer on a
 * backend with host memory, else NULL (the message is packed: several tensors, device memory, or a
 * gradient nobody here made). */
static float *direct_of(const dt_pipe *p, float *const *set, const int *t, int nt)
{
        return p->host && nt == 1 ? set[t[0]] : NULL;
}

/* The tensors t[0..nt) (b samples each, of act or dact) sent to peer as one message: from the tensor
 * itself where direct (dt_pipe_direct's proof that nothing writes it before the send's release),
 * else from a copy that lives until the send is done. A gradient nobody here made (NULL) goes as zeros. */
static int post_send(dt_pipe *p, float *const *set, const int *t, int nt, int b, size_t per, int peer, int tag,
                     int direct)
{
        size_t n = (size_t)b * per;
        float *one = direct ? direct_of(p, set, t, nt) : NULL;
        if (one) return post(p, one, n, (dt_pipe_buf){ NULL, 0 }, peer, tag);
        dt_pipe_buf buf = buf_get(p, n);
        float *at = buf.p;
        for (int k = 0; k < nt; k++) {
                size_t m = (size_t)b * dt_shape_size(dt_graph_tensor_shape(p->g, t[k]));
                if (set[t[k]]) p->g->be->ops->to_host(p->g->be, at, set[t[k]], m);
                else memset(at, 0, m * sizeof *at);
                at += m;
        }
        return post(p, buf.p, n, buf, peer, tag);
}

/* Send k of the step done: its receiver has it (dt_pipe_send_release's point), so the wait returns
 * without the peer doing anything more; its copy back in the pool. */
static void release_send(dt_pipe *p, int k)
{
        double t0 = dt_now();
        dt_comm_wait(p->axis, 1, &p->sreq[k], "pipeline send");
        p->t_wait += dt_now() - t0;
        check_send(p, k);
        if (p->sbuf[k].p) buf_put(p, p->sbuf[k]);
        p->sbuf[k].p = NULL;
}

/* A received message h into the tensors t[0..nt) of set (b samples each); NULL ones are skipped. */
static void unpack(dt_pipe *p, const float *h, float *const *set, const int *t, int nt, int b)
{
        for (int k = 0; k < nt; k++) {
                size_t m = (size_t)b * dt_shape_size(dt_graph_tensor_shape(p->g, t[k]));
                if (set[t[k]]) p->g->be->ops->to_device(p->g->be, set[t[k]], h, m);
                h += m;
        }
}

static void wait_sends(dt_pipe *p, const char *what)
{
        if (!p->nsend) return;
        double t0 = dt_now();
        dt_comm_wait(p->axis, p->nsend, p->sreq, what);
        p->t_wait += dt_now() - t0;
        for (int i = 0; i < p->nsend; i++) {
                check_send(p, i);
                if (p->sbuf[i].p) buf_put(p, p->sbuf[i]);
        }
        p->nsend = 0;
}

/* n floats from peer into h, waited for. */
static void recv_into(dt_pipe *p, float *h, size_t n, int peer, int tag, const char *what)
{
        MPI_Request r;
        DT_ASSERT(n <= INT32_MAX);
        MPI_Irecv(h, (int)n, MPI_FLOAT, peer, tag, p->axis->comm, &r);
        double t0 = dt_now();
        dt_comm_wait(p->axis, 1, &r, what);
        p->t_wait += dt_now() - t0;
        p->tm.recv_wait += dt_now() - t0;
}

/* A host buffer (from the pool; buf_put it back) holding n floats received from peer. */
static dt_pipe_buf recv_host(dt_pipe *p, size_t n, int peer, int tag, const char *what)
{
        dt_pipe_buf h = buf_get(p, n);
        recv_into(p, h.p, n, peer, tag, what);
        return h;
}

/* The previous virtual stage's activations for b samples into chunk c's inputs (the current slot's):
 * straight into the one input tensor where the backend's memory is the host's (the slot's input is
 * free: its last reader, the slot's previous B, is done), else through a copy. */
static void recv_acts(dt_pipe *p, int c, int b, int peer, int tag)
{
        const struct dt_pipe_chunk *ch = &p->ch[c];
        const char *what = "pipeline activation receive";
        float *one = direct_of(p, p->g->act, ch->in_t, ch->nin_t);
        if (one) {
                recv_into(p, one, (size_t)b * ch->in_per, peer, tag, what);
                return;
        }
        dt_pipe_buf h = recv_host(p, (size_t)b * ch->in_per, peer, tag, what);
        unpack(p, h.p, p->g->act, ch->in_t, ch->nin_t, b);
        buf_put(p, h);
}

/* micro-batch j of m over [lo, hi) */
static void mb_range(int lo, int hi, int m, int j, int *a, int *b)
{
        long S = hi - lo;
        *a = lo + (int)(S * j / m);
        *b = lo + (int)(S * (j + 1) / m);
}

/* A message's tag: its micro-batch, the receiving chunk (on its stage) and its kind; 2 mb + kind
 * without chunks. At most 2 (1024 x 4 + 3) + 1, within MPI's least tag bound (32767). */
static int tag_of(const dt_pipe *p, int mb, int chunk, int kind) { return 2 * (mb * p->nchunks + chunk) + kind; }

/* The stage and chunk of the virtual stage next to chunk c's on side (+1 after, -1 before). */
static int peer_chunk(const dt_pipe *p, int c, int side)
{
        int st, ch;
        dt_schedule_place(p->kind, p->nstages, p->nchunks, p->ch[c].vs + side, &st, &ch);
        return ch;
}

/* One step's walk: the state its actions share. */
typedef struct walk {
        dt_pipe *p;
        const dt_fwd_ctx *ctx;
        const dt_pipe_hooks *h;
        double *stats;
        int lo, hi, m;
        /* per chunk: the micro-batch whose input gradient waits to be sent (the chunk's dact at its
         * inputs is one buffer for every slot: a B's input gradient must be sent before the chunk's
         * next B overwrites it, which every builder's lists do; -1: none), and the action after
         * which every gradient of the chunk is whole */
        int unsent[DT_SCHEDULE_MAX_CHUNKS], done_at[DT_SCHEDULE_MAX_CHUNKS];
        /* per chunk: the pool buffer its last B wrote its input gradient into, in place of dact,
         * until the send takes it (p NULL: none, the gradient is in dact and the send copies it) */
        dt_pipe_buf gout[DT_SCHEDULE_MAX_CHUNKS];
        int *slot_of;           /* [chunk * m + mb]: the slot of its forward here */
        /* the sends released after action i (dt_pipe_send_release): the first's index in the list
         * at rel_head[i], the next at rel_next[that], -1 ending; send_at[i]: action i's send's place
         * among the step's requests */
        int *rel_head, *rel_next, *send_at;
        const char *direct;     /* the list's dt_pipe_direct */
        dt_pipe_buf *grad_in;   /* [chunk * m + mb]: a received output gradient waiting for its B */
        char *got;              /* [chunk * m + mb]: received straight into the slot's dact instead */
        uint64_t *got_sum;      /* and that tensor's checksum then (DTRAIN_PIPE_CHECK) */
} walk;

/* B's output gradient into dact at chunk ch's outputs (the current slot's): from where its receive
 * left it, or from the loss on the last virtual stage. */
static void grad_out(walk *w, const dt_action *a, int b, const dt_fwd_ctx *c)
{
        dt_pipe *p = w->p;
        dt_graph *g = p->g;
        const struct dt_pipe_chunk *ch = &p->ch[a->chunk];
        int k = a->chunk * w->m + a->mb;
        if (ch->vs == p->nstages * p->nchunks - 1) {
                w->h->score(w->h->ud, c->pos0, b, 1, w->stats);
        } else if (w->got[k]) {
                if (p->check && sum_bits(g->dact[ch->out_t[0]], (size_t)b * ch->out_per) != w->got_sum[k])
                        dt_die(DT_EXIT_RUNTIME, "pipeline: micro-batch %d's output gradient, received into "
                               "its tensor, was written before its B", a->mb);
                w->got[k] = 0;
        } else {
                unpack(p, w->grad_in[k].p, g->dact, ch->out_t, ch->nout_t, b);
                buf_put(p, w->grad_in[k]);
                w->grad_in[k] = (dt_pipe_buf){ NULL, 0 };
        }
}

/* A backward action (B, and W under a split schedule) of chunk c; i its index in the list. Where
 * the input gradient is one host tensor, B writes it straight into a pool buffer that its send
 * then takes as it is: the chunk's dact at its inputs is one buffer for every slot, which the next
 * B overwrites while the send may still be in flight (the release often comes later: in 1f1b, a
 * message the previous stage sends after its next forward), so the send could go from dact only
 * by waiting for it early, on a receive its peer may not have posted. Every B writes its input
 * gradient whole (its first reader in backward writes, the rest add), so the buffer's old contents
 * never show. */
static void walk_backward(walk *w, const dt_action *a, int i, int b, const dt_fwd_ctx *c)
{
        dt_pipe *p = w->p;
        dt_graph *g = p->g;
        const struct dt_pipe_chunk *ch = &p->ch[a->chunk];
        int split = split_kind(p->kind);
        dt_graph_use_slot(g, a->slot);
        if (a->kind == DT_ACT_BACKWARD_WEIGHT) {        /* gpipe, 1f1b, interleaved: done with B */
                if (split) dt_graph_backward_weight_h(g, c, b, i == w->done_at[a->chunk] ? w->h->grads_done : NULL);
                return;
        }
        DT_ASSERT(w->unsent[a->chunk] < 0);
        grad_out(w, a, b, c);
        float *dx = ch->vs > 0 ? direct_of(p, g->dact, ch->in_t, ch->nin_t) : NULL;
        if (dx) {
                w->gout[a->chunk] = buf_get(p, (size_t)b * ch->in_per);
                g->dact[ch->in_t[0]] = w->gout[a->chunk].p;
        }
        if (split) dt_graph_backward_input_h(g, c, b, NULL);
        else dt_graph_backward_h(g, c, b, i == w->done_at[a->chunk] ? w->h->grads_done : NULL);
        if (dx) g->dact[ch->in_t[0]] = dx;
        if (ch->vs > 0) w->unsent[a->chunk] = a->mb;
}

/* mb's output gradient from peer: straight into the slot's dact where dt_pipe_direct allows it,
 * else into a pool buffer that its B unpacks. */
static void walk_recv_grad(walk *w, const dt_action *a, int i, int b)
{
        dt_pipe *p = w->p;
        dt_graph *g = p->g;
        const struct dt_pipe_chunk *ch = &p->ch[a->chunk];
        int k = a->chunk * w->m + a->mb, tag = tag_of(p, a->mb, a->chunk, TAG_GRAD);
        size_t n = (size_t)b * ch->out_per;
        dt_graph_use_slot(g, w->slot_of[k]);
        float *one = w->direct[i] ? direct_of(p, g->dact, ch->out_t, ch->nout_t) : NULL;
        if (!one) {
                w->grad_in[k] = recv_host(p, n, a->peer, tag, "pipeline gradient receive");
                return;
        }
        recv_into(p, one, n, a->peer, tag, "pipeline gradient receive");
        w->got[k] = 1;
        if (p->check) w->got_sum[k] = sum_bits(one, n);
}

static void walk_action(walk *w, const dt_action *a, int i)
{
        dt_pipe *p = w->p;
        dt_graph *g = p->g;
        const struct dt_pipe_chunk *ch = &p->ch[a->chunk];
        int a0, a1;
        mb_range(w->lo, w->hi, w->m, a->mb, &a0, &a1);
        int b = a1 - a0, k = a->chunk * w->m + a->mb;
        dt_fwd_ctx c = *w->ctx;
        c.pos0 = a0;
        if (p->nchunks > 1) dt_graph_use_chunk(g, a->chunk);
        switch (a->kind) {
        case DT_ACT_RECV_ACT:
                dt_graph_use_slot(g, w->slot_of[k]);
                recv_acts(p, a->chunk, b, a->peer, tag_of(p, a->mb, a->chunk, TAG_ACT));
                break;
        case DT_ACT_FORWARD:
                dt_graph_use_slot(g, a->slot);
                if (ch->vs == 0) w->h->feed(w->h->ud, a0, b);
                dt_graph_forward(g, &c, b);
                break;
        case DT_ACT_SEND_ACT:
                dt_graph_use_slot(g, w->slot_of[k]);
                w->send_at[i] = post_send(p, g->act, ch->out_t, ch->nout_t, b, ch->out_per, a->peer,
                                          tag_of(p, a->mb, peer_chunk(p, a->chunk, +1), TAG_ACT), w->direct[i]);
                break;
        case DT_ACT_RECV_GRAD:
                walk_recv_grad(w, a, i, b);
                break;
        case DT_ACT_BACKWARD_INPUT:
        case DT_ACT_BACKWARD_WEIGHT:
                walk_backward(w, a, i, b, &c);
                break;
        case DT_ACT_SEND_GRAD:
                DT_ASSERT(w->unsent[a->chunk] == a->mb);
                w->unsent[a->chunk] = -1;
                int tag = tag_of(p, a->mb, peer_chunk(p, a->chunk, -1), TAG_GRAD);
                if (w->gout[a->chunk].p)
                        w->send_at[i] = post(p, w->gout[a->chunk].p, (size_t)b * ch->in_per, w->gout[a->chunk], a->peer, tag);
                else
                        w->send_at[i] = post_send(p, g->dact, ch->in_t, ch->nin_t, b, ch->in_per, a->peer, tag, 0);
                w->gout[a->chunk] = (dt_pipe_buf){ NULL, 0 };
                break;
        }
}

void dt_pipe_train(dt_pipe *p, const dt_fwd_ctx *ctx, int lo, int hi, const dt_pipe_hooks *h, double stats[2])
{
        double t_step = dt_now();
        int m = p->micro < hi - lo ? p->micro : hi - lo;
        p->host = dt_backend_supports(p->g->be, DT_CAP_HOST_MEMORY);
        const dt_schedule *s = schedule_for(p, m);
        const dt_stage_actions *me = &s->stage[p->stage];
        walk w = { .p = p, .ctx = ctx, .h = h, .stats = stats, .lo = lo, .hi = hi, .m = m };
        w.slot_of = dt_malloc((size_t)m * (size_t)p->nchunks * sizeof *w.slot_of);
        w.grad_in = dt_calloc((size_t)m * (size_t)p->nchunks, sizeof *w.grad_in);
        w.got = dt_calloc((size_t)m * (size_t)p->nchunks, 1);
        w.got_sum = dt_calloc((size_t)m * (size_t)p->nchunks, sizeof *w.got_sum);
        w.direct = p->direct[m];
        for (int c = 0; c < p->nchunks; c++) w.unsent[c] = w.done_at[c] = -1;
        const int *rel = p->rel[m];
        int *lists = dt_malloc(((size_t)me->n + 1) * 3 * sizeof *lists);
        w.rel_head = lists, w.rel_next = lists + me->n + 1, w.send_at = w.rel_next + me->n + 1;
        for (int i = 0; i <= me->n; i++) w.rel_head[i] = -1;
        for (int i = me->n - 1; i >= 0; i--)
                if (rel[i] >= 0) w.rel_next[i] = w.rel_head[rel[i]], w.rel_head[rel[i]] = i;
        dt_action_kind last = split_kind(p->kind) ? DT_ACT_BACKWARD_WEIGHT : DT_ACT_BACKWARD_INPUT;
        for (int i = 0; i < me->n; i++) {
                const dt_action *a = &me->a[i];
                if (a->kind == DT_ACT_FORWARD) w.slot_of[a->chunk * m + a->mb] = a->slot;
                if (a->kind == last) w.done_at[a->chunk] = i;
        }
        for (int i = 0; i < me->n; i++) {
                double t0 = dt_now();
                walk_action(&w, &me->a[i], i);
                for (int k = w.rel_head[i]; k >= 0; k = w.rel_next[k]) release_send(p, w.send_at[k]);
                const dt_action *a = &me->a[i];
                double dt = dt_now() - t0;
                p->tm.act[a->kind] += dt;
                p->tm.nact[a->kind]++;
                if (a->kind <= DT_ACT_BACKWARD_WEIGHT) {
                        p->tm.chunk[a->chunk][a->kind] += dt;
                        p->tm.nchunk[a->chunk][a->kind]++;
                }
        }
        free(w.slot_of);
        free(w.grad_in);
        free(w.got);
        free(w.got_sum);
        free(lists);
        double t_sends = dt_now();
        wait_sends(p, "pipeline sends");
        p->tm.sends += dt_now() - t_sends;
        if (p->nchunks > 1) dt_graph_use_chunk(p->g, -1);
        dt_graph_use_slot(p->g, 0);
        p->t_step += dt_now() - t_step;
        p->tm.train += dt_now() - t_step;
        p->tm.steps++;
        p->nsteps++;
}

void dt_pipe_report(dt_pipe *p, FILE *f)
{
        int P = p->nstages;
        double *v = dt_calloc(3 * (size_t)P, sizeof *v);      /* per stage: step s, wait s, steps */
        v[3 * p->stage] = p->t_step;
        v[3 * p->stage + 1] = p->t_wait;
        v[3 * p->stage + 2] = (double)p->nsteps;
        dt_comm_allreduce(p->axis, v, 3 * P, MPI_DOUBLE, "pipeline timing");
        if (f && v[2] > 0) {
                fprintf(f, "pipeline %s, %.0f steps: ms per step in the schedule / waiting on messages:",
                        dt_schedule_kind_name(p->kind), v[2]);
                for (int s = 0; s < P; s++) {
                        double n = v[3 * s + 2] > 0 ? v[3 * s + 2] : 1;
                        fprintf(f, "%s stage %d %.3f / %.3f", s ? "," : "", s, 1e3 * v[3 * s] / n,
                                1e3 * v[3 * s + 1] / n);
                }
                fprintf(f, "\n");
        }
        free(v);
}

void dt_pipe_eval(dt_pipe *p, const dt_fwd_ctx *ctx, int lo, int hi, const dt_pipe_hooks *h, double stats[2])
{
        dt_graph *g = p->g;
        int b = hi - lo, S = p->nstages * p->nchunks;
        dt_fwd_ctx c = *ctx;
        c.pos0 = lo;
        dt_graph_use_slot(g, 0);
        p->host = dt_backend_supports(g->be, DT_CAP_HOST_MEMORY);
        /* the chunks in model order; sends are waited for at the end, as a chunk's message to its own
         * stage is received only at the next chunk (so each goes straight from its tensor: nothing
         * writes a chunk's outputs again before then) */
        for (int k = 0; k < p->nchunks; k++) {
                const struct dt_pipe_chunk *ch = &p->ch[k];
                int st, pc;
                if (p->nchunks > 1) dt_graph_use_chunk(g, k);
                if (ch->vs == 0) {
                        h->feed(h->ud, lo, b);
                } else {
                        dt_schedule_place(p->kind, p->nstages, p->nchunks, ch->vs - 1, &st, &pc);
                        recv_acts(p, k, b, st, tag_of(p, 0, k, TAG_ACT));
                }
                dt_graph_forward(g, &c, b);
                if (ch->vs < S - 1) {
                        dt_schedule_place(p->kind, p->nstages, p->nchunks, ch->vs + 1, &st, &pc);
                        post_send(p, g->act, ch->out_t, ch->nout_t, b, ch->out_per, st, tag_of(p, 0, pc, TAG_ACT), 1);
                } else {
                        h->score(h->ud, lo, b, 0, stats);
                }
        }
        wait_sends(p, "pipeline sends");
        if (p->nchunks > 1) dt_graph_use_chunk(g, -1);
}

/* Stage st's pieces in model order with where each sits in its own flat buffers: virtual stage vs[c]
 * (chunk c), at[c][k] its offset there (k: 0 parameters, 1 buffers), the model's slice of it in
 * sg[c] (free each). Returns the count. */
static int stage_pieces(const dt_stage_plan *plan, const dt_graph *full, int st, int *vs, size_t at[][2],
                        dt_graph *sg)
{
        int v = plan->nchunks > 1 ? plan->nchunks : 1;
        size_t pa = 0, ba = 0;
        for (int c = 0; c < v; c++) {
                vs[c] = v > 1 ? dt_schedule_vstage(plan->kind, plan->nstages, v, st, c) : st;
                dt_graph_range(full, plan->first[vs[c]], plan->first[vs[c] + 1], &sg[c]);
                at[c][0] = pa, at[c][1] = ba;
                pa += sg[c].nparams, ba += sg[c].nbuffers;
        }
        return v;
}

void dt_pipe_gather(dt_comm *axis, const dt_stage_plan *plan, const dt_graph *full, int nmo,
                    float *const mine[4], float *const all[4])
{
        int K = 2 + nmo, stage = axis->rank, vs[DT_SCHEDULE_MAX_CHUNKS];
        size_t at[DT_SCHEDULE_MAX_CHUNKS][2];
        dt_graph sg[DT_SCHEDULE_MAX_CHUNKS];
        if (stage != 0) {       /* this stage's pieces whole (its graph may hold only a tensor shard) */
                int v = stage_pieces(plan, full, stage, vs, at, sg);
                MPI_Request r[4 * DT_SCHEDULE_MAX_CHUNKS];
                int nr = 0;
                for (int c = 0; c < v; c++) {
                        size_t n[4] = { sg[c].nparams, sg[c].nbuffers, sg[c].nparams, sg[c].nparams };
                        size_t off[4] = { at[c][0], at[c][1], at[c][0], at[c][0] };
                        for (int k = 0; k < K; k++)
                                if (n[k]) {
                                        DT_ASSERT(n[k] <= INT32_MAX);
                                        MPI_Isend(mine[k] + off[k], (int)n[k], MPI_FLOAT, 0, 100 + 4 * c + k,
                                                  axis->comm, &r[nr++]);
                                }
                        dt_graph_free(&sg[c]);
                }
                dt_comm_wait(axis, nr, r, "pipeline state gather");
                return;
        }
        MPI_Request *r = dt_malloc((size_t)plan->nstages * 4 * DT_SCHEDULE_MAX_CHUNKS * sizeof *r);
        int nr = 0;
        for (int s = 0; s < plan->nstages; s++) {
                int v = stage_pieces(plan, full, s, vs, at, sg);
                for (int c = 0; c < v; c++) {
                        const dt_graph *st = &sg[c];
                        size_t base[4] = { st->param_base, st->buffer_base, st->param_base, st->param_base };
                        size_t n[4] = { st->nparams, st->nbuffers, st->nparams, st->nparams };
                        size_t off[4] = { at[c][0], at[c][1], at[c][0], at[c][0] };
                        for (int k = 0; k < K; k++) {
                                if (!n[k]) continue;
                                if (s == 0) {
                                        memcpy(all[k] + base[k], mine[k] + off[k], n[k] * sizeof(float));
                                } else {
                                        DT_ASSERT(n[k] <= INT32_MAX);
                                        MPI_Irecv(all[k] + base[k], (int)n[k], MPI_FLOAT, s, 100 + 4 * c + k,
                                                  axis->comm, &r[nr++]);
                                }
                        }
                        dt_graph_free(&sg[c]);
                }
        }
        dt_comm_wait(axis, nr, r, "pipeline state gather");
        free(r);
}
