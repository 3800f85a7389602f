/* parallel/schedule_vhalf.c - V-Half's compute order (schedule.h): the V placement of zb-v, each
 * chunk's micro-batches in flight capped so that a stage holds p + 1 half-stage ones in all, the
 * order found by playing every stage at unit F, B and W times and taking the first ready step. */
#include <limits.h>
#include <stdlib.h>

#include "parallel/schedule.h"
#include "util/common.h"

/* A micro-batch stays on chunk 0 of stage r from its F until its W: through the rest of the V and
 * back, about 4p - 2r + 1 steps; on chunk 1 through the r virtual stages after it and back, about
 * 2r + 3. The p + 1 slots go to the chunks in that proportion (each at least one), so that both
 * arms keep up with one micro-batch every 6 steps where they can. */
int dt_schedule_vhalf_cap(int nstages, int stage, int chunk)
{
        DT_ASSERT(nstages >= 1 && stage >= 0 && stage < nstages && (chunk == 0 || chunk == 1));
        int T = nstages + 1, l0 = 4 * nstages - 2 * stage + 1, sum = 4 * nstages + 4;
        int c0 = (2 * T * l0 + sum) / (2 * sum);        /* T l0 / sum, rounded */
        c0 = DT_MAX(1, DT_MIN(T - 1, c0));
        return chunk == 0 ? c0 : T - c0;
}

typedef struct play {
        int p, m, S;
        int *fdone, *bdone;     /* [S * m]: the tick a virtual stage's F (B) of mb ends; INT_MAX before */
        int *nf, *nb, *nw;      /* [S]: the F's, B's and W's a virtual stage has started, in mb order */
} play;

static int vstage(const play *q, int st, int c)
{
        return c == 0 ? st : q->S - 1 - st;
}

/* Whether stage st can start kind on chunk c at tick t: its micro-batch's input there (the F before
 * it, the B after it, its own B), and for F a free slot under the cap. */
static int ready(const play *q, int st, int c, dt_action_kind kind, int t)
{
        int v = vstage(q, st, c), m = q->m;
        switch (kind) {
        case DT_ACT_FORWARD:
                return q->nf[v] < m && q->nf[v] - q->nw[v] < dt_schedule_vhalf_cap(q->p, st, c) &&
                       (v == 0 || q->fdone[(size_t)(v - 1) * m + q->nf[v]] <= t);
        case DT_ACT_BACKWARD_INPUT:
                return q->nb[v] < q->nf[v] &&
                       (v == q->S - 1 ? q->fdone[(size_t)v * m + q->nb[v]] : q->bdone[(size_t)(v + 1) * m + q->nb[v]]) <= t;
        default:
                return q->nw[v] < q->nb[v] && q->bdone[(size_t)v * m + q->nw[v]] <= t;
        }
}

/* The steps in the order a free stage prefers them: F on chunk 1 first (the V's way back, which
 * brings a micro-batch to its loss and its backward soonest), the B's next (they lead to the W's
 * that free slots, and the stages before wait on them), chunk 0's F, the W's last: they run when the
 * cap holds the F's back or nothing else is ready. */
static const struct { dt_action_kind kind; int chunk; } prefer[6] = {
        { DT_ACT_FORWARD, 1 }, { DT_ACT_BACKWARD_INPUT, 1 }, { DT_ACT_BACKWARD_INPUT, 0 },
        { DT_ACT_FORWARD, 0 }, { DT_ACT_BACKWARD_WEIGHT, 1 }, { DT_ACT_BACKWARD_WEIGHT, 0 },
};

/* Every stage's lists are this play's order, in which each step starts after the steps it depends
 * on have ended: run with blocking receives they cannot wait on each other in a cycle. Nor can the
 * play stall with every stage idle: take the oldest micro-batch j without its B on virtual stage
 * 0 and the highest virtual stage u still lacking j's B; that B is ready, or j's F has not reached
 * u, and then the first virtual stage j's F has not reached holds no micro-batch (they all have
 * had their W, none being pending with every stage idle) and can take j. */
void dt_schedule_vhalf_order(int nstages, int nmicro, dt_vhalf_step *out)
{
        int p = nstages, m = nmicro, S = 2 * p;
        play q = { .p = p, .m = m, .S = S };
        q.fdone = dt_malloc((size_t)S * m * sizeof *q.fdone);
        q.bdone = dt_malloc((size_t)S * m * sizeof *q.bdone);
        for (size_t i = 0; i < (size_t)S * m; i++) q.fdone[i] = q.bdone[i] = INT_MAX;
        q.nf = dt_calloc((size_t)S, sizeof *q.nf);
        q.nb = dt_calloc((size_t)S, sizeof *q.nb);
        q.nw = dt_calloc((size_t)S, sizeof *q.nw);
        int *busy = dt_calloc((size_t)p, sizeof *busy), *len = dt_calloc((size_t)p, sizeof *len);
        long left = 6L * p * m;
        for (int t = 0; left > 0; t++) {
                int running = 0;
                for (int st = 0; st < p; st++) {
                        if (busy[st] > t) {
                                running = 1;
                                continue;
                        }
                        for (int k = 0; k < 6; k++) {
                                int c = prefer[k].chunk, v = vstage(&q, st, c);
                                dt_action_kind kind = prefer[k].kind;
                                if (!ready(&q, st, c, kind, t)) continue;
                                int mb = kind == DT_ACT_FORWARD ? q.nf[v]++ : kind == DT_ACT_BACKWARD_INPUT ? q.nb[v]++ : q.nw[v]++;
                                if (kind == DT_ACT_FORWARD) q.fdone[(size_t)v * m + mb] = t + 1;
                                if (kind == DT_ACT_BACKWARD_INPUT) q.bdone[(size_t)v * m + mb] = t + 1;
                                out[(size_t)st * 6 * m + len[st]++] = (dt_vhalf_step){ kind, c, mb };
                                busy[st] = t + 1;
                                running = 1;
                                left--;
                                break;
                        }
                }
                DT_ASSERT(running);     /* the comment above: the play never stalls */
        }
        free(q.fdone), free(q.bdone), free(q.nf), free(q.nb), free(q.nw), free(busy), free(len);
}

double dt_schedule_vhalf_bubble(int nstages, int nmicro, double f, double b, double w)
{
        dt_schedule s;
        char err[256];
        if (dt_schedule_build_v(&s, DT_SCHEDULE_V_HALF, nstages, 2, nmicro, err, sizeof err) < 0) return 0.0;
        dt_stage_cost c[DT_SCHEDULE_MAX_STAGES];
        for (int i = 0; i < 2 * nstages; i++) c[i] = (dt_stage_cost){ f, b, w };
        dt_schedule_sim r;
        int rc = dt_schedule_simulate(&s, c, 0, &r, err, sizeof err);
        DT_ASSERT(rc == 0);     /* never stuck: dt_schedule_vhalf_order says why */
        dt_schedule_free(&s);
        return r.bubble;
}
