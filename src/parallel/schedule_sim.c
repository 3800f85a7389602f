/* parallel/schedule_sim.c - the schedule simulator (schedule.h): plays every stage's list with MPI's
 * blocking rules (sends never block, receives wait for their message), one step or K back to back
 * with no barrier between them, for the makespan, each stage's bubble, the steady state's, or the
 * stages that would wait forever; and the bubble formulas it is held to. No MPI, no graph. */
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "util/common.h"

static int is_compute(dt_action_kind k)
{
        return k == DT_ACT_FORWARD || k == DT_ACT_BACKWARD_INPUT || k == DT_ACT_BACKWARD_WEIGHT;
}

/* ---- simulation ---- */

/* A message on its way to a stage: sent, not yet received. */
typedef struct msg {
        int data;               /* 0 activation, 1 gradient */
        int from, mb;
        int to;                 /* the virtual stage it is for (the stage, without chunks) */
        double arrive;          /* of all of it, or with a tail of its first part */
        int tail;               /* the rest waits for the handshake (dt_sim_link) */
} msg;

typedef struct inbox {
        msg *m;
        int n, cap;
} inbox;

static void post(inbox *in, msg x)
{
        if (in->n == in->cap) {
                in->cap = in->cap ? 2 * in->cap : 16;
                in->m = dt_realloc(in->m, (size_t)in->cap * sizeof *in->m);
        }
        in->m[in->n++] = x;
}

/* The earliest posted message matching (data, from, mb, to); -1 when none has been sent. Messages
 * of one key come from one sender in its program order, so the first is the k-th. */
static int find(const inbox *in, int data, int from, int mb, int to)
{
        for (int i = 0; i < in->n; i++)
                if (in->m[i].data == data && in->m[i].from == from && in->m[i].mb == mb && in->m[i].to == to)
                        return i;
        return -1;
}

/* The virtual stage a message of a goes to: a receive's own chunk's, a send's neighbour's. */
static int msg_to(const dt_schedule *s, int st, const dt_action *a)
{
        int vs = dt_schedule_vstage(s->kind, s->nstages, s->nchunks, st, a->chunk);
        return a->kind == DT_ACT_SEND_ACT ? vs + 1 : a->kind == DT_ACT_SEND_GRAD ? vs - 1 : vs;
}

static void drop(inbox *in, int i)
{
        memmove(&in->m[i], &in->m[i + 1], (size_t)(in->n - i - 1) * sizeof *in->m);
        in->n--;
}

/* When each stage is inside MPI, so that a handshake's answer gets acted on: the closed spans so
 * far (a send's instant, a receive's wait), and from when it has been waiting with no end known
 * yet (blocked at a receive, or done: the end-of-step wait for its sends), -1 while it runs. */
typedef struct in_mpi {
        double *a, *b;
        int n, cap;
        double open;
} in_mpi;

static void span(in_mpi *m, double a, double b)
{
        if (m->n == m->cap) {
                m->cap = m->cap ? 2 * m->cap : 32;
                m->a = dt_realloc(m->a, (size_t)m->cap * sizeof *m->a);
                m->b = dt_realloc(m->b, (size_t)m->cap * sizeof *m->b);
        }
        m->a[m->n] = a, m->b[m->n++] = b;
}

static double time_of(const dt_stage_cost *c, dt_action_kind k)
{
        return k == DT_ACT_FORWARD ? c->f : k == DT_ACT_BACKWARD_INPUT ? c->b : c->w;
}

/* Names why the first stuck stage waits: following "waits on" from it ends either at a stage that
 * finished without sending, or in a cycle of stages waiting on each other, which is named whole. */
