/* tests/unit/test_schedule_v.c - Check tests of parallel/schedule.c's schedules with chunks
 * (interleaved, zb-v, v-half): for p <= 8 stages, v <= 4 chunks (the V's: 2) and m <= 32 micro-batches the
 * lists keep schedule.h's contract read with virtual stages (an oracle of its own), run without
 * deadlock with free and slow messages (one step and two back to back), have the bubble of
 * their formulas; the placement both ways;
 * the chunk counts each kind refuses; where each send's buffer is freed (pipeline.c's release
 * points) and the message buffers that leaves a stage, flat in m; v-half's memory (p + 1 half-stage
 * micro-batches a stage, against zb-v's 2p) and bubble (between zb-v's and 1f1b's). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "parallel/pipeline.h"

#define MAXP 8
#define MAXV 4
#define MAXM 32

static void build(dt_schedule *s, dt_schedule_kind k, int p, int v, int m)
{
        char err[256] = "";
        ck_assert_msg(dt_schedule_build_v(s, k, p, v, m, err, sizeof err) == 0, "%s p=%d v=%d m=%d: %s",
                      dt_schedule_kind_name(k), p, v, m, err);
}

typedef struct where {
        int f, b, w, ra, sa, rg, sg;
} where;

/* The stage and chunk holding virtual stage vs, by the placement written out here (not the module's):
 * interleaved c p + r; zb-v and v-half r down, 2p - 1 - r up. */
static void place(dt_schedule_kind k, int p, int vs, int *st, int *c)
{
        if (k == DT_SCHEDULE_ZB_V || k == DT_SCHEDULE_V_HALF) {
                *c = vs >= p;
                *st = *c ? 2 * p - 1 - vs : vs;
        } else {
                *c = vs / p;
                *st = vs % p;
        }
}

/* The contract for every virtual stage of s; returns nothing, asserts. Peaks of in-flight
 * micro-batches per chunk are checked against the stage's nslots (each chunk's own slots). */
