/* tests/unit/test_schedule.c - Check tests of parallel/schedule.c: for every kind, p <= 8 stages
 * and m <= 32 micro-batches, the lists keep schedule.h's contract (checked here by an oracle of
 * its own, not by the module), run without deadlock (one step and two back to back), have the
 * slot counts and the bubble each kind should have; hand-built broken lists are reported (deadlock, a send nobody receives, a W with no
 * forward); names, printing and range errors. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"

#define MAXP 8
#define MAXM 32

static const dt_schedule_kind kinds[] = { DT_SCHEDULE_GPIPE, DT_SCHEDULE_1F1B, DT_SCHEDULE_ZB_H1 };
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* ---- helpers ---- */

static void build(dt_schedule *s, dt_schedule_kind k, int p, int m)
{
        char err[256] = "";
        ck_assert_msg(dt_schedule_build(s, k, p, m, err, sizeof err) == 0, "%s p=%d m=%d: %s",
                      dt_schedule_kind_name(k), p, m, err);
}

static void unit_costs(dt_stage_cost *c, int p, double f, double b, double w)
{
        for (int i = 0; i < p; i++) c[i] = (dt_stage_cost){ f, b, w };
}

static int simulate(const dt_schedule *s, const dt_stage_cost *c, double p2p, dt_schedule_sim *r,
                    char *err, size_t len)
{
        err[0] = 0;
        return dt_schedule_simulate(s, c, p2p, r, err, len);
}

/* Where on its stage each action of each micro-batch sits; -1 if absent. */
typedef struct where {
        int f, b, w, ra, sa, rg, sg;
} where;

/* The oracle: schedule.h's contract for stage st of s, independently of the module. Returns the
 * peak number of micro-batches in flight (F done, W not) on the stage. */
