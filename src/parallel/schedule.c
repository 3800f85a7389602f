/* parallel/schedule.c - pipeline schedules as data (gpipe, 1f1b, zb-h1, interleaved, zb-v, v-half), the
 * placement of virtual stages on stages and their micro-batch slots (the simulator that plays them is
 * schedule_sim.c). The contract of the lists is in schedule.h; nothing here calls MPI or touches a
 * graph. */
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "util/common.h"

static const char *const kind_names[] = {
        [DT_SCHEDULE_GPIPE] = "gpipe",
        [DT_SCHEDULE_1F1B] = "1f1b",
        [DT_SCHEDULE_ZB_H1] = "zb-h1",
        [DT_SCHEDULE_INTERLEAVED] = "interleaved",
        [DT_SCHEDULE_ZB_V] = "zb-v",
        [DT_SCHEDULE_V_HALF] = "v-half",
};
#define NKINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *dt_schedule_kind_name(dt_schedule_kind kind)
{
        return (int)kind >= 0 && (int)kind < NKINDS ? kind_names[kind] : "?";
}

int dt_schedule_kind_parse(const char *name, dt_schedule_kind *out)
{
        for (int k = 0; k < NKINDS; k++)
                if (strcmp(name, kind_names[k]) == 0) {
                        *out = (dt_schedule_kind)k;
                        return 0;
                }
        return -1;
}

/* ---- lists ---- */

void dt_schedule_init(dt_schedule *s, dt_schedule_kind kind, int nstages, int nmicro)
{
        DT_ASSERT(nstages >= 1 && nstages <= DT_SCHEDULE_MAX_STAGES);
        DT_ASSERT(nmicro >= 1 && nmicro <= DT_SCHEDULE_MAX_MICRO);
        s->kind = kind;
        s->nstages = nstages;
        s->nmicro = nmicro;
        s->nchunks = 1;
        s->stage = dt_calloc((size_t)nstages, sizeof *s->stage);
}

void dt_schedule_free(dt_schedule *s)
{
        if (s->stage)
                for (int i = 0; i < s->nstages; i++) free(s->stage[i].a);
        free(s->stage);
        memset(s, 0, sizeof *s);
}

void dt_schedule_add(dt_schedule *s, int stage, dt_action_kind kind, int mb, int peer)
{
        dt_schedule_add_chunk(s, stage, 0, kind, mb, peer);
}

void dt_schedule_add_chunk(dt_schedule *s, int stage, int chunk, dt_action_kind kind, int mb, int peer)
{
        DT_ASSERT(stage >= 0 && stage < s->nstages);
        DT_ASSERT(chunk >= 0 && chunk < s->nchunks);
        dt_stage_actions *st = &s->stage[stage];
        if (st->n == st->cap) {
                /* 7 actions per micro-batch and chunk at most (F, B, W and four messages) */
                st->cap = st->cap ? 2 * st->cap : 7 * s->nmicro * s->nchunks;
                st->a = dt_realloc(st->a, (size_t)st->cap * sizeof *st->a);
        }
        int compute = kind == DT_ACT_FORWARD || kind == DT_ACT_BACKWARD_INPUT ||
                      kind == DT_ACT_BACKWARD_WEIGHT;
        st->a[st->n++] = (dt_action){ .kind = kind, .mb = mb, .peer = compute ? -1 : peer, .slot = -1,
                                      .chunk = chunk };
}

static int is_compute(dt_action_kind k)
{
        return k == DT_ACT_FORWARD || k == DT_ACT_BACKWARD_INPUT || k == DT_ACT_BACKWARD_WEIGHT;
}