static void check_all(const dt_schedule *s)
{
        int p = s->nstages, v = s->nchunks, m = s->nmicro, S = p * v;
        const char *name = dt_schedule_kind_name(s->kind);
        static where at[MAXP * MAXV][MAXM];
        memset(at, -1, sizeof at);
        for (int st = 0; st < p; st++) {
                const dt_stage_actions *sa = &s->stage[st];
                int inflight[MAXV] = { 0 }, peak = 0;
                int owner[MAXV][MAXM];
                memset(owner, -1, sizeof owner);
                for (int j = 0; j < sa->n; j++) {
                        const dt_action *a = &sa->a[j];
                        ck_assert(a->chunk >= 0 && a->chunk < v && a->mb >= 0 && a->mb < m);
                        int vs = a->chunk * p + st;
                        if (s->kind == DT_SCHEDULE_ZB_V || s->kind == DT_SCHEDULE_V_HALF)
                                vs = a->chunk ? 2 * p - 1 - st : st;
                        int pst, pc;
                        where *x = &at[vs][a->mb];
                        int *pos = NULL, want = -1;
                        switch (a->kind) {
                        case DT_ACT_FORWARD: pos = &x->f; break;
                        case DT_ACT_BACKWARD_INPUT: pos = &x->b; break;
                        case DT_ACT_BACKWARD_WEIGHT: pos = &x->w; break;
                        case DT_ACT_RECV_ACT: pos = &x->ra; want = vs - 1; break;
                        case DT_ACT_SEND_ACT: pos = &x->sa; want = vs + 1; break;
                        case DT_ACT_RECV_GRAD: pos = &x->rg; want = vs + 1; break;
                        case DT_ACT_SEND_GRAD: pos = &x->sg; want = vs - 1; break;
                        }
                        ck_assert_msg(*pos < 0, "%s p=%d v=%d m=%d stage %d action %d repeats", name, p, v, m, st, j);
                        *pos = j;
                        if (want >= 0) {
                                ck_assert(want < S);
                                place(s->kind, p, want, &pst, &pc);
                                ck_assert_msg(a->peer == pst, "%s p=%d v=%d m=%d stage %d action %d: peer %d, want %d",
                                              name, p, v, m, st, j, a->peer, pst);
                        } else if (a->kind != DT_ACT_FORWARD && a->kind != DT_ACT_BACKWARD_INPUT &&
                                   a->kind != DT_ACT_BACKWARD_WEIGHT) {
                                ck_abort_msg("%s p=%d v=%d m=%d stage %d action %d: a message past the model's end",
                                             name, p, v, m, st, j);
                        }
                        int c = a->chunk;
                        if (a->kind == DT_ACT_FORWARD) {
                                ck_assert(a->slot >= 0 && a->slot < sa->nslots && owner[c][a->slot] < 0);
                                owner[c][a->slot] = a->mb;
                                if (++inflight[c] > peak) peak = inflight[c];
                        } else if (a->kind == DT_ACT_BACKWARD_INPUT || a->kind == DT_ACT_BACKWARD_WEIGHT) {
                                ck_assert(x->f >= 0 && a->slot == sa->a[x->f].slot);
                                if (a->kind == DT_ACT_BACKWARD_WEIGHT) {
                                        owner[c][a->slot] = -1;
                                        inflight[c]--;
                                }
                        }
                }
                ck_assert_int_eq(sa->nslots, peak);
        }
        for (int vs = 0; vs < S; vs++)
                for (int mb = 0; mb < m; mb++) {
                        const where *x = &at[vs][mb];
                        ck_assert_msg(x->f >= 0 && x->b > x->f && x->w > x->b, "%s p=%d v=%d m=%d vs %d mb %d: "
                                      "F %d B %d W %d", name, p, v, m, vs, mb, x->f, x->b, x->w);
                        if (vs > 0) ck_assert(x->ra >= 0 && x->ra < x->f && x->sg > x->b);
                        else ck_assert(x->ra < 0 && x->sg < 0);
                        if (vs < S - 1) ck_assert(x->sa == x->f + 1 && x->rg >= 0 && x->rg < x->b);
                        else ck_assert(x->sa < 0 && x->rg < 0);
                        if (s->kind == DT_SCHEDULE_INTERLEAVED) {
                                /* a combined backward: W at once, the gradient after both */
                                ck_assert_int_eq(x->w, x->b + 1);
                                if (vs > 0) ck_assert_int_eq(x->sg, x->w + 1);
                        } else if (vs > 0) {
                                ck_assert_int_eq(x->sg, x->b + 1);
                        }
                        /* each chunk's W's in micro-batch order: every layer's gradient adds up as 1f1b's */
                        if (mb > 0) ck_assert_msg(x->w > at[vs][mb - 1].w, "%s p=%d v=%d m=%d vs %d: W%d before W%d",
                                                  name, p, v, m, vs, mb, mb - 1);
                        /* the one input-gradient buffer per chunk: sent before the chunk's next B */
                        if (vs > 0)
                                for (int k = 0; k < m; k++)
                                        if (at[vs][k].b > x->b) ck_assert(x->sg < at[vs][k].b);
                }
}

START_TEST(test_contract_v)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
        dt_stage_cost c[MAXP * MAXV];
        for (int i = 0; i < MAXP * MAXV; i++) c[i] = (dt_stage_cost){ 1, 1, 1 };
        for (int k = 0; k < 3; k++)
                for (int p = 1; p <= MAXP; p++)
                        for (int v = 2; v <= MAXV; v++)
                                for (int m = 1; m <= MAXM; m++) {
                                        if (kinds[k] != DT_SCHEDULE_INTERLEAVED && v != 2) continue;
                                        dt_schedule s;
                                        build(&s, kinds[k], p, v, m);
                                        ck_assert_int_eq(s.nchunks, v);
                                        check_all(&s);
                                        dt_schedule_sim r;
                                        char err[512] = "";
                                        ck_assert_msg(dt_schedule_simulate(&s, c, 0, &r, err, sizeof err) == 0,
                                                      "%s p=%d v=%d m=%d: %s", dt_schedule_kind_name(kinds[k]), p, v, m, err);
                                        ck_assert_msg(dt_schedule_simulate(&s, c, 0.7, &r, err, sizeof err) == 0,
                                                      "%s p=%d v=%d m=%d: %s", dt_schedule_kind_name(kinds[k]), p, v, m, err);
                                        dt_schedule_free(&s);
                                }
}
END_TEST

