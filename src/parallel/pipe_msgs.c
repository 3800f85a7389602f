/* parallel/pipe_msgs.c - what a stage's schedule says about its messages' buffers (pipeline.h): when
 * each send's buffer is surely free again, how many staging buffers the walk holds at once, and which
 * messages may go without a staging copy, straight from and into the layers' tensors. */
#include "parallel/pipeline.h"

#include <stdlib.h>
#include "util/common.h"

void dt_pipe_piece_talks(const dt_graph *g, int c, int *recv, int *send)
{
        int lo = g->nchunks > 1 ? g->chunk[c].lo : 0, hi = g->nchunks > 1 ? g->chunk[c].hi : g->n;
        *recv = g->layers[lo].index > 0;
        *send = g->layers[hi - 1].index < g->spec->nlayers - 1;
}

size_t dt_pipe_message_per(const dt_graph *g)
{
        size_t most = 0;
        for (int c = 0; c < (g->nchunks > 1 ? g->nchunks : 1); c++) {
                int recv, send, nin = g->nchunks > 1 ? g->chunk[c].nin : g->nx + 1;
                int nout = g->nchunks > 1 ? g->chunk[c].nout : g->nout;
                size_t in = 0, out = 0;
                dt_pipe_piece_talks(g, c, &recv, &send);
                for (int k = 0; k < nin && recv; k++)
                        in += dt_shape_size(dt_graph_tensor_shape(g, g->nchunks > 1 ? g->chunk[c].in_t[k] :
                                                                  k < g->nx ? g->n + 1 + k : 0));
                for (int k = 0; k < nout && send; k++)
                        out += dt_shape_size(dt_graph_tensor_shape(g, g->nchunks > 1 ? g->chunk[c].out_t[k] :
                                                                   g->out_t[k]));
                most = DT_MAX(most, DT_MAX(in, out));
        }
        return most;
}

int dt_pipe_one_tensor(const dt_graph *g)
{
        for (int c = 0; c < (g->nchunks > 1 ? g->nchunks : 1); c++) {
                int recv, send, nin = g->nchunks > 1 ? g->chunk[c].nin : g->nx + 1;
                int nout = g->nchunks > 1 ? g->chunk[c].nout : g->nout;
                dt_pipe_piece_talks(g, c, &recv, &send);
                if ((recv && nin > 1) || (send && nout > 1)) return 0;
        }
        return 1;
}

/* The index in stage st's list of the action that sends or receives the message a, a's partner on
 * stage q (a's peer): a RECV for a SEND and the reverse, of the same micro-batch, for the chunk of q
 * holding the virtual stage next to a's chunk's on that side. */
static int partner(const dt_schedule *s, int st, const dt_action *a)
{
        static const dt_action_kind other[] = { [DT_ACT_SEND_ACT] = DT_ACT_RECV_ACT, [DT_ACT_RECV_ACT] = DT_ACT_SEND_ACT,
                                                [DT_ACT_SEND_GRAD] = DT_ACT_RECV_GRAD,
                                                [DT_ACT_RECV_GRAD] = DT_ACT_SEND_GRAD };
        int v = s->nchunks > 1 ? s->nchunks : 1, q, qc = 0;
        /* activations go to the next virtual stage and come from the previous; gradients the reverse */
        int side = a->kind == DT_ACT_SEND_ACT || a->kind == DT_ACT_RECV_GRAD ? +1 : -1;
        if (v > 1) dt_schedule_place(s->kind, s->nstages, v, dt_schedule_vstage(s->kind, s->nstages, v, st, a->chunk) + side,
                                     &q, &qc);
        const dt_stage_actions *o = &s->stage[a->peer];
        for (int i = 0; i < o->n; i++)
                if (o->a[i].kind == other[a->kind] && o->a[i].mb == a->mb && o->a[i].chunk == qc && o->a[i].peer == st)
                        return i;
        DT_ASSERT(0);
        return -1;
}

void dt_pipe_send_release(const dt_schedule *s, int stage, int *rel)
{
        const dt_stage_actions *me = &s->stage[stage];
        int *pr = dt_malloc(((size_t)me->n + 1) * sizeof *pr);        /* each message's partner */
        for (int i = 0; i < me->n; i++) pr[i] = me->a[i].peer >= 0 ? partner(s, stage, &me->a[i]) : -1;
        for (int i = 0; i < me->n; i++) {
                const dt_action *a = &me->a[i];
                rel[i] = -1;
                if (a->kind != DT_ACT_SEND_ACT && a->kind != DT_ACT_SEND_GRAD) continue;
                int q = a->peer, r = pr[i];
                rel[i] = me->n;
                if (q == stage) {       /* to itself (a zb-v turn): done once its own receive is */
                        rel[i] = r;
                        continue;
                }
                /* the first message from q that q sent after its receive of ours finished */
                for (int j = i + 1; j < me->n && rel[i] == me->n; j++) {
                        const dt_action *b = &me->a[j];
                        if ((b->kind == DT_ACT_RECV_ACT || b->kind == DT_ACT_RECV_GRAD) && b->peer == q && pr[j] > r)
                                rel[i] = j;
                }
        }
        free(pr);
}