int dt_schedule_assign_slots(dt_schedule *s, char *err, size_t errlen)
{
        int m = s->nmicro, v = s->nchunks;
        size_t mv = (size_t)m * (size_t)v;
        int *slot_of = dt_malloc(mv * sizeof *slot_of);       /* (chunk, mb) -> its slot, or -1 */
        char *taken = dt_malloc(mv);                          /* (chunk, slot) -> in use */
        int rc = 0;
        for (int i = 0; i < s->nstages && rc == 0; i++) {
                dt_stage_actions *st = &s->stage[i];
                for (size_t k = 0; k < mv; k++) slot_of[k] = -1;
                memset(taken, 0, mv);
                st->nslots = 0;
                for (int j = 0; j < st->n; j++) {
                        dt_action *a = &st->a[j];
                        char what[32];
                        dt_action_format(a, what, sizeof what);
                        if (a->mb < 0 || a->mb >= m || a->chunk < 0 || a->chunk >= v) {
                                if (a->mb < 0 || a->mb >= m)
                                        snprintf(err, errlen, "stage %d, action %d (%s): micro-batch out of 0..%d",
                                                 i, j, what, m - 1);
                                else
                                        snprintf(err, errlen, "stage %d, action %d (%s): chunk out of 0..%d",
                                                 i, j, what, v - 1);
                                rc = -1;
                                break;
                        }
                        if (!is_compute(a->kind)) continue;
                        int *so = slot_of + (size_t)a->chunk * m;
                        char *tk = taken + (size_t)a->chunk * m;
                        if (a->kind == DT_ACT_FORWARD) {
                                if (so[a->mb] >= 0) {
                                        snprintf(err, errlen, "stage %d, action %d (%s): micro-batch %d "
                                                 "is already in flight there", i, j, what, a->mb);
                                        rc = -1;
                                        break;
                                }
                                int k = 0;
                                while (tk[k]) k++;      /* a free slot exists: at most m in flight */
                                tk[k] = 1;
                                so[a->mb] = k;
                                st->nslots = DT_MAX(st->nslots, k + 1);
                        }
                        a->slot = so[a->mb];
                        if (a->slot < 0) {
                                snprintf(err, errlen, "stage %d, action %d (%s): micro-batch %d has no "
                                         "forward in flight there", i, j, what, a->mb);
                                rc = -1;
                                break;
                        }
                        if (a->kind == DT_ACT_BACKWARD_WEIGHT) {
                                tk[a->slot] = 0;
                                so[a->mb] = -1;
                        }
                }
        }
        free(slot_of);
        free(taken);
        return rc;
}

/* ---- virtual stages ---- */

int dt_schedule_vstage(dt_schedule_kind kind, int nstages, int nchunks, int stage, int chunk)
{
        DT_ASSERT(stage >= 0 && stage < nstages && chunk >= 0 && chunk < nchunks);
        if (dt_schedule_is_v(kind)) return chunk == 0 ? stage : 2 * nstages - 1 - stage;
        return chunk * nstages + stage;
}

void dt_schedule_place(dt_schedule_kind kind, int nstages, int nchunks, int vs, int *stage, int *chunk)
{
        DT_ASSERT(vs >= 0 && vs < nstages * nchunks);
        if (dt_schedule_is_v(kind)) {
                *chunk = vs >= nstages;
                *stage = *chunk ? 2 * nstages - 1 - vs : vs;
                return;
        }
        *chunk = vs / nstages;
        *stage = vs % nstages;
}

int dt_schedule_is_v(dt_schedule_kind kind)
{
        return kind == DT_SCHEDULE_ZB_V || kind == DT_SCHEDULE_V_HALF;
}

int dt_schedule_chunks_ok(dt_schedule_kind kind, int nchunks, char *err, size_t errlen)
{
        int lo = 1, hi = 1;
        if (dt_schedule_is_v(kind)) lo = hi = 2;
        else if (kind == DT_SCHEDULE_INTERLEAVED) lo = 2, hi = DT_SCHEDULE_MAX_CHUNKS;
        if (nchunks >= lo && nchunks <= hi) return 1;
        if (lo == hi)
                snprintf(err, errlen, "schedule %s runs %d chunk%s per stage, got %d", dt_schedule_kind_name(kind),
                         lo, lo == 1 ? "" : "s", nchunks);
        else
                snprintf(err, errlen, "schedule %s runs %d to %d chunks per stage, got %d",
                         dt_schedule_kind_name(kind), lo, hi, nchunks);
        return 0;
}

/* ---- builders ---- */

/* The stage holding the virtual stage next to chunk's on side (+1 after, -1 before), or -1 at the
 * ends of the model. */
static int neighbour(const dt_schedule *s, int st, int chunk, int side)
{
        int S = s->nstages * s->nchunks, vs = dt_schedule_vstage(s->kind, s->nstages, s->nchunks, st, chunk) + side;
        if (vs < 0 || vs >= S) return -1;
        int ns, nc;
        dt_schedule_place(s->kind, s->nstages, s->nchunks, vs, &ns, &nc);
        return ns;
}

/* F(mb) of a chunk with its messages: the input from the virtual stage before, the output to the
 * one after. */
static void forward_c(dt_schedule *s, int st, int c, int mb)
{
        int prev = neighbour(s, st, c, -1), next = neighbour(s, st, c, +1);
        if (prev >= 0) dt_schedule_add_chunk(s, st, c, DT_ACT_RECV_ACT, mb, prev);
        dt_schedule_add_chunk(s, st, c, DT_ACT_FORWARD, mb, -1);
        if (next >= 0) dt_schedule_add_chunk(s, st, c, DT_ACT_SEND_ACT, mb, next);
}