static int check_stage(const dt_schedule *s, int st)
{
        int p = s->nstages, m = s->nmicro;
        const char *name = dt_schedule_kind_name(s->kind);
        const dt_stage_actions *sa = &s->stage[st];
        where at[MAXM];
        memset(at, -1, sizeof at);
        int slot_owner[MAXM];           /* slot -> micro-batch in flight in it, or -1 */
        for (int k = 0; k < MAXM; k++) slot_owner[k] = -1;
        int inflight = 0, peak = 0;
        for (int j = 0; j < sa->n; j++) {
                const dt_action *a = &sa->a[j];
                ck_assert_msg(a->mb >= 0 && a->mb < m, "%s p=%d m=%d stage %d action %d: mb %d",
                              name, p, m, st, j, a->mb);
                where *x = &at[a->mb];
                int *pos = NULL, want_peer = -1;
                switch (a->kind) {
                case DT_ACT_FORWARD: pos = &x->f; break;
                case DT_ACT_BACKWARD_INPUT: pos = &x->b; break;
                case DT_ACT_BACKWARD_WEIGHT: pos = &x->w; break;
                case DT_ACT_RECV_ACT: pos = &x->ra; want_peer = st - 1; break;
                case DT_ACT_SEND_ACT: pos = &x->sa; want_peer = st + 1; break;
                case DT_ACT_RECV_GRAD: pos = &x->rg; want_peer = st + 1; break;
                case DT_ACT_SEND_GRAD: pos = &x->sg; want_peer = st - 1; break;
                }
                ck_assert_ptr_nonnull(pos);
                ck_assert_msg(*pos < 0, "%s p=%d m=%d stage %d: action %d (kind %d) repeats micro-batch %d",
                              name, p, m, st, j, a->kind, a->mb);
                *pos = j;
                ck_assert_msg(a->peer == want_peer && (want_peer == -1 || (want_peer >= 0 && want_peer < p)),
                              "%s p=%d m=%d stage %d action %d: peer %d, want %d", name, p, m, st, j,
                              a->peer, want_peer);
                /* slots: F takes a free one, B and W work in F's, W gives it back */
                if (a->kind == DT_ACT_FORWARD) {
                        ck_assert_int_ge(a->slot, 0);
                        ck_assert_int_lt(a->slot, sa->nslots);
                        ck_assert_msg(slot_owner[a->slot] < 0, "%s p=%d m=%d stage %d: F%d takes slot %d "
                                      "of micro-batch %d", name, p, m, st, a->mb, a->slot, slot_owner[a->slot]);
                        slot_owner[a->slot] = a->mb;
                        peak = inflight + 1 > peak ? inflight + 1 : peak;
                        inflight++;
                } else if (a->kind == DT_ACT_BACKWARD_INPUT || a->kind == DT_ACT_BACKWARD_WEIGHT) {
                        ck_assert_int_ge(x->f, 0);
                        ck_assert_int_eq(a->slot, sa->a[x->f].slot);
                        if (a->kind == DT_ACT_BACKWARD_WEIGHT) {
                                slot_owner[a->slot] = -1;
                                inflight--;
                        }
                } else {
                        ck_assert_int_eq(a->slot, -1);
                }
        }
        for (int mb = 0; mb < m; mb++) {
                const where *x = &at[mb];
                /* exactly one F, B and W of every micro-batch, in that order */
                ck_assert_msg(x->f >= 0 && x->b > x->f && x->w > x->b, "%s p=%d m=%d stage %d mb %d: "
                              "F at %d, B at %d, W at %d", name, p, m, st, mb, x->f, x->b, x->w);
                if (st > 0) {
                        ck_assert_msg(x->ra >= 0 && x->ra < x->f, "%s p=%d m=%d stage %d: F%d before its input",
                                      name, p, m, st, mb);
                        ck_assert_msg(x->sg > x->b, "%s p=%d m=%d stage %d: sg%d not after B%d", name, p, m,
                                      st, mb, mb);
                } else {
                        ck_assert_int_eq(x->ra, -1);
                        ck_assert_int_eq(x->sg, -1);
                }
                if (st < p - 1) {
                        ck_assert_msg(x->sa == x->f + 1, "%s p=%d m=%d stage %d: sa%d not right after F%d",
                                      name, p, m, st, mb, mb);
                        ck_assert_msg(x->rg >= 0 && x->rg < x->b, "%s p=%d m=%d stage %d: B%d before its "
                                      "gradient", name, p, m, st, mb);
                } else {
                        ck_assert_int_eq(x->sa, -1);
                        ck_assert_int_eq(x->rg, -1);
                }
                /* a combined backward: W right after B, the gradient sent after both */
                if (s->kind != DT_SCHEDULE_ZB_H1) {
                        ck_assert_int_eq(x->w, x->b + 1);
                        if (st > 0) ck_assert_int_eq(x->sg, x->w + 1);
                } else {
                        if (st > 0) ck_assert_int_eq(x->sg, x->b + 1);
                        /* W's in micro-batch order, as 1f1b's: the weight gradients add up alike */
                        if (mb > 0) ck_assert_msg(x->w > at[mb - 1].w, "%s p=%d m=%d stage %d: W%d before W%d",
                                                  name, p, m, st, mb, mb - 1);
                }
        }
        ck_assert_int_eq(sa->n, 3 * m + (st > 0) * 2 * m + (st < p - 1) * 2 * m);
        ck_assert_int_eq(inflight, 0);
        return peak;
}

/* Every message has its partner: stage st's sa(mb) is stage st+1's ra(mb), and st+1's sg(mb) is
 * st's rg(mb) (check_stage saw each at most once per stage, with neighbour peers). */
static void check_pairs(const dt_schedule *s)
{
        int p = s->nstages, m = s->nmicro;
        static int cnt[MAXP][4][MAXM];  /* [stage][sa, ra, sg, rg][mb] */
        memset(cnt, 0, sizeof cnt);
        for (int st = 0; st < p; st++)
                for (int j = 0; j < s->stage[st].n; j++) {
                        const dt_action *a = &s->stage[st].a[j];
                        int k = a->kind == DT_ACT_SEND_ACT ? 0 : a->kind == DT_ACT_RECV_ACT ? 1 :
                                a->kind == DT_ACT_SEND_GRAD ? 2 : a->kind == DT_ACT_RECV_GRAD ? 3 : -1;
                        if (k >= 0) cnt[st][k][a->mb]++;
                }
        for (int st = 0; st + 1 < p; st++)
                for (int mb = 0; mb < m; mb++) {
                        ck_assert_int_eq(cnt[st][0][mb], 1);
                        ck_assert_int_eq(cnt[st + 1][1][mb], 1);
                        ck_assert_int_eq(cnt[st + 1][2][mb], 1);
                        ck_assert_int_eq(cnt[st][3][mb], 1);
                }
        for (int mb = 0; mb < m; mb++) {
                ck_assert_int_eq(cnt[p - 1][0][mb], 0);
                ck_assert_int_eq(cnt[0][1][mb], 0);
                ck_assert_int_eq(cnt[0][2][mb], 0);
                ck_assert_int_eq(cnt[p - 1][3][mb], 0);
        }
}