/* The same lists two steps back to back, each stage on into the next step at once after its own
 * last action (no barrier): no stage waits forever (a test of its own for the timeout's sake). */
START_TEST(test_contract_steps)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
        dt_stage_cost c[MAXP * MAXV];
        for (int i = 0; i < MAXP * MAXV; i++) c[i] = (dt_stage_cost){ 1, 1, 1 };
        dt_sim_link lk = { .p2p = 0.7 };
        for (int k = 0; k < 3; k++)
                for (int p = 1; p <= MAXP; p++)
                        for (int v = 2; v <= MAXV; v++)
                                for (int m = 1; m <= MAXM; m++) {
                                        if (kinds[k] != DT_SCHEDULE_INTERLEAVED && v != 2) continue;
                                        dt_schedule s;
                                        build(&s, kinds[k], p, v, m);
                                        dt_schedule_steady st;
                                        char err[512] = "";
                                        ck_assert_msg(dt_schedule_simulate_steps(&s, c, &lk, 2, &st, err, sizeof err) == 0,
                                                      "%s p=%d v=%d m=%d: %s", dt_schedule_kind_name(kinds[k]), p, v, m, err);
                                        dt_schedule_free(&s);
                                }
}
END_TEST

/* Unit chunk times, free messages: interleaved's bubble is (p - 1) / (v m + p - 1) for m a multiple
 * of p; zb-v's (p - 1) f over 2 m (f + b + w) plus that for m >= 2p; both below 1f1b's and zb-h1's
 * on the same model (a stage's time the sum of its chunks'). */
START_TEST(test_bubble_v)
{
        dt_stage_cost c[MAXP * MAXV], whole[MAXP];
        for (int p = 2; p <= MAXP; p++)
                for (int v = 2; v <= MAXV; v++)
                        for (int m = p; m <= MAXM; m += p) {
                                for (int i = 0; i < p * v; i++) c[i] = (dt_stage_cost){ 1, 1, 1 };
                                dt_schedule s;
                                dt_schedule_sim r;
                                char err[256];
                                build(&s, DT_SCHEDULE_INTERLEAVED, p, v, m);
                                ck_assert_int_eq(dt_schedule_simulate(&s, c, 0, &r, err, sizeof err), 0);
                                double th = dt_schedule_bubble_theory_v(DT_SCHEDULE_INTERLEAVED, p, v, m, 1, 1, 1);
                                ck_assert_msg(m == p || (r.bubble > th - 1e-12 && r.bubble < th + 1e-12),
                                              "interleaved p=%d v=%d m=%d: %g, formula %g", p, v, m, r.bubble, th);
                                dt_schedule_free(&s);
                                if (v != 2) continue;
                                build(&s, DT_SCHEDULE_ZB_V, p, 2, m);
                                ck_assert_int_eq(dt_schedule_simulate(&s, c, 0, &r, err, sizeof err), 0);
                                th = dt_schedule_bubble_theory_v(DT_SCHEDULE_ZB_V, p, 2, m, 1, 1, 1);
                                if (m >= 2 * p)
                                        ck_assert_msg(r.bubble > th - 1e-12 && r.bubble < th + 1e-12,
                                                      "zb-v p=%d m=%d: %g, formula %g", p, m, r.bubble, th);
                                ck_assert(r.bubble >= th - 1e-12);      /* the formula is a lower bound */
                                double zbv = r.bubble;
                                dt_schedule_free(&s);
                                for (int i = 0; i < p; i++) whole[i] = (dt_stage_cost){ 2, 2, 2 };
                                build(&s, DT_SCHEDULE_ZB_H1, p, 1, m);
                                ck_assert_int_eq(dt_schedule_simulate(&s, whole, 0, &r, err, sizeof err), 0);
                                ck_assert_msg(zbv < r.bubble, "zb-v p=%d m=%d: %g, zb-h1 %g", p, m, zbv, r.bubble);
                                dt_schedule_free(&s);
                        }
}
END_TEST