static void explain_deadlock(const dt_schedule *s, const int *pc, int first, char *err, size_t errlen)
{
        int p = s->nstages, i = first;
        char seen[DT_SCHEDULE_MAX_STAGES] = { 0 };
        while (!seen[i] && pc[i] < s->stage[i].n) {
                seen[i] = 1;
                i = s->stage[i].a[pc[i]].peer;
        }
        int stuck = 0;
        for (int k = 0; k < p; k++) stuck += pc[k] < s->stage[k].n;
        size_t at = 0;
        char what[32];
        if (pc[i] == s->stage[i].n) {
                /* the chain ends at i, finished: its predecessor in the chain waits forever */
                int w = first;
                while (s->stage[w].a[pc[w]].peer != i) w = s->stage[w].a[pc[w]].peer;
                dt_action_format(&s->stage[w].a[pc[w]], what, sizeof what);
                snprintf(err, errlen, "deadlock: stage %d waits forever at action %d (%s from stage %d), "
                         "which finished without sending it; %d stage%s stuck", w, pc[w], what, i, stuck,
                         stuck == 1 ? "" : "s");
                return;
        }
        at += (size_t)snprintf(err, errlen, "deadlock: ");
        int k = i;
        do {
                const dt_action *a = &s->stage[k].a[pc[k]];
                dt_action_format(a, what, sizeof what);
                if (at < errlen)
                        at += (size_t)snprintf(err + at, errlen - at, "%sstage %d waits forever at action %d "
                                               "(%s from stage %d)", k == i ? "" : ", ", k, pc[k], what, a->peer);
                k = a->peer;
        } while (k != i);
        if (at < errlen)
                snprintf(err + at, errlen - at, "; %d stage%s stuck", stuck, stuck == 1 ? "" : "s");
}

int dt_schedule_simulate(const dt_schedule *s, const dt_stage_cost *cost, double p2p,
                         dt_schedule_sim *r, char *err, size_t errlen)
{
        dt_sim_link lk = { .p2p = p2p };
        return dt_schedule_simulate_link(s, cost, &lk, r, err, errlen);
}

/* When the tail of message x to stage i (which reached the receive at 'at') starts: the first part
 * there and the answer back, then the sender's first moment inside MPI. -1 when the sender has not
 * been played that far yet. strict: a sender blocked at a receive whose message is already due
 * before then will run on, so its wait does not count (off only to break a standstill). */
static double tail_start(const msg *x, double at, const dt_sim_link *lk, const in_mpi *mp, const inbox *in,
                         const dt_schedule *s, const int *pc, int strict)
{
        double T = DT_MAX(at, x->arrive) + lk->ack;
        const in_mpi *m = &mp[x->from];
        for (int k = 0; k < m->n; k++)
                if (m->b[k] >= T) return DT_MAX(m->a[k], T);
        if (m->open < 0) return -1;
        const dt_stage_actions *st = &s->stage[x->from];
        if (strict && pc[x->from] < st->n) {
                const dt_action *a = &st->a[pc[x->from]];
                int k = find(&in[x->from], a->kind == DT_ACT_RECV_GRAD, a->peer, a->mb, msg_to(s, x->from, a));
                if (k >= 0 && !in[x->from].m[k].tail && in[x->from].m[k].arrive < T) return -1;
        }
        return DT_MAX(m->open, T);
}

/* The lists' own sanity, so the simulator's loop needs no checks: every action of one of the
 * schedule's micro-batches, every message to or from another stage. -1 with err set when not. */
static int check_actions(const dt_schedule *s, char *err, size_t errlen)
{
        int p = s->nstages;
        for (int i = 0; i < p; i++)
                for (int j = 0; j < s->stage[i].n; j++) {
                        const dt_action *a = &s->stage[i].a[j];
                        char what[32];
                        dt_action_format(a, what, sizeof what);
                        if (a->mb < 0 || a->mb >= s->nmicro || (int)a->kind < 0 ||
                            (int)a->kind > DT_ACT_RECV_GRAD || a->chunk < 0 || a->chunk >= s->nchunks) {
                                snprintf(err, errlen, "stage %d, action %d (%s): not an action of "
                                         "%d micro-batches", i, j, what, s->nmicro);
                                return -1;
                        }
                        /* with chunks a message may stay on its stage (a zb-v turn, one stage) */
                        if (!is_compute(a->kind) && (a->peer < 0 || a->peer >= p ||
                                                     (a->peer == i && s->nchunks == 1))) {
                                snprintf(err, errlen, "stage %d, action %d (%s): peer %d is not another "
                                         "stage", i, j, what, a->peer);
                                return -1;
                        }
                }
        return 0;
}

/* The simulator's state: each stage's clock t and next action pc, its inbox and its spans inside
 * MPI, and when each link from stage i to stage j is next free (link[i * p + j]). */
typedef struct sim_state {
        const dt_schedule *s;
        const dt_stage_cost *cost;
        const dt_sim_link *lk;
        dt_schedule_sim *r;
        int p;
        double t[DT_SCHEDULE_MAX_STAGES];
        int pc[DT_SCHEDULE_MAX_STAGES];
        inbox *in;
        in_mpi *mp;
        double *link;
        /* K steps back to back (dt_schedule_simulate_steps): stage i's list is K copies of its step
         * of per[i] actions, and the stage's clock at the end of step k goes to ends[k p + i] */
        const int *per;
        double *ends;
} sim_state;