int dt_pipe_message_bufs(dt_schedule_kind kind, int nstages, int nchunks, int stage, int micro, int direct)
{
        dt_schedule s;
        char err[160];
        if (nstages < 2) return 0;
        if (dt_schedule_build_v(&s, kind, nstages, nchunks, micro, err, sizeof err) < 0)
                dt_die(DT_EXIT_RUNTIME, "pipeline schedule: %s", err);
        char *pending = dt_calloc((size_t)micro * (size_t)nchunks, 1);    /* a gradient waiting for its B */
        int live = 0, peak = 0, sends_grad[DT_SCHEDULE_MAX_CHUNKS] = { 0 };
        const dt_stage_actions *me = &s.stage[stage];
        int *rel = dt_malloc(((size_t)me->n + 1) * sizeof *rel), *freed = dt_calloc((size_t)me->n + 1, sizeof *freed);
        char *dir = dt_calloc((size_t)me->n + 1, 1);
        dt_pipe_send_release(&s, stage, rel);
        if (direct) dt_pipe_direct(&s, stage, rel, dir);
        for (int i = 0; i < me->n; i++) {
                if (rel[i] >= 0 && !dir[i]) freed[rel[i]]++;
                if (me->a[i].kind == DT_ACT_SEND_GRAD) sends_grad[me->a[i].chunk] = 1;
        }
        for (int i = 0; i < me->n; i++) {
                const dt_action *a = &me->a[i];
                size_t k = (size_t)a->chunk * (size_t)micro + (size_t)a->mb;
                if (a->kind == DT_ACT_SEND_ACT && !dir[i]) live++;
                else if (a->kind == DT_ACT_SEND_GRAD && !direct) live++;
                else if (a->kind == DT_ACT_RECV_ACT && !dir[i]) peak = DT_MAX(peak, live + 1);
                else if (a->kind == DT_ACT_RECV_GRAD && !dir[i]) live++, pending[k] = 1;
                else if (a->kind == DT_ACT_BACKWARD_INPUT) {
                        if (pending[k]) live--, pending[k] = 0;
                        if (direct && sends_grad[a->chunk]) live++;     /* its input gradient's buffer */
                }
                peak = DT_MAX(peak, live);
                live -= freed[i];       /* the sends whose receiver has them: back in the pool */
        }
        free(rel);
        free(freed);
        free(dir);
        free(pending);
        dt_schedule_free(&s);
        return peak;
}

/* The first action after i in me that is kind k of chunk c (and micro-batch mb, or slot sl, where
 * not -1), or -1 when none comes in the step. */
static int next_of(const dt_stage_actions *me, int i, dt_action_kind k, int c, int mb, int sl)
{
        for (int j = i + 1; j < me->n; j++) {
                const dt_action *b = &me->a[j];
                if (b->kind == k && b->chunk == c && (mb < 0 || b->mb == mb) && (sl < 0 || b->slot == sl)) return j;
        }
        return -1;
}

void dt_pipe_direct(const dt_schedule *s, int stage, const int *rel, char *direct)
{
        const dt_stage_actions *me = &s->stage[stage];
        int m = s->nmicro;
        int *slot_of = dt_malloc(((size_t)m * DT_SCHEDULE_MAX_CHUNKS + 1) * sizeof *slot_of);
        for (int i = 0; i < me->n; i++)
                if (me->a[i].kind == DT_ACT_FORWARD) slot_of[me->a[i].chunk * m + me->a[i].mb] = me->a[i].slot;
        for (int i = 0; i < me->n; i++) {
                const dt_action *a = &me->a[i];
                int c = a->chunk, w, b;
                direct[i] = 0;
                switch (a->kind) {
                case DT_ACT_RECV_ACT:   /* the slot's input: written here in any case, read by its F and B */
                        direct[i] = 1;
                        break;
                case DT_ACT_SEND_ACT:   /* the slot's output: until the chunk's next F in that slot */
                        w = next_of(me, i, DT_ACT_FORWARD, c, -1, slot_of[c * m + a->mb]);
                        direct[i] = w < 0 || w > rel[i];
                        break;
                case DT_ACT_RECV_GRAD:  /* the output gradient (maybe one for every slot): until its B */
                        b = next_of(me, i, DT_ACT_BACKWARD_INPUT, c, a->mb, -1);
                        w = next_of(me, i, DT_ACT_BACKWARD_INPUT, c, -1, -1);
                        int r = next_of(me, i, DT_ACT_RECV_GRAD, c, -1, -1);
                        direct[i] = w == b && (r < 0 || r > b);
                        break;
                default:
                        break;
                }
        }
        free(slot_of);
}