/* ---- the contract, every kind, p <= 8, m <= 32 ---- */

START_TEST(test_contract)
{
        dt_stage_cost c[MAXP];
        unit_costs(c, MAXP, 1, 1, 1);
        for (int k = 0; k < NKINDS; k++)
                for (int p = 1; p <= MAXP; p++)
                        for (int m = 1; m <= MAXM; m++) {
                                dt_schedule s;
                                build(&s, kinds[k], p, m);
                                ck_assert_int_eq(s.nstages, p);
                                ck_assert_int_eq(s.nmicro, m);
                                for (int st = 0; st < p; st++) {
                                        int peak = check_stage(&s, st);
                                        ck_assert_int_eq(s.stage[st].nslots, peak);
                                }
                                check_pairs(&s);
                                dt_schedule_sim r;
                                char err[512];
                                ck_assert_msg(simulate(&s, c, 0, &r, err, sizeof err) == 0, "%s p=%d m=%d: %s",
                                              dt_schedule_kind_name(kinds[k]), p, m, err);
                                /* and with slow messages: blocking rules do not depend on timing */
                                ck_assert_msg(simulate(&s, c, 0.7, &r, err, sizeof err) == 0, "%s p=%d m=%d: %s",
                                              dt_schedule_kind_name(kinds[k]), p, m, err);
                                /* and two steps back to back, no barrier between them */
                                dt_schedule_steady st;
                                dt_sim_link lk = { .p2p = 0.7 };
                                ck_assert_msg(dt_schedule_simulate_steps(&s, c, &lk, 2, &st, err, sizeof err) == 0,
                                              "%s p=%d m=%d: %s", dt_schedule_kind_name(kinds[k]), p, m, err);
                                dt_schedule_free(&s);
                        }
}
END_TEST

/* Slots per stage: gpipe holds every micro-batch, 1f1b min(m, p - s) (Megatron's warm-up plus
 * one), zb-h1 min(m, p) on every stage: its deferred W's hold their micro-batch, so later stages
 * hold more than under 1f1b, but never more than 1f1b's worst stage (stage 0), the paper's "same
 * peak memory as 1F1B". */
START_TEST(test_slots)
{
        for (int p = 1; p <= MAXP; p++)
                for (int m = 1; m <= MAXM; m++) {
                        dt_schedule g, o, z;
                        build(&g, DT_SCHEDULE_GPIPE, p, m);
                        build(&o, DT_SCHEDULE_1F1B, p, m);
                        build(&z, DT_SCHEDULE_ZB_H1, p, m);
                        int max_o = 0, max_z = 0;
                        int want_z = m < p ? m : p;
                        for (int st = 0; st < p; st++) {
                                int want_o = m < p - st ? m : p - st;
                                ck_assert_int_eq(g.stage[st].nslots, m);
                                ck_assert_int_eq(o.stage[st].nslots, want_o);
                                ck_assert_int_eq(z.stage[st].nslots, want_z);
                                max_o = o.stage[st].nslots > max_o ? o.stage[st].nslots : max_o;
                                max_z = z.stage[st].nslots > max_z ? z.stage[st].nslots : max_z;
                        }
                        ck_assert_int_eq(max_z, max_o);
                        dt_schedule_free(&g);
                        dt_schedule_free(&o);
                        dt_schedule_free(&z);
                }
}
END_TEST

/* ---- bubbles ---- */

/* Unit F = B = W, free messages. Accounting: a stage's idle time is the makespan (first action of
 * any stage to the last of any) less its own F, B and W time, leading and trailing gaps included;
 * the bubble is the sum of idle over p * makespan. gpipe and 1f1b: idle (p - 1)(F + B + W) on every
 * stage, so (p - 1) / (m + p - 1) exactly; zb-h1: (p - 1)(F + B) - (min(m, p) - 1) W, the
 * paper's (p - 1)(F + B - W) for m >= p, on every stage, and strictly below 1f1b's. */