/* Stage i posts send a: it leaves when the link is free and the stage spends lk->send inside MPI. */
static void play_send(sim_state *q, int i, const dt_action *a)
{
        const dt_sim_link *lk = q->lk;
        if (a->peer == i) {     /* a chunk's message to its own stage: a copy, there at once */
                post(&q->in[i], (msg){ .data = a->kind == DT_ACT_SEND_GRAD, .from = i, .mb = a->mb,
                                       .to = msg_to(q->s, i, a), .arrive = q->t[i] });
                return;
        }
        double *free_at = &q->link[(size_t)i * q->p + a->peer], start = DT_MAX(q->t[i], *free_at);
        *free_at = start + lk->busy;
        post(&q->in[a->peer], (msg){ .data = a->kind == DT_ACT_SEND_GRAD, .from = i, .mb = a->mb,
                                     .to = msg_to(q->s, i, a), .arrive = start + lk->p2p, .tail = lk->tail > 0 });
        span(&q->mp[i], q->t[i], q->t[i] + lk->send);
        q->t[i] += lk->send;
}

/* Stage i plays receive a: 0 when its message is not there yet, or its tail's sender has not been
 * played far enough (*held set); else the stage waits for it inside MPI and 1. */
static int play_recv(sim_state *q, int i, const dt_action *a, int strict, int *held)
{
        const dt_sim_link *lk = q->lk;
        int k = find(&q->in[i], a->kind == DT_ACT_RECV_GRAD, a->peer, a->mb, msg_to(q->s, i, a));
        if (k < 0) return 0;
        msg *x = &q->in[i].m[k];
        double arrive = x->arrive;
        if (x->tail) {
                double go = tail_start(x, q->t[i], lk, q->mp, q->in, q->s, q->pc, strict);
                if (go < 0) {
                        *held = 1;
                        return 0;
                }
                double *free_at = &q->link[(size_t)a->peer * q->p + i];
                go = DT_MAX(go, *free_at);
                *free_at = DT_MAX(*free_at, go + lk->tail_busy);
                arrive = go + lk->tail;
        }
        drop(&q->in[i], k);
        span(&q->mp[i], q->t[i], DT_MAX(q->t[i], arrive));
        q->t[i] = DT_MAX(q->t[i], arrive) + lk->recv;
        q->mp[i].open = -1;
        return 1;
}

/* Stage i runs until it finishes or waits on a message; 1 when it played any action. */
static int run_stage(sim_state *q, int i, int strict, int *held)
{
        const dt_stage_actions *st = &q->s->stage[i];
        int moved = 0;
        while (q->pc[i] < st->n) {
                const dt_action *a = &st->a[q->pc[i]];
                switch (a->kind) {
                case DT_ACT_FORWARD:
                case DT_ACT_BACKWARD_INPUT:
                case DT_ACT_BACKWARD_WEIGHT: {
                        const dt_stage_cost *c = &q->cost[dt_schedule_vstage(q->s->kind, q->p, q->s->nchunks, i, a->chunk)];
                        q->t[i] += time_of(c, a->kind);
                        q->r->busy[i] += time_of(c, a->kind);
                        break;
                }
                case DT_ACT_SEND_ACT:
                case DT_ACT_SEND_GRAD:
                        play_send(q, i, a);
                        break;
                case DT_ACT_RECV_ACT:
                case DT_ACT_RECV_GRAD:
                        if (!play_recv(q, i, a, strict, held)) {
                                q->mp[i].open = q->t[i];
                                return moved;
                        }
                        break;
                }
                q->pc[i]++;
                moved = 1;
                if (q->per && q->pc[i] % q->per[i] == 0) {
                        /* its step done: the wait for its sends (an instant inside MPI), its own
                         * update (free here), and on at once into the next step's first action */
                        q->ends[(size_t)(q->pc[i] / q->per[i] - 1) * q->p + i] = q->t[i];
                        span(&q->mp[i], q->t[i], q->t[i]);
                }
        }
        q->mp[i].open = q->t[i];        /* done: the end-of-step wait for its sends */
        return moved;
}

/* After the play: -1 with err set when a stage never finished (a deadlock) or a message was
 * never received. */