/* B(mb) of a chunk: the output gradient from the virtual stage after; with with_w, W(mb) at once
 * and the input gradient sent after both (a combined backward), else sent right after B. */
static void backward_c(dt_schedule *s, int st, int c, int mb, int with_w)
{
        int prev = neighbour(s, st, c, -1), next = neighbour(s, st, c, +1);
        if (next >= 0) dt_schedule_add_chunk(s, st, c, DT_ACT_RECV_GRAD, mb, next);
        dt_schedule_add_chunk(s, st, c, DT_ACT_BACKWARD_INPUT, mb, -1);
        if (with_w) dt_schedule_add_chunk(s, st, c, DT_ACT_BACKWARD_WEIGHT, mb, -1);
        if (prev >= 0) dt_schedule_add_chunk(s, st, c, DT_ACT_SEND_GRAD, mb, prev);
}

static void forward(dt_schedule *s, int st, int mb) { forward_c(s, st, 0, mb); }
static void backward(dt_schedule *s, int st, int mb, int with_w) { backward_c(s, st, 0, mb, with_w); }

static void build_gpipe(dt_schedule *s, int st)
{
        for (int mb = 0; mb < s->nmicro; mb++) forward(s, st, mb);
        /* the last micro-batch's output gradient is the first one the last stage can make */
        for (int mb = s->nmicro - 1; mb >= 0; mb--) backward(s, st, mb, 1);
}

/* Megatron's warm-up: enough forwards that the first backward's gradient is on its way back
 * when this stage needs it, and no more (each one is a slot held). */
static int warmup(const dt_schedule *s, int st)
{
        return DT_MIN(s->nstages - st - 1, s->nmicro);
}

static void build_1f1b(dt_schedule *s, int st)
{
        int m = s->nmicro, w = warmup(s, st);
        for (int mb = 0; mb < w; mb++) forward(s, st, mb);
        for (int i = 0; i < m - w; i++) {
                forward(s, st, w + i);
                backward(s, st, i, 1);
        }
        for (int i = m - w; i < m; i++) backward(s, st, i, 1);
}

/* zb-h1: 1f1b's F and B order, B alone (its gradient leaves at once, so the stage before starts
 * its B one W earlier than under 1f1b), and W run only while more than st are waiting. Stage st
 * thus lags st W's behind: the last stage, whose B's the whole pipeline waits on, defers the most,
 * and the deferred W's run at the end, where 1f1b leaves stage st idle for st backwards while
 * the stages before it finish theirs. In-flight micro-batches (F done, W not) reach min(m, p) on
 * every stage: stage 0's figure under 1f1b, the paper's "same peak memory". */
static void build_zb_h1(dt_schedule *s, int st)
{
        int m = s->nmicro, w = warmup(s, st);
        int nextw = 0;          /* W's run in micro-batch order; those of nextw..b-1 wait */
        for (int mb = 0; mb < w; mb++) forward(s, st, mb);
        for (int i = 0; i < m; i++) {
                if (i < m - w) forward(s, st, w + i);
                backward(s, st, i, 0);
                if (i + 1 - nextw > st) dt_schedule_add(s, st, DT_ACT_BACKWARD_WEIGHT, nextw++, -1);
        }
        while (nextw < m) dt_schedule_add(s, st, DT_ACT_BACKWARD_WEIGHT, nextw++, -1);
}

/* Interleaved: the k-th forward (or backward) of a stage in Megatron's order, over m' micro-batches
 * (m rounded up to a multiple of p): the micro-batches in groups of p, within a group every chunk
 * in turn (forwards from chunk 0, backwards from the last), within a chunk the group's p. */
static void interleaved_item(const dt_schedule *s, int k, int backward, int *chunk, int *mb)
{
        int p = s->nstages, v = s->nchunks, in = k % (p * v);
        *chunk = in / p;
        *mb = k / (p * v) * p + in % p;
        if (backward) *chunk = v - 1 - *chunk;
}

/* One step of the interleaved order: a micro-batch past m (the padding) is left out on every
 * stage alike, which keeps the padded order's execution, less its phantom actions, so it cannot
 * deadlock where the padded one does not. */
static void interleaved_do(dt_schedule *s, int st, int k, int backward)
{
        int c, mb;
        interleaved_item(s, k, backward, &c, &mb);
        if (mb >= s->nmicro) return;
        if (backward) backward_c(s, st, c, mb, 1);
        else forward_c(s, st, c, mb);
}