START_TEST(test_bubble_unit)
{
        dt_stage_cost c[MAXP];
        unit_costs(c, MAXP, 1, 1, 1);
        for (int p = 1; p <= MAXP; p++)
                for (int m = 1; m <= MAXM; m++) {
                        double frac[NKINDS];
                        for (int k = 0; k < NKINDS; k++) {
                                dt_schedule s;
                                dt_schedule_sim r;
                                char err[512];
                                build(&s, kinds[k], p, m);
                                ck_assert_msg(simulate(&s, c, 0, &r, err, sizeof err) == 0, "%s", err);
                                double idle = kinds[k] == DT_SCHEDULE_ZB_H1
                                              ? 2.0 * (p - 1) - ((m < p ? m : p) - 1)
                                              : 3.0 * (p - 1);
                                ck_assert_msg(r.makespan == 3.0 * m + idle, "%s p=%d m=%d: makespan %g, want %g",
                                              dt_schedule_kind_name(kinds[k]), p, m, r.makespan, 3.0 * m + idle);
                                for (int st = 0; st < p; st++) {
                                        ck_assert(r.busy[st] == 3.0 * m);
                                        ck_assert(r.idle[st] == idle);
                                }
                                double theory = dt_schedule_bubble_theory(kinds[k], p, m, 1, 1, 1);
                                ck_assert_msg(fabs(r.bubble - theory) < 1e-12, "%s p=%d m=%d: bubble %g, theory %g",
                                              dt_schedule_kind_name(kinds[k]), p, m, r.bubble, theory);
                                frac[k] = r.bubble;
                                dt_schedule_free(&s);
                        }
                        double classic = (double)(p - 1) / (m + p - 1);
                        ck_assert(fabs(frac[0] - classic) < 1e-12);
                        ck_assert(fabs(frac[1] - classic) < 1e-12);
                        if (p >= 2) ck_assert_msg(frac[2] < frac[1], "zb-h1 p=%d m=%d: bubble %g not below 1f1b's %g",
                                                  p, m, frac[2], frac[1]);
                        else ck_assert(frac[2] == 0);
                }
}
END_TEST

/* Unequal F, B, W: the theory holds for gpipe and 1f1b at any times, and for zb-h1 while W is no
 * longer than F or B (a longer W no longer fits the gaps it is meant to fill); zb-h1 still never
 * loses to 1f1b. */