static int check_finished(const sim_state *q, char *err, size_t errlen)
{
        for (int i = 0; i < q->p; i++)
                if (q->pc[i] < q->s->stage[i].n) {
                        explain_deadlock(q->s, q->pc, i, err, errlen);
                        return -1;
                }
        for (int i = 0; i < q->p; i++) {
                if (q->in[i].n == 0) continue;
                const msg *x = &q->in[i].m[0];
                snprintf(err, errlen, "stage %d sends %s%d to stage %d, which never receives it",
                         x->from, x->data ? "sg" : "sa", x->mb, i);
                return -1;
        }
        return 0;
}

/* Plays s into r (busy, idle, makespan, bubble) and leaves each stage's final clock in t; with per
 * and ends, marks each stage's step ends (sim_state). */
static int play(const dt_schedule *s, const dt_stage_cost *cost, const dt_sim_link *lk, const int *per,
                double *ends, dt_schedule_sim *r, char *err, size_t errlen)
{
        int p = s->nstages;
        memset(r, 0, sizeof *r);
        if (check_actions(s, err, errlen) < 0) return -1;
        sim_state q = { .s = s, .cost = cost, .lk = lk, .r = r, .p = p, .per = per, .ends = ends };
        q.in = dt_calloc((size_t)p, sizeof *q.in);
        q.mp = dt_calloc((size_t)p, sizeof *q.mp);
        for (int i = 0; i < p; i++) q.mp[i].open = -1;
        /* when the link from stage i to stage j is next free: a stage's sends on it are visited in
         * its own order, which is their time order, so this too is independent of the visiting */
        q.link = dt_calloc((size_t)p * (size_t)p, sizeof *q.link);
        /* Each stage runs until it waits on a message not yet sent (or a tail whose sender has not
         * been played far enough); sends never wait, so a pass in which no stage moves means every
         * unfinished stage waits forever - unless some wait only on a sender's progress, which a
         * pass without the strict check then settles. A receive takes its send's own time. */
        int moved = 1, strict = 1;
        while (moved) {
                moved = 0;
                int held = 0;
                for (int i = 0; i < p; i++)
                        if (run_stage(&q, i, strict, &held)) moved = 1;
                if (moved) strict = 1;
                else if (held && strict) strict = 0, moved = 1;
        }
        int rc = check_finished(&q, err, errlen);
        for (int i = 0; i < p; i++) free(q.in[i].m), free(q.mp[i].a), free(q.mp[i].b);
        free(q.in);
        free(q.mp);
        free(q.link);
        if (rc != 0) return rc;

        double all = 0;
        for (int i = 0; i < p; i++) {
                r->makespan = DT_MAX(r->makespan, q.t[i]);
                all += r->busy[i];
        }
        for (int i = 0; i < p; i++) r->idle[i] = r->makespan - r->busy[i];
        r->bubble = r->makespan > 0 ? 1.0 - all / (p * r->makespan) : 0.0;
        return 0;
}

int dt_schedule_simulate_link(const dt_schedule *s, const dt_stage_cost *cost, const dt_sim_link *lk,
                              dt_schedule_sim *r, char *err, size_t errlen)
{
        return play(s, cost, lk, NULL, NULL, r, err, errlen);
}

/* s's lists nsteps times over, step k's micro-batch j numbered k m + j: a receive then matches the
 * send of its own step, as MPI's order per sender and tag matches a tag repeated every step (each
 * step's receives of one key follow the last step's in the receiver's order, its sends in the
 * sender's). Returns 0, or -1 with err set when a stage has no actions. */
static int repeat(const dt_schedule *s, int nsteps, dt_schedule *k, int *per, char *err, size_t errlen)
{
        int p = s->nstages, m = s->nmicro;
        *k = (dt_schedule){ .kind = s->kind, .nstages = p, .nmicro = nsteps * m, .nchunks = s->nchunks };
        k->stage = dt_calloc((size_t)p, sizeof *k->stage);
        for (int i = 0; i < p; i++) {
                const dt_stage_actions *a = &s->stage[i];
                if ((per[i] = a->n) == 0) {
                        snprintf(err, errlen, "stage %d has no actions", i);
                        return -1;
                }
                dt_stage_actions *b = &k->stage[i];
                b->n = b->cap = nsteps * a->n;
                b->nslots = a->nslots;
                b->a = dt_malloc((size_t)b->n * sizeof *b->a);
                for (int st = 0; st < nsteps; st++)
                        for (int j = 0; j < a->n; j++) {
                                b->a[(size_t)st * a->n + j] = a->a[j];
                                b->a[(size_t)st * a->n + j].mb += st * m;
                        }
        }
        return 0;
}