static void build_interleaved(dt_schedule *s, int st)
{
        int p = s->nstages, v = s->nchunks, mp = (s->nmicro + p - 1) / p * p, total = v * mp;
        /* Megatron's warm-up: the first backward's gradient needs the forward to go down the
         * remaining p - st - 1 stages and the gradient back up (2 (p - st - 1)) through all but
         * the last round of chunks ((v - 1) p); with one group all forwards come first */
        int w = mp == p ? total : DT_MIN(total, 2 * (p - st - 1) + (v - 1) * p);
        for (int k = 0; k < w; k++) interleaved_do(s, st, k, 0);
        for (int k = 0; k < total - w; k++) {
                interleaved_do(s, st, w + k, 0);
                interleaved_do(s, st, k, 1);
        }
        for (int k = total - w; k < total; k++) interleaved_do(s, st, k, 1);
}

/* A W of a chunk alone (zb-v). */
static void weight_c(dt_schedule *s, int st, int c, int mb)
{
        dt_schedule_add_chunk(s, st, c, DT_ACT_BACKWARD_WEIGHT, mb, -1);
}

/* ZB-V in PyTorch's ScheduleZBVZeroBubble order, each count bounded so that any m runs: chunk 0's
 * forwards fill the V's descent (2 (p - st) - 1 of them), then the chunks' forwards alternate while
 * the turn comes back, then F B W on chunk 1 while the first gradients arrive; the steady state
 * runs F0 B0 W0 F1 B1 W1; the cool-down runs st pairs of B's, then B0 W0, then the W's left. Each
 * chunk's W's go in micro-batch order, so every layer's weight gradient adds up as 1f1b's. */
static void build_zb_v(dt_schedule *s, int st)
{
        int p = s->nstages, m = s->nmicro;
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0, w1;
        for (int k = 0; k < 2 * (p - st) - 1 && f0 < m; k++) forward_c(s, st, 0, f0++);
        for (int k = 0; k < st; k++) {
                if (f1 < f0) forward_c(s, st, 1, f1++);
                if (f0 < m) forward_c(s, st, 0, f0++);
        }
        for (int k = 0; k < p - st && f1 < f0; k++) {
                forward_c(s, st, 1, f1++);
                backward_c(s, st, 1, b1, 0);
                weight_c(s, st, 1, b1++);
        }
        while (f1 < f0 || f0 < m) {
                if (f0 < m) forward_c(s, st, 0, f0++);
                if (b0 < b1) {
                        backward_c(s, st, 0, b0, 0);
                        weight_c(s, st, 0, b0++);
                }
                if (f1 < f0) forward_c(s, st, 1, f1++);
                if (b1 < f1) {
                        backward_c(s, st, 1, b1, 0);
                        weight_c(s, st, 1, b1++);
                }
        }
        w0 = b0, w1 = b1;
        /* a micro-batch's chunk-1 B comes before its chunk-0 B on every stage (the gradient runs
         * up the V's second arm first), which only a short step (m < p) could get wrong here */
        for (int k = 0; k < st; k++) {
                if (b0 < b1) backward_c(s, st, 0, b0++, 0);
                if (b1 < m) backward_c(s, st, 1, b1++, 0);
        }
        while (b1 < m) backward_c(s, st, 1, b1++, 0);
        for (int k = 0; k < p - st; k++) {
                if (b0 < m) backward_c(s, st, 0, b0++, 0);
                if (w0 < b0) weight_c(s, st, 0, w0++);
        }
        while (b0 < m) backward_c(s, st, 0, b0++, 0);
        while (w1 < m) weight_c(s, st, 1, w1++);
        while (w0 < m) weight_c(s, st, 0, w0++);
}

/* V-Half: stage st's part of the order schedule_vhalf.c played for every stage, each step with its
 * messages (B alone, its gradient sent at once, as zb-v's). */
static void build_v_half(dt_schedule *s, int st, const dt_vhalf_step *order)
{
        const dt_vhalf_step *o = order + (size_t)st * 6 * s->nmicro;
        for (int k = 0; k < 6 * s->nmicro; k++) {
                if (o[k].kind == DT_ACT_FORWARD) forward_c(s, st, o[k].chunk, o[k].mb);
                else if (o[k].kind == DT_ACT_BACKWARD_INPUT) backward_c(s, st, o[k].chunk, o[k].mb, 0);
                else weight_c(s, st, o[k].chunk, o[k].mb);
        }
}