START_TEST(test_bubble_times)
{
        static const double t[][3] = {
                { 1, 2, 1 }, { 2, 1, 1 }, { 1, 1, 0.5 }, { 2, 2, 1 }, { 1, 3, 1 }, { 3, 1, 1 }, { 1, 1, 0 },
                { 2, 1, 0.5 },
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
                for (int p = 1; p <= MAXP; p++)
                        for (int m = 1; m <= MAXM; m += 3) {
                                dt_stage_cost c[MAXP];
                                unit_costs(c, p, t[i][0], t[i][1], t[i][2]);
                                double frac[NKINDS];
                                for (int k = 0; k < NKINDS; k++) {
                                        dt_schedule s;
                                        dt_schedule_sim r;
                                        char err[512];
                                        build(&s, kinds[k], p, m);
                                        ck_assert_msg(simulate(&s, c, 0, &r, err, sizeof err) == 0, "%s", err);
                                        double theory = dt_schedule_bubble_theory(kinds[k], p, m, t[i][0],
                                                                                  t[i][1], t[i][2]);
                                        ck_assert_msg(fabs(r.bubble - theory) < 1e-12,
                                                      "%s p=%d m=%d F=%g B=%g W=%g: bubble %g, theory %g",
                                                      dt_schedule_kind_name(kinds[k]), p, m, t[i][0], t[i][1],
                                                      t[i][2], r.bubble, theory);
                                        frac[k] = r.bubble;
                                        dt_schedule_free(&s);
                                }
                                ck_assert(frac[2] <= frac[1]);
                        }
}
END_TEST

/* Messages that take time and stages of unequal speed. gpipe's makespan is exact:
 * (m - 1) F + the p-stage chain of F and of B + W, each hop c: 3(m + p - 1) + 2(p - 1) c with unit
 * times. Whatever the figures, each stage's idle is >= 0 and a slower stage cannot make the step
 * shorter. */
START_TEST(test_sim_costs)
{
        for (int p = 1; p <= MAXP; p++)
                for (int m = 1; m <= MAXM; m += 5) {
                        dt_stage_cost c[MAXP];
                        unit_costs(c, p, 1, 1, 1);
                        dt_schedule s;
                        dt_schedule_sim r;
                        char err[512];
                        build(&s, DT_SCHEDULE_GPIPE, p, m);
                        ck_assert_int_eq(simulate(&s, c, 0.25, &r, err, sizeof err), 0);
                        ck_assert(r.makespan == 3.0 * (m + p - 1) + 2 * (p - 1) * 0.25);
                        dt_schedule_free(&s);
                        for (int k = 0; k < NKINDS; k++) {
                                build(&s, kinds[k], p, m);
                                unit_costs(c, p, 1, 1, 1);
                                dt_schedule_sim base, slow;
                                ck_assert_int_eq(simulate(&s, c, 0, &base, err, sizeof err), 0);
                                c[p / 2] = (dt_stage_cost){ 2, 2, 2 };
                                ck_assert_int_eq(simulate(&s, c, 0.5, &slow, err, sizeof err), 0);
                                ck_assert(slow.makespan >= 6.0 * m);
                                ck_assert(slow.makespan > base.makespan);
                                for (int st = 0; st < p; st++) {
                                        ck_assert(slow.idle[st] >= 0);
                                        ck_assert(slow.busy[st] == (st == p / 2 ? 6.0 : 3.0) * m);
                                }
                                dt_schedule_free(&s);
                        }
                }
}
END_TEST

/* Links that carry one message at a time, by hand: GPipe, 2 stages, 2 micro-batches, f = b = 0.1,
 * messages of 1 s. Free links: a0, a1 arrive at 1.1, 1.2; stage 1 runs F F B B to 1.5, its
 * gradients arrive at 2.4 and 2.5; stage 0 ends at 2.6. Links busy for the whole second: a1
 * waits for a0 (arrives 2.1), stage 1 ends its B's at 2.3 and 2.4, the second gradient waits for
 * the first (arrives 3.3, then 4.3); stage 0 ends at 4.4. */
START_TEST(test_sim_link)
{
        dt_stage_cost c[2];
        unit_costs(c, 2, 0.1, 0.1, 0);
        dt_schedule s;
        dt_schedule_sim r;
        char err[512] = "";
        build(&s, DT_SCHEDULE_GPIPE, 2, 2);
        dt_sim_link free_link = { .p2p = 1.0 }, busy_link = { .p2p = 1.0, .busy = 1.0 };
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &free_link, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 2.6) < 1e-9, "free links: %.12g", r.makespan);
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &busy_link, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 4.4) < 1e-9, "busy links: %.12g", r.makespan);
        ck_assert_int_eq(simulate(&s, c, 1.0, &r, err, sizeof err), 0);      /* the old call: free links */
        ck_assert_msg(fabs(r.makespan - 2.6) < 1e-9, "%.12g", r.makespan);
        /* each send holds its own stage 0.3 s (free links): a0 leaves at 0.1 (arrives 1.1), F1 runs
         * 0.4-0.5, a1 leaves at 0.5 (1.5); stage 1 runs F0 1.1-1.2, F1 1.5-1.6, B 1.6-1.7, sends
         * (arrives 2.7) to 2.0, B to 2.1, sends (3.1); stage 0's last B ends at 3.2 */
        dt_sim_link costly = { .p2p = 1.0, .send = 0.3 };
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &costly, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 3.2) < 1e-9, "send cost: %.12g", r.makespan);
        /* each receive holds its stage 0.2 s once the message is there (free links): stage 1 unpacks
         * a0 to 1.3 and a1 to 1.6, runs F1 to 1.7 and its B's to 1.8 and 1.9, the gradients arrive
         * at 2.8 and 2.9; stage 0 unpacks them to 3.0 and 3.2 or 3.3, and its last B ends at 3.4 */
        dt_sim_link unpack = { .p2p = 1.0, .recv = 0.2 };
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &unpack, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 3.4) < 1e-9, "receive cost: %.12g", r.makespan);
        dt_schedule_free(&s);
}
END_TEST