START_TEST(test_place)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_1F1B, DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V,
                                                  DT_SCHEDULE_V_HALF };
        for (int k = 0; k < 4; k++)
                for (int p = 1; p <= MAXP; p++)
                        for (int v = 1; v <= MAXV; v++) {
                                char err[128];
                                if (!dt_schedule_chunks_ok(kinds[k], v, err, sizeof err)) continue;
                                char seen[MAXP * MAXV] = { 0 };
                                for (int st = 0; st < p; st++)
                                        for (int c = 0; c < v; c++) {
                                                int vs = dt_schedule_vstage(kinds[k], p, v, st, c), s2, c2;
                                                ck_assert(vs >= 0 && vs < p * v && !seen[vs]);
                                                seen[vs] = 1;
                                                dt_schedule_place(kinds[k], p, v, vs, &s2, &c2);
                                                ck_assert(s2 == st && c2 == c);
                                                place(kinds[k], p, vs, &s2, &c2);
                                                ck_assert(s2 == st && c2 == c);
                                        }
                        }
        /* the V: 4 stages, stage 0 holds the first and the last of 8 pieces, stage 3 the middle two */
        ck_assert_int_eq(dt_schedule_vstage(DT_SCHEDULE_ZB_V, 4, 2, 0, 1), 7);
        ck_assert_int_eq(dt_schedule_vstage(DT_SCHEDULE_ZB_V, 4, 2, 3, 0), 3);
        ck_assert_int_eq(dt_schedule_vstage(DT_SCHEDULE_ZB_V, 4, 2, 3, 1), 4);
        ck_assert_int_eq(dt_schedule_vstage(DT_SCHEDULE_INTERLEAVED, 4, 2, 1, 1), 5);
}
END_TEST

START_TEST(test_refused)
{
        dt_schedule s;
        char err[256];
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_ZB_V, 4, 3, 8, err, sizeof err), -1);
        ck_assert_str_eq(err, "schedule zb-v runs 2 chunks per stage, got 3");
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_INTERLEAVED, 4, 1, 8, err, sizeof err), -1);
        ck_assert_str_eq(err, "schedule interleaved runs 2 to 4 chunks per stage, got 1");
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_INTERLEAVED, 4, 5, 8, err, sizeof err), -1);
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_1F1B, 4, 2, 8, err, sizeof err), -1);
        ck_assert_str_eq(err, "schedule 1f1b runs 1 chunk per stage, got 2");
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_INTERLEAVED, 32, 3, 8, err, sizeof err), -1);
        ck_assert_str_eq(err, "pipeline stages x chunks must be at most 64, got 32 x 3");
        ck_assert_ptr_null(s.stage);
        dt_schedule_kind k;
        ck_assert_int_eq(dt_schedule_kind_parse("interleaved", &k), 0);
        ck_assert_int_eq(k, DT_SCHEDULE_INTERLEAVED);
        ck_assert_int_eq(dt_schedule_kind_parse("zb-v", &k), 0);
        ck_assert_int_eq(k, DT_SCHEDULE_ZB_V);
        /* the printed lists name the chunk */
        build(&s, DT_SCHEDULE_ZB_V, 1, 2, 1);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        dt_schedule_print(&s, f, 1);
        fclose(f);
        ck_assert_str_eq(buf, "stage 0: F0 sa0 ra0.1 F0.1 B0.1 sg0.1 W0.1 rg0 B0 W0\n");
        free(buf);
        dt_schedule_free(&s);
}
END_TEST

