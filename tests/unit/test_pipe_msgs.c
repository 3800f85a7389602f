/* tests/unit/test_pipe_msgs.c - Check tests of parallel/pipe_msgs.c's dt_pipe_direct: for every
 * builder (v up to 4), p <= 8 and m up to 32, an oracle of its own plays each stage's list and finds
 * no tensor written while a message goes straight from or into it; every activation and output
 * gradient goes without its copy; a hand-built list whose gradients wait side by side keeps them. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline.h"

#define MAXP 8

/* The oracle for stage st: walks the list with the tensors busy (an activation sent from its slot's
 * output until the send's release, an output gradient received into dact until its B) and fails at
 * any write of a busy one: the chunk's F into that slot, another B of the chunk, another gradient
 * received into the chunk's dact. Returns how many messages went straight. */
static int play(const dt_schedule *s, int st, const int *rel, const char *direct)
{
        const dt_stage_actions *me = &s->stage[st];
        int m = s->nmicro, n = me->n, straight = 0;
        int *slot_of = calloc((size_t)m * DT_SCHEDULE_MAX_CHUNKS, sizeof *slot_of);
        int *busy_until = malloc((size_t)DT_SCHEDULE_MAX_CHUNKS * 64 * sizeof *busy_until);   /* [chunk][slot] */
        int held[DT_SCHEDULE_MAX_CHUNKS];
        for (int k = 0; k < DT_SCHEDULE_MAX_CHUNKS * 64; k++) busy_until[k] = -1;
        for (int c = 0; c < DT_SCHEDULE_MAX_CHUNKS; c++) held[c] = -1;
        for (int j = 0; j < n; j++) {
                const dt_action *a = &me->a[j];
                int c = a->chunk;
                switch (a->kind) {
                case DT_ACT_FORWARD:
                        ck_assert_msg(busy_until[c * 64 + a->slot] < j, "%s p=%d m=%d stage %d: F%d.%d at %d writes slot %d "
                                      "while its send is in flight (released at %d)", dt_schedule_kind_name(s->kind),
                                      s->nstages, m, st, a->mb, c, j, a->slot, busy_until[c * 64 + a->slot]);
                        slot_of[c * m + a->mb] = a->slot;
                        break;
                case DT_ACT_SEND_ACT:
                        if (direct[j]) busy_until[c * 64 + slot_of[c * m + a->mb]] = rel[j];
                        break;
                case DT_ACT_RECV_GRAD:
                        ck_assert_msg(held[c] < 0, "%s stage %d: rg%d.%d overwrites rg%d's", dt_schedule_kind_name(s->kind),
                                      st, a->mb, c, held[c]);
                        if (direct[j]) held[c] = a->mb;
                        break;
                case DT_ACT_BACKWARD_INPUT:
                        ck_assert_msg(held[c] < 0 || held[c] == a->mb, "%s stage %d: B%d.%d overwrites rg%d's",
                                      dt_schedule_kind_name(s->kind), st, a->mb, c, held[c]);
                        held[c] = -1;
                        break;
                default:
                        break;
                }
                straight += direct[j];
        }
        free(slot_of);
        free(busy_until);
        return straight;
}

static int run_stage(const dt_schedule *s, int st, int *msgs)
{
        const dt_stage_actions *me = &s->stage[st];
        int *rel = malloc(((size_t)me->n + 1) * sizeof *rel);
        char *direct = malloc((size_t)me->n + 1);
        dt_pipe_send_release(s, st, rel);
        dt_pipe_direct(s, st, rel, direct);
        *msgs = 0;
        for (int j = 0; j < me->n; j++) {
                dt_action_kind k = me->a[j].kind;
                if (k == DT_ACT_SEND_GRAD) ck_assert_int_eq(direct[j], 0);     /* B writes them into the send's buffer */
                else if (k >= DT_ACT_SEND_ACT) (*msgs)++;
                if (k < DT_ACT_SEND_ACT) ck_assert_int_eq(direct[j], 0);
        }
        int straight = play(s, st, rel, direct);
        free(rel);
        free(direct);
        return straight;
}

START_TEST(test_builders)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_GPIPE, DT_SCHEDULE_1F1B, DT_SCHEDULE_ZB_H1,
                                                  DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
        static const int ms[] = { 1, 3, 8, 16, 32 };
        char err[160];
        int built = 0;
        for (int k = 0; k < 6; k++)
                for (int v = 1; v <= DT_SCHEDULE_MAX_CHUNKS; v++) {
                        if (!dt_schedule_chunks_ok(kinds[k], v, err, sizeof err)) continue;
                        for (int p = 2; p <= MAXP; p++)
                                for (int mi = 0; mi < 5; mi++) {
                                        dt_schedule s;
                                        if (dt_schedule_build_v(&s, kinds[k], p, v, ms[mi], err, sizeof err) < 0) continue;
                                        built++;
                                        for (int st = 0; st < p; st++) {
                                                int msgs, straight = run_stage(&s, st, &msgs);
                                                ck_assert_msg(straight == msgs, "%s p=%d v=%d m=%d stage %d: %d of %d "
                                                              "messages straight", dt_schedule_kind_name(kinds[k]), p,
                                                              v, ms[mi], st, straight, msgs);
                                        }
                                        dt_schedule_free(&s);
                                }
                }
        ck_assert_int_gt(built, 200);
}
END_TEST