/* Stage 0 of a hand-built list of one micro-batch: F, send it to stage 1, its gradient back, B, W. */
static void first_stage_one_mb(dt_schedule *s)
{
        dt_schedule_add(s, 0, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(s, 0, DT_ACT_SEND_ACT, 0, 1);
        dt_schedule_add(s, 0, DT_ACT_RECV_GRAD, 0, 1);
        dt_schedule_add(s, 0, DT_ACT_BACKWARD_INPUT, 0, -1);
        dt_schedule_add(s, 0, DT_ACT_BACKWARD_WEIGHT, 0, -1);
}

/* A message past the eager limit, by hand: 2 stages, 1 micro-batch, stage 0 F sa0 rg0 B W, stage 1
 * ra0 F B sg0 W; f = b = 0.1, stage 1's W 2.0 and stage 0's 0.1; first parts arrive 1 s after
 * their send, the rest 0.5 s after it starts, the receiver's answer takes 0.2 s. a0: first part
 * at 1.1, answer at 1.3, stage 0 waits in rg0 (inside MPI), rest at 1.8; stage 1 then sends g0
 * at 2.0 (first part 3.0) and computes W to 4.0; stage 0's answer reaches it at 3.2, in its W, so
 * the rest leaves at 4.0 and arrives 4.5; stage 0 ends at 4.7. All at once: 3.3. */
START_TEST(test_sim_rendezvous)
{
        dt_schedule s;
        dt_schedule_init(&s, DT_SCHEDULE_ZB_H1, 2, 1);
        first_stage_one_mb(&s);
        dt_schedule_add(&s, 1, DT_ACT_RECV_ACT, 0, 0);
        dt_schedule_add(&s, 1, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_BACKWARD_INPUT, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_SEND_GRAD, 0, 0);
        dt_schedule_add(&s, 1, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        char err[512] = "";
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), 0);
        dt_stage_cost c[2] = { { 0.1, 0.1, 0.1 }, { 0.1, 0.1, 2.0 } };
        dt_schedule_sim r;
        dt_sim_link at_once = { .p2p = 1.0 }, rndv = { .p2p = 1.0, .tail = 0.5, .ack = 0.2 };
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &at_once, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 3.3) < 1e-9, "at once: %.12g", r.makespan);
        ck_assert_int_eq(dt_schedule_simulate_link(&s, c, &rndv, &r, err, sizeof err), 0);
        ck_assert_msg(fabs(r.makespan - 4.7) < 1e-9, "rendezvous: %.12g %s", r.makespan, err);
        ck_assert_msg(fabs(r.busy[0] - 0.3) < 1e-9 && fabs(r.busy[1] - 2.2) < 1e-9, "busy %g %g", r.busy[0], r.busy[1]);
        dt_schedule_free(&s);
}
END_TEST

/* ---- broken lists ---- */

/* Stage 1 waits for mb 0's gradient before passing its activation on, so stage 2 never gets the
 * activation it needs to make that gradient; stage 0 waits on stage 1 behind them. */
START_TEST(test_deadlock_cycle)
{
        dt_schedule s;
        dt_schedule_init(&s, DT_SCHEDULE_1F1B, 3, 1);
        first_stage_one_mb(&s);
        dt_schedule_add(&s, 1, DT_ACT_RECV_ACT, 0, 0);
        dt_schedule_add(&s, 1, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_RECV_GRAD, 0, 2);        /* the bug: before the send */
        dt_schedule_add(&s, 1, DT_ACT_SEND_ACT, 0, 2);
        dt_schedule_add(&s, 1, DT_ACT_BACKWARD_INPUT, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_SEND_GRAD, 0, 0);
        dt_schedule_add(&s, 2, DT_ACT_RECV_ACT, 0, 1);
        dt_schedule_add(&s, 2, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 2, DT_ACT_BACKWARD_INPUT, 0, -1);
        dt_schedule_add(&s, 2, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        dt_schedule_add(&s, 2, DT_ACT_SEND_GRAD, 0, 1);
        char err[512];
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), 0);
        dt_stage_cost c[3];
        unit_costs(c, 3, 1, 1, 1);
        dt_schedule_sim r;
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "deadlock: stage 1 waits forever at action 2 (rg0 from stage 2), "
                         "stage 2 waits forever at action 0 (ra0 from stage 1); 3 stages stuck");
        dt_schedule_free(&s);
}
END_TEST

/* A real schedule with one stage's warm-up wrong: 1f1b p=4 m=8 whose stage 0 waits for mb 0's
 * gradient before its first forward. Stages 0 and 1 wait on each other; 2 and 3 wait behind them. */