/* Every send is freed after it and by a receive: its own stage's receive of it when it goes to the
 * stage itself, else one from its peer; the buffers a stage holds then stop growing with m (at most
 * p + 1 under 1f1b, the same at m = 2p and 32), and zb-v and interleaved at most 3p + 2
 * (every send of the step lived until its end before: 2m and more at 32). */
START_TEST(test_release)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_GPIPE, DT_SCHEDULE_1F1B, DT_SCHEDULE_ZB_H1,
                                                  DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
        static const int ms[] = { 1, 3, 8, 32 };
        char err[160];
        for (int k = 0; k < 6; k++)
                for (int p = 2; p <= MAXP; p++)
                        for (int mi = 0; mi < 4; mi++) {
                                int v = kinds[k] >= DT_SCHEDULE_INTERLEAVED ? 2 : 1, m = ms[mi];
                                dt_schedule s;
                                ck_assert_int_eq(dt_schedule_build_v(&s, kinds[k], p, v, m, err, sizeof err), 0);
                                for (int st = 0; st < p; st++) {
                                        const dt_stage_actions *me = &s.stage[st];
                                        int *rel = malloc(((size_t)me->n + 1) * sizeof *rel);
                                        dt_pipe_send_release(&s, st, rel);
                                        for (int i = 0; i < me->n; i++) {
                                                const dt_action *a = &me->a[i];
                                                int send = a->kind == DT_ACT_SEND_ACT || a->kind == DT_ACT_SEND_GRAD;
                                                ck_assert(send ? rel[i] > i && rel[i] <= me->n : rel[i] == -1);
                                                if (!send || rel[i] == me->n) continue;
                                                const dt_action *b = &me->a[rel[i]];
                                                ck_assert(b->kind == DT_ACT_RECV_ACT || b->kind == DT_ACT_RECV_GRAD);
                                                ck_assert_int_eq(b->peer, a->peer);
                                                if (a->peer == st)
                                                        ck_assert(b->mb == a->mb && (b->kind == DT_ACT_RECV_ACT) ==
                                                                  (a->kind == DT_ACT_SEND_ACT));
                                        }
                                        free(rel);
                                }
                                dt_schedule_free(&s);
                        }
        for (int p = 2; p <= MAXP; p++)
                for (int st = 0; st < p; st++) {
                        int one = dt_pipe_message_bufs(DT_SCHEDULE_1F1B, p, 1, st, 32, 0);
                        ck_assert_int_le(one, p + 1);
                        ck_assert_int_eq(one, dt_pipe_message_bufs(DT_SCHEDULE_1F1B, p, 1, st, 2 * p, 0));
                        for (int k = 3; k < 6; k++) {
                                int b = dt_pipe_message_bufs(kinds[k], p, 2, st, 32, 0);
                                ck_assert_msg(b <= 3 * p + 2, "%d stages, stage %d: %d buffers, 1f1b %d", p, st, b, one);
                        }
                }
}
END_TEST

/* Each chunk's most micro-batches in flight (F done, W not), counted from the lists here, summed over
 * a stage's chunks: in half-stage micro-batches, what its activations hold at once. */
static int held(const dt_schedule *s, int st)
{
        int now[2] = { 0 }, peak[2] = { 0 };
        const dt_stage_actions *sa = &s->stage[st];
        for (int j = 0; j < sa->n; j++) {
                int c = sa->a[j].chunk;
                if (sa->a[j].kind == DT_ACT_FORWARD && ++now[c] > peak[c]) peak[c] = now[c];
                if (sa->a[j].kind == DT_ACT_BACKWARD_WEIGHT) now[c]--;
        }
        return peak[0] + peak[1];
}

/* v-half holds at most p + 1 half-stage micro-batches on any stage, where zb-v's busiest holds 2p
 * or more (1f1b's first stage p whole-stage ones) once m >= 2p: about half. Its bubble at unit times
 * lies, for m >= 2p, between zb-v's and, from 3 stages on, 1f1b's (p - 1) / (m + p - 1); on 2 stages it
 * matches 1f1b's at m = 8 (its 3 of 4 half-stage slots cannot keep the V full as m grows). The
 * formula function gives the simulator's figure. */