int dt_schedule_simulate_steps(const dt_schedule *s, const dt_stage_cost *cost, const dt_sim_link *lk,
                               int nsteps, dt_schedule_steady *r, char *err, size_t errlen)
{
        int p = s->nstages;
        memset(r, 0, sizeof *r);
        if (nsteps < 1 || nsteps > DT_SCHEDULE_MAX_STEPS || (long)nsteps * s->nmicro > 65536) {
                snprintf(err, errlen, "steps to simulate must be 1 to %d, and at most 65536 micro-batches in "
                         "all, got %d x %d", DT_SCHEDULE_MAX_STEPS, nsteps, s->nmicro);
                return -1;
        }
        if (check_actions(s, err, errlen) < 0) return -1;
        dt_schedule k;
        int per[DT_SCHEDULE_MAX_STAGES];
        double *ends = dt_calloc((size_t)nsteps * p, sizeof *ends);
        dt_schedule_sim all;
        int rc = repeat(s, nsteps, &k, per, err, errlen);
        if (rc == 0 && (rc = play(&k, cost, lk, per, ends, &all, err, errlen)) != 0) {
                /* name the step: the message above numbers micro-batches over all of them */
                char why[512];
                snprintf(why, sizeof why, "%s", err);
                snprintf(err, errlen, "%d steps back to back (step k's micro-batch j is k x %d + j): %s", nsteps,
                         s->nmicro, why);
        }
        dt_schedule_free(&k);
        if (rc == 0) {
                double e1 = 0, eK = 0, sum = 0;
                for (int i = 0; i < p; i++) {
                        e1 = DT_MAX(e1, ends[i]);
                        eK = DT_MAX(eK, ends[(size_t)(nsteps - 1) * p + i]);
                        r->busy[i] = all.busy[i] / nsteps;
                        sum += r->busy[i];
                }
                r->nsteps = nsteps;
                r->first = e1;
                r->makespan = all.makespan;
                r->period = nsteps > 1 ? (eK - e1) / (nsteps - 1) : e1;
                for (int i = 0; i < p; i++) r->idle[i] = r->period - r->busy[i];
                r->bubble = r->period > 0 ? 1.0 - sum / (p * r->period) : 0.0;
                r->amortised = all.bubble;
        }
        free(ends);
        return rc;
}

double dt_schedule_bubble_theory(dt_schedule_kind kind, int nstages, int nmicro,
                                 double f, double b, double w)
{
        int v = dt_schedule_is_v(kind) || kind == DT_SCHEDULE_INTERLEAVED ? 2 : 1;
        return dt_schedule_bubble_theory_v(kind, nstages, v, nmicro, f, b, w);
}

double dt_schedule_bubble_theory_v(dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                                   double f, double b, double w)
{
        double p = nstages, m = nmicro, work = nchunks * m * (f + b + w), idle;
        if (kind == DT_SCHEDULE_V_HALF) return dt_schedule_vhalf_bubble(nstages, nmicro, f, b, w);
        if (kind == DT_SCHEDULE_ZB_V)
                idle = (p - 1) * f;
        else if (kind == DT_SCHEDULE_ZB_H1)
                idle = (p - 1) * (f + b) - (DT_MIN(nmicro, nstages) - 1) * w;
        else
                idle = (p - 1) * (f + b + w);
        return work + idle > 0 ? idle / (work + idle) : 0.0;
}

/* The steady state's steps to play: the play repeats itself from its second step on (each step's
 * spacing equal, tests/unit/test_schedule_steady.c), so a few suffice. */
#define STEADY_STEPS 4

double dt_schedule_bubble_steady_v(dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                                   double f, double b, double w)
{
        if (kind != DT_SCHEDULE_ZB_V) return dt_schedule_bubble_theory_v(kind, nstages, nchunks, nmicro, f, b, w);
        if (f == b && b == w && nmicro >= 2 * nstages - 1) return 0.0;
        dt_schedule s;
        dt_stage_cost c[DT_SCHEDULE_MAX_STAGES];
        dt_sim_link lk = { 0 };
        dt_schedule_steady r;
        char err[256];
        for (int i = 0; i < DT_SCHEDULE_MAX_STAGES; i++) c[i] = (dt_stage_cost){ f, b, w };
        if (dt_schedule_build_v(&s, kind, nstages, nchunks, nmicro, err, sizeof err) != 0) return -1;
        int rc = dt_schedule_simulate_steps(&s, c, &lk, STEADY_STEPS, &r, err, sizeof err);
        dt_schedule_free(&s);
        DT_ASSERT(rc == 0);     /* the builders' lists never deadlock (the unit tests prove it) */
        return r.bubble;
}