/* 2 stages, 2 micro-batches, stage 0 receiving both gradients before either B: the first one's
 * dact would be overwritten by the second receive, so both keep their buffers; the activations still
 * go straight. */
START_TEST(test_gradients_side_by_side)
{
        dt_schedule s;
        char err[160];
        dt_schedule_init(&s, DT_SCHEDULE_GPIPE, 2, 2);
        static const dt_action_kind s0[] = { DT_ACT_FORWARD, DT_ACT_SEND_ACT, DT_ACT_FORWARD, DT_ACT_SEND_ACT,
                                             DT_ACT_RECV_GRAD, DT_ACT_RECV_GRAD, DT_ACT_BACKWARD_INPUT,
                                             DT_ACT_BACKWARD_WEIGHT, DT_ACT_BACKWARD_INPUT, DT_ACT_BACKWARD_WEIGHT };
        static const int mb0[] = { 0, 0, 1, 1, 0, 1, 0, 0, 1, 1 };
        static const dt_action_kind s1[] = { DT_ACT_RECV_ACT, DT_ACT_FORWARD, DT_ACT_RECV_ACT, DT_ACT_FORWARD,
                                             DT_ACT_BACKWARD_INPUT, DT_ACT_BACKWARD_WEIGHT, DT_ACT_SEND_GRAD,
                                             DT_ACT_BACKWARD_INPUT, DT_ACT_BACKWARD_WEIGHT, DT_ACT_SEND_GRAD };
        static const int mb1[] = { 0, 0, 1, 1, 0, 0, 0, 1, 1, 1 };
        for (int j = 0; j < 10; j++) {
                dt_schedule_add(&s, 0, s0[j], mb0[j], s0[j] >= DT_ACT_SEND_ACT ? 1 : -1);
                dt_schedule_add(&s, 1, s1[j], mb1[j], s1[j] >= DT_ACT_SEND_ACT ? 0 : -1);
        }
        ck_assert_int_eq(dt_schedule_assign_slots(&s, err, sizeof err), 0);
        int rel[11];
        char direct[11];
        dt_pipe_send_release(&s, 0, rel);
        dt_pipe_direct(&s, 0, rel, direct);
        ck_assert_int_eq(direct[1], 1);
        ck_assert_int_eq(direct[3], 1);
        ck_assert_int_eq(direct[4], 0);
        ck_assert_int_eq(direct[5], 0);
        int msgs;
        ck_assert_int_eq(run_stage(&s, 0, &msgs), 2);
        ck_assert_int_eq(msgs, 4);
        dt_schedule_free(&s);
}
END_TEST

/* The staging buffers a walk holds: fewer without the copies, never more (the input gradient's is
 * taken at its B instead of its send: 1f1b's W between them is no message). On 2 stages under 1f1b
 * the last stage held a gradient's copy, the next activation's and the next gradient's (3); now
 * only the two gradients' B buffers until stage 0's next activation comes (2). */
START_TEST(test_buffers)
{
        static const dt_schedule_kind kinds[] = { DT_SCHEDULE_GPIPE, DT_SCHEDULE_1F1B, DT_SCHEDULE_ZB_H1,
                                                  DT_SCHEDULE_INTERLEAVED, DT_SCHEDULE_ZB_V, DT_SCHEDULE_V_HALF };
        for (int k = 0; k < 6; k++)
                for (int p = 2; p <= MAXP; p++)
                        for (int st = 0; st < p; st++) {
                                int v = k >= 3 ? 2 : 1;
                                int packed = dt_pipe_message_bufs(kinds[k], p, v, st, 16, 0);
                                int direct = dt_pipe_message_bufs(kinds[k], p, v, st, 16, 1);
                                ck_assert_msg(direct <= packed, "%s p=%d stage %d: %d buffers direct, %d packed",
                                              dt_schedule_kind_name(kinds[k]), p, st, direct, packed);
                                if (st == 0 && v == 1) ck_assert_int_eq(direct, 0);    /* stage 0 sends no gradient */
                        }
        ck_assert_int_eq(dt_pipe_message_bufs(DT_SCHEDULE_1F1B, 2, 1, 1, 4, 0), 3);
        ck_assert_int_eq(dt_pipe_message_bufs(DT_SCHEDULE_1F1B, 2, 1, 1, 4, 1), 2);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("pipe_msgs");
        TCase *t = tcase_create("pipe_msgs");
        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_builders);
        tcase_add_test(t, test_gradients_side_by_side);
        tcase_add_test(t, test_buffers);
        suite_add_tcase(s, t);
        SRunner *r = srunner_create(s);
        srunner_run_all(r, CK_NORMAL);
        int failed = srunner_ntests_failed(r);
        srunner_free(r);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