START_TEST(test_deadlock_warmup)
{
        dt_schedule s;
        build(&s, DT_SCHEDULE_1F1B, 4, 8);
        dt_stage_actions *st = &s.stage[0];
        int rg = 0;
        while (st->a[rg].kind != DT_ACT_RECV_GRAD) rg++;
        dt_action a = st->a[rg];
        memmove(&st->a[1], &st->a[0], (size_t)rg * sizeof *st->a);
        st->a[0] = a;
        dt_stage_cost c[4];
        unit_costs(c, 4, 1, 1, 1);
        dt_schedule_sim r;
        char err[512];
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "deadlock: ") == err, "%s", err);
        ck_assert_msg(strstr(err, "stage 1 waits forever at action 0 (ra0 from stage 0)") != NULL, "%s", err);
        ck_assert_msg(strstr(err, "stage 0 waits forever at action 0 (rg0 from stage 1)") != NULL, "%s", err);
        ck_assert_msg(strstr(err, "4 stages stuck") != NULL, "%s", err);
        dt_schedule_free(&s);
}
END_TEST

/* The last stage ends without the gradient stage 0 waits for; and a send nobody receives. */
START_TEST(test_unmatched)
{
        dt_stage_cost c[2];
        unit_costs(c, 2, 1, 1, 1);
        dt_schedule_sim r;
        char err[512];
        dt_schedule s;
        dt_schedule_init(&s, DT_SCHEDULE_GPIPE, 2, 1);
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 0, DT_ACT_SEND_ACT, 0, 1);
        dt_schedule_add(&s, 0, DT_ACT_RECV_GRAD, 0, 1);
        dt_schedule_add(&s, 1, DT_ACT_RECV_ACT, 0, 0);
        dt_schedule_add(&s, 1, DT_ACT_FORWARD, 0, -1);
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "deadlock: stage 0 waits forever at action 2 (rg0 from stage 1), which "
                         "finished without sending it; 1 stage stuck");
        s.stage[0].n = 2;                       /* drop the receive: now the send is left over */
        s.stage[1].n = 1;
        dt_schedule_add(&s, 1, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 1, DT_ACT_SEND_GRAD, 0, 0);
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "stage 1 sends sg0 to stage 0, which never receives it");
        dt_schedule_add(&s, 0, DT_ACT_RECV_GRAD, 0, 1);
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), 0);
        ck_assert(r.makespan == 2);
        /* a peer that is not another stage */
        dt_schedule_add(&s, 1, DT_ACT_SEND_ACT, 0, 1);
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), -1);
        ck_assert_str_eq(err, "stage 1, action 3 (sa0): peer 1 is not another stage");
        dt_schedule_free(&s);
}
END_TEST

START_TEST(test_slots_errors)
{
        dt_schedule s;
        char err[256];
        dt_schedule_init(&s, DT_SCHEDULE_ZB_H1, 1, 2);
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 0, -1);
        dt_schedule_add(&s, 0, DT_ACT_BACKWARD_INPUT, 0, -1);
        dt_schedule_add(&s, 0, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        dt_schedule_add(&s, 0, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), -1);
        ck_assert_str_eq(err, "stage 0, action 3 (W0): micro-batch 0 has no forward in flight there");
        s.stage[0].n = 1;
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 0, -1);
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), -1);
        ck_assert_str_eq(err, "stage 0, action 1 (F0): micro-batch 0 is already in flight there");
        s.stage[0].n = 1;
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 1, -1);
        dt_schedule_add(&s, 0, DT_ACT_BACKWARD_WEIGHT, 0, -1);
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 0, -1);  /* reuses slot 0, freed by W0 */
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), 0);
        ck_assert_int_eq(s.stage[0].a[0].slot, 0);
        ck_assert_int_eq(s.stage[0].a[1].slot, 1);
        ck_assert_int_eq(s.stage[0].a[3].slot, 0);
        ck_assert_int_eq(s.stage[0].nslots, 2);
        dt_schedule_add(&s, 0, DT_ACT_FORWARD, 2, -1);
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), -1);
        ck_assert_str_eq(err, "stage 0, action 4 (F2): micro-batch out of 0..1");
        dt_schedule_free(&s);
}
END_TEST

/* ---- names, printing, ranges ---- */