START_TEST(test_vhalf)
{
        dt_stage_cost c[2 * MAXP];
        for (int i = 0; i < 2 * MAXP; i++) c[i] = (dt_stage_cost){ 1, 1, 1 };
        char err[256];
        for (int p = 1; p <= MAXP; p++)
                for (int m = 1; m <= MAXM; m++) {
                        dt_schedule vh, zv;
                        build(&vh, DT_SCHEDULE_V_HALF, p, 2, m);
                        build(&zv, DT_SCHEDULE_ZB_V, p, 2, m);
                        int most = 0, zmost = 0;
                        for (int st = 0; st < p; st++) {
                                int h = held(&vh, st);
                                ck_assert_msg(h <= p + 1, "v-half p=%d m=%d stage %d holds %d", p, m, st, h);
                                most = h > most ? h : most;
                                zmost = held(&zv, st) > zmost ? held(&zv, st) : zmost;
                        }
                        if (p >= 2 && m >= 2 * p) ck_assert_msg(zmost >= 2 * p && 2 * most <= zmost + 2,
                                                      "p=%d m=%d: v-half %d, zb-v %d", p, m, most, zmost);
                        dt_schedule_sim r, rz;
                        ck_assert_int_eq(dt_schedule_simulate(&vh, c, 0, &r, err, sizeof err), 0);
                        ck_assert_int_eq(dt_schedule_simulate(&zv, c, 0, &rz, err, sizeof err), 0);
                        if (m >= 2 * p) ck_assert_msg(r.bubble >= rz.bubble - 1e-12, "p=%d m=%d: v-half %g, zb-v %g",
                                                      p, m, r.bubble, rz.bubble);
                        double th = dt_schedule_bubble_theory_v(DT_SCHEDULE_V_HALF, p, 2, m, 1, 1, 1);
                        ck_assert(th > r.bubble - 1e-12 && th < r.bubble + 1e-12);
                        double one = (p - 1.0) / (m + p - 1.0);
                        if (p >= 3 && m >= 2 * p && m % p == 0)
                                ck_assert_msg(r.bubble < one, "v-half p=%d m=%d: %g, 1f1b %g", p, m, r.bubble, one);
                        if (p == 2 && m == 8) ck_assert(r.bubble < one + 1e-12);
                        dt_schedule_free(&vh);
                        dt_schedule_free(&zv);
                }
        /* the caps: p + 1 in all, the longer arm (chunk 0 on the first stages) the more */
        for (int p = 1; p <= MAXP; p++)
                for (int st = 0; st < p; st++) {
                        int c0 = dt_schedule_vhalf_cap(p, st, 0), c1 = dt_schedule_vhalf_cap(p, st, 1);
                        ck_assert(c0 >= 1 && c1 >= 1 && c0 + c1 == p + 1);
                        if (p > 1) ck_assert(st > 0 || c0 >= c1);
                }
        dt_schedule_kind k;
        ck_assert_int_eq(dt_schedule_kind_parse("v-half", &k), 0);
        ck_assert_int_eq(k, DT_SCHEDULE_V_HALF);
        dt_schedule s;
        ck_assert_int_eq(dt_schedule_build_v(&s, DT_SCHEDULE_V_HALF, 4, 4, 8, err, sizeof err), -1);
        ck_assert_str_eq(err, "schedule v-half runs 2 chunks per stage, got 4");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("schedule_v");
        TCase *t = tcase_create("schedule_v");
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_contract_v);
        tcase_add_test(t, test_contract_steps);
        tcase_add_test(t, test_bubble_v);
        tcase_add_test(t, test_place);
        tcase_add_test(t, test_refused);
        tcase_add_test(t, test_release);
        tcase_add_test(t, test_vhalf);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