int dt_schedule_build(dt_schedule *s, dt_schedule_kind kind, int nstages, int nmicro,
                      char *err, size_t errlen)
{
        return dt_schedule_build_v(s, kind, nstages, 1, nmicro, err, errlen);
}

int dt_schedule_build_v(dt_schedule *s, dt_schedule_kind kind, int nstages, int nchunks, int nmicro,
                        char *err, size_t errlen)
{
        memset(s, 0, sizeof *s);
        if ((int)kind < 0 || (int)kind >= NKINDS) {
                snprintf(err, errlen, "unknown pipeline schedule %d", (int)kind);
                return -1;
        }
        if (nstages < 1 || nstages > DT_SCHEDULE_MAX_STAGES) {
                snprintf(err, errlen, "pipeline stages must be 1 to %d, got %d", DT_SCHEDULE_MAX_STAGES,
                         nstages);
                return -1;
        }
        if (nmicro < 1 || nmicro > DT_SCHEDULE_MAX_MICRO) {
                snprintf(err, errlen, "pipeline micro-batches must be 1 to %d, got %d",
                         DT_SCHEDULE_MAX_MICRO, nmicro);
                return -1;
        }
        if (!dt_schedule_chunks_ok(kind, nchunks, err, errlen)) return -1;
        if (nstages * nchunks > DT_SCHEDULE_MAX_STAGES) {
                snprintf(err, errlen, "pipeline stages x chunks must be at most %d, got %d x %d",
                         DT_SCHEDULE_MAX_STAGES, nstages, nchunks);
                return -1;
        }
        dt_schedule_init(s, kind, nstages, nmicro);
        s->nchunks = nchunks;
        dt_vhalf_step *order = NULL;
        if (kind == DT_SCHEDULE_V_HALF) {
                order = dt_malloc((size_t)nstages * 6 * nmicro * sizeof *order);
                dt_schedule_vhalf_order(nstages, nmicro, order);
        }
        for (int st = 0; st < nstages; st++) {
                switch (kind) {
                case DT_SCHEDULE_GPIPE: build_gpipe(s, st); break;
                case DT_SCHEDULE_1F1B: build_1f1b(s, st); break;
                case DT_SCHEDULE_ZB_H1: build_zb_h1(s, st); break;
                case DT_SCHEDULE_INTERLEAVED: build_interleaved(s, st); break;
                case DT_SCHEDULE_ZB_V: build_zb_v(s, st); break;
                case DT_SCHEDULE_V_HALF: build_v_half(s, st, order); break;
                }
        }
        free(order);
        /* the builders above only make valid lists: a failure here is our bug */
        char why[256];
        if (dt_schedule_assign_slots(s, why, sizeof why) != 0) {
                fprintf(stderr, "dtrain: schedule %s p=%d m=%d: %s\n", dt_schedule_kind_name(kind),
                        nstages, nmicro, why);
                DT_ASSERT(!"schedule builder made an invalid list");
        }
        return 0;
}

/* ---- reading ---- */

void dt_action_format(const dt_action *a, char *buf, size_t len)
{
        static const char *const tok[] = {
                [DT_ACT_FORWARD] = "F", [DT_ACT_BACKWARD_INPUT] = "B", [DT_ACT_BACKWARD_WEIGHT] = "W",
                [DT_ACT_SEND_ACT] = "sa", [DT_ACT_RECV_ACT] = "ra",
                [DT_ACT_SEND_GRAD] = "sg", [DT_ACT_RECV_GRAD] = "rg",
        };
        int known = (int)a->kind >= 0 && (int)a->kind < (int)(sizeof tok / sizeof tok[0]);
        if (a->chunk > 0) snprintf(buf, len, "%s%d.%d", known ? tok[a->kind] : "?", a->mb, a->chunk);
        else snprintf(buf, len, "%s%d", known ? tok[a->kind] : "?", a->mb);
}

void dt_schedule_print(const dt_schedule *s, FILE *f, int with_comm)
{
        int width = s->nstages > 10 ? 2 : 1;
        for (int i = 0; i < s->nstages; i++) {
                const dt_stage_actions *st = &s->stage[i];
                fprintf(f, "stage %*d:", width, i);
                for (int j = 0; j < st->n; j++) {
                        if (!with_comm && !is_compute(st->a[j].kind)) continue;
                        char tok[32];
                        dt_action_format(&st->a[j], tok, sizeof tok);
                        fprintf(f, " %s", tok);
                }
                fputc('\n', f);
        }
}