START_TEST(test_names)
{
        for (int k = 0; k < NKINDS; k++) {
                dt_schedule_kind back;
                ck_assert_int_eq(dt_schedule_kind_parse(dt_schedule_kind_name(kinds[k]), &back), 0);
                ck_assert_int_eq(back, kinds[k]);
        }
        ck_assert_str_eq(dt_schedule_kind_name(DT_SCHEDULE_ZB_H1), "zb-h1");
        dt_schedule_kind k;
        ck_assert_int_eq(dt_schedule_kind_parse("1F1B", &k), -1);
        ck_assert_int_eq(dt_schedule_kind_parse("zb-h2", &k), -1);

        dt_schedule s;
        char err[256];
        ck_assert_int_eq(dt_schedule_build(&s, DT_SCHEDULE_1F1B, 0, 4, err, sizeof err), -1);
        ck_assert_str_eq(err, "pipeline stages must be 1 to 64, got 0");
        ck_assert_ptr_null(s.stage);
        ck_assert_int_eq(dt_schedule_build(&s, DT_SCHEDULE_1F1B, 65, 4, err, sizeof err), -1);
        ck_assert_str_eq(err, "pipeline stages must be 1 to 64, got 65");
        ck_assert_int_eq(dt_schedule_build(&s, DT_SCHEDULE_GPIPE, 2, 0, err, sizeof err), -1);
        ck_assert_str_eq(err, "pipeline micro-batches must be 1 to 1024, got 0");
        ck_assert_int_eq(dt_schedule_build(&s, DT_SCHEDULE_ZB_H1, 2, 1025, err, sizeof err), -1);
        ck_assert_str_eq(err, "pipeline micro-batches must be 1 to 1024, got 1025");
        /* the limits themselves build, and simulate */
        ck_assert_int_eq(dt_schedule_build(&s, DT_SCHEDULE_ZB_H1, 64, 1024, err, sizeof err), 0);
        dt_stage_cost c[64];
        unit_costs(c, 64, 1, 1, 1);
        dt_schedule_sim r;
        ck_assert_int_eq(simulate(&s, c, 0, &r, err, sizeof err), 0);
        ck_assert(r.makespan == 3.0 * 1024 + 63);
        dt_schedule_free(&s);
}
END_TEST

static char *print(const dt_schedule *s, int with_comm)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert_ptr_nonnull(f);
        dt_schedule_print(s, f, with_comm);
        fclose(f);
        return buf;
}

/* The zb-h1 lines are Figure 3 (ZB-H1) of arXiv 2401.10241 read per worker, p = 4, m = 8. */
START_TEST(test_print)
{
        dt_schedule s;
        build(&s, DT_SCHEDULE_ZB_H1, 4, 8);
        char *out = print(&s, 0);
        ck_assert_str_eq(out,
                "stage 0: F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7\n"
                "stage 1: F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7\n"
                "stage 2: F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7\n"
                "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7\n");
        free(out);
        dt_schedule_free(&s);

        build(&s, DT_SCHEDULE_1F1B, 2, 3);
        out = print(&s, 1);
        ck_assert_str_eq(out,
                "stage 0: F0 sa0 F1 sa1 rg0 B0 W0 F2 sa2 rg1 B1 W1 rg2 B2 W2\n"
                "stage 1: ra0 F0 B0 W0 sg0 ra1 F1 B1 W1 sg1 ra2 F2 B2 W2 sg2\n");
        free(out);
        dt_schedule_free(&s);

        build(&s, DT_SCHEDULE_GPIPE, 2, 3);     /* backwards in reverse micro-batch order */
        out = print(&s, 0);
        ck_assert_str_eq(out, "stage 0: F0 F1 F2 B2 W2 B1 W1 B0 W0\n"
                              "stage 1: F0 F1 F2 B2 W2 B1 W1 B0 W0\n");
        free(out);
        dt_schedule_free(&s);

        build(&s, DT_SCHEDULE_GPIPE, 12, 1);
        out = print(&s, 0);
        ck_assert(strncmp(out, "stage  0: F0 B0 W0\n", 19) == 0);
        ck_assert(strstr(out, "stage 11: F0 B0 W0\n") != NULL);
        free(out);
        dt_schedule_free(&s);
}
END_TEST

static Suite *schedule_suite(void)
{
        Suite *s = suite_create("schedule");
        TCase *t = tcase_create("schedule");
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_contract);
        tcase_add_test(t, test_sim_link);
        tcase_add_test(t, test_sim_rendezvous);
        tcase_add_test(t, test_slots);
        tcase_add_test(t, test_bubble_unit);
        tcase_add_test(t, test_bubble_times);
        tcase_add_test(t, test_sim_costs);
        tcase_add_test(t, test_deadlock_cycle);
        tcase_add_test(t, test_deadlock_warmup);
        tcase_add_test(t, test_unmatched);
        tcase_add_test(t, test_slots_errors);
        tcase_add_test(t, test_names);
        tcase_add_test(t, test_print);
        suite_add_tcase(s, t);
        return s;
}

int main(void)
{
        SRunner *r = srunner_create(schedule_suite());
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
